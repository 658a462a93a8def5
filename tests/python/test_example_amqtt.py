"""examples/amqtt_topicmatch: amqtt 0.12.1 routed by topicmatch delivers what stock amqtt does.

Two parts. In process, with no network: the indexes against amqtt's own scan (`Broker._matches`
over the dict, in the dict's order) on random filters, topics and dict operations, including
strings topicmatch refuses and `$share` filters, which amqtt 0.12.1 takes literally. Over
loopback: stock amqtt and `TopicmatchBroker`, each in an asyncio loop of its own thread on a
free port, run one scenario with real paho-mqtt clients (a table of filter/topic facts:
wildcards, `$` topics, `$share`, retained messages on subscribe, unsubscribe, a clean session
that disconnects, a persistent session that queues and is then cleaned), and each client must
get the same messages from both (topic, payload, QoS, retain flag, and count).

Deliveries are known complete by sentinels, not sleeps: every client subscribes to
`sync/<its id>` and `sync/all`; a client that gets back a sentinel it published knows the broker
has finished its earlier packets (amqtt handles a client's packets in order, and answers a
SUBSCRIBE's retained messages before the next packet), and every client that gets the
publisher's `sync/all` sentinel has had every earlier broadcast (one queue, delivered in order).
"""

from __future__ import annotations

import asyncio
import collections
import copy
import importlib
import itertools
import logging
import sys
import threading
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

mqtt = pytest.importorskip("paho.mqtt.client", reason="needs the bench extra (paho-mqtt)")
Broker = pytest.importorskip("amqtt.broker", reason="needs the bench extra (amqtt)").Broker

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "amqtt_topicmatch"
sys.path.append(str(EXAMPLE))
tb = importlib.import_module("topicmatch_broker")

pytestmark = pytest.mark.timeout(120)

WAIT = 10.0  # seconds: the bound on every wait for the network

# --------------------------------------------------------------------------------------------
# In process: the indexes answer what amqtt's scan answers


def stock_matches(topic, a_filter):
    """amqtt 0.12.1's `Broker._matches`, unbound (it uses `self` only to log)."""
    return Broker._matches(_LOGGER_ONLY, topic, a_filter)


class _LoggerOnly:
    logger = logging.getLogger("test_example_amqtt")


_LOGGER_ONLY = _LoggerOnly()

LEVELS = ["a", "b", "", "$SYS", "$s", "$share", "g", "+", "#", "a+", "x\0"]


@st.composite
def strings(draw):
    """Filters and topics alike, valid or not: amqtt's scan is the judge of both."""
    return "/".join(draw(st.lists(st.sampled_from(LEVELS), max_size=5)))


OPS = st.one_of(
    st.tuples(st.just("set"), strings(), st.integers(0, 3)),
    st.tuples(st.just("del"), strings()),
    st.tuples(st.just("pop"), strings()),
    st.tuples(st.just("setdefault"), strings(), st.integers(0, 3)),
    st.tuples(st.just("update"), st.lists(st.tuples(strings(), st.integers(0, 3)), max_size=3)),
    st.tuples(st.just("popitem")),
    st.tuples(st.just("clear")),
)


def apply(d, op):
    match op:
        case ("set", k, v):
            d[k] = v
        case ("del", k):
            if k in d:
                del d[k]
        case ("pop", k):
            d.pop(k, None)
        case ("setdefault", k, v):
            d.setdefault(k, v)
        case ("update", pairs):
            d.update(pairs)
        case ("popitem",):
            if d:
                d.popitem()
        case ("clear",):
            d.clear()


@settings(max_examples=300, deadline=None)
@given(st.lists(OPS, max_size=30), st.lists(strings(), min_size=1, max_size=8))
def test_subscription_index_is_the_scan(ops, topics):
    plain: dict = {}
    indexed = tb.SubscriptionIndex()
    for op in ops:
        apply(plain, op)
        apply(indexed, op)
    assert list(indexed.items()) == list(plain.items())
    indexed.check()
    for t in topics:
        want = [(f, s) for f, s in plain.items() if stock_matches(t, f)]
        assert indexed.matching(t, stock_matches) == want, t


