"""An independent, deliberately plain statement of the three dialects' semantics, written
without looking at the Rust reference, so that the two check each other."""

from __future__ import annotations

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
        if not text or any(c in text for c in " \t\r\n\f") or "" in ws:
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
