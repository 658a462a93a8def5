"""Seeded workloads: subscriptions and topics shaped like real traffic, in every dialect.

Each generator is deterministic given its `seed` argument. `WORKLOADS` names the topic workloads
(`seed`, `mixed`, `ids`, `fanout`, `openamq`); `mercure` returns selector subscriptions and
updates for the SelectorIndex. `benches/workload.rs` mirrors the shapes in Rust (same shapes,
its own random numbers: the two do not produce equal data)."""

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


# The seed workload: the shapes of Tyler Treat's "Fast Topic Matching" benchmarks
# (tylertreat/fast-topic-matching), regenerated here with our own seeded generator.

#: The pattern and topic of the seed's subscribe / unsubscribe / lookup micro-benchmarks.
SEED_PATTERN_WORDS = ("foo", None, "baz", "qux", "quux")
SEED_TOPIC_WORDS = ("foo", "bar", "baz", "qux", "quux")


def seed_pattern(dialect: str = "amqp") -> str:
    """The seed's benchmark pattern, `foo.*.baz.qux.quux` in the dialect's spelling."""
    return SEPARATOR[dialect].join(w or ONE[dialect] for w in SEED_PATTERN_WORDS)


def seed_topic(dialect: str = "amqp") -> str:
    """The seed's benchmark topic, `foo.bar.baz.qux.quux` in the dialect's spelling."""
    return SEPARATOR[dialect].join(SEED_TOPIC_WORDS)


def seed(
    n_subscriptions: int = 1000, n_topics: int = 1000, dialect: str = "amqp", seed: int = 0
) -> Workload:
    """The seed's "hot" matcher: `n_subscriptions` random 5-word literal topics (each word a
    random 63-bit integer in decimal), each subscribed by a subscriber named after it, plus the
    benchmark pattern (`seed_pattern`) for subscriber `s0`. The "cold" matcher is empty.

    Topics: the benchmark topic first, then subscribed topics (hits) and fresh random 5-word
    topics (misses), alternately."""
    rng = random.Random(seed)
    sep = SEPARATOR[dialect]

    def word5() -> str:
        return sep.join(str(rng.getrandbits(63)) for _ in range(5))

    subs = [(t, t) for t in (word5() for _ in range(n_subscriptions))]
    subs.append((seed_pattern(dialect), "s0"))
    topics = [seed_topic(dialect)]
    while len(topics) < n_topics:
        if len(topics) % 2 and n_subscriptions:
            topics.append(subs[rng.randrange(n_subscriptions)][0])
        else:
            topics.append(word5())
    return Workload(dialect, subs, topics[:n_topics])


def seed_throughput(
    n_subscriptions: int = 1000, n_topics: int = 100_000, dialect: str = "amqp", seed: int = 0
) -> Workload:
    """The seed's msg/s throughput run: 3-level patterns over the digits 0-9, a single-word
    wildcard in the first level for every 10th subscription, in the second for every 25th (not
    10th), in the third for every 45th (not 10th or 25th), literal otherwise. Message `i` is
    subscription `i mod n` with each wildcard replaced by a random digit, so every message has
    at least one subscriber."""
    rng = random.Random(seed)
    sep, one = SEPARATOR[dialect], ONE[dialect]

    def digit() -> str:
        return str(rng.randrange(10))

    patterns = []
    for i in range(n_subscriptions):
        words = [digit(), digit(), digit()]
        if i % 10 == 0:
            words[0] = one
        elif i % 25 == 0:
            words[1] = one
        elif i % 45 == 0:
            words[2] = one
        patterns.append(sep.join(words))
    topics = []
    for i in range(n_topics if n_subscriptions else 0):
        words = patterns[i % n_subscriptions].split(sep)
        topics.append(sep.join(digit() if w == one else w for w in words))
    return Workload(dialect, [(p, i) for i, p in enumerate(patterns)], topics)


def seed_items(n_items: int = 1000, dialect: str = "amqp") -> list[str]:
    """The keys of the seed's concurrency runs: `j%10 . j%50 . j` for j below `n_items`, each
    subscribed or looked up by one thread against the hot matcher of `seed()`."""
    sep = SEPARATOR[dialect]
    return [sep.join((str(j % 10), str(j % 50), str(j))) for j in range(n_items)]


def ids(
    n_subscriptions: int = 1_000_000, n_topics: int = 100_000, dialect: str = "amqp", seed: int = 0
) -> Workload:
    """A wide level: `users.<id>.events` for `n_subscriptions` distinct random ids (one
    subscriber each, `user-<id>`), plus two wildcard subscribers that see every user
    (`users.*.events` for `audit`, `users.#` for `archive`). Topics name random users, nine in
    ten subscribed, one in ten not, so a trie meets one node with a million children and a
    per-topic cache sees almost every topic once."""
    rng = random.Random(seed)
    sep, one, many = SEPARATOR[dialect], ONE[dialect], MANY[dialect]
    space = max(10 * n_subscriptions, 1000)
    user_ids = rng.sample(range(space), n_subscriptions)
    taken = set(user_ids)

    def topic(uid: int) -> str:
        return sep.join(("users", str(uid), "events"))

    subs = [(topic(u), f"user-{u}") for u in user_ids]
    subs.append((sep.join(("users", one, "events")), "audit"))
    subs.append((sep.join(("users", many)), "archive"))
    topics = []
    for _ in range(n_topics):
        if user_ids and rng.random() < 0.9:
            topics.append(topic(user_ids[rng.randrange(n_subscriptions)]))
        else:
            uid = rng.randrange(space)
            while uid in taken:
                uid = rng.randrange(space)
            topics.append(topic(uid))
    return Workload(dialect, subs, topics)


