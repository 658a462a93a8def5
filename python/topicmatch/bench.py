"""`topicmatch bench`: the Python side of the benchmarks (issue 7), with plain
`time.perf_counter` loops, so it needs nothing but the package (and, for the peers and the
plots, the `bench` extra).

It times topicmatch's matchers and the peers (`topicmatch.peers`) on the named workloads of
`topicmatch.workload`, Python threads on `lookup_many`, a writer churning next to readers, and
single lookups next to a CPU-bound Python thread (the GIL convoy); it writes `results.json`,
`BENCH.md` (Markdown tables) and PNG plots into the output folder. matplotlib is imported only
when plotting.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import topicmatch as tm
from topicmatch import _core, peers, workload

#: Every topic matcher class name, in the order they join the package; absent ones are skipped.
MATCHER_NAMES = ("NaiveMatcher", "Trie", "CSTrie", "InvertedBitmap", "LevelBitmap", "LazyDFA")


def matcher_classes() -> list[type]:
    """The topic matcher classes this build of topicmatch has."""
    return [getattr(tm, name) for name in MATCHER_NAMES if hasattr(tm, name)]


@dataclass
class Profile:
    """How big and how long: `full`, `quick` (under five minutes on 2 cores) or `tiny` (tests)."""

    name: str
    #: Seconds each timing loop runs for, at least.
    min_time: float
    #: Subscription counts of the `mixed` scaling runs.
    mixed_sizes: tuple[int, ...]
    #: Largest size at which peers that scan every pattern are timed.
    scan_peer_max: int
    #: Largest size at which NaiveMatcher is timed.
    naive_max: int
    #: Distinct topics per timing loop.
    n_topics: int
    #: Sizes of the `ids` and `fanout` runs.
    ids_size: int
    fanout_size: int
    #: The size of the headline comparison (mixed workload).
    headline_size: int = 10_000
    #: Batch sizes of the GIL-convoy runs (NaiveMatcher stops at `NAIVE_BATCH_MAX`).
    batches: tuple[int, ...] = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)
    #: Subscription counts, batch sizes and rounds of the `threads` and `churn` sections.
    thread_sizes: tuple[int, ...] = (10_000, 100_000)
    thread_batches: tuple[int, ...] = (64, 2000)
    rounds: int = 3
    #: Messages of the OpenAMQ experiment (the paper routes 1,000,000).
    openamq_messages: int = 1_000_000


PROFILES = {
    "full": Profile(
        "full",
        min_time=1.0,
        mixed_sizes=(1000, 10_000, 100_000, 1_000_000),
        scan_peer_max=100_000,
        naive_max=1_000_000,
        n_topics=2000,
        ids_size=1_000_000,
        fanout_size=1_000_000,
    ),
    "quick": Profile(
        "quick",
        min_time=0.25,
        mixed_sizes=(1000, 10_000, 100_000),
        scan_peer_max=10_000,
        naive_max=100_000,
        n_topics=1000,
        ids_size=100_000,
        fanout_size=100_000,
        openamq_messages=200_000,
    ),
    "tiny": Profile(
        "tiny",
        min_time=0.005,
        mixed_sizes=(100, 300),
        scan_peer_max=300,
        naive_max=300,
        n_topics=50,
        ids_size=200,
        fanout_size=200,
        headline_size=300,
        batches=(1, 8),
        thread_sizes=(300,),
        thread_batches=(8,),
        rounds=1,
        openamq_messages=2000,
    ),
}


# Timing


def per_call(
    fn: Callable[[Any], Any], args: Sequence[Any], min_time: float, rounds: int = 5
) -> float:
    """Seconds per call of `fn(arg)`: the best of `rounds` rounds, each cycling through `args`
    for `min_time / rounds` seconds (and at least three calls). The best round is the one least
    disturbed by the rest of the machine, as `timeit` advises."""
    return min(_per_call_round(fn, args, min_time / rounds) for _ in range(rounds))


def _per_call_round(fn: Callable[[Any], Any], args: Sequence[Any], min_time: float) -> float:
    n = 0
    gc_was = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        deadline = start + min_time
        while True:
            for a in args:
                fn(a)
                n += 1
                if n >= 3 and (n < 16 or n % 16 == 0) and time.perf_counter() > deadline:
                    break
            now = time.perf_counter()
            if n >= 3 and now > deadline:
                return (now - start) / n
    finally:
        if gc_was:
            gc.enable()


def per_topic_many(
    m: Any, topics: list[str], batch: int, min_time: float, rounds: int = 5
) -> float:
    """Seconds per topic of `m.lookup_many` on batches of `batch` topics (cycling through
    `topics` for a batch longer than the list)."""
    if batch > len(topics):
        topics = (topics * (batch // len(topics) + 1))[:batch]
    chunks = [topics[i : i + batch] for i in range(0, len(topics) - batch + 1, batch)]
    return per_call(m.lookup_many, chunks, min_time, rounds) / batch


def rss_bytes() -> int:
    """The resident set size of this process (Linux), or 0."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def build_measured(make: Callable[[], Any]) -> tuple[Any, float, int]:
    """Calls `make()`; returns its result, the seconds it took and the growth of the resident
    set (a rough memory figure: it counts what the allocator kept, not what is live)."""
    gc.collect()
    before = rss_bytes()
    start = time.perf_counter()
    obj = make()
    took = time.perf_counter() - start
    return obj, took, rss_bytes() - before


# One implementation, ours or a peer, behind one face.


@dataclass
class Impl:
    """One implementation to time: how to build it from pairs and how to get its lookup."""

    name: str
    kind: str  # "ours" or "peer"
    dialect: str
    build: Callable[[list[tuple[str, Any]]], Any]
    lookup: Callable[[Any], Callable[[str], Any]]
    scans: bool = False
    many: bool = False


#: Matchers with a result cache in front, on by default: timed with it off as well.
CACHED = ("Trie", "CSTrie")


