"""Loading many subscriptions at once, three ways, in one run:

- ``subscribe`` called once per pair from Python (the baseline: one write per pair);
- ``subscribe_many(pairs)``: the list of (pattern, subscriber) tuples in one call;
- ``subscribe_arrow(patterns, subscribers)``: two Arrow arrays (int subscribers), as Spark's
  workers rebuild their matcher.

``--n`` pairs of the ``mixed`` MQTT workload (int subscribers), each matcher class fresh for
each load, the ways taking turns ``--rounds`` times; the figure is the median time per pair
with its range, and each bulk way's ratio to the per-pair calls on the same class. paho-mqtt's
``MQTTMatcher`` (a dict-of-dicts trie, no validation) is built from the same pairs beside
them when it is installed.

    .venv/bin/python benches/python/bulk_load.py [--n 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

import topicmatch as tm
from topicmatch import peers, workload


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args()

    w = workload.mixed(args.n, 1, "mqtt", seed=0)
    numbers = {s: i for i, s in enumerate(sorted({s for _, s in w.subscriptions}))}
    pairs = [(pattern, numbers[s]) for pattern, s in w.subscriptions]
    patterns = pa.array([pattern for pattern, _ in pairs], pa.string())
    subscribers = pa.array([s for _, s in pairs], pa.int64())

    def one_by_one(m: Any) -> None:
        subscribe = m.subscribe
        for pattern, s in pairs:
            subscribe(pattern, s)

    ways: dict[str, Callable[[Any], None]] = {
        "subscribe per pair": one_by_one,
        "subscribe_many": lambda m: m.subscribe_many(pairs),
        "subscribe_arrow": lambda m: m.subscribe_arrow(patterns, subscribers),
    }
    classes = [("Trie", {}), ("CSTrie", {}), ("Trie", {"cache_size": 0})]
    classes.append(("CSTrie", {"cache_size": 0}))
    times: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for cls, options in classes:
            for way, load in ways.items():
                m = getattr(tm, cls)("mqtt", **options)
                start = time.perf_counter()
                load(m)
                times.setdefault(f"{label(cls, options)}|{way}", []).append(
                    time.perf_counter() - start
                )
                assert len(m) == len(pairs)
                del m
        if peers.PahoMatcher in peers.available_peers():
            peer = peers.PahoMatcher(pairs)
            start = time.perf_counter()
            peer.build()
            times.setdefault("paho MQTTMatcher|build", []).append(time.perf_counter() - start)

    print(f"{len(pairs):,} mixed MQTT pairs, {args.rounds} rounds; ns a pair, median [range]")
    figures: dict[str, Any] = {}
    for key, values in times.items():
        who, way = key.split("|")
        per_pair = [v / len(pairs) * 1e9 for v in values]
        median = statistics.median(per_pair)
        base = times.get(f"{who}|subscribe per pair")
        ratio = ""
        if base and way != "subscribe per pair":
            r = statistics.median(values) / statistics.median(base)
            ratio = f"  {r:.2f}x the per-pair calls"
        spread = f"[{min(per_pair):,.0f}-{max(per_pair):,.0f}]"
        print(f"  {who:<22} {way:<20} {median:8,.0f} {spread}{ratio}")
        figures[key] = {"ns_per_pair": round(median), "least": round(min(per_pair))}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def label(cls: str, options: dict[str, int]) -> str:
    return f"{cls}(cache_size=0)" if options else cls


if __name__ == "__main__":
    sys.exit(main())
