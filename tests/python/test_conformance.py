"""Vectors from the brokers' own test suites (tests/data/conformance/) against every matcher."""

from __future__ import annotations

import pytest

import topicmatch as tm

from conftest import decode_field, read_table

MATCH_ROWS = read_table("match.tsv")
VALID_ROWS = read_table("valid.tsv")


def row_id(row: dict[str, str]) -> str:
    return f"{row['dialect']}:{row.get('pattern', row.get('text'))}~{row.get('topic', '')}"


@pytest.mark.parametrize("row", MATCH_ROWS, ids=row_id)
def test_matches_agrees_with_the_brokers(row):
    d, p, t = row["dialect"], decode_field(row["pattern"]), decode_field(row["topic"])
    expected = row["expected"]
    if expected == "invalid_pattern":
        with pytest.raises(tm.InvalidPattern):
            tm.matches(p, t, dialect=d)
    elif expected == "invalid_topic":
        with pytest.raises(tm.InvalidTopic):
            tm.matches(p, t, dialect=d)
    else:
        assert tm.matches(p, t, dialect=d) is (expected == "match"), row["source"]


@pytest.mark.parametrize("dialect", tm.DIALECTS)
def test_every_matcher_agrees_with_the_brokers(matcher_cls, dialect):
    rows = [r for r in MATCH_ROWS if r["dialect"] == dialect and r["expected"].endswith("match")]
    m = matcher_cls(dialect)
    for i, r in enumerate(rows):
        m.subscribe(decode_field(r["pattern"]), i)
    for i, r in enumerate(rows):
        got = i in m.lookup(decode_field(r["topic"]))
        assert got is (r["expected"] == "match"), (r, r["source"])


@pytest.mark.parametrize("row", VALID_ROWS, ids=row_id)
def test_validation_agrees_with_the_brokers(row):
    d, text, valid = row["dialect"], decode_field(row["text"]), row["expected"] == "valid"
    m = tm.Trie(d)
    if row["kind"] == "pattern":
        if valid:
            m.subscribe(text, "s")
        else:
            with pytest.raises(tm.InvalidPattern):
                m.subscribe(text, "s")
            assert len(m) == 0
    else:
        if valid:
            m.lookup(text)
        else:
            with pytest.raises(tm.InvalidTopic):
                m.lookup(text)
