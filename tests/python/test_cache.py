"""The result cache of `Trie` and `CSTrie`: it never changes an answer, counts what it does,
turns off with `cache_size=0`, validates its argument, survives pickling, gives snapshots a
cache of their own, and stays true while a writer races readers. The property that cached
answers equal uncached ones on random workloads is in test_oracle.py, with the other
hypothesis tests."""

from __future__ import annotations

import pickle
import threading

import pytest

import topicmatch as tm

CACHED = [tm.Trie, tm.CSTrie]
DEFAULT_CACHE_SIZE = 16384


@pytest.mark.parametrize("cls", CACHED)
def test_cache_stats_count_hits_misses_and_evictions(cls):
    m = cls("amqp", [("a.*", "x")], cache_size=4)
    assert m.cache_size == 4
    # A topic's first miss stores it where its set has room.
    for _ in range(3):
        assert m.lookup("a.b") == ["x"]
    s = m.cache_stats()
    assert (s["hits"], s["misses"], s["topics"], s["evictions"]) == (2, 1, 1, 0)
    assert s["capacity"] == 4 and s["admitting"] == 1 and 0 < s["bytes"] <= s["max_bytes"]
    # A write invalidates every entry: the next lookup misses, sees it, and stores at once
    # (a stale entry shows the topic was seen).
    m.subscribe("a.b", "y")
    assert sorted(m.lookup("a.b")) == ["x", "y"]
    assert sorted(m.lookup("a.b")) == ["x", "y"]
    s = m.cache_stats()
    assert (s["hits"], s["misses"]) == (3, 2)
    # Four ways in one set: the fifth topic, the set full, is only marked seen (the
    # doorkeeper) at its first miss, and evicts an entry of the current generation at its
    # second.
    for t in ("a.c", "a.d", "a.e", "a.f"):
        m.lookup(t)
        m.lookup(t)
    s = m.cache_stats()
    assert s["evictions"] == 1 and s["topics"] == 4
    assert set(s) == {
        "hits",
        "misses",
        "bypassed",
        "evictions",
        "topics",
        "bytes",
        "capacity",
        "max_bytes",
        "admitting",
    }


@pytest.mark.parametrize("cls", CACHED)
def test_cache_turns_itself_off_on_distinct_topics(cls):
    m = cls("amqp", [("users.*.events", 1)])
    for i in range(4096):
        assert m.lookup(f"users.{i}.events") == [1]
    s = m.cache_stats()
    assert s["admitting"] == 0 and s["bypassed"] > 0 and s["hits"] == 0
    assert s["misses"] == 4096


@pytest.mark.parametrize("cls", CACHED)
def test_cache_size_zero_disables_the_cache(cls):
    m = cls("mqtt", [("a/#", 1)], cache_size=0)
    assert m.cache_size == 0
    for _ in range(3):
        assert m.lookup("a/b") == [1]
    assert all(v == 0 for v in m.cache_stats().values())


@pytest.mark.parametrize("cls", CACHED)
def test_default_cache_size(cls):
    assert cls().cache_size == DEFAULT_CACHE_SIZE
    assert cls().cache_stats()["capacity"] == DEFAULT_CACHE_SIZE


@pytest.mark.parametrize("cls", CACHED)
@pytest.mark.parametrize("bad", [-1, 2**63, 2**24 + 1])
def test_out_of_range_cache_size_raises_value_error(cls, bad):
    with pytest.raises(ValueError, match="cache_size must be from 0"):
        cls(cache_size=bad)


@pytest.mark.parametrize("cls", CACHED)
@pytest.mark.parametrize("bad", [1.5, "10", None, True, [4]])
def test_non_int_cache_size_raises_type_error(cls, bad):
    with pytest.raises(TypeError, match="cache_size must be an int"):
        cls(cache_size=bad)


@pytest.mark.parametrize("cls", CACHED)
@pytest.mark.parametrize("size", [0, 7, DEFAULT_CACHE_SIZE])
def test_pickle_keeps_cache_size(cls, size):
    m = cls("nats", [("a.>", 1), ("a.b", "z")], cache_size=size)
    back = pickle.loads(pickle.dumps(m))
    assert back.cache_size == size
    assert sorted(back.lookup("a.b"), key=str) == [1, "z"]


