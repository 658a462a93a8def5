"""What the stable ABI (abi3) costs on the hot paths: `lookup` and `lookup_many` timed with an
abi3 wheel and with a wheel built for this CPython only, each in a venv of its own.

    python benches/python/abi3_cost.py ABI3_WHEEL VERSION_SPECIFIC_WHEEL [--rounds N]

`make bench-abi3` builds both wheels the same way (release, zig, manylinux2014) but for the
`abi3` cargo feature, and runs this. Each round runs one process per build, each going first
in every other round (so load on the machine, and the first runner's penalty, hit both
alike), with one fixed PYTHONHASHSEED (string hashes place the subscribers in the registry);
a figure is the best over all rounds: a lower bound of what the call costs, the usual way to
compare two builds on a shared machine. Time is the calling thread's CPU time
(`time.thread_time_ns`), so waiting for a core while other processes run does not count;
every call measured runs on that thread. `--same` runs the abi3 wheel against itself, which
shows the noise floor.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUBSCRIPTIONS = 10_000
TOPICS = 20_000


def measure() -> dict[str, float]:
    """Runs inside one venv: CPU nanoseconds per topic for each hot path, one round."""
    import topicmatch as tm
    from topicmatch import workload

    w = workload.mixed(SUBSCRIPTIONS, TOPICS, "mqtt", seed=1)
    out = {}
    for cls in (tm.Trie,):
        m = cls(w.dialect, w.subscriptions)
        lookup = m.lookup
        m.lookup_many(w.topics)  # warm caches
        start = time.thread_time_ns()
        for t in w.topics:
            lookup(t)
        out[f"{cls.__name__}.lookup"] = (time.thread_time_ns() - start) / TOPICS
        start = time.thread_time_ns()
        m.lookup_many(w.topics)
        out[f"{cls.__name__}.lookup_many"] = (time.thread_time_ns() - start) / TOPICS
    start = time.thread_time_ns()
    for t in w.topics:
        tm.matches("w1/+/#", t, dialect="mqtt")
    out["matches"] = (time.thread_time_ns() - start) / TOPICS
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("abi3_wheel", nargs="?")
    parser.add_argument("specific_wheel", nargs="?")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--same", action="store_true", help="abi3 against itself (noise)")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        rounds = [measure() for _ in range(args.rounds)]
        print(json.dumps({k: min(r[k] for r in rounds) for k in rounds[0]}))
        return 0

    other = args.abi3_wheel if args.same else args.specific_wheel
    builds = {"abi3": args.abi3_wheel, "version-specific": other}
    with tempfile.TemporaryDirectory(prefix="topicmatch-abi3-") as tmp:
        pythons = {}
        for name, wheel in builds.items():
            venv = Path(tmp) / name
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
            pip = [venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-index"]
            subprocess.run([*pip, wheel], check=True)
            pythons[name] = venv / "bin" / "python"
        best: dict[str, dict[str, float]] = {name: {} for name in builds}
        for i in range(args.rounds):
            # Each build goes first in every other round: whichever runs first is slower.
            for name, python in list(pythons.items())[:: 1 if i % 2 else -1]:
                cmd = [python, "-s", __file__, "--measure", "--rounds", "3"]
                env = {**os.environ, "PYTHONHASHSEED": "0"}
                run = subprocess.run(cmd, check=True, capture_output=True, env=env)
                got = json.loads(run.stdout)
                for k, v in got.items():
                    best[name][k] = min(v, best[name].get(k, v))
    label = "abi3 again" if args.same else "cp311"
    print(f"{'CPU ns per topic, best of ' + str(args.rounds):<28}{'abi3':>10}{label:>11}")
    for k in best["abi3"]:
        a, s = best["abi3"][k], best["version-specific"][k]
        print(f"{k:<28}{a:>10.0f}{s:>11.0f}   abi3 {100 * (a - s) / s:+.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
