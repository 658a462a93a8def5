"""HeadersMatcher: RabbitMQ's headers-exchange rules, the OpenAMQ white paper's example, typed
header values (a table of broker facts, docs/headers.md), and a check against the reference
(tests/python/reference.py) on random subscriptions and headers."""

from __future__ import annotations

import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import topicmatch as tm

import reference as ref


def white_paper() -> tm.HeadersMatcher:
    m = tm.HeadersMatcher()
    m.subscribe({"currency": "USD", "urgent": None}, "usd-urgent")
    m.subscribe({"currency": "EUR"}, "eur")
    m.subscribe({"market": "forex", "currency": "EUR"}, "forex-eur")
    m.subscribe({"urgent": None}, "urgent")
    return m


def test_white_paper_example():
    m = white_paper()
    slow = {"currency": "JPY", "market": "forex", "slow": ""}
    assert m.lookup(slow) == [] and m.hits(slow) == {"forex-eur": 1}
    urgent = {"currency": "JPY", "urgent": ""}
    assert m.lookup(urgent) == ["urgent"]
    assert m.hits(urgent) == {"usd-urgent": 1, "urgent": 1}
    eur = {"market": "forex", "currency": "EUR"}
    assert sorted(m.lookup(eur)) == ["eur", "forex-eur"]
    assert m.hits(eur) == {"eur": 1, "forex-eur": 2}


def test_any_and_x_criteria():
    m = tm.HeadersMatcher()
    m.subscribe({"a": "1", "b": "2"}, "any", match="any")
    m.subscribe({"x-trace": "on"}, "x-only")
    m.subscribe({"x-trace": "on"}, "with-x", match="all-with-x")
    assert sorted(m.lookup({"b": "2"})) == ["any", "x-only"]  # `all` of nothing counted holds
    assert sorted(m.lookup({"x-trace": "off"})) == ["x-only"]
    assert sorted(m.lookup({"x-trace": "on"})) == ["with-x", "x-only"]
    with pytest.raises(ValueError):
        m.subscribe({"a": "1"}, "s", match="most")
    with pytest.raises(TypeError):
        m.subscribe({"a": object()}, "s")
    assert len(m) == 3


def test_unsubscribe_remove_and_pickle():
    m = white_paper()
    assert m.unsubscribe({"currency": "EUR"}, "eur")
    assert not m.unsubscribe({"currency": "EUR"}, "eur")
    assert m.remove_subscriber("urgent") == 1
    back = pickle.loads(pickle.dumps(m))
    assert len(back) == 2
    assert sorted(map(repr, back.subscriptions())) == sorted(map(repr, m.subscriptions()))
    assert back.lookup({"market": "forex", "currency": "EUR"}) == ["forex-eur"]


# ---------------------------------------------------------------------------- typed values

RMQ_MATCH = (
    "rabbit_exchange_type_headers.erl match/2: maps:get(K, Headers) =:= V, the field type "
    "dropped by mc_amqpl:routing_headers/2"
)
RMQ_PARSE = "rabbit_binary_parser:parse_table/1: nested tables and arrays keep {Type, Value}"

