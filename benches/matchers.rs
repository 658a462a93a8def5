//! Criterion benches for every matcher (issue 7): subscribe, unsubscribe, lookup and msg/s
//! throughput on the named workloads, memory per subscription (a counting global allocator),
//! and 1, 2 and 4 threads at the seed's 50/50 and 90/10 read/write mixes.
//!
//! ```sh
//! cargo bench --bench matchers -- --quick           # a fast pass
//! TOPICMATCH_BENCH_FULL=1 cargo bench --bench matchers   # adds the 1M sizes (slow)
//! ```
//!
//! A matcher joins every bench with one line in `MATCHERS` (and in `CONCURRENT` for the
//! thread benches). Under `cargo test` (no `--bench` argument) criterion runs each bench once,
//! and the sizes shrink so that the test pass stays fast.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use topicmatch::{
    CSTrie, Dialect, InvertedBitmap, LazyDfa, LevelBitmap, Matcher, NaiveMatcher, Pattern, Topic,
    Trie,
};

#[path = "workload.rs"]
mod workload;

use workload::Workload;

/// Builds an empty matcher of one dialect.
type Make = fn(Dialect) -> Box<dyn Matcher>;

/// Every matcher, by name. One line adds one.
const MATCHERS: &[(&str, Make)] = &[
    ("NaiveMatcher", |d| Box::new(NaiveMatcher::new(d))),
    ("Trie", |d| Box::new(Trie::new(d))),
    ("CSTrie", |d| Box::new(CSTrie::new(d))),
    ("LazyDfa", |d| Box::new(LazyDfa::new(d))),
    ("InvertedBitmap", |d| Box::new(InvertedBitmap::new(d))),
    ("LevelBitmap", |d| Box::new(LevelBitmap::new(d))),
];

/// The matchers raced in the thread benches: the `RwLock` Trie, the lock-free CSTrie, the
/// LazyDfa (lock-free lookups over states built under a read lock), and the left-right
/// InvertedBitmap, whose readers never wait for a writer either.
const CONCURRENT: &[(&str, Make)] = &[
    ("Trie", |d| Box::new(Trie::new(d))),
    ("CSTrie", |d| Box::new(CSTrie::new(d))),
    ("LazyDfa", |d| Box::new(LazyDfa::new(d))),
    ("InvertedBitmap", |d| Box::new(InvertedBitmap::new(d))),
];

/// Matchers whose lookup scans every pattern: kept to the smaller sizes unless full.
const SCANS: &[&str] = &["NaiveMatcher"];

const DIALECT: Dialect = Dialect::Amqp;

// Counting allocator: the bytes live right now, for memory per subscription.

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract holds exactly as for `System`; the counter is only arithmetic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from this allocator (so from `System`) with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds the rest.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// How big: `cargo test` (tiny), a normal `cargo bench`, or `TOPICMATCH_BENCH_FULL=1`.
struct Sizes {
    mixed: Vec<usize>,
    ids: usize,
    fanout: usize,
    scan_max: usize,
    topics: usize,
    items: usize,
}

fn sizes() -> Sizes {
    let bench = std::env::args().any(|a| a == "--bench");
    let full = std::env::var("TOPICMATCH_BENCH_FULL").is_ok_and(|v| v == "1");
    if !bench {
        Sizes {
            mixed: vec![100],
            ids: 100,
            fanout: 100,
            scan_max: 100,
            topics: 20,
            items: 20,
        }
    } else if full {
        Sizes {
            mixed: vec![1_000, 10_000, 100_000, 1_000_000],
            ids: 1_000_000,
            fanout: 1_000_000,
            scan_max: 1_000_000,
            topics: 1000,
            items: 1000,
        }
    } else {
        Sizes {
            mixed: vec![1_000, 10_000, 100_000],
            ids: 100_000,
            fanout: 100_000,
            scan_max: 10_000,
            topics: 1000,
            items: 1000,
        }
    }
}

fn parse_patterns(d: Dialect, subs: &[(String, u32)]) -> Vec<(Pattern, u32)> {
    subs.iter()
        .map(|(p, id)| (d.parse_pattern(p).expect("workload pattern"), *id))
        .collect()
}

fn parse_topics(d: Dialect, topics: &[String]) -> Vec<Topic<'_>> {
    topics
        .iter()
        .map(|t| d.parse_topic(t).expect("workload topic"))
        .collect()
}

fn build(make: Make, d: Dialect, subs: &[(Pattern, u32)]) -> Box<dyn Matcher> {
    let m = make(d);
    for (p, id) in subs {
        m.subscribe(p, *id);
    }
    m
}

