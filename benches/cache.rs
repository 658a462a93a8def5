//! The result cache (`Cached`) against the bare matcher, for `CSTrie` and `Trie`:
//!
//! - `throughput`: fast-topic-matching's msg/s workload (1,000 three-level digit patterns,
//!   12.9 % with `*`, 100,000 messages drawn from them): few distinct topics, a hot cache;
//! - `ids`: a wide level, `users.<id>.events` over 1,000,000 subscribed ids, 100,000 topics
//!   nearly all distinct: a cold cache, where admission must turn it off;
//! - `half`: the throughput workload with every other message a topic never seen before, so
//!   at most half the lookups hit;
//! - `churn`: the throughput workload with one subscribe or unsubscribe every 100 lookups,
//!   where the global generation invalidates every entry at each write.
//!
//! Each case runs bare (`uncached`), with the default cache (`cached`), and on all but
//! `throughput` also with admission off (`cached-always`), so the ratio admission buys shows.
//! After the timings it prints each cached matcher's `cache_stats` (hit rate, bypasses), then
//! the ratios again measured the robust way for a shared machine: the variants of a case take
//! turns on each slice of [`SLICE`] topics, round after round, two at a time (the bare one and
//! one cached: a third in the rotation would warm or trash the CPU caches for its neighbour,
//! which showed as a 1.46x that was not the cache's), and each keeps its fastest
//! time per slice ([`INTERLEAVED_ROUNDS`] rounds); load that comes and goes then slows both
//! alike. `TOPICMATCH_CACHE_BENCH=throughput,churn` runs only the cases named.
//! `cargo bench --bench cache`; under `cargo test` it runs once on small sizes.

#[path = "workload.rs"]
mod workload;

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput};
use topicmatch::cache::{CacheStats, DEFAULT_CACHE_SIZE};
use topicmatch::reference::pattern_matches;
use topicmatch::{CSTrie, Cached, Dialect, Matcher, Pattern, Topic, Trie};

const D: Dialect = Dialect::Amqp;

/// Rounds of the interleaved comparison.
const INTERLEAVED_ROUNDS: usize = 15;

/// Topics per slice of the interleaved comparison (a multiple of [`CHURN_EVERY`]).
const SLICE: usize = 5_000;

/// Lookups between two writes in the churn case.
const CHURN_EVERY: usize = 100;

#[derive(Clone, Copy)]
enum Mode {
    Uncached,
    Cached,
    CachedAlways,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Uncached => "uncached",
            Mode::Cached => "cached",
            Mode::CachedAlways => "cached-always",
        }
    }
}

/// A matcher under test and, when cached, a way to read its counters.
struct Subject {
    m: Arc<dyn Matcher>,
    stats: Option<Box<dyn Fn() -> CacheStats>>,
}

/// `inner` bare or behind a fresh cache. The cached and the bare subjects of one case share
/// one inner matcher, so they differ only by the cache (a million-pattern trie built twice
/// would also differ in where its nodes landed in memory). Writes go through the subject.
fn make<M: Matcher + 'static>(inner: &Arc<M>, mode: Mode) -> Subject {
    let inner = Arc::clone(inner);
    let cached = match mode {
        Mode::Uncached => {
            return Subject {
                m: inner,
                stats: None,
            }
        }
        Mode::Cached => Arc::new(Cached::new(inner, DEFAULT_CACHE_SIZE)),
        Mode::CachedAlways => Arc::new(Cached::new(inner, DEFAULT_CACHE_SIZE).without_admission()),
    };
    let c = Arc::clone(&cached);
    Subject {
        m: cached,
        stats: Some(Box::new(move || c.cache_stats())),
    }
}

/// Each matcher kind, filled with `subs`, bare and cached as `modes` say.
fn subjects(subs: &[(Pattern, u32)], modes: &[Mode]) -> Vec<(&'static str, Mode, Subject)> {
    fn filled<M: Matcher>(m: M, subs: &[(Pattern, u32)]) -> Arc<M> {
        for (p, id) in subs {
            m.subscribe(p, *id);
        }
        Arc::new(m)
    }
    let cstrie = filled(CSTrie::new(D), subs);
    let trie = filled(Trie::new(D), subs);
    let mut out = Vec::new();
    for &mode in modes {
        out.push(("CSTrie", mode, make(&cstrie, mode)));
    }
    for &mode in modes {
        out.push(("Trie", mode, make(&trie, mode)));
    }
    out
}

