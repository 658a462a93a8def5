"""The `topicmatch` command."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

import topicmatch as tm
from topicmatch import workload


def _demo(args: argparse.Namespace) -> int:
    w = workload.mixed(args.subscriptions, args.messages, args.dialect, seed=args.seed)
    print(
        f"generated {len(w.subscriptions):,} subscriptions and {len(w.topics):,} messages "
        f"({w.dialect}, mixed workload, seed {args.seed})"
    )
    for cls in (tm.Trie,):
        start = time.perf_counter()
        m = cls(w.dialect, w.subscriptions)
        built = time.perf_counter() - start
        start = time.perf_counter()
        results = m.lookup_many(w.topics)
        routed = time.perf_counter() - start
        fanout = Counter(len(r) for r in results)
        deliveries = sum(len(r) for r in results)
        matched = sum(1 for r in results if r)
        print(
            f"{cls.__name__}: built in {built:.3f} s, routed in {routed:.3f} s "
            f"({len(w.topics) / routed:,.0f} msg/s)"
        )
        print(
            f"  deliveries {deliveries:,}, matched messages {matched:,}, "
            f"unmatched {len(w.topics) - matched:,}"
        )
        top = ", ".join(f"{k}: {v:,}" for k, v in sorted(fanout.items())[:8])
        print(f"  fan-out per message (subscribers: messages): {top}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from topicmatch import bench

    profile = "tiny" if args.tiny else "quick" if args.quick else "full"
    bench.run(profile, args.out, sections=args.section)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="topicmatch", description=tm.__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=tm.__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="route generated messages to generated subscriptions")
    demo.add_argument("--subscriptions", type=int, default=100_000)
    demo.add_argument("--messages", type=int, default=1_000_000)
    demo.add_argument("--dialect", choices=tm.DIALECTS, default="mqtt")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(run=_demo)
    bench = sub.add_parser(
        "bench", help="time the matchers and the Python peers; write tables and plots"
    )
    bench.add_argument("--quick", action="store_true", help="smaller sizes, under five minutes")
    bench.add_argument("--out", default="bench-out", help="folder for BENCH.md, JSON and PNGs")
    bench.add_argument(
        "--section",
        action="append",
        choices=("headline", "scaling", "workloads", "memory", "threads", "churn", "gil"),
        help="run only this section (repeatable)",
    )
    bench.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    bench.set_defaults(run=_bench)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
