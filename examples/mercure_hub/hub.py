"""The hub's state, without HTTP: subscribers, the matcher, the history that `Last-Event-ID`
reconnections replay from, and publishing.

Delivery. A publish writes each recipient's event straight into its socket, without blocking
(the server's sockets are non-blocking underneath their timeout). Whatever the kernel does not
take at once, and everything meant for a connection whose stream has not started yet, goes on
the subscriber's bounded backlog, which the connection's own server thread writes out with
blocking writes; while a backlog is not empty, later events join it, so they stay in order. A
subscriber whose backlog is full is dropped (its connection closed, its selectors removed)
rather than slowing the publisher down, as the Mercure hub does; its client reconnects with
`Last-Event-ID` and catches up from the history. A connection whose socket cannot be written
directly (TLS, another server) gets every event through its backlog and thread.

Locks. One hub lock orders publishes and subscriptions: a publish appends to the history,
matches and delivers under it, and a new subscription registers itself and copies its share of
the history under it, so a reconnecting subscriber sees every update once, in order, with no
gap between the replayed and the live ones. Each subscriber has a lock of its own for its
socket and backlog, held for one non-blocking write at most. Nothing under either lock waits
for a client.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from .selectors import MATCHERS

#: The reserved `Last-Event-ID` that asks for the whole history.
EARLIEST = "earliest"

#: An SSE comment line, sent as a heartbeat.
HEARTBEAT = b":\n"


@dataclass
class Stats:
    """Counters kept inside the hub, read by `GET /stats` and the benchmark. `*_seconds` are
    wall-clock time, `*_cpu_seconds` the CPU time of the thread doing the work (the difference
    is time spent waiting: for the GIL, or for a core on a busy machine)."""

    updates: int = 0
    deliveries: int = 0
    dropped: int = 0
    subscribers_connected: int = 0
    subscribers_disconnected: int = 0
    #: Matching the update's topics (the matcher's lookup), under the hub's lock.
    match_seconds: float = 0.0
    match_cpu_seconds: float = 0.0
    #: Delivering the event to the recipients (direct writes, or their backlogs), under the
    #: hub's lock.
    enqueue_seconds: float = 0.0
    enqueue_cpu_seconds: float = 0.0
    #: Deliveries written straight into the socket by the publisher (the rest: backlog).
    direct_deliveries: int = 0
    lock_wait_seconds: float = 0.0
    #: Whole publish requests from the application's side: token, form, match, enqueue.
    publish_cpu_seconds: float = 0.0
    #: Backlogs written out by the connections' threads (and heartbeats), summed over them.
    write_cpu_seconds: float = 0.0
    writes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, value: float, count: str | None = None) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + value)
            if count:
                setattr(self, count, getattr(self, count) + 1)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


class Update:
    """A published update: its topics and its SSE event, serialized once for every recipient,
    bare and as an HTTP/1.1 chunk."""

    __slots__ = ("id", "topics", "private", "event", "chunk")

    def __init__(self, id, topics, data="", type=None, retry=None, private=False):
        self.id = id
        self.topics = tuple(topics)
        self.private = private
        self.event = serialize_event(id, data, type, retry)
        self.chunk = as_chunk(self.event)


def serialize_event(id: str, data: str, type: str | None = None, retry: int | None = None):
    """The `text/event-stream` form of an update, as the Mercure hub writes it: `event:` and
    `retry:` if set, `id:`, and one `data:` line per line of the data."""
    lines = []
    if type:
        lines.append(f"event: {type}\n")
    if retry:
        lines.append(f"retry: {retry}\n")
    data = data.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\ndata: ")
    lines.append(f"id: {id}\ndata: {data}\n\n")
    return "".join(lines).encode("utf-8")


def as_chunk(data: bytes) -> bytes:
    """`data` framed as one chunk of HTTP/1.1's chunked transfer coding."""
    return b"%x\r\n%b\r\n" % (len(data), data)