@settings(max_examples=300, deadline=None)
@given(st.lists(OPS, max_size=30), st.lists(strings(), min_size=1, max_size=8))
def test_retained_index_is_the_scan(ops, filters):
    plain: dict = {}
    indexed = tb.RetainedIndex()
    for op in ops:
        apply(plain, op)
        apply(indexed, op)
    assert list(indexed.items()) == list(plain.items())
    indexed.check()
    for f in filters:
        want = [(t, m) for t, m in plain.items() if stock_matches(t, f)]
        assert indexed.matching(f, stock_matches) == want, f


def test_share_filters_are_literal_as_in_amqtt():
    d = tb.SubscriptionIndex({"$share/g/jobs/+": [], "jobs/+": [], "$share/#": [], "#": []})
    assert [f for f, _ in d.matching("jobs/1", stock_matches)] == ["jobs/+", "#"]
    got = [f for f, _ in d.matching("$share/g/jobs/1", stock_matches)]
    assert got == ["$share/g/jobs/+", "$share/#"]
    assert [f for f, _ in d.matching("$share", stock_matches)] == ["$share/#"]


def new_broker(cls):
    loop = asyncio.new_event_loop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return cls({"plugins": {}}, loop=loop), loop


def test_every_dict_the_broker_is_given_is_indexed():
    broker, loop = new_broker(tb.TopicmatchBroker)
    assert isinstance(broker._subscriptions, tb.SubscriptionIndex)
    assert isinstance(broker._retained_messages, tb.RetainedIndex)
    broker._subscriptions = {"a/+": [], "#": []}  # as Broker.__init__ and anyone else may
    broker._retained_messages = {"a/b": "m"}
    assert broker.subscriptions is broker._subscriptions  # what plugins see through the context
    assert [f for f, _ in broker.matching_subscriptions("a/b")] == ["a/+", "#"]
    assert broker.matching_retained("a/#") == [("a/b", "m")]
    broker.check_indexes()
    loop.close()


class _Session:
    def __init__(self, client_id):
        self.client_id, self.clean_session, self.is_anonymous = client_id, True, True
        self.transitions = type("State", (), {"state": "disconnected"})()


@pytest.mark.parametrize("cls", [Broker, tb.TopicmatchBroker], ids=["stock", "topicmatch"])
def test_a_subscription_during_a_broadcast(cls):
    """The one difference: a topic filtering plugin that awaits lets a SUBSCRIBE in while a
    message is being routed. Stock amqtt iterates the live dict and stops with RuntimeError,
    the rest of that message's deliveries undone; TopicmatchBroker chose its filters first."""
    broker, loop = new_broker(cls)
    asked = []

    async def topic_filtering(session, topic, action):
        asked.append(session.client_id)
        await asyncio.sleep(0)
        broker._subscriptions.setdefault(f"new/{len(asked)}", []).append((_Session("n"), 0))
        return True

    broker._topic_filtering = topic_filtering
    broker._subscriptions["a/+"] = [(_Session("c0"), 0), (_Session("c1"), 0)]
    broker._subscriptions["#"] = [(_Session("c2"), 0)]

    async def route():
        await broker._broadcast_queue.put({"session": None, "topic": "a/b", "data": b"x"})
        await broker._run_broadcast(collections.deque())

    if cls is Broker:
        with pytest.raises(RuntimeError, match="dictionary changed size during iteration"):
            loop.run_until_complete(route())
        assert asked == ["c0", "c1"]
    else:
        loop.run_until_complete(route())
        assert asked == ["c0", "c1", "c2"]
        broker.check_indexes()
    loop.close()


