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
def pattern_pairs(draw):
    dialect = draw(st.sampled_from(tm.DIALECTS))

    def one():
        # Valid by construction: only AMQP takes its multi-word wildcard before the end.
        choices = ["a", "b", "$s", reference.ONE[dialect]]
        if dialect == "amqp":
            choices.append(reference.MANY[dialect])
        ws = draw(st.lists(st.sampled_from(choices), max_size=3))
        if dialect != "amqp" and len(ws) < 3 and draw(st.booleans()):
            ws.append(reference.MANY[dialect])
        if dialect != "amqp" and not ws:
            ws = [reference.MANY[dialect]]
        return reference.SEP[dialect].join(ws)

    return dialect, one(), one()


@settings(max_examples=200, deadline=None)
@given(pattern_pairs())
def test_both_equal_brute_force(case):
    dialect, a, b = case
    ma = [reference.matches(dialect, a, t) for t in TOPICS[dialect]]
    mb = [reference.matches(dialect, b, t) for t in TOPICS[dialect]]
    pairs = list(zip(ma, mb, strict=True))
    assert tm.intersects(a, b, dialect=dialect) is any(x and y for x, y in pairs)
    assert tm.subsumes(a, b, dialect=dialect) is all(x or not y for x, y in pairs)
