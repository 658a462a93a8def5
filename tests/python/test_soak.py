"""Soak: subscribe/unsubscribe churn with Python objects as subscribers while threads look up,
on every matcher. Resident memory must stop growing once the matcher is warmed up, and every
subscriber object must be freed once its pairs (and any snapshot holding it) are gone.

Each matcher's soak runs in a new interpreter (this file run as a script), so it starts from a
heap of its own, not from the one the earlier tests left (some 200 MiB after the rest of the
suite, whose free lists and arenas then moved the readings by megabytes); and growth is judged
on the lowest of a few readings at each end of the run, not on one reading before and one
after (see `WINDOW`).

`SOAK_ROUNDS` sets the measured rounds per matcher (50 by default, a second or two each);
`make soak` runs thousands and prints the figures (run pytest with `-s` to see them).
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
import threading
import time
import weakref

import pytest

import topicmatch as tm

ROUNDS = int(os.environ.get("SOAK_ROUNDS", "50"))
#: Pairs one round subscribes and then removes.
PAIRS = 500
#: Readings of resident memory per matcher after the warm-up, evenly spaced over the rounds.
CHECKPOINTS = 10
#: Readings at each end of the run whose lowest counts: the lowest of a few is the level the
#: heap comes back to, whereas any one reading can sit above it by what the lookup threads
#: left allocated (for `HeadersMatcher`, up to 9 MiB after a run of 50 rounds, about 1 MiB
#: after a run of 5), down again at a later reading.
WINDOW = 3
#: How far the level at the end may sit above the level after the warm-up. Memory held and
#: never given back raises every later reading, so a leak raises the level with the rounds:
#: the lowest readings of the two windows are 30 to 50 rounds (15,000 to 25,000 pairs) apart
#: in the default 50 rounds, where a leak of 150 bytes a pair fails the test, and 1,200 to
#: 2,000 rounds apart in `make soak`'s 2,000, where one of 4 bytes a pair does.
#: docs/reliability.md, "Soak, Python", gives the long run's figures.
TOLERANCE = 2 * 1024 * 1024

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
    "LazyDFA": Topics,
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


def measure(name: str, rounds: int) -> dict:
    """One matcher's soak in this process: a warm-up, then `rounds` rounds in `CHECKPOINTS`
    runs of churn, resident memory read after the warm-up and after each run."""
    index = ADAPTERS[name](getattr(tm, name))
    alive: weakref.WeakSet = weakref.WeakSet()
    # At least 10 rounds: after fewer, `HeadersMatcher`'s level still sits about 1 MiB below
    # where it settles (32.4 MiB after 5 rounds, 33.5 after 10 and after 2,000), which alone
    # used half the tolerance.
    churn(index, max(10, rounds // 10), alive)
    index.drain()
    readings = [rss()]
    writes = lookups = 0
    seconds = 0.0
    for k in range(CHECKPOINTS):
        start = time.perf_counter()
        w, n = churn(index, rounds * (k + 1) // CHECKPOINTS - rounds * k // CHECKPOINTS, alive)
        seconds += time.perf_counter() - start
        writes, lookups = writes + w, lookups + n
        index.drain()
        readings.append(rss())
    gc.collect()
    return {
        "readings": readings,
        "writes": writes,
        "lookups": lookups,
        "seconds": seconds,
        "alive": len(alive),
    }


def measure_in_new_interpreter(name: str, rounds: int) -> dict:
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), name, str(rounds)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"the soak of {name} failed:\n{proc.stdout}{proc.stderr}"
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", ADAPTERS)
def test_churn_returns_memory_and_frees_every_subscriber(name):
    m = measure_in_new_interpreter(name, ROUNDS)
    readings = m["readings"]
    first, last = min(readings[:WINDOW]), min(readings[-WINDOW:])
    print(
        f"\nsoak {name:<15} {ROUNDS} rounds, {m['writes']:,} writes, {m['lookups']:,} lookups "
        f"in {m['seconds']:.1f} s: RSS {readings[0] / 2**20:.1f} MiB after warm-up, "
        f"{readings[-1] / 2**20:.1f} MiB after, drift {(readings[-1] - readings[0]) / 2**10:+,.0f} "
        f"KiB; lowest of {WINDOW} readings {first / 2**20:.1f} then {last / 2**20:.1f} MiB, "
        f"growth {(last - first) / 2**10:+,.0f} KiB; highest {max(readings) / 2**20:.1f} MiB"
    )
    assert m["alive"] == 0, f"{m['alive']} subscriber objects still alive"
    assert last - first < TOLERANCE, (
        f"RSS grew by {last - first:,} bytes; readings (MiB): "
        + " ".join(f"{r / 2**20:.1f}" for r in readings)
    )


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