def test_another_amqtt_version_is_refused(monkeypatch):
    import amqtt

    monkeypatch.setattr(amqtt, "__version__", "0.12.2")
    monkeypatch.delitem(sys.modules, "topicmatch_broker")
    with pytest.raises(ImportError, match=r"amqtt 0\.12\.1.*0\.12\.2 is installed"):
        importlib.import_module("topicmatch_broker")
    monkeypatch.undo()
    assert sys.modules["topicmatch_broker"] is tb


# --------------------------------------------------------------------------------------------
# Over loopback: both brokers, real clients


class BrokerThread:
    """One broker in an asyncio loop of its own thread, on 127.0.0.1 and a free port."""

    CONFIG = {
        "listeners": {"default": {"type": "tcp", "bind": "127.0.0.1:0"}},
        # Not anonymous: sessions with clean_session=False then keep their subscriptions and
        # queue QoS 1 messages while disconnected (amqtt drops both for anonymous sessions).
        "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": False}},
    }

    def __init__(self, cls):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def start():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                broker = cls(copy.deepcopy(self.CONFIG))
            await broker.start()
            return broker

        self.broker = self.run(start())
        self.port = self.broker._servers["default"].instance.sockets[0].getsockname()[1]

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT)

    def call(self, fn, *args):
        """`fn(*args)` on the broker's loop, so that it sees no half-made change."""

        async def go():
            return fn(*args)

        return self.run(go())

    def wait_until(self, predicate, what):
        deadline = time.monotonic() + WAIT
        while not self.call(predicate):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.02)

    def close(self):
        try:
            self.run(self.broker.shutdown())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(WAIT)
            self.loop.close()


class Client:
    """A paho-mqtt client that records what it gets and waits for acks with a bound."""

    def __init__(self, port, client_id, clean=True):
        self.id = client_id
        self.got: list[tuple[str, bytes, int, bool]] = []
        self.acks: dict[int, object] = {}
        self.cond = threading.Condition()
        self.connected = False
        self.c = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=client_id,
            clean_session=clean,
            protocol=mqtt.MQTTv311,
        )
        self.c.username_pw_set(f"user-{client_id}")
        self.c.on_connect = self._on_connect
        self.c.on_message = self._on_message
        self.c.on_subscribe = self._on_ack
        self.c.on_unsubscribe = self._on_ack
        self.c.connect("127.0.0.1", port, keepalive=60)
        self.c.loop_start()
        self._wait(lambda: self.connected, "CONNACK")
        self.subscribe("sync/all", f"sync/{client_id}")

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        with self.cond:
            assert not reason_code.is_failure, reason_code
            self.connected = True
            self.cond.notify_all()

    def _on_message(self, client, userdata, msg):
        with self.cond:
            self.got.append((msg.topic, msg.payload, msg.qos, bool(msg.retain)))
            self.cond.notify_all()

    def _on_ack(self, client, userdata, mid, reason_codes, properties):
        with self.cond:
            self.acks[mid] = reason_codes
            self.cond.notify_all()

    def _wait(self, predicate, what):
        with self.cond:
            assert self.cond.wait_for(predicate, WAIT), f"{self.id}: timed out waiting for {what}"

    def subscribe(self, *filters, qos=0):
        """Subscribes and waits for the SUBACK, which must grant every filter."""
        rc, mid = self.c.subscribe([(f, qos) for f in filters])
        assert rc == mqtt.MQTT_ERR_SUCCESS
        self._wait(lambda: mid in self.acks, f"SUBACK of {filters}")
        assert not any(code.is_failure for code in self.acks[mid]), (filters, self.acks[mid])

    def unsubscribe(self, *filters):
        rc, mid = self.c.unsubscribe(list(filters))
        assert rc == mqtt.MQTT_ERR_SUCCESS
        self._wait(lambda: mid in self.acks, f"UNSUBACK of {filters}")

    def publish(self, topic, payload, qos=0, retain=False):
        self.c.publish(topic, payload, qos=qos, retain=retain).wait_for_publish(WAIT)

    def has(self, topic, payload):
        return any(m[0] == topic and m[1] == payload for m in self.got)

    def wait_for(self, topic, payload):
        self._wait(lambda: self.has(topic, payload), f"{topic} {payload!r}")

    def roundtrip(self):
        """Returns once the broker has handled every packet this client sent before."""
        token = next(_TOKENS)
        self.publish(f"sync/{self.id}", token)
        self.wait_for(f"sync/{self.id}", token)

    def messages(self):
        """What it got, sentinels aside."""
        with self.cond:
            return [m for m in self.got if not m[0].startswith("sync/")]

    def disconnect(self):
        if self.connected:
            self.connected = False
            self.c.disconnect()
            self.c.loop_stop()


