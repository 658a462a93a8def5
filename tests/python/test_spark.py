"""The Spark routing job and the `topicmatch route` command, on a real local SparkSession.

Every test that takes `spark` runs on a classic `local[2]` session; those marked
`@both_sessions`, or parametrized over `spark` themselves, run on a Spark Connect session too,
whose server PySpark starts in this process (`SparkSession.builder.remote("local[2]")`). One
session of each kind serves the whole run, one after the other (see `spark`). The oracle is
`NaiveMatcher` called row by row in this process.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="pyarrow is not installed: pip install -e '.[spark]'")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java 17: no java on PATH and no JAVA_HOME", allow_module_level=True)

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

import topicmatch as tm  # noqa: E402
from topicmatch import cli, workload  # noqa: E402
from topicmatch import spark as tms  # noqa: E402

# Topics each dialect rejects, with a word its reason must contain.
INVALID = {
    "amqp": [],
    "mqtt": [("", "at least one character"), ("a/+/c", "no wildcards"), ("a/#", "no wildcards")],
    "nats": [("", "at least one token"), ("a..b", "empty tokens"), ("a b", "white space")],
}


#: The kinds of session, in the order they run.
SESSIONS = ("classic", "connect")
#: Runs a test on both kinds of session; the other tests that take `spark` run on a classic one.
both_sessions = pytest.mark.parametrize("spark", SESSIONS, indirect=True, scope="session")


def pytest_generate_tests(metafunc):
    if "spark" in metafunc.fixturenames and not _parametrizes_spark(metafunc.definition):
        metafunc.parametrize("spark", SESSIONS[:1], indirect=True, scope="session")


def _parametrizes_spark(definition) -> bool:
    for mark in definition.iter_markers("parametrize"):
        names = mark.args[0]
        if "spark" in (names.replace(" ", "").split(",") if isinstance(names, str) else names):
            return True
    return False


@pytest.fixture(scope="session")
def spark(request):
    """A `local[2]` session of the kind `request.param` names. The two kinds cannot be up in one
    process at once: PySpark refuses to start a local Connect server beside a classic session,
    and while a Connect session is up its functions (`F.col`, ...) build Connect columns
    process-wide. Being session-scoped and parametrized, this fixture makes pytest run the
    tests of one kind together and stop that session before it starts the other; the Connect
    server then starts in the JVM that is already up, in about two seconds."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName("topicmatch tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    if request.param == "classic":
        session = builder.master("local[2]").getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
    else:
        pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect]")
        with warnings.catch_warnings(), pytest.MonkeyPatch.context() as env:
            # The server starts with these settings; PySpark then also tries to set the static
            # ones on the new session, which cannot be done and only warns.
            warnings.filterwarnings("ignore", message="Failed to set spark\\.")
            # As in PySpark's own tests: an ephemeral port, not Spark Connect's 15002, which
            # another server on this machine may hold.
            env.setenv("SPARK_TESTING", "1")
            session = builder.remote("local[2]").getOrCreate()
    yield session
    session.stop()


def oracle(dialect, subscriptions, topics):
    """{(message id, subscriber)} by NaiveMatcher, one topic at a time."""
    m = tm.NaiveMatcher(dialect, subscriptions)
    return {(i, s) for i, t in enumerate(topics) for s in m.lookup(t)}


def sample(dialect, n_subs=300, n_topics=1500, seed=1):
    w = workload.mixed(n_subs, n_topics, dialect, seed=seed)
    sep = workload.SEPARATOR[dialect]
    # Topics no pattern matches, and a `$` topic that MQTT hides from leading wildcards.
    extra = [sep.join(["zz", "yy"]), "$SYS" + sep + "w1", "w1"]
    subs = [*w.subscriptions, (workload.MANY[dialect], "firehose")]
    return subs, [*w.topics, *extra]


def deliveries_of(df):
    return {(r["id"], r["subscriber"]) for r in df.select("id", "subscriber").collect()}


def messages_df(spark, topics):
    return spark.createDataFrame(list(enumerate(topics)), "id long, topic string")


def subscriptions_df(spark, subs):
    return spark.createDataFrame(subs, "pattern string, subscriber string")


# -- the job against the oracle ---------------------------------------------------------------


