"""Shared fixtures: every test of the topic matcher API runs against every matcher class."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

import topicmatch as tm

#: Every class with the topic matcher API, in the order they were added to the package.
TOPIC_MATCHERS = [
    getattr(tm, name)
    for name in ("NaiveMatcher", "Trie", "CSTrie", "InvertedBitmap", "LevelBitmap", "LazyDFA")
    if hasattr(tm, name)
]

CONFORMANCE = Path(__file__).resolve().parent.parent / "data" / "conformance"

_ESC = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def decode_field(s: str) -> str:
    """Decodes a field of the conformance tables (see tests/data/conformance/README.md)."""
    if s == "<empty>":
        return ""
    return re.sub(
        r"\\(x[0-9a-fA-F]{2}|[\\tnrf])",
        lambda m: chr(int(m.group(1)[1:], 16)) if m.group(1)[0] == "x" else _ESC[m.group(1)],
        s,
    )


def read_table(name: str) -> list[dict[str, str]]:
    with open(CONFORMANCE / name, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


@pytest.fixture(params=TOPIC_MATCHERS, ids=lambda c: c.__name__)
def matcher_cls(request):
    return request.param