/// Whether the case `name` runs (`TOPICMATCH_CACHE_BENCH`, a comma-separated list; all if
/// unset).
fn selected(name: &str) -> bool {
    std::env::var("TOPICMATCH_CACHE_BENCH").map_or(true, |v| v.split(',').any(|c| c == name))
}

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn parse(w: &workload::Workload) -> (Vec<(Pattern, u32)>, Vec<Topic<'_>>) {
    let subs = w
        .subscriptions
        .iter()
        .map(|(p, id)| (D.parse_pattern(p).unwrap(), *id))
        .collect();
    let topics = w.topics.iter().map(|t| D.parse_topic(t).unwrap()).collect();
    (subs, topics)
}

/// One pass over `topics`, with a write every [`CHURN_EVERY`] lookups if `churn` is set.
fn pass(
    m: &dyn Matcher,
    topics: &[Topic<'_>],
    churn: Option<&Pattern>,
    out: &mut Vec<u32>,
) -> usize {
    let mut hits = 0;
    for (i, t) in topics.iter().enumerate() {
        if let Some(p) = churn {
            if i % CHURN_EVERY == 0 {
                if (i / CHURN_EVERY) % 2 == 0 {
                    m.subscribe(p, 5000);
                } else {
                    m.unsubscribe(p, 5000);
                }
            }
        }
        out.clear();
        m.lookup_into(t, out);
        hits += out.len();
    }
    if let Some(p) = churn {
        m.unsubscribe(p, 5000);
    }
    hits
}

/// For each trie, the first variant of `all` (the bare trie) raced against each other variant
/// of it by [`interleaved`], one report line per pair.
fn interleaved_pairs(
    label: &str,
    all: &[(&'static str, Mode, Subject)],
    topics: &[Topic<'_>],
    churn: Option<&Pattern>,
) -> Vec<String> {
    let mut lines = Vec::new();
    for kind in ["CSTrie", "Trie"] {
        let variants: Vec<(Mode, &Subject)> = all
            .iter()
            .filter(|(k, _, _)| *k == kind)
            .map(|(_, mode, s)| (*mode, s))
            .collect();
        for other in &variants[1..] {
            lines.push(interleaved(
                label,
                kind,
                &[variants[0], *other],
                topics,
                churn,
            ));
        }
    }
    lines
}

/// The variants of one matcher kind take turns; returns a line with each one's best pass in
/// ns per lookup and its ratio to the first (uncached).
fn interleaved(
    label: &str,
    kind: &str,
    variants: &[(Mode, &Subject)],
    topics: &[Topic<'_>],
    churn: Option<&Pattern>,
) -> String {
    // Short slices of the topics, each timed for every variant in turn: a burst of load from
    // elsewhere spoils one slice of one round, not a whole pass, and the best of the rounds is
    // kept per slice.
    let slices: Vec<&[Topic<'_>]> = topics.chunks(SLICE).collect();
    let mut best = vec![vec![f64::INFINITY; slices.len()]; variants.len()];
    let mut out = Vec::new();
    for round in 0..INTERLEAVED_ROUNDS {
        for (c, slice) in slices.iter().enumerate() {
            for k in 0..variants.len() {
                // Alternate the order too, so that neither always runs first.
                let v = if (round + c) % 2 == 0 {
                    k
                } else {
                    variants.len() - 1 - k
                };
                let start = std::time::Instant::now();
                black_box(pass(&*variants[v].1.m, slice, churn, &mut out));
                best[v][c] = best[v][c].min(start.elapsed().as_nanos() as f64);
            }
        }
    }
    let best: Vec<f64> = best
        .iter()
        .map(|per_slice| per_slice.iter().sum::<f64>() / topics.len() as f64)
        .collect();
    let cells: Vec<String> = variants
        .iter()
        .zip(&best)
        .map(|((mode, _), ns)| format!("{} {ns:.0} ns ({:.2}x)", mode.name(), ns / best[0]))
        .collect();
    format!("{label}/{kind}: {}", cells.join(", "))
}

/// Between hot and cold: the throughput workload's messages at even positions, topics never
/// seen before at odd ones (`d.d.<i>`, matched by the patterns with `*` last), so at best half
/// the lookups can hit: the hit rate where admission has to decide.
fn half(n_topics: usize) -> workload::Workload {
    let mut w = workload::seed_throughput(1000, n_topics, D, 0);
    for (i, t) in w.topics.iter_mut().enumerate() {
        if i % 2 == 1 {
            *t = format!("{}.{}.{i}", i % 10, (i / 10) % 10);
        }
    }
    w
}

/// A long cycle: `n_distinct` topics looked up in turn, over and over (the throughput
/// workload's patterns; topics `d.d.<i>`). More distinct topics than an admission window, so
/// the first pass looks cold; fewer than the cache holds, so a warm cache hits every lookup.
fn cycle_warmup(report: &mut Report) {
    if !selected("cycle") {
        return;
    }
    let n_distinct = 10_000;
    let passes = 12;
    let w = workload::seed_throughput(1000, 1, D, 0);
    let (subs, _) = parse(&w);
    let texts: Vec<String> = (0..n_distinct)
        .map(|i| format!("{}.{}.{i}", i % 10, (i / 10) % 10))
        .collect();
    let topics: Vec<Topic<'_>> = texts.iter().map(|t| D.parse_topic(t).unwrap()).collect();
    for (kind, _, subject) in subjects(&subs, &[Mode::Cached]) {
        let stats = subject.stats.as_ref().expect("cached");
        let mut rates = Vec::new();
        let mut out = Vec::new();
        for _ in 0..passes {
            let before = stats();
            for t in &topics {
                out.clear();
                subject.m.lookup_into(t, &mut out);
            }
            let after = stats();
            let hits = after.hits - before.hits;
            rates.push(format!("{:.0}", 100.0 * hits as f64 / n_distinct as f64));
        }
        report.push(format!(
            "cycle of {n_distinct} topics, fresh cache/{kind}: hit rate per pass (%): {}",
            rates.join(" ")
        ));
    }
}

/// What the cached matchers' counters said, printed after the run.
type Report = Vec<String>;

fn stats_line(label: &str, subject: &Subject) -> Option<String> {
    let s = subject.stats.as_ref()?();
    let lookups = (s.hits + s.misses).max(1);
    Some(format!(
        "{label}: hit rate {:.1} %, bypassed {:.1} %, evictions {}, {} entries, {} KiB, admitting {}",
        100.0 * s.hits as f64 / lookups as f64,
        100.0 * s.bypassed as f64 / lookups as f64,
        s.evictions,
        s.topics,
        s.bytes / 1024,
        s.admitting
    ))
}

fn lookups(c: &mut Criterion, report: &mut Report) {
    let big = bench_mode();
    let n_topics = if big { 100_000 } else { 200 };
    let n_ids = if big { 1_000_000 } else { 1_000 };
    let cases = [
        (
            "throughput",
            workload::seed_throughput(1000, n_topics, D, 0),
        ),
        ("ids", workload::ids(n_ids, n_topics, D, 0)),
        ("half", half(n_topics)),
    ];
    let mut g = c.benchmark_group("cache");
    for (label, w) in &cases {
        if !selected(label) {
            continue;
        }
        let (subs, topics) = parse(w);
        let distinct: std::collections::HashSet<&str> = topics.iter().map(|t| t.text()).collect();
        report.push(format!(
            "{label}: {} subscriptions, {} topics, {} distinct",
            subs.len(),
            topics.len(),
            distinct.len()
        ));
        let modes: &[Mode] = if *label != "throughput" {
            &[Mode::Uncached, Mode::Cached, Mode::CachedAlways]
        } else {
            &[Mode::Uncached, Mode::Cached]
        };
        // A pass over the ids workload takes a quarter of a second: ten samples are enough.
        g.sample_size(if *label == "ids" { 10 } else { 100 });
        let all = subjects(&subs, modes);
        for (kind, mode, subject) in &all {
            let (kind, mode) = (*kind, *mode);
            let m = &subject.m;
            let mut out = Vec::new();
            g.throughput(Throughput::Elements(topics.len() as u64));
            g.bench_function(
                BenchmarkId::new(format!("{label}/{}", mode.name()), kind),
                |b| {
                    b.iter(|| {
                        let mut hits = 0;
                        for t in &topics {
                            out.clear();
                            m.lookup_into(t, &mut out);
                            hits += out.len();
                        }
                        black_box(hits)
                    })
                },
            );
            if let Some(line) = stats_line(&format!("{label}/{}/{kind}", mode.name()), subject) {
                report.push(line);
            }
        }
        report.extend(interleaved_pairs(label, &all, &topics, None));
    }
    g.finish();
}

/// The throughput workload with a write every [`CHURN_EVERY`] lookups: a pattern no topic
/// matches, subscribed and unsubscribed in turn, so results never change but every write
/// still invalidates every entry.
fn churn(c: &mut Criterion, report: &mut Report) {
    if !selected("churn") {
        return;
    }
    let n_topics = if bench_mode() { 100_000 } else { 200 };
    let w = workload::seed_throughput(1000, n_topics, D, 0);
    let (subs, topics) = parse(&w);
    let toggled = D.parse_pattern("x.y.z").unwrap();
    let mut g = c.benchmark_group("cache");
    g.sample_size(100);
    let modes = [Mode::Uncached, Mode::Cached, Mode::CachedAlways];
    let all = subjects(&subs, &modes);
    for (kind, mode, subject) in &all {
        let (kind, mode) = (*kind, *mode);
        let m = &subject.m;
        let mut out = Vec::new();
        let mut on = false;
        g.throughput(Throughput::Elements(topics.len() as u64));
        g.bench_function(
            BenchmarkId::new(format!("churn/{}", mode.name()), kind),
            |b| {
                b.iter(|| {
                    let mut hits = 0;
                    for (i, t) in topics.iter().enumerate() {
                        if i % CHURN_EVERY == 0 {
                            on = !on;
                            if on {
                                m.subscribe(&toggled, 5000);
                            } else {
                                m.unsubscribe(&toggled, 5000);
                            }
                        }
                        out.clear();
                        m.lookup_into(t, &mut out);
                        hits += out.len();
                    }
                    black_box(hits)
                })
            },
        );
        if let Some(line) = stats_line(&format!("churn/{}/{kind}", mode.name()), subject) {
            report.push(line);
        }
    }
    report.extend(interleaved_pairs("churn", &all, &topics, Some(&toggled)));
    report.push(patch_scan(&topics));
    g.finish();
}

/// What NATS's alternative would cost here: on each subscribe, `addToCache` tests the new
/// pattern against every cached topic and patches the results it matches (on unsubscribe,
/// `removeFromCache` does the same), so entries survive writes. This times that scan alone,
/// with the topics already parsed (a lower bound: the entries hold bytes), for the churn
/// case's pattern and for a wildcard one, best of [`INTERLEAVED_ROUNDS`].
fn patch_scan(topics: &[Topic<'_>]) -> String {
    let mut seen = std::collections::HashSet::new();
    let cached: Vec<&Topic<'_>> = topics.iter().filter(|t| seen.insert(t.text())).collect();
    let mut cells = Vec::new();
    for text in ["x.y.z", "*.5.*"] {
        let p = D.parse_pattern(text).unwrap();
        let mut best = f64::INFINITY;
        for _ in 0..INTERLEAVED_ROUNDS {
            let start = std::time::Instant::now();
            let n = cached
                .iter()
                .filter(|t| pattern_matches(&p, black_box(t)))
                .count();
            black_box(n);
            best = best.min(start.elapsed().as_nanos() as f64);
        }
        cells.push(format!("{text} {:.1} µs", best / 1000.0));
    }
    format!(
        "patching scan per write over {} cached topics: {}",
        cached.len(),
        cells.join(", ")
    )
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let mut report = Report::new();
    lookups(&mut c, &mut report);
    churn(&mut c, &mut report);
    cycle_warmup(&mut report);
    c.final_summary();
    for line in report {
        println!("{line}");
    }
}
