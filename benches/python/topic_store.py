"""`TopicStore` from Python at 1,000,000 MQTT topics: resident memory per stored topic, the
cost of a `set`, and `match` of a filter that selects 1,000 topics beside a scan of a `dict`
of the same topics with `tm.matches`.

    .venv/bin/python benches/python/topic_store.py [--topics N]

Topics are `sensors/<site>/<device>/temp`, 1,000 devices a site; every topic holds one shared
`bytes` payload, so the memory is the store's own. Resident memory is read from
`/proc/self/statm` (Linux) before and after the fill, after a collection.
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import topicmatch as tm


def resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1_000_000)
    n = parser.parse_args().topics
    topics = [f"sensors/{i // 1000}/{i % 1000}/temp" for i in range(n)]
    payload = b"21.5"
    site = n // 1000 // 2
    flt = f"sensors/{site}/+/temp"

    gc.collect()
    before = resident()
    store = tm.TopicStore("mqtt")
    t0 = time.perf_counter()
    for t in topics:
        store[t] = payload
    t1 = time.perf_counter()
    gc.collect()
    per_topic = (resident() - before) / n
    print(f"TopicStore: {n:,} topics: {per_topic:.0f} B per stored topic (resident), ", end="")
    print(f"{1e9 * (t1 - t0) / n:.0f} ns per set")

    before = resident()
    d = dict.fromkeys(topics, payload)
    print("dict of the same topics (keys are the caller's strings): ", end="")
    print(f"{(resident() - before) / n:.0f} B per entry")

    rounds = 20
    t0 = time.perf_counter()
    for _ in range(rounds):
        got = store.match(flt)
    t1 = time.perf_counter()
    print(f"match({flt!r}): {len(got):,} pairs, {1e6 * (t1 - t0) / rounds:.0f} us a call")
    t0 = time.perf_counter()
    scan = [(t, v) for t, v in d.items() if tm.matches(flt, t, "mqtt")]
    t1 = time.perf_counter()
    assert sorted(scan) == sorted(got)
    print(f"scan of the dict with tm.matches: {len(scan):,} pairs, {1e3 * (t1 - t0):.0f} ms")


if __name__ == "__main__":
    main()