def implementations(dialect: str = "mqtt", with_peers: bool = True) -> list[Impl]:
    """Our matchers (`lookup` and `lookup_many`) in `dialect`, then each installed peer."""
    out = []
    for cls in matcher_classes():
        scans = cls.__name__ == "NaiveMatcher"

        def build(subs, cls=cls):
            return cls(dialect, subs)

        out.append(Impl(f"{cls.__name__}.lookup", "ours", dialect, build, _ours_lookup, scans))
        out.append(
            Impl(f"{cls.__name__}.lookup_many", "ours", dialect, build, _ours_lookup, scans, True)
        )
        if cls.__name__ in CACHED:

            def build_bare(subs, cls=cls):
                return cls(dialect, subs, cache_size=0)

            name = f"{cls.__name__}.lookup, cache_size=0"
            out.append(Impl(name, "ours", dialect, build_bare, _ours_lookup, scans))
    if with_peers:
        for peer in peers.available_peers():
            out.append(Impl(peer.name, "peer", peer.dialect, peer, _peer_lookup, scans=peer.scans))
    return out


def _ours_lookup(m: Any) -> Callable[[str], Any]:
    return m.lookup


def _peer_lookup(p: peers.Peer) -> Callable[[str], Any]:
    return p.lookup


def respell(w: workload.Workload, dialect: str) -> tuple[list[tuple[str, Any]], list[str]]:
    """The same workload in another dialect's spelling (the generators only differ in the
    separator and the wildcard words)."""
    if dialect == w.dialect:
        return w.subscriptions, w.topics
    src = (workload.SEPARATOR[w.dialect], workload.ONE[w.dialect], workload.MANY[w.dialect])
    dst = (workload.SEPARATOR[dialect], workload.ONE[dialect], workload.MANY[dialect])
    table = {src[1]: dst[1], src[2]: dst[2]}

    def conv(text: str) -> str:
        return dst[0].join(table.get(x, x) for x in text.split(src[0]))

    return [(conv(p), s) for p, s in w.subscriptions], [
        dst[0].join(t.split(src[0])) for t in w.topics
    ]


def time_impl(
    impl: Impl, w: workload.Workload, profile: Profile, check: Any | None = None
) -> dict[str, Any]:
    """Builds `impl` over the workload (respelled to its dialect) and times lookups. With
    `check` (a topicmatch matcher class), a peer's answers are compared with that matcher's on
    a sample of topics first."""
    global _last_build
    subs, topics = respell(w, impl.dialect)
    key = (impl.build, impl.dialect, w)
    last = _last_build[0]
    if last is not None and all(a is b for a, b in zip(last, key, strict=True)):
        obj, built, rss = _last_build[1]
    else:
        _last_build = (None, None)
        obj, built, rss = build_measured(lambda: impl.build(subs))
        _last_build = (key, (obj, built, rss)) if impl.kind == "ours" else (None, None)
    row: dict[str, Any] = {
        "impl": impl.name,
        "kind": impl.kind,
        "dialect": impl.dialect,
        "n": len(subs),
        "build_s": built,
        "rss_bytes": rss,
    }
    if check is not None and impl.kind == "peer":
        ref = check(impl.dialect, subs)
        bad = peers.disagreements(obj, ref, topics[:50])
        row["agrees"] = not bad
        row["disagreements"] = bad[:3]
    if impl.many:
        row["lookup_s"] = per_topic_many(obj, topics, min(256, len(topics)), profile.min_time)
    else:
        lookup = impl.lookup(obj)
        lookup(topics[0])  # warm: kombu compiles its regexes on first use
        row["lookup_s"] = per_call(lookup, topics, profile.min_time)
    return row


#: The last matcher built by `time_impl`, reused by the next row if it is the same matcher on
#: the same workload (`lookup` and `lookup_many` rows share one build).
_last_build: tuple[Any, Any] = (None, None)


# The sections of the report.


