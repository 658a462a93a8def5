"""Topic selectors and the two ways the hub matches them against an update's topics.

- `SkipfilterMatcher`: `topicmatch.SelectorIndex`, per-topic bitmaps of the subscribers that
  want the topic, filled lazily (the skipfilter technique the Mercure hub adopted).
- `BruteForceMatcher`: the loop the Mercure hub ran before skipfilter: for each subscriber,
  for each of its selectors, for each topic of the update, a test, answered from a bounded
  cache of `(selector, topic) -> bool` when the pair was seen before.

Both give the same answers. `admits(selector, topic)` is the brute force's test, written here in
Python: `*`, `re:<pattern>` (Python's `re`, whole topic), an RFC 6570 URI template (the text
itself, or an expansion of it) or an exact topic. Templates are turned into one regular
expression by the same reversal of RFC 6570's expansion rules as topicmatch's Rust core
(`src/selector/template.rs`), so a template admits the same topics in both modes; a selector
holding `{` that does not parse as a template is compared as a string (Mercure's rule). No
maintained Python URI-template library matches topics against a template: `uritemplate` and
`uri-template` on PyPI only expand.

Every selector a subscriber or publisher sends is checked by `check_selector` in both modes:
topicmatch's parser and, for `re:`, Python's `re` must both accept it, so both modes accept and
reject the same selectors.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from functools import lru_cache

import topicmatch as tm

REGEX_PREFIX = "re:"

# RFC 6570 as the Rust core reverses it (see src/selector/template.rs for the reasoning).
PREFIX_BOUND_MAX = 64
EXACT_VARS_MAX = 8
SOURCE_LIMIT = 1 << 22

_UNRESERVED = r"\-.0-9A-Z_a-z~"
_RESERVED = r":/?#\[\]@!$&'()*+,;="
_PCT = "%[0-9A-Fa-f]{2}"
_HEX = frozenset("0123456789abcdefABCDEF")

# Operator: (first, sep, named, ifemp, reserved), RFC 6570 Appendix A.
_ROWS = {
    "": ("", ",", False, "", False),
    "+": ("", ",", False, "", True),
    "#": ("#", ",", False, "", True),
    ".": (".", ".", False, "", False),
    "/": ("/", "/", False, "", False),
    ";": (";", ";", True, "", False),
    "?": ("?", "&", True, "=", False),
    "&": ("&", "&", True, "=", False),
}

MAX_SELECTOR_LENGTH = 2048


class InvalidSelector(ValueError):
    """A selector neither mode can use: empty, a bad `re:` pattern, too long, control chars."""


class _NotATemplate(Exception):
    pass


def _is_literal(c: str) -> bool:
    u = ord(c)
    return (
        u == 0x21
        or 0x23 <= u <= 0x24
        or u == 0x26
        or 0x28 <= u <= 0x3B
        or u == 0x3D
        or 0x3F <= u <= 0x5B
        or u == 0x5D
        or u == 0x5F
        or 0x61 <= u <= 0x7A
        or u == 0x7E
        or 0xA0 <= u <= 0xD7FF
        or 0xF900 <= u <= 0xFDCF
        or 0xFDF0 <= u <= 0xFFEF
        or (0x1_0000 <= u <= 0xD_FFFF and (u & 0xFFFF) <= 0xFFFD)
        or 0xE_1000 <= u <= 0xE_FFFD
        or 0xE000 <= u <= 0xF8FF
        or 0xF_0000 <= u <= 0xF_FFFD
        or 0x10_0000 <= u <= 0x10_FFFD
    )


def _pct_at(text: str, i: int) -> bool:
    return len(text) >= i + 3 and text[i] == "%" and text[i + 1] in _HEX and text[i + 2] in _HEX


def _parse(text: str) -> list:
    """RFC 6570 section 2: literals (str) and expressions ((operator, [(name, modifier)]))."""
    parts: list = []
    literal: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "{":
            if literal:
                parts.append("".join(literal))
                literal = []
            part, i = _parse_expression(text, i)
            parts.append(part)
        elif c == "}":
            raise _NotATemplate("`}` outside an expression")
        elif c == "%":
            if not _pct_at(text, i):
                raise _NotATemplate("`%` not followed by two hexadecimal digits")
            literal.append(text[i : i + 3])
            i += 3
        elif _is_literal(c):
            literal.append(c)
            i += 1
        else:
            raise _NotATemplate(f"character {c!r} not allowed in a URI template")
    if literal:
        parts.append("".join(literal))
    return parts


def _is_varchar(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "_")


def _parse_expression(text: str, open_at: int) -> tuple[tuple[str, list], int]:
    n = len(text)
    i = open_at + 1
    if i >= n:
        raise _NotATemplate("unclosed expression")
    c = text[i]
    if c == "}":
        raise _NotATemplate("empty expression")
    if c in "=,!@|":
        raise _NotATemplate(f"operator {c!r} is reserved")
    op = ""
    if c in _ROWS:
        op = c
        i += 1
    variables = []
    while True:
        start, after_dot = i, True
        while i < n:
            c = text[i]
            if _is_varchar(c):
                i += 1
                after_dot = False
            elif c == "%":
                if not _pct_at(text, i):
                    raise _NotATemplate("bad percent-encoding in a variable name")
                i += 3
                after_dot = False
            elif c == ".":
                if after_dot:
                    raise _NotATemplate("a variable name cannot start with `.` or hold `..`")
                i += 1
                after_dot = True
            else:
                break
        if i == start:
            raise _NotATemplate("expected a variable name")
        if after_dot:
            raise _NotATemplate("a variable name cannot end with `.`")
        name = text[start:i]
        modifier: int | str | None = None
        if i < n and text[i] == "*":
            i += 1
            modifier = "*"
        elif i < n and text[i] == ":":
            i += 1
            j = i
            while j < n and text[j].isascii() and text[j].isdigit():
                j += 1
            digits = j - i
            if digits == 0 or digits > 4 or text[i] == "0":
                raise _NotATemplate("a prefix length must be a number from 1 to 9999")
            modifier = int(text[i:j])
            i = j
        variables.append((name, modifier))
        if i >= n:
            raise _NotATemplate("unclosed expression")
        if text[i] == ",":
            i += 1
        elif text[i] == "}":
            return (op, variables), i + 1
        else:
            raise _NotATemplate("expected `,` or `}` after a variable")


def _var_regex(row: tuple, unit: str, unit_or_comma: str, prefix_unit: str, var) -> str:
    _first, sep, named, ifemp, _reserved = row
    name, modifier = var
    sep = re.escape(sep)
    if isinstance(modifier, int):
        value = f"{prefix_unit}{{0,{modifier}}}" if modifier <= PREFIX_BOUND_MAX else f"{unit}*"
    else:
        value = f"{unit_or_comma}*"
    u = unit
    if not named and modifier != "*":
        return value
    if not named:
        return f"(?:{u}*(?:{sep}{u}*)*|{u}*={u}*(?:{sep}{u}*={u}*)*)"
    if modifier != "*":
        name = re.escape(name)
        return f"{name}(?:={value})?" if not ifemp else f"{name}={value}"
    pair = f"{u}*(?:={u}*)?" if not ifemp else f"{u}*={u}*"
    return f"{pair}(?:{sep}{pair})*"


def _expression_regex(op: str, variables: list, out: list[str]) -> None:
    row = _ROWS[op]
    first, sep_text, _named, _ifemp, reserved = row
    allow = _UNRESERVED + _RESERVED if reserved else _UNRESERVED
    unit = f"(?:[{allow}]|{_PCT})"
    unit_or_comma = f"(?:[{allow},]|{_PCT})"
    prefix_unit = f"(?:[{allow}]|(?:{_PCT}){{1,4}})"
    vs = [_var_regex(row, unit, unit_or_comma, prefix_unit, v) for v in variables]
    f, sep = re.escape(first), re.escape(sep_text)
    if first == sep_text:
        out.extend(f"(?:{sep}{v})?" for v in vs)
    elif len(vs) <= EXACT_VARS_MAX:
        alternatives = []
        for i, v in enumerate(vs):
            alternatives.append(v + "".join(f"(?:{sep}{w})?" for w in vs[i + 1 :]))
        out.append(f"(?:{f}(?:{'|'.join(alternatives)}))?")
    else:
        out.extend(f"(?:(?:{f}|{sep}){v})?" for v in vs)


def compile_template(text: str) -> re.Pattern[str]:
    """The regular expression of the topics a URI template admits (matched with fullmatch).
    Raises ValueError if `text` is no RFC 6570 template."""
    try:
        parts = _parse(text)
    except _NotATemplate as e:
        raise ValueError(str(e)) from None
    out: list[str] = []
    size = 0
    for part in parts:
        before = len(out)
        if isinstance(part, str):
            out.append(re.escape(part))
        else:
            _expression_regex(part[0], part[1], out)
        size += sum(len(s) for s in out[before:])
        if size > SOURCE_LIMIT:
            raise ValueError("URI template too large to compile")
    return re.compile("".join(out))


class Selector:
    """One compiled selector: `admits(topic)` is the brute force's test."""

    __slots__ = ("text", "kind", "_regex", "_head", "_tail")

    def __init__(self, text: str):
        self.text = text
        self._regex: re.Pattern[str] | None = None
        self._head = self._tail = ""
        if text == "*":
            self.kind = "all"
        elif text.startswith(REGEX_PREFIX):
            self.kind = "regex"
            self._regex = re.compile(text[len(REGEX_PREFIX) :])
        elif "{" in text:
            try:
                self._regex = compile_template(text)
            except ValueError:
                self.kind = "exact"
            else:
                self.kind = "template"
                self._head = text[: text.index("{")]
                self._tail = text[text.rindex("}") + 1 :] if "}" in text else ""
        else:
            self.kind = "exact"

    def admits(self, topic: str) -> bool:
        kind = self.kind
        if kind == "all":
            return True
        if kind == "exact":
            return topic == self.text
        if kind == "template":
            return (
                topic.startswith(self._head)
                and topic.endswith(self._tail)
                and (topic == self.text or self._regex.fullmatch(topic) is not None)
            )
        return self._regex.fullmatch(topic) is not None