class Subscriber:
    """One SSE connection. Compared by identity: it is its own key in the matcher.

    `chunked`: what is written to its socket directly must be framed as chunks (the server
    answers an HTTP/1.1 request with chunked transfer coding). `fd` is set, and `direct` turns
    on, once the stream has started and the backlog is empty; `direct` turns off while a
    backlog waits. `dropped`: too slow; `closed`: its socket failed, or the hub is closing."""

    __slots__ = (
        "selectors",
        "private_selectors",
        "chunked",
        "pending",
        "cond",
        "fd",
        "direct",
        "dropped",
        "closed",
        "__weakref__",
    )

    def __init__(
        self, selectors: Sequence[str], private_selectors: Sequence[str] = (), chunked=False
    ):
        self.selectors = tuple(dict.fromkeys(selectors))
        self.private_selectors = tuple(dict.fromkeys(private_selectors))
        self.chunked = chunked
        self.pending: collections.deque[bytes] = collections.deque()
        self.cond = threading.Condition(threading.Lock())
        self.fd = -1
        self.direct = False
        self.dropped = False
        self.closed = False

    def frame(self, update: Update) -> bytes:
        return update.chunk if self.chunked else update.event

    def offer(self, data: bytes, limit: int | None) -> int:
        """Delivers `data` (already framed): 2 if written to the socket, 1 if put on the
        backlog, 0 if the backlog holds `limit` items already, -1 if the stream is over."""
        with self.cond:
            if self.dropped or self.closed:
                return -1
            if self.direct:
                try:
                    n = os.write(self.fd, data)
                except BlockingIOError:
                    n = 0
                except OSError:
                    self.closed, self.direct = True, False
                    self.cond.notify()
                    return -1
                if n == len(data):
                    return 2
                # A part went out: the rest must follow whatever the bound says.
                self.direct = False
                self.pending.append(data[n:])
                self.cond.notify()
                return 1
            if limit is not None and len(self.pending) >= limit:
                return 0
            self.pending.append(data)
            self.cond.notify()
            return 1

    def attach(self, fd: int) -> None:
        """The stream has started on socket `fd`: direct writes may begin."""
        with self.cond:
            self.fd = fd
            self.direct = not self.pending and not (self.dropped or self.closed)

    def end(self, dropped: bool = False) -> None:
        with self.cond:
            if dropped:
                self.dropped = True
            else:
                self.closed = True
            self.direct = False
            self.cond.notify()

    def __repr__(self) -> str:
        return f"<Subscriber {id(self):#x} {list(self.selectors)}>"


class HubFull(Exception):
    """No room for another subscriber."""


