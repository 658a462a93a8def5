"""The topic matchers a Python user would pick today, behind one small interface, so the
benchmarks run the same workload through them and through topicmatch.

Each peer is optional (the `bench` extra installs them all): `available_peers()` lists those
whose package imports. Every adapter answers `lookup(topic) -> set of subscribers`, the set
semantics of topicmatch's `lookup`, so answers can be compared before anything is timed.

Where a peer's semantics differ from topicmatch's dialect, its docstring says how; the
benchmark workloads avoid those corners (and `agree` checks that on a sample).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from topicmatch.workload import MANY, ONE, SEPARATOR


class Peer:
    """One peer matcher holding `(pattern, subscriber)` pairs."""

    #: Short name used in tables and plots.
    name = ""
    #: The dialect whose spelling the peer takes: "mqtt" or "amqp".
    dialect = ""
    #: Whether a lookup tests every pattern (its cost grows with the number of patterns).
    scans = False
    #: The module the peer needs.
    requires = ""

    def __init__(self, subscriptions: Iterable[tuple[str, Any]]) -> None:
        self.by_pattern: dict[str, list[Any]] = {}
        for pattern, subscriber in subscriptions:
            self.by_pattern.setdefault(pattern, []).append(subscriber)
        self.build()

    def build(self) -> None:
        """Builds the peer's own index from `self.by_pattern`."""

    def lookup(self, topic: str) -> set[Any]:
        raise NotImplementedError


class PahoMatcher(Peer):
    """paho-mqtt's `paho.mqtt.matcher.MQTTMatcher`: a dict-of-dicts trie with one value per
    filter (here the list of that filter's subscribers), walked by the generator `iter_match`.
    MQTT semantics, `$` rule included; it does not validate filters or topics."""

    name = "paho MQTTMatcher"
    requires = "paho.mqtt.matcher"
    dialect = "mqtt"

    def build(self) -> None:
        from paho.mqtt.matcher import MQTTMatcher

        self.matcher = MQTTMatcher()
        for pattern, subscribers in self.by_pattern.items():
            self.matcher[pattern] = subscribers

    def lookup(self, topic: str) -> set[Any]:
        return {s for subscribers in self.matcher.iter_match(topic) for s in subscribers}


class PahoTopicMatchesSub(Peer):
    """paho-mqtt's `paho.mqtt.client.topic_matches_sub(sub, topic)` tried on every filter, as
    an application without an index does. Each call builds a one-filter `MQTTMatcher`."""

    name = "paho topic_matches_sub"
    requires = "paho.mqtt.client"
    dialect = "mqtt"
    scans = True

    def build(self) -> None:
        from paho.mqtt.client import topic_matches_sub

        self.matches = topic_matches_sub

    def lookup(self, topic: str) -> set[Any]:
        matches = self.matches
        return {
            s
            for pattern, subscribers in self.by_pattern.items()
            if matches(pattern, topic)
            for s in subscribers
        }


class KombuTopicExchange(Peer):
    """kombu's in-memory AMQP topic exchange (`kombu.transport.virtual.exchange.TopicExchange`):
    each binding key becomes a regular expression (`prepare_bind`), compiled on first use and
    cached; `lookup` tests every binding. Semantics differ from AMQP 0-9-1: `#` becomes `.*?`
    between literal dots, so `a.#` does not match `a` and `a.#.b` does not match `a.b` (AMQP's
    `#` matches zero words); `*` is `[^.]+`, so it does not match an empty word."""

    name = "kombu TopicExchange"
    requires = "kombu.transport.virtual.exchange"
    dialect = "amqp"
    scans = True

    def build(self) -> None:
        from kombu.transport.virtual.exchange import TopicExchange

        self.exchange = TopicExchange(None)
        self.table = [
            self.exchange.prepare_bind(subscriber, "bench", pattern, None)
            for pattern, subscribers in self.by_pattern.items()
            for subscriber in subscribers
        ]

    def lookup(self, topic: str) -> set[Any]:
        return self.exchange.lookup(self.table, "bench", topic, None)


class _AmqttLogger:
    """The one attribute `Broker._matches` reads from its broker."""

    logger = logging.getLogger("amqtt.broker")


