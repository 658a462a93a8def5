"""The topic matcher API of DESIGN.md, on every matcher class."""

from __future__ import annotations

import pickle
import time

import pytest

import topicmatch as tm


class Conn:
    """A subscriber compared by identity, like a connection object."""


class BadHash:
    def __hash__(self):
        raise RuntimeError("no hash today")


class BadEq:
    def __hash__(self):
        return 1

    def __eq__(self, other):
        raise RuntimeError("no equality today")


def test_subscribe_reports_new_pairs(matcher_cls):
    m = matcher_cls("mqtt")
    assert m.subscribe("sensors/+/temp", "a") is True
    assert m.subscribe("sensors/+/temp", "a") is False
    assert m.subscribe("sensors/#", "a") is True
    assert len(m) == 2


def test_lookup_returns_each_subscriber_once(matcher_cls):
    m = matcher_cls("mqtt")
    m.subscribe("sensors/+/temp", "a")
    m.subscribe("sensors/#", "a")
    m.subscribe("sensors/#", "b")
    assert sorted(m.lookup("sensors/1/temp")) == ["a", "b"]
    assert m.lookup("other") == []


def test_lookup_returns_the_very_objects_subscribed(matcher_cls):
    c = Conn()
    m = matcher_cls()
    m.subscribe("a.*", c)
    assert m.lookup("a.b")[0] is c


def test_unsubscribe_reports_removed_pairs(matcher_cls):
    m = matcher_cls("nats")
    m.subscribe("a.>", 1)
    assert m.unsubscribe("a.>", 2) is False
    assert m.unsubscribe("a.*", 1) is False
    assert m.unsubscribe("a.>", 1) is True
    assert m.unsubscribe("a.>", 1) is False
    assert m.lookup("a.b") == [] and len(m) == 0


def test_remove_subscriber_drops_all_its_patterns(matcher_cls):
    m = matcher_cls()
    for p in ("a", "a.*", "#"):
        m.subscribe(p, "x")
    m.subscribe("a", "y")
    assert m.remove_subscriber("x") == 3
    assert m.remove_subscriber("x") == 0
    assert m.lookup("a") == ["y"]
    assert m.subscriptions() == [("a", "y")]


def test_subscriber_ids_are_reused_without_mixing_subscribers(matcher_cls):
    m = matcher_cls()
    for i in range(50):
        m.subscribe(f"t.{i}", f"s{i}")
        m.unsubscribe(f"t.{i}", f"s{i}")
        m.subscribe(f"u.{i}", f"n{i}")
    assert len(m) == 50
    for i in range(50):
        assert m.lookup(f"u.{i}") == [f"n{i}"]
        assert m.lookup(f"t.{i}") == []


def test_dialect_and_repr(matcher_cls):
    m = matcher_cls("nats")
    m.subscribe("a", 1)
    assert m.dialect == "nats"
    assert repr(m) == f'{matcher_cls.__name__}(dialect="nats", subscriptions=1)'
    assert matcher_cls().dialect == "amqp"


def test_unknown_dialect_is_a_value_error(matcher_cls):
    with pytest.raises(ValueError, match="unknown dialect"):
        matcher_cls("stomp")


def test_pickle_round_trip_keeps_every_pair(matcher_cls):
    m = matcher_cls("mqtt")
    m.subscribe("a/+", ("tuple", 1))
    m.subscribe("a/#", "s")
    m.subscribe("$SYS/#", 7)
    back = pickle.loads(pickle.dumps(m))
    assert type(back) is matcher_cls and back.dialect == "mqtt"
    assert sorted(map(repr, back.subscriptions())) == sorted(map(repr, m.subscriptions()))
    assert sorted(map(repr, back.lookup("a/b"))) == sorted(map(repr, m.lookup("a/b")))
    assert back.lookup("$SYS/x") == [7]


def test_constructor_and_subscribe_many_take_pairs(matcher_cls):
    m = matcher_cls("amqp", [("a.#", 1), ("a.b", 2), ("a.#", 1)])
    assert len(m) == 2
    assert m.subscribe_many([("x", 3), ("a.b", 2)]) == 1
    assert sorted(m.lookup("a.b")) == [1, 2]


def test_subscribe_many_checks_every_pattern_before_adding_any(matcher_cls):
    m = matcher_cls("mqtt")
    with pytest.raises(tm.InvalidPattern, match=r"subscriptions\[1\]"):
        m.subscribe_many([("a/b", 1), ("a/b#", 2)])
    assert len(m) == 0
    with pytest.raises(ValueError, match="pair"):
        m.subscribe_many([("a", 1, 2)])
    with pytest.raises(TypeError):
        m.subscribe_many([("a", [])])
    assert len(m) == 0 and m.subscriptions() == []


