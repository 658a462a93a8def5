"""The named workloads: deterministic given a seed, and of the shapes issue 7 states."""

from __future__ import annotations

import pytest

import topicmatch as tm
from topicmatch import workload

DIALECTS = ("amqp", "mqtt", "nats")


@pytest.mark.parametrize("name", sorted(workload.WORKLOADS))
def test_same_seed_gives_the_same_workload(name):
    make = workload.WORKLOADS[name]
    assert make(200, 50, "mqtt", seed=3) == make(200, 50, "mqtt", seed=3)


@pytest.mark.parametrize("name", ["seed", "mixed", "ids", "openamq"])
def test_another_seed_gives_another_workload(name):
    make = workload.WORKLOADS[name]
    assert make(200, 50, "mqtt", seed=3) != make(200, 50, "mqtt", seed=4)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", sorted(workload.WORKLOADS))
def test_every_pattern_and_topic_is_valid_in_its_dialect(name, dialect):
    w = workload.WORKLOADS[name](300, 100, dialect, seed=1)
    assert w.dialect == dialect
    m = tm.Trie(dialect, w.subscriptions)
    m.lookup_many(w.topics)


def test_mixed_has_the_stated_pattern_mix():
    w = workload.mixed(20_000, 100, "amqp", seed=0)
    counts = {"exact": 0, "one": 0, "two": 0, "many": 0}
    for pattern, _ in w.subscriptions:
        words = pattern.split(".")
        if words[-1] == "#":
            assert 3 <= len(words) <= 5
            counts["many"] += 1
        else:
            assert len(words) == 5
            counts[["exact", "one", "two"][words.count("*")]] += 1
    share = {k: v / len(w.subscriptions) for k, v in counts.items()}
    assert share["exact"] == pytest.approx(0.60, abs=0.02)
    assert share["one"] == pytest.approx(0.25, abs=0.02)
    assert share["two"] == pytest.approx(0.10, abs=0.02)
    assert share["many"] == pytest.approx(0.05, abs=0.01)
    assert all(len(t.split(".")) == 5 for t in w.topics)
    assert {x for t in w.topics for x in t.split(".")} <= {f"w{i}" for i in range(10)}


def test_openamq_is_the_papers_experiment():
    w = workload.openamq(2000, 2000, "amqp", seed=0)
    assert len({s for _, s in w.subscriptions}) == 2000
    levels = [p.split(".") for p, _ in w.subscriptions]
    assert all(len(words) == 5 for words in levels)
    share = sum(x == "*" for words in levels for x in words) / (5 * 2000)
    assert share == pytest.approx(workload.OPENAMQ_WILDCARD, abs=0.02)
    for level, n in enumerate(workload.OPENAMQ_LEVELS):
        assert {t.split(".")[level] for t in w.topics} == {f"l{level}w{i}" for i in range(n)}
    # About 180 subscribers per message, the experiment's fan-out.
    m = tm.Trie("amqp", w.subscriptions)
    mean = sum(map(len, m.lookup_many(w.topics))) / len(w.topics)
    assert 165 < mean < 195


def test_seed_is_random_five_word_topics_plus_the_benchmark_pattern():
    w = workload.seed(1000, 20, "amqp", seed=0)
    assert len(w.subscriptions) == 1001
    literal = w.subscriptions[:-1]
    assert all(p == s and len(p.split(".")) == 5 for p, s in literal)
    assert all(x.isdigit() for p, _ in literal for x in p.split("."))
    assert len({p for p, _ in literal}) == 1000
    assert w.subscriptions[-1] == ("foo.*.baz.qux.quux", "s0")
    assert w.topics[0] == "foo.bar.baz.qux.quux"
    m = tm.Trie("amqp", w.subscriptions)
    assert m.lookup(w.topics[0]) == ["s0"]
    assert m.lookup(w.topics[1]) == [w.topics[1]]  # odd positions are subscribed topics
    assert m.lookup(w.topics[2]) == []


def test_seed_throughput_gives_every_message_a_subscriber():
    w = workload.seed_throughput(1000, 3000, "mqtt", seed=0)
    patterns = [p for p, _ in w.subscriptions]
    assert all(len(p.split("/")) == 3 for p in patterns)
    assert patterns[0].startswith("+/") and patterns[25].split("/")[1] == "+"
    assert patterns[45].split("/")[2] == "+" and "+" not in patterns[1]
    m = tm.Trie("mqtt", w.subscriptions)
    assert all(m.lookup_many(w.topics))


def test_seed_items_are_the_seeds_keys():
    assert workload.seed_items(3) == ["0.0.0", "1.1.1", "2.2.2"]
    assert workload.seed_items(61)[60] == "0.10.60"


def test_ids_is_one_wide_level_of_distinct_users():
    w = workload.ids(5000, 1000, "amqp", seed=0)
    exact = w.subscriptions[:-2]
    assert len({p for p, _ in exact}) == 5000
    assert all(p.startswith("users.") and p.endswith(".events") for p, _ in exact)
    assert w.subscriptions[-2:] == [("users.*.events", "audit"), ("users.#", "archive")]
    m = tm.Trie("amqp", w.subscriptions)
    hits = sum(len(r) == 3 for r in m.lookup_many(w.topics))
    assert 0.85 < hits / len(w.topics) < 0.95
    assert len(set(w.topics)) > 0.8 * len(w.topics)


def test_fanout_sends_the_hot_topic_to_every_subscriber():
    w = workload.fanout(3000, 5, "mqtt", seed=0)
    assert set(w.topics) == {"news/sports/live"}
    m = tm.Trie("mqtt", w.subscriptions)
    assert len(m.lookup(w.topics[0])) == 3000
    shapes = {p for p, _ in w.subscriptions}
    assert shapes == {"news/sports/live", "news/+/live", "news/#"}


def test_mercure_has_three_selectors_per_subscriber_and_two_topics_per_update():
    w = workload.mercure(500, 100, seed=0)
    assert w == workload.mercure(500, 100, seed=0)
    assert len(w.subscriptions) == 1500
    per = {}
    for selector, subscriber in w.subscriptions:
        assert selector.startswith(workload.MERCURE_BASE + "/")
        per[subscriber] = per.get(subscriber, 0) + 1
    assert set(per.values()) == {3} and len(per) == 500
    assert any("{" in s for s, _ in w.subscriptions)
    assert any("{" not in s for s, _ in w.subscriptions)
    assert all(len(u) == 2 and "{" not in u[0] for u in w.updates)
