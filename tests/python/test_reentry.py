"""Subscribers whose finalizer calls back into the matcher that held them. The registry lets
go of a subscriber's object after its lock, so the finalizer's call goes through instead of
waiting forever for a lock its own thread holds."""

from __future__ import annotations

import gc
import itertools
import threading

import pytest

import topicmatch as tm

from conftest import TOPIC_MATCHERS


class Conn:
    """Equal to any `Conn` with the same key; on finalization, subscribes to its matcher, if
    it has one."""

    def __init__(self, key: int, m) -> None:
        self.key = key
        self.m = m

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Conn) and other.key == self.key

    def __del__(self) -> None:
        if self.m is not None:
            self.m.subscribe("audit.#", f"logger-{self.key}")


def _finishes(body) -> None:
    """Runs `body` in a thread of its own: a call that waits on itself would hang the suite."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the call never returned: the finalizer waited for the registry"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("cls", TOPIC_MATCHERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("how", ["unsubscribe", "remove_subscriber"])
def test_a_finalizer_may_call_the_matcher_that_released_it(cls, how):
    """The caller unsubscribes with an equal object, so the matcher held the last reference
    to the one it stored; a large answer of it was kept as well."""
    m = cls("amqp")

    def body() -> None:
        m.subscribe_many([("a.*", Conn(i, m)) for i in range(40)])
        for _ in range(3):
            assert len(m.lookup("a.b")) == 40
        for i in range(40):
            if how == "unsubscribe":
                assert m.unsubscribe("a.*", Conn(i, None)) is True
            else:
                assert m.remove_subscriber(Conn(i, None)) == 1

    _finishes(body)
    assert sorted(m.subscriptions()) == sorted(("audit.#", f"logger-{i}") for i in range(40))


def test_a_finalizer_may_call_the_matcher_when_its_snapshot_goes():
    """A snapshot held the id, so the release comes when the snapshot is dropped."""
    m = tm.CSTrie("amqp")

    def body() -> None:
        m.subscribe("a.b", Conn(1, m))
        snap = m.snapshot()
        assert m.unsubscribe("a.b", Conn(1, None)) is True
        assert len(snap.lookup("a.b")) == 1
        del snap

    _finishes(body)
    assert m.subscriptions() == [("audit.#", "logger-1")]


@pytest.mark.parametrize("cls", TOPIC_MATCHERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("call", ["lookup_many", "lookup_flat"])
def test_a_collection_may_start_a_batch_while_a_batch_makes_its_lists(cls, call):
    """The cyclic collector runs on any allocation, so Python code (a finalizer, or here a
    collector callback) may start a batch on the thread of a batch that is making its lists
    from answers it still reads: both answer right."""
    m = cls("amqp")
    m.subscribe("a.*", "x")
    m.subscribe("#", "y")
    topics = [f"a.{i}" for i in range(300)]
    nested: list[object] = []
    errors: list[BaseException] = []

    def answers(result) -> list[list[str]]:
        if call == "lookup_many":
            return [sorted(a) for a in result]
        flat, ends = result
        return [sorted(flat[a:b]) for a, b in itertools.pairwise(ends)]

    def during_collection(phase: str, info: dict) -> None:
        if phase != "start" or len(nested) >= 200 or threading.get_ident() != batcher:
            return
        try:
            nested.append(getattr(m, call)(topics[:40]))
        except BaseException as e:  # noqa: BLE001 - a panic in the nested batch
            errors.append(e)

    def body() -> None:
        old = gc.get_threshold()
        gc.set_threshold(1)
        gc.callbacks.append(during_collection)
        try:
            for _ in range(5):
                assert answers(getattr(m, call)(topics)) == [["x", "y"]] * len(topics)
        finally:
            gc.callbacks.remove(during_collection)
            gc.set_threshold(*old)

    batcher = None

    def run() -> None:
        nonlocal batcher
        batcher = threading.get_ident()
        body()

    _finishes(run)
    assert not errors, errors[0]
    assert nested, "no collection ran during the batches"
    for result in nested:
        assert answers(result) == [["x", "y"]] * 40


def _writes_during_collections(m, call) -> int:
    """Runs `call` on a thread of its own with a collection started by nearly every allocation,
    each collection (on that thread) subscribing or unsubscribing on `m`, as a finalizer
    run by the collection would (a client session in a reference cycle that unsubscribes its
    queue when freed). Returns how many writes ran."""
    writes = 0

    def during_collection(phase: str, info: dict) -> None:
        nonlocal writes
        if phase != "start" or threading.get_ident() != caller or writes >= 400:
            return
        if writes % 2 == 0:
            m.subscribe("audit.#", f"session-{writes}")
        else:
            m.unsubscribe("audit.#", f"session-{writes - 1}")
        writes += 1

    caller = None

    def run() -> None:
        nonlocal caller
        caller = threading.get_ident()
        old = gc.get_threshold()
        gc.set_threshold(1)
        gc.callbacks.append(during_collection)
        try:
            call()
        finally:
            gc.callbacks.remove(during_collection)
            gc.set_threshold(*old)

    _finishes(run)
    return writes


@pytest.mark.parametrize("cls", TOPIC_MATCHERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("call", ["lookup", "lookup_many", "lookup_flat"])
@pytest.mark.parametrize("fanout", [3, 40], ids=["short", "kept"])
def test_a_collection_during_a_lookup_may_write_to_the_matcher(cls, call, fanout):
    """A lookup's conversion reads the registry's table of objects, and its allocations may
    start a collection; a finalizer (here a collector callback) that subscribes or
    unsubscribes writes to that table. The collection waits until the conversion lets the
    table go, instead of the write waiting forever behind its own thread's read. Answers of 40
    subscribers are kept as tuples, made and replaced during the conversions, as well."""
    m = cls("amqp")
    for i in range(fanout):
        m.subscribe("t.*", f"q{i}")
    topics = [f"t.{i % 7}" for i in range(300)]
    want = sorted(f"q{i}" for i in range(fanout))
    results: list[list[str]] = []

    def look() -> None:
        for _ in range(3):
            if call == "lookup":
                results.extend(m.lookup(t) for t in topics[:100])
            elif call == "lookup_many":
                results.extend(m.lookup_many(topics))
            else:
                flat, ends = m.lookup_flat(topics)
                results.extend(flat[a:b] for a, b in itertools.pairwise(ends))

    writes = _writes_during_collections(m, look)
    assert writes > 0
    assert results
    assert all(sorted(r) == want for r in results)
    assert sorted(m.subscriptions()) == sorted(
        [("t.*", f"q{i}") for i in range(fanout)] + _left_by(writes)
    )


def _left_by(writes: int) -> list[tuple[str, str]]:
    """The subscription `_writes_during_collections` leaves after `writes` writes: the last
    one's, when it was a subscribe."""
    return [("audit.#", f"session-{writes - 1}")] if writes % 2 else []


