"""Smoke suite for an installed topicmatch: run it with the installed interpreter, from a folder
outside the source tree, with `python -I smoke.py` so neither the current folder nor PYTHON*
variables can put a checkout on the path.

Standard library only: the environment under test holds topicmatch and nothing else.

    python -I smoke.py [--source DIR] [--version X.Y.Z]

--source names the checkout the package must NOT be imported from; --version is the version
the package must report (Cargo.toml's). Prints one line per check and closes with
"smoke: N passed, N failed"; the exit status is 1 if any check failed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import multiprocessing
import os
import pickle
import subprocess
import sys
import sysconfig
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

import topicmatch as tm

# Every topic matcher the project has or plans (DESIGN.md); the suite covers those present.
TOPIC_MATCHERS = ("NaiveMatcher", "Trie", "CSTrie", "InvertedBitmap", "LevelBitmap", "LazyDFA")

# Per dialect: a one-word and a many-word pattern, topics, the subscribers each topic reaches,
# and inputs that the dialect rejects (None where the dialect accepts everything).
CASES = {
    "amqp": {
        "one": "sensors.*.temp",
        "many": "sensors.#",
        "topics": {"sensors.1.temp": {"alice", "audit"}, "sensors.1.hum": {"audit"}, "x": set()},
        "bad_pattern": None,
        "bad_topic": None,
    },
    "mqtt": {
        "one": "sensors/+/temp",
        "many": "sensors/#",
        "topics": {"sensors/1/temp": {"alice", "audit"}, "sensors/1/hum": {"audit"}, "x": set()},
        "bad_pattern": "sensors/a+/temp",
        "bad_topic": "sensors/+/temp",
    },
    "nats": {
        "one": "sensors.*.temp",
        "many": "sensors.>",
        "topics": {"sensors.1.temp": {"alice", "audit"}, "sensors.1.hum": {"audit"}, "x": set()},
        "bad_pattern": "sensors..temp",
        "bad_topic": "sensors.*.temp",
    },
}


def present_matchers() -> list[type]:
    return [getattr(tm, name) for name in TOPIC_MATCHERS if hasattr(tm, name)]


def build(cls: type, dialect: str) -> object:
    case = CASES[dialect]
    m = cls(dialect=dialect)
    assert m.subscribe(case["one"], "alice") is True
    assert m.subscribe(case["one"], "alice") is False, "a repeated pair is not new"
    assert m.subscribe(case["many"], "audit") is True
    assert m.subscribe(case["many"], ("tuple", 7)) is True
    return m


def expected(dialect: str) -> dict[str, set]:
    """Subscribers each topic of the case reaches, with the tuple subscriber of build()."""
    return {
        topic: subs | ({("tuple", 7)} if "audit" in subs else set())
        for topic, subs in CASES[dialect]["topics"].items()
    }


def results(m: object, dialect: str) -> dict[str, set]:
    topics = list(CASES[dialect]["topics"])
    return {t: set(r) for t, r in zip(topics, m.lookup_many(topics), strict=True)}


def expect_error(error: type[Exception], call: Callable, *args: object) -> None:
    try:
        call(*args)
    except error:
        return
    raise AssertionError(f"{call.__qualname__}{args!r} did not raise {error.__name__}")


# Checks ------------------------------------------------------------------------------------


def check_import(args: argparse.Namespace) -> None:
    pkg = Path(tm.__file__).resolve()
    site = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    assert any(pkg.is_relative_to(s) for s in site), f"{pkg} is not in {site}"
    if args.source:
        src = Path(args.source).resolve()
        assert not pkg.is_relative_to(src), f"imported from the source tree: {pkg}"
        assert not Path.cwd().resolve().is_relative_to(src), "run from inside the source tree"
    core = Path(tm._core.__file__)
    assert core.parent == pkg.parent, f"native module {core} is not beside {pkg}"
    print(f"    topicmatch from {pkg.parent}, native module {core.name}")


def check_version(args: argparse.Namespace) -> None:
    meta = importlib.metadata.version("topicmatch")
    assert tm.__version__ == meta, f"__version__ {tm.__version__} != metadata {meta}"
    if args.version:
        assert meta == args.version, f"metadata {meta} != expected {args.version}"
    print(f"    version {meta}")


def check_matchers(_: argparse.Namespace) -> None:
    classes = present_matchers()
    assert {c.__name__ for c in classes} >= {"NaiveMatcher", "Trie"}, classes
    for cls in classes:
        for dialect in tm.DIALECTS:
            case = CASES[dialect]
            m = build(cls, dialect)
            assert m.dialect == dialect
            assert len(m) == 3
            assert cls.__name__ in repr(m), repr(m)
            want = expected(dialect)
            for topic, subs in want.items():
                got = m.lookup(topic)
                assert len(got) == len(set(got)), f"duplicates in {got}"
                assert set(got) == subs, (cls.__name__, dialect, topic, got)
            assert results(m, dialect) == want
            pairs = [(case["one"], "alice"), (case["many"], "audit"), (case["many"], ("tuple", 7))]
            assert sorted(map(repr, m.subscriptions())) == sorted(map(repr, pairs))
            if case["bad_pattern"] is not None:
                expect_error(tm.InvalidPattern, m.subscribe, case["bad_pattern"], "x")
                expect_error(tm.InvalidTopic, m.lookup, case["bad_topic"])
            assert m.unsubscribe(case["many"], "audit") is True
            assert m.unsubscribe(case["many"], "audit") is False
            assert m.remove_subscriber("alice") == 1
            assert len(m) == 1
            assert tm.matches(case["one"], next(iter(case["topics"])), dialect=dialect)
            # Pickled by content: a copy answers like the original.
            copy = pickle.loads(pickle.dumps(build(cls, dialect)))
            assert type(copy) is cls and copy.dialect == dialect
            assert results(copy, dialect) == want
        print(f"    {cls.__name__}: {', '.join(tm.DIALECTS)}")
    # The content-based matchers, where present, have their own API (DESIGN.md).
    if hasattr(tm, "HeadersMatcher"):
        h = tm.HeadersMatcher()
        h.subscribe({"kind": "temp", "site": None}, "alice")
        h.subscribe({"kind": "temp", "site": "x"}, "any", match="any")
        assert set(h.lookup({"kind": "temp", "site": "y"})) == {"alice", "any"}
        assert set(pickle.loads(pickle.dumps(h)).lookup({"site": "x"})) == {"any"}
        print("    HeadersMatcher")
    if hasattr(tm, "SelectorIndex"):
        s = tm.SelectorIndex()
        s.subscribe("https://example.com/books/{id}", "alice")
        s.subscribe("re:^urn:a:.*$", "bob")
        assert set(s.lookup(["https://example.com/books/1", "urn:a:b"])) == {"alice", "bob"}
        assert set(pickle.loads(pickle.dumps(s)).lookup(["urn:a:x"])) == {"bob"}
        print("    SelectorIndex")


def _route_in_child(payload: bytes) -> tuple[dict[str, list], bytes]:
    """Runs in a spawned process: unpickle a matcher, look up, and send it back pickled."""
    m = pickle.loads(payload)
    topics = list(CASES[m.dialect]["topics"])
    return dict(zip(topics, m.lookup_many(topics), strict=True)), pickle.dumps(m)


def check_pickle_across_processes(_: argparse.Namespace) -> None:
    jobs = [(cls, d) for cls in present_matchers() for d in tm.DIALECTS]
    payloads = [pickle.dumps(build(cls, d)) for cls, d in jobs]
    # multiprocessing with spawn: a fresh interpreter that imports topicmatch on its own.
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        answers = pool.map(_route_in_child, payloads)
    for (cls, d), (found, back) in zip(jobs, answers, strict=True):
        assert {t: set(r) for t, r in found.items()} == expected(d), (cls.__name__, d)
        again = pickle.loads(back)
        assert type(again) is cls and results(again, d) == expected(d)
    # A plain subprocess: pickle on stdin, pickle on stdout.
    code = (
        "import pickle, sys\n"
        "ms = pickle.load(sys.stdin.buffer)\n"
        "for m in ms:\n"
        "    m.subscribe('sensors/new' if m.dialect == 'mqtt' else 'sensors.new', 'child')\n"
        "pickle.dump(ms, sys.stdout.buffer)\n"
    )
    originals = [build(cls, d) for cls, d in jobs]
    out = subprocess.run(
        [sys.executable, "-I", "-c", code],
        input=pickle.dumps(originals),
        capture_output=True,
        check=True,
    ).stdout
    for (cls, d), m in zip(jobs, pickle.loads(out), strict=True):
        topic = "sensors/new" if d == "mqtt" else "sensors.new"
        assert type(m) is cls and set(m.lookup(topic)) >= {"child", "audit"}, (cls.__name__, d)
    print(f"    {len(jobs)} matchers through a spawn pool and through a subprocess")


def _lookup_repeatedly(m: object, topics: list, want: list, failures: list) -> None:
    try:
        for _ in range(5):
            assert [sorted(map(str, r)) for r in m.lookup_many(topics)] == want
    except BaseException as e:  # reported by the main thread
        failures.append(e)


def check_threads(_: argparse.Namespace) -> None:
    for cls in present_matchers():
        m = cls(dialect="mqtt")
        for i in range(200):
            m.subscribe(f"site/{i}/+", i)
        m.subscribe("site/#", "all")
        topics = [f"site/{i % 250}/temp" for i in range(5_000)]
        want = [sorted(map(str, r)) for r in m.lookup_many(topics)]
        failures: list[BaseException] = []
        threads = [
            threading.Thread(target=_lookup_repeatedly, args=(m, topics, want, failures))
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures
    print(f"    4 threads x lookup_many on {', '.join(c.__name__ for c in present_matchers())}")


def check_cli(args: argparse.Namespace) -> None:
    exe = Path(sysconfig.get_path("scripts")) / "topicmatch"
    assert exe.is_file(), f"no console script at {exe}"
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("usage: topicmatch"), out
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == tm.__version__, out
    print(f"    {exe} --help, --version")


CHECKS: list[tuple[str, Callable[[argparse.Namespace], None]]] = [
    ("import from the installed environment", check_import),
    ("version metadata equals topicmatch.__version__", check_version),
    ("every matcher in every dialect", check_matchers),
    ("pickling across processes", check_pickle_across_processes),
    ("lookup_many from several threads", check_threads),
    ("console script", check_cli),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="checkout the package must not come from")
    parser.add_argument("--version", help="version the package must report")
    args = parser.parse_args()
    print(f"smoke suite: {sys.executable} (Python {sys.version.split()[0]}), cwd {os.getcwd()}")
    passed = failed = 0
    for name, check in CHECKS:
        try:
            check(args)
        except Exception:
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc(file=sys.stdout)
        else:
            passed += 1
            print(f"ok   {name}")
    print(f"smoke: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
