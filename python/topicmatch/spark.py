"""Route tables and streams of messages to subscribers on Spark.

::

    from topicmatch.spark import route

    result = route(messages_df, subscriptions_df, dialect="mqtt")
    result.deliveries   # the message's columns plus `subscriber`, one row per delivery
    result.rejected     # the message's columns plus `reason`: null or invalid topics
    result.summary()    # messages, deliveries, matched / unmatched / rejected messages

What runs where
---------------

Driver, once per call to :func:`route`:
    the subscriptions are collected as Arrow (``pattern``, ``subscriber`` cast to string) and
    validated in one call (:func:`topicmatch.pattern_errors`: an invalid pattern raises
    :class:`topicmatch.InvalidPattern` naming the row, before any message is routed). The
    subscriber column is dictionary-encoded, so each distinct subscriber gets an integer id and
    its name sits once in the dictionary; the two columns, with the matcher's class, dialect
    and options in the schema's metadata, are written in Arrow's IPC format to one file, which
    goes to the workers with the session's artifacts (``addArtifacts(file=True)``): on a
    classic session that is ``SparkContext.addFile``, on a Spark Connect session an upload to
    the server in small chunks. Neither needs a ``SparkContext``, and neither puts the
    subscriptions in the query plan, whose size Spark Connect caps (one gRPC message of 128
    MiB, after compression) and which it sends again with every action. The exception is a
    stream on Spark Connect, whose micro-batches run without the session's artifacts: there
    the subscriptions ride in the ``mapInArrow`` function, in a plan sent once, when the query
    starts, and :func:`route` raises ``ValueError`` if they would not fit. The matcher is built
    on the workers only, and the driver makes no Python object per subscription.

Python worker, once per worker process and route call:
    the matcher is built from that file (``SparkFiles.get``): its ``subscribe_arrow`` takes
    the pattern column and the ids as the Arrow arrays they are, in one call that writes with
    the GIL released. It is kept in a module-level cache keyed by a key made for the call, so
    later tasks and later micro-batches that reach the same (reused) worker do not rebuild it.

Python worker, once per Arrow batch (``spark.sql.execution.arrow.maxRecordsPerBatch`` rows,
10,000 by default), through ``mapInArrow``:
    the topic column goes, as the Arrow array it is, to the matcher's ``lookup_arrow``: the
    Rust core reads the strings in place, routes the whole batch with the GIL released, and
    answers with two Arrow arrays, the subscriber names of each message (null when rejected;
    the ids are rows of the shipped names, whose text is copied in as each topic is looked
    up) and the reasons (null topic, invalid topic). Both columns (``subscribers``,
    ``reason``) are appended to the batch's own columns, which pass through untouched. No
    Python object is made per row, and an invalid topic costs its own row only.

JVM (Spark SQL), after the batch function:
    ``explode`` of the subscriber arrays into delivery rows, the split into deliveries and
    rejected rows, and the aggregations of :meth:`RouteResult.summary`.

Every message is accounted for exactly once: it is rejected (``reason`` not null), unmatched
(no subscriber) or matched (one delivery per subscriber). The same code runs on a batch
DataFrame and on a Structured Streaming DataFrame. On a stream, :meth:`RouteResult.write_stream`
runs one query that routes each micro-batch once and writes deliveries, rejected rows and the
counts per micro-batch; or call :func:`split` on each micro-batch of
:attr:`RouteResult.routed` inside your own ``foreachBatch``.

The topic column is cast to string before routing (so a binary or numeric topic is routed as
its string form, and carried through in that form); subscribers are strings too.

Classic sessions and Spark Connect sessions (``SparkSession.builder.remote(...)``, which needs
``pyspark[connect]``) are served alike. On Spark Connect the function of ``foreachBatch`` runs
in a Python process of the server, so :meth:`RouteResult.write_stream`'s ``on_batch`` is
called there, not in the caller's process.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import json
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming import StreamingQuery

import topicmatch as tm

#: The ``reason`` of a message whose topic is null (the one ``lookup_arrow`` gives).
NULL_TOPIC = "null topic"
#: Columns that :func:`route` adds to the message's columns.
SUBSCRIBERS = "subscribers"
SUBSCRIBER = "subscriber"
REASON = "reason"

__all__ = [
    "NULL_TOPIC",
    "ROUTE_CACHE_SIZE",
    "RouteResult",
    "is_connect",
    "resolve_matcher",
    "route",
    "route_batch",
    "split",
]


def resolve_matcher(matcher: str | type | None = None) -> type:
    """The matcher class: a class is returned as it is, a name is looked up (case-insensitive)
    in the ``topicmatch`` module; ``None`` means ``Trie``.

    The ``Trie`` by default: a worker's matcher is a fixed table read by one thread at a time,
    so the ``CSTrie``'s lock-free reads beside writers never come into play, and at the sizes
    route serves the ``Trie`` looks topics up faster (BENCHMARKS.md, "The subscriptions as
    Arrow, and the Trie on the workers")."""
    if matcher is None:
        return tm.Trie
    if isinstance(matcher, type):
        return matcher
    exact = getattr(tm, matcher, None)
    if isinstance(exact, type) and hasattr(exact, "lookup_many"):
        return exact
    for name in dir(tm):
        cls = getattr(tm, name)
        if name.lower() == matcher.lower() and isinstance(cls, type):
            if hasattr(cls, "lookup_many"):
                return cls
    raise ValueError(f"topicmatch has no matcher class named {matcher!r}")


def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session (no ``sparkContext``, no JVM in reach)."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


# -- driver side ------------------------------------------------------------------------------


#: The result cache of the workers' matcher when :func:`route` picks it: a batch job's
#: messages repeat topics across its batches, and a cache larger than the distinct topics a
#: worker sees serves most of them. Its sets hold four entries, so a set that five topics
#: fall in keeps evicting one of them: at 100,000 topics a worker, a pass over half the
#: bench's messages evicted 97,000 entries at 131,072, about 6,000 at 262,144 (and 8,000 more
#: in each later pass, a sixth of a warm pass's time), 600 at 524,288 (800 a later pass).
#: 524,288 entries are at most 128 MiB of answers a worker (the cache's budget of 256 bytes an
#: entry; 24 MB at those 100,000 topics), and an 8 MiB table.
ROUTE_CACHE_SIZE = 524_288


def _matcher_options(cls: type, cache_size: int | None) -> dict[str, int]:
    """The keyword arguments `cls` is built with: `cache_size` as given; when None, the
    :data:`ROUTE_CACHE_SIZE` for the tries with a result cache, and the class's own default
    for any other class."""
    if cache_size is not None:
        if not hasattr(cls, "cache_size"):
            raise TypeError(f"{cls.__name__} has no result cache: route it without cache_size")
        return {"cache_size": cache_size}
    if cls in {getattr(tm, "Trie", None), getattr(tm, "CSTrie", None)}:
        return {"cache_size": ROUTE_CACHE_SIZE}
    return {}


def _subscriptions(
    table: pa.Table, dialect: str, cls: type, options: dict[str, Any]
) -> pa.RecordBatch:
    """The collected (pattern, subscriber) columns, validated, as the batch the workers build
    their matcher from: ``pattern`` as it came, ``subscriber`` dictionary-encoded (each
    distinct subscriber an int32 id into its dictionary of names). The matcher's class, its
    dialect and options ride in the schema's metadata. Raises InvalidPattern or ValueError
    naming the first bad row, and whatever `cls` raises for `dialect` and `options`."""
    # The workers build the matcher; here its options are only checked, on an empty one.
    cls(dialect, **options)
    patterns = table.column(0).combine_chunks()
    subscribers = table.column(1).combine_chunks()
    faults: list[tuple[int, Exception]] = []
    reasons = tm.pattern_errors(patterns, dialect)
    if reasons.null_count < len(reasons):
        row = pc.index(reasons.is_valid(), True).as_py()
        pattern = patterns[row].as_py()
        if pattern is None:
            fault = tm.InvalidPattern(f"subscriptions row {row}: the pattern is null")
        else:
            fault = tm.InvalidPattern(
                f"subscriptions row {row} (pattern {pattern!r}, subscriber "
                f"{subscribers[row].as_py()!r}): {reasons[row].as_py()}"
            )
        faults.append((row, fault))
    if subscribers.null_count:
        row = pc.index(subscribers.is_null(), True).as_py()
        faults.append(
            (
                row,
                ValueError(
                    f"subscriptions row {row} (pattern {patterns[row].as_py()!r}): the "
                    "subscriber is null"
                ),
            )
        )
    if faults:
        raise min(faults, key=lambda fault: fault[0])[1]
    meta = {
        "matcher": f"{cls.__module__}:{cls.__qualname__}",
        "dialect": dialect,
        "options": json.dumps(options),
    }
    return pa.record_batch(
        [patterns, subscribers.dictionary_encode()], names=["pattern", SUBSCRIBER], metadata=meta
    )


def _ipc(batch: pa.RecordBatch) -> bytes:
    """`batch` in Arrow's IPC stream format."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _rebuild(payload: bytes) -> tuple[Any, pa.Array]:
    """The matcher and the subscriber names of a batch that `_subscriptions` made, shipped as
    `payload` (`_ipc`): the pairs go to the matcher's ``subscribe_arrow`` in one call, which
    reads the Arrow buffers in place and writes with the GIL released."""
    batch = pa.ipc.open_stream(payload).read_next_batch()
    meta = batch.schema.metadata
    module, name = meta[b"matcher"].decode().split(":")
    cls = functools.reduce(getattr, name.split("."), importlib.import_module(module))
    matcher = cls(meta[b"dialect"].decode(), **json.loads(meta[b"options"]))
    subscribers = batch.column(1)
    matcher.subscribe_arrow(batch.column(0), subscribers.indices)
    # `string` whatever the collected layout: route's schema declares array<string>.
    return matcher, subscribers.dictionary.cast(pa.string())


#: This process's folder of matcher files, made on first use and removed at exit. A classic
#: driver serves an added file from its own path (``SparkContext.addFile`` copies it only in
#: local mode), so the file stays for the life of the process.
_SHIP_DIR: Path | None = None


def _ship_dir() -> Path:
    global _SHIP_DIR
    if _SHIP_DIR is None:
        _SHIP_DIR = Path(tempfile.mkdtemp(prefix="topicmatch-matchers-"))
        atexit.register(shutil.rmtree, _SHIP_DIR, ignore_errors=True)
    return _SHIP_DIR


def _ship(
    spark: Any, batch: pa.RecordBatch, key: str, streaming: bool
) -> SubscriptionsFile | SubscriptionsBytes:
    """Ships the subscriptions to the workers: as a file of the session's artifacts, named
    after `key`; for a stream on Spark Connect, whose tasks do not see those, inside the
    mapInArrow function."""
    payload = _ipc(batch)
    if streaming and is_connect(spark):
        _check_plan_size(payload)
        return SubscriptionsBytes(payload)
    shipped = SubscriptionsFile(f"topicmatch-subscriptions-{key}.arrows")
    path = _ship_dir() / shipped.name
    path.write_bytes(payload)
    spark.addArtifacts(str(path), file=True)
    if is_connect(spark):
        path.unlink()  # uploaded: the server keeps its own copy
    return shipped


#: The largest gRPC message PySpark's Spark Connect client sends; a query plan is one message,
#: zstd-compressed when that makes it smaller. A megabyte is left for the rest of the plan.
CONNECT_PLAN_BYTES = 127 * 2**20


def _check_plan_size(payload: bytes) -> None:
    """Raises ValueError when the subscriptions cannot travel in a Spark Connect query plan,
    rather than let the query fail when it starts."""
    if len(payload) < CONNECT_PLAN_BYTES:
        return
    import zstandard

    packed = len(zstandard.ZstdCompressor().compress(payload))
    if packed >= CONNECT_PLAN_BYTES:
        raise ValueError(
            f"on Spark Connect, a stream carries the subscriptions in its query plan, and these "
            f"({len(payload) / 2**20:,.0f} MiB as Arrow, {packed / 2**20:,.0f} MiB compressed) "
            "exceed the 128 MiB of a Spark Connect message: route the stream on a classic "
            "session, or split the subscriptions over several streams"
        )


# -- worker side ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubscriptionsBytes:
    """The subscriptions of one route call carried in the mapInArrow function itself. For
    streams on Spark Connect: their micro-batches run without the session's artifacts, and the
    query plan, with the function in it, goes to the server once, when the query starts."""

    payload: bytes

    @property
    def value(self) -> bytes:
        return self.payload


@dataclass(frozen=True)
class SubscriptionsFile:
    """Where a worker finds the subscriptions of one route call: a file of the session's
    artifacts. ``value`` reads it (on a worker, where ``SparkFiles`` knows the session's
    folder)."""

    name: str

    @property
    def value(self) -> bytes:
        from pyspark import SparkFiles

        return Path(SparkFiles.get(self.name)).read_bytes()


#: Per Python worker: matcher key -> (matcher, subscriber names as an Arrow array). The key is
#: made on the driver, one per route call. Only the newest few are kept, so a long-lived worker
#: does not hoard old matchers.
_WORKER_CACHE: dict[str, tuple[Any, pa.Array]] = {}
_WORKER_CACHE_SIZE = 4
#: How many times this process rebuilt a matcher, by matcher key (for tests and diagnosis).
rebuilds: Counter[str] = Counter()


def _worker_state(shipped: Any, key: str) -> tuple[Any, pa.Array]:
    """The matcher and names built from what `shipped` holds (anything whose ``value`` is the
    Arrow IPC bytes of the subscriptions, such as a :class:`SubscriptionsFile`), once per
    process, cached under `key`."""
    state = _WORKER_CACHE.get(key)
    if state is None:
        state = _rebuild(shipped.value)
        rebuilds[key] += 1
        while len(_WORKER_CACHE) >= _WORKER_CACHE_SIZE:
            _WORKER_CACHE.pop(next(iter(_WORKER_CACHE)))
        _WORKER_CACHE[key] = state
    return state


def route_batch(
    batch: pa.RecordBatch, topic_col: str, matcher: Any, names: pa.Array
) -> pa.RecordBatch:
    """Appends ``subscribers`` (list of names; empty when unmatched, null when rejected) and
    ``reason`` (null unless rejected) to one Arrow batch of messages. The matcher's
    ``lookup_arrow`` routes the topic column in Rust with the GIL released and answers with
    each topic's subscriber names (its subscribers are rows of ``names``, copied in as the
    topics are looked up) and the reasons, as Arrow arrays. No Python code runs per row, and
    an invalid topic costs its own row only."""
    topics = batch.column(batch.schema.get_field_index(topic_col))
    named, reasons = matcher.lookup_arrow(topics, names)
    return pa.RecordBatch.from_arrays(
        [*batch.columns, named, reasons], names=[*batch.schema.names, SUBSCRIBERS, REASON]
    )


def _route_partition(
    batches: Iterable[pa.RecordBatch], shipped: Any, key: str, topic_col: str
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: module-level, so it pickles by reference and finds the
    worker cache of its own module."""
    matcher, names = _worker_state(shipped, key)
    for batch in batches:
        yield route_batch(batch, topic_col, matcher, names)