def test_lookup_many_is_one_list_per_topic(matcher_cls):
    m = matcher_cls("mqtt", [("a/+", 1), ("#", 2)])
    topics = ["a/b", "c", "a/b/c"] * 10
    assert [sorted(r) for r in m.lookup_many(topics)] == [[1, 2], [2], [2]] * 10
    assert m.lookup_many([]) == []
    assert [sorted(r) for r in m.lookup_many(iter(["a/x"]))] == [[1, 2]]


def test_lookup_many_names_the_bad_topic(matcher_cls):
    m = matcher_cls("mqtt", [("#", 1)])
    with pytest.raises(tm.InvalidTopic, match=r"topics\[2\]"):
        m.lookup_many(["a", "b"] + ["a/+"] + ["c"] * 10)


def test_invalid_input_raises_typed_errors_and_changes_nothing(matcher_cls):
    m = matcher_cls("mqtt", [("a", 1)])
    with pytest.raises(tm.InvalidPattern, match="byte 3"):
        m.subscribe("a/b+", 1)
    with pytest.raises(tm.InvalidTopic):
        m.lookup("a/#")
    with pytest.raises(tm.InvalidPattern):
        m.unsubscribe("#/a", 1)
    assert isinstance(tm.InvalidPattern("x"), ValueError)
    assert isinstance(tm.InvalidTopic("x"), ValueError)
    assert m.subscriptions() == [("a", 1)]


def test_bytes_are_utf8_and_bad_text_is_invalid(matcher_cls):
    m = matcher_cls("mqtt")
    m.subscribe(b"caf\xc3\xa9/+", 1)
    assert m.lookup("café/x") == [1]
    with pytest.raises(tm.InvalidTopic, match="UTF-8"):
        m.lookup(b"\xff/x")
    with pytest.raises(tm.InvalidPattern, match="surrogate"):
        m.subscribe("a\udc80", 1)
    with pytest.raises(TypeError, match="str or UTF-8 bytes"):
        m.subscribe(42, 1)
    with pytest.raises(tm.InvalidTopic, match="NUL"):
        m.lookup("a\0b")


def test_unhashable_or_failing_subscribers_change_nothing(matcher_cls):
    m = matcher_cls()
    with pytest.raises(TypeError):
        m.subscribe("a", [])
    with pytest.raises(RuntimeError, match="no hash"):
        m.subscribe("a", BadHash())
    m.subscribe("a", BadEq())
    with pytest.raises(RuntimeError, match="no equality"):
        m.subscribe("a", BadEq())
    assert len(m) == 1
    with pytest.raises(TypeError):
        m.unsubscribe("a", [])
    assert len(m) == 1


def test_hash_chains_against_long_topics_stay_polynomial(matcher_cls):
    """`#.#.#…x` against a 1,000-word topic: a generous bound, not a benchmark."""
    m = matcher_cls("amqp")
    m.subscribe("#." * 12 + "x", 1)
    m.subscribe("#." * 12 + "w", 2)
    topic = ".".join(["w"] * 1000)
    start = time.perf_counter()
    assert m.lookup(topic) == [2]
    assert time.perf_counter() - start < 1.0


def test_deep_patterns_do_not_exhaust_the_stack(matcher_cls):
    m = matcher_cls("amqp")
    deep = ".".join(["a"] * 100_000)
    m.subscribe(deep, 1)
    m.subscribe(deep + ".#", 2)
    assert sorted(m.lookup(deep)) == [1, 2]
    assert m.unsubscribe(deep, 1) and m.unsubscribe(deep + ".#", 2)
    assert len(m) == 0
    with pytest.raises(tm.InvalidPattern, match="65,535"):
        matcher_cls("mqtt").subscribe("/".join(["a"] * 40_000), 1)


def test_matches_needs_no_index():
    assert tm.matches("sensors/+/temp", "sensors/1/temp", dialect="mqtt")
    assert tm.matches("a.#.z", "a.b.c.z")
    assert not tm.matches("a.>", "a", dialect="nats")
    with pytest.raises(ValueError):
        tm.matches("a", "a", dialect="xmpp")


def test_truncated_or_newer_pickles_fail_clearly(matcher_cls):
    data = pickle.dumps(matcher_cls("mqtt", [("a/#", 1)]))
    with pytest.raises((pickle.UnpicklingError, EOFError)):
        pickle.loads(data[: len(data) // 2])
    cls, args, state = matcher_cls("mqtt", [("a/#", 1)]).__reduce__()
    assert state == 1
    with pytest.raises(ValueError, match="newer topicmatch"):
        pickle.loads(pickle.dumps(_Newer(cls, args)))
    with pytest.raises(ValueError, match="not a topicmatch pickle"):
        cls(*args).__setstate__("junk")


class _Newer:
    """Pickles as a matcher of a future format."""

    def __init__(self, cls, args):
        self.cls, self.args = cls, args

    def __reduce__(self):
        return (self.cls, self.args, 2)
