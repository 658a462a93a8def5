//! Criterion benches of the roaring-bitmap matchers at 1,000 and 100,000 subscriptions: lookup
//! of cached and of first-seen topics, subscribe, unsubscribe, and memory per subscription
//! (measured with a counting global allocator and printed before the benches run).
//!
//! Workload (MQTT): topics `r<0..10>/k<0..20>/d<0..1000>/m<0..10>`; patterns 60% literal
//! topics, 20% `r/k/+/m` (wildcard over the 1,000 devices), 15% `r/k/#`, 5% `r/+/d/#`;
//! subscribers drawn from 10,000. Headers: 20 names, 50 values, 1 to 4 criteria per
//! subscription (10% presence-only), 70% `all`; messages carry 8 headers.
//!
//! `cargo bench --bench bitmap -- --quick` for a fast pass.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use topicmatch::bitmap::Criterion as HeaderCriterion;
use topicmatch::{Dialect, HeadersMatcher, InvertedBitmap, LevelBitmap, MatchMode, Matcher};

/// Counts the bytes currently allocated by the whole process.
struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so it keeps
// `System`'s guarantees; the counter is only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we pass on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc`/`realloc` above with this layout (caller's contract).
        unsafe { System.dealloc(ptr, layout) };
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract, which we pass on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
            ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocated() -> usize {
    ALLOCATED.load(Ordering::Relaxed)
}

const SIZES: [usize; 2] = [1_000, 100_000];
const SUBSCRIBERS: u64 = 10_000;
const CACHED_TOPICS: usize = 1_000;

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn topic(rng: &mut Rng) -> String {
    format!(
        "r{}/k{}/d{}/m{}",
        rng.below(10),
        rng.below(20),
        rng.below(1000),
        rng.below(10)
    )
}

fn pattern(rng: &mut Rng) -> String {
    let (r, k, d, m) = (rng.below(10), rng.below(20), rng.below(1000), rng.below(10));
    match rng.below(100) {
        0..60 => format!("r{r}/k{k}/d{d}/m{m}"),
        60..80 => format!("r{r}/k{k}/+/m{m}"),
        80..95 => format!("r{r}/k{k}/#"),
        _ => format!("r{r}/+/d{d}/#"),
    }
}

fn pairs(n: usize) -> Vec<(String, u32)> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|_| (pattern(&mut rng), rng.below(SUBSCRIBERS) as u32))
        .collect()
}

fn fill(m: &dyn Matcher, pairs: &[(String, u32)]) {
    for (p, s) in pairs {
        m.subscribe_str(p, *s).unwrap();
    }
}

fn cached_topics() -> Vec<String> {
    let mut rng = Rng(0x1234_5678);
    (0..CACHED_TOPICS).map(|_| topic(&mut rng)).collect()
}

/// Times subscribing a pattern never seen (unsubscribing it again, untimed).
fn time_subscribe(m: &dyn Matcher, iters: u64, counter: &mut u64) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        *counter += 1;
        let p = format!("u{counter}/k1/+/m1");
        let start = Instant::now();
        black_box(m.subscribe_str(&p, 1).unwrap());
        total += start.elapsed();
        m.unsubscribe_str(&p, 1).unwrap();
    }
    total
}

/// Times unsubscribing a pattern's last subscriber (subscribing it first, untimed).
fn time_unsubscribe(m: &dyn Matcher, iters: u64, counter: &mut u64) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        *counter += 1;
        let p = format!("u{counter}/k1/+/m1");
        m.subscribe_str(&p, 1).unwrap();
        let start = Instant::now();
        black_box(m.unsubscribe_str(&p, 1).unwrap());
        total += start.elapsed();
    }
    total
}

fn topic_matchers(c: &mut Criterion) {
    type Make = fn() -> Box<dyn Matcher>;
    let makers: [(&str, Make); 2] = [
        ("InvertedBitmap", || {
            Box::new(InvertedBitmap::new(Dialect::Mqtt))
        }),
        ("LevelBitmap", || Box::new(LevelBitmap::new(Dialect::Mqtt))),
    ];
    let warm = cached_topics();
    for (name, make) in makers {
        let mut group = c.benchmark_group(name);
        for n in SIZES {
            let m = make();
            fill(m.as_ref(), &pairs(n));
            for t in &warm {
                m.lookup_str(t).unwrap();
            }
            let mut i = 0;
            group.bench_function(BenchmarkId::new("lookup_cached", n), |b| {
                b.iter(|| {
                    i = (i + 1) % warm.len();
                    black_box(m.lookup_str(&warm[i]).unwrap())
                })
            });
            let mut counter = 0;
            group.bench_function(BenchmarkId::new("subscribe", n), |b| {
                b.iter_custom(|iters| time_subscribe(m.as_ref(), iters, &mut counter))
            });
            group.bench_function(BenchmarkId::new("unsubscribe", n), |b| {
                b.iter_custom(|iters| time_unsubscribe(m.as_ref(), iters, &mut counter))
            });
            // Last: it fills the cache with topics nobody asks for again.
            let mut fresh = 0u64;
            group.bench_function(BenchmarkId::new("lookup_first_seen", n), |b| {
                b.iter(|| {
                    fresh += 1;
                    let t = format!("r{}/k{}/new{fresh}/m{}", fresh % 10, fresh % 20, fresh % 7);
                    black_box(m.lookup_str(&t).unwrap())
                })
            });
        }
        group.finish();
    }
}

