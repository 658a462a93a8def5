"""The `topicmatch` command: `route` (on Spark), `generate` and `demo` (one process, no Spark)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import topicmatch as tm
from topicmatch import workload

#: File extensions and the reader they mean.
INPUT_FORMATS = {
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
}
#: Topics that each dialect rejects, used by `generate --rejects` (None is a null topic).
INVALID_TOPICS = {
    "amqp": [None],
    "mqtt": [None, "", "sensors/+/temp", "a/#"],
    "nats": [None, "", "a..b", "a b", "a.*", "a.>"],
}


# -- demo: one process, no Spark --------------------------------------------------------------


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
        print(f"  fan-out per message (subscribers: messages): {_fanout_line(fanout)}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from topicmatch import bench

    profile = "tiny" if args.tiny else "quick" if args.quick else "full"
    bench.run(profile, args.out, sections=args.section)
    return 0


def _fanout_line(fanout: dict[int, int], buckets: int = 8) -> str:
    """`{subscribers: messages}` as one line: the statistics, then each count or, when there are
    many, ranges of counts."""
    total = sum(fanout.values())
    if not total:
        return "no routed messages"
    keys = sorted(fanout)
    mean = sum(k * v for k, v in fanout.items()) / total
    seen, median = 0, keys[-1]
    for k in keys:
        seen += fanout[k]
        if seen * 2 >= total:
            median = k
            break
    stats = f"min {keys[0]}, median {median}, mean {mean:.1f}, max {keys[-1]}"
    if len(keys) <= 12:
        return stats + "; " + ", ".join(f"{k}: {fanout[k]:,}" for k in keys)
    width = -(-(keys[-1] - keys[0] + 1) // buckets)
    parts = []
    for lo in range(keys[0], keys[-1] + 1, width):
        hi = min(lo + width - 1, keys[-1])
        count = sum(v for k, v in fanout.items() if lo <= k <= hi)
        parts.append(f"{lo}-{hi}: {count:,}")
    return stats + "; " + ", ".join(parts)


# -- generate ---------------------------------------------------------------------------------


def _write_rows(path: Path, columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> None:
    if fmt == "csv":
        with path.open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(columns)
            out.writerows(rows)
    elif fmt == "jsonl":
        with path.open("w") as f:
            for row in rows:
                f.write(json.dumps(dict(zip(columns, row, strict=True))) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({c: [r[i] for r in rows] for i, c in enumerate(columns)})
        pq.write_table(table, path, row_group_size=100_000)


def _generate(args: argparse.Namespace) -> int:
    out = Path(args.out)
    dialects = tm.DIALECTS if args.dialect == "all" else (args.dialect,)
    for dialect in dialects:
        w = workload.mixed(args.subscriptions, args.messages, dialect, seed=args.seed)
        rng = random.Random(args.seed + 1)
        topics: list[str | None] = list(w.topics)
        rejects = 0
        for i in range(len(topics)):
            if rng.random() < args.rejects:
                topics[i] = rng.choice(INVALID_TOPICS[dialect])
                rejects += 1
        folder = out / dialect
        folder.mkdir(parents=True, exist_ok=True)
        ext = args.format
        subs_path = folder / f"subscriptions.{ext}"
        msgs_path = folder / f"messages.{ext}"
        _write_rows(subs_path, ["pattern", "subscriber"], w.subscriptions, args.format)
        _write_rows(
            msgs_path,
            ["id", "topic", "payload"],
            [(i, t, f"reading {i % 997}") for i, t in enumerate(topics)],
            args.format,
        )
        print(
            f"{dialect}: {len(w.subscriptions):,} subscriptions -> {subs_path}; "
            f"{len(topics):,} messages ({rejects:,} null or invalid topics) -> {msgs_path}"
        )
    return 0


# -- route: Spark -----------------------------------------------------------------------------

#: The masters of a Spark Connect server that PySpark starts in this process (`--connect local[2]`).
LOCAL_CONNECT = re.compile(r"local(\[(\*|[1-9][0-9]*)(,[0-9]+)?\])?")
#: Seconds to wait for a Spark Connect server to accept a connection. PySpark itself retries an
#: unreachable server for minutes before it gives up.
CONNECT_TIMEOUT = 15.0


class SessionError(Exception):
    """No Spark session can be had as asked; the message says why and what to do."""


def _input_format(path: str, given: str | None) -> str:
    if given:
        return given
    fmt = INPUT_FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise SystemExit(
            f"topicmatch route: cannot tell the format of {path!r} from its extension; "
            f"pass --input-format csv|json|parquet"
        )
    return fmt


def _read(spark: Any, path: str, fmt: str) -> Any:
    if fmt == "csv":
        # Every column stays a string: topics and carried columns pass through unchanged.
        return spark.read.option("header", True).csv(path)
    if fmt == "json":
        return spark.read.json(path)
    return spark.read.parquet(path)


def _session(master: str | None, connect: str | None, driver_memory: str) -> tuple[Any, bool]:
    """The active SparkSession (tests, notebooks, spark-submit) or a new one; True if new. A new
    one is a Spark Connect session for `connect`, else for ``$SPARK_REMOTE`` unless a `master`
    is given, else a classic one."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    kind, where = _wanted_session(master, connect)
    if kind == "classic":
        return _classic_session(where or None, driver_memory), True
    try:
        return _connect_session(where, driver_memory), True
    except SessionError as err:
        origin = "--connect" if connect else "$SPARK_REMOTE"
        raise SessionError(f"{origin} {where!r}: {err}") from err.__cause__


