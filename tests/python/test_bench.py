"""`topicmatch bench` end to end on a tiny size, and each peer adapter against our matcher."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re

import pytest

import topicmatch as tm
from topicmatch import bench, cli, peers, workload


def test_bench_runs_end_to_end_and_writes_its_table(tmp_path, capsys):
    assert cli.main(["bench", "--tiny", "--out", str(tmp_path)]) == 0
    table = (tmp_path / "BENCH.md").read_text()
    assert "| Trie.lookup | mqtt |" in table
    assert "GIL convoy" in table
    assert "Fan-out: what each delivered subscriber costs" in table
    results = json.loads((tmp_path / "results.json").read_text())
    assert {r["impl"] for r in results["headline"]} >= {"Trie.lookup", "NaiveMatcher.lookup"}
    assert all(r.get("agrees", True) for r in results["headline"])
    fan = {(r["kind"], r["impl"]) for r in results["fanout"]}
    assert ("openamq", "CSTrie") in fan and ("hot lookup", "InvertedBitmap") in fan
    out = capsys.readouterr().out
    assert "subscriptions: µs per lookup" in out
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "lookup_vs_n.png").stat().st_size > 0
        assert (tmp_path / "threads.png").stat().st_size > 0


def test_respell_keeps_the_workload():
    w = workload.mixed(300, 50, "mqtt", seed=0)
    subs, topics = bench.respell(w, "amqp")
    a = tm.Trie("amqp", subs).lookup_many(topics)
    b = tm.Trie("mqtt", w.subscriptions).lookup_many(w.topics)
    assert [sorted(x) for x in a] == [sorted(x) for x in b]


def _peer(cls):
    """The peer class, or a clean skip when its package is not installed."""
    pytest.importorskip(cls.requires)
    return cls


ALL_PEERS = [*peers.PEERS, peers.Re2SetAmqp]


@pytest.mark.parametrize("peer_cls", ALL_PEERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", ["mixed", "seed", "ids", "fanout", "openamq"])
def test_peer_agrees_with_our_matcher_on_a_sample(peer_cls, name):
    cls = _peer(peer_cls)
    w = workload.WORKLOADS[name](2000, 60, cls.dialect, seed=2)
    peer = cls(w.subscriptions)
    ours = tm.Trie(cls.dialect, w.subscriptions)
    assert peers.disagreements(peer, ours, w.topics) == []
    assert any(peer.lookup(t) for t in w.topics)


# Corners where a peer's semantics differ from the dialect's, pinned so a change shows.


def test_kombu_hash_needs_at_least_one_word_where_amqp_takes_zero():
    cls = _peer(peers.KombuTopicExchange)
    peer = cls([("a.#", 1), ("a.#.b", 2)])
    assert peer.lookup("a") == set() and tm.matches("a.#", "a")
    assert peer.lookup("a.b") == {1} and tm.matches("a.#.b", "a.b")


def test_amqtt_and_paho_keep_the_dollar_rule():
    for cls in (peers.AmqttBroker, peers.PahoMatcher):
        peer = _peer(cls)([("#", 1), ("+/x", 2), ("$SYS/#", 3)])
        assert peer.lookup("$SYS/x") == {3}
        assert peer.lookup("a/x") == {1, 2}


@pytest.mark.parametrize("dialect", ["amqp", "mqtt", "nats"])
def test_pattern_regex_is_exact_on_the_conformance_corners(dialect):
    sep, one, many = workload.SEPARATOR[dialect], workload.ONE[dialect], workload.MANY[dialect]
    words = ["a", "b", one, many]
    patterns = {sep.join(p) for p in _products(words, 3)}
    if dialect == "amqp":
        patterns.add("")
    topics = {sep.join(t) for t in _products(["a", "b", "$c"], 3)}
    for p in patterns:
        try:
            compiled = re.compile(peers.pattern_regex(p, dialect))
            m = tm.Trie(dialect, [(p, 1)])
        except ValueError:
            continue
        for t in topics:
            got = compiled.fullmatch(peers.topic_subject(t, dialect)) is not None
            assert got == bool(m.lookup(t)), (p, t)


def _products(words, up_to):
    """Every sequence of 1 to `up_to` items of `words`."""
    return [list(p) for k in range(1, up_to + 1) for p in itertools.product(words, repeat=k)]
