"""HeadersMatcher: RabbitMQ's headers-exchange rules, the OpenAMQ white paper's example, and a
brute-force check on random headers."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import topicmatch as tm


def white_paper() -> tm.HeadersMatcher:
    m = tm.HeadersMatcher()
    m.subscribe({"currency": "USD", "urgent": None}, "usd-urgent")
    m.subscribe({"currency": "EUR"}, "eur")
    m.subscribe({"market": "forex", "currency": "EUR"}, "forex-eur")
    m.subscribe({"urgent": None}, "urgent")
    return m


def test_white_paper_example():
    m = white_paper()
    slow = {"currency": "JPY", "market": "forex", "slow": ""}
    assert m.lookup(slow) == [] and m.hits(slow) == {"forex-eur": 1}
    urgent = {"currency": "JPY", "urgent": ""}
    assert m.lookup(urgent) == ["urgent"]
    assert m.hits(urgent) == {"usd-urgent": 1, "urgent": 1}
    eur = {"market": "forex", "currency": "EUR"}
    assert sorted(m.lookup(eur)) == ["eur", "forex-eur"]
    assert m.hits(eur) == {"eur": 1, "forex-eur": 2}


def test_any_and_x_criteria():
    m = tm.HeadersMatcher()
    m.subscribe({"a": "1", "b": "2"}, "any", match="any")
    m.subscribe({"x-trace": "on"}, "x-only")
    m.subscribe({"x-trace": "on"}, "with-x", match="all-with-x")
    assert sorted(m.lookup({"b": "2"})) == ["any", "x-only"]  # `all` of nothing counted holds
    assert sorted(m.lookup({"x-trace": "off"})) == ["x-only"]
    assert sorted(m.lookup({"x-trace": "on"})) == ["with-x", "x-only"]
    with pytest.raises(ValueError):
        m.subscribe({"a": "1"}, "s", match="most")
    with pytest.raises(TypeError):
        m.subscribe({"a": 1}, "s")
    assert len(m) == 3


def test_unsubscribe_remove_and_pickle():
    m = white_paper()
    assert m.unsubscribe({"currency": "EUR"}, "eur")
    assert not m.unsubscribe({"currency": "EUR"}, "eur")
    assert m.remove_subscriber("urgent") == 1
    back = pickle.loads(pickle.dumps(m))
    assert len(back) == 2
    assert sorted(map(repr, back.subscriptions())) == sorted(map(repr, m.subscriptions()))
    assert back.lookup({"market": "forex", "currency": "EUR"}) == ["forex-eur"]


NAMES = ["a", "b", "x-c"]
VALUES = ["1", "2"]


def brute_force(subs, headers):
    matched, hits = set(), {}
    for criteria, who, mode in subs:
        counted = {
            k: v for k, v in criteria.items() if mode.endswith("with-x") or not k.startswith("x-")
        }
        met = sum(1 for k, v in counted.items() if k in headers and (v is None or headers[k] == v))
        if met:
            hits[who] = max(hits.get(who, 0), met)
        if (met == len(counted)) if mode.startswith("all") else met > 0:
            matched.add(who)
    return matched, hits


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(st.sampled_from(NAMES), st.one_of(st.none(), st.sampled_from(VALUES))),
            st.integers(0, 4),
            st.sampled_from(["all", "any", "all-with-x", "any-with-x"]),
        ),
        max_size=12,
    ),
    st.lists(st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES)), max_size=6),
)
def test_equals_brute_force(subs, messages):
    m = tm.HeadersMatcher()
    kept = []
    for criteria, who, mode in subs:
        if m.subscribe(criteria, who, match=mode):
            kept.append((criteria, who, mode))
    for headers in messages:
        matched, hits = brute_force(kept, headers)
        assert set(m.lookup(headers)) == matched
        assert m.hits(headers) == hits
