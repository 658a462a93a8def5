"""Fixtures of the pytest-benchmark suite: workloads, every topicmatch matcher class present in
this build, and every peer installed (see `topicmatch.peers`).

Run with `pytest benches/python` (the `bench` extra installs pytest-benchmark and the peers).
`TOPICMATCH_BENCH_FULL=1` adds the 100k and 1M sizes."""

from __future__ import annotations

import itertools
import os
import threading

import pytest

from topicmatch import bench, peers, workload

pytest.importorskip("pytest_benchmark")

FULL = os.environ.get("TOPICMATCH_BENCH_FULL") == "1"
SIZES = (1000, 10_000, 100_000, 1_000_000) if FULL else (1000, 10_000)
N_TOPICS = 1000

MATCHERS = bench.matcher_classes()
PEERS = peers.PEERS


@pytest.fixture(scope="session")
def mixed_workloads():
    """`mixed` at each size, MQTT spelling, generated once."""
    return {n: workload.mixed(n, N_TOPICS, "mqtt", seed=0) for n in SIZES}


def cycling(fn, topics):
    """A no-argument callable that applies `fn` to the next topic each time."""
    it = itertools.cycle(topics)
    return lambda: fn(next(it))


class Busy:
    """A CPU-bound pure-Python thread, running while the context is open."""

    def __enter__(self):
        self.stop = threading.Event()
        self.loops = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        x = 0
        while not self.stop.is_set():
            for i in range(1000):
                x += i * i
            self.loops += 1

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