_TOKENS = (f"t{i}".encode() for i in itertools.count())


def barrier(publisher, clients):
    """Returns once every client has had every broadcast queued before this call."""
    token = next(_TOKENS)
    publisher.publish("sync/all", token)
    for c in clients:
        c.wait_for("sync/all", token)


# (filter, topic, whether amqtt 0.12.1 delivers): the facts the scenario checks
FACTS = [
    ("sensors/+/temp", "sensors/1/temp", True),
    ("sensors/+/temp", "sensors/1/hum", False),
    ("sensors/+/temp", "sensors/1/2/temp", False),
    ("sensors/#", "sensors", True),  # '#' takes its parent level
    ("sensors/#", "sensors/1/2/temp", True),
    ("#", "sensors/1/temp", True),
    ("#", "$SYS/broker/load", False),  # MQTT-4.7.2-1: no '$' topic for a first-level '#'
    ("+/broker/load", "$SYS/broker/load", False),  # nor for a first-level '+'
    ("$SYS/#", "$SYS/broker/load", True),
    ("$SYS/+/load", "$SYS/broker/load", True),
    ("+/+/+/+/+/+", "a/b/c/d/e/f", True),
    ("+/+/+/+/+/+", "a/b/c/d/e", False),
    ("a/b/c/d/e/#", "a/b/c/d/e", True),
    ("a/+/b", "a//b", True),  # '+' takes an empty level
    ("+", "/x", False),
    ("/+", "/x", True),
    ("exact/topic", "exact/topic", True),
    ("exact/topic", "exact/topic/x", False),
    ("jobs/+", "jobs/1", True),
    ("$share/g/jobs/+", "jobs/1", False),  # amqtt 0.12.1 has no shared subscriptions...
    ("$share/g/jobs/+", "$share/g/jobs/1", True),  # ...'$share/...' is a literal filter
    ("unsub/+", "unsub/1", True),
    ("leaver/+", "leaver/1", True),
]
FILTERS = list(dict.fromkeys(f for f, _, _ in FACTS))
TOPICS = list(dict.fromkeys(t for _, t, _ in FACTS))
RETAINED = ["retained/a/1", "retained/a/2", "retained/b", "retained/gone"]
RETAINED_FILTERS = ["retained/+/1", "retained/#", "retained/gone"]


def test_the_facts_are_amqtts():
    for f, t, delivered in FACTS:
        assert stock_matches(t, f) is delivered, (f, t)


def publish_all(bt, publisher, phase, topics):
    """Every topic once: by MQTT from the publisher, then, for '$' topics (which amqtt refuses
    from clients), as the broker's own plugins publish them (`$SYS`). The round trip between
    puts the publisher's messages in the broadcast queue before the broker's own."""
    for t in topics:
        if not t.startswith("$"):
            publisher.publish(t, f"{phase}:{t}".encode())
    publisher.roundtrip()
    for t in topics:
        if t.startswith("$"):
            bt.run(bt.broker.internal_message_broadcast(t, f"{phase}:{t}".encode()))