@both_sessions
@pytest.mark.parametrize("dialect", tm.DIALECTS)
def test_deliveries_equal_the_oracle(spark, dialect):
    subs, topics = sample(dialect)
    result = tms.route(
        messages_df(spark, topics).repartition(3), subscriptions_df(spark, subs), dialect=dialect
    )
    got = deliveries_of(result.deliveries)
    assert got == oracle(dialect, subs, topics)
    assert result.deliveries.columns == ["id", "topic", "subscriber"]
    summary = result.summary()
    assert summary["deliveries"] == len(got)
    assert summary["rejected_messages"] == 0
    assert summary["matched_messages"] == len({i for i, _ in got})
    assert summary["matched_messages"] + summary["unmatched_messages"] == len(topics)


def test_unexploded_deliveries_hold_one_array_per_message(spark):
    subs, topics = sample("mqtt", n_subs=100, n_topics=200)
    result = tms.route(
        messages_df(spark, topics), subscriptions_df(spark, subs), dialect="mqtt", explode=False
    )
    rows = result.deliveries.collect()
    assert sorted(r["id"] for r in rows) == list(range(len(topics)))
    m = tm.NaiveMatcher("mqtt", subs)
    for r in rows:
        assert sorted(r["subscribers"]) == sorted(m.lookup(topics[r["id"]]))
    assert any(r["subscribers"] == [] for r in rows)  # the unmatched ones are kept


@pytest.mark.parametrize("name", ["NaiveMatcher", "trie", "Trie", "LazyDFA"])
def test_the_matcher_is_a_parameter(spark, name):
    subs, topics = sample("amqp", n_subs=80, n_topics=300)
    result = tms.route(
        messages_df(spark, topics), subscriptions_df(spark, subs), dialect="amqp", matcher=name
    )
    assert deliveries_of(result.deliveries) == oracle("amqp", subs, topics)


def test_the_workers_matcher_gets_a_cache_for_batch_jobs(spark, monkeypatch):
    subs, topics = sample("mqtt", n_subs=60, n_topics=200)
    shipped = []
    ship = tms._ship

    def keep(spark_, batch, key, streaming):
        shipped.append(batch)
        return ship(spark_, batch, key, streaming)

    monkeypatch.setattr(tms, "_ship", keep)
    msgs, subs_df = messages_df(spark, topics), subscriptions_df(spark, subs)
    default = tms.route(msgs, subs_df, dialect="mqtt")
    sized = tms.route(msgs, subs_df, dialect="mqtt", matcher="Trie", cache_size=0)
    own = tms.route(msgs, subs_df, dialect="mqtt", matcher="InvertedBitmap")
    # What a worker builds from each shipment.
    built = [tms._rebuild(tms._ipc(batch))[0] for batch in shipped]
    assert [type(m) for m in built] == [tms.resolve_matcher(None), tm.Trie, tm.InvertedBitmap]
    assert built[0].cache_size == tms.ROUTE_CACHE_SIZE
    assert built[1].cache_size == 0
    assert built[2].cache_size == tm.InvertedBitmap("mqtt").cache_size
    assert all(len(m) == len(set(subs)) for m in built)
    want = oracle("mqtt", subs, topics)
    for result in (default, sized, own):
        assert deliveries_of(result.deliveries) == want


def test_the_shipment_holds_each_name_once_and_rebuilds_every_pair():
    rows = pa.table(
        {
            "pattern": ["a.*", "b.#", "a.*", "c"],
            "subscriber": ["alice", "bob", "bob", "alice"],
        }
    )
    batch = tms._subscriptions(rows, "amqp", tm.Trie, {"cache_size": 64})
    assert batch.column(1).dictionary.to_pylist() == ["alice", "bob"]
    matcher, names = tms._rebuild(tms._ipc(batch))
    assert type(matcher) is tm.Trie and matcher.cache_size == 64
    named = {(p, names[s].as_py()) for p, s in matcher.subscriptions()}
    assert named == set(
        zip(rows["pattern"].to_pylist(), rows["subscriber"].to_pylist(), strict=True)
    )
    empty = tms._subscriptions(rows.slice(0, 0), "amqp", tm.CSTrie, {})
    assert len(tms._rebuild(tms._ipc(empty))[0]) == 0
    # Collected as large_string (Spark's large variable-width types): names come back string.
    large = rows.cast(
        pa.schema([("pattern", pa.large_string()), ("subscriber", pa.large_string())])
    )
    matcher, names = tms._rebuild(tms._ipc(tms._subscriptions(large, "amqp", tm.Trie, {})))
    assert names.type == pa.string() and len(matcher) == 4


