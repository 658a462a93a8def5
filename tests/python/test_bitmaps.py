"""The bitmap topic matchers' own options (every shared behaviour runs in test_api.py and
test_oracle.py against every matcher, these included)."""

from __future__ import annotations

import pickle
import random

import pytest

import topicmatch as tm

import reference


def test_inverted_bitmap_cache_size_is_kept_by_pickle():
    m = tm.InvertedBitmap("mqtt", [("a/+", 1)], cache_size=3)
    assert m.cache_size == 3 and tm.InvertedBitmap().cache_size == 100_000
    back = pickle.loads(pickle.dumps(m))
    assert back.cache_size == 3 and back.lookup("a/b") == [1]


@pytest.mark.parametrize("cache_size", [0, 1, 3])
@pytest.mark.parametrize("dialect", tm.DIALECTS)
def test_inverted_bitmap_with_a_cache_smaller_than_the_topics(cache_size, dialect):
    rng = random.Random(cache_size)
    sep, one, many = reference.SEP[dialect], reference.ONE[dialect], reference.MANY[dialect]
    words = ["a", "b", "c"]
    m = tm.InvertedBitmap(dialect, cache_size=cache_size)
    pairs: set[tuple[str, int]] = set()
    for _ in range(600):
        pattern = sep.join(rng.choice([*words, one]) for _ in range(rng.randint(1, 3)))
        if rng.random() < 0.3:
            pattern += sep + many
        who = rng.randrange(4)
        if rng.random() < 0.6:
            m.subscribe(pattern, who)
            pairs.add((pattern, who))
        else:
            m.unsubscribe(pattern, who)
            pairs.discard((pattern, who))
        topic = sep.join(rng.choice(words) for _ in range(rng.randint(1, 4)))
        want = sorted({s for p, s in pairs if reference.matches(dialect, p, topic)})
        assert sorted(m.lookup(topic)) == want
