"""Large answers: a repeated answer of many subscribers is copied from a tuple the matcher
keeps, never a stale one (subscribers come and go, their ids are reused); lookup_many leaves
the garbage collector as it found it; count, count_many and lookup_flat agree with lookup."""

from __future__ import annotations

import gc
import itertools
import weakref

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import topicmatch as tm

import reference
from conftest import TOPIC_MATCHERS

#: Past the length from which an answer is kept (32), with room.
CROWD = 48

PATTERNS = ["a.b", "a.*", "#", "*.b", "a.#", "c.*"]
TOPICS = ["a.b", "a.c", "c.b", "c.d"]


class Sub:
    """A subscriber equal only to itself, so a wrong object cannot pass for the right one."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __repr__(self) -> str:
        return f"Sub({self.n})"


def _matchers() -> list[tm.Trie]:
    ms = [cls("amqp") for cls in TOPIC_MATCHERS]
    ms += [tm.Trie("amqp", cache_size=64), tm.CSTrie("amqp", cache_size=64)]
    return ms


def _ids(objs) -> list[int]:
    return sorted(map(id, objs))


def _flat_ids(m, topics) -> list[list[int]]:
    """`lookup_flat`'s answers, one per topic, as `_ids`, after checking its shape."""
    flat, ends = m.lookup_flat(topics)
    assert len(ends) == len(topics) + 1 and ends[0] == 0 and ends[-1] == len(flat)
    assert all(a <= b for a, b in itertools.pairwise(ends))
    return [_ids(flat[a:b]) for a, b in itertools.pairwise(ends)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("crowd"), st.sampled_from(PATTERNS), st.integers(1, CROWD + 20)),
            st.tuples(st.just("leave"), st.integers(0, 200)),
            st.tuples(st.just("unsub"), st.sampled_from(PATTERNS), st.integers(0, 200)),
            st.tuples(st.just("lookup"), st.sampled_from(TOPICS)),
            st.tuples(st.just("many"), st.lists(st.sampled_from(TOPICS), max_size=6)),
        ),
        max_size=40,
    )
)
def test_large_answers_are_the_subscribers_of_now(ops):
    """Crowds of fresh subscriber objects join patterns, members leave (their ids are freed
    and handed to later crowds), and every lookup, repeated so that answers are kept, returns
    exactly the objects subscribed now, by identity."""
    ms = _matchers()
    pairs: list[tuple[str, Sub]] = []
    made = 0
    for op in ops:
        if op[0] == "crowd":
            _, p, n = op
            crowd = [Sub(made + i) for i in range(n)]
            made += n
            pairs += [(p, s) for s in crowd]
            for m in ms:
                m.subscribe_many([(p, s) for s in crowd])
        elif op[0] in ("leave", "unsub") and not pairs:
            continue
        elif op[0] == "leave":
            s = pairs[op[1] % len(pairs)][1]
            gone = [x for x in pairs if x[1] is s]
            pairs = [x for x in pairs if x[1] is not s]
            assert all(m.remove_subscriber(s) == len(gone) for m in ms)
        elif op[0] == "unsub":
            s = pairs[op[2] % len(pairs)][1]
            there = any(x[0] == op[1] and x[1] is s for x in pairs)
            pairs = [x for x in pairs if not (x[0] == op[1] and x[1] is s)]
            assert all(m.unsubscribe(op[1], s) is there for m in ms)
        else:
            ts = [op[1]] if op[0] == "lookup" else op[1]
            want = [_ids({s for p, s in pairs if reference.matches("amqp", p, t)}) for t in ts]
            for m in ms:
                for _ in range(3):  # the second conversion keeps the answer, the third copies
                    if op[0] == "lookup":
                        got = [_ids(m.lookup(ts[0]))]
                    else:
                        got = [_ids(r) for r in m.lookup_many(ts)]
                        assert _flat_ids(m, ts) == want, (type(m).__name__, ts)
                    assert got == want, (type(m).__name__, ts)


