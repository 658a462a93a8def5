"""atheris fuzz harness for the Python API: every matcher class, any input.

Each input is read as a program: which class (and dialect), then a run of operations
(subscribe, unsubscribe, lookup, lookup_many and lookup_flat, subscribe_many,
remove_subscriber, pickle round trips, CSTrie snapshots, matches) whose arguments are `str`
(lone surrogates included), `bytes` (invalid UTF-8 and NUL included), objects of the wrong
type, and subscribers of every kind: equal objects of different types, identity-compared
objects, NaN, unhashable objects and objects whose `__hash__` or `__eq__` raise. Every
result is checked against a Python oracle (`tests/python/reference.py` for topics, brute
force for headers and selectors), and only the exceptions the API documents may escape:
`InvalidPattern`, `InvalidTopic`, `TypeError`, `ValueError`, and whatever a subscriber's own
`__hash__` or `__eq__` raised.

    python fuzz/python/fuzz_api.py [atheris/libFuzzer flags] [corpus dirs]

`run_one` needs no atheris: `tests/python/test_fuzz_api_corpus.py` replays
`fuzz/python/corpus/` and `fuzz/python/regressions/` through it on every pytest run.
"""

from __future__ import annotations

import math
import pickle
import re
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "python"))

import topicmatch as tm  # noqa: E402

try:
    import pyarrow as pa  # noqa: E402
except ImportError:  # the Arrow check is skipped without it
    pa = None

import reference  # noqa: E402

DIALECTS = ("amqp", "mqtt", "nats")
TOPIC_MATCHERS = (
    tm.NaiveMatcher,
    tm.Trie,
    tm.CSTrie,
    tm.InvertedBitmap,
    tm.LevelBitmap,
    tm.LazyDFA,
)
SEP = {"amqp": ".", "mqtt": "/", "nats": "."}

#: Most operations one input runs, so each input stays fast.
MAX_OPS = 48


class Boom(Exception):
    """What the hostile subscribers raise; it must come out of the call unchanged."""


class Conn:
    """A subscriber compared by identity, like a connection; named so copies can be told."""

    def __init__(self, name: str) -> None:
        self.name = name


class BadHash:
    def __init__(self, name: str) -> None:
        self.name = name

    def __hash__(self) -> int:
        raise Boom("__hash__")


class BadEq:
    """Hashes alike with its siblings, so putting two in one dict compares them, and fails."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __hash__(self) -> int:
        return 0x5EED_BAD

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        raise Boom("__eq__")


class Text(str):
    """A str subclass: still a str to the API."""


NAN = float("nan")

#: Every subscriber the programs use: hashable ones of many kinds, equal ones of different
#: types (1, True, 1.0), two equal tuples that are different objects, identity-compared ones,
#: NaN, unhashable ones and hostile ones.
POOL: list[object] = [
    0,
    1,
    True,
    1.0,
    2,
    "a",
    "",
    b"a",
    ("t", 1),
    ("t", 1),  # equal to the one before, another object (built at run time below)
    frozenset({1, 2}),
    Conn("c0"),
    Conn("c1"),
    NAN,
    None,
    Text("a"),
    [1],
    {"k": 1},
    BadHash("h0"),
    BadEq("e0"),
    BadEq("e1"),
]
POOL[9] = tuple(["t", 1])
POOL_IDS = {id(o) for o in POOL}


def hashable(o: object) -> bool:
    return not isinstance(o, list | dict | set)


def hostile(o: object) -> bool:
    return isinstance(o, BadHash | BadEq)


def canon(o: object) -> object:
    """A plain key equal for exactly the subscribers the API must treat as one (as dict keys
    are); computing it never calls a subscriber's own `__eq__`, so the oracle cannot raise."""
    if not hashable(o):
        return ("unhashable", id(o))
    if isinstance(o, Conn | BadEq | BadHash):
        return (type(o).__name__, o.name)
    if isinstance(o, float) and math.isnan(o):
        return ("nan",)
    if isinstance(o, bool | int | float):
        return ("num", o + 0)
    return (type(o).__name__ if not isinstance(o, str) else "str", o)