def headline(profile: Profile, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """`mixed` at `headline_size` subscriptions: every implementation, and the ratio of its
    lookup time to paho's MQTTMatcher. Ours run in MQTT (as paho) and AMQP (as kombu)."""
    n = profile.headline_size
    w = workload.mixed(n, profile.n_topics, "mqtt", seed=0)
    rows = []
    impls = implementations("mqtt") + [
        i for i in implementations("amqp", with_peers=False) if not i.many
    ]
    for impl in impls:
        row = time_impl(impl, w, profile, check=tm.Trie)
        row["workload"] = f"mixed {n:,}"
        rows.append(row)
        log(f"  {impl.name} ({impl.dialect}): {row['lookup_s'] * 1e6:,.2f} µs/lookup")
    paho = next((r["lookup_s"] for r in rows if r["impl"] == peers.PahoMatcher.name), None)
    for r in rows:
        r["vs_paho"] = (paho / r["lookup_s"]) if paho else None
    return rows


def scaling(profile: Profile, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Lookup time against the number of subscriptions, `mixed` workload, MQTT spelling."""
    rows = []
    for n in profile.mixed_sizes:
        w = workload.mixed(n, profile.n_topics, "mqtt", seed=0)
        for impl in implementations("mqtt"):
            if impl.kind == "peer" and impl.scans and n > profile.scan_peer_max:
                continue
            if impl.kind == "ours" and impl.scans and n > profile.naive_max:
                continue
            row = time_impl(impl, w, profile)
            row["workload"] = "mixed"
            rows.append(row)
            log(
                f"  n={n:,} {impl.name}: {row['lookup_s'] * 1e6:,.2f} µs "
                f"(built in {row['build_s']:.2f} s)"
            )
    return rows


def other_workloads(profile: Profile, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """`seed` (hot and cold), `seed_throughput` (msg/s), `ids` and `fanout`, ours and paho."""
    rows = []
    cases = [
        ("seed hot", workload.seed(1000, profile.n_topics, "mqtt")),
        ("seed cold", workload.Workload("mqtt", [], workload.seed(0, 2, "mqtt").topics)),
        ("seed throughput", workload.seed_throughput(1000, 10 * profile.n_topics, "mqtt")),
        ("ids", workload.ids(profile.ids_size, profile.n_topics, "mqtt")),
        ("fanout", workload.fanout(profile.fanout_size, 4, "mqtt")),
    ]
    for label, w in cases:
        for impl in implementations("mqtt"):
            if impl.scans and len(w.subscriptions) > profile.scan_peer_max:
                continue
            if impl.kind == "peer" and impl.name != peers.PahoMatcher.name:
                continue
            row = time_impl(impl, w, profile)
            row["workload"] = label
            row["msg_per_s"] = 1 / row["lookup_s"]
            rows.append(row)
            log(f"  {label} {impl.name}: {row['lookup_s'] * 1e6:,.2f} µs")
    return rows


def memory(profile: Profile, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Resident-set growth per subscription while building each implementation over `mixed`,
    each in a fresh Python process (so no memory freed by an earlier build is reused) and after
    one lookup (kombu compiles its regexes then). It counts everything the process keeps: the
    core, the subscriber registry, the peer's Python objects."""
    rows = []
    sizes = [n for n in profile.mixed_sizes if n >= 10_000] or list(profile.mixed_sizes)
    for n in sizes:
        for impl in implementations("mqtt"):
            if impl.many or (impl.kind == "peer" and impl.scans and n > profile.scan_peer_max):
                continue
            code = f"from topicmatch.bench import _memory_probe; _memory_probe({impl.name!r}, {n})"
            done = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=1200
            )
            if done.returncode != 0:
                log(f"  n={n:,} {impl.name}: failed: {done.stderr.strip()[-200:]}")
                continue
            rss = json.loads(done.stdout.strip().splitlines()[-1])["rss_bytes"]
            name = impl.name.removesuffix(".lookup")
            rows.append({"impl": name, "n": n, "rss_bytes": rss, "per_sub": rss / n})
            log(f"  n={n:,} {name}: {rss / n:,.0f} bytes per subscription")
    return rows


def _memory_probe(impl_name: str, n: int) -> None:
    """Child of `memory`: builds one implementation and prints its RSS growth as JSON."""
    w = workload.mixed(n, 1, "mqtt", seed=0)
    impl = next(i for i in implementations("mqtt") if i.name == impl_name)
    subs, topics = respell(w, impl.dialect)
    gc.collect()
    before = rss_bytes()
    obj = impl.build(subs)
    impl.lookup(obj)(topics[0])
    gc.collect()
    print(json.dumps({"rss_bytes": rss_bytes() - before}))


#: The matchers of the `threads` and `churn` sections: the two tries, bare and cached.
THREAD_VARIANTS = (
    ("Trie", "Trie", {"cache_size": 0}),
    ("CSTrie", "CSTrie", {"cache_size": 0}),
    ("Trie (cached)", "Trie", {}),
    ("CSTrie (cached)", "CSTrie", {}),
)

#: Topics each thread cycles through in the `threads` section.
THREAD_TOPICS = 2000


#: The OpenAMQ paper's own figure: 170M matches in 26 s on a 2 GHz workstation (2007).
OPENAMQ_PAPER_MATCHES_PER_S = 170e6 / 26
OPENAMQ_PAPER_GHZ = 2.0
#: The batch of the experiment's `lookup_many` calls.
OPENAMQ_BATCH = 10_000
#: The result cache of the experiment's cached tries, sized as a broker with answers this long
#: would size it: the default's byte budget (16,384 entries of 256 bytes, 4 MiB) holds about
#: 4,600 of its 7,560 answers of about 190 subscribers; 32,768 entries (8 MiB) hold them all.
OPENAMQ_CACHE_SIZE = 32_768


def _fanout_impls(dialect: str, subs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return [
        ("Trie", tm.Trie(dialect, subs, cache_size=0)),
        ("CSTrie", tm.CSTrie(dialect, subs, cache_size=0)),
        ("Trie (cached)", tm.Trie(dialect, subs, cache_size=OPENAMQ_CACHE_SIZE)),
        ("CSTrie (cached)", tm.CSTrie(dialect, subs, cache_size=OPENAMQ_CACHE_SIZE)),
        ("InvertedBitmap", tm.InvertedBitmap(dialect, subs)),
        ("LazyDFA", tm.LazyDFA(dialect, subs)),
    ]


def _per_delivered(
    impls: list[tuple[str, Any]], hot: str, rounds: int, round_time: float
) -> list[dict[str, Any]]:
    """A hot topic's `lookup` per subscriber it returns, beside `list(t)` of a tuple of the
    same objects, in interleaved rounds (best of each, and the worst beside it)."""
    objs = tuple(impls[0][1].lookup(hot))
    for m in (m for _, m in impls):
        for _ in range(4):  # a full cache set admits a topic on its second miss; an answer is kept
            m.lookup(hot)  # on its second conversion
    copy: list[float] = []
    per: dict[str, list[float]] = {name: [] for name, _ in impls}
    for _ in range(rounds):
        copy.append(_per_call_round(list, [objs], round_time) / len(objs))
        for name, m in impls:
            per[name].append(_per_call_round(m.lookup, [hot], round_time) / len(objs))
    best_copy = min(copy)
    return [
        {
            "impl": name,
            "delivered": len(objs),
            "ns_per_delivered": min(per[name]) * 1e9,
            "ns_per_delivered_max": max(per[name]) * 1e9,
            "list_copy_ns": best_copy * 1e9,
            "vs_list_copy": min(per[name]) / best_copy,
        }
        for name, _ in impls
    ]


def fanout_cost(profile: Profile, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """What each delivered subscriber costs from Python. On the OpenAMQ experiment
    (`workload.openamq`): a hot topic's `lookup` per subscriber it returns, beside `list(t)` of
    a tuple of the same objects; then the experiment itself over every message with the
    collector on, as a user runs it, in matches per second beside the paper's figure:
    `lookup_many` in batches of 10,000 (a list per message), `lookup_flat` (one list per
    batch, with each message's end in it), and `count_many` (the matching alone, as the paper
    measured it); the cached tries with `OPENAMQ_CACHE_SIZE` entries. On the `fanout`
    workload: its hot topic per subscriber."""
    w = workload.openamq(2000, profile.openamq_messages, "amqp")
    impls = _fanout_impls("amqp", w.subscriptions)
    plain = impls[0][1]
    sample = w.topics[:2000]
    sizes = [len(x) for x in plain.lookup_many(sample)]
    hot = min(zip(sample, sizes, strict=True), key=lambda ts: abs(ts[1] - 180))[0]
    rows: list[dict[str, Any]] = []
    rounds = 7 if profile.name != "tiny" else 1
    round_time = profile.min_time / 2
    for r in _per_delivered(impls, hot, rounds, round_time):
        rows.append({"kind": "hot lookup", **r})
        log(
            f"  hot lookup {r['impl']}: {r['ns_per_delivered']:.2f} ns per delivered "
            f"({r['vs_list_copy']:.1f}x)"
        )
    batches = [w.topics[i : i + OPENAMQ_BATCH] for i in range(0, len(w.topics), OPENAMQ_BATCH)]
    delivered = sum(map(len, plain.lookup_many(w.topics)))
    runs = max(1, min(profile.rounds, 3))
    # Older builds, compared with this one, may lack the later forms.
    forms = [f for f in ("lookup_many", "lookup_flat", "count_many") if hasattr(plain, f)]
    for form in forms:
        for name, m in impls:
            call = getattr(m, form)
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                for b in batches:
                    call(b)
                times.append(time.perf_counter() - start)
            mid = _median_spread(times)
            rate = delivered / mid[0]
            rows.append(
                {
                    "kind": "openamq",
                    "form": form,
                    "impl": name,
                    "messages": len(w.topics),
                    "delivered": delivered,
                    "seconds": mid[0],
                    "matches_per_s": rate,
                    "matches_per_s_min": delivered / mid[2],
                    "matches_per_s_max": delivered / mid[1],
                    "msg_per_s": len(w.topics) / mid[0],
                    "vs_paper": rate / OPENAMQ_PAPER_MATCHES_PER_S,
                }
            )
            paper = rate / OPENAMQ_PAPER_MATCHES_PER_S
            log(f"  openamq {form} {name}: {rate / 1e6:.1f}M matches/s ({paper:.1f}x the paper)")
    f = workload.fanout(profile.fanout_size, 1, "mqtt")
    fan_impls = [
        ("Trie", tm.Trie("mqtt", f.subscriptions, cache_size=0)),
        ("CSTrie", tm.CSTrie("mqtt", f.subscriptions, cache_size=0)),
        ("InvertedBitmap", tm.InvertedBitmap("mqtt", f.subscriptions)),
    ]
    for r in _per_delivered(fan_impls, f.topics[0], min(rounds, 3), round_time):
        rows.append({"kind": "fanout lookup", **r})
        log(
            f"  fanout lookup {r['impl']}: {r['ns_per_delivered']:.2f} ns per delivered "
            f"({r['vs_list_copy']:.1f}x)"
        )
    return rows


def _rate_window(
    bodies: Sequence[Callable[[Callable[[], bool], list[int], int], None]],
    seconds: float,
    counted: int,
) -> list[float]:
    """Runs each of `bodies` on a thread of its own, all started together and alive for the
    whole window, and returns each counted thread's items per second over `seconds`, measured
    after a warm-up. Body `i` is called as `body(stopped, counts, i)` and adds to `counts[i]`
    until `stopped()`."""
    stop = threading.Event()
    counts = [0] * len(bodies)
    ready = threading.Barrier(len(bodies) + 1)

    def run(i: int) -> None:
        ready.wait()
        bodies[i](stop.is_set, counts, i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    ready.wait()
    time.sleep(min(0.05, seconds))
    c0, t0 = list(counts), time.perf_counter()
    time.sleep(seconds)
    c1, t1 = list(counts), time.perf_counter()
    stop.set()
    for t in threads:
        t.join()
    return [(c1[i] - c0[i]) / (t1 - t0) for i in range(counted)]


def _median_spread(xs: Sequence[float]) -> tuple[float, float, float]:
    s = sorted(xs)
    return s[len(s) // 2], s[0], s[-1]


def _lookup_body(m: Any, topics: list[str], batch: int):
    """A reader thread's loop: `lookup_many` over `topics` in batches, or single `lookup`
    calls for `batch == 0`."""
    if batch == 0:

        def body(stopped, counts, i) -> None:
            while not stopped():
                for t in topics:
                    m.lookup(t)
                counts[i] += len(topics)

    else:
        chunks = [topics[j : j + batch] for j in range(0, len(topics) - batch + 1, batch)]

        def body(stopped, counts, i) -> None:
            while not stopped():
                for c in chunks:
                    m.lookup_many(c)
                    counts[i] += len(c)

    return body


def _one_and_two(make_body: Callable[[int], Any], profile: Profile) -> dict[str, Any]:
    """One thread's rate and two threads' summed rate, in alternating windows; the ratio's
    median and spread over `profile.rounds` rounds."""
    ones, twos, ratios = [], [], []
    for _ in range(profile.rounds):
        one = sum(_rate_window([make_body(0)], profile.min_time, 1))
        two = sum(_rate_window([make_body(0), make_body(1)], profile.min_time, 2))
        ones.append(one)
        twos.append(two)
        ratios.append(two / one if one else 0.0)
    ratio, lo, hi = _median_spread(ratios)
    return {
        "one_thread": _median_spread(ones)[0],
        "two_threads": _median_spread(twos)[0],
        "ratio": ratio,
        "ratio_min": lo,
        "ratio_max": hi,
    }


def thread_scaling(profile: Profile, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Two Python threads against one on the same matcher: `lookup_many` in batches and single
    `lookup` calls, on the `mixed` workload, each thread cycling through topics of its own
    (`distinct`) or both through the same ones (`hot`). Threads live for the whole window; one
    and two threads alternate, and the ratio is reported with its spread."""
    rows = []
    for n in profile.thread_sizes:
        w = workload.mixed(n, 2 * THREAD_TOPICS, "mqtt", seed=0)
        own = [w.topics[:THREAD_TOPICS], w.topics[THREAD_TOPICS:]]
        for label, cls_name, kwargs in THREAD_VARIANTS:
            m = getattr(tm, cls_name)("mqtt", w.subscriptions, **kwargs)
            for batch in (*profile.thread_batches, 0):
                for mode in ("distinct", "hot"):
                    sets = own if mode == "distinct" else [own[0], own[0]]
                    g0 = _core._gil_stats()
                    cell = _one_and_two(
                        lambda i, m=m, sets=sets, batch=batch: _lookup_body(m, sets[i], batch),
                        profile,
                    )
                    rows.append(
                        {
                            "impl": label,
                            "n": n,
                            "call": "lookup" if batch == 0 else f"lookup_many[{batch}]",
                            "topics": mode,
                            **cell,
                            "released": _released(g0, _core._gil_stats()),
                        }
                    )
                    log(
                        f"  n={n:,} {label} {rows[-1]['call']} {mode}: 1 thread "
                        f"{cell['one_thread']:,.0f}/s, 2 threads / 1 = {cell['ratio']:.2f} "
                        f"[{cell['ratio_min']:.2f}-{cell['ratio_max']:.2f}]"
                    )
    return rows


#: The readers of the `churn` section: `lookup_many` in batches of 256 (a bulk router) and
#: single `lookup` calls (a broker routing message by message, which keeps the GIL).
CHURN_READS = ((256, "lookup_many(256)"), (0, "lookup"))


def churn(profile: Profile, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Two reader threads on `lookup_many` (batches of 256) or on single `lookup` calls, with
    and without a writer thread that subscribes and unsubscribes as fast as it can, in
    alternating windows: the share of their rate the readers keep, with its spread, and the
    writer's own rate beside them."""
    churn_subs = workload.mixed(1000, 0, "mqtt", seed=1).subscriptions
    rows = []
    cells = itertools.product(profile.thread_sizes, CHURN_READS, THREAD_VARIANTS)
    workloads = {
        n: workload.mixed(n, profile.n_topics, "mqtt", seed=0) for n in profile.thread_sizes
    }
    for n, (batch, call), (label, cls_name, kwargs) in cells:
        w = workloads[n]
        batch = min(batch, len(w.topics))
        m = getattr(tm, cls_name)("mqtt", w.subscriptions, **kwargs)
        reader = _lookup_body(m, w.topics, batch)

        def write(stopped, counts, i, m=m) -> None:
            while not stopped():
                for p, s in churn_subs:
                    m.subscribe(p, ("churn", s))
                    m.unsubscribe(p, ("churn", s))
                    counts[i] += 2

        alone, beside, kept, writes = [], [], [], []
        for _ in range(profile.rounds):
            a = sum(_rate_window([reader, reader], profile.min_time, 2))
            rates = _rate_window([reader, reader, write], profile.min_time, 3)
            alone.append(a)
            beside.append(rates[0] + rates[1])
            writes.append(rates[2])
            kept.append((rates[0] + rates[1]) / a if a else 0.0)
        ratio, lo, hi = _median_spread(kept)
        rows.append(
            {
                "impl": label,
                "n": n,
                "call": call,
                "alone": _median_spread(alone)[0],
                "beside": _median_spread(beside)[0],
                "kept": ratio,
                "kept_min": lo,
                "kept_max": hi,
                "writer_ops_per_s": _median_spread(writes)[0],
            }
        )
        log(
            f"  n={n:,} {label} {call}: readers alone {rows[-1]['alone']:,.0f} topics/s, kept "
            f"{ratio:.2f} [{lo:.2f}-{hi:.2f}] beside a writer at "
            f"{rows[-1]['writer_ops_per_s']:,.0f} ops/s"
        )
    return rows


def _released(before: dict[str, int], after: dict[str, int]) -> float:
    """The share of the binding's GIL decisions between two `_gil_stats()` that released it."""
    released = after["released"] - before["released"]
    decided = released + after["kept"] - before["kept"]
    return released / decided if decided else 0.0


def _busy(stop: threading.Event, counter: list[int]) -> None:
    """A CPU-bound pure-Python loop: it holds the GIL until the interpreter makes it switch."""
    x = 0
    while not stop.is_set():
        for i in range(1000):
            x += i * i
        counter[0] += 1


def _busy_alone(seconds: float) -> float:
    """Loops per second of the busy thread with nothing beside it."""
    stop = threading.Event()
    counter = [0]
    t = threading.Thread(target=_busy, args=(stop, counter))
    start = time.perf_counter()
    t.start()
    time.sleep(max(seconds, 0.01))
    stop.set()
    t.join()
    return counter[0] / (time.perf_counter() - start)


def gil_convoy(profile: Profile, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Topics per second of single `lookup` calls and of `lookup_many` at growing batch sizes,
    alone and next to a CPU-bound Python thread, with the busy thread's progress and the share
    of the binding's decisions that released the GIL (`topicmatch._core._gil_stats`). A batch
    releases when its measured work left is at least the measured wait to take the GIL back
    (src/python/gil.rs); next to a busy thread that wait is up to the 5 ms switch interval."""
    rows = []
    busy_alone = _busy_alone(profile.min_time)
    sizes = sorted({1000, profile.headline_size})
    for n in sizes:
        w = workload.mixed(n, profile.n_topics, "mqtt", seed=0)
        for cls in matcher_classes():
            m = cls("mqtt", w.subscriptions)
            for batch in (0, *profile.batches):
                if cls.__name__ == "NaiveMatcher" and batch > NAIVE_BATCH_MAX:
                    continue
                for busy in (False, True):
                    stop = threading.Event()
                    counter = [0]
                    t = threading.Thread(target=_busy, args=(stop, counter))
                    if busy:
                        t.start()
                        time.sleep(0.01)
                    c0 = counter[0]
                    g0 = _core._gil_stats()
                    start = time.perf_counter()
                    # One round: the busy thread's interference is what is measured.
                    if batch == 0:
                        per = per_call(m.lookup, w.topics, profile.min_time, rounds=1)
                    else:
                        per = per_topic_many(m, w.topics, batch, profile.min_time, rounds=1)
                    wall = time.perf_counter() - start
                    busy_rate = (counter[0] - c0) / wall
                    g1 = _core._gil_stats()
                    stop.set()
                    if busy:
                        t.join()
                    rows.append(
                        {
                            "impl": cls.__name__,
                            "n": n,
                            "call": "lookup" if batch == 0 else f"lookup_many[{batch}]",
                            "batch": batch,
                            "busy": busy,
                            "topics_per_s": 1 / per,
                            "busy_loops_per_s": busy_rate if busy else None,
                            "released": _released(g0, g1),
                            "wait_ms": g1["wait_ns"] / 1e6,
                        }
                    )
                log(
                    f"  n={n:,} {cls.__name__} {rows[-1]['call']}: alone "
                    f"{rows[-2]['topics_per_s']:,.0f}/s (released {rows[-2]['released']:.0%}), "
                    f"busy {rows[-1]['topics_per_s']:,.0f}/s (released "
                    f"{rows[-1]['released']:.0%}, wait {rows[-1]['wait_ms']:.2f} ms)"
                )
    # The busy thread's own rate when it runs alone (before and after, averaged).
    rows.append(
        {
            "impl": "(busy thread alone)",
            "n": 0,
            "call": "",
            "batch": -1,
            "busy": True,
            "topics_per_s": None,
            "busy_loops_per_s": (busy_alone + _busy_alone(profile.min_time)) / 2,
            "released": 0.0,
            "wait_ms": 0.0,
        }
    )
    return rows


# Reporting


def machine() -> dict[str, Any]:
    """What this ran on."""
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "topicmatch": tm.__version__,
        "time_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "switch_interval_s": sys.getswitchinterval(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                elif line.startswith("cpu MHz"):
                    info["cpu_mhz"] = float(line.split(":", 1)[1])
                    break
        with open("/proc/meminfo") as f:
            info["memory_kb"] = int(f.readline().split()[1])
        info["load_avg"] = os.getloadavg()
    except OSError:
        pass
    return info


def _us(s: float | None) -> str:
    return "" if s is None else f"{s * 1e6:,.2f}"


def _ratio(x: float | None) -> str:
    if not x:
        return ""
    return f"{x:,.1f}" if x >= 1 else f"{x:.2g}"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def markdown(results: dict[str, Any]) -> str:
    """The report: one table per section."""
    m = results["machine"]
    parts = [
        "# topicmatch bench",
        "",
        f"{m['time_utc']}, profile `{results['profile']}`; {m.get('cpu', '?')}, "
        f"{m['cpus']} CPUs, {m.get('memory_kb', 0) / 2**20:.0f} GiB, Python {m['python']}, "
        f"load average at the end {', '.join(f'{x:.1f}' for x in m.get('load_avg', ()))}.",
        "",
    ]
    if "headline" in results:
        rows = results["headline"]
        parts += [
            f"## Lookup, {rows[0]['workload']} subscriptions (ratio: paho MQTTMatcher time / "
            "this time)",
            "",
            _table(
                ["implementation", "dialect", "µs per lookup", "× paho MQTTMatcher", "agrees"],
                [
                    [
                        r["impl"],
                        r["dialect"],
                        _us(r["lookup_s"]),
                        _ratio(r.get("vs_paho")),
                        {True: "yes", False: "NO"}.get(r.get("agrees"), "(ours)"),
                    ]
                    for r in rows
                ],
            ),
            "",
        ]
    if "scaling" in results:
        rows = results["scaling"]
        impls = list(dict.fromkeys(r["impl"] for r in rows))
        ns = sorted({r["n"] for r in rows})
        cell = {(r["impl"], r["n"]): r["lookup_s"] for r in rows}
        parts += [
            "## Lookup time against subscriptions (µs), mixed workload, MQTT spelling",
            "",
            _table(
                ["implementation", *(f"{n:,}" for n in ns)],
                [[i, *(_us(cell.get((i, n))) for n in ns)] for i in impls],
            ),
            "",
        ]
    if results.get("memory"):
        rows = results["memory"]
        impls = list(dict.fromkeys(r["impl"] for r in rows))
        ns = sorted({r["n"] for r in rows})
        cell = {(r["impl"], r["n"]): r["per_sub"] for r in rows}
        parts += [
            "## Memory: resident-set growth per subscription (bytes), mixed, fresh process each",
            "",
            _table(
                ["implementation", *(f"{n:,}" for n in ns)],
                [
                    [i, *(f"{cell[(i, n)]:,.0f}" if (i, n) in cell else "" for n in ns)]
                    for i in impls
                ],
            ),
            "",
        ]
    if "workloads" in results:
        parts += [
            "## Other workloads (MQTT spelling)",
            "",
            _table(
                ["workload", "subscriptions", "implementation", "µs per lookup", "msg/s"],
                [
                    [
                        r["workload"],
                        f"{r['n']:,}",
                        r["impl"],
                        _us(r["lookup_s"]),
                        f"{r['msg_per_s']:,.0f}",
                    ]
                    for r in results["workloads"]
                ],
            ),
            "",
        ]
    if "threads" in results:
        parts += [
            "## Two Python threads against one (topics/s; ratio: median [least-greatest])",
            "",
            _table(
                [
                    "matcher",
                    "n",
                    "call",
                    "topics",
                    "1 thread",
                    "2 threads",
                    "2 / 1",
                    "GIL released",
                ],
                [
                    [
                        r["impl"],
                        f"{r['n']:,}",
                        r["call"],
                        r["topics"],
                        f"{r['one_thread']:,.0f}",
                        f"{r['two_threads']:,.0f}",
                        f"{r['ratio']:.2f} [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}]",
                        f"{r.get('released', 0.0):.0%}",
                    ]
                    for r in results["threads"]
                ],
            ),
            "",
        ]
    if "churn" in results:
        parts += [
            "## Two readers beside a writer thread churning subscriptions",
            "",
            _table(
                [
                    "matcher",
                    "n",
                    "readers call",
                    "readers alone (topics/s)",
                    "beside the writer",
                    "kept",
                    "writer ops/s",
                ],
                [
                    [
                        r["impl"],
                        f"{r['n']:,}",
                        r.get("call", "lookup_many(256)"),
                        f"{r['alone']:,.0f}",
                        f"{r['beside']:,.0f}",
                        f"{r['kept']:.2f} [{r['kept_min']:.2f}-{r['kept_max']:.2f}]",
                        f"{r['writer_ops_per_s']:,.0f}",
                    ]
                    for r in results["churn"]
                ],
            ),
            "",
        ]
    if "fanout" in results:
        rows = results["fanout"]
        mhz = m.get("cpu_mhz")
        paper = OPENAMQ_PAPER_MATCHES_PER_S
        per_ghz = f"{paper / OPENAMQ_PAPER_GHZ / 1e6:.2f}M per GHz"

        def per_delivered(kind: str) -> str:
            hot = [r for r in rows if r["kind"] == kind]
            return _table(
                ["matcher", "ns per delivered [worst round]", "list(t) ns per element", "ratio"],
                [
                    [
                        r["impl"],
                        f"{r['ns_per_delivered']:.2f} [{r['ns_per_delivered_max']:.2f}]",
                        f"{r['list_copy_ns']:.2f}",
                        f"{r['vs_list_copy']:.1f}x",
                    ]
                    for r in hot
                ],
            )

        exp = [r for r in rows if r["kind"] == "openamq"]
        hot_n = next((r["delivered"] for r in rows if r["kind"] == "hot lookup"), "?")
        fan_n = next((r["delivered"] for r in rows if r["kind"] == "fanout lookup"), "?")
        parts += [
            "## Fan-out: what each delivered subscriber costs (OpenAMQ experiment)",
            "",
            f"`lookup` of a hot topic with {hot_n} subscribers, per subscriber returned, "
            "beside `list(t)` of a tuple of the same objects (best of interleaved rounds).",
            "",
            per_delivered("hot lookup"),
            "",
            f"The experiment: batches of {OPENAMQ_BATCH:,}, collector on; `lookup_many` makes "
            "a list per message, `lookup_flat` one list per batch, `count_many` only matches. "
            "The paper: "
            f"{paper / 1e6:.2f}M matches/s at {OPENAMQ_PAPER_GHZ:g} GHz ({per_ghz}); "
            f"this machine: {f'{mhz / 1000:.2f} GHz' if mhz else '?'}.",
            "",
            _table(
                [
                    "form",
                    "matcher",
                    "messages",
                    "matches/s [min-max]",
                    "msg/s",
                    "x paper",
                    "x paper/GHz",
                ],
                [
                    [
                        r.get("form", "lookup_many"),
                        r["impl"],
                        f"{r['messages']:,}",
                        f"{r['matches_per_s'] / 1e6:.1f}M "
                        f"[{r['matches_per_s_min'] / 1e6:.1f}-{r['matches_per_s_max'] / 1e6:.1f}]",
                        f"{r['msg_per_s']:,.0f}",
                        f"{r['vs_paper']:.1f}",
                        f"{r['vs_paper'] * OPENAMQ_PAPER_GHZ / (mhz / 1000):.1f}" if mhz else "?",
                    ]
                    for r in exp
                ],
            ),
            "",
            f"The `fanout` workload: `lookup` of its hot topic ({fan_n} subscribers), per "
            "subscriber returned.",
            "",
            per_delivered("fanout lookup"),
            "",
        ]
    if "gil" in results:
        rows = [r for r in results["gil"] if r["batch"] >= 0]
        alone = {(r["impl"], r["n"], r["batch"]): r for r in rows if not r["busy"]}
        solo = next((r for r in results["gil"] if r["batch"] < 0), None)
        base = solo["busy_loops_per_s"] if solo else None
        parts += [
            "## The GIL convoy: topics/s alone and next to a CPU-bound Python thread",
            "",
            "The busy thread's own rate alone: "
            + (f"{base:,.0f} loops/s." if base else "?")
            + " Caller share: its rate beside the busy thread over its rate alone; busy share:"
            " the busy thread's rate over its rate alone. A sum near 1 means the two threads"
            " only took turns; above 1, they ran in parallel.",
            "",
            _table(
                [
                    "matcher",
                    "subscriptions",
                    "call",
                    "released alone",
                    "released beside busy",
                    "alone",
                    "beside busy",
                    "caller share",
                    "busy share",
                    "sum",
                ],
                [
                    _gil_row(r, alone[(r["impl"], r["n"], r["batch"])], base)
                    for r in rows
                    if r["busy"]
                ],
            ),
            "",
        ]
    return "\n".join(parts)


def _gil_row(r: dict[str, Any], alone: dict[str, Any], base: float | None) -> list[str]:
    caller = r["topics_per_s"] / alone["topics_per_s"]
    busy = r["busy_loops_per_s"] / base if base else float("nan")
    return [
        r["impl"],
        f"{r['n']:,}",
        r["call"],
        f"{alone['released']:.0%}",
        f"{r['released']:.0%}",
        f"{alone['topics_per_s']:,.0f}",
        f"{r['topics_per_s']:,.0f}",
        f"{caller:.2f}",
        f"{busy:.2f}",
        f"{caller + busy:.2f}",
    ]


#: The largest NaiveMatcher batch of the GIL runs: a scan of 10k patterns is 0.5 ms a topic.
NAIVE_BATCH_MAX = 256


_MARKERS = "osD^v<>pP*Xhd"


def _styles(impls: Sequence[str]) -> dict[str, dict[str, Any]]:
    """A colour, marker and line style per implementation, none repeated on one plot (the
    default cycle repeats colours after ten lines): topicmatch's matchers solid, peers dashed."""
    import matplotlib

    colours = matplotlib.colormaps["tab20"].colors
    ours = {cls.__name__ for cls in matcher_classes()}
    return {
        impl: {
            "color": colours[(2 * i) % 20 + (2 * i) // 20 % 2],
            "marker": _MARKERS[i % len(_MARKERS)],
            "linestyle": "-" if impl.split(".")[0].split()[0] in ours else "--",
        }
        for i, impl in enumerate(impls)
    }


def _lines(
    plt: Any,
    rows: list[dict[str, Any]],
    point: Callable[[dict[str, Any]], tuple[float, float]],
    size: tuple[float, float],
) -> tuple[Any, Any]:
    """A figure with one line per implementation in `rows`, each in its own style, through the
    points `point` takes from its rows, sorted by x."""
    fig, ax = plt.subplots(figsize=size)
    styles = _styles(list(dict.fromkeys(r["impl"] for r in rows)))
    for impl, style in styles.items():
        pts = sorted(point(r) for r in rows if r["impl"] == impl)
        ax.plot(*zip(*pts, strict=True), **style, label=impl)
    return fig, ax


def plots(results: dict[str, Any], out: Path) -> list[Path]:
    """PNG plots; needs matplotlib (the `bench` extra). Returns the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    if results.get("scaling"):
        fig, ax = _lines(plt, results["scaling"], lambda r: (r["n"], r["lookup_s"] * 1e6), (8, 5))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("subscriptions (mixed workload)")
        ax.set_ylabel("µs per lookup")
        ax.set_title("Lookup time against subscriptions")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        written.append(_save(fig, out / "lookup_vs_n.png"))
    if results.get("memory"):
        fig, ax = _lines(plt, results["memory"], lambda r: (r["n"], max(r["per_sub"], 0)), (8, 4.5))
        ax.set_xscale("log")
        ax.set_xlabel("subscriptions (mixed workload)")
        ax.set_ylabel("bytes per subscription (RSS growth)")
        ax.set_title("Memory after building, fresh process each")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        written.append(_save(fig, out / "memory.png"))
    if results.get("threads"):
        rows = results["threads"]
        n = max(r["n"] for r in rows)
        rows = [r for r in rows if r["n"] == n]
        fig, ax = plt.subplots(figsize=(8, 4.5))
        labels = [f"{r['impl']}\n{r['call']} {r['topics']}" for r in rows]
        ax.bar(range(len(rows)), [r["ratio"] for r in rows], color="tab:blue")
        ax.axhline(2.0, color="gray", lw=0.8, ls="--")
        ax.set_xticks(range(len(rows)), labels, rotation=90, fontsize=6)
        ax.set_ylabel("two threads' topics/s over one thread's")
        ax.set_title(f"Two Python threads against one, {n:,} subscriptions")
        ax.grid(True, axis="y", alpha=0.3)
        written.append(_save(fig, out / "threads.png"))
    if results.get("gil"):
        rows = [r for r in results["gil"] if r["batch"] > 0]
        n = max((r["n"] for r in rows), default=0)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for impl in dict.fromkeys(r["impl"] for r in rows):
            for busy in (False, True):
                pts = sorted(
                    (r["batch"], r["topics_per_s"])
                    for r in rows
                    if r["impl"] == impl and r["busy"] == busy and r["n"] == n
                )
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True),
                        marker="o",
                        linestyle="--" if busy else "-",
                        label=f"{impl} {'beside busy thread' if busy else 'alone'}",
                    )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("lookup_many batch size")
        ax.set_ylabel("topics/s")
        ax.set_title(f"GIL convoy, mixed {n:,}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        written.append(_save(fig, out / "gil_convoy.png"))
    return written


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


SECTIONS: dict[str, Callable[[Profile, Callable[[str], None]], list[dict[str, Any]]]] = {
    "headline": headline,
    "scaling": scaling,
    "workloads": other_workloads,
    "memory": memory,
    "threads": thread_scaling,
    "churn": churn,
    "gil": gil_convoy,
    "fanout": fanout_cost,
}


def run(
    profile_name: str = "full",
    out: str | Path = "bench-out",
    sections: Sequence[str] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Runs the benchmark sections, writes `results.json`, `BENCH.md` and the plots into `out`,
    and returns the results."""
    profile = PROFILES[profile_name]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"profile": profile.name}
    started = time.perf_counter()
    for name in sections or SECTIONS:
        log(f"[{time.perf_counter() - started:6.1f} s] {name}")
        results[name] = SECTIONS[name](profile, log)
    results["machine"] = machine()
    results["elapsed_s"] = time.perf_counter() - started
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "BENCH.md").write_text(markdown(results) + "\n")
    results["plots"] = [str(p) for p in plots(results, out)]
    if "headline" in results:
        log("")
        log(headline_text(results["headline"]))
    log(
        f"\nwrote {out / 'BENCH.md'}, {out / 'results.json'} and {len(results['plots'])} plots "
        f"in {results['elapsed_s']:.0f} s"
    )
    return results


def headline_text(rows: list[dict[str, Any]]) -> str:
    """The printed summary: each implementation's lookup time and its ratio to paho."""
    lines = [
        f"{rows[0]['workload']} subscriptions: µs per lookup, and paho MQTTMatcher's time / it"
    ]
    for r in rows:
        ratio = f"{_ratio(r.get('vs_paho')) or '-':>8}x"
        flag = "" if r.get("agrees", True) else "  (answers differ!)"
        lines.append(
            f"  {r['impl']:<28} {r['dialect']:<5} {r['lookup_s'] * 1e6:12.2f} {ratio}{flag}"
        )
    return "\n".join(lines)