def test_snapshot_has_a_cache_of_its_own_that_later_writes_do_not_reach():
    m = tm.CSTrie("mqtt", [("a/+", 1)], cache_size=8)
    assert m.lookup("a/b") == [1]
    snap = m.snapshot()
    assert snap.cache_size == 8 and snap.cache_stats()["misses"] == 0
    m.subscribe("a/b", 2)
    for _ in range(3):
        assert snap.lookup("a/b") == [1]
    assert snap.cache_stats()["hits"] == 2
    assert sorted(m.lookup("a/b")) == [1, 2]
    # The original's counters saw only its own lookups.
    assert m.cache_stats()["misses"] == 2 and m.cache_stats()["hits"] == 0
    assert pickle.loads(pickle.dumps(snap)).cache_size == 8


@pytest.mark.parametrize("cls", CACHED)
def test_eight_readers_see_every_write_that_returned(cls):
    """A writer subscribes `k.*` for 0..N-1 then unsubscribes them in order, publishing how
    many calls returned; a reader that saw `before` calls done, looked up, then saw `after`
    must get the state after m calls for some before <= m <= after + 1."""
    n, rounds = 50, 6
    m = cls("amqp", cache_size=4)
    done = [0]
    errors: list[str] = []

    def state_after(k: int) -> list[int]:
        k %= 2 * n
        return list(range(k)) if k <= n else list(range(k - n, n))

    def writer() -> None:
        for _ in range(rounds):
            for call in range(2 * n):
                if call < n:
                    assert m.subscribe("k.*", call)
                else:
                    assert m.unsubscribe("k.*", call - n)
                done[0] += 1

    def reader(r: int) -> None:
        i = r
        while done[0] < rounds * 2 * n and not errors:
            before = done[0]
            got = sorted(m.lookup(f"k.{i % 6}"))
            after = done[0]
            if not any(got == state_after(k) for k in range(before, after + 2)):
                errors.append(f"between {before} and {after}: {got}")
            i += 1

    threads = [threading.Thread(target=reader, args=(r,)) for r in range(8)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    s = m.cache_stats()
    assert s["hits"] + s["misses"] > 0


@pytest.mark.parametrize("cls", CACHED)
def test_batches_on_answers_past_the_prefetch_bytes_answer_as_single_lookups(cls):
    """Past 2 MiB of stored answers, `lookup_many`, `count_many` and `lookup_arrow` announce
    each batch's next topics to the cache: the answers stay those of `lookup`, topic by topic,
    with invalid topics, repeats and a write between batches among them."""
    pa = pytest.importorskip("pyarrow")
    m = cls(
        "mqtt", [("a/#", i) for i in range(1000)] + [("a/+/x", -1)], cache_size=DEFAULT_CACHE_SIZE
    )
    topics = [f"a/{i % 700}" for i in range(2000)]
    for t in topics[:700]:
        for _ in range(3):  # seen, stored, hit: the cache stays on
            m.lookup(t)
    assert m.cache_stats()["bytes"] >= 2 << 20  # each answer holds 1,000 ids
    batch = [t for i, t in enumerate(topics) for t in ([t, f"a/{i}/x"] if i % 5 == 0 else [t])]
    for write in (None, ("a/+/x", -2), ("a/#", 5000)):
        if write is not None:
            m.subscribe(*write)
        want = [sorted(m.lookup(t)) for t in batch]
        assert [sorted(a) for a in m.lookup_many(batch)] == want
        assert m.count_many(batch) == [len(a) for a in want]
        ids, reasons = m.lookup_arrow(pa.array(batch))
        assert reasons.null_count == len(batch)
        assert [sorted(a) for a in ids.to_pylist()] == want
    with pytest.raises(tm.InvalidTopic, match=r"topics\[3\]"):
        m.lookup_many(topics[:3] + ["a/+"] + topics[3:])