class Reader:
    """Reads a program from fuzz bytes; past the end every read gives zeros."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            return 0
        self.at += 1
        return self.data[self.at - 1]

    def below(self, n: int) -> int:
        return self.byte() % n

    def chunk(self, most: int) -> bytes:
        n = self.below(most + 1)
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def more(self) -> bool:
        return self.at < len(self.data)


#: Words chosen to collide: empty, `$`, wildcards and their look-alikes, NUL, white space,
#: non-ASCII.
WORDS = ["a", "b", "", "$s", "a*", "x#", "+", "*", "#", ">", "é", "\0", " ", "a b"]

INVALID = object()  # text that is not UTF-8
WRONG_TYPE = object()  # not a str or bytes


def text_arg(r: Reader, dialect: str) -> object:
    """A pattern or topic argument: mostly words of the dialect, else anything."""
    kind = r.below(16)
    if kind < 9:
        ws = [WORDS[r.below(len(WORDS))] for _ in range(r.below(6))]
        s = SEP[dialect].join(ws)
        return s.encode() if kind == 8 else s
    if kind == 9:
        return r.chunk(12).decode("utf-8", "replace")
    if kind == 10:
        return r.chunk(12)  # raw bytes, often not UTF-8
    if kind == 11:
        s = SEP[dialect].join(WORDS[r.below(len(WORDS))] for _ in range(1 + r.below(3)))
        cut = r.below(len(s) + 1)
        return s[:cut] + chr(0xD800 + r.below(0x800)) + s[cut:]  # a lone surrogate
    if kind == 12:
        return Text(SEP[dialect].join(WORDS[r.below(len(WORDS))] for _ in range(r.below(4))))
    if kind == 13:
        return SEP[dialect] * r.below(4) + "a" * r.below(3)
    return [None, 1, 1.5, ["a"], bytearray(b"a"), memoryview(b"a"), object()][r.below(7)]


def as_text(x: object) -> object:
    """The text an argument stands for, or INVALID or WRONG_TYPE."""
    if isinstance(x, str):
        try:
            x.encode("utf-8")
        except UnicodeEncodeError:
            return INVALID
        return str(x)
    if isinstance(x, bytes):
        try:
            return x.decode("utf-8")
        except UnicodeDecodeError:
            return INVALID
    return WRONG_TYPE


def expect_error(outcome: object, *, pattern: bool) -> type[BaseException] | None:
    if outcome is WRONG_TYPE:
        return TypeError
    if outcome is INVALID:
        return tm.InvalidPattern if pattern else tm.InvalidTopic
    return None


class Failure(AssertionError):
    pass


def check(cond: bool, *what: object) -> None:
    if not cond:
        raise Failure(" ".join(map(repr, what)))


def call(fn, *args):
    """(result, None) or (None, exception) for the documented exception types; anything else
    escapes and is a crash."""
    try:
        return fn(*args), None
    except (tm.InvalidPattern, tm.InvalidTopic, TypeError, ValueError, Boom) as e:
        return None, e


def check_raised(err: BaseException | None, want: type[BaseException], what: str) -> None:
    check(isinstance(err, want), what, "should raise", want.__name__, "got", err)


def result_keys(result: list[object], *, same_objects: bool) -> set[object]:
    keys = [canon(o) for o in result]
    check(len(keys) == len(set(keys)), "a subscriber appears twice", keys)
    if same_objects:
        check(all(id(o) in POOL_IDS for o in result), "lookup returned a stranger", result)
    return set(keys)


# ---------------------------------------------------------------------------- topic matchers


class TopicModel:
    """The oracle: the set of (pattern text, subscriber key) pairs."""

    def __init__(self, dialect: str) -> None:
        self.dialect, self.pairs = dialect, set()

    def lookup(self, topic: str) -> set[object]:
        return {s for p, s in self.pairs if reference.matches(self.dialect, p, topic)}


def check_arrow(m: object, model: TopicModel, xs: list[object], outcomes: list) -> None:
    """`lookup_arrow` on the same topics as a `lookup_many` (those of them that are UTF-8
    text, plus a null): each row is the model's answer, a null with a reason, or the call
    raises TypeError because a matched subscriber is not an int (1.0, "a", ...)."""
    if pa is None:
        return
    rows = [(x, o) for x, o in zip(xs, outcomes, strict=True) if o[1] in (None, tm.InvalidTopic)]
    texts = [t for _, (t, _) in rows]
    try:
        array = pa.array([*texts, None], pa.string())
    except (UnicodeEncodeError, pa.ArrowException):  # a lone surrogate is no Arrow string
        return
    got, raised = call(m.lookup_arrow, array)
    matched = set().union(*(model.lookup(t) for t, e in (o for _, o in rows) if e is None))
    if raised is not None:
        check_raised(raised, TypeError, f"lookup_arrow {texts!r}")
        # Legitimate when a matched subscriber is no int, or is 1, which may be held as 1.0.
        check(any(k[0] != "num" or k[1] == 1 for k in matched), "arrow TypeError", texts)
        return
    subscribers, reasons = (a.to_pylist() for a in got)
    check(subscribers[-1] is None and reasons[-1] == "null topic", "null row", reasons[-1])
    for (_, (t, err)), subs, why in zip(rows, subscribers, reasons, strict=False):
        if err is not None:
            check(subs is None and why.startswith("invalid topic"), "arrow bad topic", t, why)
            continue
        check(why is None and len(subs) == len(set(subs)), "arrow row", t, subs, why)
        check({("num", v) for v in subs} == model.lookup(t), "arrow lookup", t, subs)
    check_arrow_named(m, array, subscribers)


#: The names `check_arrow_named` gives `lookup_arrow`: ints 0..7 have one.
ARROW_NAMES = [f"name {i}" for i in range(8)]


def check_arrow_named(m: object, array: object, subscribers: list) -> None:
    """`lookup_arrow(topics, names)`: each int subscriber's row of the names, in the rows the
    int answer had; a ValueError when some matched int has no row."""
    got, raised = call(m.lookup_arrow, array, pa.array(ARROW_NAMES))
    ints = {v for subs in subscribers if subs is not None for v in subs}
    if not ints <= set(range(len(ARROW_NAMES))):
        check_raised(raised, ValueError, f"lookup_arrow names {sorted(ints)!r}")
        return
    check(raised is None, "arrow names raised", raised)
    named = got[0].to_pylist()
    for subs, names in zip(subscribers, named, strict=True):
        want = None if subs is None else sorted(ARROW_NAMES[v] for v in subs)
        check((None if names is None else sorted(names)) == want, "arrow names", subs, names)


def check_subscribe_arrow(
    m: object,
    model: TopicModel,
    items: list[tuple[object, int]],
    pattern_outcome: Callable[[object], tuple[object, type[BaseException] | None]],
) -> None:
    """`subscribe_arrow` of patterns (those that are UTF-8 text) and int subscribers, with
    `pattern_errors` on the same column: all or nothing, as `subscribe_many`; an invalid
    pattern raises InvalidPattern naming the first bad row, and adds no pair."""
    items = [(p, s) for p, s in items if isinstance(p, str)]
    try:
        patterns = pa.array([p for p, _ in items], pa.string())
    except (UnicodeEncodeError, pa.ArrowException):  # a lone surrogate is no Arrow string
        return
    subscribers = pa.array([s for _, s in items], pa.int64())
    outcomes = [pattern_outcome(p) for p, _ in items]
    reasons = tm.pattern_errors(patterns, model.dialect).to_pylist()
    for (p, _), (_, err), why in zip(items, outcomes, reasons, strict=True):
        check((why is None) == (err is None), "pattern_errors", p, why, err)
    got, raised = call(m.subscribe_arrow, patterns, subscribers)
    bad = [i for i, (_, err) in enumerate(outcomes) if err is not None]
    if bad:
        check_raised(raised, tm.InvalidPattern, f"subscribe_arrow {items!r}")
        check(f"patterns[{bad[0]}]" in str(raised), "subscribe_arrow row", raised, bad)
        return
    check(raised is None, "subscribe_arrow raised", items, raised)
    new = {(text, ("num", s)) for (_, s), (text, _) in zip(items, outcomes, strict=True)}
    check(got == len(new - model.pairs), "subscribe_arrow count", items, got)
    model.pairs |= new


def subscriber_error(s: object) -> type[BaseException] | None:
    if not hashable(s):
        return TypeError
    if isinstance(s, BadHash):
        return Boom
    return None


def run_topic(r: Reader) -> None:
    cls = TOPIC_MATCHERS[r.below(len(TOPIC_MATCHERS))]
    dialect = DIALECTS[r.below(3)]
    if cls is tm.InvertedBitmap and r.below(2):
        m = cls(dialect, cache_size=r.below(4))
    elif cls is tm.LazyDFA and r.below(2):
        # Budgets that hold a few states at most: lookups flush the cache and fall back to
        # the NFA.
        m = cls(dialect, cache_bytes=300 * r.below(8))
    else:
        m = cls(dialect)
    model = TopicModel(dialect)
    snapshots: list[tuple[object, frozenset]] = []

    def pattern_outcome(p: object) -> tuple[object, type[BaseException] | None]:
        t = as_text(p)
        err = expect_error(t, pattern=True)
        if err is None and not reference.valid_pattern(dialect, t):
            err = tm.InvalidPattern
        return t, err

    def topic_outcome(x: object) -> tuple[object, type[BaseException] | None]:
        t = as_text(x)
        err = expect_error(t, pattern=False)
        if err is None and not reference.valid_topic(dialect, t):
            err = tm.InvalidTopic
        return t, err

    def same_state(where: str) -> None:
        check(len(m) == len(model.pairs), where, "len", len(m), len(model.pairs))

    for _ in range(MAX_OPS):
        if not r.more():
            break
        op = r.below(12)
        if op in (0, 1):  # subscribe / unsubscribe
            p, s = text_arg(r, dialect), POOL[r.below(len(POOL))]
            text, err = pattern_outcome(p)
            fn = m.subscribe if op == 0 else m.unsubscribe
            got, raised = call(fn, p, s)
            serr = subscriber_error(s)
            if err is not None:
                # A bad pattern and a bad subscriber: either error may come first.
                ok = isinstance(raised, err) or (serr is not None and isinstance(raised, serr))
                check(ok, "bad pattern", p, "raised", raised)
            elif serr is not None:
                if op == 0 or raised is not None:
                    check_raised(raised, serr, f"subscriber {s!r}")
                else:
                    check(got is False, "unsubscribe of an unhashable", got)
            elif raised is not None:
                check(isinstance(s, BadEq) and isinstance(raised, Boom), "raised", raised, p, s)
            else:
                pair = (text, canon(s))
                check(
                    got is (pair not in model.pairs if op == 0 else pair in model.pairs),
                    "subscribe" if op == 0 else "unsubscribe",
                    p,
                    s,
                    got,
                )
                (model.pairs.add if op == 0 else model.pairs.discard)(pair)
            same_state("after a write")
        elif op == 2:  # lookup
            x = text_arg(r, dialect)
            text, err = topic_outcome(x)
            got, raised = call(m.lookup, x)
            if err is not None:
                check_raised(raised, err, f"lookup {x!r}")
            else:
                check(raised is None, "lookup raised", x, raised)
                check(result_keys(got, same_objects=True) == model.lookup(text), "lookup", x)
                for snap, frozen in snapshots:
                    want = {s for p, s in frozen if reference.matches(dialect, p, text)}
                    check(result_keys(snap.lookup(x), same_objects=True) == want, "snapshot", x)
        elif op == 3:  # lookup_many
            xs = [text_arg(r, dialect) for _ in range(r.below(5))]
            outcomes = [topic_outcome(x) for x in xs]
            got, raised = call(m.lookup_many, xs)
            # Every topic is read as UTF-8 text before any is parsed in the dialect.
            unread = [expect_error(as_text(x), pattern=False) for x in xs]
            bad = [e for e in unread if e is not None] or [e for _, e in outcomes if e]
            flat, flat_raised = call(m.lookup_flat, xs)
            if bad:
                check_raised(raised, bad[0], f"lookup_many {xs!r}")
                check_raised(flat_raised, bad[0], f"lookup_flat {xs!r}")
            else:
                check(raised is None and len(got) == len(xs), "lookup_many", xs, raised)
                for (text, _), one in zip(outcomes, got, strict=True):
                    check(result_keys(one, same_objects=True) == model.lookup(text), text)
                check(flat_raised is None and len(flat[1]) == len(xs) + 1, "lookup_flat", xs)
                subs, ends = flat
                for i, (text, _) in enumerate(outcomes):
                    one = subs[ends[i] : ends[i + 1]]
                    check(result_keys(one, same_objects=True) == model.lookup(text), "flat", text)
            check_arrow(m, model, xs, outcomes)
        elif op == 4:  # remove_subscriber
            s = POOL[r.below(len(POOL))]
            got, raised = call(m.remove_subscriber, s)
            serr = subscriber_error(s)
            if raised is not None:
                check(serr is not None or isinstance(s, BadEq), "remove raised", s, raised)
                if serr is not None:
                    check_raised(raised, serr, f"remove_subscriber {s!r}")
            else:
                mine = {pair for pair in model.pairs if pair[1] == canon(s)}
                check(got == len(mine), "remove_subscriber", s, got, len(mine))
                model.pairs -= mine
            same_state("after remove_subscriber")
        elif op == 5 and pa is not None and r.below(3) == 0:  # subscribe_arrow
            items = [(text_arg(r, dialect), r.below(3)) for _ in range(r.below(5))]  # POOL's ints
            check_subscribe_arrow(m, model, items, pattern_outcome)
            same_state("after subscribe_arrow")
        elif op == 5:  # subscribe_many: all or nothing
            items = [(text_arg(r, dialect), POOL[r.below(len(POOL))]) for _ in range(r.below(4))]
            before = set(model.pairs)
            got, raised = call(m.subscribe_many, items)
            new = {(pattern_outcome(p)[0], canon(s)) for p, s in items}
            if raised is None:
                check(all(pattern_outcome(p)[1] is None for p, _ in items), "accepted", items)
                check(all(subscriber_error(s) is None for _, s in items), "accepted", items)
                check(got == len(new - before), "subscribe_many count", items, got)
                model.pairs |= new
            else:
                check(
                    any(pattern_outcome(p)[1] or subscriber_error(s) for p, s in items)
                    or any(isinstance(s, BadEq) for _, s in items),
                    "subscribe_many raised",
                    items,
                    raised,
                )
            same_state("after subscribe_many")
        elif op == 6:  # pickle round trip
            try:
                copy = pickle.loads(pickle.dumps(m))
            except Boom:
                # Two BadEq subscribers rebuilt in one new matcher compare, and fail.
                check(sum(p[1][0] == "BadEq" for p in model.pairs) > 0, "pickle raised Boom")
            else:
                check(type(copy) is type(m) and copy.dialect == dialect, "pickle type")
                pairs = {(p, canon(s)) for p, s in copy.subscriptions()}
                check(pairs == model.pairs, "pickle content", pairs, model.pairs)
                check(len(copy) == len(model.pairs), "pickle len")
        elif op == 7 and isinstance(m, tm.CSTrie):  # snapshot
            if snapshots and r.below(3) == 0:
                snapshots.pop(r.below(len(snapshots)))
            snap = m.snapshot()
            check(snap.read_only and len(snap) == len(model.pairs), "snapshot")
            _, raised = call(snap.subscribe, "a", 1)
            check_raised(raised, TypeError, "a write to a snapshot")
            snapshots.append((snap, frozenset(model.pairs)))
            del snapshots[:-3]
        elif op == 8:  # subscriptions
            pairs = m.subscriptions()
            check(all(id(s) in POOL_IDS for _, s in pairs), "subscriptions: a stranger")
            keys = [(p, canon(s)) for p, s in pairs]
            check(len(keys) == len(set(keys)) and set(keys) == model.pairs, "subscriptions")
        elif op == 9:  # matches
            p, x = text_arg(r, dialect), text_arg(r, dialect)
            pt, perr = pattern_outcome(p)
            tt, terr = topic_outcome(x)
            got, raised = call(tm.matches, p, x, dialect)
            if perr or terr:
                check(
                    any(e is not None and isinstance(raised, e) for e in (perr, terr)),
                    "matches",
                    p,
                    x,
                    raised,
                )
            else:
                check(got is reference.matches(dialect, pt, tt), "matches", p, x, got)
        elif op == 10:  # a constructor given pairs, compared with the matcher itself
            copy, raised = call(type(m), dialect, m.subscriptions())
            if raised is None:
                check({(p, canon(s)) for p, s in copy.subscriptions()} == model.pairs, "ctor")
            else:
                check(isinstance(raised, Boom), "constructor raised", raised)
        else:  # a bad dialect or argument count
            _, raised = call(type(m), ["amqp ", "", "mqtt5", None][r.below(4)])
            check(isinstance(raised, ValueError | TypeError), "bad dialect", raised)


# ---------------------------------------------------------------------------- HeadersMatcher

HEADER_NAMES = ["a", "b", "x-c", "x-match", "", "é"]
HEADER_VALUES: list[object] = ["1", "2", None, "", "\ud800", b"1", 1]
MODES = ["all", "any", "all-with-x", "any-with-x", "ALL", ""]


def counts(mode: str, name: str) -> bool:
    return name != "x-match" and (mode.endswith("with-x") or not name.startswith("x-"))


def value_ok(v: object) -> type[BaseException] | None:
    # None: presence as a criterion, void as a header (docs/headers.md).
    if isinstance(v, str) and as_text(v) is INVALID:
        return ValueError
    return None if v is None or isinstance(v, str | bytes | int) else TypeError


def same(want: object, got: object) -> bool:
    """RabbitMQ's top-level comparison: str and bytes by their bytes, others by type and value."""
    if isinstance(want, str | bytes) and isinstance(got, str | bytes):
        return (want.encode() if isinstance(want, str) else want) == (
            got.encode() if isinstance(got, str) else got
        )
    return type(want) is type(got) and want == got