def test_a_collection_during_subscribe_many_may_write_to_the_matcher():
    """`subscribe_many` holds the registry's slots while it hands out ids, and registering an
    id allocates; the collections it starts subscribe and unsubscribe on the same matcher."""
    m = tm.CSTrie("amqp")
    pairs = [(f"p.{i}", f"s{i}") for i in range(500)]
    writes = _writes_during_collections(m, lambda: m.subscribe_many(pairs))
    assert writes > 0
    assert sorted(m.subscriptions()) == sorted(pairs + _left_by(writes))


class Nosy:
    """All `Nosy` share one hash, so the registry's dict compares them with `__eq__`, which
    first runs `call` (a call back into the matcher) and records in `raised` (shared by the
    instances made with it) what that raised."""

    def __init__(self, key: int, call, raised: list[BaseException] | None = None) -> None:
        self.key = key
        self.call = call
        self.raised = [] if raised is None else raised

    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        if self.call is not None:
            try:
                self.call()
            except RuntimeError as e:
                self.raised.append(e)
        return isinstance(other, Nosy) and other.key == self.key


# What a subscriber's `__eq__` may try on its own matcher while the registry's lock is held.
CALLS_BACK = {
    "subscribe": lambda m: m.subscribe("x.y", "someone"),
    "unsubscribe": lambda m: m.unsubscribe("a.b", "someone"),
    "subscribe_many": lambda m: m.subscribe_many([("x.y", "someone")]),
    "remove_subscriber": lambda m: m.remove_subscriber("someone"),
}