@pytest.mark.parametrize("cls", TOPIC_MATCHERS, ids=lambda c: c.__name__)
def test_a_kept_answer_never_outlives_its_subscribers(cls):
    """The same pattern, crowd after crowd of new objects: each crowd's ids are those the last
    one freed, so the ids of the answer repeat while its objects change."""
    m = cls("amqp")
    for round_ in range(30):
        crowd = [Sub(round_ * 100 + i) for i in range(CROWD)]
        m.subscribe_many([("a.*", s) for s in crowd])
        for _ in range(3):
            assert _ids(m.lookup("a.b")) == _ids(crowd)
            assert [_ids(r) for r in m.lookup_many(["a.b", "a.c"])] == [_ids(crowd)] * 2
            assert _flat_ids(m, ["a.b", "x", "a.c"]) == [_ids(crowd), [], _ids(crowd)]
        for s in crowd:
            m.remove_subscriber(s)
        assert m.lookup("a.b") == []


#: The matchers of `TOPIC_MATCHERS` but the scan, which 80,000 pairs would make slow, and the
#: tries without a cache, whose answers are kept under their topics.
BUDGET_MATCHERS = [c for c in TOPIC_MATCHERS if c.__name__ != "NaiveMatcher"]


@pytest.mark.parametrize(
    "make",
    [*BUDGET_MATCHERS, lambda d: tm.Trie(d, cache_size=0), lambda d: tm.CSTrie(d, cache_size=0)],
    ids=[*(c.__name__ for c in BUDGET_MATCHERS), "Trie-bare", "CSTrie-bare"],
)
def test_answers_past_the_budget_of_kept_topics_are_the_subscribers_of_now(make):
    """More large answers than the tuples kept under topics may hold (65,536 ids of answers
    under 1,024): some are kept, the rest converted. Each round a new object joins every
    crowd (the kept answers' ids are no longer the answer), then one member leaves (a
    release, whose freed id a later object takes): every lookup returns the objects
    subscribed now."""
    m = make("amqp")
    crowds = [[Sub(t * 10_000 + i) for i in range(500)] for t in range(160)]
    for t, crowd in enumerate(crowds):
        m.subscribe_many([(f"k{t}", s) for s in crowd])
    topics = [f"k{t}" for t in range(len(crowds))]

    def check() -> None:
        for _ in range(3):  # the second conversion keeps an answer, the third copies it
            want = [_ids(c) for c in crowds]
            assert [_ids(m.lookup(t)) for t in topics] == want
            assert [_ids(r) for r in m.lookup_many(topics)] == want
            assert _flat_ids(m, topics) == want

    made = 0
    for _ in range(3):
        check()
        for t, crowd in enumerate(crowds):
            crowd.append(Sub(1_000_000 + made))
            m.subscribe(f"k{t}", crowd[-1])
            made += 1
        check()
        for crowd in crowds:
            m.remove_subscriber(crowd.pop(made % len(crowd)))


@pytest.mark.parametrize(
    "make",
    [
        lambda: tm.Trie("mqtt", cache_size=64),
        lambda: tm.CSTrie("mqtt", cache_size=64),
        lambda: tm.LazyDFA("mqtt"),
    ],
    ids=["Trie", "CSTrie", "LazyDFA"],
)
def test_a_stored_large_answer_with_a_group_takes_a_member_in_turn(make):
    """A result cache (or a DFA state) stores the answer with the group in it; the kept tuple
    of a stored answer must never stand for it, or every message would go to the same
    member."""
    m = make()
    crowd = [Sub(i) for i in range(CROWD)]
    members = [Sub(1000), Sub(1001)]
    m.subscribe_many([("a/+", s) for s in crowd])
    for s in members:
        m.subscribe("a/+", s, group="g")
    plain = [Sub(2000 + i) for i in range(CROWD)]
    m.subscribe_many([("b/+", s) for s in plain])
    picked = []
    for _ in range(4):
        many_a, many_b = m.lookup_many(["a/x", "b/x"])
        flat, ends = m.lookup_flat(["a/x", "b/x"])
        flat_a, flat_b = flat[ends[0] : ends[1]], flat[ends[1] : ends[2]]
        for got in (many_a, m.lookup("a/x"), flat_a):
            assert len(got) == CROWD + 1 and set(map(id, got)) >= set(map(id, crowd))
            picked.append(next(s for s in got if s in members))
        assert _ids(many_b) == _ids(plain) == _ids(flat_b)
    assert set(map(id, picked)) == set(map(id, members))