# -- the job ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RouteResult:
    """What :func:`route` returns. ``routed`` has one row per message: its columns plus
    ``subscribers`` (array of string; empty when unmatched, null when rejected) and ``reason``
    (null unless rejected). ``deliveries`` and ``rejected`` are views of it; on a stream they
    are streaming DataFrames too."""

    routed: DataFrame
    message_columns: tuple[str, ...]
    explode: bool = True
    #: The key of the matcher in the workers' caches and in ``rebuilds`` (None after
    #: :func:`split`).
    matcher_key: str | None = None

    @property
    def is_streaming(self) -> bool:
        return self.routed.isStreaming

    @property
    def deliveries(self) -> DataFrame:
        """With ``explode``: one row per (message, subscriber), the message's columns plus
        ``subscriber``. Without: one row per routed (not rejected) message, its columns plus
        ``subscribers``, an array that is empty when no pattern matched."""
        cols = [F.col(_quote(c)) for c in self.message_columns]
        ok = self.routed.where(F.col(REASON).isNull())
        if self.explode:
            return ok.select(*cols, F.explode(SUBSCRIBERS).alias(SUBSCRIBER))
        return ok.select(*cols, F.col(SUBSCRIBERS))

    @property
    def rejected(self) -> DataFrame:
        """One row per rejected message: its columns plus ``reason``."""
        cols = [F.col(_quote(c)) for c in self.message_columns]
        return self.routed.where(F.col(REASON).isNotNull()).select(*cols, F.col(REASON))

    def persist(self) -> RouteResult:
        """Caches ``routed`` (batch only), so that writing deliveries, rejected rows and the
        summary routes each message once."""
        self.routed.persist()
        return self

    def unpersist(self) -> RouteResult:
        self.routed.unpersist()
        return self

    def summary(self) -> dict[str, int]:
        """The counts, in one Spark job: ``messages``, ``deliveries``, ``matched_messages``,
        ``unmatched_messages`` and ``rejected_messages``; the last three add up to the
        first. On a stream, call it on :func:`split` of each micro-batch instead."""
        if self.is_streaming:
            raise TypeError(
                "summary() needs a batch DataFrame; on a stream, use write_stream(), or call "
                "split(batch_df).summary() inside foreachBatch of RouteResult.routed"
            )
        ok = F.col(REASON).isNull()
        fan = F.size(SUBSCRIBERS)
        row = self.routed.agg(
            F.count(F.lit(1)).alias("messages"),
            F.coalesce(F.sum(F.when(ok, fan)), F.lit(0)).alias("deliveries"),
            F.count(F.when(ok & (fan > 0), 1)).alias("matched_messages"),
            F.count(F.when(ok & (fan == 0), 1)).alias("unmatched_messages"),
            F.count(F.when(~ok, 1)).alias("rejected_messages"),
        ).first()
        assert row is not None
        return {k: int(v) for k, v in row.asDict().items()}

    def write_stream(
        self,
        out: str,
        checkpoint: str,
        format: str = "parquet",
        trigger: dict[str, Any] | None = None,
        on_batch: Callable[[int, dict[str, int]], None] | None = None,
    ) -> StreamingQuery:
        """Starts one streaming query that routes each micro-batch once and writes
        ``out/deliveries/epoch=N/``, ``out/rejected/epoch=N/`` and ``out/summary/epoch=N/`` (the
        counts of :meth:`summary`, one JSON row). A retried micro-batch overwrites its own
        folders, so a restart from `checkpoint` writes nothing twice; reading ``out/deliveries``
        gives every delivery with an ``epoch`` column. `trigger` goes to
        ``DataStreamWriter.trigger`` (e.g. ``{"availableNow": True}``); `on_batch` gets the
        epoch and its counts. On Spark Connect, ``foreachBatch`` functions run in a Python
        process of the server, and `on_batch` with them: its side effects happen there (read
        ``out/summary`` for the counts)."""
        if not self.is_streaming:
            raise TypeError("write_stream() needs a streaming DataFrame; write the properties")
        explode = self.explode

        def each(batch_df: DataFrame, epoch: int) -> None:
            part = split(batch_df, explode).persist()
            try:
                for name, df in (("deliveries", part.deliveries), ("rejected", part.rejected)):
                    df.write.mode("overwrite").format(format).save(f"{out}/{name}/epoch={epoch}")
                counts = part.summary()
            finally:
                part.unpersist()
            spark = batch_df.sparkSession
            spark.createDataFrame([counts]).coalesce(1).write.mode("overwrite").json(
                f"{out}/summary/epoch={epoch}"
            )
            if on_batch is not None:
                on_batch(epoch, counts)

        writer = self.routed.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
        if trigger:
            writer = writer.trigger(**trigger)
        return writer.start()

    def fanout(self) -> dict[int, int]:
        """Routed messages by number of subscribers: ``{subscribers: messages}`` (batch)."""
        rows = (
            self.routed.where(F.col(REASON).isNull())
            .groupBy(F.size(SUBSCRIBERS).alias("n"))
            .count()
            .collect()
        )
        return {int(r["n"]): int(r["count"]) for r in sorted(rows, key=lambda r: r["n"])}


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def split(routed: DataFrame, explode: bool = True) -> RouteResult:
    """A :class:`RouteResult` over a DataFrame shaped like :attr:`RouteResult.routed`, such as
    one micro-batch of it inside ``foreachBatch``."""
    cols = tuple(c for c in routed.columns if c not in (SUBSCRIBERS, REASON))
    return RouteResult(routed, cols, explode)


