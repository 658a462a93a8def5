"""Seeded workloads: subscriptions and topics shaped like real traffic, in every dialect."""

from __future__ import annotations

import random
from dataclasses import dataclass

SEPARATOR = {"amqp": ".", "mqtt": "/", "nats": "."}
ONE = {"amqp": "*", "mqtt": "+", "nats": "*"}
MANY = {"amqp": "#", "mqtt": "#", "nats": ">"}


@dataclass(frozen=True)
class Workload:
    """Subscriptions as (pattern, subscriber) pairs, and topics to route."""

    dialect: str
    subscriptions: list[tuple[str, str]]
    topics: list[str]


def mixed(n_subscriptions: int, n_topics: int, dialect: str = "amqp", seed: int = 0) -> Workload:
    """A 10-word vocabulary over 5 levels: 60 % exact patterns, 25 % with one single-word
    wildcard, 10 % with two, 5 % of 2 to 4 words then a multi-word wildcard. Topics are
    random 5-word topics over the same vocabulary."""
    rng = random.Random(seed)
    sep, one, many = SEPARATOR[dialect], ONE[dialect], MANY[dialect]
    vocab = [f"w{i}" for i in range(10)]

    def pattern() -> str:
        roll = rng.random()
        words = [rng.choice(vocab) for _ in range(5)]
        if roll < 0.60:
            return sep.join(words)
        if roll < 0.85:
            words[rng.randrange(5)] = one
            return sep.join(words)
        if roll < 0.95:
            for i in rng.sample(range(5), 2):
                words[i] = one
            return sep.join(words)
        return sep.join(words[: rng.randint(2, 4)] + [many])

    clients = max(1, n_subscriptions // 2)
    subs = [(pattern(), f"client-{i % clients}") for i in range(n_subscriptions)]
    topics = [sep.join(rng.choice(vocab) for _ in range(5)) for _ in range(n_topics)]
    return Workload(dialect, subs, topics)
