"""Shared subscriptions (MQTT 5 `$share/`) and queue groups (`group=`) on every topic matcher:
against a model on random workloads in every dialect, load sharing, members that join and
leave between lookups and beside them on other threads, errors, pickling and snapshots."""

from __future__ import annotations

import pickle
import threading
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import patterns, topics

import topicmatch as tm

import reference
from conftest import TOPIC_MATCHERS

GROUPS = ["g", "h"]


def ops(dialect):
    subscriber = st.integers(0, 4)
    group = st.sampled_from(GROUPS)
    return st.lists(
        st.one_of(
            st.tuples(st.just("sub"), patterns(dialect), subscriber, st.none()),
            st.tuples(st.just("sub"), patterns(dialect), subscriber, group),
            st.tuples(st.just("unsub"), patterns(dialect), subscriber, st.none()),
            st.tuples(st.just("unsub"), patterns(dialect), subscriber, group),
            st.tuples(st.just("remove"), st.none(), subscriber, st.none()),
            st.tuples(st.just("lookup"), topics(dialect), st.none(), st.none()),
        ),
        max_size=60,
    )


class Model:
    """What the matcher should hold: plain pairs and each group's members."""

    def __init__(self, dialect):
        self.dialect = dialect
        self.plain: set[tuple[str, int]] = set()
        self.groups: dict[tuple[str, str], set[int]] = {}

    def lookup_groups(self, topic):
        hit = [s for p, s in self.plain if reference.matches(self.dialect, p, topic)]
        groups = sorted(
            (g, f, sorted(ms))
            for (g, f), ms in self.groups.items()
            if ms and reference.matches(self.dialect, f, topic)
        )
        return sorted(set(hit)), groups

    def __len__(self):
        return len(self.plain) + sum(len(ms) for ms in self.groups.values())


def normalised(answer):
    plain, groups = answer
    return sorted(plain), sorted((g, f, sorted(ms)) for g, f, ms in groups)