def _wanted_session(master: str | None, connect: str | None) -> tuple[str, str]:
    """``("connect", URL)`` for `connect`, else for ``$SPARK_REMOTE`` (the variable PySpark
    itself reads) unless a `master` is given; else ``("classic", master or "")``."""
    remote = connect or (None if master else os.environ.get("SPARK_REMOTE"))
    if remote:
        return "connect", remote
    return "classic", master or ""


def _classic_session(master: str | None, driver_memory: str) -> Any:
    # PySpark makes any session a Connect one while SPARK_REMOTE is set, and refuses a master
    # beside it; a --master given here overrides it.
    remote = os.environ.pop("SPARK_REMOTE", None)
    try:
        spark = _classic_builder(master, driver_memory).getOrCreate()
    finally:
        if remote is not None:
            os.environ["SPARK_REMOTE"] = remote
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _classic_builder(master: str | None, driver_memory: str) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("topicmatch route").config(
        "spark.ui.showConsoleProgress", "true"
    )
    # Under spark-submit the JVM is up and the master, memory and Python are its settings.
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Python workers must import topicmatch: run them with this interpreter unless told.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        return builder.master(master or "local[*]").config("spark.driver.memory", driver_memory)
    return builder.master(master) if master else builder


def _connect_session(url: str, driver_memory: str) -> Any:
    """A Spark Connect session: to the server at `url` (``sc://...``), or to one that PySpark
    starts in this process for a local master (``local[2]``)."""
    try:
        import pyspark.sql.connect.client  # noqa: F401  (checks grpcio and the rest)
    except ImportError as err:
        raise SessionError(
            f"Spark Connect needs pyspark[connect] ({err}): pip install 'topicmatch[spark]'"
        ) from None
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("topicmatch route")
    if not url.startswith("local"):
        _check_server(url)
        try:
            return builder.remote(url).getOrCreate()
        except Exception as err:  # the server answers, and refuses: say its reason
            reason = _reason(err)
            if "authentication" in reason.lower():
                reason += ": give the server's token in the URL, sc://HOST:PORT/;token=TOKEN"
            raise SessionError(f"the Spark Connect server refuses a session: {reason}") from err
    if not LOCAL_CONNECT.fullmatch(url):
        raise SessionError("a local Spark Connect server takes local, local[N] or local[*]")
    # The server's Python workers must import topicmatch, as for a classic session.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = builder.remote(url).config("spark.driver.memory", driver_memory)
    with warnings.catch_warnings():
        # PySpark starts the server with this memory, then also tries to set it on the new
        # session, which cannot be done and only warns.
        warnings.filterwarnings("ignore", message="Failed to set spark.driver.memory")
        try:
            return builder.getOrCreate()
        except Exception as err:
            reason = _reason(err)
            if "BindException" in reason:
                reason += (
                    " Another Spark Connect server holds the port: connect to it with "
                    "--connect sc://localhost:15002, or stop it"
                )
            raise SessionError(f"cannot start a local Spark Connect server: {reason}") from err


