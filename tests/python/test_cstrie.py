"""CSTrie's own API: O(1) read-only snapshots that later writes do not reach."""

from __future__ import annotations

import pickle
import threading
import time
import weakref

import pytest

import topicmatch as tm


def test_snapshot_ignores_later_writes():
    m = tm.CSTrie("mqtt", [("a/+", 1), ("a/#", 2)])
    snap = m.snapshot()
    m.subscribe("a/b", 3)
    m.unsubscribe("a/#", 2)
    assert sorted(snap.lookup("a/b")) == [1, 2]
    assert sorted(m.lookup("a/b")) == [1, 3]
    assert len(snap) == 2 and len(m) == 2
    assert sorted(snap.subscriptions()) == [("a/#", 2), ("a/+", 1)]


def test_snapshot_writes_raise_type_error_and_change_nothing():
    snap = tm.CSTrie("amqp", [("a.*", "x")]).snapshot()
    assert snap.read_only and repr(snap).endswith("read_only=True)")
    for call in (
        lambda: snap.subscribe("b", "y"),
        lambda: snap.unsubscribe("a.*", "x"),
        lambda: snap.remove_subscriber("x"),
        lambda: snap.subscribe_many([("c", "z")]),
    ):
        with pytest.raises(TypeError, match="read-only"):
            call()
    assert snap.subscriptions() == [("a.*", "x")]


def test_snapshot_keeps_removed_subscribers_and_their_ids():
    """A subscriber dropped from the original after the snapshot is still the snapshot's, and
    its id is not handed to a newcomer while the snapshot lives."""
    old = object()
    m = tm.CSTrie("amqp", [("a", old)])
    snap = m.snapshot()
    assert m.remove_subscriber(old) == 1
    newcomers = [object() for _ in range(10)]
    for n in newcomers:
        m.subscribe("b", n)
    assert snap.lookup("a")[0] is old
    assert snap.lookup("b") == []
    del snap
    m.subscribe("a", "after")
    assert m.lookup("a") == ["after"]


class Conn:
    """A subscriber that a weak reference can watch."""


def test_subscribers_are_freed_while_some_snapshot_is_always_alive():
    """Found by the Python soak: with a snapshot always alive (the next taken before the last
    is dropped), removed subscribers waited for a moment with no snapshot at all, so their
    objects and ids piled up without bound. Each now waits only for the snapshots taken before
    it was removed."""
    m = tm.CSTrie("amqp")
    snaps = [m.snapshot()]
    refs = []
    for _ in range(200):
        c = Conn()
        refs.append(weakref.ref(c))
        m.subscribe("a.*", c)
        snaps.append(m.snapshot())
        assert [o is c for o in snaps[-1].lookup("a.b")] == [True]
        m.unsubscribe("a.*", c)
        del c
        snaps.append(m.snapshot())  # the next one first, so one is always alive
        del snaps[:2]  # then the one before this subscriber's and the one that holds it
    assert len(snaps) == 1
    # Every removed subscriber is freed, though a snapshot was alive all along.
    assert sum(r() is not None for r in refs) == 0
    assert snaps[0].lookup("a.b") == []


def test_an_id_that_falls_to_zero_twice_waits_for_its_last_fall():
    m = tm.CSTrie("amqp")
    c = Conn()
    early = m.snapshot()
    m.subscribe("a", c)
    m.unsubscribe("a", c)  # waits for `early`
    m.subscribe("a", c)
    late = m.snapshot()  # holds c
    m.unsubscribe("a", c)  # waits for `late` too
    del early
    newcomers = [Conn() for _ in range(20)]
    for n in newcomers:
        m.subscribe("b", n)
    assert late.lookup("a")[0] is c
    assert late.lookup("b") == []


def test_snapshot_of_a_snapshot_and_pickle():
    m = tm.CSTrie("nats", [("a.>", 1)])
    snap2 = m.snapshot().snapshot()
    assert snap2.lookup("a.b") == [1]
    back = pickle.loads(pickle.dumps(snap2))
    assert back.lookup("a.b") == [1] and not back.read_only
    back.subscribe("b", 2)


def test_snapshot_takes_constant_time():
    """A snapshot of a 1,000,000-pair trie costs what one of 10 does. The bound is loose (a
    copy would be ~10^5 times slower); this guards the complexity, it is not a benchmark."""

    def best_of(m, n=200):
        best = float("inf")
        for _ in range(n):
            start = time.perf_counter()
            m.snapshot()
            best = min(best, time.perf_counter() - start)
        return best

    small = tm.CSTrie("amqp", [(f"a.{i}", i) for i in range(10)])
    big = tm.CSTrie("amqp", ((f"u.{i}.e", i % 1000) for i in range(1_000_000)))
    assert len(big) == 1_000_000
    assert best_of(big) < 50 * best_of(small) + 1e-4


def test_snapshots_taken_while_threads_write_are_each_consistent():
    """Writers only add pairs; every snapshot must hold a prefix-closed set: if it holds a
    writer's k-th pair, it holds the writer's pairs before k."""
    m = tm.CSTrie("amqp")
    stop = threading.Event()

    def write(w):
        for i in range(3000):
            m.subscribe(f"w{w}.{i}", w)
        stop.set()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    snaps = []
    while not stop.is_set():
        snaps.append(m.snapshot())
    for t in threads:
        t.join()
    for snap in snaps:
        by_writer: dict[int, list[int]] = {0: [], 1: []}
        for pattern, w in snap.subscriptions():
            by_writer[w].append(int(pattern.split(".")[1]))
        for idx in by_writer.values():
            assert sorted(idx) == list(range(len(idx)))
