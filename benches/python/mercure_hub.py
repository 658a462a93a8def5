"""The skipfilter story end to end: the Mercure hub of examples/mercure_hub, matching with
topicmatch's SelectorIndex (skipfilter) or with the brute-force loop Mercure ran before it,
over real sockets on loopback.

The scenario of the report that led Mercure to skipfilter, shaped as benches/selector.rs:
N SSE connections with 3 selectors each (an exact user URI and two URI templates), every update
published to 2 topics (a user, and one of that user's books or groups). One asyncio process
(aiohttp) holds the N connections and publishes; the hub runs in a process of its own.

Per hub (matcher × N), after a warm-up pass over the pool of distinct updates (so that both
matchers' caches hold every topic, the steady state of a busy hub):

- latency: updates published one at a time, each timed from its POST to its last delivery;
- throughput: updates published by a few concurrent publishers; updates/s from the first POST
  to the last delivery, and the latency of each update under that load;
- where the time goes, from counters kept inside the hub (its `/stats`): matching, enqueuing
  for the recipients and socket writes per update, against the hub's CPU time per update.

    .venv/bin/python benches/python/mercure_hub.py --quick --plot mercure.png
    .venv/bin/python benches/python/mercure_hub.py --plot mercure.png          # 500, 2,000, 5,000

Needs the hub's packages (PyJWT, cheroot) and aiohttp.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import aiohttp
import jwt

import topicmatch as tm

ROOT = Path(__file__).resolve().parents[2]
KEY = "bench-key-of-at-least-thirty-two-bytes!!"
HUB = "/.well-known/mercure"
USERS, BOOKS, GROUPS = 1000, 10, 50
DATA = re.compile(rb"\ndata: (\d+)\n")


def selectors(i: int, shape: str = "wide") -> list[str]:
    """Subscriber i's three selectors. `wide` is benches/selector.rs's shape: about one
    subscriber in nine gets each update (a tenth of them hold `users/{id}`); `narrow` gives
    each subscriber its own user, as a hub of private mailboxes (Mail.tm's, where skipfilter
    took the CPU from 100% to 10%): one recipient per update."""
    if shape == "narrow":
        return [
            f"https://example.com/users/{i}",
            f"https://example.com/users/{i}/books/{{book}}",
            f"https://example.com/groups/{{group}}/users/{i}",
        ]
    third = (
        "https://example.com/users/{id}"
        if i % 10 == 0
        else f"https://example.com/users/{(i * 7) % USERS}/books/{{book}}"
    )
    return [
        f"https://example.com/users/{i % USERS}",
        f"https://example.com/groups/{i % GROUPS}/users/{{id}}",
        third,
    ]


def update_pool(n: int, users: int = USERS, seed: int = 0) -> list[list[str]]:
    """n distinct updates of two topics: a user, and one of that user's books or groups."""
    rng = random.Random(seed)
    pool: dict[tuple[str, str], None] = {}
    while len(pool) < n:
        u = rng.randrange(users)
        if rng.randrange(2):
            second = f"https://example.com/users/{u}/books/{rng.randrange(BOOKS)}"
        else:
            second = f"https://example.com/groups/{rng.randrange(GROUPS)}/users/{u}"
        pool[(f"https://example.com/users/{u}", second)] = None
    return [list(p) for p in pool]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


class Hub:
    """The hub in a subprocess."""

    def __init__(self, matcher: str, n: int, cache_size: int):
        cmd = [
            sys.executable,
            "-m",
            "examples.mercure_hub",
            "--port",
            "0",
            "--jwt-key",
            KEY,
            "--matcher",
            matcher,
            "--threads",
            str(n + 48),
            "--max-subscribers",
            str(n + 100),
            "--heartbeat",
            "60",
            "--queue-size",
            "100000",
            "--history",
            "100",
            "--cache-size",
            str(cache_size),
            "--stats",
        ]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        line = self.proc.stdout.readline()
        m = re.search(r"on (http://[^/]+)/", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"the hub did not start: {line!r}")
        self.base = m.group(1)

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class SSEConnection(asyncio.Protocol):
    """One subscriber, on a raw asyncio protocol: the request written, then the stream scanned
    for `data:` lines as bytes arrive (no coroutine per event, so one process can hold
    thousands of busy streams). Events never span the server's chunks, so the chunked framing
    can be skipped over."""

    def __init__(self, client: Client, request: bytes, opened: asyncio.Future):
        self.client, self.request, self.opened = client, request, opened
        self.head = b""
        self.tail = b"\n"

    def connection_made(self, transport):
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes):
        if self.head is not None:
            self.head += data
            if b"\r\n\r\n" not in self.head:
                return
            head, data = self.head.split(b"\r\n\r\n", 1)
            self.head = None
            status = head.split(b" ", 2)[1]
            if status != b"200":
                self.opened.set_exception(RuntimeError(f"subscribe: HTTP {status.decode()}"))
                return
            self.opened.set_result(None)  # the hub registers a subscriber before its head
        buf = self.tail + data
        cut = buf.rfind(b"\n\n")
        if cut < 0:
            self.tail = buf[-4096:]
            return
        self.client.delivered(DATA.findall(buf, 0, cut + 2))
        self.tail = buf[cut + 1 :]

    def connection_lost(self, exc):
        if not self.opened.done():
            self.opened.set_exception(ConnectionError("closed before the head"))