/// The seed's micro-benchmarks: subscribe, unsubscribe and lookup, with the matcher empty
/// ("cold") and holding 1,000 random 5-word subscriptions ("hot").
fn seed_ops(c: &mut Criterion) {
    let s = sizes();
    let d = DIALECT;
    let hot_n = if s.items < 100 { 20 } else { 1000 };
    let hot = workload::seed(hot_n, 2, d, 0);
    let hot = parse_patterns(d, &hot.subscriptions);
    let probe = d.parse_pattern(&workload::seed_pattern(d)).unwrap();
    let topic_text = workload::seed_topic(d);
    let topic = d.parse_topic(&topic_text).unwrap();
    // Fresh 5-word patterns (a wildcard in the second word, as the probe) for subscribe and
    // unsubscribe: each timed batch adds or removes distinct pairs.
    let mut rng = workload::Rng::new(7);
    let fresh: Vec<Pattern> = (0..10_000)
        .map(|_| {
            let t = workload::random_word5(d, &mut rng);
            let mut words: Vec<&str> = t.split('.').collect();
            words[1] = d.one_word();
            d.parse_pattern(&words.join(".")).unwrap()
        })
        .collect();
    let mut g = c.benchmark_group("seed");
    for &(name, make) in MATCHERS {
        for (state, base) in [("cold", &hot[..0]), ("hot", &hot[..])] {
            g.bench_function(BenchmarkId::new(format!("subscribe/{state}"), name), |b| {
                b.iter_custom(|iters| {
                    timed_batches(
                        iters,
                        fresh.len(),
                        make,
                        d,
                        base,
                        |m, k| {
                            black_box(m.subscribe(&fresh[k], 1_000_000));
                        },
                        |_, _| {},
                    )
                })
            });
            g.bench_function(
                BenchmarkId::new(format!("unsubscribe/{state}"), name),
                |b| {
                    b.iter_custom(|iters| {
                        timed_batches(
                            iters,
                            fresh.len(),
                            make,
                            d,
                            base,
                            |m, k| {
                                black_box(m.unsubscribe(&fresh[k], 1_000_000));
                            },
                            |m, k| {
                                m.subscribe(&fresh[k], 1_000_000);
                            },
                        )
                    })
                },
            );
            let m = build(make, d, base);
            m.subscribe(&probe, 0);
            let mut out = Vec::new();
            g.bench_function(BenchmarkId::new(format!("lookup/{state}"), name), |b| {
                b.iter(|| {
                    out.clear();
                    m.lookup_into(black_box(&topic), &mut out);
                    black_box(out.len())
                })
            });
        }
    }
    g.finish();
}

/// Times `op(m, k)` for `iters` operations on fresh matchers holding `base`, in batches of at
/// most `batch`; `prepare(m, k)` runs untimed before each batch for every `k` of it.
fn timed_batches(
    iters: u64,
    batch: usize,
    make: Make,
    d: Dialect,
    base: &[(Pattern, u32)],
    mut op: impl FnMut(&dyn Matcher, usize),
    mut prepare: impl FnMut(&dyn Matcher, usize),
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters as usize;
    while left > 0 {
        let k = left.min(batch);
        let m = build(make, d, base);
        for i in 0..k {
            prepare(&*m, i);
        }
        let start = Instant::now();
        for i in 0..k {
            op(&*m, i);
        }
        total += start.elapsed();
        left -= k;
        drop(m);
    }
    total
}

/// Lookup throughput in messages per second on each workload and size, with the topics
/// repeated (one topic over and over: caches and branch predictors warm) and distinct (the
/// workload's topics in turn).
fn throughput(c: &mut Criterion) {
    let s = sizes();
    let d = DIALECT;
    let mut cases: Vec<(String, Workload)> = vec![(
        "seed-throughput".into(),
        workload::seed_throughput(1000, s.topics, d, 0),
    )];
    for &n in &s.mixed {
        cases.push((format!("mixed-{n}"), workload::mixed(n, s.topics, d, 0)));
    }
    cases.push((
        format!("ids-{}", s.ids),
        workload::ids(s.ids, s.topics, d, 0),
    ));
    cases.push((
        format!("fanout-{}", s.fanout),
        workload::fanout(s.fanout, 4, d, 0),
    ));
    cases.push((
        "openamq-2000".into(),
        workload::openamq(2000, s.topics, d, 0),
    ));
    let mut g = c.benchmark_group("throughput");
    for (label, w) in &cases {
        let subs = parse_patterns(d, &w.subscriptions);
        let topics = parse_topics(d, &w.topics);
        for &(name, make) in MATCHERS {
            if SCANS.contains(&name) && subs.len() > s.scan_max {
                continue;
            }
            let m = build(make, d, &subs);
            let mut out = Vec::new();
            g.throughput(Throughput::Elements(topics.len() as u64));
            g.bench_function(BenchmarkId::new(format!("{label}/distinct"), name), |b| {
                b.iter(|| {
                    let mut hits = 0;
                    for t in &topics {
                        out.clear();
                        m.lookup_into(t, &mut out);
                        hits += out.len();
                    }
                    black_box(hits)
                })
            });
            g.throughput(Throughput::Elements(1));
            g.bench_function(BenchmarkId::new(format!("{label}/repeated"), name), |b| {
                b.iter(|| {
                    out.clear();
                    m.lookup_into(black_box(&topics[0]), &mut out);
                    black_box(out.len())
                })
            });
        }
    }
    g.finish();
}