#: (name, criteria, headers, match, matches, source): the same rows as tests/headers.rs, and a
#: few that only Python can spell (tuple, bytearray).
CASES = [
    ("int_widths_equal_by_value", {"k": 5}, {"k": 5}, "all", True,
     "amqp_client_SUITE dead_letter_headers_exchange: binding uint 5 routes message long 5"),
    ("int_is_not_its_string", {"k": 5}, {"k": "5"}, "all", False, RMQ_MATCH),
    ("int_is_not_a_bool", {"k": 1}, {"k": True}, "all", False, RMQ_MATCH),
    ("bool_is_not_an_int", {"k": True}, {"k": 1}, "all", False, RMQ_MATCH),
    ("bool_equals_bool", {"k": True}, {"k": True}, "all", True, RMQ_MATCH),
    ("int_is_not_a_float", {"k": 1}, {"k": 1.0}, "all", False,
     "=:= since RabbitMQ 3.13 (3.12's == said equal; LavinMQ: equal; Qpid: differ)"),
    ("float_equals_float", {"k": 1.5}, {"k": 1.5}, "all", True, RMQ_MATCH),
    ("zero_is_not_minus_zero", {"k": 0.0}, {"k": -0.0}, "all", False,
     "0.0 =:= -0.0 is false from OTP 27 (LavinMQ: equal)"),
    ("nan_equals_nan", {"k": math.nan}, {"k": -math.nan}, "all", True,
     "RabbitMQ cannot decode a NaN; Qpid's Double.equals: equal; LavinMQ: never"),
    ("str_equals_its_bytes", {"k": "a"}, {"k": b"a"}, "all", True,
     "parse_table/1: longstr and byte array are both binaries (Qpid, LavinMQ: differ)"),
    ("bytes_equal_their_str", {"k": b"a"}, {"k": "a"}, "all", True,
     "parse_table/1: longstr and byte array are both binaries (Qpid, LavinMQ: differ)"),
    ("bytes_equal_bytes", {"k": b"a"}, {"k": b"a"}, "all", True,
     "binaries =:= (Qpid: byte[] equals is identity, never)"),
    ("bytes_compare_to_utf8", {"k": b"\xff"}, {"k": "\xff"}, "all", False,
     "a str is its UTF-8 bytes: \\xff is C3 BF"),
    ("presence_takes_any_value", {"k": None}, {"k": "x"}, "all", True,
     "exchanges_SUITE headers_exchange_key_presence_only (LavinMQ: void criterion = void only)"),
    ("presence_takes_void", {"k": None}, {"k": None}, "all", True,
     "match/2: {K, void, _} is maps:is_key"),
    ("presence_needs_the_name", {"k": None}, {"j": "x"}, "all", False,
     "exchanges_SUITE headers_exchange_key_presence_only msg4"),
    ("a_value_is_not_void", {"k": "x"}, {"k": None}, "all", False, RMQ_MATCH),
    ("empty_string_is_a_value", {"k": ""}, {"k": "x"}, "all", False,
     "RabbitMQ compares '' as a value (Qpid: '' means present)"),
    ("arrays_equal", {"k": [1, "a"]}, {"k": [1, "a"]}, "all", True,
     "decoded lists =:= (Qpid: FieldArray equals is identity, never)"),
    ("array_order_counts", {"k": [1, "a"]}, {"k": ["a", 1]}, "all", False, RMQ_PARSE),
    ("nested_str_is_not_nested_bytes", {"k": ["a"]}, {"k": [b"a"]}, "all", False,
     "parse_array/1: {longstr, V} vs {binary, V}, as pika sends str and bytes"),
    ("nested_int_is_not_nested_float", {"k": [1]}, {"k": [1.0]}, "all", False,
     "parse_array/1 keeps the type (LavinMQ: equal)"),
    ("tables_equal", {"k": {"a": 1, "b": 2}}, {"k": {"a": 1, "b": 2}}, "all", True,
     "message_routing_spec.cr 'should match nestled amq-protocol tables' (Qpid: never)"),
    ("table_order_counts", {"k": {"a": 1, "b": 2}}, {"k": {"b": 2, "a": 1}}, "all", False,
     "parse_table/1 keeps wire order (LavinMQ: Table#== ignores order)"),
    ("nested_void_is_a_value", {"k": {"a": None}}, {"k": {"a": 1}}, "all", False, RMQ_PARSE),
    ("nested_void_equals_void", {"k": {"a": None}}, {"k": {"a": None}}, "all", True, RMQ_PARSE),
    ("long_ints", {"k": 2**40}, {"k": 2**40}, "all", True, RMQ_MATCH),
    ("any_without_counted_criteria_matches_nothing", {}, {"k": 1}, "any", False,
     "match_any([], ...) is false (Qpid: matches everything)"),
    ("all_of_only_x_matches_a_message_without_headers", {"x-k": 1}, {}, "all", True,
     "match_all([], ...) is true (LavinMQ spec: not empty headers when args only have x- keys)"),
    ("x_criteria_count_with_x", {"x-k": 1}, {"x-k": 1}, "all-with-x", True,
     "match_x/2 (Qpid: x- always ignored; LavinMQ: all-with-x refused)"),
    ("x_criteria_fail_with_x", {"x-k": 1}, {"x-k": 2}, "all-with-x", False,
     "match_x/2 (Qpid: x- ignored, so it matches)"),
    ("typed_all", {"k": 5, "j": "a"}, {"k": 5, "j": b"a", "z": True}, "all", True, RMQ_MATCH),
    ("tuple_is_an_array", {"k": (1, "a")}, {"k": [1, "a"]}, "all", True,
     "py-amqp sends a tuple as a field array"),
    ("bytearray_is_bytes", {"k": bytearray(b"a")}, {"k": b"a"}, "all", True, RMQ_MATCH),
]  # fmt: skip