def run_headers(r: Reader) -> None:
    m = tm.HeadersMatcher()
    pairs: dict[tuple, int] = {}  # (criteria, mode, subscriber key) -> 1

    def criteria_arg() -> object:
        if r.below(16) == 0:
            return [("a", "1")]
        names = [HEADER_NAMES[r.below(len(HEADER_NAMES))] for _ in range(r.below(4))]
        return {n: HEADER_VALUES[r.below(len(HEADER_VALUES))] for n in names}

    def criteria_errors(c: object) -> list[type[BaseException]]:
        if not isinstance(c, dict):
            return [TypeError]
        errs = [value_ok(v) for v in c.values()]
        return [e for e in errs if e is not None]

    for _ in range(MAX_OPS):
        if not r.more():
            break
        op = r.below(6)
        if op in (0, 1):
            c, s, mode = criteria_arg(), POOL[r.below(len(POOL))], MODES[r.below(len(MODES))]
            fn = m.subscribe if op == 0 else m.unsubscribe
            got, raised = call(fn, c, s, mode)
            errs = criteria_errors(c) + ([ValueError] if mode not in MODES[:4] else [])
            serr = subscriber_error(s)
            if raised is not None:
                check(
                    any(isinstance(raised, e) for e in [*errs, serr] if e is not None)
                    or (isinstance(s, BadEq) and isinstance(raised, Boom)),
                    "headers write",
                    c,
                    s,
                    mode,
                    raised,
                )
            elif errs or serr is not None:
                # Only an unsubscribe of an unhashable subscriber may answer False instead.
                check(not errs and op == 1 and got is False, "headers accepted", c, s, mode)
            else:
                key = (frozenset(c.items()), mode, canon(s))
                check(got is (key not in pairs if op == 0 else key in pairs), "headers", c, s)
                if op == 0:
                    pairs[key] = 1
                else:
                    pairs.pop(key, None)
            check(len(m) == len(pairs), "headers len", len(m), len(pairs))
        elif op in (2, 3):
            names = [HEADER_NAMES[r.below(len(HEADER_NAMES))] for _ in range(r.below(4))]
            h = {n: HEADER_VALUES[r.below(len(HEADER_VALUES))] for n in names}
            errs = [value_ok(v) for v in h.values()]
            errs = [e for e in errs if e is not None]
            got, raised = call(m.lookup if op == 2 else m.hits, h)
            if errs:
                check(any(isinstance(raised, e) for e in errs), "headers lookup", h, raised)
                continue
            check(raised is None, "headers lookup raised", h, raised)
            matched, hits = set(), {}
            for (crit, mode, who), _ in pairs.items():
                counted = [(k, v) for k, v in crit if counts(mode, k)]
                met = sum(1 for k, v in counted if k in h and (v is None or same(v, h[k])))
                if met:
                    hits[who] = max(hits.get(who, 0), met)
                if (met == len(counted)) if mode.startswith("all") else met > 0:
                    matched.add(who)
            if op == 2:
                check(result_keys(got, same_objects=True) == matched, "headers lookup", h)
            else:
                check({canon(k): v for k, v in got.items()} == hits, "hits", h, got, hits)
        elif op == 4:
            s = POOL[r.below(len(POOL))]
            got, raised = call(m.remove_subscriber, s)
            if raised is None:
                mine = [k for k in pairs if k[2] == canon(s)]
                check(got == len(mine), "headers remove", s, got)
                for k in mine:
                    del pairs[k]
            else:
                check(subscriber_error(s) is not None or isinstance(s, BadEq), "remove", s, raised)
        else:
            try:
                copy = pickle.loads(pickle.dumps(m))
            except Boom:
                check(any(k[2][0] == "BadEq" for k in pairs), "headers pickle raised Boom")
            else:
                got = {
                    (frozenset(c.items()), mode, canon(s)) for c, s, mode in copy.subscriptions()
                }
                check(got == set(pairs), "headers pickle", got, set(pairs))