# topicmatch parses a selector when it is unsubscribed, even for a subscriber it does not know:
# a way to check a selector without changing any state.
_CHECKER = tm.SelectorIndex(cache_size=0)
_NOBODY = object()


def has_control_characters(text: str) -> bool:
    """C0, DEL and C1 controls, which the Mercure spec forbids in topics and selectors."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text)


@lru_cache(maxsize=65_536)
def check_selector(text: str) -> None:
    """Raises InvalidSelector unless both modes can use `text` as a selector."""
    if not text:
        raise InvalidSelector("empty selector")
    if len(text) > MAX_SELECTOR_LENGTH:
        raise InvalidSelector(f"selector longer than {MAX_SELECTOR_LENGTH} characters")
    if has_control_characters(text):
        raise InvalidSelector("control character in selector")
    try:
        _CHECKER.unsubscribe(text, _NOBODY)
    except tm.InvalidPattern as e:
        raise InvalidSelector(str(e)) from None
    if text.startswith(REGEX_PREFIX):
        try:
            re.compile(text[len(REGEX_PREFIX) :])
        except re.error as e:
            raise InvalidSelector(f"invalid regular expression for Python's re: {e}") from None


@lru_cache(maxsize=16_384)
def compiled(text: str) -> Selector:
    return Selector(text)


def admits(selector: str, topic: str) -> bool:
    """Whether `selector` admits `topic` (a selector that fails `check_selector` admits none)."""
    try:
        check_selector(selector)
    except InvalidSelector:
        return False
    return compiled(selector).admits(topic)


def any_admits(selectors: Iterable[str], topics: Iterable[str]) -> bool:
    topics = list(topics)
    return any(admits(s, t) for s in selectors for t in topics)


class SkipfilterMatcher:
    """Subscribers' selectors in a `topicmatch.SelectorIndex`."""

    name = "skipfilter"

    def __init__(self, cache_size: int = 100_000):
        self.index = tm.SelectorIndex(cache_size=cache_size)

    def add(self, subscriber: Hashable, selectors: Sequence[str]) -> None:
        for s in selectors:
            self.index.subscribe(s, subscriber)

    def remove(self, subscriber: Hashable) -> int:
        return self.index.remove_subscriber(subscriber)

    def match(self, topics: Sequence[str]) -> list:
        return self.index.lookup(topics)

    def __len__(self) -> int:
        return len(self.index)