@pytest.mark.parametrize("cls", TOPIC_MATCHERS, ids=lambda c: c.__name__)
def test_a_copied_answer_is_a_list_of_its_own(cls):
    m = cls("amqp", [("a.*", f"s{i}") for i in range(CROWD)])
    first = [m.lookup("a.b") for _ in range(3)]
    first[2].clear()
    first[1].append("not a subscriber")
    again = m.lookup("a.b")
    assert sorted(again) == sorted(f"s{i}" for i in range(CROWD))
    assert gc.is_tracked(again)


@pytest.mark.parametrize("enabled", [True, False])
def test_every_call_leaves_the_collector_as_it_was(enabled):
    """The registry pauses the collector while it holds its locks (docs/registry.md): every
    call that takes them, on success and on error, leaves it as the caller had it."""
    m = tm.CSTrie("mqtt", [("a/+", f"s{i}") for i in range(CROWD)])
    calls = [
        lambda: m.lookup("a/b"),
        lambda: m.lookup_many(["a/b", "a/c"]),
        lambda: m.lookup_flat(["a/b", "a/c"]),
        lambda: m.subscribe("b/+", "t"),
        lambda: m.subscribe_many([("c/+", "t"), ("c/#", "u")]),
        lambda: m.unsubscribe("b/+", "t"),
        lambda: m.remove_subscriber("u"),
        lambda: m.subscriptions(),
        lambda: m.snapshot().lookup("a/b"),
    ]
    failing = [
        lambda: m.lookup("a/#"),
        lambda: m.lookup_flat(["a/b", "a/#"]),
        lambda: m.subscribe_many([("d/+", "t"), ("d/#/x", "t")]),
        lambda: m.subscribe("e/+", ["unhashable"]),
    ]
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        for call in calls:
            call()
            assert gc.isenabled() is enabled
        for call in failing:
            with pytest.raises((tm.InvalidTopic, tm.InvalidPattern, TypeError)):
                call()
            assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_lookup_many_leaves_the_collector_as_it_was(enabled):
    m = tm.Trie("mqtt", [("a/+", f"s{i}") for i in range(CROWD)])
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        for _ in range(3):
            lists = m.lookup_many(["a/b"] * 1000)
            assert gc.isenabled() is enabled
        assert all(gc.is_tracked(x) for x in lists)
        with pytest.raises(tm.InvalidTopic):
            m.lookup_many(["a/b"] * 5000 + ["a/#"])
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


