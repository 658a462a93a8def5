"""One Arrow batch of topics to Arrow columns of subscribers, three ways, in one run:

- ``lookup_arrow``: the Arrow string array in, ``list<int64>`` ids and ``string`` reasons out;
- ``lookup_many`` the way ``topicmatch.spark.route_batch`` did it before ``lookup_arrow``: the
  column to a list of ``str`` (``to_pylist``), ``lookup_many``, the lists of ints back to an
  Arrow ``list<int32>`` array (``pa.array``);
- the floor: ``count_many`` on the same topics already in a list of ``str``: the lookups
  alone, with no answer made.

Batches of ``--batch`` topics (Spark's 10,000 by default) of the ``mixed`` MQTT workload over
``--n`` subscriptions with int subscribers; the three run in alternating passes, ``--rounds``
times; the figure is the median time per topic with its range, and each way's ratio to the
floor (what making the answer costs beyond the lookups).

    .venv/bin/python benches/python/arrow_batch.py [--n 100000] [--batch 10000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

import topicmatch as tm
from topicmatch import workload


def by_lookup_many(m: Any, column: pa.Array) -> pa.Array:
    return pa.array(m.lookup_many(column.to_pylist()), type=pa.list_(pa.int32()))


def by_lookup_arrow(m: Any, column: pa.Array) -> pa.Array:
    return m.lookup_arrow(column)[0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--matcher", default="CSTrie")
    p.add_argument("--json")
    args = p.parse_args()

    w = workload.mixed(args.n, args.batch * args.batches, "mqtt", seed=0)
    names = {s: i for i, s in enumerate(sorted({s for _, s in w.subscriptions}))}
    m = getattr(tm, args.matcher)("mqtt", [(pat, names[s]) for pat, s in w.subscriptions])
    columns = [
        pa.array(w.topics[i : i + args.batch], pa.string())
        for i in range(0, len(w.topics), args.batch)
    ]
    lists = {id(c): c.to_pylist() for c in columns}
    # Also the warm-up: every topic looked up once before timing.
    delivered = sum(len(x) for c in columns for x in m.lookup_arrow(c)[0].to_pylist())
    floor_name = "floor: count_many (lookups alone)"
    ways: dict[str, Callable[[Any, pa.Array], Any]] = {
        "lookup_arrow": by_lookup_arrow,
        "to_pylist + lookup_many + pa.array": by_lookup_many,
        floor_name: lambda m, column: m.count_many(lists[id(column)]),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, way in ways.items():
            start = time.perf_counter()
            for column in columns:
                way(m, column)
            times[name].append((time.perf_counter() - start) / len(w.topics))

    floor = statistics.median(times[floor_name])
    print(
        f"{args.matcher}, {args.n:,} MQTT subscriptions (mixed), {len(columns)} batches of "
        f"{args.batch:,} topics, {delivered / len(w.topics):.1f} deliveries per topic, "
        f"{args.rounds} rounds"
    )
    figures: dict[str, dict[str, float]] = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        figures[name] = {
            "ns_per_topic": round(med * 1e9, 1),
            "min": round(min(ts) * 1e9, 1),
            "max": round(max(ts) * 1e9, 1),
            "x_floor": round(med / floor, 2),
        }
        print(
            f"  {name:<38} {med * 1e9:8.0f} ns/topic [{min(ts) * 1e9:.0f}-{max(ts) * 1e9:.0f}]"
            f"  {med / floor:5.2f}x the floor"
        )
    ratio = statistics.median(times["to_pylist + lookup_many + pa.array"]) / statistics.median(
        times["lookup_arrow"]
    )
    print(f"  lookup_many path / lookup_arrow: {ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