class Client:
    """N SSE connections and a publisher, in one event loop."""

    def __init__(self, base: str, n: int, shape: str):
        self.base = base
        self.n = n
        self.shape = shape
        self.index = tm.SelectorIndex()  # who should get what: the expected deliveries
        for i in range(n):
            for s in selectors(i, shape):
                self.index.subscribe(s, i)
        self.expected: dict[int, int] = {}  # seq -> recipients
        self.received: dict[int, int] = {}  # seq -> deliveries so far
        self.sent: dict[int, float] = {}  # seq -> time of the POST
        self.done: dict[int, float] = {}  # seq -> time of the last delivery
        self.waiters: dict[int, asyncio.Future] = {}
        self.seq = 0
        self.token = jwt.encode({"mercure": {"publish": ["*"]}}, KEY, algorithm="HS256")

    async def __aenter__(self):
        loop = asyncio.get_running_loop()
        url = urlsplit(self.base)
        self.publisher = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=16), timeout=aiohttp.ClientTimeout(total=60)
        )
        self.transports = []
        gate = asyncio.Semaphore(200)  # connections being opened at once

        async def connect(i):
            query = urlencode([("topic", s) for s in selectors(i, self.shape)])
            request = (
                f"GET {HUB}?{query} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                "Accept: text/event-stream\r\n\r\n"
            ).encode()
            async with gate:
                opened = loop.create_future()
                transport, _ = await loop.create_connection(
                    lambda: SSEConnection(self, request, opened), url.hostname, url.port
                )
                self.transports.append(transport)
                await opened

        await asyncio.gather(*(connect(i) for i in range(self.n)))
        return self

    async def __aexit__(self, *exc):
        for t in self.transports:
            t.close()
        await self.publisher.close()

    def delivered(self, seqs: list[bytes]) -> None:
        now = time.perf_counter()
        received, expected = self.received, self.expected
        for raw in seqs:
            seq = int(raw)
            got = received[seq] = received.get(seq, 0) + 1
            if got == expected.get(seq):
                self.done[seq] = now
                w = self.waiters.pop(seq, None)
                if w is not None and not w.done():
                    w.set_result(None)

    async def publish(self, topics: list[str]) -> int:
        self.seq += 1
        seq = self.seq
        self.expected[seq] = len(self.index.lookup(topics))
        if self.expected[seq]:
            self.waiters[seq] = asyncio.get_running_loop().create_future()
        form = [("topic", t) for t in topics] + [("data", str(seq))]
        self.sent[seq] = time.perf_counter()
        async with self.publisher.post(
            self.base + HUB, data=form, headers={"Authorization": f"Bearer {self.token}"}
        ) as r:
            if r.status != 200:
                raise RuntimeError(f"publish: HTTP {r.status}: {await r.text()}")
            await r.read()
        return seq

    async def wait(self, seqs: list[int], timeout: float) -> None:
        pending = [self.waiters[s] for s in seqs if s in self.waiters]
        if pending:
            await asyncio.wait_for(asyncio.gather(*pending), timeout)

    def latency(self, seq: int) -> float:
        return self.done.get(seq, self.sent[seq]) - self.sent[seq]

    async def stats(self) -> dict:
        async with self.publisher.get(self.base + "/stats") as r:
            return await r.json()


def diff(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in after if isinstance(after[k], int | float)}


