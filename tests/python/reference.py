"""An independent, deliberately plain statement of the three dialects' semantics, written
without looking at the Rust reference, so that the two check each other; and, at the end, of
the headers exchange's (RabbitMQ's rules, docs/headers.md)."""

from __future__ import annotations

import struct
from functools import cache

SEP = {"amqp": ".", "mqtt": "/", "nats": "."}
ONE = {"amqp": "*", "mqtt": "+", "nats": "*"}
MANY = {"amqp": "#", "mqtt": "#", "nats": ">"}


def words(dialect: str, text: str) -> list[str]:
    if dialect == "amqp" and text == "":
        return []
    return text.split(SEP[dialect])


def valid_pattern(dialect: str, text: str) -> bool:
    ws = words(dialect, text)
    if dialect == "mqtt":
        if not text or "\0" in text or len(text.encode()) > 65535:
            return False
        for i, w in enumerate(ws):
            if w == "#" and i != len(ws) - 1:
                return False
            if w not in ("+", "#") and ("+" in w or "#" in w):
                return False
    if dialect == "nats":
        if not text or any(c in text for c in " \t\r\n\f\0") or "" in ws:
            return False
        if ">" in ws[:-1]:
            return False
    return True


def valid_topic(dialect: str, text: str) -> bool:
    if dialect == "mqtt":
        return bool(text) and "\0" not in text and "+" not in text and "#" not in text
    if dialect == "nats":
        ws = words(dialect, text)
        return valid_pattern(dialect, text) and "*" not in ws and ">" not in ws
    return True


def matches(dialect: str, pattern: str, topic: str) -> bool:
    p, t = tuple(words(dialect, pattern)), tuple(words(dialect, topic))
    one, many = ONE[dialect], MANY[dialect]
    if dialect == "mqtt" and t and t[0].startswith("$") and p and p[0] in ("+", "#"):
        return False

    @cache
    def go(i: int, j: int) -> bool:
        if i == len(p):
            return j == len(t)
        if p[i] == many:
            least = 1 if dialect == "nats" else 0
            return any(go(i + 1, k) for k in range(j + least, len(t) + 1))
        if j == len(t):
            return False
        return (p[i] == one or p[i] == t[j]) and go(i + 1, j + 1)

    return go(0, 0)


# ---------------------------------------------------------------------------- headers

HEADER_MODES = ("all", "any", "all-with-x", "any-with-x")


def header_kind(v: object) -> str:
    """The AMQP field kind a Python value stands for; bool before int, its base class."""
    if v is None:
        return "void"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, bytes | bytearray):
        return "bytes"
    if isinstance(v, dict):
        return "table"
    if isinstance(v, list | tuple):
        return "array"
    raise TypeError(f"not a header value: {type(v).__name__}")


def float_key(f: float) -> bytes:
    """Floats are equal when their bits are; every NaN is one NaN."""
    return b"nan" if f != f else struct.pack(">d", f)


def nested_equal(a: object, b: object) -> bool:
    """RabbitMQ's comparison inside a table or an array, where each field keeps its type."""
    kind = header_kind(a)
    if kind != header_kind(b):
        return False
    if kind == "float":
        return float_key(a) == float_key(b)
    if kind == "bytes":
        return bytes(a) == bytes(b)
    if kind == "table":  # in order: RabbitMQ compares the decoded lists
        return list(a) == list(b) and all(nested_equal(a[k], b[k]) for k in a)
    if kind == "array":
        return len(a) == len(b) and all(nested_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def header_equal(criterion: object, header: object) -> bool:
    """RabbitMQ's comparison of a top-level header with a criterion: the field type is
    dropped, so a str and bytes holding its UTF-8 are one binary."""
    texts = ("str", "bytes")
    if header_kind(criterion) in texts and header_kind(header) in texts:
        as_bytes = [v.encode() if isinstance(v, str) else bytes(v) for v in (criterion, header)]
        return as_bytes[0] == as_bytes[1]
    return nested_equal(criterion, header)


def header_counts(mode: str, name: str) -> bool:
    return name != "x-match" and (mode.endswith("-with-x") or not name.startswith("x-"))


def headers_hits(criteria: dict, mode: str, headers: dict) -> tuple[bool, int]:
    """Whether the headers match the subscription, and how many counted criteria they meet.
    A criterion of None is "present with any value"."""
    counted = {k: v for k, v in criteria.items() if header_counts(mode, k)}
    met = sum(
        1 for k, v in counted.items() if k in headers and (v is None or header_equal(v, headers[k]))
    )
    return (met == len(counted) if mode.startswith("all") else met > 0), met


def header_identity(v: object) -> object:
    """A hashable form of a value, equal for values that make the same criterion."""
    kind = header_kind(v)
    if kind == "float":
        return (kind, float_key(v))
    if kind == "bytes":
        return (kind, bytes(v))
    if kind == "table":
        return (kind, tuple((k, header_identity(x)) for k, x in v.items()))
    if kind == "array":
        return (kind, tuple(header_identity(x) for x in v))
    return (kind, v)


def criteria_identity(criteria: dict) -> frozenset:
    return frozenset((k, None if v is None else header_identity(v)) for k, v in criteria.items())