class BruteForceMatcher:
    """Mercure before skipfilter: every selector of every subscriber against every topic,
    each test answered from a cache of `(selector, topic) -> bool` when it can be. The cache
    holds at most `cache_size` pairs and forgets the oldest first."""

    name = "bruteforce"

    def __init__(self, cache_size: int = 100_000):
        self._subscribers: dict[Hashable, tuple[Selector, ...]] = {}
        # An OrderedDict forgets its oldest entry in O(1); a dict would not (finding its
        # first live entry walks past every one deleted before it).
        self._cache: OrderedDict[tuple[str, str], bool] = OrderedDict()
        self._cache_size = cache_size

    def add(self, subscriber: Hashable, selectors: Sequence[str]) -> None:
        have = self._subscribers.get(subscriber, ())
        texts = dict.fromkeys([s.text for s in have] + list(selectors))
        self._subscribers[subscriber] = tuple(compiled(t) for t in texts)

    def remove(self, subscriber: Hashable) -> int:
        return len(self._subscribers.pop(subscriber, ()))

    def match(self, topics: Sequence[str]) -> list:
        cache, size = self._cache, self._cache_size
        out = []
        for subscriber, selectors in self._subscribers.items():
            for selector in selectors:
                for topic in topics:
                    key = (selector.text, topic)
                    hit = cache.get(key)
                    if hit is None:
                        hit = selector.admits(topic)
                        if size:
                            if len(cache) >= size:
                                cache.popitem(last=False)
                            cache[key] = hit
                    if hit:
                        break
                else:
                    continue
                out.append(subscriber)
                break
        return out

    def __len__(self) -> int:
        return sum(len(s) for s in self._subscribers.values())


MATCHERS = {"skipfilter": SkipfilterMatcher, "bruteforce": BruteForceMatcher}
