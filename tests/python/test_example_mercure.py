"""The Mercure hub of examples/mercure_hub over real HTTP on loopback: subscribe and publish,
selectors, authorisation, status codes, Last-Event-ID, slow and leaving subscribers, both
matcher modes, and the demo page in headless Chromium when there is one."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import topicmatch as tm

jwt = pytest.importorskip("jwt", reason="the hub example needs PyJWT")
pytest.importorskip("cheroot", reason="the hub example needs cheroot")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.mercure_hub import make_server  # noqa: E402
from examples.mercure_hub.selectors import (  # noqa: E402
    BruteForceMatcher,
    Selector,
    SkipfilterMatcher,
    check_selector,
)

KEY = "test-key-of-at-least-thirty-two-bytes!"
HUB = "/.well-known/mercure"
BOOKS = "https://example.com/books/{id}"


def token(publish=None, subscribe=None, key=KEY, **claims):
    mercure = {}
    if publish is not None:
        mercure["publish"] = publish
    if subscribe is not None:
        mercure["subscribe"] = subscribe
    return jwt.encode({"mercure": mercure, **claims}, key, algorithm="HS256")


ANY = token(publish=["*"])


class SSE:
    """A raw-socket SSE client: the request as written, the head parsed, the body de-chunked
    and parsed into events (dicts of id, data, event, retry) as they arrive."""

    def __init__(self, base, selectors=(), headers=None, query=(), rcvbuf=None):
        url = urllib.parse.urlsplit(base)
        self.sock = socket.socket()
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(5)
        self.sock.connect((url.hostname, url.port))
        q = urllib.parse.urlencode([("topic", s) for s in selectors] + list(query))
        lines = [f"GET {HUB}?{q} HTTP/1.1", f"Host: {url.netloc}", "Accept: text/event-stream"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.raw = b""
        self.body = b""
        self.pending: list[dict] = []
        self.ended = False
        while b"\r\n\r\n" not in self.raw:
            self._recv()
        head, self.raw = self.raw.split(b"\r\n\r\n", 1)
        status, *fields = head.decode("latin-1").split("\r\n")
        self.status = int(status.split()[1])
        self.headers = {k.lower(): v.strip() for k, v in (f.split(":", 1) for f in fields)}
        self.chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"

    def _recv(self):
        data = self.sock.recv(65536)
        if not data:
            self.ended = True
            raise EOFError
        self.raw += data

    def _dechunk(self):
        if not self.chunked:
            self.body += self.raw
            self.raw = b""
            return
        while b"\r\n" in self.raw:
            size_line, rest = self.raw.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                self.ended = True
                self.raw = b""
                return
            if len(rest) < size + 2:
                return
            self.body += rest[:size]
            self.raw = rest[size + 2 :]

    def _parse(self):
        while b"\n\n" in self.body:
            block, self.body = self.body.split(b"\n\n", 1)
            event: dict = {}
            data = []
            for line in block.decode().split("\n"):
                if not line or line.startswith(":"):
                    continue
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "data":
                    data.append(value)
                else:
                    event[name] = value
            if data:
                event["data"] = "\n".join(data)
                self.pending.append(event)

    def events(self, n=1, timeout=5.0):
        """The next `n` events; fewer if the stream ends or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while len(self.pending) < n and not self.ended:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.sock.settimeout(left)
            try:
                self._recv()
            except (TimeoutError, EOFError):
                break
            self._dechunk()
            self._parse()
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def text(self):
        """The whole body of a short (error) response."""
        length = int(self.headers.get("content-length", 0))
        while len(self.raw) < length:
            self._recv()
        return self.raw[:length].decode()

    def close(self):
        self.sock.close()


