"""`lookup_arrow`: an Arrow string array of topics in, `(subscribers, reasons)` out, for every
matcher class and dialect, against the independent statement of the semantics (reference.py);
and `topicmatch.spark.route_batch`, which is built on it (no Spark needed here)."""

from __future__ import annotations

import gc
import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import patterns, topics

import topicmatch as tm

import reference
from conftest import TOPIC_MATCHERS

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed: pip install -e '.[spark]'")

#: Topics each dialect rejects (AMQP rejects none).
INVALID = {
    "amqp": [],
    "mqtt": ["", "a/+/c", "a/#", "+"],
    "nats": ["", "a..b", "a b", "a.*", ">"],
}
STRING_TYPES = [pa.string(), pa.large_string(), pa.string_view()]


def expected_rows(dialect, pairs, ts):
    """(sorted subscribers or None, reason or None) per topic, from the reference."""
    rows = []
    for t in ts:
        if t is None:
            rows.append((None, "null topic"))
        elif not reference.valid_topic(dialect, t):
            rows.append((None, "invalid"))
        else:
            rows.append((sorted({s for p, s in pairs if reference.matches(dialect, p, t)}), None))
    return rows


def answer_rows(answer):
    subscribers, reasons = answer
    assert subscribers.type == pa.list_(pa.field("item", pa.int64(), nullable=False))
    assert reasons.type == pa.string()
    assert len(subscribers) == len(reasons)
    rows = []
    for subs, why in zip(subscribers.to_pylist(), reasons.to_pylist(), strict=True):
        if why is not None and why.startswith("invalid topic"):
            why = "invalid"
        rows.append((None if subs is None else sorted(subs), why))
    return rows


@st.composite
def batches(draw):
    dialect = draw(st.sampled_from(tm.DIALECTS))
    pairs = draw(st.sets(st.tuples(patterns(dialect), st.integers(-3, 6)), max_size=25))
    topic = st.one_of(topics(dialect), st.none(), st.sampled_from(INVALID[dialect] or ["a"]))
    ts = draw(st.lists(topic, max_size=30))
    kind = draw(st.sampled_from(STRING_TYPES))
    offset = draw(st.integers(0, min(3, len(ts))))
    return dialect, sorted(pairs), ts, kind, offset


@settings(max_examples=150, deadline=None)
@given(batches())
def test_lookup_arrow_equals_the_reference(batch):
    dialect, pairs, ts, kind, offset = batch
    array = pa.array(ts, kind).slice(offset)  # a slice: its offsets do not start at 0
    want = expected_rows(dialect, pairs, ts[offset:])
    for cls in TOPIC_MATCHERS:
        m = cls(dialect, pairs)
        assert answer_rows(m.lookup_arrow(array)) == want, (cls.__name__, dialect)


@settings(max_examples=100, deadline=None)
@given(batches(), st.sampled_from(STRING_TYPES), st.integers(0, 2), st.booleans())
def test_lookup_arrow_with_names_answers_names_of_the_same_rows(
    batch, names_kind, names_offset, null_row
):
    """`lookup_arrow(topics, names)`: the rows `lookup_arrow(topics)` answers, each int
    replaced by its row of `names` (here the subscribers -3..6 shifted to rows 0..9; a null
    row 10, which no subscriber names, makes the column be read row by row)."""
    dialect, pairs, ts, kind, offset = batch
    array = pa.array(ts, kind).slice(offset)
    shifted = [(p, s + 3) for p, s in pairs]
    text = [f"name {i} \u00e9\u2713" for i in range(-names_offset, 10)]
    names = pa.array(text + [None] * null_row, names_kind).slice(names_offset)
    for cls in TOPIC_MATCHERS:
        m = cls(dialect, shifted)
        ids, reasons = m.lookup_arrow(array)
        named, named_reasons = m.lookup_arrow(array, names)
        assert named.type == pa.list_(pa.string())
        assert named_reasons.equals(reasons)
        # Sorted: two lookups of one topic may list its subscribers in another order.
        want = [
            None if row is None else sorted(f"name {i} \u00e9\u2713" for i in row)
            for row in ids.to_pylist()
        ]
        got = [None if row is None else sorted(row) for row in named.to_pylist()]
        assert got == want, (cls.__name__, dialect)