def test_a_cache_size_for_a_matcher_without_a_cache_is_refused(spark):
    subs, topics = sample("amqp", n_subs=10, n_topics=10)
    msgs, subs_df = messages_df(spark, topics), subscriptions_df(spark, subs)
    with pytest.raises(TypeError, match="LazyDFA has no result cache"):
        tms.route(msgs, subs_df, matcher="LazyDFA", cache_size=1024)
    with pytest.raises(ValueError, match="cache_size"):
        tms.route(msgs, subs_df, matcher="CSTrie", cache_size=-1)


def test_resolve_matcher_defaults_to_the_trie():
    assert tms.resolve_matcher(None) is tm.Trie
    assert tms.resolve_matcher("naivematcher") is tm.NaiveMatcher
    assert tms.resolve_matcher(tm.Trie) is tm.Trie
    with pytest.raises(ValueError, match="no matcher class named 'nope'"):
        tms.resolve_matcher("nope")
    with pytest.raises(ValueError):
        tms.resolve_matcher("InvalidTopic")


def test_carried_columns_and_non_string_subscribers(spark):
    msgs = spark.createDataFrame(
        [(1, "a.b", 2.5, [1, 2]), (2, "c", None, None)],
        "id int, topic string, score double, tags array<int>",
    )
    subs = spark.createDataFrame([("a.*", 7), ("#", 8)], "pattern string, subscriber int")
    rows = tms.route(msgs, subs).deliveries.orderBy("id", "subscriber").collect()
    assert [tuple(r) for r in rows] == [
        (1, "a.b", 2.5, [1, 2], "7"),
        (1, "a.b", 2.5, [1, 2], "8"),
        (2, "c", None, None, "8"),
    ]


# -- bad rows ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spark", "dialect"),
    [*(("classic", d) for d in tm.DIALECTS), ("connect", "mqtt")],
    indirect=["spark"],
    scope="session",
)
def test_bad_rows_are_rejected_with_reasons_and_counts_reconcile(spark, dialect):
    subs, good = sample(dialect, n_subs=100, n_topics=400)
    bad = [None, *(t for t, _ in INVALID[dialect])]
    # Bad rows scattered among good ones, across partitions.
    topics = [*good[:150], *bad, *good[150:], None]
    result = tms.route(
        messages_df(spark, topics).repartition(2), subscriptions_df(spark, subs), dialect=dialect
    )
    rejected = {r["id"]: r["reason"] for r in result.rejected.collect()}
    expected_bad = {i for i, t in enumerate(topics) if t is None} | {
        i for i, t in enumerate(topics) if t in {b for b, _ in INVALID[dialect]}
    }
    assert set(rejected) == expected_bad
    for i, reason in rejected.items():
        if topics[i] is None:
            assert reason == tms.NULL_TOPIC
        else:
            word = dict(INVALID[dialect])[topics[i]]
            assert reason.startswith("invalid topic") and word in reason
    assert result.rejected.columns == ["id", "topic", "reason"]

    good_ids = [i for i in range(len(topics)) if i not in expected_bad]
    m = tm.NaiveMatcher(dialect, subs)
    expected = {(i, s) for i in good_ids for s in m.lookup(topics[i])}
    assert deliveries_of(result.deliveries) == expected

    s = result.summary()
    assert s["messages"] == len(topics)
    assert s["rejected_messages"] == len(expected_bad)
    assert s["matched_messages"] + s["unmatched_messages"] + s["rejected_messages"] == len(topics)
    assert s["deliveries"] == len(expected)
    assert s["unmatched_messages"] == sum(1 for i in good_ids if not m.lookup(topics[i]))
    assert sum(result.fanout().values()) == len(good_ids)


# route_batch on its own (Arrow in, Arrow out, no Spark): tests/python/test_arrow.py.


# -- subscriptions ----------------------------------------------------------------------------