fn header_subscriptions(n: usize) -> Vec<(Vec<HeaderCriterion>, u32, MatchMode)> {
    let mut rng = Rng(0x0dd_ba11);
    (0..n)
        .map(|_| {
            let k = 1 + rng.below(4);
            let criteria = (0..k)
                .map(|_| {
                    let name = format!("h{}", rng.below(20));
                    let value = (rng.below(10) != 0).then(|| format!("v{}", rng.below(50)));
                    (name, value)
                })
                .collect();
            let mode = if rng.below(10) < 7 {
                MatchMode::All
            } else {
                MatchMode::Any
            };
            (criteria, rng.below(SUBSCRIBERS) as u32, mode)
        })
        .collect()
}

fn messages() -> Vec<Vec<(String, String)>> {
    let mut rng = Rng(0xfeed);
    (0..1000)
        .map(|_| {
            (0..8)
                .map(|_| (format!("h{}", rng.below(20)), format!("v{}", rng.below(50))))
                .collect()
        })
        .collect()
}

fn headers(c: &mut Criterion) {
    let msgs = messages();
    let mut group = c.benchmark_group("HeadersMatcher");
    for n in SIZES {
        let m = HeadersMatcher::new();
        for (criteria, id, mode) in header_subscriptions(n) {
            m.subscribe(&criteria, id, mode);
        }
        let mut i = 0;
        group.bench_function(BenchmarkId::new("lookup", n), |b| {
            b.iter(|| {
                i = (i + 1) % msgs.len();
                let h: Vec<(&str, &str)> = msgs[i]
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                black_box(m.lookup(&h))
            })
        });
        let mut counter = 0u64;
        let crit = |counter: &mut u64| {
            *counter += 1;
            vec![
                ("h1".to_string(), Some(format!("new{counter}"))),
                ("h2".to_string(), None),
            ]
        };
        group.bench_function(BenchmarkId::new("subscribe", n), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let c = crit(&mut counter);
                    let start = Instant::now();
                    black_box(m.subscribe(&c, 1, MatchMode::All));
                    total += start.elapsed();
                    m.unsubscribe(&c, 1, MatchMode::All);
                }
                total
            })
        });
        group.bench_function(BenchmarkId::new("unsubscribe", n), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let c = crit(&mut counter);
                    m.subscribe(&c, 1, MatchMode::All);
                    let start = Instant::now();
                    black_box(m.unsubscribe(&c, 1, MatchMode::All));
                    total += start.elapsed();
                }
                total
            })
        });
    }
    group.finish();
}

/// Bytes per subscription of a structure built by `build`, which returns it to keep it alive.
fn per_subscription<T>(n: usize, build: impl FnOnce() -> T) -> (f64, T) {
    let before = allocated();
    let value = build();
    let after = allocated();
    ((after.saturating_sub(before)) as f64 / n as f64, value)
}

fn memory(_: &mut Criterion) {
    println!("memory per subscription (bytes; left-right keeps two copies of each table):");
    for n in SIZES {
        let p = pairs(n);
        let (inv, m) = per_subscription(n, || {
            let m = InvertedBitmap::new(Dialect::Mqtt);
            fill(&m, &p);
            m
        });
        let (cache, _) = per_subscription(n, || {
            for t in cached_topics() {
                m.lookup_str(&t).unwrap();
            }
        });
        drop(m);
        let (level, m) = per_subscription(n, || {
            let m = LevelBitmap::new(Dialect::Mqtt);
            fill(&m, &p);
            m
        });
        drop(m);
        let subs = header_subscriptions(n);
        let (hdr, m) = per_subscription(n, || {
            let m = HeadersMatcher::new();
            for (criteria, id, mode) in &subs {
                m.subscribe(criteria, *id, *mode);
            }
            m
        });
        drop(m);
        println!(
            "  n={n:>7}: InvertedBitmap {inv:.0} (+ {cache:.0} for {CACHED_TOPICS} cached topics), \
             LevelBitmap {level:.0}, HeadersMatcher {hdr:.0}"
        );
    }
}

criterion_group!(benches, memory, topic_matchers, headers);
criterion_main!(benches);