def test_lookup_arrow_with_names_refuses_what_it_cannot_name(matcher_cls):
    m = matcher_cls("amqp", [("a", 0), ("b", 2), ("c", -1), ("d", "bob")])
    names = pa.array(["zero", None, "two"])
    assert m.lookup_arrow(pa.array(["a", "x", None]), names)[0].to_pylist() == [
        ["zero"],
        [],
        None,
    ]
    with pytest.raises(ValueError, match=r"subscriber 2 has no name: names holds rows 0 to 1"):
        m.lookup_arrow(pa.array(["b"]), names.slice(0, 1))
    with pytest.raises(ValueError, match=r"subscriber -1 has no name"):
        m.lookup_arrow(pa.array(["c"]), names)
    m.subscribe("e", 1)
    with pytest.raises(ValueError, match=r"names\[1\] is null"):
        m.lookup_arrow(pa.array(["e"]), names)
    with pytest.raises(TypeError, match="'bob' is not an int"):
        m.lookup_arrow(pa.array(["d"]), names)
    with pytest.raises(TypeError, match="names must be an Arrow string"):
        m.lookup_arrow(pa.array(["a"]), pa.array([1, 2]))
    with pytest.raises(TypeError, match="__arrow_c_array__"):
        m.lookup_arrow(pa.array(["a"]), ["zero"])
    assert m.lookup_arrow(pa.array([], pa.string()), names)[0].to_pylist() == []


def test_reasons_are_the_errors_of_lookup(matcher_cls):
    m = matcher_cls("mqtt", [("a/+", 1), ("#", 2)])
    ts = ["a/b", "a/+", None, "", "b"]
    subscribers, reasons = m.lookup_arrow(pa.array(ts))
    for t, subs, why in zip(ts, subscribers.to_pylist(), reasons.to_pylist(), strict=True):
        if t is None:
            assert (subs, why) == (None, "null topic")
            continue
        try:
            want = sorted(m.lookup(t))
        except tm.InvalidTopic as err:
            assert (subs, why) == (None, str(err))
        else:
            assert (sorted(subs), why) == (want, None)


def test_empty_and_all_null_arrays(matcher_cls):
    m = matcher_cls("amqp", [("a.*", 1)])
    subscribers, reasons = m.lookup_arrow(pa.array([], pa.string()))
    assert (len(subscribers), len(reasons)) == (0, 0)
    subscribers, reasons = m.lookup_arrow(pa.nulls(3, pa.string()))
    assert subscribers.to_pylist() == [None] * 3
    assert reasons.to_pylist() == ["null topic"] * 3
    subscribers, _ = tm.Trie("amqp").lookup_arrow(pa.array(["a", "b"]))
    assert subscribers.to_pylist() == [[], []]


def test_a_large_array_in_one_call(matcher_cls):
    """100,000 topics, a few rejected, in every layout: one call, each row its own answer."""
    rng = random.Random(7)
    pairs = [(f"t.{i % 50}.*", i) for i in range(200)] + [("t.#", -1)]
    m = matcher_cls("nats", [(p.replace("#", ">"), s) for p, s in pairs])
    ts = [f"t.{rng.randrange(60)}.x" for _ in range(100_000)]
    bad = set(rng.sample(range(len(ts)), 25))
    for i in bad:
        ts[i] = "t..x"
    for kind in STRING_TYPES:
        subscribers, reasons = m.lookup_arrow(pa.array(ts, kind))
        assert subscribers.null_count == len(bad) == len(reasons) - reasons.null_count
        got = subscribers.to_pylist()
        for i in rng.sample(range(len(ts)), 300):
            assert (got[i] is None) == (i in bad)
            if i not in bad:
                assert sorted(got[i]) == sorted(m.lookup(ts[i]))