def _reason(err: Exception) -> str:
    """Why a session could not be had, in one line: the innermost Java cause of an error raised
    through py4j (whose own message only names the call that failed), the details of a gRPC
    error, else the error's first line."""
    java = getattr(err, "java_exception", None)
    if java is not None:
        while java.getCause() is not None:
            java = java.getCause()
        return str(java.toString())
    text = str(err).strip()
    details = re.search(r'details = "([^"]*)"', text)
    if details:
        return details.group(1)
    return text.splitlines()[0] if text else type(err).__name__


def _check_server(url: str) -> None:
    """Raises SessionError unless `url` is a Spark Connect URL whose server accepts a connection
    within CONNECT_TIMEOUT, so that a typo fails at once rather than after PySpark's retries."""
    import grpc
    from pyspark.sql.connect.client import DefaultChannelBuilder

    try:
        channel_builder = DefaultChannelBuilder(url)
    except ValueError as err:
        raise SessionError(f"not a Spark Connect URL: {err}") from None
    channel = channel_builder.toChannel()
    try:
        grpc.channel_ready_future(channel).result(timeout=CONNECT_TIMEOUT)
    except grpc.FutureTimeoutError:
        raise SessionError(
            f"no Spark Connect server answers at {channel_builder.endpoint} "
            f"within {CONNECT_TIMEOUT:g} s"
        ) from None
    finally:
        channel.close()


def _route(args: argparse.Namespace) -> int:
    try:
        from topicmatch import spark as tms
    except ImportError as err:
        print(
            f"topicmatch route needs PySpark ({err}): pip install 'topicmatch[spark]'",
            file=sys.stderr,
        )
        return 2
    formats = (
        _input_format(args.subscriptions, args.input_format),
        _input_format(args.messages, args.input_format),
    )
    start = time.perf_counter()
    created = False
    try:
        spark, created = _session(args.master, args.connect, args.driver_memory)
        return _route_on(spark, tms, args, formats, start)
    except SessionError as err:
        print(f"topicmatch route: {err}", file=sys.stderr)
        return 2
    finally:
        if created:
            spark.stop()


def _route_on(
    spark: Any, tms: Any, args: argparse.Namespace, formats: tuple[str, str], start: float
) -> int:
    """`topicmatch route` on a session: reads, routes, writes, prints."""
    subs_fmt, msgs_fmt = formats
    out = args.out.rstrip("/") or "/"
    if tms.is_connect(spark) and "://" in out:
        _client_filesystem(f"{out}/summary.json")  # fail before routing, not after
    subscriptions = _read(spark, args.subscriptions, subs_fmt)
    messages = _read(spark, args.messages, msgs_fmt)
    try:
        result = tms.route(
            messages,
            subscriptions,
            dialect=args.dialect,
            matcher=args.matcher,
            cache_size=args.cache_size,
        )
    except (ValueError, TypeError) as err:  # InvalidPattern included: nothing was routed
        print(f"topicmatch route: {err}", file=sys.stderr)
        return 2
    result.persist()
    for name, df in (("deliveries", result.deliveries), ("rejected", result.rejected)):
        writer = df.write.mode("overwrite").format(args.format)
        if args.format == "csv":
            writer = writer.option("header", True)
        writer.save(f"{out}/{name}")
    summary: dict[str, Any] = dict(result.summary())
    fanout = result.fanout()
    result.unpersist()
    summary["seconds"] = round(time.perf_counter() - start, 3)
    text = json.dumps(summary, indent=2)
    _write_text(spark, f"{out}/summary.json", text + "\n")
    print(text)
    print(f"fan-out per message (subscribers: messages): {_fanout_line(fanout)}")
    print(f"wrote {out}/deliveries/, {out}/rejected/ and {out}/summary.json")
    return 0


