"""Shared subscriptions and queue groups against the brokers' own facts, on every matcher.

The facts are in tests/data/conformance/shared.tsv, a table with one header line and the
columns ``dialect kind text topic expected source``. Every field is decoded with conftest's
``decode_field`` (``<empty>`` is the empty string; backslash escapes as in the README there).

The table is encoded as follows.

kind ``share_filter`` (MQTT only)
    ``text`` is a filter given to ``subscribe``; ``topic`` is unused (``<empty>``).
    ``expected`` is ``shared:<name>:<filter>`` (the subscription joins group ``<name>`` on
    ``<filter>``; the name ends at the second ``:``, and no name in the table holds one),
    ``plain`` (an ordinary filter) or ``invalid`` (``tm.InvalidPattern``, nothing stored).

kind ``group_name``
    ``text`` is a group name given as ``group=``; ``topic`` is the pattern subscribed with it.
    ``expected`` is ``valid`` or ``invalid``.

kind ``route``
    ``text`` is a ``;``-separated list of operations, applied in order:

    - ``s=pattern``: ``subscribe(pattern, s)``; in MQTT a ``$share/...`` pattern joins a group;
    - ``s=pattern@group``: ``subscribe(pattern, s, group=group)`` (the group is what follows
      the last ``@``);
    - ``-s=pattern`` and ``-s=pattern@group``: the same with ``unsubscribe``, which must find
      the subscription;
    - ``-s``: ``remove_subscriber(s)``.

    Subscribers are plain words and no pattern in the table holds ``;``, ``=`` or ``@``.
    ``topic`` is the published topic. ``expected`` describes ``lookup_groups(topic)`` as
    ``plain:<subscribers>|groups:<groups>``, where ``<subscribers>`` is a ``,``-separated list
    and ``<groups>`` a ``;``-separated list of ``<name>/<filter>=<members>``: the name ends at
    the first ``/`` (no group name in the table holds one) and ``<members>`` is a
    ``,``-separated list. Either list may be empty. Only groups with at least one member
    appear. Order is free: both sides are sorted before they are compared.
"""

from __future__ import annotations

import pytest

import topicmatch as tm

from conftest import decode_field, read_table

ROWS = read_table("shared.tsv")
KINDS = ("share_filter", "group_name", "route")
SHARE_FILTER_ROWS = [r for r in ROWS if r["kind"] == "share_filter"]
GROUP_NAME_ROWS = [r for r in ROWS if r["kind"] == "group_name"]
ROUTE_ROWS = [r for r in ROWS if r["kind"] == "route"]

#: ``[(group name, filter, sorted members)]``, sorted.
Groups = list[tuple[str, str, list[str]]]


def row_id(row: dict[str, str]) -> str:
    return f"{row['dialect']}:{row['text']}~{row['topic']}"


def split(s: str, sep: str) -> list[str]:
    return s.split(sep) if s else []


def expected_route(expected: str) -> tuple[list[str], Groups]:
    """Reads the ``expected`` field of a ``route`` row: (sorted plain subscribers, groups)."""
    plain, bar, groups = expected.partition("|")
    assert bar and plain.startswith("plain:") and groups.startswith("groups:"), expected
    parsed = []
    for item in split(groups.removeprefix("groups:"), ";"):
        key, eq, members = item.partition("=")
        name, slash, pattern = key.partition("/")
        assert eq and slash and members, item
        parsed.append((name, decode_field(pattern), sorted(split(members, ","))))
    return sorted(split(plain.removeprefix("plain:"), ",")), sorted(parsed)


def normalise(answer) -> tuple[list, Groups]:
    """Sorts an answer of ``lookup_groups`` the way ``expected_route`` sorts the table."""
    plain, groups = answer
    return sorted(plain), sorted((name, f, sorted(members)) for name, f, members in groups)


def apply(m, text: str) -> None:
    """Applies the operations of a ``route`` row's ``text`` to the matcher ``m``."""
    for op in text.split(";"):
        remove = op.startswith("-")
        subscriber, eq, pattern = op.removeprefix("-").partition("=")
        if not eq:
            assert remove, op
            assert m.remove_subscriber(subscriber) > 0, op
            continue
        kwargs = {}
        if "@" in pattern:
            pattern, _, group = pattern.rpartition("@")
            kwargs["group"] = decode_field(group)
        pattern = decode_field(pattern)
        if remove:
            assert m.unsubscribe(pattern, subscriber, **kwargs), op
        else:
            m.subscribe(pattern, subscriber, **kwargs)