def test_groups_deliver_one_member_each():
    m = tm.Trie("mqtt", [("a/#", 1)])
    m.subscribe("a/+", 10, "g")
    m.subscribe("a/+", 11, "g")
    m.subscribe("$share/h/a/b", 20)
    subscribers, _ = m.lookup_arrow(pa.array(["a/b"] * 40))
    seen = [sorted(s) for s in subscribers.to_pylist()]
    assert all(s[0] == 1 and len(s) == 3 and s[1] in (10, 11) and s[2] == 20 for s in seen)
    assert {s[1] for s in seen} == {10, 11}  # the group's turn goes round


def test_wrong_input_types_are_type_errors(matcher_cls):
    m = matcher_cls("amqp", [("a", 1)])
    with pytest.raises(TypeError, match="string, large_string or string_view"):
        m.lookup_arrow(pa.array([1, 2]))
    with pytest.raises(TypeError, match="string, large_string or string_view"):
        m.lookup_arrow(pa.array([b"a"], pa.binary()))
    with pytest.raises(TypeError, match="__arrow_c_array__"):
        m.lookup_arrow(["a", "b"])
    with pytest.raises(TypeError, match="combine_chunks"):
        m.lookup_arrow(pa.chunked_array([["a"], ["b"]]))


def test_arrays_with_bad_buffers_are_refused_before_any_read(matcher_cls):
    """An array whose offsets go back, or whose bytes are not UTF-8, is a ValueError at the
    boundary (pyarrow builds such arrays from buffers without checking them)."""
    m = matcher_cls("amqp", [("a", 0)])

    def strings(offsets, data):
        offsets = pa.py_buffer(b"".join(o.to_bytes(4, "little") for o in offsets))
        return pa.Array.from_buffers(pa.string(), len(offsets) // 4 - 1, [None, offsets, data])

    going_back = strings([0, 2, 1], pa.py_buffer(b"ab"))
    not_utf8 = strings([0, 2], pa.py_buffer(b"\xff\xfe"))
    for bad in (going_back, not_utf8):
        with pytest.raises(ValueError, match="not a valid Arrow array"):
            m.lookup_arrow(bad)
        with pytest.raises(ValueError, match="not a valid Arrow array"):
            m.lookup_arrow(pa.array(["a"]), bad)
        with pytest.raises(ValueError, match="not a valid Arrow array"):
            m.subscribe_arrow(bad, pa.array([1, 2], pa.int64())[: len(bad)])
        with pytest.raises(ValueError, match="not a valid Arrow array"):
            tm.pattern_errors(bad, "amqp")
    assert m.lookup_arrow(pa.array(["a"]), pa.array(["zero"]))[0].to_pylist() == [["zero"]]


def test_a_subscriber_that_is_not_an_int_is_a_type_error(matcher_cls):
    m = matcher_cls("amqp", [("a", 1), ("b", "bob"), ("c", 2**70)])
    subscribers, _ = m.lookup_arrow(pa.array(["a", "x"]))
    assert subscribers.to_pylist() == [[1], []]
    with pytest.raises(TypeError, match="'bob' is not an int"):
        m.lookup_arrow(pa.array(["a", "b"]))
    with pytest.raises(TypeError, match="not an int that fits in 64 bits"):
        m.lookup_arrow(pa.array(["c"]))
    assert m.unsubscribe("b", "bob")
    assert m.lookup_arrow(pa.array(["a", "b"]))[0].to_pylist() == [[1], []]


def test_released_and_reused_ids_answer_with_their_own_values(matcher_cls):
    m = matcher_cls("amqp", [("a", 5)])
    m.unsubscribe("a", 5)
    m.subscribe("a", "text")  # may take the id 5 had
    m.unsubscribe("a", "text")
    m.subscribe("a", 9)
    assert m.lookup_arrow(pa.array(["a"]))[0].to_pylist() == [[9]]


def free_released_ids(m):
    """Lookups enough for the epoch to pass, so that ids released before come back for reuse
    (the registry's rule 1 frees them only then)."""
    for _ in range(300):
        m.lookup_arrow(pa.array(["x"]))


def test_a_reused_id_answers_with_its_new_value_not_its_number(matcher_cls):
    # Ids 0 and 1 are their own values, mapped with no read; id 0, released and reused by
    # the subscriber 5, must answer 5 at once.
    m = matcher_cls("amqp")
    m.subscribe("a", 0)
    m.subscribe("a", 1)
    assert m.unsubscribe("a", 0)
    free_released_ids(m)
    m.subscribe("b", 5)
    assert m.lookup_arrow(pa.array(["a", "b"]))[0].to_pylist() == [[1], [5]]
    # And given its own number back, it is mapped by it again.
    assert m.unsubscribe("b", 5)
    free_released_ids(m)
    m.subscribe("b", 0)
    assert m.lookup_arrow(pa.array(["a", "b"]))[0].to_pylist() == [[1], [0]]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "remove", "free"]), st.integers(0, 5)).flatmap(
            lambda op: st.tuples(st.just(op[0]), st.just(op[1]), st.integers(0, 7) | st.just("s"))
        ),
        max_size=40,
    )
)
def test_ids_that_are_their_own_values_follow_every_write(ops):
    # Small ints and text subscribed and unsubscribed in any order, with pauses that let
    # released ids come back: the ids the registry hands out are often their subscribers'
    # own values, which lookup_arrow maps without reading the table (a Spark job's
    # dictionary indices), and a release or a reuse by another value must end that at once.
    for matcher_cls in TOPIC_MATCHERS:
        m = matcher_cls("amqp")
        pairs: set = set()
        for op, t, v in ops:
            if op == "add":
                m.subscribe(f"t{t}", v)
                pairs.add((t, v))
            elif op == "remove":
                assert m.unsubscribe(f"t{t}", v) == ((t, v) in pairs)
                pairs.discard((t, v))
            else:
                free_released_ids(m)
            texts = {t for t, v in pairs if v == "s"}
            topics = [f"t{t}" for t in range(6) if t not in texts]
            got = m.lookup_arrow(pa.array(topics, pa.string()))[0].to_pylist()
            want = [sorted(v for p, v in pairs if f"t{p}" == topic) for topic in topics]
            assert [sorted(row) for row in got] == want


