"""LazyDFA's own options and the cases its cache makes risky (every shared behaviour runs in
test_api.py, test_oracle.py and the rest against every matcher, LazyDFA included).

The DFA keeps its states across writes and patches only the ones a write concerns, so the
answers that matter most are those of a topic looked up, then written to, then looked up again;
and with a budget of a few hundred bytes every lookup flushes the cache or falls back to the
NFA, which the default budget never does on these sizes. Each is checked against the plain
statement of the semantics in reference.py.
"""

from __future__ import annotations

import pickle
import random
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import patterns, topics

import topicmatch as tm
from topicmatch import _core

import reference

DEFAULT_BUDGET = 64 * 2**20
#: Budgets side by side on every program: the default, none at all (every lookup simulates the
#: NFA), one that holds a state or two, and one that holds a few before it flushes.
BUDGETS = (DEFAULT_BUDGET, 0, 300, 2000)
STATS_KEYS = {
    "states",
    "transitions",
    "bytes",
    "budget",
    "flushes",
    "fallbacks",
    "invalidations",
    "compactions",
    "nodes",
}


def expected(dialect: str, pairs: set[tuple[str, int]], topic: str) -> list[int]:
    return sorted({s for p, s in pairs if reference.matches(dialect, p, topic)})


def check_all(ms: list[tm.LazyDFA], dialect: str, pairs, pool: list[str], context) -> None:
    """Every topic of `pool` on every matcher, one by one and as one batch."""
    want = [expected(dialect, pairs, t) for t in pool]
    for m in ms:
        for t, w in zip(pool, want, strict=True):
            got = m.lookup(t)
            assert len(got) == len(set(got)), (m.cache_bytes, t, got, context)
            assert sorted(got) == w, (m.cache_bytes, dialect, t, sorted(pairs), context)
        assert [sorted(r) for r in m.lookup_many(pool)] == want, (m.cache_bytes, context)


# -- against the reference, writes between lookups of the same topics -------------------------


@st.composite
def programs(draw, dialect):
    """A pool of topics and writes to run between lookups of them. `unsub_held` and
    `remove_held` pick a pair that is there, which random patterns seldom are."""
    pool = draw(st.lists(topics(dialect), min_size=1, max_size=6, unique=True))
    op = st.one_of(
        st.tuples(st.just("sub"), patterns(dialect), st.integers(0, 3)),
        st.tuples(st.just("sub"), patterns(dialect), st.integers(0, 3)),
        st.tuples(st.just("unsub"), patterns(dialect), st.integers(0, 3)),
        st.tuples(st.just("unsub_held"), st.integers(0, 1000)),
        st.tuples(st.just("remove"), st.integers(0, 3)),
        st.tuples(st.just("lookup"), st.integers(0, len(pool) - 1)),
        st.tuples(st.just("clear"), st.integers(0, len(BUDGETS) - 1)),
    )
    return pool, draw(st.lists(op, max_size=40))


def run_program(dialect: str, pool: list[str], ops: list[tuple]) -> None:
    ms = [tm.LazyDFA(dialect, cache_bytes=b) for b in BUDGETS]
    pairs: set[tuple[str, int]] = set()
    # Warm every state the pool's topics reach before the first write.
    check_all(ms, dialect, pairs, pool, "start")
    for step, op in enumerate(ops):
        context = (step, op)
        if op[0] == "sub":
            _, p, s = op
            new = (p, s) not in pairs
            pairs.add((p, s))
            assert [m.subscribe(p, s) for m in ms] == [new] * len(ms), context
        elif op[0] in ("unsub", "unsub_held"):
            if op[0] == "unsub":
                p, s = op[1], op[2]
            elif pairs:
                p, s = sorted(pairs)[op[1] % len(pairs)]
            else:
                continue
            held = (p, s) in pairs
            pairs.discard((p, s))
            assert [m.unsubscribe(p, s) for m in ms] == [held] * len(ms), context
        elif op[0] == "remove":
            theirs = {x for x in pairs if x[1] == op[1]}
            pairs -= theirs
            assert [m.remove_subscriber(op[1]) for m in ms] == [len(theirs)] * len(ms), context
        elif op[0] == "clear":
            ms[op[1]].clear_cache()
            assert ms[op[1]].stats()["states"] == 0
        else:
            t = pool[op[1]]
            assert all(sorted(m.lookup(t)) == expected(dialect, pairs, t) for m in ms), context
            continue
        for m in ms:
            assert len(m) == len(pairs)
        check_all(ms, dialect, pairs, pool, context)
    for m in ms:
        assert sorted(m.subscriptions()) == sorted(pairs)