def test_an_invalid_pattern_raises_before_routing_and_names_the_row(spark):
    subs = subscriptions_df(spark, [("a/+", "s1"), ("a/#", "s2"), ("a/#/b", "s3"), ("x", "s4")])
    jobs_before = set(spark.sparkContext.statusTracker().getJobIdsForGroup())
    with pytest.raises(tm.InvalidPattern, match=r"row 2 \(pattern 'a/#/b', subscriber 's3'\)"):
        tms.route(messages_df(spark, ["a/b"]), subs, dialect="mqtt")
    # Only the collect of the subscriptions ran: no job read the messages.
    new_jobs = set(spark.sparkContext.statusTracker().getJobIdsForGroup()) - jobs_before
    assert len(new_jobs) <= 1


def test_a_null_pattern_or_subscriber_names_the_row(spark):
    with pytest.raises(tm.InvalidPattern, match="row 1: the pattern is null"):
        tms.route(messages_df(spark, ["a"]), subscriptions_df(spark, [("a", "x"), (None, "y")]))
    with pytest.raises(ValueError, match="row 0 .*subscriber is null"):
        tms.route(messages_df(spark, ["a"]), subscriptions_df(spark, [("a", None)]))


def test_route_rejects_clashing_and_missing_columns(spark):
    subs = subscriptions_df(spark, [("a", "x")])
    clash = spark.createDataFrame([("a", "r")], "topic string, reason string")
    with pytest.raises(ValueError, match="already has column"):
        tms.route(clash, subs)
    with pytest.raises(ValueError, match="no column 'subject'"):
        tms.route(messages_df(spark, ["a"]), subs, topic_col="subject")


# -- worker cache -----------------------------------------------------------------------------


class FakeShipment:
    """Stands for a SubscriptionsFile or SubscriptionsBytes: anything whose `value` is the
    subscriptions as Arrow IPC bytes, counting its reads."""

    def __init__(self, value):
        self._value = value
        self.reads = 0

    @property
    def value(self):
        self.reads += 1
        return self._value


def test_a_worker_rebuilds_the_matcher_once_per_route_call():
    rows = pa.table({"pattern": ["a.*"], "subscriber": ["alice"]})
    payload = tms._ipc(tms._subscriptions(rows, "amqp", tm.Trie, {}))
    bc = FakeShipment(payload)
    batch = pa.record_batch({"topic": pa.array(["a.b", "b"], pa.string())})
    for _ in range(3):  # three tasks of two batches each
        out = list(tms._route_partition(iter([batch, batch]), bc, "key-1", "topic"))
        assert out[0].column(1).to_pylist() == [["alice"], []]
    assert tms.rebuilds["key-1"] == 1
    assert bc.reads == 1
    list(tms._route_partition(iter([batch]), FakeShipment(payload), "key-2", "topic"))
    assert tms.rebuilds["key-2"] == 1 and tms.rebuilds["key-1"] == 1


@both_sessions
def test_spark_workers_rebuild_once_not_once_per_partition(spark):
    def probe_rebuilds(batches, key):
        """Run in the same pool of Python workers: this worker's rebuild count. Nested, so
        that it pickles by value (workers cannot import the test module)."""
        import os as _os

        import pyarrow as _pa

        from topicmatch import spark as _tms

        for batch in batches:
            n = batch.num_rows
            yield _pa.record_batch(
                {
                    "pid": _pa.array([_os.getpid()] * n, _pa.int64()),
                    "rebuilds": _pa.array([_tms.rebuilds[key]] * n, _pa.int64()),
                }
            )

    subs, topics = sample("amqp", n_subs=100, n_topics=2000)
    msgs = messages_df(spark, topics).repartition(8)
    result = tms.route(msgs, subscriptions_df(spark, subs))
    first = result.summary()
    assert result.summary() == first  # a second job over the same 8 partitions
    probe = (
        spark.range(0, 2000, numPartitions=8)
        .mapInArrow(
            functools.partial(probe_rebuilds, key=result.matcher_key), "pid long, rebuilds long"
        )
        .distinct()
        .collect()
    )
    per_worker = {r["pid"]: r["rebuilds"] for r in probe}
    # 16 tasks routed on a few reused workers, each of which built the matcher once.
    assert max(per_worker.values()) == 1
    assert all(n <= 1 for n in per_worker.values())


# -- streaming --------------------------------------------------------------------------------


