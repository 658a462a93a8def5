"""Every matcher equals an independent Python statement of the semantics (reference.py) on
random workloads that interleave subscribes, unsubscribes, removals and lookups, in every
dialect; `topicmatch.matches` equals it on random pairs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import patterns, topics

import topicmatch as tm

import reference
from conftest import TOPIC_MATCHERS


@st.composite
def workloads(draw):
    dialect = draw(st.sampled_from(tm.DIALECTS))
    op = st.one_of(
        st.tuples(st.just("sub"), patterns(dialect), st.integers(0, 4)),
        st.tuples(st.just("unsub"), patterns(dialect), st.integers(0, 4)),
        st.tuples(st.just("remove"), st.integers(0, 4)),
        st.tuples(st.just("lookup"), topics(dialect)),
    )
    return dialect, draw(st.lists(op, max_size=60))


@settings(max_examples=300, deadline=None)
@given(workloads())
def test_every_matcher_equals_the_reference(workload):
    dialect, ops = workload
    ms = [cls(dialect) for cls in TOPIC_MATCHERS]
    pairs: set[tuple[str, int]] = set()
    for op in ops:
        if op[0] == "sub":
            _, p, s = op
            expected = (p, s) not in pairs
            pairs.add((p, s))
            assert all(m.subscribe(p, s) is expected for m in ms)
        elif op[0] == "unsub":
            _, p, s = op
            expected = (p, s) in pairs
            pairs.discard((p, s))
            assert all(m.unsubscribe(p, s) is expected for m in ms)
        elif op[0] == "remove":
            mine = {x for x in pairs if x[1] == op[1]}
            pairs -= mine
            assert all(m.remove_subscriber(op[1]) == len(mine) for m in ms)
        else:
            t = op[1]
            want = sorted({s for p, s in pairs if reference.matches(dialect, p, t)})
            for m in ms:
                assert sorted(m.lookup(t)) == want, (type(m).__name__, dialect, t, pairs)
        for m in ms:
            assert len(m) == len(pairs)
    for m in ms:
        assert sorted(m.subscriptions()) == sorted(pairs)
        ts = [op[1] for op in ops if op[0] == "lookup"]
        want = [sorted({s for p, s in pairs if reference.matches(dialect, p, t)}) for t in ts]
        assert [sorted(r) for r in m.lookup_many(ts)] == want


@settings(max_examples=2000, deadline=None)
@given(
    st.sampled_from(tm.DIALECTS).flatmap(lambda d: st.tuples(st.just(d), patterns(d), topics(d)))
)
def test_matches_equals_the_reference(case):
    dialect, p, t = case
    assert tm.matches(p, t, dialect=dialect) is reference.matches(dialect, p, t)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(tm.DIALECTS), st.text(alphabet="ab+#*>/. $\0\t", max_size=8))
def test_validation_equals_the_reference(dialect, text):
    """Arbitrary strings over the characters that matter: valid exactly when the reference
    says so, and an invalid one raises the typed error."""
    m = tm.Trie(dialect)
    if reference.valid_pattern(dialect, text):
        m.subscribe(text, 1)
    else:
        try:
            m.subscribe(text, 1)
        except tm.InvalidPattern:
            pass
        else:
            raise AssertionError(f"{text!r} accepted as a {dialect} pattern")
    if reference.valid_topic(dialect, text):
        m.lookup(text)
    else:
        try:
            m.lookup(text)
        except tm.InvalidTopic:
            pass
        else:
            raise AssertionError(f"{text!r} accepted as a {dialect} topic")


@settings(max_examples=200, deadline=None)
@given(workloads(), st.sampled_from([1, 4, 16]))
def test_cached_results_equal_the_uncached_matcher(workload, cache_size):
    """The result cache (test_cache.py) never changes an answer; small caches evict."""
    dialect, ops = workload
    for cls in (tm.Trie, tm.CSTrie):
        cached, bare = cls(dialect, cache_size=cache_size), cls(dialect, cache_size=0)
        for op in ops:
            if op[0] == "sub":
                assert cached.subscribe(op[1], op[2]) == bare.subscribe(op[1], op[2])
            elif op[0] == "unsub":
                assert cached.unsubscribe(op[1], op[2]) == bare.unsubscribe(op[1], op[2])
            elif op[0] == "remove":
                assert cached.remove_subscriber(op[1]) == bare.remove_subscriber(op[1])
            else:
                # Twice: the second lookup may be a hit, and must equal the first.
                for _ in range(2):
                    assert sorted(cached.lookup(op[1])) == sorted(bare.lookup(op[1]))
        assert sorted(cached.subscriptions()) == sorted(bare.subscriptions())
