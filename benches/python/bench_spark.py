"""Routed messages per second on local Spark: `topicmatch.spark.route` (mapInArrow, whole Arrow
batches to the matcher) against two floors and against the same job written as a plain Python
UDF that calls a matcher's `lookup` once per row.

The floors are timed in the same run, on the same cached messages, and say what routing costs
on top of what Spark costs anyway:

- **fixed-list job**: a mapInArrow that gives every message the same list of N subscriber names
  (N = route's mean deliveries per message, rounded), in route's output schema, then the same
  explode and noop write as route's deliveries. Everything route does but the matching.
- **identity job**: a mapInArrow that passes the batches through, then the noop write.

`route / fixed-list` near 1 means the matching costs little beside moving the deliveries;
`route / identity` is the whole price of routing over reading the messages once.

The UDF calling `NaiveMatcher` scans every pattern for every message, so it runs on far fewer
messages (`--udf-messages`); the figures to compare are messages per second, not totals. A
plain UDF calling `Trie` is timed too (`--trie-udf-messages`), to separate what the index buys
from what the batch path buys; 0 skips either.

Each job is timed from the `route` call (collect, build and shipping of the subscriptions
included) or the building of its DataFrame to the end of a `noop` write. The three jobs run in
turn, `--rounds` times (3 by default); the first round is reported but not counted: whichever
job runs first in a JVM pays for compiling the code all three share (the Arrow exchange with
the Python workers, `explode`, the `noop` write), about 1.5-2 s here, and a ratio taken from it
says which job went first. The ratios are the median of the later rounds, with their range.
Run:

    .venv/bin/python benches/python/bench_spark.py                  # 100,000 subs, 1,000,000 msgs
    .venv/bin/python benches/python/bench_spark.py --connect 'local[2]'      # on Spark Connect
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

import topicmatch as tm
from topicmatch import workload
from topicmatch.spark import REASON, SUBSCRIBERS, is_connect, resolve_matcher, route, split

ROUTE = "route (mapInArrow)"
FIXED = "fixed-list job"
IDENTITY = "identity job"
NAMES = (ROUTE, FIXED, IDENTITY)


def udf_job(messages, subscriptions: list[tuple[str, str]], dialect: str, cls: type):
    """The plain way: the matcher pickled into the UDF's closure, one `lookup` per row."""
    matcher = cls(dialect, subscriptions)

    @F.udf(returnType=T.ArrayType(T.StringType()))
    def lookup(topic):
        return matcher.lookup(topic)

    routed = messages.withColumn("subscribers", lookup(F.col("topic")))
    return routed.select(*messages.columns, F.explode("subscribers").alias("subscriber"))


def fixed_lists(batches: Iterable[pa.RecordBatch], names: list[str]) -> Iterator[pa.RecordBatch]:
    """Route's output without the matching: every row gets all of `names`, built as route builds
    its lists (one `take` of the names by a flat array of ids, then offsets)."""
    import numpy as np

    values = pa.array(names, pa.string())
    k = len(names)
    for batch in batches:
        n = batch.num_rows
        ids = pa.array(np.tile(np.arange(k, dtype=np.int32), n))
        offsets = pa.array(np.arange(0, (n + 1) * k, k, dtype=np.int32))
        lists = pa.ListArray.from_arrays(offsets, values.take(ids))
        yield pa.RecordBatch.from_arrays(
            [*batch.columns, lists, pa.nulls(n, pa.string())],
            names=[*batch.schema.names, SUBSCRIBERS, REASON],
        )


def fixed_list_job(messages: DataFrame, names: list[str]) -> DataFrame:
    """The deliveries of `fixed_lists`, through the same explode as route's."""
    import functools

    schema = T.StructType(
        [
            *messages.schema.fields,
            T.StructField(SUBSCRIBERS, T.ArrayType(T.StringType(), containsNull=False), True),
            T.StructField(REASON, T.StringType(), True),
        ]
    )
    routed = messages.mapInArrow(functools.partial(fixed_lists, names=names), schema)
    return split(routed).deliveries