@pytest.mark.parametrize("cls", TOPIC_MATCHERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("dialect", tm.DIALECTS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_groups_agree_with_the_model(cls, dialect, data):
    m = cls(dialect)
    model = Model(dialect)
    for op, text, s, group in data.draw(ops(dialect)):
        if op == "sub":
            want = (
                (text, s) not in model.plain
                if group is None
                else s not in model.groups.get((group, text), set())
            )
            assert m.subscribe(text, s, group=group) is want
            if group is None:
                model.plain.add((text, s))
            else:
                model.groups.setdefault((group, text), set()).add(s)
        elif op == "unsub":
            if group is None:
                want = (text, s) in model.plain
                model.plain.discard((text, s))
            else:
                want = s in model.groups.get((group, text), set())
                model.groups.get((group, text), set()).discard(s)
            assert m.unsubscribe(text, s, group=group) is want
        elif op == "remove":
            before = len(model)
            model.plain = {(p, x) for p, x in model.plain if x != s}
            for ms in model.groups.values():
                ms.discard(s)
            assert m.remove_subscriber(s) == before - len(model)
        else:
            plain, groups = model.lookup_groups(text)
            assert normalised(m.lookup_groups(text)) == (plain, groups)
            got = m.lookup(text)
            assert len(set(got)) == len(got)
            assert set(got) >= set(plain)
            for extra in set(got) - set(plain):
                assert any(extra in ms for _, _, ms in groups)
            for _, _, ms in groups:
                assert set(got) & set(ms)
            assert m.has_interest(text) is bool(got)
        assert len(m) == len(model)
    assert sorted(m.subscriptions()) == sorted(model.plain)
    assert sorted(m.group_subscriptions()) == sorted(
        (g, f, s) for (g, f), ms in model.groups.items() for s in ms
    )


def test_members_share_the_load_evenly(matcher_cls):
    """MQTT 5 section 4.8.2: over 10,000 messages, each of 3 members gets a third."""
    m = matcher_cls("mqtt")
    for member in ("w1", "w2", "w3"):
        m.subscribe("$share/workers/jobs/+", member)
    m.subscribe("jobs/#", "audit")
    got = Counter()
    for i in range(10_000):
        got.update(m.lookup(f"jobs/{i % 13}"))
    assert got["audit"] == 10_000
    for member in ("w1", "w2", "w3"):
        assert abs(got[member] / 10_000 - 1 / 3) < 0.02, got


def test_members_joining_and_leaving_between_lookups_get_each_message_once(matcher_cls):
    m = matcher_cls("nats")
    members: set[str] = set()
    delivered = 0
    for step in range(2_000):
        if step % 7 == 0:
            who = f"c{step // 7 % 5}"
            if who in members:
                members.remove(who)
                assert m.unsubscribe("orders.>", who, group="q")
            else:
                members.add(who)
                assert m.subscribe("orders.>", who, group="q")
        got = m.lookup("orders.eu.1")
        if not members:
            assert got == []
            continue
        assert len(got) == 1 and got[0] in members
        delivered += 1
    assert delivered > 1_500


def test_lookups_beside_joins_and_leaves_deliver_to_one_member(matcher_cls):
    """Readers on other threads while members come and go: every lookup delivers to exactly
    one member of the group, which always has its stable member."""
    m = matcher_cls("mqtt")
    m.subscribe("$share/g/t/+", "stable")
    stop = threading.Event()
    errors = []

    def churn():
        for i in range(3_000):
            who = f"m{i % 3}"
            m.subscribe("$share/g/t/+", who)
            m.unsubscribe("$share/g/t/+", who)
        stop.set()

    def read():
        counts = Counter()
        while not stop.is_set():
            got = m.lookup("t/x")
            if len(got) != 1:
                errors.append(got)
            counts.update(got)
        return counts

    results = []
    readers = [threading.Thread(target=lambda: results.append(read())) for _ in range(2)]
    writer = threading.Thread(target=churn)
    for t in [*readers, writer]:
        t.start()
    for t in [writer, *readers]:
        t.join()
    assert errors == []
    assert m.group_subscriptions() == [("g", "t/+", "stable")]


def test_a_plain_subscriber_in_groups_appears_once(matcher_cls):
    m = matcher_cls("mqtt")
    m.subscribe("a/+", "c")
    m.subscribe("$share/g/a/#", "c")
    m.subscribe("$share/h/#", "c")
    assert m.lookup("a/b") == ["c"]
    plain, groups = m.lookup_groups("a/b")
    assert plain == ["c"]
    assert sorted(groups) == [("g", "a/#", ["c"]), ("h", "#", ["c"])]
    assert len(m) == 3
    assert m.remove_subscriber("c") == 3
    assert len(m) == 0 and not m.has_interest("a/b")


def test_share_and_group_are_one_subscription(matcher_cls):
    m = matcher_cls("mqtt")
    assert m.subscribe("$share/g/a/+", 1)
    assert not m.subscribe("a/+", 1, group="g")
    assert m.group_subscriptions() == [("g", "a/+", 1)]
    assert m.subscriptions() == []
    assert m.unsubscribe("a/+", 1, group="g")
    assert not m.unsubscribe("$share/g/a/+", 1)
    # In the other dialects `$share/` is an ordinary pattern.
    n = matcher_cls("amqp")
    n.subscribe("$share/g/a", 1)
    assert n.subscriptions() == [("$share/g/a", 1)]


@pytest.mark.parametrize(
    ("dialect", "pattern", "group", "error"),
    [
        ("mqtt", "$share/g", None, tm.InvalidPattern),
        ("mqtt", "$share//a", None, tm.InvalidPattern),
        ("mqtt", "$share/g+/a", None, tm.InvalidPattern),
        ("mqtt", "$share/g/a/#/b", None, tm.InvalidPattern),
        ("mqtt", "$share/g/$share/h/a", None, tm.InvalidPattern),
        ("mqtt", "a", "g/h", tm.InvalidPattern),
        ("mqtt", "$share/g/a", "g", tm.InvalidPattern),
        ("nats", "foo", "q 1", tm.InvalidPattern),
        ("nats", "foo", "", tm.InvalidPattern),
        ("amqp", "a.b", 5, TypeError),
    ],
)
def test_a_bad_shared_subscription_raises_and_writes_nothing(
    matcher_cls, dialect, pattern, group, error
):
    m = matcher_cls(dialect)
    with pytest.raises(error):
        m.subscribe(pattern, "c", group=group)
    with pytest.raises(error):
        m.unsubscribe(pattern, "c", group=group)
    with pytest.raises((error, ValueError)):
        m.subscribe_many([(pattern, "c", group)])
    assert len(m) == 0 and m.group_subscriptions() == []
    assert issubclass(tm.InvalidPattern, ValueError)


def test_subscribe_many_takes_triples_and_checks_them_all_first(matcher_cls):
    m = matcher_cls("nats")
    assert m.subscribe_many([("a.*", 1), ("a.>", 2, "q"), ("a.>", 3, "q"), ("a.>", 2, "q")]) == 3
    with pytest.raises(tm.InvalidPattern, match=r"subscriptions\[1\]"):
        m.subscribe_many([("b", 4, "q"), ("b", 5, "bad name")])
    assert len(m) == 3
    with pytest.raises(ValueError, match="triple"):
        m.subscribe_many([("b", 4, "q", "extra")])


def test_groups_pickle_and_snapshot(matcher_cls):
    m = matcher_cls("mqtt")
    m.subscribe("a/#", "p")
    m.subscribe("$share/g/a/+", "x")
    m.subscribe("a/+", "y", group="g")
    copy = pickle.loads(pickle.dumps(m))
    assert sorted(copy.group_subscriptions()) == sorted(m.group_subscriptions())
    assert copy.subscriptions() == [("a/#", "p")]
    assert normalised(copy.lookup_groups("a/b")) == (["p"], [("g", "a/+", ["x", "y"])])
    if hasattr(m, "snapshot"):
        snap = m.snapshot()
        m.unsubscribe("$share/g/a/+", "x")
        assert normalised(snap.lookup_groups("a/b")) == (["p"], [("g", "a/+", ["x", "y"])])
        assert normalised(m.lookup_groups("a/b")) == (["p"], [("g", "a/+", ["y"])])
        with pytest.raises(TypeError):
            snap.subscribe("a", "z", group="g")


def test_reverse_match_names_group_members(matcher_cls):
    m = matcher_cls("nats")
    m.subscribe("foo.*", 1)
    m.subscribe("foo.>", 2, group="q")
    m.subscribe("bar", 3, group="q")
    assert sorted(m.reverse_match("foo.bar")) == [("foo.*", 1), ("foo.>", 2)]