def publish(base, topics, data="", tok=ANY, headers=None, **fields):
    """POSTs an update; returns (status, body)."""
    topics = [topics] if isinstance(topics, str) else topics
    form = [("topic", t) for t in topics] + [("data", data)] + list(fields.items())
    h = {"Content-Type": "application/x-www-form-urlencoded"}
    if tok is not None:
        h["Authorization"] = f"Bearer {tok}"
    h.update(headers or {})
    req = urllib.request.Request(
        base + HUB, urllib.parse.urlencode(form).encode(), headers=h, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def start_hub(**options):
    options.setdefault("heartbeat", 0.2)
    server = make_server(KEY, host="127.0.0.1", port=0, threads=24, **options)
    server.server.expiration_interval = 0.05  # cheroot's poll interval: stops sooner
    server.start()
    server.base = server.url
    server.hub = server.app.hub
    return server


@pytest.fixture(params=["skipfilter", "bruteforce"])
def hub(request):
    server = start_hub(matcher=request.param)
    yield server
    server.stop()


@pytest.fixture
def open_streams():
    streams: list[SSE] = []

    def opener(*args, **kwargs):
        s = SSE(*args, **kwargs)
        streams.append(s)
        return s

    yield opener
    for s in streams:
        s.close()


def subscribed(server, n):
    assert wait_for(lambda: server.hub.subscriber_count == n), server.hub.subscriber_count


def test_publish_delivers_the_event_with_its_id_and_data(hub, open_streams):
    s = open_streams(hub.base, ["https://example.com/books/1"])
    assert s.status == 200 and s.headers["content-type"] == "text/event-stream"
    subscribed(hub, 1)
    status, update_id = publish(hub.base, "https://example.com/books/1", "line 1\nline 2")
    assert status == 200 and update_id.startswith("urn:uuid:")
    assert s.events(1) == [{"id": update_id, "data": "line 1\nline 2"}]
    status, _ = publish(hub.base, "https://example.com/books/1", "x", id="v2", type="t", retry="7")
    assert s.events(1) == [{"id": "v2", "event": "t", "retry": "7", "data": "x"}]


def test_without_the_socket_events_go_through_the_servers_writes(open_streams):
    """The path for TLS or another WSGI server: no direct writes, every event through the
    connection's thread and the server's own chunked framing."""
    import cheroot.wsgi

    server = make_server(KEY, host="127.0.0.1", port=0, threads=24, heartbeat=0.2)
    server.server.gateway = cheroot.wsgi.Gateway_10
    server.server.expiration_interval = 0.05
    server.hub = server.app.hub
    server.start()
    try:
        first = publish(server.url, BOOKS.replace("{id}", "0"), "before")[1]
        s = open_streams(server.url, [BOOKS], headers={"Last-Event-ID": "earliest"})
        subscribed(server, 1)
        ids = [publish(server.url, f"https://example.com/books/{i}", f"b{i}")[1] for i in range(3)]
        events = s.events(4)
        assert [e["id"] for e in events] == [first, *ids]
        assert server.app.hub.stats.direct_deliveries == 0
        time.sleep(0.3)  # a heartbeat goes through the same path
        publish(server.url, BOOKS.replace("{id}", "9"), "after")
        assert [e["data"] for e in s.events(1)] == ["after"]
    finally:
        server.stop()


def test_star_exact_and_template_selectors(hub, open_streams):
    star = open_streams(hub.base, ["*"])
    exact = open_streams(hub.base, ["https://example.com/books/1"])
    template = open_streams(hub.base, [BOOKS])
    regex = open_streams(hub.base, ["re:https://example\\.com/authors/[0-9]+"])
    subscribed(hub, 4)
    publish(hub.base, "https://example.com/books/1", "b1")
    publish(hub.base, "https://example.com/books/2", "b2")
    publish(hub.base, "https://example.com/authors/7", "a7")
    publish(hub.base, "https://example.com/books/1/chapters/2", "c")
    publish(hub.base, "end", "end")
    assert [e["data"] for e in star.events(5)] == ["b1", "b2", "a7", "c", "end"]
    publish(hub.base, ["https://example.com/books/1", "https://example.com/authors/1"], "last")
    assert [e["data"] for e in exact.events(2)] == ["b1", "last"]
    assert [e["data"] for e in template.events(3)] == ["b1", "b2", "last"]
    assert [e["data"] for e in regex.events(2)] == ["a7", "last"]


def test_an_update_to_two_topics_is_delivered_once(hub, open_streams):
    s = open_streams(hub.base, [BOOKS, "https://example.com/authors/{id}"])
    subscribed(hub, 1)
    publish(hub.base, ["https://example.com/books/1", "https://example.com/authors/1"], "both")
    publish(hub.base, "https://example.com/books/9", "next")
    assert [e["data"] for e in s.events(3, timeout=0.5)] == ["both", "next"]


def test_unauthorised_publishes_get_401_and_403(hub):
    topic = "https://example.com/books/1"
    assert publish(hub.base, topic, tok=None)[0] == 401
    other_key = token(["*"], key="another-key-of-thirty-two-bytes!!")
    assert publish(hub.base, topic, tok=other_key)[0] == 401
    assert publish(hub.base, topic, tok="not.a.jwt")[0] == 401
    assert publish(hub.base, topic, tok=token())[0] == 401  # no mercure.publish claim
    expired = token(["*"], exp=int(time.time()) - 60)
    assert publish(hub.base, topic, tok=expired)[0] == 401
    books = token([BOOKS])
    assert publish(hub.base, topic, tok=books)[0] == 200
    assert publish(hub.base, "https://example.com/authors/1", tok=books)[0] == 403
    assert publish(hub.base, [topic, "https://example.com/authors/1"], tok=books)[0] == 403
    assert publish(hub.base, topic, tok=token([]))[0] == 403
    # The cookie: only with an Origin (or Referer) the hub allows.
    cookie = {"Cookie": f"mercureAuthorization={ANY}"}
    assert publish(hub.base, topic, tok=None, headers=cookie)[0] == 401
    evil = {**cookie, "Origin": "https://evil.example"}
    assert publish(hub.base, topic, tok=None, headers=evil)[0] == 401
    own = {**cookie, "Origin": hub.base}
    assert publish(hub.base, topic, tok=None, headers=own)[0] == 200


def test_bad_requests_get_400(hub, open_streams):
    assert open_streams(hub.base, []).status == 400  # no topic
    for bad in ("re:(unclosed", "", "a\x01b"):
        s = open_streams(hub.base, [bad])
        assert s.status == 400, bad
        assert "selector" in s.text()
    assert publish(hub.base, [])[0] == 400  # no topic
    assert publish(hub.base, "t", retry="soon")[0] == 400
    assert publish(hub.base, "t", id="#1")[0] == 400
    assert publish(hub.base, "t", type="a\nb")[0] == 400
    assert hub.hub.subscriber_count == 0


def test_last_event_id_replays_the_history(hub, open_streams):
    ids = [publish(hub.base, f"https://example.com/books/{i}", f"b{i}")[1] for i in range(4)]
    publish(hub.base, "https://example.com/authors/1", "not wanted")
    ids.append(publish(hub.base, "https://example.com/books/9", "b9")[1])
    s = open_streams(hub.base, [BOOKS], headers={"Last-Event-ID": ids[1]})
    assert s.headers["last-event-id"] == ids[1]
    assert [e["data"] for e in s.events(3)] == ["b2", "b3", "b9"]
    # The query parameter, for browsers' first connection; the header wins over it.
    q = open_streams(hub.base, [BOOKS], query=[("lastEventID", ids[2])])
    assert [e["data"] for e in q.events(2)] == ["b3", "b9"]
    both = open_streams(
        hub.base, [BOOKS], headers={"Last-Event-ID": ids[3]}, query=[("lastEventID", ids[0])]
    )
    assert [e["data"] for e in both.events(1)] == ["b9"]
    earliest = open_streams(hub.base, [BOOKS], query=[("lastEventID", "earliest")])
    assert earliest.headers["last-event-id"] == "earliest"
    assert [e["data"] for e in earliest.events(5)] == ["b0", "b1", "b2", "b3", "b9"]
    unknown = open_streams(hub.base, [BOOKS], headers={"Last-Event-ID": "urn:uuid:gone"})
    assert unknown.headers["last-event-id"] == ids[-1]  # nothing replayed: the newest id
    # No gap and no repeat between the replay and the live updates.
    subscribed(hub, 5)
    publish(hub.base, "https://example.com/books/10", "live")
    assert [e["data"] for e in s.events(1)] == ["live"]
    assert [e["data"] for e in unknown.events(2, timeout=0.5)] == ["live"]


def test_a_slow_subscriber_is_dropped_and_publishing_never_waits(open_streams):
    server = start_hub(queue_size=4)
    try:
        slow = open_streams(server.base, ["*"], rcvbuf=4096)  # connected, never reads
        fast = open_streams(server.base, ["*"])
        subscribed(server, 2)
        payload = "x" * 65536
        worst = 0.0
        sent = 0
        while sent < 600:  # at most ~39 MB before the kernel's buffers fill
            sent += 1
            t = time.perf_counter()
            status, _ = publish(server.base, "t", payload)
            worst = max(worst, time.perf_counter() - t)
            assert status == 200
            assert len(fast.events(1)) == 1
            if server.hub.stats.dropped:
                break
        assert server.hub.stats.dropped == 1, f"{sent} updates and still connected"
        assert worst < 2.0, f"a publish took {worst:.2f} s"
        assert server.hub.subscriber_count == 1
        assert len(server.hub) == 1  # the slow one's selector is gone
        publish(server.base, "t", "after")
        assert [e["data"] for e in fast.events(1)] == ["after"]
        slow.close()
    finally:
        server.stop()


def test_disconnect_removes_the_subscriber(hub, open_streams):
    streams = [open_streams(hub.base, [BOOKS, f"https://example.com/users/{i}"]) for i in range(3)]
    subscribed(hub, 3)
    assert len(hub.hub) == 6
    for s in streams:
        s.close()
    assert wait_for(lambda: len(hub.hub) == 0, timeout=5.0), len(hub.hub)
    assert hub.hub.subscriber_count == 0


def test_private_updates_go_to_authorised_subscribers_only(hub, open_streams):
    reader = token(subscribe=["https://example.com/users/1/{?topic}"])
    allowed = open_streams(hub.base, [BOOKS], headers={"Authorization": f"Bearer {reader}"})
    anonymous = open_streams(hub.base, [BOOKS])
    subscribed(hub, 2)
    alternate = "https://example.com/users/1/?topic=https%3A%2F%2Fexample.com%2Fbooks%2F1"
    publish(hub.base, ["https://example.com/books/1", alternate], "secret", private="on")
    publish(hub.base, "https://example.com/books/2", "public")
    assert [e["data"] for e in allowed.events(2)] == ["secret", "public"]
    assert [e["data"] for e in anonymous.events(2, timeout=0.5)] == ["public"]
    bad = open_streams(hub.base, [BOOKS], headers={"Authorization": "Bearer nope"})
    assert bad.status == 401


def test_a_subscription_ends_when_its_token_expires(open_streams):
    server = start_hub(heartbeat=5.0)
    try:
        tok = token(subscribe=["*"], exp=int(time.time()) + 2)
        s = open_streams(server.base, ["*"], headers={"Authorization": f"Bearer {tok}"})
        subscribed(server, 1)
        assert wait_for(lambda: server.hub.subscriber_count == 0, timeout=5.0)
        s.events(1, timeout=0.5)
        assert s.ended
    finally:
        server.stop()


# -- both matchers ----------------------------------------------------------------------------

SELECTORS = [
    "*",
    BOOKS,
    "https://example.com/books/1",
    "https://example.com/{kind}/1",
    "https://example.com/users{/id}",
    "https://example.com/search{?q,lang}",
    "https://example.com/{+path}",
    "https://example.com/{id}.json",
    "re:https://example\\.com/(books|users)/[02]",
    "https://example.com/{broken",  # no template: admits itself only
]
TOPICS = [
    "https://example.com/books/1",
    "https://example.com/books/2",
    "https://example.com/users/1",
    "https://example.com/users",
    "https://example.com/search?q=x&lang=en",
    "https://example.com/search?lang=en",
    "https://example.com/a/b/c",
    "https://example.com/7.json",
    "https://example.com/{broken",
    "urn:other",
]


def _deliveries(matcher, subscriptions, updates):
    server = start_hub(matcher=matcher)
    streams = []
    try:
        streams = [SSE(server.base, sels) for sels in subscriptions]
        subscribed(server, len(streams))
        for i, topics in enumerate(updates):
            assert publish(server.base, topics, f"u{i}")[0] == 200
        publish(server.base, "end", "end")
        got = set()
        for k, s in enumerate(streams):
            while (e := s.events(1)) and e[0]["data"] != "end":
                got.add((k, int(e[0]["data"][1:])))
            assert e, f"stream {k} never got the last update"
        return got, server.hub.stats.deliveries
    finally:
        for s in streams:
            s.close()
        server.stop()


def test_both_matchers_give_the_same_deliveries():
    rng = random.Random(7)
    subscriptions = [rng.sample(SELECTORS, rng.randint(1, 3)) for _ in range(12)]
    subscriptions = [[*sels, "end"] for sels in subscriptions]
    updates = [rng.sample(TOPICS, rng.randint(1, 2)) for _ in range(25)]
    expected = set()
    for k, sels in enumerate(subscriptions):
        index = tm.SelectorIndex()
        for s in sels:
            index.subscribe(s, k)
        expected |= {(k, i) for i, topics in enumerate(updates) if index.lookup(topics)}
    skip, n_skip = _deliveries("skipfilter", subscriptions, updates)
    brute, n_brute = _deliveries("bruteforce", subscriptions, updates)
    assert skip == brute == expected
    assert n_skip == n_brute == len(expected) + len(subscriptions)


def test_the_python_template_matcher_agrees_with_selector_index():
    """The brute force's own RFC 6570 reversal against topicmatch's, on generated pairs."""
    rng = random.Random(3)
    ops, names, mods = ["", "+", "#", ".", "/", ";", "?", "&"], ["x", "y", "a.b"], ["", "*", ":2"]
    literals = ["https://e.com/", "a", "/", "%20", "é", ".json", "?", "&", "=", ",", "}", " "]
    chars = "ab1/.,;=?&#%20é:~-_ {}"
    pairs = positives = 0
    for _ in range(400):
        parts = []
        for _ in range(rng.randint(1, 4)):
            if rng.random() < 0.5:
                parts.append(rng.choice(literals))
            else:
                vs = ",".join(
                    rng.choice(names) + rng.choice(mods) for _ in range(rng.randint(1, 3))
                )
                parts.append("{" + rng.choice(ops) + vs + "}")
        text = "".join(parts)
        try:
            check_selector(text)
        except ValueError:
            continue
        selector, index = Selector(text), tm.SelectorIndex(cache_size=0)
        index.subscribe(text, 1)
        for _ in range(15):
            topic = "".join(
                c
                + "".join(rng.choice(chars) for _ in range(rng.randint(0, 2)) if rng.random() < 0.3)
                for c in text
                if c not in "{}" or rng.random() < 0.3
            )
            if topic:
                pairs += 1
                mine = selector.admits(topic)
                positives += mine
                assert mine == (index.lookup(topic) == [1]), (text, topic)
    assert pairs > 3000 and positives > 300


def test_the_matchers_agree_whatever_the_brute_force_cache_holds():
    rng = random.Random(11)
    subscriptions = {k: rng.sample(SELECTORS, rng.randint(1, 3)) for k in range(20)}
    matchers = [SkipfilterMatcher(4), BruteForceMatcher(0), BruteForceMatcher(5)]
    for m in matchers:
        for k, sels in subscriptions.items():
            m.add(k, sels)
    for _ in range(200):
        topics = rng.sample(TOPICS, rng.randint(1, 2))
        answers = [sorted(m.match(topics)) for m in matchers]
        assert answers[0] == answers[1] == answers[2], topics
    for m in matchers:
        m.remove(3)
        assert len(m) == sum(len(s) for k, s in subscriptions.items() if k != 3)


# -- the demo page ----------------------------------------------------------------------------


def test_the_demo_page_is_served(hub):
    with urllib.request.urlopen(hub.base + "/", timeout=5) as r:
        page = r.read().decode()
        assert r.headers["Content-Type"].startswith("text/html")
    assert "EventSource" in page and hub.hub.matcher_name in page


CHROMIUM = shutil.which("chromium")


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="no `chromium` binary: on Debian, `apt-get install -y chromium` brings it",
)
def test_the_demo_page_shows_an_update_in_headless_chromium(tmp_path):
    server = start_hub()
    try:
        query = urllib.parse.urlencode({"topic": BOOKS, "max": "1"})
        # The page closes its stream after one update (max=1); until then the open stream
        # holds Chromium's virtual clock, so the DOM is dumped once the update is shown.
        cmd = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            f"{server.base}/?{query}",
        ]
        browser = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert wait_for(lambda: server.hub.subscriber_count == 1, timeout=30.0)
            status, update_id = publish(server.base, "https://example.com/books/7", "<b>dune</b>")
            assert status == 200
            dom, _ = browser.communicate(timeout=30)
        finally:
            if browser.poll() is None:
                browser.kill()
                browser.wait()
        dom = dom.decode()
        assert 'data-updates="1"' in dom
        assert update_id in dom
        assert "&lt;b&gt;dune&lt;/b&gt;" in dom  # shown as text, not markup
    finally:
        server.stop()