def test_the_table_is_well_formed():
    assert ROWS, "shared.tsv is empty"
    for row in ROWS:
        assert row["dialect"] in tm.DIALECTS and row["kind"] in KINDS, row
        assert row["source"], row
        if row["kind"] == "share_filter":
            assert row["dialect"] == "mqtt", row
            e = row["expected"]
            assert e in ("plain", "invalid") or (e.startswith("shared:") and e.count(":") >= 2), row
        elif row["kind"] == "group_name":
            assert row["expected"] in ("valid", "invalid"), row
        else:
            expected_route(row["expected"])


@pytest.mark.parametrize("row", SHARE_FILTER_ROWS, ids=row_id)
def test_share_filters_agree_with_the_brokers(matcher_cls, row):
    text, expected = decode_field(row["text"]), row["expected"]
    m = matcher_cls(row["dialect"])
    if expected == "invalid":
        with pytest.raises(tm.InvalidPattern):
            m.subscribe(text, "s")
        assert len(m) == 0, row["source"]
        assert list(m.subscriptions()) == [] and list(m.group_subscriptions()) == []
    elif expected == "plain":
        m.subscribe(text, "s")
        assert list(m.subscriptions()) == [(text, "s")], row["source"]
        assert list(m.group_subscriptions()) == [], row["source"]
        assert len(m) == 1
    else:
        _, name, pattern = expected.split(":", 2)
        name, pattern = decode_field(name), decode_field(pattern)
        m.subscribe(text, "s")
        assert list(m.group_subscriptions()) == [(name, pattern, "s")], row["source"]
        assert list(m.subscriptions()) == [], row["source"]
        assert len(m) == 1
        # group= names the very same group.
        other = matcher_cls(row["dialect"])
        other.subscribe(pattern, "s", group=name)
        assert list(other.group_subscriptions()) == [(name, pattern, "s")]
        # A $share/ filter names its group itself: giving it again is an error.
        with pytest.raises(ValueError):
            m.subscribe(text, "t", group=name)
        assert len(m) == 1


@pytest.mark.parametrize("row", GROUP_NAME_ROWS, ids=row_id)
def test_group_names_agree_with_the_brokers(matcher_cls, row):
    name, pattern = decode_field(row["text"]), decode_field(row["topic"])
    m = matcher_cls(row["dialect"])
    if row["expected"] == "valid":
        m.subscribe(pattern, "s", group=name)
        assert list(m.group_subscriptions()) == [(name, pattern, "s")], row["source"]
        assert len(m) == 1
    else:
        with pytest.raises(tm.InvalidPattern):
            m.subscribe(pattern, "s", group=name)
        assert len(m) == 0, row["source"]


@pytest.mark.parametrize("row", ROUTE_ROWS, ids=row_id)
def test_lookup_groups_agrees_with_the_brokers(matcher_cls, row):
    m = matcher_cls(row["dialect"])
    apply(m, row["text"])
    got = normalise(m.lookup_groups(decode_field(row["topic"])))
    assert got == expected_route(row["expected"]), row["source"]


@pytest.mark.parametrize("row", ROUTE_ROWS, ids=row_id)
def test_lookup_reaches_every_plain_subscriber_and_one_member_of_each_group(matcher_cls, row):
    m = matcher_cls(row["dialect"])
    apply(m, row["text"])
    topic = decode_field(row["topic"])
    plain, groups = expected_route(row["expected"])
    plain_set = set(plain)
    members = {s for _, _, ms in groups for s in ms}
    # Several lookups, since each may choose other members.
    for _ in range(4):
        got = m.lookup(topic)
        assert len(got) == len(set(got)), (got, row["source"])
        got_set = set(got)
        assert plain_set <= got_set, (got, row["source"])
        assert got_set - plain_set <= members, (got, row["source"])
        for name, pattern, ms in groups:
            assert got_set & set(ms), (name, pattern, got, row["source"])
