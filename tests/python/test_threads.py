"""Many Python threads on one matcher: the end state equals a sequential replay, and every
thread reads its own writes while the others churn."""

from __future__ import annotations

import random
import subprocess
import sys
import threading

import pytest

import topicmatch as tm

import reference

THREADS = 8
OPS = 1500


def worker_ops(dialect: str, seed: int) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    sep, one, many = reference.SEP[dialect], reference.ONE[dialect], reference.MANY[dialect]
    words = ["a", "b", "c"]
    ops = []
    for _ in range(OPS):
        ws = [rng.choice([*words, one]) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.3:
            ws.append(many)
        ops.append((rng.choice(["sub", "sub", "unsub", "lookup"]), sep.join(ws), f"t{seed}"))
    return ops


def run_plan(m, dialect: str, plan, barrier: threading.Barrier, errors: list) -> None:
    """Runs one thread's plan; each thread owns its subscriber, so it knows what it must see."""
    sep, one, many = reference.SEP[dialect], reference.ONE[dialect], reference.MANY[dialect]
    try:
        barrier.wait()
        mine: set[str] = set()
        for op, pattern, me in plan:
            if op == "sub":
                m.subscribe(pattern, me)
                mine.add(pattern)
            elif op == "unsub":
                m.unsubscribe(pattern, me)
                mine.discard(pattern)
            else:
                topic = pattern.replace(one, "a").replace(many, "b")
                wanted = any(reference.matches(dialect, p, topic) for p in mine)
                assert (me in m.lookup(topic)) is wanted, (me, topic, mine)
            if len(mine) > 4 and op == "sub":
                assert len(m.lookup_many([sep.join(["c"] * len(mine))] * 9)) == 9
    except BaseException as e:  # reported by the main thread, with its context
        errors.append(e)


@pytest.mark.parametrize("dialect", tm.DIALECTS)
def test_threads_end_in_the_state_of_a_sequential_replay(matcher_cls, dialect):
    m = matcher_cls(dialect)
    plans = [worker_ops(dialect, seed) for seed in range(THREADS)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)
    threads = [
        threading.Thread(target=run_plan, args=(m, dialect, plan, barrier, errors))
        for plan in plans
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]

    replay = tm.NaiveMatcher(dialect)
    for plan in plans:
        for op, pattern, me in plan:
            if op == "sub":
                replay.subscribe(pattern, me)
            elif op == "unsub":
                replay.unsubscribe(pattern, me)
    assert sorted(m.subscriptions()) == sorted(replay.subscriptions())
    assert len(m) == len(replay)


#: Run in an interpreter of its own by the test below: a hang there is a timeout here.
COLLECTION_BESIDE_WRITER = """
import gc, sys, threading, time
import topicmatch as tm

m = getattr(tm, sys.argv[1])("amqp", [("a.#", "anchor")])
stop = threading.Event()
errors = []

def reader():
    try:
        while not stop.is_set():
            assert all("anchor" in r for r in m.lookup_many(["a.b", "a.c.d"] * 20))
            assert "anchor" in m.lookup("a.b")
    except BaseException as e:
        errors.append(e)

def yield_interpreter(phase, info):
    time.sleep(0)

gc.set_threshold(5)
gc.callbacks.append(yield_interpreter)
threads = [threading.Thread(target=reader) for _ in range(2)]
for t in threads:
    t.start()
try:
    for i in range(3000):
        m.subscribe("a.*", f"w{i}")
        m.remove_subscriber(f"w{i}")
finally:
    stop.set()
    for t in threads:
        t.join()
assert not errors, errors[0]
print("done")
"""


def test_a_collection_while_answers_are_made_does_not_stall_a_writer(matcher_cls):
    """A collection started by the allocation of an answer's list runs Python code (here a
    `gc.callbacks` entry, as Hypothesis installs one) and can hand the interpreter to a writer
    while the answer's thread still reads the subscriber table. The writer that then releases
    a subscriber must wait for the table without the interpreter, or neither thread moves
    again; nor can any other, so the scenario runs in a child interpreter with a timeout."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", COLLECTION_BESIDE_WRITER, matcher_cls.__name__],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a writer and a reader waited for each other: the interpreter hung")
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stdout + proc.stderr