def _write_text(spark: Any, path: str, text: str) -> None:
    """Writes a small file: on the local disk, or for a URI through Hadoop's file systems
    (hdfs://, s3a://, file://) like the DataFrames beside it; on Spark Connect, which gives no
    JVM to write through, through pyarrow's (file://, s3://, gs://, hdfs://)."""
    if "://" not in path:
        Path(path).write_text(text)
        return
    from topicmatch.spark import is_connect

    if is_connect(spark):
        fs, inner = _client_filesystem(path)
        with fs.open_output_stream(inner) as stream:
            stream.write(text.encode())
        return
    jvm = spark.sparkContext._jvm
    target = jvm.org.apache.hadoop.fs.Path(path)
    stream = target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).create(target)
    try:
        stream.write(bytearray(text.encode()))
    finally:
        stream.close()


def _client_filesystem(uri: str) -> tuple[Any, str]:
    """pyarrow's file system for `uri`, and the path in it."""
    import pyarrow.fs

    try:
        return pyarrow.fs.FileSystem.from_uri(uri)
    except (OSError, ValueError) as err:
        raise SessionError(
            f"on Spark Connect this process writes summary.json itself, and cannot open {uri!r} "
            f"({err}); give --out as a local path or a URI that pyarrow opens "
            "(file://, s3://, gs://, hdfs://)"
        ) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="topicmatch", description=tm.__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=tm.__version__)
    sub = parser.add_subparsers(dest="command", required=True)

    route = sub.add_parser(
        "route",
        help="route a table of messages to the subscribers of a table of subscriptions, on Spark",
        description="Writes OUT/deliveries/ (the message's columns plus subscriber), "
        "OUT/rejected/ (the message's columns plus reason) and OUT/summary.json.",
    )
    route.add_argument(
        "--subscriptions", required=True, help="file with columns pattern, subscriber"
    )
    route.add_argument("--messages", required=True, help="file with a topic column (others kept)")
    route.add_argument(
        "--out",
        required=True,
        help="output folder (on Spark Connect, the server writes the tables and this process "
        "summary.json: with a remote server, give a URI that both reach)",
    )
    route.add_argument("--dialect", choices=tm.DIALECTS, default="amqp")
    where = route.add_mutually_exclusive_group()
    where.add_argument(
        "--master",
        default=None,
        help="Spark master of a classic session (default local[*]); overrides $SPARK_REMOTE",
    )
    where.add_argument(
        "--connect",
        metavar="URL",
        default=None,
        help="run on Spark Connect (needs pyspark[connect]): sc://HOST[:PORT][/;param=value], "
        "or local[N] to start a local Connect server in this process as PySpark's "
        "SparkSession.builder.remote() does. Default: $SPARK_REMOTE when it is set and "
        "--master is not given. A SparkSession already active in the process (notebook, "
        "spark-submit) is used as it is, whatever --master or --connect say",
    )
    route.add_argument("--format", choices=("parquet", "csv", "json"), default="parquet")
    route.add_argument(
        "--input-format",
        choices=("csv", "json", "parquet"),
        default=None,
        help="format of both inputs (default: by extension; .jsonl and .ndjson are JSON Lines)",
    )
    route.add_argument("--matcher", default=None, help="matcher class (default Trie)")
    route.add_argument(
        "--cache-size",
        type=int,
        default=None,
        help="the matcher's result cache, in topics (default 524288 for Trie and CSTrie)",
    )
    route.add_argument(
        "--driver-memory",
        default="4g",
        help="spark.driver.memory of a session this command starts (local mode: all of Spark)",
    )
    route.set_defaults(run=_route)

    gen = sub.add_parser("generate", help="write sample subscriptions and messages files")
    gen.add_argument("--out", required=True, help="output folder; one subfolder per dialect")
    gen.add_argument("--subscriptions", type=int, default=100_000)
    gen.add_argument("--messages", type=int, default=1_000_000)
    gen.add_argument("--dialect", choices=(*tm.DIALECTS, "all"), default="all")
    gen.add_argument("--format", choices=("csv", "jsonl", "parquet"), default="csv")
    gen.add_argument(
        "--rejects",
        type=float,
        default=0.001,
        help="fraction of messages given a null or (for the dialect) invalid topic",
    )
    gen.add_argument("--seed", type=int, default=0)
    gen.set_defaults(run=_generate)

    demo = sub.add_parser("demo", help="route generated messages in this process, without Spark")
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
        choices=("headline", "scaling", "workloads", "memory", "threads", "churn", "gil", "fanout"),
        help="run only this section (repeatable)",
    )
    bench.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    bench.set_defaults(run=_bench)

    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