def scenario(bt: BrokerThread):
    """The same clients and steps on one broker; returns what each client got, and checks the
    broker's state (and, on TopicmatchBroker, its indexes) on the way."""
    port = bt.port
    check = getattr(bt.broker, "check_indexes", lambda: None)
    clients: dict[str, Client] = {}
    try:
        # Every client connects first: amqtt sends a client that connects the retained
        # messages of every filter of the broker (anyone's, at QoS 0), so connecting before
        # anything is retained keeps what each gets down to the table's.
        pub = clients["pub"] = Client(port, "pub")
        for i in range(len(FILTERS)):
            clients[f"f{i}"] = Client(port, f"f{i}")
        for i in range(len(RETAINED_FILTERS)):
            clients[f"r{i}"] = Client(port, f"r{i}")
        dup = clients["dup"] = Client(port, "dup")
        persist = clients["persist"] = Client(port, "persist", clean=False)

        # retained messages: one cleared by an empty retained payload (MQTT-3.3.1-10), and a
        # '$' topic retained as amqtt's $SYS plugin retains one
        for t in RETAINED:
            pub.publish(t, f"retained:{t}".encode(), retain=True)
        pub.publish("retained/gone", b"", retain=True)
        bt.run(bt.broker.retain_message(None, "$SYS/retained/x", b"retained:$SYS", 0))
        pub.roundtrip()
        assert bt.call(lambda: sorted(bt.broker.retained_messages)) == sorted(
            ["retained/a/1", "retained/a/2", "retained/b", "$SYS/retained/x"]
        )

        # one client per filter of the table, and three for retained messages on subscribe
        for i, f in enumerate(FILTERS):
            clients[f"f{i}"].subscribe(f)
        for i, f in enumerate(RETAINED_FILTERS):
            clients[f"r{i}"].subscribe(f)
        clients["f0"].subscribe("retained/#")
        # overlapping filters: a copy per subscription, at its QoS
        dup.subscribe("sensors/+/temp", "sensors/#")
        dup.subscribe("sensors/1/temp", "$SYS/#", qos=1)
        # a persistent session (clean_session=False) with a QoS 1 subscription
        persist.subscribe("persist/+", qos=1)
        for c in clients.values():
            c.roundtrip()  # the retained messages of its subscriptions are all out
        bt.call(check)

        listening = [c for k, c in clients.items() if k != "pub"]
        publish_all(bt, pub, "p1", TOPICS)
        barrier(pub, listening)

        # unsubscribe: 'unsub/+' goes, its client gets no more 'unsub/1'
        unsub = clients[f"f{FILTERS.index('unsub/+')}"]
        unsub.unsubscribe("unsub/+")
        dup.unsubscribe("sensors/#")
        bt.call(check)
        publish_all(bt, pub, "p2", TOPICS)
        barrier(pub, listening)

        # a clean session disconnects: the session monitor drops it and its subscriptions
        leaver = clients[f"f{FILTERS.index('leaver/+')}"]
        leaver.disconnect()
        listening.remove(leaver)
        bt.wait_until(lambda: leaver.id not in bt.broker.sessions, "the leaver's session to go")
        assert bt.call(lambda: "leaver/+" not in bt.broker.subscriptions)
        bt.call(check)

        # the persistent session disconnects: it keeps 'persist/+' and queues QoS 1 for it
        persist.disconnect()
        listening.remove(persist)
        bt.wait_until(
            lambda: bt.broker.sessions["persist"][0].transitions.state == "disconnected",
            "the persistent session to be disconnected",
        )
        publish_all(bt, pub, "p3", [*TOPICS, "persist/1"])
        barrier(pub, listening)
        assert bt.call(lambda: "persist/+" in bt.broker.subscriptions)

        # it comes back: the queued message, then (amqtt's way) the retained messages of every
        # filter of the broker at QoS 0; then live messages again
        back = clients["persist-back"] = Client(port, "persist", clean=False)
        back.roundtrip()
        pub.publish("persist/2", b"p4:persist/2")
        back.wait_for("persist/2", b"p4:persist/2")
        back.disconnect()
        bt.wait_until(
            lambda: bt.broker.sessions["persist"][0].transitions.state == "disconnected",
            "the persistent session to be disconnected again",
        )
        # and comes back clean: CONNECT with clean_session deletes the old session's filters
        fresh = clients["persist-clean"] = Client(port, "persist", clean=True)
        assert bt.call(lambda: "persist/+" not in bt.broker.subscriptions)
        bt.call(check)
        listening.append(fresh)
        publish_all(bt, pub, "p5", ["persist/3", "leaver/1", "sensors/1/temp"])
        barrier(pub, listening)
        bt.call(check)
        return {k: c.messages() for k, c in clients.items()}
    finally:
        for c in clients.values():
            c.disconnect()


