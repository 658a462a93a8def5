"""LazyDFA from Python, beside the tries, in one run.

- ``lookup_many`` per topic on ``mixed`` (AMQP, 100k subscriptions by default, 10,000 topics):
  ``Trie`` bare (``cache_size=0``), ``Trie`` cached, ``LazyDFA`` warm (every topic looked up
  once before timing) and ``LazyDFA`` cold (``clear_cache()`` before the pass), in alternating
  passes, ``--rounds`` times; the median and the range.
- Memory per subscription (resident-set growth while building, in a fresh process each, MQTT
  spelling as ``topicmatch bench``'s memory section) at ``--memory-n`` subscriptions, after
  one pass of lookups (so LazyDFA's states are counted).

    .venv/bin/python benches/python/lazy_dfa.py [--n 100000] [--memory-n 1000000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

import topicmatch as tm
from topicmatch import workload
from topicmatch.bench import rss_bytes

BATCH = 1000


def _variants(dialect: str, subs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {
        "Trie (bare)": tm.Trie(dialect, subs, cache_size=0),
        "Trie (cached)": tm.Trie(dialect, subs),
        "LazyDFA": tm.LazyDFA(dialect, subs),
    }


def _pass(m: Any, topics: list[str]) -> float:
    """Seconds per topic of one pass of ``lookup_many`` in batches of ``BATCH``."""
    start = time.perf_counter()
    for i in range(0, len(topics), BATCH):
        m.lookup_many(topics[i : i + BATCH])
    return (time.perf_counter() - start) / len(topics)


def lookups(n: int, n_topics: int, rounds: int) -> None:
    w = workload.mixed(n, n_topics, "amqp", seed=7)
    ms = _variants("amqp", w.subscriptions)
    times: dict[str, list[float]] = {name: [] for name in [*ms, "LazyDFA (cold)"]}
    for m in ms.values():
        _pass(m, w.topics)  # warms the caches and the DFA
    for _ in range(rounds):
        for name, m in ms.items():
            times[name].append(_pass(m, w.topics))
        dfa = ms["LazyDFA"]
        dfa.clear_cache()
        times["LazyDFA (cold)"].append(_pass(dfa, w.topics))
        _pass(dfa, w.topics)
    bare = statistics.median(times["Trie (bare)"])
    print(f"\nlookup_many on mixed {n:,} (AMQP), {n_topics:,} topics, {rounds} rounds:")
    print("| matcher | per topic, median [range] | over bare Trie |")
    print("|---|---|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"| {name} | {med * 1e9:,.0f} ns [{min(ts) * 1e9:,.0f}-{max(ts) * 1e9:,.0f}] "
            f"| {med / bare:.2f} |"
        )
    print(f"LazyDFA stats after the last warm pass: {ms['LazyDFA'].stats()}")


def _probe(name: str, n: int) -> None:
    """Child process: builds one matcher over ``mixed`` and prints its RSS growth."""
    w = workload.mixed(n, 1000, "mqtt", seed=0)
    cls, kwargs = {
        "Trie": (tm.Trie, {"cache_size": 0}),
        "CSTrie": (tm.CSTrie, {"cache_size": 0}),
        "LazyDFA": (tm.LazyDFA, {}),
    }[name]
    before = rss_bytes()
    m = cls("mqtt", w.subscriptions, **kwargs)
    m.lookup_many(w.topics)
    print(json.dumps({"rss": rss_bytes() - before}))


def memory(n: int) -> None:
    print(f"\nMemory per subscription at {n:,} (mixed, MQTT, after 1,000 lookups):")
    print("| matcher | bytes per subscription |")
    print("|---|---|")
    for name in ("Trie", "CSTrie", "LazyDFA"):
        code = f"import sys; sys.path.insert(0, {__file__.rsplit('/', 1)[0]!r}); "
        code += f"from lazy_dfa import _probe; _probe({name!r}, {n})"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"| {name} | failed: {done.stderr.strip()[-200:]} |")
            continue
        rss = json.loads(done.stdout.strip().splitlines()[-1])["rss"]
        print(f"| {name} | {rss / n:,.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--memory-n", type=int, default=1_000_000)
    args = ap.parse_args()
    lookups(args.n, args.topics, args.rounds)
    if args.memory_n:
        memory(args.memory_n)


if __name__ == "__main__":
    main()