# ---------------------------------------------------------------------------- SelectorIndex

#: Selectors whose meaning the oracle knows, each with the regex it stands for.
KNOWN = {
    "*": ".*",
    "https://e.com/b/{id}": "template",
    "https://e.com/{kind}/1": "template",
    "re:https://e\\.com/(b|u)/[02]": r"https://e\.com/(b|u)/[02]",
    "re:": None,  # invalid: empty regex
    "re:(": None,
    "https://e.com/{id": "exact",  # no template: Mercure compares it as a string
    "": None,
}
TOPIC_WORDS = ["https://e.com/b/1", "https://e.com/u/2", "https://e.com/b/0", "https://e.com/u/1"]


def selector_arg(r: Reader) -> object:
    kind = r.below(8)
    if kind < 4:
        return list(KNOWN)[r.below(len(KNOWN))]
    if kind < 6:
        return TOPIC_WORDS[r.below(len(TOPIC_WORDS))]  # exact
    return text_arg(r, "amqp")


def topic_arg(r: Reader) -> object:
    return TOPIC_WORDS[r.below(len(TOPIC_WORDS))] if r.below(2) else text_arg(r, "amqp")


def selector_meaning(text: str) -> object:
    """The regex a selector stands for, "exact", None (invalid) or "unknown" (the oracle does
    not know: a template or regex the fuzzer made up)."""
    if text in KNOWN:
        return KNOWN[text]
    if text.startswith("re:") or "{" in text:
        return "unknown"
    return "exact"


