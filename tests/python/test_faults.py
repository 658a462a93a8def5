"""Faults and long calls: Ctrl-C during a long batch, other threads running meanwhile, and
the matcher consistent and usable afterwards."""

from __future__ import annotations

import _thread
import gc
import signal
import threading
import time

import pytest


@pytest.fixture(autouse=True)
def no_gc_callbacks():
    """Runs each test without Python-level garbage-collector callbacks. A simulated Ctrl-C is
    handled by whatever Python code runs next; when a collection triggered by the call's own
    allocations runs a callback (hypothesis registers one, for its timing statistics), the
    `KeyboardInterrupt` is raised inside the callback, where CPython reports it as ignored, and
    the call never sees it. That is CPython's rule for any code, pure Python included; these
    tests are about our calls, so they run without callbacks."""
    saved = gc.callbacks[:]
    gc.callbacks.clear()
    try:
        yield
    finally:
        gc.callbacks[:] = saved


@pytest.fixture(autouse=True)
def sigint_handled():
    """Runs each test with Python's own SIGINT handler. A process started in the background by
    a shell without job control (`sh -c 'pytest &'`) inherits SIGINT ignored, and then
    `_thread.interrupt_main` does nothing: the Ctrl-C tests would wait out their deadline and
    fail for a reason that is not ours."""
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved)


def interrupt_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, _thread.interrupt_main)
    timer.start()
    return timer


def test_ctrl_c_stops_a_long_lookup_many_and_the_matcher_stays_usable(matcher_cls):
    m = matcher_cls("amqp", [(f"a.{i}.#", i) for i in range(200)])
    topics = [f"a.{i % 300}.x.y" for i in range(3_000_000)]
    timer = interrupt_after(0.05)
    with pytest.raises(KeyboardInterrupt):
        # One call lasts seconds; repeating it keeps the test meaningful on a machine so loaded
        # that the timer thread runs late, instead of failing with "did not raise".
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            m.lookup_many(topics)
    timer.join()
    assert len(m) == 200
    assert m.lookup("a.7.z") == [7]


def test_ctrl_c_during_a_bulk_subscribe_leaves_whole_pairs(matcher_cls):
    m = matcher_cls("mqtt")
    pairs = [(f"s/{i}/+", f"c{i % 1000}") for i in range(1_000_000)]
    timer = interrupt_after(0.1)
    with pytest.raises(KeyboardInterrupt):
        m.subscribe_many(pairs)
    timer.join()
    assert len(m) < len(pairs)
    subs = m.subscriptions()
    assert len(subs) == len(m)
    for pattern, who in subs[:1000]:
        assert who in m.lookup(pattern.replace("+", "x"))
    # The registry is coherent: everything can be removed and added again.
    for who in {w for _, w in subs}:
        m.remove_subscriber(who)
    assert len(m) == 0
    assert m.subscribe("s/1/+", "c1") and m.lookup("s/1/x") == ["c1"]


def test_other_threads_run_during_a_long_lookup_many(matcher_cls):
    m = matcher_cls("amqp", [(f"a.{i}.#", i) for i in range(100)])
    topics = [f"a.{i % 150}.x" for i in range(100_000)]
    ticks = 0
    done = threading.Event()

    def count():
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0)

    t = threading.Thread(target=count)
    t.start()
    time.sleep(0.01)
    before = ticks
    m.lookup_many(topics)
    during = ticks - before
    done.set()
    t.join()
    assert during > 0