class AmqttBroker(Peer):
    """amqtt's broker matching, `amqtt.broker.Broker._matches(topic, filter)`, tried on every
    subscribed filter as the broker's broadcast loop does (`_run_broadcast`). MQTT semantics
    with the `$` rule; an invalid filter (`a+`) matches nothing instead of being rejected."""

    name = "amqtt Broker._matches"
    requires = "amqtt.broker"
    dialect = "mqtt"
    scans = True

    def build(self) -> None:
        from amqtt.broker import Broker

        self.matches = Broker._matches
        self.broker = _AmqttLogger()

    def lookup(self, topic: str) -> set[Any]:
        matches, broker = self.matches, self.broker
        return {
            s
            for pattern, subscribers in self.by_pattern.items()
            if matches(broker, topic, pattern)
            for s in subscribers
        }


def pattern_regex(pattern: str, dialect: str) -> str:
    """A regular expression, matched in full against `topic_subject(topic)`, that accepts
    exactly the topics `pattern` matches in `dialect` (AMQP, MQTT or NATS).

    Every word is written with the separator in front (`.a.b` for `a.b`), so a many-words
    wildcard is simply "any number of (separator, word)". MQTT's `$` rule: a first-level
    wildcard does not take a first level that starts with `$`."""
    sep, one, many = SEPARATOR[dialect], ONE[dialect], MANY[dialect]
    s = re.escape(sep)
    word = f"[^{s}]*" if dialect != "nats" else f"[^{s}]+"
    first_word = f"(?:[^{s}$][^{s}]*)?" if dialect == "mqtt" else word
    words = pattern.split(sep) if (pattern or dialect != "amqp") else []
    out = []
    for i, w in enumerate(words):
        any_word = first_word if i == 0 else word
        if w == one:
            out.append(s + any_word)
        elif w == many:
            if dialect == "nats":
                out.append(f"(?:{s}{any_word})(?:{s}{word})*")
            elif dialect == "mqtt" and i == 0:
                out.append(f"(?:{s}{any_word}(?:{s}{word})*)?")
            else:
                out.append(f"(?:{s}{word})*")
        else:
            out.append(s + re.escape(w))
    return "".join(out)


def topic_subject(topic: str, dialect: str) -> str:
    """The text a `pattern_regex` is matched against: every word behind a separator."""
    if dialect == "amqp" and topic == "":
        return ""
    return SEPARATOR[dialect] + topic


class Re2Set(Peer):
    """google-re2's `re2.Set`: every distinct pattern compiled to a regular expression
    (`pattern_regex`, our translation, exact for the dialect) in one full-match set; a lookup
    is one `Match` that returns the indexes of every matching pattern. RE2's DFA gets a larger
    memory budget (`max_mem`), or big sets fail to match."""

    name = "google-re2 Set"
    requires = "re2"
    dialect = "mqtt"

    def build(self) -> None:
        import re2

        options = re2.Options()
        options.max_mem = 1 << 30
        self.set = re2.Set.FullMatchSet(options)
        self.subscribers: list[list[Any]] = []
        for pattern, subscribers in self.by_pattern.items():
            self.set.Add(pattern_regex(pattern, self.dialect))
            self.subscribers.append(subscribers)
        self.set.Compile()

    def lookup(self, topic: str) -> set[Any]:
        hits = self.set.Match(topic_subject(topic, self.dialect)) or ()
        subscribers = self.subscribers
        return {s for i in hits for s in subscribers[i]}


class Re2SetAmqp(Re2Set):
    """`Re2Set` over the AMQP spelling of the workload."""

    name = "google-re2 Set (amqp)"
    dialect = "amqp"


#: Every peer adapter, in the order of the tables.
PEERS: list[type[Peer]] = [
    PahoMatcher,
    PahoTopicMatchesSub,
    AmqttBroker,
    KombuTopicExchange,
    Re2Set,
]


def available_peers() -> list[type[Peer]]:
    """The peers whose package imports here."""
    import importlib

    out = []
    for cls in PEERS:
        try:
            importlib.import_module(cls.requires)
        except ImportError:
            continue
        out.append(cls)
    return out


def disagreements(peer: Peer, matcher: Any, topics: Iterable[str]) -> list[str]:
    """The topics on which `peer` and a topicmatch matcher give different subscriber sets."""
    return [t for t in topics if peer.lookup(t) != set(matcher.lookup(t))]