@pytest.mark.parametrize("dialect", tm.DIALECTS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_lookups_between_writes_equal_the_reference(dialect, data):
    pool, ops = data.draw(programs(dialect))
    run_program(dialect, pool, ops)


def translate(dialect: str, text: str) -> str:
    """A pattern or topic written with AMQP's separator and wildcards, in `dialect`."""
    if text == "":
        return text
    words = text.split(".")
    swap = {"*": reference.ONE[dialect], "#": reference.MANY[dialect]}
    return reference.SEP[dialect].join(swap.get(w, w) for w in words)


#: Writes that change a state already built, each followed by lookups of the topics the state
#: serves: a literal child where the default edge was taken, a wildcard child below a state,
#: a subscriber added or removed at a node of a state's closure, a subscriber held by two of
#: the state's nodes losing one of them.
WARM_CASES = [
    [("sub", "a.*", 1), ("sub", "a.b", 2), ("unsub", "a.*", 1), ("sub", "a.*", 1)],
    [("sub", "a.b", 1), ("sub", "a.*.c", 2), ("sub", "a.#", 3), ("remove", 3), ("sub", "#", 4)],
    [("sub", "a.*", 5), ("sub", "a.b", 5), ("unsub", "a.*", 5), ("unsub", "a.b", 5)],
    [("sub", "*.b", 1), ("sub", "a.*", 2), ("sub", "a.b", 3), ("remove", 2), ("remove", 1)],
    [("sub", "*.*", 1), ("sub", "*", 2), ("sub", "c", 3), ("sub", "c.c", 4), ("remove", 2)],
    [("sub", "$s.#", 1), ("sub", "#", 2), ("sub", "*.b", 3), ("sub", "$s.b", 4), ("remove", 1)],
    [("sub", "a.b.c", 1), ("sub", "a.b.#", 2), ("unsub", "a.b.c", 1), ("sub", "a.*.c", 1)],
]
WARM_TOPICS = ["a", "a.b", "a.c", "a.b.c", "b.b", "c", "c.c", "$s", "$s.b", "x.a.b", "a.b.c.d"]


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("dialect", tm.DIALECTS)
@pytest.mark.parametrize("case", range(len(WARM_CASES)))
def test_a_write_updates_the_states_already_built(case, dialect, budget):
    pool = [translate(dialect, t) for t in WARM_TOPICS]
    ops = []
    for op in WARM_CASES[case]:
        if op[0] in ("sub", "unsub"):
            ops.append((op[0], translate(dialect, op[1]), op[2]))
        else:
            ops.append(op)
    m = tm.LazyDFA(dialect, cache_bytes=budget)
    pairs: set[tuple[str, int]] = set()
    check_all([m], dialect, pairs, pool, "start")
    for op in ops:
        if op[0] == "sub":
            assert m.subscribe(op[1], op[2])
            pairs.add((op[1], op[2]))
        elif op[0] == "unsub":
            assert m.unsubscribe(op[1], op[2])
            pairs.discard((op[1], op[2]))
        else:
            theirs = {x for x in pairs if x[1] == op[1]}
            assert m.remove_subscriber(op[1]) == len(theirs)
            pairs -= theirs
        check_all([m], dialect, pairs, pool, op)


@pytest.mark.parametrize("dialect", tm.DIALECTS)
def test_a_wildcard_below_a_built_state_invalidates_it(dialect):
    t = translate(dialect, "a.b.c")
    m = tm.LazyDFA(dialect, [(translate(dialect, "a.b.c"), 1)])
    assert m.lookup(t) == [1]
    before = m.stats()["invalidations"]
    m.subscribe(translate(dialect, "a.*.c"), 2)
    assert sorted(m.lookup(t)) == [1, 2]
    assert m.stats()["invalidations"] > before


# -- a budget too small for the lookups -------------------------------------------------------


def random_pairs(dialect: str, rng: random.Random, n: int) -> set[tuple[str, int]]:
    sep, one, many = reference.SEP[dialect], reference.ONE[dialect], reference.MANY[dialect]
    pairs = set()
    for i in range(n):
        ws = [rng.choice(["a", "b", "c", "d", one, one]) for _ in range(rng.randint(1, 6))]
        if dialect == "amqp":
            for _ in range(rng.randint(0, 2)):
                ws.insert(rng.randrange(len(ws) + 1), many)
        elif rng.random() < 0.4:
            ws.append(many)
        pairs.add((sep.join(ws), i % 10))
    return pairs


@pytest.mark.parametrize("budget", [300, 2000])
@pytest.mark.parametrize("dialect", tm.DIALECTS)
def test_a_tiny_budget_flushes_and_falls_back_and_answers_the_same(dialect, budget):
    rng = random.Random(budget)
    sep = reference.SEP[dialect]
    pairs = random_pairs(dialect, rng, 60)
    m = tm.LazyDFA(dialect, pairs, cache_bytes=budget)
    pool = [sep.join(rng.choice("abcd") for _ in range(rng.randint(1, 12))) for _ in range(150)]
    for _ in range(2):
        for t in pool:
            assert sorted(m.lookup(t)) == expected(dialect, pairs, t), t
    want = [expected(dialect, pairs, t) for t in pool]
    assert [sorted(r) for r in m.lookup_many(pool)] == want
    s = m.stats()
    assert s["budget"] == budget
    assert s["flushes"] > 0 and s["fallbacks"] > 0, s


@pytest.mark.parametrize("dialect", tm.DIALECTS)
def test_a_warm_lookup_builds_nothing_new(dialect):
    sep = reference.SEP[dialect]
    m = tm.LazyDFA(dialect, random_pairs(dialect, random.Random(3), 40))
    topics_ = [sep.join(w) for w in ("abc", "abcd", "dcba", "a", "bb")]
    first = m.lookup_many(topics_)
    s = m.stats()
    assert s["states"] > 0 and s["transitions"] > 0
    assert m.lookup_many(topics_) == first
    again = m.stats()
    assert (again["states"], again["transitions"]) == (s["states"], s["transitions"])
    assert again["flushes"] == again["fallbacks"] == 0


def test_emptied_branches_compact_the_nfa_and_lookups_stay_right():
    rng = random.Random(5)
    m = tm.LazyDFA("amqp")
    pairs = {(f"k{i}.x{i}.y{i}.*", i % 7) for i in range(600)}
    keep = {("k1.#", 1), ("*.x2.#", 2)}
    pool = ["k1.x1.y1.z", "k2.x2.y2.z", "k3.x3", "k1"]
    m.subscribe_many(sorted(pairs | keep))
    check_all([m], "amqp", pairs | keep, pool, "full")
    left = set(pairs)
    for k, (p, s) in enumerate(rng.sample(sorted(pairs), len(pairs))):
        assert m.unsubscribe(p, s)
        left.discard((p, s))
        if k % 50 == 0:
            check_all([m], "amqp", left | keep, pool, k)
    assert m.stats()["compactions"] > 0
    check_all([m], "amqp", keep, pool, "emptied")


# -- the Python class ------------------------------------------------------------------------


def test_defaults_and_stats():
    m = tm.LazyDFA()
    assert m.dialect == "amqp" and m.cache_bytes == DEFAULT_BUDGET
    s = m.stats()
    assert set(s) == STATS_KEYS
    assert all(type(v) is int and v >= 0 for v in s.values())
    assert s["budget"] == DEFAULT_BUDGET and s["states"] == 0
    m.subscribe("a.*", 1)
    assert m.stats()["nodes"] > s["nodes"]
    assert tm.LazyDFA("nats", None, 4096).cache_bytes == 4096
    assert tm.LazyDFA.__doc__ == (
        "The lazy DFA of RabbitMQ's topic-exchange study: DFA states built while matching, "
        "within a memory budget."
    )


def test_clear_cache_drops_the_states_and_keeps_the_answers():
    m = tm.LazyDFA("mqtt", [("a/+", 1), ("a/#", 2), ("+/b", 3)])
    assert sorted(m.lookup("a/b")) == [1, 2, 3]
    assert m.stats()["states"] > 0
    m.clear_cache()
    s = m.stats()
    assert s["states"] == 0 and s["transitions"] == 0 and s["flushes"] == 0
    assert sorted(m.lookup("a/b")) == [1, 2, 3]
    assert m.stats()["states"] > 0


def test_repr():
    m = tm.LazyDFA("nats", [("a.>", 1), ("a.*", 2)], cache_bytes=1000)
    assert repr(m) == 'LazyDFA(dialect="nats", subscriptions=2)'
    assert repr(tm.LazyDFA()) == 'LazyDFA(dialect="amqp", subscriptions=0)'


@pytest.mark.parametrize("budget", [DEFAULT_BUDGET, 0, 5000])
def test_pickle_keeps_the_patterns_and_the_budget_not_the_cache(budget):
    pairs = [("a/+", 1), ("a/#", "x"), ("$SYS/#", (2, 3))]
    m = tm.LazyDFA("mqtt", pairs, cache_bytes=budget)
    m.subscribe("a/b", "member", group="g")
    assert sorted(m.lookup("a/b"), key=repr) == sorted([1, "x", "member"], key=repr)
    if budget:
        assert m.stats()["states"] > 0
    back = pickle.loads(pickle.dumps(m))
    assert type(back) is tm.LazyDFA
    assert back.cache_bytes == budget and back.dialect == "mqtt"
    assert sorted(back.subscriptions(), key=repr) == sorted(m.subscriptions(), key=repr)
    assert back.group_subscriptions() == m.group_subscriptions() == [("g", "a/b", "member")]
    assert back.stats()["states"] == 0 and back.stats()["budget"] == budget
    for t in ("a/b", "a", "$SYS/x", "b"):
        assert sorted(back.lookup(t), key=repr) == sorted(m.lookup(t), key=repr)
    cls, args, state = m.__reduce__()
    assert cls is tm.LazyDFA and args[0] == "mqtt" and args[2] == budget and state == 1


@pytest.mark.parametrize(
    "value, error, message",
    [
        (True, TypeError, "cache_bytes must be an int, not bool"),
        (1.5, TypeError, "cache_bytes must be an int, not float"),
        ("64", TypeError, "cache_bytes must be an int, not str"),
        (None, TypeError, "cache_bytes must be an int, not NoneType"),
        (-1, ValueError, "cache_bytes must be from 0 to .* bytes, not -1"),
        (2**64, ValueError, "not 18446744073709551616"),
        (2**200, ValueError, "cache_bytes must be from 0"),
    ],
)
def test_a_bad_cache_bytes_is_refused(value, error, message):
    with pytest.raises(error, match=message) as e:
        tm.LazyDFA("amqp", cache_bytes=value)
    assert not isinstance(e.value, OverflowError)


def test_the_largest_budget_is_taken():
    m = tm.LazyDFA("amqp", [("a.#", 1)], cache_bytes=2**64 - 1)
    assert m.cache_bytes == 2**64 - 1 and m.lookup("a.b") == [1]


def test_resolve_matcher_finds_it():
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from topicmatch import spark as tms

    assert tms.resolve_matcher("LazyDFA") is tm.LazyDFA
    assert tms.resolve_matcher("lazydfa") is tm.LazyDFA


# -- lookups from several threads beside a writer ---------------------------------------------


@pytest.mark.parametrize("budget", [DEFAULT_BUDGET, 2000])
@pytest.mark.parametrize("dialect", tm.DIALECTS)
def test_threads_look_up_while_one_writes(dialect, budget):
    """lookup_many releases the GIL, so the readers walk the DFA while the writer changes it.
    The stable pairs never change: each answer holds exactly the stable subscribers the
    reference gives, `anchor` always, and nothing else but churned subscribers that some
    churned pattern matches."""
    rng = random.Random(11)
    sep, many = reference.SEP[dialect], reference.MANY[dialect]
    stable = {(p, f"s{s}") for p, s in random_pairs(dialect, rng, 30)}
    stable.add((many, "anchor"))
    churned = sorted({(p, f"c{s}") for p, s in random_pairs(dialect, rng, 60)})
    m = tm.LazyDFA(dialect, stable, cache_bytes=budget)
    pool = [sep.join(rng.choice("abcd") for _ in range(rng.randint(1, 8))) for _ in range(200)]
    want_stable = [set(expected(dialect, stable, t)) for t in pool]
    could = [{s for p, s in churned if reference.matches(dialect, p, t)} for t in pool]
    batch = pool * 40
    stop = threading.Event()
    failures: list[str] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                for i, got in enumerate(m.lookup_many(batch)):
                    k = i % len(pool)
                    gs = set(got)
                    if (
                        len(got) != len(gs)
                        or {s for s in gs if s.startswith("s") or s == "anchor"} != want_stable[k]
                        or not gs - want_stable[k] <= could[k]
                    ):
                        failures.append(f"{pool[k]!r}: got {sorted(got)}")
                        stop.set()
                        return
        except Exception as e:  # reported below, not lost in the thread
            failures.append(repr(e))
            stop.set()

    released = _core._gil_stats()["released"]
    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 1.0
    try:
        round_ = 0
        while time.monotonic() < deadline and not stop.is_set():
            round_ += 1
            for p, s in rng.sample(churned, 20):
                m.subscribe(p, s)
            m.lookup(pool[round_ % len(pool)])
            for p, s in rng.sample(churned, 10):
                m.unsubscribe(p, s)
            m.remove_subscriber(f"c{round_ % 10}")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert failures == []
    assert _core._gil_stats()["released"] > released
    assert sorted(m.lookup(pool[0])) == sorted(
        set(expected(dialect, set(m.subscriptions()), pool[0]))
    )
