"""SelectorIndex: Mercure-style selectors, with any hashable subscriber, checked against a
brute-force evaluation on random workloads with a cache smaller than the topic space."""

from __future__ import annotations

import pickle
import re
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import topicmatch as tm

BOOKS = "https://example.com/books/{id}"


def test_selector_forms():
    idx = tm.SelectorIndex()
    assert idx.subscribe(BOOKS, "template")
    assert idx.subscribe("https://example.com/books/1", "exact")
    assert idx.subscribe("re:https://example\\.com/authors/[0-9]+", "regex")
    assert idx.subscribe("*", "all")
    assert not idx.subscribe(BOOKS, "template")
    assert sorted(idx.lookup("https://example.com/books/1")) == ["all", "exact", "template"]
    assert sorted(idx.lookup("https://example.com/books/2")) == ["all", "template"]
    assert sorted(idx.lookup(["https://example.com/authors/7", "x"])) == ["all", "regex"]
    assert idx.lookup("https://example.com/authors/x7") == ["all"]  # re: matches the whole topic
    assert len(idx) == 4


@pytest.mark.parametrize(
    "template, topic, admitted",
    [
        ("https://example.com/{+path}", "https://example.com/a/b/c", True),
        ("https://example.com/users{/id}", "https://example.com/users/42", True),
        ("https://example.com/search{?q,lang}", "https://example.com/search?q=x&lang=en", True),
        ("https://example.com/search{?q}", "https://example.com/search?lang=en", False),
        ("https://example.com/books/{id}", "https://example.com/books/1/chapters", False),
        ("https://example.com/{id}.json", "https://example.com/7.json", True),
        ("https://example.com/page{#section}", "https://example.com/page#intro", True),
        ("https://example.com/file{.ext}", "https://example.com/file.txt", True),
    ],
)
def test_uri_templates(template, topic, admitted):
    idx = tm.SelectorIndex()
    idx.subscribe(template, 1)
    assert (idx.lookup(topic) == [1]) is admitted


def test_invalid_selectors_raise_invalid_pattern_and_change_nothing():
    idx = tm.SelectorIndex()
    for bad in ("re:(unclosed", "", "re:"):
        with pytest.raises(tm.InvalidPattern):
            idx.subscribe(bad, "s")
    assert len(idx) == 0 and idx.subscriptions() == []
    idx.subscribe("a", "s")
    assert idx.lookup("a") == ["s"]


def test_a_selector_that_is_no_template_admits_only_itself():
    # Mercure (topic_selector.go) compares a selector with the topic before it tries it as a
    # template, and a selector that does not parse as a template matches nothing else.
    idx = tm.SelectorIndex()
    for text in ("https://example.com/{id", "https://example.com/{}", "a/{x y}"):
        idx.subscribe(text, text)
    assert idx.lookup("https://example.com/{id") == ["https://example.com/{id"]
    assert idx.lookup("a/{x y}") == ["a/{x y}"]
    assert idx.lookup("https://example.com/1") == []
    assert idx.lookup("https://example.com/") == []
    assert idx.unsubscribe("https://example.com/{}", "https://example.com/{}")


def test_unsubscribe_of_an_invalid_selector_raises_even_for_an_unknown_subscriber():
    # Found by the atheris harness: the binding answered False without asking the core.
    idx = tm.SelectorIndex()
    for bad in ("re:(", "re:", ""):
        with pytest.raises(tm.InvalidPattern):
            idx.unsubscribe(bad, "nobody")
    idx.subscribe("a", "s")
    with pytest.raises(tm.InvalidPattern):
        idx.unsubscribe("re:(", "s")


def test_lookup_takes_one_topic_as_bytes():
    # Found by the atheris harness: bytes were iterated as a list of ints.
    idx = tm.SelectorIndex()
    idx.subscribe("https://example.com/books/{id}", "r")
    assert idx.lookup(b"https://example.com/books/1") == ["r"]
    assert idx.lookup([b"https://example.com/books/1"]) == ["r"]
    with pytest.raises(tm.InvalidTopic):
        idx.lookup(b"\xff")


