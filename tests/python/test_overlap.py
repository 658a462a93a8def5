"""`topicmatch.intersects` and `topicmatch.subsumes`: the NATS server's own tables for subset
matches and colliding subjects, and both functions against brute force over every short topic
(of up to five words, with reference.py, the independent statement of the semantics) in
every dialect."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import topicmatch as tm

import reference
from conftest import TOPIC_MATCHERS

# nats-server, server/sublist_test.go and the subject package: TestSubjectIsSubsetMatch.
# SubjectIsSubsetMatch(subject, test): every subject that `subject` matches, `test` matches,
# which is subsumes(test, subject).
NATS_SUBSET = [
    ("foo.bar", "foo.bar", True),
    ("foo.*", ">", True),
    ("foo.*", "*.*", True),
    ("foo.*", "foo.*", True),
    ("foo.*", "foo.>", True),
    ("foo.*", "foo.bar", False),
    ("foo.>", ">", True),
    ("foo.>", "*.>", True),
    ("foo.>", "foo.>", True),
    ("foo.>", "foo.bar", False),
    ("foo.*.bar", "foo.>", True),
    ("foo.*.bar", "foo.bar.>", False),
    ("foo.bar.>", "foo.*.bar", False),
]

# The subject package's TestSubjectsCollide: some subject matches both.
NATS_COLLIDE = [
    ("foo.*", "foo.*.bar.>", False),
    ("foo.*.bar.>", "foo.*", False),
    ("foo.*", "foo.foo", True),
    ("foo.*", "*.foo", True),
    ("foo.bar.>", "*.bar.foo", True),
    ("orders.>", "orders.new", True),
    ("a.*.c", "a.b.>", True),
    ("orders.new", "orders.paid", False),
]


@pytest.mark.parametrize(("subject", "test", "want"), NATS_SUBSET)
def test_nats_subset_matches(subject, test, want):
    assert tm.subsumes(test, subject, dialect="nats") is want


@pytest.mark.parametrize(("a", "b", "want"), NATS_COLLIDE)
def test_nats_subjects_collide(a, b, want):
    assert tm.intersects(a, b, dialect="nats") is want
    assert tm.intersects(b, a, dialect="nats") is want


def test_mqtt_dollar_topics_and_the_parent_level():
    assert not tm.intersects("#", "$SYS/#", dialect="mqtt")
    assert not tm.subsumes("+/#", "$SYS/x", dialect="mqtt")
    assert tm.subsumes("$SYS/#", "$SYS/+/x", dialect="mqtt")
    assert tm.subsumes("a/#", "a", dialect="mqtt")
    assert not tm.subsumes("a/+", "a", dialect="mqtt")


def test_invalid_patterns_raise_typed_errors():
    with pytest.raises(tm.InvalidPattern):
        tm.intersects("a/#/b", "a", dialect="mqtt")
    with pytest.raises(tm.InvalidPattern):
        tm.subsumes("a", "a..b", dialect="nats")
    with pytest.raises(ValueError, match="unknown dialect"):
        tm.subsumes("a", "b", dialect="kafka")
    with pytest.raises(TypeError):
        tm.intersects(1, "a")


def test_a_hostile_amqp_pair_is_refused_with_a_value_error():
    stars = ".".join(["*"] * 24)
    with pytest.raises(ValueError, match="more than"):
        tm.subsumes(f"#.x.{stars}", f"#.x.{stars}.#", dialect="amqp")


#: The words of brute-force topics: `z` is named by no pattern, `$s` shows the MQTT rule.
TOPIC_WORDS = ["a", "b", "$s", "z"]


def all_topics(dialect: str, max_words: int = 5) -> list[str]:
    sep = reference.SEP[dialect]
    out = [""]
    for n in range(1, max_words + 1):
        out += [sep.join(ws) for ws in itertools.product(TOPIC_WORDS, repeat=n)]
    return [t for t in out if reference.valid_topic(dialect, t)]


TOPICS = {d: all_topics(d) for d in tm.DIALECTS}


@st.composite
def short_patterns(draw, dialect):
    """Patterns of up to three words, valid by construction: only AMQP takes its multi-word
    wildcard before the end."""
    choices = ["a", "b", "$s", reference.ONE[dialect]]
    if dialect == "amqp":
        choices.append(reference.MANY[dialect])
    ws = draw(st.lists(st.sampled_from(choices), max_size=3))
    if dialect != "amqp" and len(ws) < 3 and draw(st.booleans()):
        ws.append(reference.MANY[dialect])
    if dialect != "amqp" and not ws:
        ws = [reference.MANY[dialect]]
    return reference.SEP[dialect].join(ws)


@st.composite
def pattern_pairs(draw):
    dialect = draw(st.sampled_from(tm.DIALECTS))
    return dialect, draw(short_patterns(dialect)), draw(short_patterns(dialect))


@settings(max_examples=200, deadline=None)
@given(pattern_pairs())
def test_both_equal_brute_force(case):
    dialect, a, b = case
    ma = [reference.matches(dialect, a, t) for t in TOPICS[dialect]]
    mb = [reference.matches(dialect, b, t) for t in TOPICS[dialect]]
    pairs = list(zip(ma, mb, strict=True))
    assert tm.intersects(a, b, dialect=dialect) is any(x and y for x, y in pairs)
    assert tm.subsumes(a, b, dialect=dialect) is all(x or not y for x, y in pairs)


@st.composite
def tables(draw):
    """A dialect, up to eight (pattern, subscriber) pairs of it, a topic and a pattern."""
    dialect = draw(st.sampled_from(tm.DIALECTS))

    def one():
        return draw(short_patterns(dialect))

    pairs = [(one(), draw(st.integers(0, 3))) for _ in range(draw(st.integers(0, 8)))]
    return dialect, pairs, draw(st.sampled_from(TOPICS[dialect][:200])), one()


@settings(max_examples=150, deadline=None)
@given(tables())
def test_has_interest_and_reverse_match_in_every_matcher(case):
    dialect, pairs, topic, pattern = case
    want_interest = any(reference.matches(dialect, p, topic) for p, _ in pairs)
    overlapping = {
        (p, s)
        for p, s in pairs
        if any(
            reference.matches(dialect, p, t) and reference.matches(dialect, pattern, t)
            for t in TOPICS[dialect]
        )
    }
    for cls in TOPIC_MATCHERS:
        for m in (cls(dialect, pairs), cls(dialect, pairs, **_bare(cls))):
            assert m.has_interest(topic) is want_interest, (cls.__name__, topic)
            assert m.has_interest(topic) is bool(m.lookup(topic))
            got = m.reverse_match(pattern)
            assert len(got) == len(set(got))
            assert set(got) == overlapping, (cls.__name__, pattern)


def _bare(cls) -> dict:
    """The keyword that turns a matcher's cache off, where it has one."""
    return {"cache_size": 0} if cls in (tm.Trie, tm.CSTrie) else {}


def test_has_interest_and_reverse_match_reject_invalid_input(matcher_cls):
    m = matcher_cls("mqtt", [("a/+", 1)])
    with pytest.raises(tm.InvalidTopic):
        m.has_interest("a/+")
    with pytest.raises(tm.InvalidPattern):
        m.reverse_match("a/#/b")
    assert m.reverse_match("+/x") == [("a/+", 1)]
    assert m.reverse_match("$SYS/x") == []
