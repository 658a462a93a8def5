"""Soak: subscribe/unsubscribe churn with Python objects as subscribers while threads look up,
on every matcher. After a warm-up, the process's resident memory must come back within a
tolerance, and every subscriber object must be freed once its pairs (and any snapshot holding
it) are gone.

`SOAK_ROUNDS` sets the measured rounds per matcher (50 by default, a second or two each);
`make soak` runs thousands and prints the figures (run pytest with `-s` to see them).
"""

from __future__ import annotations

import ctypes
import gc
import os
import threading
import time
import weakref

import pytest

import topicmatch as tm

ROUNDS = int(os.environ.get("SOAK_ROUNDS", "50"))
#: Pairs one round subscribes and then removes.
PAIRS = 500
#: Resident memory a drained matcher may keep above its warmed-up level: allocator arenas and
#: free lists that glibc keeps. A leak of one small object per pair is megabytes over the long
#: run; the long run's figures are in README.md, "Reliability".
TOLERANCE = 8 * 1024 * 1024

try:
    _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):  # not glibc
    _malloc_trim = None


def rss() -> int:
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Conn:
    """A subscriber compared by identity, as a connection object would be."""

    __slots__ = ("__weakref__", "n")

    def __init__(self, n: int) -> None:
        self.n = n


WORDS = ["a", "b", "c", "d"]


class Topics:
    """Adapter for the topic matchers (AMQP dialect)."""

    def __init__(self, cls) -> None:
        self.m = cls("amqp")
        self.snapshots: list[tm.CSTrie] = []

    def key(self, i: int) -> str:
        w = [WORDS[(i >> s) % 4] for s in (0, 2, 4)]
        return ".".join([*w[: 1 + i % 3], "#" if i % 5 == 0 else "*"])

    def subscribe(self, key: str, who: object) -> None:
        self.m.subscribe(key, who)

    def unsubscribe(self, key: str, who: object) -> None:
        self.m.unsubscribe(key, who)

    def remove(self, who: object) -> None:
        self.m.remove_subscriber(who)

    def lookup(self, i: int) -> None:
        self.m.lookup(".".join(WORDS[(i >> s) % 4] for s in (0, 2, 4)))
        if i % 16 == 0:
            self.m.lookup_many(["a.b.c", "b", "c.d"] * 8)
        for snap in self.snapshots[-1:]:
            snap.lookup("a.b.c")

    def between(self, round_: int) -> None:
        if isinstance(self.m, tm.CSTrie):
            self.snapshots.append(self.m.snapshot())
            if len(self.snapshots) > 2:
                self.snapshots.pop(round_ % 3)

    def drain(self) -> None:
        self.snapshots.clear()

    def __len__(self) -> int:
        return len(self.m)


class Headers(Topics):
    def __init__(self, cls) -> None:
        self.m, self.snapshots = cls(), []

    def key(self, i: int):
        return ({"a": str(i % 7), "b": None} if i % 2 else {"x-c": "1"}), ("all", "any")[i % 2]

    def subscribe(self, key, who) -> None:
        self.m.subscribe(key[0], who, match=key[1])

    def unsubscribe(self, key, who) -> None:
        self.m.unsubscribe(key[0], who, match=key[1])

    def lookup(self, i: int) -> None:
        self.m.lookup({"a": str(i % 7), "x-c": "1"})
        self.m.hits({"a": str(i % 5)})


class Selectors(Topics):
    def __init__(self, cls) -> None:
        self.m, self.snapshots = cls(cache_size=64), []

    def key(self, i: int) -> str:
        return [f"https://e.com/b/{i % 50}", "https://e.com/b/{id}", "re:.*/u/[0-9]*1", "*"][i % 4]

    def lookup(self, i: int) -> None:
        self.m.lookup([f"https://e.com/{'bu'[i % 2]}/{i % 200}"])


ADAPTERS = {
    "NaiveMatcher": Topics,
    "Trie": Topics,
    "CSTrie": Topics,
    "InvertedBitmap": Topics,
    "LevelBitmap": Topics,
    "HeadersMatcher": Headers,
    "SelectorIndex": Selectors,
}


def churn(index: Topics, rounds: int, alive: weakref.WeakSet) -> tuple[int, int]:
    """Runs `rounds` rounds while two threads look up; returns the writes and the lookups."""
    stop = threading.Event()
    counts = [0, 0]

    def reader(r: int) -> None:
        i = r
        while not stop.is_set():
            index.lookup(i)
            i += 7
        counts[r] = i // 7

    writes = 0
    threads = [threading.Thread(target=reader, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    try:
        for round_ in range(rounds):
            people = [Conn(n) for n in range(PAIRS // 5)]
            alive.update(people)
            held = [(index.key(round_ * PAIRS + i), people[i % len(people)]) for i in range(PAIRS)]
            for key, who in held:
                index.subscribe(key, who)
            index.between(round_)
            # Half the subscribers leave pair by pair, the rest all at once.
            for key, who in held:
                if who.n % 2:
                    index.unsubscribe(key, who)
                    writes += 1
            for who in people[::2]:
                index.remove(who)
            writes += len(held) + len(people[::2])
            assert len(index) == 0
            del people, held
    finally:
        stop.set()
        for t in threads:
            t.join()
    return writes, sum(counts)


@pytest.mark.parametrize("name", ADAPTERS)
def test_churn_returns_memory_and_frees_every_subscriber(name):
    index = ADAPTERS[name](getattr(tm, name))
    alive: weakref.WeakSet = weakref.WeakSet()
    churn(index, max(2, ROUNDS // 10), alive)
    index.drain()
    gc.collect()
    before = rss()
    start = time.perf_counter()
    writes, lookups = churn(index, ROUNDS, alive)
    seconds = time.perf_counter() - start
    index.drain()
    after = rss()
    print(
        f"\nsoak {name:<15} {ROUNDS} rounds, {writes:,} writes, {lookups:,} lookups "
        f"in {seconds:.1f} s: RSS {before / 2**20:.1f} MiB after warm-up, "
        f"{after / 2**20:.1f} MiB after, drift {(after - before) / 2**10:+,.0f} KiB"
    )
    assert len(alive) == 0, f"{len(alive)} subscriber objects still alive"
    assert after - before < TOLERANCE, f"RSS grew by {after - before:,} bytes"