@both_sessions
def test_a_stream_of_json_files_gives_the_batch_deliveries(spark, tmp_path):
    subs, good = sample("mqtt", n_subs=150, n_topics=600)
    topics = [*good, None, "a/+/b"]
    src = tmp_path / "in"
    src.mkdir()
    for part in range(3):  # three files, so the stream sees several files
        with (src / f"part-{part}.json").open("w") as f:
            for i in range(part, len(topics), 3):
                f.write(json.dumps({"id": i, "topic": topics[i]}) + "\n")
    schema = "id long, topic string"
    subscriptions = subscriptions_df(spark, subs)

    batch = tms.route(spark.read.schema(schema).json(str(src)), subscriptions, dialect="mqtt")
    stream = tms.route(
        spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(src)),
        subscriptions,
        dialect="mqtt",
    )
    assert stream.is_streaming
    with pytest.raises(TypeError, match="foreachBatch"):
        stream.summary()
    expected = deliveries_of(batch.deliveries)
    assert expected == oracle("mqtt", subs, topics[:-2]) and expected

    if not tms.is_connect(spark):  # the same route on Spark Connect: write_stream below covers it
        # The streaming DataFrame itself, to a memory sink.
        q = (
            stream.deliveries.writeStream.format("memory")
            .queryName("tm_deliveries")
            .option("checkpointLocation", str(tmp_path / "ckpt-memory"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None
        assert deliveries_of(spark.table("tm_deliveries")) == expected

    # One query that routes each micro-batch once and writes all three outputs.
    counts = {}
    out = tmp_path / "out"
    q = stream.write_stream(
        str(out),
        str(tmp_path / "ckpt-files"),
        trigger={"availableNow": True},
        on_batch=lambda epoch, c: counts.__setitem__(epoch, c),
    )
    q.awaitTermination(120)
    assert q.exception() is None
    assert deliveries_of(spark.read.parquet(str(out / "deliveries"))) == expected
    rejected = spark.read.parquet(str(out / "rejected")).collect()
    assert {r["id"] for r in rejected} == {len(topics) - 2, len(topics) - 1}
    written = {
        r["epoch"]: {k: v for k, v in r.asDict().items() if k != "epoch"}
        for r in spark.read.json(str(out / "summary")).collect()
    }
    assert sorted(written) == [0, 1, 2]  # one micro-batch per file
    total = Counter()
    for c in written.values():
        total.update(c)
    assert dict(total) == batch.summary()
    if not tms.is_connect(spark):  # on Spark Connect, on_batch runs in the server's Python
        assert counts == written
    with pytest.raises(TypeError, match="streaming DataFrame"):
        batch.write_stream(str(out), str(tmp_path / "ckpt-batch"))


# -- the command ------------------------------------------------------------------------------


def _write_inputs(folder: Path, fmt: str, subs, topics):
    folder.mkdir(parents=True, exist_ok=True)
    rows = [(i, t, f"p{i}") for i, t in enumerate(topics)]
    cli._write_rows(folder / f"subscriptions.{fmt}", ["pattern", "subscriber"], subs, fmt)
    cli._write_rows(folder / f"messages.{fmt}", ["id", "topic", "payload"], rows, fmt)
    return folder / f"subscriptions.{fmt}", folder / f"messages.{fmt}"


@pytest.mark.parametrize(
    ("spark", "fmt"),
    [("classic", "csv"), ("classic", "jsonl"), ("classic", "parquet"), ("connect", "jsonl")],
    indirect=["spark"],
    scope="session",
)
def test_the_route_command_end_to_end(spark, tmp_path, capsys, fmt):
    subs, good = sample("nats", n_subs=120, n_topics=300)
    topics = [*good, "a..b"] + ([None] if fmt != "csv" else [])
    subs_path, msgs_path = _write_inputs(tmp_path / "in", fmt, subs, topics)
    out = tmp_path / "out"
    # A URI: on Spark Connect, summary.json goes through pyarrow's file systems, not the JVM's.
    out_arg = f"file://{out}" if tms.is_connect(spark) else str(out)
    code = cli.main(
        [
            "route",
            "--subscriptions",
            str(subs_path),
            "--messages",
            str(msgs_path),
            "--out",
            out_arg,
            "--dialect",
            "nats",
        ]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    printed = capsys.readouterr().out
    assert '"deliveries"' in printed and "fan-out per message" in printed
    expected = oracle("nats", subs, good)
    bad = len(topics) - len(good)
    assert summary["messages"] == len(topics)
    assert summary["deliveries"] == len(expected)
    assert summary["rejected_messages"] == bad
    assert (
        summary["matched_messages"] + summary["unmatched_messages"] + summary["rejected_messages"]
        == summary["messages"]
    )
    assert summary["seconds"] > 0
    deliveries = pq.read_table(out / "deliveries")
    # JSON inference orders the columns by name; the added one comes last.
    assert sorted(deliveries.column_names[:-1]) == ["id", "payload", "topic"]
    assert deliveries.column_names[-1] == "subscriber"
    got = {
        (int(i), s)
        for i, s in zip(
            deliveries["id"].to_pylist(), deliveries["subscriber"].to_pylist(), strict=True
        )
    }
    assert got == expected
    rejected = pq.read_table(out / "rejected")
    assert sorted(rejected.column_names[:-1]) == ["id", "payload", "topic"]
    assert rejected.column_names[-1] == "reason"
    assert rejected.num_rows == bad


def test_the_route_command_reports_a_bad_pattern(spark, tmp_path, capsys):
    subs_path, msgs_path = _write_inputs(tmp_path, "csv", [("a.>.b", "s")], ["a.b"])
    code = cli.main(
        ["route", "--subscriptions", str(subs_path), "--messages", str(msgs_path)]
        + ["--out", str(tmp_path / "out"), "--dialect", "nats"]
    )
    assert code == 2
    assert "row 0 (pattern 'a.>.b'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_route_command_refuses_a_cache_the_matcher_lacks(spark, tmp_path, capsys):
    subs_path, msgs_path = _write_inputs(tmp_path, "csv", [("a.*", "s")], ["a.b"])
    args = ["route", "--subscriptions", str(subs_path), "--messages", str(msgs_path)]
    args += ["--out", str(tmp_path / "out"), "--matcher", "LazyDFA", "--cache-size", "64"]
    assert cli.main(args) == 2
    assert "LazyDFA has no result cache" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_generate_writes_each_dialect(tmp_path, capsys):
    code = cli.main(
        ["generate", "--out", str(tmp_path), "--subscriptions", "50", "--messages", "400"]
        + ["--format", "jsonl", "--rejects", "0.05", "--seed", "3"]
    )
    assert code == 0
    for dialect in tm.DIALECTS:
        subs = [json.loads(x) for x in (tmp_path / dialect / "subscriptions.jsonl").open()]
        msgs = [json.loads(x) for x in (tmp_path / dialect / "messages.jsonl").open()]
        assert len(subs) == 50 and set(subs[0]) == {"pattern", "subscriber"}
        assert len(msgs) == 400 and set(msgs[0]) == {"id", "topic", "payload"}
        tm.NaiveMatcher(dialect, [(s["pattern"], s["subscriber"]) for s in subs])
        m = tm.NaiveMatcher(dialect)
        invalid = 0
        for msg in msgs:
            try:
                m.lookup(msg["topic"])
            except (tm.InvalidTopic, TypeError):
                invalid += 1
        assert 0 < invalid < 60
    assert "mqtt: 50 subscriptions" in capsys.readouterr().out


def test_the_route_command_writes_csv_to_a_uri(spark, tmp_path):
    subs_path, msgs_path = _write_inputs(
        tmp_path / "in", "csv", [("a.*", "s1"), ("#", "s2")], ["a.b", "c", "a.b.c"]
    )
    out = tmp_path / "out"
    code = cli.main(
        ["route", "--subscriptions", str(subs_path), "--messages", str(msgs_path)]
        + ["--out", f"file://{out}", "--format", "csv", "--matcher", "NaiveMatcher"]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {k: summary[k] for k in ("messages", "deliveries", "matched_messages")} == {
        "messages": 3,
        "deliveries": 4,
        "matched_messages": 3,
    }
    rows = spark.read.option("header", True).csv(str(out / "deliveries")).collect()
    assert sorted((r["id"], r["subscriber"]) for r in rows) == [
        ("0", "s1"),
        ("0", "s2"),
        ("1", "s2"),
        ("2", "s2"),
    ]