@pytest.mark.parametrize(
    ("criteria", "headers", "mode", "matches", "source"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_typed_values_compare_as_rabbitmq_compares_them(criteria, headers, mode, matches, source):
    m = tm.HeadersMatcher()
    m.subscribe(criteria, "s", match=mode)
    assert (m.lookup(headers) == ["s"]) is matches, source
    assert ref.headers_hits(criteria, mode, headers)[0] is matches, "the reference disagrees"


def test_typed_criteria_come_back_as_their_types():
    m = tm.HeadersMatcher()
    criteria = {
        "s": "a",
        "b": b"\x00\xff",
        "ba": bytearray(b"x"),
        "i": -(2**63),
        "big": 2**63 - 1,
        "f": -0.0,
        "t": True,
        "p": None,
        "tbl": {"z": 1, "a": [None, 2.5, (b"q",)]},
    }
    assert m.subscribe(criteria, "who", match="any")
    [(back, who, mode)] = m.subscriptions()
    assert (who, mode) == ("who", "any")
    want = dict(criteria, ba=b"x", tbl={"z": 1, "a": [None, 2.5, [b"q"]]})
    assert back == want
    assert list(back["tbl"]) == ["z", "a"]  # a table keeps its order
    assert {k: type(v) for k, v in back.items()} == {k: type(v) for k, v in want.items()}
    assert math.copysign(1, back["f"]) == -1
    copy = pickle.loads(pickle.dumps(m))
    assert repr(copy) == "HeadersMatcher(subscriptions=1)"
    assert copy.subscriptions() == m.subscriptions()
    assert copy.lookup({"t": True}) == ["who"]
    assert copy.unsubscribe(criteria, "who", match="any") and len(copy) == 0


def test_a_str_and_its_bytes_are_two_subscriptions_that_match_alike():
    m = tm.HeadersMatcher()
    assert m.subscribe({"k": "a"}, "s")
    assert m.subscribe({"k": b"a"}, "s")
    assert not m.subscribe({"k": bytearray(b"a")}, "s")
    assert len(m) == 2 and m.hits({"k": "a"}) == {"s": 1}
    assert m.unsubscribe({"k": "a"}, "s")
    assert m.lookup({"k": "a"}) == ["s"]  # the bytes subscription is still there
    assert m.subscriptions() == [({"k": b"a"}, "s", "all")]


def test_ints_take_the_64_bit_signed_range():
    m = tm.HeadersMatcher()
    for edge in (2**63 - 1, -(2**63)):
        assert m.subscribe({"k": edge}, edge)
        assert m.lookup({"k": edge}) == [edge]
    for beyond in (2**63, -(2**63) - 1, 10**100):
        with pytest.raises(ValueError, match="'k'.*signed 64-bit"):
            m.subscribe({"k": beyond}, "s")
        with pytest.raises(ValueError, match="'k'.*signed 64-bit"):
            m.lookup({"k": [beyond]})
    assert len(m) == 2


def self_containing_list() -> list:
    loop: list = []
    loop.append(loop)
    return loop


def deep(n: int) -> object:
    v: object = 1
    for _ in range(n):
        v = [v]
    return v


#: (value, exception, words the message holds): each refused as a criterion and as a header.
BAD_VALUES = [
    (object(), TypeError, "type object"),
    ({1, 2}, TypeError, "type set"),
    (1j, TypeError, "type complex"),
    (memoryview(b"a"), TypeError, "type memoryview"),
    ({"nested": object()}, TypeError, "type object"),
    ({1: "a"}, TypeError, "key must be a str, not int"),
    ([2**64], ValueError, "signed 64-bit"),
    ("\ud800", ValueError, "UTF-8"),
    (self_containing_list(), ValueError, "nest deeper than 64"),
    (deep(65), ValueError, "nest deeper than 64"),
]


@pytest.mark.parametrize(("bad", "exc", "words"), BAD_VALUES, ids=lambda v: type(v).__name__)
def test_a_bad_value_raises_a_typed_error_naming_the_header_and_changes_nothing(bad, exc, words):
    m = white_paper()
    before = m.subscriptions()
    for call in (
        lambda: m.subscribe({"ok": "1", "bad-header": bad}, "s"),
        lambda: m.unsubscribe({"currency": "EUR", "bad-header": bad}, "eur"),
        lambda: m.lookup({"currency": "EUR", "bad-header": bad}),
        lambda: m.hits({"currency": "EUR", "bad-header": bad}),
    ):
        with pytest.raises(exc) as raised:
            call()
        assert "bad-header" in str(raised.value) and words in str(raised.value)
    assert m.subscriptions() == before and len(m) == 4
    assert m.lookup({"currency": "EUR"}) == ["eur"]


def test_values_convert_without_running_their_python_code():
    class Sneaky(list):
        def __iter__(self):
            raise AssertionError("__iter__ called")

    class Table(dict):
        def items(self):
            raise AssertionError("items called")

    m = tm.HeadersMatcher()
    assert m.subscribe({"k": Sneaky([1, Table(a=b"x")])}, "s")
    assert m.lookup({"k": (1, {"a": b"x"})}) == ["s"]
    assert m.subscriptions() == [({"k": [1, {"a": b"x"}]}, "s", "all")]


def test_deep_but_allowed_nesting_works():
    m = tm.HeadersMatcher()
    m.subscribe({"k": deep(64)}, "s")
    assert m.lookup({"k": deep(64)}) == ["s"] and m.lookup({"k": deep(63)}) == []


# ---------------------------------------------------------------------------- the reference

NAMES = ["a", "b", "x-c", "x-match"]

LEAVES = st.one_of(
    st.sampled_from(["1", "a", ""]),
    st.sampled_from([b"1", b"a", b"\xff", bytearray(b"a")]),
    st.sampled_from([0, 1, -1, 2**40, 2**63 - 1, -(2**63)]),
    st.sampled_from([0.0, -0.0, 1.0, math.nan, -math.nan, math.inf]),
    st.booleans(),
    st.none(),
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=2),
        st.tuples(inner),
        st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
    ),
    max_leaves=4,
)