@pytest.mark.parametrize("cls", TOPIC_MATCHERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("what", sorted(CALLS_BACK))
def test_an_eq_that_calls_the_matcher_back_gets_an_error(cls, what):
    """The call back finds the registry's lock held by its own thread: it raises
    `RuntimeError` instead of waiting forever (the build before hung here), and the outer
    call goes on as if `__eq__` had not called anything."""
    m = cls("amqp")
    call = CALLS_BACK[what]
    raised: list[BaseException] = []
    first = Nosy(1, lambda: call(m), raised)
    second = Nosy(2, lambda: call(m), raised)

    def body() -> None:
        assert m.subscribe("a.b", first) is True
        # `second` hashes like `first`: the dict compares them with `__eq__`.
        assert m.subscribe("a.b", second) is True
        assert raised, "__eq__ was not asked, or its call back did not raise"
        assert all("called its matcher back" in str(e) for e in raised)
        assert m.unsubscribe("a.b", second) is True

    _finishes(body)
    assert m.subscriptions() == [("a.b", first)]
    assert m.lookup("a.b") == [first]


def test_an_eq_may_read_its_matcher():
    """Lookups do not take the registry's slots: an `__eq__` that looks up goes through."""
    m = tm.CSTrie("amqp")
    seen: list[list[object]] = []
    raised: list[BaseException] = []

    def look() -> None:
        seen.append(m.lookup("a.b"))

    first = Nosy(1, look, raised)
    second = Nosy(2, look, raised)

    def body() -> None:
        m.subscribe("a.b", first)
        m.subscribe("a.b", second)

    _finishes(body)
    assert seen, "__eq__ was not asked"
    assert not raised
    assert all(s == [first] for s in seen)
    assert sorted(map(id, m.lookup("a.b"))) == sorted([id(first), id(second)])


def test_an_eq_that_takes_a_snapshot_gets_an_error_and_one_it_drops_is_forgotten():
    """A snapshot's number is taken under the lock: taking one from `__eq__` raises. One
    dropped there (made before) is forgotten by the next call that takes the lock, and the id
    it held is released then."""
    m = tm.CSTrie("amqp")
    m.subscribe("a.b", "gone")
    held = [m.snapshot()]
    assert m.unsubscribe("a.b", "gone") is True
    errors: list[BaseException] = []

    def in_eq() -> None:
        held.clear()  # drops the snapshot under the lock
        try:
            m.snapshot()
        except RuntimeError as e:
            errors.append(e)

    first = Nosy(1, in_eq)
    second = Nosy(2, in_eq)

    def body() -> None:
        m.subscribe("a.b", first)
        m.subscribe("a.b", second)
        assert not held
        m.subscribe("c.d", "after")  # takes the lock: forgets the dropped snapshot

    _finishes(body)
    assert errors and "called its matcher back" in str(errors[0])
    assert sorted(p for p, _ in m.subscriptions()) == ["a.b", "a.b", "c.d"]
    # The id "gone" had is free again: a new subscriber may get it and is answered as itself.
    m.subscribe("e.f", "new")
    assert m.lookup("e.f") == ["new"]
    assert m.lookup("a.b") != ["gone"]