def test_every_int64_comes_back_the_table_markers_included(matcher_cls):
    # The id table marks released ids and other objects with the three lowest int64s, and
    # keeps subscribers equal to them aside: each must still come back as itself.
    edges = [-(2**63), -(2**63) + 1, -(2**63) + 2, -(2**63) + 3, -1, 0, 2**63 - 1]
    m = matcher_cls("amqp", [(f"t{i}", v) for i, v in enumerate(edges)])
    m.subscribe("all.#", -(2**63) + 1)
    topics = pa.array([f"t{i}" for i in range(len(edges))] + ["all.x"])
    assert m.lookup_arrow(topics)[0].to_pylist() == [[v] for v in edges] + [[-(2**63) + 1]]
    # A marker value released, its id reused by a plain int and by another marker value.
    for i, v in enumerate(edges[:3]):
        assert m.unsubscribe(f"t{i}", v)
        if v == -(2**63) + 1:
            assert m.unsubscribe("all.#", v)
    m.subscribe("t0", 7)
    m.subscribe("t1", -(2**63) + 2)
    m.subscribe("t2", "not an int")
    got = m.lookup_arrow(pa.array(["t0", "t1", "t3", "all.x"]))[0].to_pylist()
    assert got == [[7], [-(2**63) + 2], [-(2**63) + 3], []]
    with pytest.raises(TypeError, match="'not an int' is not an int"):
        m.lookup_arrow(pa.array(["t2"]))


def test_snapshots_answer_from_their_own_time():
    m = tm.CSTrie("amqp", [("a", 1)])
    snap = m.snapshot()
    m.unsubscribe("a", 1)
    m.subscribe("a", 2)
    assert snap.lookup_arrow(pa.array(["a"]))[0].to_pylist() == [[1]]
    assert m.lookup_arrow(pa.array(["a"]))[0].to_pylist() == [[2]]


