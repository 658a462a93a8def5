"""`lookup` and `lookup_many` per matcher class, and the same workload through each peer."""

from __future__ import annotations

import pytest

from topicmatch import bench, peers

from conftest import MATCHERS, PEERS, SIZES, cycling


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("cls", MATCHERS, ids=lambda c: c.__name__)
def test_lookup(benchmark, mixed_workloads, cls, n):
    w = mixed_workloads[n]
    m = cls("mqtt", w.subscriptions)
    benchmark.group = f"lookup mixed {n}"
    benchmark(cycling(m.lookup, w.topics))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("cls", MATCHERS, ids=lambda c: c.__name__)
def test_lookup_many_256(benchmark, mixed_workloads, cls, n):
    w = mixed_workloads[n]
    m = cls("mqtt", w.subscriptions)
    benchmark.group = f"lookup_many(256 topics) mixed {n}"
    benchmark(m.lookup_many, w.topics[:256])


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("peer_cls", PEERS, ids=lambda c: c.__name__)
def test_peer_lookup(benchmark, mixed_workloads, peer_cls, n):
    pytest.importorskip(peer_cls.requires)
    if peer_cls.scans and n > 10_000:
        pytest.skip("a scanning peer at this size takes minutes")
    subs, topics = bench.respell(mixed_workloads[n], peer_cls.dialect)
    peer = peer_cls(subs)
    ours = MATCHERS[-1](peer_cls.dialect, subs)
    assert peers.disagreements(peer, ours, topics[:100]) == []
    benchmark.group = f"lookup mixed {n}"
    benchmark(cycling(peer.lookup, topics))
