"""amqtt 0.12.1 as it ships against amqtt routed by topicmatch
(examples/amqtt_topicmatch): publish-to-delivery throughput and latency through a real broker,
and the routing step alone.

    .venv/bin/python benches/python/amqtt_routing.py            # full: two to four minutes
    .venv/bin/python benches/python/amqtt_routing.py --quick    # under a minute

The workload is a fleet: sites of ten devices, each device subscribing to its own command topic
(`fleet/s<site>/d<device>/cmd`, exact) and each site having a dashboard that subscribes to its
telemetry (`fleet/s<site>/+/telemetry/#`): nine exact filters to one wildcard, all distinct
(amqtt's scan costs one test per distinct filter). The filters are spread round robin over 50
client connections (200 each at 10,000): amqtt's routing cost grows with the filters, not the
connections, and a test of 10,000 connections would measure the client side more than the
broker. Each published message is a command to one device or a reading for one dashboard, so
it goes to exactly one subscriber.

End to end, each broker runs in a process of its own (`examples/amqtt_topicmatch/run.py`, amqtt's
default plugins, on loopback), pinned to one core with the clients (paho-mqtt, QoS 0) on the
other when there are two. Throughput: a burst of messages published as fast as the publisher
can, from the first publish to the last delivery. Latency: one message at a time, each waited
for, from the publish call to the subscriber's callback (p50, p99). The routing step alone, in
this process: the loop of `Broker._run_broadcast` over `_subscriptions` with `_matches` (as
0.12.1 runs it, with its per-filter debug f-string) against `TopicmatchBroker`'s index lookup,
per published message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import platform
import random
import select
import shlex
import statistics
import subprocess
import sys
import threading
import time
import warnings
from importlib import metadata
from pathlib import Path

import amqtt
import paho.mqtt.client as mqtt
from amqtt.broker import Broker

import topicmatch as tm

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "amqtt_topicmatch"
sys.path.append(str(EXAMPLE))
tb = importlib.import_module("topicmatch_broker")

CLIENTS = 50
DEVICES_PER_SITE = 9  # and one dashboard filter: ten filters a site
WAIT = 120.0  # seconds: the bound on any one wait for the broker


def fleet(n: int) -> tuple[list[str], list[str]]:
    """`n` distinct filters, and the topics to publish (each matching exactly one filter)."""
    sites = n // (DEVICES_PER_SITE + 1)
    filters = []
    for s in range(sites):
        filters += [f"fleet/s{s}/d{d}/cmd" for d in range(DEVICES_PER_SITE)]
        filters.append(f"fleet/s{s}/+/telemetry/#")
    topics = []
    for s in range(sites):
        for d in range(DEVICES_PER_SITE):
            topics.append(f"fleet/s{s}/d{d}/cmd")
            topics.append(f"fleet/s{s}/d{d}/telemetry/temp")
    return filters, topics


# --------------------------------------------------------------------------------------------
# The routing step alone


def stock_route(broker: Broker, topic: str) -> list[str]:
    """amqtt 0.12.1's `_run_broadcast` loop as it is, its deliveries left out."""
    broadcast = {"session": None, "topic": topic, "data": b""}
    found = []
    for k_filter, _subscriptions in broker._subscriptions.items():
        # Skip all subscriptions which do not match the topic
        if not broker._matches(broadcast["topic"], k_filter):
            broker.logger.debug(f"Topic '{broadcast['topic']}' does not match filter '{k_filter}'")
            continue
        found.append(k_filter)
    return found


def stock_matches_only(broker: Broker, topic: str) -> list[str]:
    """The `_matches` calls of that loop and nothing else."""
    matches = broker._matches
    return [f for f in broker._subscriptions if matches(topic, f)]


def time_per_call(fn, topics: list[str], budget: float) -> float:
    """Microseconds per call of `fn(topic)`, over the topics in turn: the best of five runs
    of about `budget / 5` seconds each (the machine may be shared; the best is the cost)."""
    for t in topics[:3]:
        fn(t)
    t0 = time.perf_counter()
    fn(topics[0])
    once = max(time.perf_counter() - t0, 1e-7)
    n = max(3, min(len(topics) * 4, int(budget / 5 / once)))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(n):
            fn(topics[i % len(topics)])
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def routing_alone(sizes: list[int], budget: float) -> list[tuple[int, float, float, float]]:
    rows = []
    loop = asyncio.new_event_loop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        stock, ours = Broker(loop=loop), tb.TopicmatchBroker(loop=loop)
    rng = random.Random(1)
    for n in sizes:
        filters, topics = fleet(n)
        rng.shuffle(topics)
        for b in (stock, ours):
            b._subscriptions.clear()
            for f in filters:
                b._subscriptions[f] = [("session", 0)]
        for t in topics[:200]:  # the same answer, in the same order
            assert [f for f, _ in ours.matching_subscriptions(t)] == stock_route(stock, t), t
        s = time_per_call(lambda t: stock_route(stock, t), topics, budget)
        m = time_per_call(lambda t: stock_matches_only(stock, t), topics, budget)
        o = time_per_call(ours.matching_subscriptions, topics, budget)
        rows.append((n, s, m, o))
    loop.close()
    return rows


# --------------------------------------------------------------------------------------------
# End to end