def test_the_answer_outlives_the_matcher_and_the_input(matcher_cls):
    m = matcher_cls("amqp", [("a.*", 3)])
    answer = m.lookup_arrow(pa.array(["a.b", "c"]))
    del m
    gc.collect()
    assert answer[0].to_pylist() == [[3], []]
    answer[0].validate(full=True)
    answer[1].validate(full=True)


def test_readers_beside_a_writer_see_whole_answers():
    """Lookups on 4 threads while one thread subscribes and unsubscribes: every answer holds
    the fixed subscriber and only values that were ever subscribed."""
    m = tm.CSTrie("mqtt", [("s/#", -1)])
    stop = threading.Event()
    errors: list[BaseException] = []
    array = pa.array([f"s/{i % 7}/x" for i in range(2_000)])

    def writer():
        i = 0
        while not stop.is_set():
            m.subscribe(f"s/{i % 7}/+", i % 100)
            m.unsubscribe(f"s/{(i + 3) % 7}/+", (i + 3) % 100)
            i += 1

    def reader():
        try:
            for _ in range(30):
                for subs in m.lookup_arrow(array)[0].to_pylist():
                    assert -1 in subs and all(-1 <= s < 100 for s in subs)
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    w = threading.Thread(target=writer)
    readers = [threading.Thread(target=reader) for _ in range(4)]
    w.start()
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    stop.set()
    w.join()
    assert not errors, errors[0]


# -- route_batch ------------------------------------------------------------------------------


# -- subscribe_arrow and pattern_errors ------------------------------------------------------

#: Patterns each dialect rejects, among those the strategy draws.
BAD_PATTERNS = {
    "amqp": [],
    "mqtt": ["", "a/#/b", "a+", "#/a"],
    "nats": ["", "a..b", ">.a", "a b", "."],
}
INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64()]


@st.composite
def subscription_columns(draw):
    dialect = draw(st.sampled_from(tm.DIALECTS))
    pattern = st.one_of(
        patterns(dialect), patterns(dialect), st.sampled_from(BAD_PATTERNS[dialect] or ["a"])
    )
    rows = draw(st.lists(st.tuples(pattern, st.integers(0, 9)), max_size=25))
    if draw(st.integers(0, 9)) == 0 and rows:  # now and then a null in one column
        at = draw(st.integers(0, len(rows) - 1))
        p, sub = rows[at]
        rows[at] = (None, sub) if draw(st.booleans()) else (p, None)
    kind = draw(st.sampled_from(STRING_TYPES))
    int_kind = draw(st.sampled_from(INT_TYPES))
    offset = draw(st.integers(0, min(3, len(rows))))
    return dialect, rows, kind, int_kind, offset


@settings(max_examples=150, deadline=None)
@given(subscription_columns())
def test_subscribe_arrow_equals_subscribe_many_or_adds_nothing(columns):
    """Every matcher takes the two columns as `subscribe_many` takes their pairs, and
    `pattern_errors` names exactly the rows the reference rejects; a bad row (null pattern,
    null subscriber, invalid pattern) raises, names the first such row, and adds nothing."""
    dialect, rows, kind, int_kind, offset = columns
    ps = pa.array([p for p, _ in rows], kind).slice(offset)
    subs = pa.array([s for _, s in rows], int_kind).slice(offset)
    rows = rows[offset:]
    reasons = tm.pattern_errors(ps, dialect).to_pylist()
    for (p, _), why in zip(rows, reasons, strict=True):
        if p is None:
            assert why == "null pattern"
        else:
            assert (why is None) == reference.valid_pattern(dialect, p), (p, why)
    first_bad = next(
        (i for i, ((p, s), why) in enumerate(zip(rows, reasons, strict=True)) if why or s is None),
        None,
    )
    for cls in TOPIC_MATCHERS:
        m = cls(dialect, [("x", 100)])
        if first_bad is None:
            twin = cls(dialect, [("x", 100)])
            assert m.subscribe_arrow(ps, subs) == twin.subscribe_many(rows), cls.__name__
            assert sorted(m.subscriptions(), key=repr) == sorted(twin.subscriptions(), key=repr)
            continue
        error = ValueError if reasons[first_bad] is None else tm.InvalidPattern
        with pytest.raises(error, match=rf"\[{first_bad}\]"):
            m.subscribe_arrow(ps, subs)
        assert m.subscriptions() == [("x", 100)], cls.__name__


