"""Python threads: `lookup_many` from 1, 2 and 4 threads, readers beside a writer churning
subscriptions, and single lookups beside a CPU-bound Python thread (the GIL convoy)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from topicmatch import workload

from conftest import MATCHERS, Busy, cycling

N = 10_000


@pytest.fixture(scope="module")
def mixed():
    return workload.mixed(N, 2048, "mqtt", seed=0)


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("cls", MATCHERS, ids=lambda c: c.__name__)
def test_lookup_many_threads(benchmark, mixed, cls, threads):
    """Each round: 8 batches of 256 topics shared out over `threads` threads."""
    m = cls("mqtt", mixed.subscriptions)
    chunks = [mixed.topics[i : i + 256] for i in range(0, 2048, 256)]
    benchmark.group = f"lookup_many 8x256 topics, threads, mixed {N}"
    with ThreadPoolExecutor(threads) as pool:
        benchmark(lambda: list(pool.map(m.lookup_many, chunks)))


@pytest.mark.parametrize("cls", MATCHERS, ids=lambda c: c.__name__)
def test_lookup_many_beside_writer(benchmark, mixed, cls):
    m = cls("mqtt", mixed.subscriptions)
    churn = workload.mixed(500, 0, "mqtt", seed=1).subscriptions
    stop = threading.Event()

    def writer():
        while not stop.is_set():
            for p, s in churn:
                m.subscribe(p, ("churn", s))
                m.unsubscribe(p, ("churn", s))

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    benchmark.group = f"lookup_many 256 topics beside a writer, mixed {N}"
    try:
        benchmark(m.lookup_many, mixed.topics[:256])
    finally:
        stop.set()
        t.join()


@pytest.mark.parametrize("busy", [False, True], ids=["alone", "beside-busy-thread"])
@pytest.mark.parametrize("call", ["lookup", "lookup_many[4]", "lookup_many[8]"])
@pytest.mark.parametrize("cls", MATCHERS, ids=lambda c: c.__name__)
def test_gil_convoy(benchmark, mixed, cls, call, busy):
    """Single lookups keep the GIL on an index (released on NaiveMatcher); `lookup_many`
    releases it from 8 topics on. Beside a busy thread, each release waits for the GIL."""
    m = cls("mqtt", mixed.subscriptions)
    if call == "lookup":
        fn = cycling(m.lookup, mixed.topics)
    else:
        k = int(call[-2])
        fn = cycling(m.lookup_many, [mixed.topics[i : i + k] for i in range(0, 2048, k)])
    benchmark.group = f"GIL convoy {cls.__name__} {call}"
    if busy:
        with Busy():
            benchmark(fn)
    else:
        benchmark(fn)