def twin(v: object) -> object:
    """A value near `v` that the rules tell apart from it or not: a str's bytes, an int's float,
    a float's negation, a table reversed."""
    kind = ref.header_kind(v)
    if kind == "str":
        return v.encode()
    if kind == "bytes":
        return bytes(v).decode("utf-8", "replace")
    if kind == "int":
        return float(v)
    if kind == "float":
        return -v
    if kind == "bool":
        return int(v)
    if kind == "void":
        return ""
    if kind == "table":
        return dict(reversed(v.items())) if len(v) > 1 else {k: twin(x) for k, x in v.items()}
    return [twin(x) for x in v]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_typed_headers_equal_the_reference(data):
    pool = data.draw(st.lists(VALUES, min_size=1, max_size=4), label="pool")
    pick = st.builds(
        lambda i, t: twin(pool[i % len(pool)]) if t else pool[i % len(pool)],
        st.integers(0, 3),
        st.booleans(),
    )
    criteria = st.dictionaries(st.sampled_from(NAMES), st.one_of(st.none(), pick), max_size=3)
    ops = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(["subscribe", "subscribe", "unsubscribe"]),
                criteria,
                st.integers(0, 4),
                st.sampled_from(ref.HEADER_MODES),
            ),
            max_size=12,
        ),
        label="ops",
    )
    messages = data.draw(
        st.lists(st.dictionaries(st.sampled_from([*NAMES, "d"]), pick, max_size=4), max_size=6),
        label="messages",
    )
    m = tm.HeadersMatcher()
    model: dict[tuple, dict] = {}
    for op, crit, who, mode in ops:
        key = (ref.criteria_identity(crit), mode, who)
        if op == "subscribe":
            assert m.subscribe(crit, who, match=mode) is (key not in model)
            model.setdefault(key, crit)
        else:
            assert m.unsubscribe(crit, who, match=mode) is (model.pop(key, None) is not None)
    assert len(m) == len(model)
    for headers in messages:
        matched, hits = set(), {}
        for (_, mode, who), crit in model.items():
            ok, met = ref.headers_hits(crit, mode, headers)
            if ok:
                matched.add(who)
            if met:
                hits[who] = max(hits.get(who, 0), met)
        assert set(m.lookup(headers)) == matched
        assert m.hits(headers) == hits
    for copy in (m, pickle.loads(pickle.dumps(m))):
        listed = {(ref.criteria_identity(c), mode, who) for c, who, mode in copy.subscriptions()}
        assert listed == set(model)