def test_cache_stats_count_hits_and_misses():
    idx = tm.SelectorIndex(cache_size=2)
    idx.subscribe(BOOKS, 1)
    for topic in ("https://example.com/books/1", "https://example.com/books/1", "b", "c"):
        idx.lookup(topic)
    stats = idx.cache_stats()
    assert stats["hits"] == 1 and stats["misses"] == 3
    assert stats["capacity"] == 2 and stats["topics"] <= 2 and stats["evictions"] >= 1


def test_pickle_keeps_pairs_and_cache_size():
    idx = tm.SelectorIndex(cache_size=7, subscriptions=[(BOOKS, ("a", 1)), ("*", "b")])
    back = pickle.loads(pickle.dumps(idx))
    assert repr(back) == "SelectorIndex(cache_size=7, subscriptions=2)"
    assert sorted(map(repr, back.lookup("https://example.com/books/3"))) == ["'b'", "('a', 1)"]


TOPICS = [f"https://example.com/{kind}/{i}" for kind in ("books", "users") for i in range(4)]
SELECTORS = [
    "*",
    "https://example.com/books/{id}",
    "https://example.com/users/{id}",
    "https://example.com/{kind}/1",
    "re:.*/(books|users)/[02]",
    *TOPICS[:3],
]


def admits(selector: str, topic: str) -> bool:
    """Brute force for the selectors above: templates spelled as the regexes they stand for."""
    if selector == "*":
        return True
    if selector.startswith("re:"):
        return re.fullmatch(selector[3:], topic) is not None
    if "{" in selector:
        pattern = re.escape(selector).replace(r"\{id\}", "[^/]+").replace(r"\{kind\}", "[^/]+")
        return re.fullmatch(pattern, topic) is not None
    return selector == topic


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("sub"), st.sampled_from(SELECTORS), st.integers(0, 5)),
            st.tuples(st.just("unsub"), st.sampled_from(SELECTORS), st.integers(0, 5)),
            st.tuples(st.just("remove"), st.integers(0, 5)),
            st.tuples(st.just("lookup"), st.lists(st.sampled_from(TOPICS), min_size=1, max_size=2)),
        ),
        max_size=80,
    )
)
def test_equals_brute_force_with_a_small_cache(ops):
    idx = tm.SelectorIndex(cache_size=3)
    pairs: set[tuple[str, int]] = set()
    for op in ops:
        if op[0] == "sub":
            assert idx.subscribe(op[1], op[2]) is ((op[1], op[2]) not in pairs)
            pairs.add((op[1], op[2]))
        elif op[0] == "unsub":
            assert idx.unsubscribe(op[1], op[2]) is ((op[1], op[2]) in pairs)
            pairs.discard((op[1], op[2]))
        elif op[0] == "remove":
            mine = {p for p in pairs if p[1] == op[1]}
            assert idx.remove_subscriber(op[1]) == len(mine)
            pairs -= mine
        else:
            want = sorted({s for sel, s in pairs for t in op[1] if admits(sel, t)})
            assert sorted(idx.lookup(op[1])) == want
        assert len(idx) == len(pairs)
    assert sorted(idx.subscriptions()) == sorted(pairs)


def test_threads_subscribe_and_look_up_at_once():
    idx = tm.SelectorIndex(cache_size=4)
    errors: list[BaseException] = []

    def work(w: int) -> None:
        try:
            for i in range(300):
                idx.subscribe(f"https://example.com/t{w}/{{id}}", (w, i % 5))
                got = idx.lookup(f"https://example.com/t{w}/{i}")
                assert (w, i % 5) in got
                if i % 7 == 0:
                    idx.unsubscribe(f"https://example.com/t{w}/{{id}}", (w, i % 5))
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