def identity(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def identity_job(messages: DataFrame) -> DataFrame:
    return messages.mapInArrow(identity, messages.schema)


def timed(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def noop(df: DataFrame) -> None:
    df.write.format("noop").mode("overwrite").save()


def session(args: argparse.Namespace) -> SparkSession:
    """A classic session on `--master`, or a Spark Connect one on `--connect` (a local master
    there starts a Connect server in this process)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName("topicmatch bench")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    if args.connect is None:
        spark = builder.master(args.master).getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        return spark
    with warnings.catch_warnings():
        # A local server starts with these settings; PySpark then also tries to set the static
        # ones on the new session, which cannot be done and only warns.
        warnings.filterwarnings("ignore", message=r"Failed to set spark\.")
        return builder.remote(args.connect).getOrCreate()


def cores_of(spark: SparkSession) -> int:
    """The task slots of a local session: Spark's default parallelism on a classic session; on
    Spark Connect, which does not expose it, N of a `local[N]` master, else this machine's."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    found = re.fullmatch(r"local\[(\d+)(,\d+)?\]", spark.conf.get("spark.master", "") or "")
    return int(found.group(1)) if found else os.cpu_count() or 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--subscriptions", type=int, default=100_000)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--udf-messages", type=int, default=2_000)
    p.add_argument("--trie-udf-messages", type=int, default=200_000)
    p.add_argument("--dialect", choices=tm.DIALECTS, default="mqtt")
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="times the three jobs run in turn; the first is a warm-up unless it is the only one",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--master", default="local[2]", help="classic session (default local[2])")
    where.add_argument(
        "--connect",
        metavar="URL",
        help="Spark Connect: sc://HOST:PORT, or local[2] (a server here)",
    )
    p.add_argument("--matcher", default=None, help="class for route (default Trie)")
    p.add_argument(
        "--cache-size", type=int, default=None, help="route's cache_size (default: route's own)"
    )
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args()

    spark = session(args)
    cores = cores_of(spark)
    w = workload.mixed(args.subscriptions, args.messages, args.dialect, seed=0)
    table = pa.table({"id": pa.array(range(len(w.topics)), pa.int64()), "topic": w.topics})
    subscriptions = spark.createDataFrame(w.subscriptions, "pattern string, subscriber string")
    messages = spark.createDataFrame(table).repartition(2 * cores).cache()
    messages.count()
    cls = resolve_matcher(args.matcher)
    kind = f"Spark Connect {args.connect}" if args.connect else args.master
    print(
        f"{args.subscriptions:,} subscriptions, {args.messages:,} messages ({args.dialect}, "
        f"mixed workload), {kind} ({cores} cores), matcher {cls.__name__}"
    )

    figures: dict[str, dict[str, float]] = {}

    def report(
        name: str, n: int, seconds: float, deliveries: int | None = None, label: str = ""
    ) -> None:
        rate = n / seconds
        figures[name] = {"messages": n, "seconds": round(seconds, 3), "msg_per_s": round(rate)}
        extra = f", {deliveries / seconds:,.0f} deliveries/s" if deliveries else ""
        label = label or name
        print(f"  {label:<32} {n:>9,} msgs in {seconds:7.2f} s: {rate:>10,.0f} msg/s{extra}")

    ratios: dict[str, list[float]] = {"fixed_list": [], "identity": []}
    for round_ in range(1, args.rounds + 1):
        counted = round_ > 1 or args.rounds == 1
        print(f" round {round_} of {args.rounds}" + ("" if counted else " (warm-up, not counted)"))
        deliveries = time_route(messages, subscriptions, args, cls, report)
        figures[ROUTE]["deliveries"] = deliveries
        n_names = max(1, round(deliveries / args.messages))
        time_floors(messages, sorted({s for _, s in w.subscriptions})[:n_names], args, report)
        figures[FIXED]["names"] = n_names
        for floor, key in ((FIXED, "fixed_list"), (IDENTITY, "identity")):
            ratio = figures[ROUTE]["seconds"] / figures[floor]["seconds"]
            print(f"  route / {key.replace('_', '-')} = {ratio:.2f}x")
            if counted:
                ratios[key].append(ratio)
        figures[f"round {round_}"] = {k: v["seconds"] for k, v in figures.items() if k in NAMES}
    for key, values in ratios.items():
        values.sort()
        median = statistics.median(values)
        print(
            f"route / {key.replace('_', '-')}, median of {len(values)} counted round(s): "
            f"{median:.2f}x [{values[0]:.2f}-{values[-1]:.2f}]"
        )
        figures[f"ratio_route_over_{key}"] = {
            "x": round(median, 2),
            "least": round(values[0], 2),
            "greatest": round(values[-1], 2),
        }

    time_udfs(messages, w.subscriptions, args, cores, report)
    base = figures.get("plain UDF, NaiveMatcher.lookup")
    if base:
        ratio = figures[ROUTE]["msg_per_s"] / base["msg_per_s"]
        print(f"  route / plain UDF with NaiveMatcher: {ratio:,.0f}x messages per second")
        figures["ratio_route_over_naive_udf"] = {"x": round(ratio, 1)}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    spark.stop()
    return 0


def time_route(messages, subscriptions, args, cls, report) -> int:
    """Times route on all the messages, after a warm-up that starts the Python workers; returns
    its deliveries."""
    options = {"matcher": cls, "cache_size": args.cache_size}
    noop(route(messages.limit(2_000), subscriptions, args.dialect, **options).deliveries)
    result = None

    def run_route() -> None:
        nonlocal result
        result = route(messages, subscriptions, args.dialect, **options)
        noop(result.deliveries)

    seconds = timed(run_route)
    assert result is not None
    deliveries = result.summary()["deliveries"]
    report(ROUTE, args.messages, seconds, deliveries)
    return deliveries


def time_floors(messages, names: list[str], args, report) -> None:
    """Times the fixed-list job (every message gets all of `names`) and the identity job, each
    after a warm-up on a small slice."""
    noop(fixed_list_job(messages.limit(2_000), names))
    seconds = timed(lambda: noop(fixed_list_job(messages, names)))
    n = args.messages
    report(FIXED, n, seconds, n * len(names), f"{FIXED} ({len(names)} per message)")
    noop(identity_job(messages.limit(2_000)))
    report(IDENTITY, n, timed(lambda: noop(identity_job(messages))))


def time_udfs(messages, subscriptions, args, cores, report) -> None:
    for name, n, udf_cls in (
        ("plain UDF, Trie.lookup", args.trie_udf_messages, tm.Trie),
        ("plain UDF, NaiveMatcher.lookup", args.udf_messages, tm.NaiveMatcher),
    ):
        if n <= 0:
            continue
        part = messages.limit(n).repartition(2 * cores).cache()
        part.count()
        noop(udf_job(part.limit(200), subscriptions, args.dialect, udf_cls))  # warm-up
        report(
            name,
            n,
            timed(lambda p=part, c=udf_cls: noop(udf_job(p, subscriptions, args.dialect, c))),
        )
        part.unpersist()


if __name__ == "__main__":
    sys.exit(main())