#: What the known templates admit among TOPIC_WORDS (the oracle does not expand templates).
TEMPLATE_ADMITS = {
    "https://e.com/b/{id}": {"https://e.com/b/1", "https://e.com/b/0"},
    "https://e.com/{kind}/1": {"https://e.com/b/1", "https://e.com/u/1"},
}


def admits(sel: str, topic: str) -> bool | None:
    """Whether a selector admits a topic, or None where the oracle cannot tell."""
    meaning = selector_meaning(sel)
    if sel == "*":
        return True
    if meaning == "exact":
        return sel == topic
    if sel in TEMPLATE_ADMITS:
        return topic in TEMPLATE_ADMITS[sel] if topic in TOPIC_WORDS else None
    if meaning == "unknown":
        return None
    return re.fullmatch(meaning, topic) is not None


def run_selector(r: Reader) -> None:
    m = tm.SelectorIndex(cache_size=r.below(5))
    pairs: set[tuple[str, object]] = set()

    for _ in range(MAX_OPS):
        if not r.more():
            break
        op = r.below(5)
        if op in (0, 1):
            x, s = selector_arg(r), POOL[r.below(len(POOL))]
            text = as_text(x)
            err = expect_error(text, pattern=True)
            if err is None and selector_meaning(text) is None:
                err = tm.InvalidPattern
            got, raised = call(m.subscribe if op == 0 else m.unsubscribe, x, s)
            serr = subscriber_error(s)
            unknown = err is None and selector_meaning(text) == "unknown"
            if raised is not None:
                check(
                    (err is not None and isinstance(raised, err))
                    or (serr is not None and isinstance(raised, serr))
                    or (isinstance(s, BadEq) and isinstance(raised, Boom))
                    or (unknown and isinstance(raised, tm.InvalidPattern)),
                    "selector write",
                    x,
                    s,
                    raised,
                )
            else:
                check(err is None, "selector accepted", x, err)
                if serr is not None:
                    check(op == 1 and got is False, "selector: unhashable accepted", s)
                    continue
                pair = (text, canon(s))
                check(got is (pair not in pairs if op == 0 else pair in pairs), "selector", x, s)
                (pairs.add if op == 0 else pairs.discard)(pair)
            check(len(m) == len(pairs), "selector len")
        elif op == 2:
            xs = [topic_arg(r) for _ in range(1 + r.below(3))]
            single = len(xs) == 1 and isinstance(xs[0], str | bytes) and r.below(2)
            arg = xs[0] if single else xs
            texts = [as_text(x) for x in xs]
            got, raised = call(m.lookup, arg)
            bad = [expect_error(t, pattern=False) for t in texts]
            bad = [e for e in bad if e is not None]
            if bad:
                check(any(isinstance(raised, e) for e in bad), "selector lookup", xs, raised)
                continue
            check(raised is None, "selector lookup raised", xs, raised)
            keys = result_keys(got, same_objects=True)
            verdicts = [(s, [admits(sel, t) for t in texts]) for sel, s in pairs]
            surely = {s for s, v in verdicts if True in v}
            maybe = {s for s, v in verdicts if None in v}
            check(surely <= keys <= surely | maybe, "selector lookup", xs, keys, surely)
        elif op == 3:
            s = POOL[r.below(len(POOL))]
            got, raised = call(m.remove_subscriber, s)
            if raised is None:
                mine = {p for p in pairs if p[1] == canon(s)}
                check(got == len(mine), "selector remove", s)
                pairs -= mine
            else:
                check(subscriber_error(s) is not None or isinstance(s, BadEq), "remove", raised)
        else:
            try:
                copy = pickle.loads(pickle.dumps(m))
            except Boom:
                check(any(p[1][0] == "BadEq" for p in pairs), "selector pickle raised Boom")
            else:
                got = {(p, canon(s)) for p, s in copy.subscriptions()}
                check(got == pairs, "selector pickle", got, pairs)


def run_one(data: bytes) -> None:
    """Runs one fuzz input; raises on any wrong answer or undocumented exception."""
    r = Reader(data)
    which = r.below(8)
    if which < 6:
        run_topic(r)
    elif which == 6:
        run_headers(r)
    else:
        run_selector(r)


def main() -> None:
    import atheris

    # Coverage comes from the Python side (this harness, the oracle, the package's Python):
    # the extension itself is not built with libFuzzer's instrumentation.
    atheris.instrument_all()
    atheris.Setup(sys.argv, run_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