@pytest.fixture(scope="module")
def deliveries():
    """What each client got from each broker, stock amqtt first."""
    out = {}
    for name, cls in (("stock", Broker), ("topicmatch", tb.TopicmatchBroker)):
        bt = BrokerThread(cls)
        try:
            out[name] = scenario(bt)
        finally:
            bt.close()
    return out


def test_both_brokers_deliver_the_same_messages(deliveries):
    stock, ours = deliveries["stock"], deliveries["topicmatch"]
    assert stock.keys() == ours.keys()
    for client in stock:
        assert Counter(ours[client]) == Counter(stock[client]), client
    # and in the same order, each client's messages of one broadcast at a time
    for client in stock:
        assert [m for m in ours[client] if not m[3]] == [m for m in stock[client] if not m[3]]


@pytest.mark.parametrize("broker", ["stock", "topicmatch"])
def test_the_table_of_facts_holds(deliveries, broker):
    got = deliveries[broker]
    for i, f in enumerate(FILTERS):
        live = Counter((t, p) for t, p, _, retain in got[f"f{i}"] if not retain)
        for phase in ("p1", "p2", "p3"):
            for t in TOPICS:
                gone = (f == "unsub/+" and phase != "p1") or (f == "leaver/+" and phase == "p3")
                want = int(stock_matches(t, f) and not gone)
                assert live[(t, f"{phase}:{t}".encode())] == want, (f, t, phase)


@pytest.mark.parametrize("broker", ["stock", "topicmatch"])
def test_retained_unsubscribed_and_persistent_deliveries(deliveries, broker):
    got = deliveries[broker]
    retained = {k: sorted(t for t, _, _, r in v if r) for k, v in got.items()}
    assert retained["r0"] == ["retained/a/1"]
    assert retained["r1"] == ["retained/a/1", "retained/a/2", "retained/b"]
    assert retained["r2"] == []  # cleared by an empty retained payload
    assert retained[f"f{FILTERS.index('$SYS/#')}"] == ["$SYS/retained/x"]
    # no '$' topic for '#'
    assert retained[f"f{FILTERS.index('#')}"] == ["retained/a/1", "retained/a/2", "retained/b"]
    assert retained["f0"] == ["retained/a/1", "retained/a/2", "retained/b"]
    # two matching subscriptions, two copies, each at its subscription's QoS
    dup = Counter((t, p, q) for t, p, q, r in got["dup"] if not r)
    assert dup[("sensors/1/temp", b"p1:sensors/1/temp", 0)] == 2  # 'sensors/+/temp', '#'
    assert dup[("sensors/1/temp", b"p1:sensors/1/temp", 1)] == 1  # 'sensors/1/temp'
    assert dup[("sensors/1/temp", b"p2:sensors/1/temp", 0)] == 1  # 'sensors/#' unsubscribed
    assert dup[("$SYS/broker/load", b"p1:$SYS/broker/load", 1)] == 1
    # the persistent session: the QoS 1 message queued while away, then the live one
    back = [(t, p, r) for t, p, _, r in got["persist-back"] if t.startswith("persist/")]
    assert back == [("persist/1", b"p3:persist/1", True), ("persist/2", b"p4:persist/2", False)]
    assert not any(t.startswith("persist/") for t, *_ in got["persist-clean"])
    assert got["persist"] == []