class Hub:
    """Subscribers, matcher and history. `matcher` is "skipfilter" or "bruteforce"."""

    def __init__(
        self,
        matcher: str = "skipfilter",
        history_size: int = 1000,
        queue_size: int = 1000,
        max_subscribers: int = 10_000,
        cache_size: int = 100_000,
    ):
        if matcher not in MATCHERS:
            raise ValueError(f"matcher must be one of {sorted(MATCHERS)}")
        self.matcher_name = matcher
        self._matcher = MATCHERS[matcher](cache_size)
        # Selectors of the `mercure.subscribe` claims: who may receive private updates.
        self._private = MATCHERS[matcher](cache_size)
        self._history: collections.deque[Update] = collections.deque(maxlen=history_size)
        self._subscribers: set[Subscriber] = set()
        self._lock = threading.Lock()
        self.queue_size = queue_size
        self.max_subscribers = max_subscribers
        self.stats = Stats()
        self.closed = False

    # -- subscribers --------------------------------------------------------------------------

    def connect(
        self,
        selectors: Sequence[str],
        private_selectors: Sequence[str] = (),
        last_event_id: str | None = None,
        chunked: bool = False,
    ) -> tuple[Subscriber, str | None]:
        """Registers a subscriber (selectors already checked) and queues the updates of the
        history after `last_event_id` that it wants. Returns it and the value of the
        `Last-Event-ID` response header (None when none was asked for): the id of the event
        before the first one replayed, or `earliest`. `chunked`: see `Subscriber`."""
        sub = Subscriber(selectors, private_selectors, chunked)
        with self._lock:
            if self.closed or len(self._subscribers) >= self.max_subscribers:
                raise HubFull(f"{len(self._subscribers)} subscribers connected")
            response_id = None
            if last_event_id is not None:
                response_id, replay = self._history_after(last_event_id)
                if replay:
                    wanted = self._recipients_among(sub, replay)
                    for update in replay:
                        if update in wanted:
                            sub.offer(sub.frame(update), None)
            self._matcher.add(sub, sub.selectors)
            if sub.private_selectors:
                self._private.add(sub, sub.private_selectors)
            self._subscribers.add(sub)
            self.stats.subscribers_connected += 1
        return sub, response_id

    def _history_after(self, last_event_id: str) -> tuple[str, list[Update]]:
        history = self._history
        if not history:
            return EARLIEST, []
        if last_event_id == EARLIEST:
            return EARLIEST, list(history)
        for i in range(len(history) - 1, -1, -1):
            if history[i].id == last_event_id:
                return last_event_id, list(history)[i + 1 :]
        # Unknown (or forgotten) id: nothing to replay; the response names the newest event,
        # as the Mercure hub's Bolt transport does, so the client can tell it missed some.
        return history[-1].id, []

    def _recipients_among(self, sub: Subscriber, updates: list[Update]) -> set[Update]:
        """The updates of `updates` that `sub` wants, matched by a matcher of the hub's kind
        that holds only `sub`."""
        one = type(self._matcher)(0)
        one.add(sub, sub.selectors)
        private = type(self._matcher)(0)
        if sub.private_selectors:
            private.add(sub, sub.private_selectors)
        return {
            u for u in updates if one.match(u.topics) and (not u.private or private.match(u.topics))
        }

    def disconnect(self, sub: Subscriber) -> None:
        """Removes the subscriber's selectors; idempotent."""
        with self._lock:
            if sub in self._subscribers:
                self._remove(sub)

    def _remove(self, sub: Subscriber) -> None:
        self._subscribers.discard(sub)
        self._matcher.remove(sub)
        if sub.private_selectors:
            self._private.remove(sub)
        self.stats.subscribers_disconnected += 1

    def _drop(self, sub: Subscriber) -> None:
        """A subscriber that does not keep up: its thread ends its stream and closes it."""
        sub.end(dropped=True)
        self._remove(sub)
        self.stats.dropped += 1

    # -- publishing ---------------------------------------------------------------------------

    def publish(
        self,
        topics: Sequence[str],
        data: str = "",
        id: str | None = None,
        type: str | None = None,
        retry: int | None = None,
        private: bool = False,
    ) -> str:
        """Dispatches an update to every subscriber whose selectors admit one of its topics
        (and, if private, whose `mercure.subscribe` claim does too). Returns its id."""
        update = Update(id or f"urn:uuid:{uuid.uuid4()}", topics, data, type, retry, private)
        stats = self.stats
        clock, cpu = time.perf_counter, time.thread_time
        t0 = clock()
        with self._lock:
            t1, c1 = clock(), cpu()
            self._history.append(update)
            recipients = self._matcher.match(update.topics)
            if private and recipients:
                allowed = set(self._private.match(update.topics))
                recipients = [s for s in recipients if s in allowed]
            t2, c2 = clock(), cpu()
            limit, slow, delivered, direct = self.queue_size, [], 0, 0
            chunk, event = update.chunk, update.event
            for sub in recipients:
                r = sub.offer(chunk if sub.chunked else event, limit)
                if r > 0:
                    delivered += 1
                    direct += r == 2
                elif r == 0:
                    slow.append(sub)
            for sub in slow:
                self._drop(sub)
            t3, c3 = clock(), cpu()
            stats.updates += 1
            stats.deliveries += delivered
            stats.direct_deliveries += direct
            stats.lock_wait_seconds += t1 - t0
            stats.match_seconds += t2 - t1
            stats.match_cpu_seconds += c2 - c1
            stats.enqueue_seconds += t3 - t2
            stats.enqueue_cpu_seconds += c3 - c2
        return update.id

    # -- the rest -----------------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of (selector, subscriber) pairs in the matcher."""
        with self._lock:
            return len(self._matcher)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def close(self) -> None:
        """Ends every stream; new subscriptions are refused."""
        with self._lock:
            self.closed = True
            for sub in list(self._subscribers):
                sub.end()
                self._remove(sub)
