"""A tiny PySpark job for the distribution tests: routes topics with topicmatch on the executors
and checks where the executors' Python and topicmatch come from.

    SPARK_JOB_EXPECT=archive spark-submit ... spark_job.py        # ./environment/bin/python
    SPARK_JOB_EXPECT=prefix=/opt/tm spark-submit ... spark_job.py # pip-installed there

(An environment variable, not an argument, so that the spark-submit lines in
tests/dist/spark_cluster.sh, which the README quotes, are the ones a user would type.)

The driver builds a matcher and broadcasts it (pickled on the driver, unpickled on each
executor); each partition routes its topics with `lookup_many` and reports `sys.executable`,
`sys.prefix` and `topicmatch.__file__`. With `archive`, every executor must run the Python of
the unpacked `--archives ...#environment` (a folder named `environment` that is not the
driver's environment) and import topicmatch from it. Prints a JSON summary; exits 1 on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession

import topicmatch as tm

SUBSCRIPTIONS = [("sensors/+/temp", "alice"), ("sensors/#", "audit"), ("site/1/#", "bob")]


def topics(n: int) -> list[str]:
    return [f"sensors/{i}/temp" if i % 3 else f"site/{i % 2}/x" for i in range(n)]


def expected(topic: str) -> list[str]:
    return sorted(s for p, s in SUBSCRIPTIONS if tm.matches(p, topic, dialect="mqtt"))


def executor_facts() -> dict[str, str]:
    import topicmatch  # imported on the executor, from whatever its Python finds

    return {
        "executable": sys.executable,
        "prefix": os.path.realpath(sys.prefix),
        "topicmatch": os.path.realpath(topicmatch.__file__),
        "version": topicmatch.__version__,
        "cwd": os.getcwd(),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--expect", default=os.environ.get("SPARK_JOB_EXPECT", "archive"))
    parser.add_argument("--topics", type=int, default=2_000)
    args = parser.parse_args()

    # No web UI: nothing to look at, and it would contend for port 4040 with other jobs.
    builder = SparkSession.builder.appName("topicmatch-dist-check")
    spark = builder.config("spark.ui.enabled", "false").getOrCreate()
    sc = spark.sparkContext
    matcher = sc.broadcast(tm.Trie("mqtt", SUBSCRIPTIONS))

    def route(part: Iterator[str]) -> Iterator[dict]:
        batch = list(part)
        found = matcher.value.lookup_many(batch)
        yield {
            **executor_facts(),
            "routed": [(t, sorted(r)) for t, r in zip(batch, found, strict=True)],
        }

    reports = sc.parallelize(topics(args.topics), 4).mapPartitions(route).collect()
    spark.stop()

    driver_prefix = os.path.realpath(sys.prefix)
    problems = []
    routed = [pair for r in reports for pair in r.pop("routed")]
    if len(routed) != args.topics or any(subs != expected(t) for t, subs in routed):
        problems.append("routing results differ from topicmatch.matches")
    for r in reports:
        prefix, module = Path(r["prefix"]), Path(r["topicmatch"])
        if not module.is_relative_to(prefix):
            problems.append(f"executor topicmatch {module} is not in its own prefix {prefix}")
        if r["version"] != tm.__version__:
            problems.append(f"executor has topicmatch {r['version']}, driver {tm.__version__}")
        if args.expect == "archive":
            if prefix.name != "environment" or str(prefix) == driver_prefix:
                problems.append(f"executor prefix {prefix} is not the unpacked archive")
        elif args.expect.startswith("prefix="):
            want = os.path.realpath(args.expect.removeprefix("prefix="))
            if str(prefix) != want:
                problems.append(f"executor prefix {prefix} is not {want}")
        else:
            problems.append(f"unknown --expect {args.expect}")
    summary = {
        "driver": {"executable": sys.executable, "prefix": driver_prefix},
        "executors": [dict(t) for t in {tuple(sorted(r.items())) for r in reports}],
        "topics routed": len(routed),
        "problems": problems,
    }
    print(json.dumps(summary, indent=2))
    print(f"spark job: {0 if problems else 1} passed, {1 if problems else 0} failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