async def run_one(matcher: str, n: int, args) -> dict:
    hub = Hub(matcher, n, args.cache_size)
    try:
        t0 = time.perf_counter()
        async with Client(hub.base, n, args.shape) as client:
            connect_s = time.perf_counter() - t0
            pool = update_pool(args.pool, n if args.shape == "narrow" else USERS)
            # Warm-up: every distinct update once (the matchers' caches fill), 4 at a time.
            s0 = await client.stats()
            for k in range(0, len(pool), 4):
                seqs = await asyncio.gather(*(client.publish(t) for t in pool[k : k + 4]))
                await client.wait(list(seqs), 120)
            s1 = await client.stats()
            cold = diff(s1, s0)
            # Latency: one update at a time (at most `phase_seconds`).
            lat = []
            stop = time.perf_counter() + args.phase_seconds
            for k in range(args.latency_updates):
                seq = await client.publish(pool[k % len(pool)])
                await client.wait([seq], 60)
                lat.append(client.latency(seq))
                if time.perf_counter() > stop:
                    break
            # Throughput: `publishers` concurrent publishers (at most `phase_seconds`).
            s2, cpu0 = await client.stats(), hub.cpu()
            rcpu0 = resource.getrusage(resource.RUSAGE_SELF)
            queue = list(range(args.updates))
            seqs: list[int] = []

            async def publisher():
                while queue and time.perf_counter() < stop:
                    k = queue.pop()
                    seqs.append(await client.publish(pool[k % len(pool)]))

            start = time.perf_counter()
            stop = start + args.phase_seconds
            await asyncio.gather(*(publisher() for _ in range(args.publishers)))
            await client.wait(seqs, 300)
            elapsed = max(client.done.get(s, start) for s in seqs) - start
            s3, cpu1 = await client.stats(), hub.cpu()
            rcpu1 = resource.getrusage(resource.RUSAGE_SELF)
            hot = diff(s3, s2)
            loaded = [client.latency(s) for s in seqs]
            expected = sum(client.expected[s] for s in seqs)
            missing = sum(client.expected[s] - client.received.get(s, 0) for s in client.expected)
            u = max(hot["updates"], 1)
            return {
                "matcher": matcher,
                "n": n,
                "connect_s": connect_s,
                "fanout": expected / len(seqs),
                "lat_p50": percentile(lat, 50),
                "lat_p99": percentile(lat, 99),
                "updates_per_s": len(seqs) / elapsed,
                "deliveries_per_s": expected / elapsed,
                "loaded_p50": percentile(loaded, 50),
                "loaded_p99": percentile(loaded, 99),
                "cold_match_cpu_us": cold["match_cpu_seconds"] / max(cold["updates"], 1) * 1e6,
                "match_us": hot["match_seconds"] / u * 1e6,
                "match_cpu_us": hot["match_cpu_seconds"] / u * 1e6,
                "enqueue_us": hot["enqueue_seconds"] / u * 1e6,
                "enqueue_cpu_us": hot["enqueue_cpu_seconds"] / u * 1e6,
                "publish_cpu_us": hot["publish_cpu_seconds"] / u * 1e6,
                "write_cpu_us": hot["write_cpu_seconds"] / u * 1e6,
                "direct_share": hot["direct_deliveries"] / max(hot["deliveries"], 1),
                "hub_cpu_us": (cpu1 - cpu0) / u * 1e6,
                "client_cpu_us": (rcpu1.ru_utime + rcpu1.ru_stime - rcpu0.ru_utime - rcpu0.ru_stime)
                / u
                * 1e6,
                "missing": missing,
                "dropped": s3["dropped"],
                "mean_lat": statistics.fmean(lat),
            }
    finally:
        hub.stop()


def ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


COLUMNS = [
    ("subscribers", lambda r: f"{r['n']:,}"),
    ("matcher", lambda r: r["matcher"]),
    ("recipients / update", lambda r: f"{r['fanout']:.0f}"),
    ("latency p50 / p99, one at a time (ms)", lambda r: f"{ms(r['lat_p50'])} / {ms(r['lat_p99'])}"),
    ("updates/s", lambda r: f"{r['updates_per_s']:,.0f}"),
    ("deliveries/s", lambda r: f"{r['deliveries_per_s']:,.0f}"),
    ("latency p50 / p99, loaded (ms)", lambda r: f"{ms(r['loaded_p50'])} / {ms(r['loaded_p99'])}"),
    ("match CPU, first pass (µs)", lambda r: f"{r['cold_match_cpu_us']:,.0f}"),
    ("match (µs)", lambda r: f"{r['match_us']:,.0f}"),
    ("match CPU (µs)", lambda r: f"{r['match_cpu_us']:,.0f}"),
    ("deliver (µs)", lambda r: f"{r['enqueue_us']:,.0f}"),
    ("written by the publisher", lambda r: f"{r['direct_share']:.0%}"),
    ("publish request CPU (µs)", lambda r: f"{r['publish_cpu_us']:,.0f}"),
    ("backlog writes CPU (µs)", lambda r: f"{r['write_cpu_us']:,.0f}"),
    ("hub CPU (µs)", lambda r: f"{r['hub_cpu_us']:,.0f}"),
    ("client CPU (µs)", lambda r: f"{r['client_cpu_us']:,.0f}"),
]