/// The seed's concurrency runs: each of `threads` threads walks the `j%10.j%50.j` keys against
/// the hot matcher; a key is a write (subscribe, then unsubscribe on the next write) at the
/// given share and a lookup otherwise. The seed gave whole goroutines the writer role; here
/// every thread interleaves, so the mix holds at 1, 2 and 4 threads alike.
fn concurrency(c: &mut Criterion) {
    let s = sizes();
    let d = DIALECT;
    let hot = workload::seed(if s.items < 100 { 20 } else { 1000 }, 2, d, 0);
    let hot = parse_patterns(d, &hot.subscriptions);
    let keys_text = workload::seed_items(s.items, d);
    let keys: Vec<Pattern> = keys_text
        .iter()
        .map(|k| d.parse_pattern(k).unwrap())
        .collect();
    let topics = parse_topics(d, &keys_text);
    let mut g = c.benchmark_group("concurrency");
    for (mix, writes) in [("50-50", 5), ("90-10", 1)] {
        for threads in [1usize, 2, 4] {
            g.throughput(Throughput::Elements((threads * keys.len()) as u64));
            for &(name, make) in CONCURRENT {
                let m = build(make, d, &hot);
                g.bench_function(BenchmarkId::new(format!("{mix}/{threads}"), name), |b| {
                    b.iter(|| run_mix(&*m, &keys, &topics, threads, writes))
                });
            }
        }
    }
    g.finish();
}

/// One round of a read/write mix: `writes` in 10 operations write.
fn run_mix(m: &dyn Matcher, keys: &[Pattern], topics: &[Topic<'_>], threads: usize, writes: usize) {
    std::thread::scope(|scope| {
        for t in 0..threads {
            scope.spawn(move || {
                let id = 2_000_000 + t as u32;
                let mut out = Vec::new();
                let mut held: Option<usize> = None;
                for j in 0..keys.len() {
                    if (j * writes) % 10 < writes {
                        match held.take() {
                            None => {
                                m.subscribe(&keys[j], id);
                                held = Some(j);
                            }
                            Some(k) => {
                                m.unsubscribe(&keys[k], id);
                            }
                        }
                    } else {
                        out.clear();
                        m.lookup_into(&topics[j], &mut out);
                        black_box(out.len());
                    }
                }
                if let Some(k) = held {
                    m.unsubscribe(&keys[k], id);
                }
            });
        }
    });
}

/// Live bytes: the heap's, less the chunks the CSTrie's node pool reserves (8 MiB at a time,
/// kept for later nodes), plus the pool's nodes in use.
fn live() -> isize {
    let nodes = topicmatch::cstrie::node_memory();
    LIVE.load(Ordering::Relaxed) as isize - nodes.reserved as isize + nodes.in_use
}

/// Frees what crossbeam-epoch holds retired (the CSTrie's replaced nodes), so that a reading
/// counts what a matcher holds and not the garbage of the one measured before it: each flush
/// tries to advance the epoch and frees what is two epochs old.
fn collect_garbage() {
    for _ in 0..2048 {
        crossbeam_epoch::pin().flush();
    }
}

/// Prints the bytes each matcher holds per subscription on each workload: the growth of live
/// bytes while subscribing pre-parsed patterns (the patterns themselves not counted).
fn memory_table() {
    let s = sizes();
    let d = DIALECT;
    let mut cases: Vec<(String, Workload)> =
        vec![("seed-1000".into(), workload::seed(1000, 0, d, 0))];
    for &n in &s.mixed {
        cases.push((format!("mixed-{n}"), workload::mixed(n, 0, d, 0)));
    }
    cases.push((format!("ids-{}", s.ids), workload::ids(s.ids, 0, d, 0)));
    cases.push((
        format!("fanout-{}", s.fanout),
        workload::fanout(s.fanout, 0, d, 0),
    ));
    println!("\nmemory per subscription (live bytes after subscribing / subscriptions)");
    print!("{:<16}", "workload");
    for &(name, _) in MATCHERS {
        print!("{name:>14}");
    }
    println!();
    for (label, w) in &cases {
        let subs = parse_patterns(d, &w.subscriptions);
        print!("{label:<16}");
        for &(_, make) in MATCHERS {
            collect_garbage();
            let before = live();
            let m = build(make, d, &subs);
            collect_garbage();
            let after = live();
            print!(
                "{:>14.1}",
                (after - before).max(0) as f64 / subs.len() as f64
            );
            drop(m);
        }
        println!();
    }
    println!();
}

fn main() {
    memory_table();
    let mut c = Criterion::default().configure_from_args();
    seed_ops(&mut c);
    throughput(&mut c);
    concurrency(&mut c);
    c.final_summary();
}