class BrokerProcess:
    def __init__(self, stock: bool, cpu: int | None):
        cmd = [sys.executable, str(EXAMPLE / "run.py"), "--port", "0"]
        if stock:
            cmd.append("--stock")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        if cpu is not None:
            os.sched_setaffinity(self.proc.pid, {cpu})
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("listening on "):
            self.close()
            raise RuntimeError(f"the broker did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Receivers:
    """Arrival times of the messages numbered in their payloads, over all subscribers."""

    def __init__(self):
        self.lock = threading.Lock()
        self.arrived: dict[int, int] = {}
        self.want = -1
        self.done = threading.Event()

    def on_message(self, client, userdata, msg):
        now = time.monotonic_ns()
        seq = int(msg.payload)
        with self.lock:
            self.arrived[seq] = now
            if len(self.arrived) >= self.want:
                self.done.set()

    def expect(self, count: int):
        with self.lock:
            self.arrived.clear()
            self.want = count
            self.done.clear()

    def wait(self, what: str):
        if not self.done.wait(WAIT):
            raise RuntimeError(f"timed out: {what} ({len(self.arrived)} of {self.want})")


def connect(port: int, client_id: str, on_message=None) -> mqtt.Client:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
    connected = threading.Event()
    c.on_connect = lambda *a: connected.set()
    if on_message:
        c.on_message = on_message
    c.connect("127.0.0.1", port, keepalive=600)
    c.loop_start()
    if not connected.wait(30):
        raise RuntimeError(f"{client_id}: no CONNACK")
    return c


def subscribe(c: mqtt.Client, filters: list[str]) -> None:
    done = threading.Event()
    c.on_subscribe = lambda *a: done.set()
    for i in range(0, len(filters), 100):  # SUBSCRIBE packets of 100 filters
        done.clear()
        c.subscribe([(f, 0) for f in filters[i : i + 100]])
        if not done.wait(WAIT):
            raise RuntimeError("no SUBACK")


def end_to_end(stock: bool, n: int, burst: int, samples: int, cpus) -> tuple[float, float, float]:
    """(messages/s, p50 ms, p99 ms) through one broker with `n` subscriptions."""
    filters, topics = fleet(n)
    rng = random.Random(2)
    broker = BrokerProcess(stock, cpus[0] if cpus else None)
    clients = []
    try:
        rx = Receivers()
        subs = [connect(broker.port, f"sub{k}", rx.on_message) for k in range(CLIENTS)]
        clients += subs
        pub = connect(broker.port, "publisher")
        clients.append(pub)
        for k, c in enumerate(subs):  # after every connect: see amqtt's connect-time scan
            subscribe(c, filters[k::CLIENTS])

        def run_burst(count: int, base: int) -> float:
            rx.expect(count)
            t0 = time.monotonic_ns()
            for i in range(count):
                pub.publish(rng.choice(topics), str(base + i))
            rx.wait("the burst's deliveries")
            return (max(rx.arrived.values()) - t0) / 1e9

        run_burst(min(50, burst), 0)  # warm up
        elapsed = run_burst(burst, 0)
        throughput = burst / elapsed

        latencies = []
        for i in range(samples):
            rx.expect(1)
            t0 = time.monotonic_ns()
            pub.publish(rng.choice(topics), str(i))
            rx.wait("one delivery")
            latencies.append((rx.arrived[i] - t0) / 1e6)
        q = statistics.quantiles(latencies, n=100, method="inclusive")
        return throughput, q[49], q[98]
    finally:
        for c in clients:
            c.disconnect()
            c.loop_stop()
        broker.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages: under a minute")
    parser.add_argument(
        "--sizes", default="1000,10000", help="subscription counts, comma separated"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    burst, samples, budget = (300, 200, 1.0) if args.quick else (3000, 1000, 3.0)

    cpus = sorted(os.sched_getaffinity(0))
    pinned = None
    if len(cpus) >= 2:  # the broker on one core, this process and its clients on another
        pinned = (cpus[-1],)
        os.sched_setaffinity(0, set(cpus[:-1]))

    print(f"command: `{shlex.join([Path(sys.executable).name, *sys.argv])}`")
    print(
        f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"amqtt {amqtt.__version__}, paho-mqtt {metadata.version('paho-mqtt')}, "
        f"topicmatch {tm.__version__}; broker pinned to core {pinned[0] if pinned else '-'}; "
        f"load average {os.getloadavg()[0]:.1f} at the start"
    )
    print()
    print("Routing step alone, per published message (µs):")
    print()
    print(
        "| filters | stock loop of `_run_broadcast` | its `_matches` calls only "
        "| topicmatch (`matching_subscriptions`) | speedup on the loop |"
    )
    print("|---:|---:|---:|---:|---:|")
    for n, s, m, o in routing_alone(sizes, budget):
        print(f"| {n:,} | {s:,.0f} | {m:,.0f} | {o:,.2f} | {s / o:,.0f}x |", flush=True)
    print()
    print(
        f"End to end ({CLIENTS} subscriber connections, QoS 0; throughput: a burst of "
        f"{burst:,}; latency: {samples:,} messages one at a time):"
    )
    print()
    print("| subscriptions | broker | throughput (msg/s) | p50 latency (ms) | p99 latency (ms) |")
    print("|---:|---|---:|---:|---:|")
    for n in sizes:
        for stock in (True, False):
            thr, p50, p99 = end_to_end(stock, n, burst, samples, pinned)
            name = "amqtt 0.12.1" if stock else "amqtt + topicmatch"
            print(f"| {n:,} | {name} | {thr:,.0f} | {p50:.2f} | {p99:.2f} |", flush=True)
    print()
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