def table(results: list[dict]) -> str:
    lines = ["| " + " | ".join(name for name, _ in COLUMNS) + " |"]
    lines.append("|" + "---|" * len(COLUMNS))
    for r in results:
        lines.append("| " + " | ".join(cell(r) for _, cell in COLUMNS) + " |")
    return "\n".join(lines)


def plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = (("skipfilter", "o", "tab:blue"), ("bruteforce", "s", "tab:red"))
    for matcher, marker, color in styles:
        rs = sorted((r for r in results if r["matcher"] == matcher), key=lambda r: r["n"])
        if not rs:
            continue
        ns = [r["n"] for r in rs]
        kw = {"marker": marker, "color": color}
        a.plot(ns, [r["lat_p50"] * 1e3 for r in rs], "-", label=f"{matcher} p50", **kw)
        a.plot(ns, [r["lat_p99"] * 1e3 for r in rs], "--", label=f"{matcher} p99", **kw)
        b.plot(ns, [r["match_us"] / 1e3 for r in rs], "-", label=f"{matcher}: matching", **kw)
        b.plot(
            ns, [r["match_cpu_us"] / 1e3 for r in rs], ":", label=f"{matcher}: matching, CPU", **kw
        )
        b.plot(
            ns,
            [r["hub_cpu_us"] / 1e3 for r in rs],
            "--",
            alpha=0.5,
            label=f"{matcher}: hub CPU",
            **kw,
        )
    a.set(
        xlabel="SSE connections (3 selectors each)",
        ylabel="ms",
        title="Publish to last delivery, one update at a time",
    )
    b.set(xlabel="SSE connections", ylabel="ms per update", title="Inside the hub, under load")
    for ax in (a, b):
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="500 connections, fewer updates")
    p.add_argument("--sizes", type=int, nargs="+", help="connections per run")
    p.add_argument("--matchers", nargs="+", default=["skipfilter", "bruteforce"])
    p.add_argument("--updates", type=int, help="updates in the throughput phase")
    p.add_argument("--latency-updates", type=int, help="updates timed one at a time")
    p.add_argument(
        "--shape",
        choices=("wide", "narrow"),
        default="wide",
        help="wide: ~1 in 9 subscribers gets each update; narrow: one does (see selectors())",
    )
    p.add_argument("--pool", type=int, default=100, help="distinct updates, cycled")
    p.add_argument(
        "--phase-seconds",
        type=float,
        help="time limit of each measured phase (quick: 5, full: 12); updates stop there",
    )
    p.add_argument("--publishers", type=int, default=4, help="concurrent publishers")
    p.add_argument(
        "--cache-size",
        type=int,
        default=4_000_000,
        help="the hub's --cache-size (skipfilter: topics; bruteforce: (selector, topic) pairs)",
    )
    p.add_argument("--plot", help="save a plot of latency against subscribers here")
    p.add_argument("--out", help="also write the markdown table here (and the results as JSON)")
    args = p.parse_args(argv)
    args.sizes = args.sizes or ([500] if args.quick else [500, 2000, 5000])
    args.updates = args.updates or (200 if args.quick else 400)
    args.latency_updates = args.latency_updates or (50 if args.quick else 100)
    args.phase_seconds = args.phase_seconds or (5.0 if args.quick else 12.0)
    results = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for n in args.sizes:
        for matcher in args.matchers:
            t = time.perf_counter()
            r = asyncio.run(run_one(matcher, n, args))
            results.append(r)
            print(
                f"{matcher:>10} {n:>6,}: {r['updates_per_s']:,.0f} updates/s, latency p50 "
                f"{ms(r['lat_p50'])} ms, p99 {ms(r['lat_p99'])} ms, match "
                f"{r['match_us']:,.1f} µs/update, connect {r['connect_s']:.1f} s, missing "
                f"{r['missing']}, dropped {r['dropped']} ({time.perf_counter() - t:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    load = os.getloadavg()
    text = (
        f"Mercure hub over loopback, shape `{args.shape}`, {started}, {os.cpu_count()} CPUs, "
        f"load average {load[0]:.2f} at the end; up to {args.updates} updates under load "
        f"({args.publishers} publishers) and {args.latency_updates} one at a time, each phase "
        f"stopped after {args.phase_seconds:g} s; pool of {args.pool} distinct updates "
        f"(warmed first). Columns from `match` on are per update, measured inside the "
        f"hub during the loaded phase: `match` and `deliver` (writes into the recipients' "
        f"sockets, or onto their backlogs) are wall-clock time under the hub's lock; CPU "
        f"columns are thread or process CPU time.\n\n" + table(results)
    )
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    if args.plot:
        plot(results, args.plot)
        print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