def test_subscribe_arrow_edges(matcher_cls):
    m = matcher_cls("mqtt", [("a/#", 7)])
    assert m.subscribe_arrow(pa.array([], pa.string()), pa.array([], pa.int64())) == 0
    assert m.subscribe_arrow(pa.array(["a/#", "a/#", "b"]), pa.array([7, 8, 8])) == 2
    assert sorted(m.lookup("a/b")) == [7, 8] and len(m) == 3
    assert m.subscribe_arrow(pa.array(["$share/g/c/+"]), pa.array([9])) == 1
    assert m.lookup("c/d") == [9]
    ends = [-(2**63), 2**63 - 1]
    assert m.subscribe_arrow(pa.array(["e", "e"]), pa.array(ends, pa.int64())) == 2
    assert sorted(m.lookup("e")) == ends
    assert sorted(m.lookup_arrow(pa.array(["e"]))[0].to_pylist()[0]) == ends
    before = len(m)
    with pytest.raises(ValueError, match="patterns has 1 rows and subscribers 2"):
        m.subscribe_arrow(pa.array(["f"]), pa.array([1, 2]))
    with pytest.raises(TypeError, match="subscribers must be an Arrow integer array"):
        m.subscribe_arrow(pa.array(["f"]), pa.array(["bob"]))
    with pytest.raises(TypeError, match="patterns must be an Arrow string"):
        m.subscribe_arrow(pa.array([1]), pa.array([1]))
    with pytest.raises(TypeError, match="combine_chunks"):
        m.subscribe_arrow(pa.chunked_array([["f"]]), pa.array([1]))
    with pytest.raises(OverflowError, match=r"subscribers\[1\] = 18446744073709551615"):
        m.subscribe_arrow(pa.array(["f", "g"]), pa.array([1, 2**64 - 1], pa.uint64()))
    with pytest.raises(tm.InvalidPattern, match=r"patterns\[0\] is null"):
        m.subscribe_arrow(pa.array([None, "f"], pa.string()), pa.array([1, 2]))
    with pytest.raises(ValueError, match=r"subscribers\[1\] is null"):
        m.subscribe_arrow(pa.array(["f", "g"]), pa.array([1, None]))
    assert len(m) == before
    assert m.unsubscribe("b", 8) and m.remove_subscriber(8) == 1  # pins counted per pair


def test_subscribe_arrow_on_a_snapshot_is_refused():
    snap = tm.CSTrie("amqp", [("a", 1)]).snapshot()
    with pytest.raises(TypeError):
        snap.subscribe_arrow(pa.array(["b"]), pa.array([2]))
    assert snap.subscriptions() == [("a", 1)]


def test_subscribe_arrow_takes_a_large_table_in_one_call(matcher_cls):
    """100,000 pairs in one call, as `subscribe_many` takes them."""
    rng = random.Random(3)
    rows = [
        (f"s/{rng.randrange(500)}/+/{rng.randrange(40)}", rng.randrange(5000))
        for _ in range(100_000)
    ]
    m = matcher_cls("mqtt")
    new = m.subscribe_arrow(pa.array([p for p, _ in rows]), pa.array([s for _, s in rows]))
    assert new == len(set(rows)) == len(m)
    for topic in ("s/1/x/2", "s/499/y/39", "s/7/z/0"):
        want = sorted({s for p, s in rows if reference.matches("mqtt", p, topic)})
        assert sorted(m.lookup(topic)) == want


