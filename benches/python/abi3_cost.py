"""What the stable ABI (abi3) costs on the hot paths: `lookup` and `lookup_many` timed with an
abi3 wheel and with a wheel built for this CPython only, each in a venv of its own.

    python benches/python/abi3_cost.py ABI3_WHEEL VERSION_SPECIFIC_WHEEL [--rounds N]

`make bench-abi3` builds both wheels the same way (release, zig, manylinux2014) but for the
`abi3` cargo feature, and runs this. The two builds are measured in alternating rounds (so
load on the machine hits both alike) and each figure is the best round: a lower bound of what
the call costs, the usual way to compare two builds on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUBSCRIPTIONS = 10_000
TOPICS = 20_000


def measure() -> dict[str, float]:
    """Runs inside one venv: nanoseconds per topic for each hot path, one round."""
    import topicmatch as tm
    from topicmatch import workload

    w = workload.mixed(SUBSCRIPTIONS, TOPICS, "mqtt", seed=1)
    out = {}
    for cls in (tm.Trie,):
        m = cls(w.dialect, w.subscriptions)
        lookup = m.lookup
        m.lookup_many(w.topics)  # warm caches
        start = time.perf_counter_ns()
        for t in w.topics:
            lookup(t)
        out[f"{cls.__name__}.lookup"] = (time.perf_counter_ns() - start) / TOPICS
        start = time.perf_counter_ns()
        m.lookup_many(w.topics)
        out[f"{cls.__name__}.lookup_many"] = (time.perf_counter_ns() - start) / TOPICS
    start = time.perf_counter_ns()
    for t in w.topics:
        tm.matches("w1/+/#", t, dialect="mqtt")
    out["matches"] = (time.perf_counter_ns() - start) / TOPICS
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("abi3_wheel", nargs="?")
    parser.add_argument("specific_wheel", nargs="?")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        rounds = [measure() for _ in range(args.rounds)]
        print(json.dumps({k: min(r[k] for r in rounds) for k in rounds[0]}))
        return 0

    builds = {"abi3": args.abi3_wheel, "version-specific": args.specific_wheel}
    with tempfile.TemporaryDirectory(prefix="topicmatch-abi3-") as tmp:
        pythons = {}
        for name, wheel in builds.items():
            venv = Path(tmp) / name
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
            pip = [venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-index"]
            subprocess.run([*pip, wheel], check=True)
            pythons[name] = venv / "bin" / "python"
        best: dict[str, dict[str, float]] = {name: {} for name in builds}
        for _ in range(args.rounds):
            for name, python in pythons.items():
                cmd = [python, "-I", __file__, "--measure", "--rounds", "1"]
                got = json.loads(subprocess.run(cmd, check=True, capture_output=True).stdout)
                for k, v in got.items():
                    best[name][k] = min(v, best[name].get(k, v))
    print(f"{'ns per topic (best of ' + str(args.rounds) + ')':<28}{'abi3':>10}{'cp311':>10}")
    for k in best["abi3"]:
        a, s = best["abi3"][k], best["version-specific"][k]
        print(f"{k:<28}{a:>10.0f}{s:>10.0f}   abi3 {100 * (a - s) / s:+.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