@pytest.mark.parametrize("cls", TOPIC_MATCHERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("dialect", tm.DIALECTS)
def test_count_is_the_length_of_the_lookup(cls, dialect):
    sep, one = reference.SEP[dialect], reference.ONE[dialect]
    m = cls(dialect)
    for i in range(60):
        m.subscribe(sep.join(["a", one]) if i % 2 else sep.join(["a", "b"]), i % 40)
    topics = [sep.join(["a", "b"]), sep.join(["a", "c"]), sep.join(["x", "y"])]
    assert [m.count(t) for t in topics] == [len(m.lookup(t)) for t in topics] == [40, 20, 0]
    assert m.count_many(topics) == [40, 20, 0]
    assert m.count_many([]) == []


@pytest.mark.parametrize("cls", TOPIC_MATCHERS, ids=lambda c: c.__name__)
def test_count_rejects_what_lookup_rejects(cls):
    m = cls("mqtt", [("a/+", "s")])
    with pytest.raises(tm.InvalidTopic):
        m.count("a/+")
    with pytest.raises(tm.InvalidTopic, match=r"topics\[1\]"):
        m.count_many(["a/b", "a/#"])
    with pytest.raises(TypeError):
        m.count(5)
    with pytest.raises(TypeError):
        m.count_many(["a/b", None])


@pytest.mark.parametrize("cls", TOPIC_MATCHERS, ids=lambda c: c.__name__)
def test_a_kept_answer_does_not_keep_its_subscribers_alive(cls):
    """A subscriber gone from the matcher is gone from its kept answers too: nothing in the
    matcher holds it (a broker's connection object must be freed when it leaves)."""
    m = cls("amqp")
    crowd = [Sub(i) for i in range(CROWD)]
    refs = [weakref.ref(s) for s in crowd]
    m.subscribe_many([("a.*", s) for s in crowd])
    for _ in range(3):
        assert len(m.lookup("a.b")) == CROWD
        assert [len(r) for r in m.lookup_many(["a.b", "a.c"])] == [CROWD, CROWD]
        assert m.lookup_flat(["a.b", "a.c"])[1] == [0, CROWD, 2 * CROWD]
    for s in crowd:
        m.remove_subscriber(s)
    del crowd, s
    gc.collect()
    assert [r() for r in refs] == [None] * CROWD
    assert m.lookup("a.b") == []


@pytest.mark.parametrize("cls", TOPIC_MATCHERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("dialect", tm.DIALECTS)
def test_lookup_flat_is_lookup_many_in_one_list(cls, dialect):
    """Small and large answers, repeated topics (a kept tuple copied in), and a batch long
    enough for the GIL rule to convert it in several slices."""
    sep, one = reference.SEP[dialect], reference.ONE[dialect]
    m = cls(dialect)
    subs = [Sub(i) for i in range(90)]
    for i in range(120):
        m.subscribe(sep.join(["a", one]) if i % 2 else sep.join(["a", "b"]), subs[i % 90])
    m.subscribe(sep.join(["c", "d"]), "one")
    topics = [sep.join(w) for w in (("a", "b"), ("c", "d"), ("x", "y"), ("a", "c"))] * 3000
    lists = m.lookup_many(topics)
    for _ in range(3):
        flat, ends = m.lookup_flat(topics)
        assert ends[-1] == sum(map(len, lists)) == len(flat)
        assert _flat_ids(m, topics) == [_ids(x) for x in lists]
    assert m.lookup_flat([]) == ([], [0])
    assert m.lookup_flat(iter(topics[:2]))[1] == [0, 90, 91]


@pytest.mark.parametrize("cls", TOPIC_MATCHERS, ids=lambda c: c.__name__)
def test_lookup_flat_rejects_what_lookup_many_rejects(cls):
    m = cls("mqtt", [("a/+", "s")])
    with pytest.raises(tm.InvalidTopic, match=r"topics\[1\]"):
        m.lookup_flat(["a/b", "a/#"])
    with pytest.raises(TypeError):
        m.lookup_flat(["a/b", None])
    with pytest.raises(TypeError):
        m.lookup_flat(5)
    assert m.lookup_flat(["a/b"]) == (["s"], [0, 1])


def test_a_flat_answer_is_a_list_of_its_own():
    m = tm.Trie("amqp", [("a.*", f"s{i}") for i in range(CROWD)])
    for _ in range(3):
        flat, ends = m.lookup_flat(["a.b", "a.b"])
        assert ends == [0, CROWD, 2 * CROWD]
        flat.clear()
        ends.append(7)
    again, ends = m.lookup_flat(["a.b"])
    assert sorted(again) == sorted(f"s{i}" for i in range(CROWD)) and ends == [0, CROWD]
    assert gc.is_tracked(again)