def test_pattern_errors_wrong_types_and_dialects():
    assert tm.pattern_errors(pa.array([], pa.string()), "nats").to_pylist() == []
    assert tm.pattern_errors(pa.array(["a.*", "#"], pa.large_string())).to_pylist() == [None, None]
    with pytest.raises(TypeError, match="patterns must be an Arrow string"):
        tm.pattern_errors(pa.array([1]))
    with pytest.raises(ValueError, match="dialect"):
        tm.pattern_errors(pa.array(["a"]), "stomp")
    for bad in ("a/#/b", "$share//a", "$share/g"):  # the last two: shared subscriptions
        why = tm.pattern_errors(pa.array([bad]), "mqtt")[0].as_py()
        with pytest.raises(tm.InvalidPattern) as err:
            tm.Trie("mqtt").subscribe(bad, 1)
        assert why == str(err.value)


@pytest.fixture(scope="module")
def spark():
    """topicmatch.spark, which imports pyspark (route_batch itself runs without Spark)."""
    return pytest.importorskip("topicmatch.spark", reason="PySpark is not installed")


def test_route_batch_names_subscribers_and_gives_reasons(spark):
    m = tm.Trie("mqtt", [("a/+", 0), ("#", 1)])
    names = pa.array(["alice", "audit"])
    ts = ["a/1", "b", "a/2", "c", "a/+", "d", None, "e", "f"]
    batch = pa.record_batch({"topic": pa.array(ts, pa.string()), "n": list(range(9))})
    out = spark.route_batch(batch, "topic", m, names).to_pydict()
    assert out["n"] == list(range(9))
    assert [sorted(s) if s is not None else None for s in out["subscribers"]] == [
        ["alice", "audit"],
        ["audit"],
        ["alice", "audit"],
        ["audit"],
        None,
        ["audit"],
        None,
        ["audit"],
        ["audit"],
    ]
    assert out["reason"][4].startswith('invalid topic "a/+"')
    assert out["reason"][6] == spark.NULL_TOPIC
    assert [r for i, r in enumerate(out["reason"]) if i not in (4, 6)] == [None] * 7


def test_route_batch_agrees_with_lookup_on_random_batches(spark):
    """Nulls, invalid topics, sliced batches, every string layout."""
    m = tm.Trie("nats", [("a.*", 0), (">", 1), ("a.b", 2)])
    names = pa.array(["x", "y", "z"])
    rng = random.Random(1)
    pool = ["a.b", "a.c", "q", None, "a..b", "", "a b", "a.b.c"]
    for _ in range(300):
        ts = [rng.choice(pool) for _ in range(rng.randint(0, 40))]
        batch = pa.record_batch({"topic": pa.array(ts, rng.choice(STRING_TYPES))})
        if len(ts) > 3 and rng.random() < 0.3:
            batch, ts = batch.slice(2), ts[2:]
        out = spark.route_batch(batch, "topic", m, names).to_pydict()
        for topic, subs, why in zip(ts, out["subscribers"], out["reason"], strict=True):
            if topic is None:
                assert (subs, why) == (None, spark.NULL_TOPIC)
                continue
            try:
                expected = sorted(names[i].as_py() for i in m.lookup(topic))
            except tm.InvalidTopic as err:
                assert (subs, why) == (None, str(err))
                continue
            assert (sorted(subs), why) == (expected, None)


def test_route_batch_never_looks_topics_up_one_by_one(spark):
    """An invalid topic costs its own row: the batch goes to lookup_arrow once, and neither
    lookup nor lookup_many is called."""
    calls = []

    class Spy:
        def __init__(self, inner):
            self.inner = inner

        def lookup_arrow(self, topics, names=None):
            calls.append(len(topics))
            return self.inner.lookup_arrow(topics, names)

    m = Spy(tm.Trie("mqtt", [("a/+", 0)]))
    batch = pa.record_batch({"topic": pa.array(["a/b", "a/+", "a/c"] * 100)})
    out = spark.route_batch(batch, "topic", m, pa.array(["x"]))
    assert calls == [300]
    assert out.column(2).null_count == 200
