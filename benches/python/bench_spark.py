"""Routed messages per second on local Spark: `topicmatch.spark.route` (mapInArrow, whole Arrow
batches to `lookup_many`) against the same job written as a plain Python UDF that calls a
matcher's `lookup` once per row.

The UDF calling `NaiveMatcher` scans every pattern for every message, so it runs on far fewer
messages (`--udf-messages`); the figures to compare are messages per second, not totals. A
plain UDF calling `Trie` is timed too (`--trie-udf-messages`, 0 to skip), to separate what the
index buys from what the batch path buys.

Each job is timed from the `route` call (collect, build and broadcast of the subscriptions
included) to the end of a `noop` write of the exploded deliveries, after a warm-up job on a
small slice that starts the Python workers. Run:

    .venv/bin/python benches/python/bench_spark.py            # 100,000 subs, 1,000,000 msgs
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

import topicmatch as tm
from topicmatch import workload
from topicmatch.spark import resolve_matcher, route


def udf_job(messages, subscriptions: list[tuple[str, str]], dialect: str, cls: type):
    """The plain way: the matcher pickled into the UDF's closure, one `lookup` per row."""
    matcher = cls(dialect, subscriptions)

    @F.udf(returnType=T.ArrayType(T.StringType()))
    def lookup(topic):
        return matcher.lookup(topic)

    routed = messages.withColumn("subscribers", lookup(F.col("topic")))
    return routed.select(*messages.columns, F.explode("subscribers").alias("subscriber"))


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def noop(df) -> None:
    df.write.format("noop").mode("overwrite").save()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--subscriptions", type=int, default=100_000)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--udf-messages", type=int, default=2_000)
    p.add_argument("--trie-udf-messages", type=int, default=200_000)
    p.add_argument("--dialect", choices=tm.DIALECTS, default="mqtt")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--matcher", default=None, help="class for route (default CSTrie, else Trie)")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(args.master)
        .appName("topicmatch bench")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    cores = spark.sparkContext.defaultParallelism

    w = workload.mixed(args.subscriptions, args.messages, args.dialect, seed=0)
    tmp = Path(tempfile.mkdtemp(prefix="topicmatch-bench-"))
    table = pa.table({"id": pa.array(range(len(w.topics)), pa.int64()), "topic": w.topics})
    pq.write_table(table, tmp / "messages.parquet", row_group_size=50_000)
    subscriptions = spark.createDataFrame(w.subscriptions, "pattern string, subscriber string")
    messages = spark.read.parquet(str(tmp / "messages.parquet")).repartition(2 * cores).cache()
    messages.count()
    cls = resolve_matcher(args.matcher)
    print(
        f"{args.subscriptions:,} subscriptions, {args.messages:,} messages ({args.dialect}, "
        f"mixed workload), {args.master} ({cores} cores), matcher {cls.__name__}"
    )

    figures: dict[str, dict[str, float]] = {}

    def report(name: str, n: int, seconds: float, deliveries: int | None = None) -> None:
        rate = n / seconds
        figures[name] = {"messages": n, "seconds": round(seconds, 3), "msg_per_s": round(rate)}
        extra = f", {deliveries / seconds:,.0f} deliveries/s" if deliveries else ""
        print(f"  {name:<32} {n:>9,} msgs in {seconds:7.2f} s: {rate:>10,.0f} msg/s{extra}")

    # Warm-up: starts the Python workers and the JIT on a small slice.
    noop(route(messages.limit(2_000), subscriptions, args.dialect, matcher=cls).deliveries)

    result = None

    def run_route() -> None:
        nonlocal result
        result = route(messages, subscriptions, args.dialect, matcher=cls)
        noop(result.deliveries)

    seconds = timed(run_route)
    assert result is not None
    deliveries = result.summary()["deliveries"]
    report("route (mapInArrow, lookup_many)", args.messages, seconds, deliveries)
    figures["route (mapInArrow, lookup_many)"]["deliveries"] = deliveries

    for name, n, udf_cls in (
        ("plain UDF, Trie.lookup", args.trie_udf_messages, tm.Trie),
        ("plain UDF, NaiveMatcher.lookup", args.udf_messages, tm.NaiveMatcher),
    ):
        if n <= 0:
            continue
        part = messages.limit(n).repartition(2 * cores).cache()
        part.count()
        noop(udf_job(part.limit(200), w.subscriptions, args.dialect, udf_cls))  # warm-up
        report(
            name,
            n,
            timed(lambda p=part, c=udf_cls: noop(udf_job(p, w.subscriptions, args.dialect, c))),
        )
        part.unpersist()

    base = figures.get("plain UDF, NaiveMatcher.lookup")
    if base:
        ratio = figures["route (mapInArrow, lookup_many)"]["msg_per_s"] / base["msg_per_s"]
        print(f"  route / plain UDF with NaiveMatcher: {ratio:,.0f}x messages per second")
        figures["ratio_route_over_naive_udf"] = {"x": round(ratio, 1)}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