def route(
    messages_df: DataFrame,
    subscriptions_df: DataFrame,
    dialect: str = "amqp",
    topic_col: str = "topic",
    pattern_col: str = "pattern",
    subscriber_col: str = "subscriber",
    explode: bool = True,
    matcher: str | type | None = None,
    cache_size: int | None = None,
) -> RouteResult:
    """Routes every message of `messages_df` (batch or streaming) to the subscribers of
    `subscriptions_df` (batch) whose patterns match its topic in `dialect`.

    The subscriptions are collected and validated at once, and each worker builds them into a
    `matcher` (a class or a class name of the ``topicmatch`` module; ``Trie`` by default, see
    :func:`resolve_matcher`); an invalid pattern raises :class:`topicmatch.InvalidPattern`
    here, naming its row (its 0-based position in the collected subscriptions, which for one
    file is its order in the file), its pattern and its subscriber; a null pattern or
    subscriber is an error too. Nothing is routed until an action or a streaming query runs on
    the result's DataFrames.

    `cache_size` is given to the matcher's constructor (its result cache, in topics); by
    default the ``Trie`` and ``CSTrie`` get :data:`ROUTE_CACHE_SIZE`, sized for batch jobs
    whose workers each see up to about 100,000 distinct topics, and other classes their own
    default. A class that takes no ``cache_size`` raises ``TypeError`` if one is given.
    """
    if dialect not in tm.DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {tm.DIALECTS}")
    for name, df, col in (
        ("messages", messages_df, topic_col),
        ("subscriptions", subscriptions_df, pattern_col),
        ("subscriptions", subscriptions_df, subscriber_col),
    ):
        if col not in df.columns:
            raise ValueError(f"the {name} DataFrame has no column {col!r}: {df.columns}")
    clash = {SUBSCRIBERS, SUBSCRIBER, REASON} & set(messages_df.columns)
    if clash:
        raise ValueError(f"the messages DataFrame already has column(s) {sorted(clash)}")
    if subscriptions_df.isStreaming:
        raise ValueError("the subscriptions must be a batch DataFrame")

    cls = resolve_matcher(matcher)
    options = _matcher_options(cls, cache_size)
    # As Arrow, not Rows: a Row per subscription cost the driver 0.7-1.2 s at 100,000 of
    # them (BENCHMARKS.md, "Where the time goes"); the Arrow columns go on as they are.
    table = subscriptions_df.select(
        F.col(_quote(pattern_col)).cast("string"), F.col(_quote(subscriber_col)).cast("string")
    ).toArrow()
    batch = _subscriptions(table, dialect, cls, options)
    key = uuid.uuid4().hex
    shipped = _ship(messages_df.sparkSession, batch, key, messages_df.isStreaming)

    messages = messages_df.withColumn(topic_col, F.col(_quote(topic_col)).cast("string"))
    schema = T.StructType(
        [
            *messages.schema.fields,
            T.StructField(SUBSCRIBERS, T.ArrayType(T.StringType(), containsNull=False), True),
            T.StructField(REASON, T.StringType(), True),
        ]
    )
    fn = functools.partial(_route_partition, shipped=shipped, key=key, topic_col=topic_col)
    routed = messages.mapInArrow(fn, schema)
    return RouteResult(routed, tuple(messages.columns), explode, key)
