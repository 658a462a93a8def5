"""Hypothesis strategies of patterns and topics in every dialect, over a small alphabet so
that they collide often: it holds the empty word, a `$` word and words that look like
wildcards. Valid by reference.py, the independent statement of the semantics."""

from __future__ import annotations

from hypothesis import strategies as st

import reference

WORDS = {
    "amqp": ["a", "b", "", "$s", "a*", "x#"],
    "mqtt": ["a", "b", "", "$s", "ab"],
    "nats": ["a", "b", "$s", "a*", "b>"],
}


@st.composite
def patterns(draw, dialect):
    choices = WORDS[dialect] + [reference.ONE[dialect]] * 2
    if dialect == "amqp":
        choices += ["#", "#"]
    ws = draw(st.lists(st.sampled_from(choices), max_size=5))
    if dialect != "amqp" and (not ws or draw(st.booleans())):
        ws.append(reference.MANY[dialect])
    text = reference.SEP[dialect].join(ws)
    if not reference.valid_pattern(dialect, text):
        return reference.MANY[dialect]
    return text


@st.composite
def topics(draw, dialect):
    min_size = 0 if dialect == "amqp" else 1
    ws = draw(st.lists(st.sampled_from(WORDS[dialect]), min_size=min_size, max_size=6))
    text = reference.SEP[dialect].join(ws)
    return text if reference.valid_topic(dialect, text) else "a"
