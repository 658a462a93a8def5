"""Hostile input: huge strings, deep topics, wildcard chains, huge fan-in and fan-out. Each
ends in a clear error or a correct answer, in polynomial time and bounded memory."""

from __future__ import annotations

import time

import pytest

import topicmatch as tm

TEN_MB = 10 * 1024 * 1024


def test_ten_megabyte_strings(matcher_cls):
    word = "w" * TEN_MB
    amqp = matcher_cls("amqp")
    amqp.subscribe(word + ".#", 1)
    assert amqp.lookup(word + ".x") == [1]
    assert amqp.lookup(word[:-1]) == []
    with pytest.raises(tm.InvalidPattern, match="65,535") as err:
        matcher_cls("mqtt").subscribe(word, 1)
    assert len(str(err.value)) < 300  # the message quotes the input, it does not copy it
    with pytest.raises(tm.InvalidTopic, match="65,535"):
        matcher_cls("mqtt").lookup(word)
    nats = matcher_cls("nats")
    nats.subscribe("a.>", 1)
    assert nats.lookup("a." + word) == [1]
    with pytest.raises(tm.InvalidTopic, match="white space"):
        nats.lookup("a." + word + " ")


@pytest.mark.parametrize("dialect", tm.DIALECTS)
def test_wildcard_chains_against_a_thousand_word_topic(matcher_cls, dialect):
    sep = {"amqp": ".", "mqtt": "/", "nats": "."}[dialect]
    one = {"amqp": "*", "mqtt": "+", "nats": "*"}[dialect]
    many = {"amqp": "#", "mqtt": "#", "nats": ">"}[dialect]
    m = matcher_cls(dialect)
    if dialect == "amqp":
        m.subscribe(sep.join(["#"] * 14 + ["x"]), "no")
        m.subscribe(sep.join(["#", "w"] * 7), "yes")
    m.subscribe(sep.join([one] * 500 + [many]), "long")
    m.subscribe(sep.join([one] * 999 + ["x"]), "exact-no")
    topic = sep.join(["w"] * 1000)
    start = time.perf_counter()
    got = sorted(m.lookup(topic))
    assert time.perf_counter() - start < 1.0
    assert got == (["long", "yes"] if dialect == "amqp" else ["long"])


def test_a_million_subscribers_on_one_pattern(matcher_cls):
    m = matcher_cls("mqtt", (("hot/topic", i) for i in range(1_000_000)))
    assert len(m) == 1_000_000
    got = m.lookup("hot/topic")
    assert len(got) == 1_000_000 and len(set(got)) == 1_000_000
    assert m.unsubscribe("hot/topic", 999_999)
    assert len(m.lookup("hot/topic")) == 999_999


def test_one_subscriber_on_a_million_patterns(matcher_cls):
    m = matcher_cls("amqp", ((f"users.{i}.events", "one") for i in range(1_000_000)))
    assert len(m) == 1_000_000
    assert m.lookup("users.123456.events") == ["one"]
    assert m.lookup("users.x.events") == []
    assert m.remove_subscriber("one") == 1_000_000
    assert len(m) == 0 and m.lookup("users.1.events") == []