def fanout(
    n_subscriptions: int = 1_000_000, n_topics: int = 100, dialect: str = "amqp", seed: int = 0
) -> Workload:
    """One hot topic, `news.sports.live`, with `n_subscriptions` distinct subscribers: 90 %
    subscribe to it exactly, 5 % to `news.*.live`, 5 % to `news.#`. Topics: the hot topic,
    repeated; the cost of a lookup is building a result of `n_subscriptions` subscribers."""
    rng = random.Random(seed)
    sep, one, many = SEPARATOR[dialect], ONE[dialect], MANY[dialect]
    hot = sep.join(("news", "sports", "live"))
    shapes = [hot, sep.join(("news", one, "live")), sep.join(("news", many))]
    subs = []
    for i in range(n_subscriptions):
        roll = rng.random()
        shape = shapes[0] if roll < 0.90 else shapes[1] if roll < 0.95 else shapes[2]
        subs.append((shape, f"sub-{i}"))
    return Workload(dialect, subs, [hot] * n_topics)


#: The word tables of the OpenAMQ matching experiment, one per topic level.
OPENAMQ_LEVELS = (6, 7, 6, 5, 6)
#: The chance that a level of a subscription is the one-word wildcard. With it, the expected
#: matches per message, 2,000 x the product over levels of (p + (1 - p) / words), is 180:
#: the experiment's own figure.
OPENAMQ_WILDCARD = 0.54


def openamq(
    n_subscriptions: int = 2000, n_topics: int = 1_000_000, dialect: str = "amqp", seed: int = 0
) -> Workload:
    """The matching experiment of the OpenAMQ white paper ("High-speed message matching",
    iMatix): five topic levels drawn from tables of 6, 7, 6, 5 and 6 words; each of the
    `n_subscriptions` subscriptions (one distinct subscriber each) takes at each level the
    one-word wildcard with chance `OPENAMQ_WILDCARD`, else a word of the table; each message a
    word of every table. About 180 subscribers per message at 2,000 subscriptions, the
    paper's fan-out."""
    rng = random.Random(seed)
    sep, one = SEPARATOR[dialect], ONE[dialect]
    tables = [[f"l{level}w{i}" for i in range(n)] for level, n in enumerate(OPENAMQ_LEVELS)]

    def pattern() -> str:
        return sep.join(one if rng.random() < OPENAMQ_WILDCARD else rng.choice(t) for t in tables)

    subs = [(pattern(), f"queue-{i}") for i in range(n_subscriptions)]
    topics = [sep.join(rng.choice(t) for t in tables) for _ in range(n_topics)]
    return Workload(dialect, subs, topics)


@dataclass(frozen=True)
class SelectorWorkload:
    """Mercure-style subscriptions: `(selector, subscriber)` pairs, where a selector is an
    exact topic or an RFC 6570 URI template, and updates, each a list of topics."""

    subscriptions: list[tuple[str, str]]
    updates: list[list[str]]


MERCURE_BASE = "https://example.com"
#: Resource kinds and the URI template of each (RFC 6570 level 1 expressions).
MERCURE_KINDS = {
    "books": "/books/{id}",
    "authors": "/authors/{id}",
    "orders": "/users/{user}/orders/{id}",
    "reviews": "/books/{book}/reviews/{id}",
    "chats": "/chats/{room}/messages/{id}",
}


def mercure(
    n_subscribers: int = 5000, n_updates: int = 10_000, seed: int = 0, per_subscriber: int = 3
) -> SelectorWorkload:
    """`n_subscribers` subscribers with `per_subscriber` selectors each, drawn from: a URI
    template of one resource kind (one in two), an exact resource URL (one in three), or a
    template narrowed to one parent (`/users/42/orders/{id}`, the rest). Updates carry two
    topics each, as Mercure updates often do: the canonical resource URL and an alternate
    (`?format=jsonld`)."""
    rng = random.Random(seed)
    kinds = list(MERCURE_KINDS)
    n_ids = 1000

    def url(kind: str) -> str:
        path = MERCURE_KINDS[kind]
        for name in ("user", "book", "room", "id"):
            path = path.replace("{" + name + "}", str(rng.randrange(n_ids)))
        return MERCURE_BASE + path

    def selector() -> str:
        kind = rng.choice(kinds)
        roll = rng.random()
        if roll < 0.5:
            return MERCURE_BASE + MERCURE_KINDS[kind]
        if roll < 5 / 6:
            return url(kind)
        template = MERCURE_KINDS[kind]
        first = template[template.index("{") : template.index("}") + 1]
        if first == "{id}":
            return url(kind)
        return MERCURE_BASE + template.replace(first, str(rng.randrange(n_ids)), 1)

    subs = [(selector(), f"sub-{i}") for i in range(n_subscribers) for _ in range(per_subscriber)]
    updates = []
    for _ in range(n_updates):
        canonical = url(rng.choice(kinds))
        updates.append([canonical, canonical + "?format=jsonld"])
    return SelectorWorkload(subs, updates)


#: Every named topic workload: name -> generator(n_subscriptions, n_topics, dialect, seed).
WORKLOADS = {
    "seed": seed,
    "mixed": mixed,
    "ids": ids,
    "fanout": fanout,
    "openamq": openamq,
}

#: The sizes each workload is benchmarked at (issue 7); the largest run only on request.
SIZES = {
    "seed": (1000,),
    "mixed": (1000, 10_000, 100_000, 1_000_000),
    "ids": (1_000_000,),
    "fanout": (1_000_000,),
    "openamq": (2000,),
}
