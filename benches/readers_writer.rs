//! Readers beside a writer, with threads that live for the whole measurement.
//!
//! The workload: the seed's hot structure (1,000 random five-word subjects and
//! `foo.*.baz.qux.quux`); two reader threads cycle through the 1,001 subjects; one writer
//! thread subscribes and unsubscribes 64 filters in a loop, each a subscribed subject with one
//! word made `*`: the `i % 5`th by default, or the one `STAR_AT` names (`STAR_AT=0` puts every
//! filter's `*` first, so each write adds or drops the root's wildcard branch).
//!
//! Two parts:
//!
//! - criterion groups `readers, read-only` and `readers beside a writer`: time per lookup over
//!   both readers, for each matcher. Every thread is spawned once per matcher; a round starts
//!   and ends at a barrier, and the writer writes only while a round of the second group runs.
//! - a table of ratios measured in one run (printed after the criterion groups;
//!   `RATIOS_ONLY=1` prints it alone, `ONLY=CSTrie,LazyDfa` keeps those matchers and the
//!   `Trie`): for each matcher, alternating windows read-only, beside the writer and beside a
//!   spinning thread, each [`WINDOW`] long, [`ROUNDS`] times; the median ratio with its range,
//!   the writer's rate, and the readers' rate beside the writer over the `Trie` readers' in the
//!   same round.
//!
//! Two cores run three threads here: a writer that never blocks takes a third of the machine,
//! so readers beside it keep at most about 2/3 of their read-only rate. The spinning thread
//! measures that limit in the same run (it takes its share of the processors and touches no line
//! the readers read); the last column, kept beside the writer over kept beside the spinner, is
//! what the writes themselves cost the readers. `WRITER_PACE=N` paces the writer at N writes per
//! second instead (in bursts each millisecond).
//!
//! ```sh
//! cargo bench --bench readers_writer -- --quick
//! RATIOS_ONLY=1 cargo bench --bench readers_writer
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use topicmatch::cache::DEFAULT_CACHE_SIZE;
use topicmatch::{CSTrie, Cached, Dialect, LazyDfa, Matcher, Pattern, Topic, Trie};

#[path = "workload.rs"]
mod workload;

const D: Dialect = Dialect::Amqp;
const READERS: usize = 2;
const FILTERS: usize = 64;
/// Length of one window of the ratio table, and rounds of each pair of windows.
const WINDOW: Duration = Duration::from_millis(400);
const ROUNDS: usize = 7;

/// Builds one matcher.
type Make = fn() -> Arc<dyn Matcher>;

const MATCHERS: &[(&str, Make)] = &[
    ("CSTrie", || Arc::new(CSTrie::new(D))),
    ("Trie", || Arc::new(Trie::new(D))),
    ("LazyDfa", || Arc::new(LazyDfa::new(D))),
    ("LazyDfa (drop all on write)", || {
        Arc::new(LazyDfa::new(D).dropping_on_write())
    }),
    ("Cached<CSTrie>", || {
        Arc::new(Cached::new(CSTrie::new(D), DEFAULT_CACHE_SIZE))
    }),
    ("Cached<Trie>", || {
        Arc::new(Cached::new(Trie::new(D), DEFAULT_CACHE_SIZE))
    }),
];

/// Writes per second the writer keeps to (`WRITER_PACE`), or `None`: as fast as it can.
fn writer_pace() -> Option<u64> {
    std::env::var("WRITER_PACE")
        .ok()
        .map(|v| v.parse().unwrap())
}

/// Whether this is a real bench run (`cargo bench`) rather than `cargo test`'s smoke pass.
fn benching() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// The workload, parsed: subscriptions, the subjects the readers cycle, the writer's filters.
struct Load {
    subs: Vec<(Pattern, u32)>,
    subjects: Vec<String>,
    filters: Vec<Pattern>,
}

fn load() -> Load {
    let w = workload::seed(1000, 0, D, 0);
    let subs: Vec<(Pattern, u32)> = w
        .subscriptions
        .iter()
        .map(|(p, id)| (D.parse_pattern(p).unwrap(), *id))
        .collect();
    let mut subjects: Vec<String> = w.subscriptions[..1000]
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    subjects.push(workload::seed_topic(D));
    let star_at: Option<usize> = std::env::var("STAR_AT").ok().map(|v| v.parse().unwrap());
    let filters = (0..FILTERS)
        .map(|i| {
            let mut words: Vec<&str> = subjects[i].split('.').collect();
            words[star_at.unwrap_or(i % 5)] = D.one_word();
            D.parse_pattern(&words.join(".")).unwrap()
        })
        .collect();
    Load {
        subs,
        subjects,
        filters,
    }
}

/// What the third thread does during a window.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Third {
    /// Sleeps: the readers have the machine.
    Idle,
    /// Subscribes and unsubscribes the filters.
    Writes,
    /// Spins on registers: takes its share of the processors and nothing else.
    Spins,
}

impl Third {
    fn load(cell: &AtomicU8) -> Third {
        match cell.load(Relaxed) {
            0 => Third::Idle,
            1 => Third::Writes,
            _ => Third::Spins,
        }
    }
}

/// A counter on a cache line of its own.
#[repr(align(128))]
#[derive(Default)]
struct Counter(AtomicU64);

/// Two long-lived readers and a writer over one matcher.
///
/// Free-running mode (the ratio table): readers look up while `reading` is set and count their
/// lookups; the third thread writes (or spins) while `third` says so. Round mode (criterion): each reader does
/// `quota` lookups between two barrier waits.
struct Crew {
    reading: Arc<AtomicBool>,
    /// What the third thread does now (a [`Third`]). Spinning, it touches neither the matcher
    /// nor any shared line but this one (the ratio table's third window: what the readers keep
    /// beside a thread that only takes a core).
    third: Arc<AtomicU8>,
    quit: Arc<AtomicBool>,
    /// Lookups per reader in the next criterion round (0: free-running).
    quota: Arc<AtomicUsize>,
    start: Arc<Barrier>,
    done: Arc<Barrier>,
    lookups: Arc<[Counter; READERS]>,
    writes: Arc<Counter>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Crew {
    fn new(m: &Arc<dyn Matcher>, load: &Load) -> Crew {
        let mut crew = Crew {
            reading: Arc::default(),
            third: Arc::default(),
            quit: Arc::default(),
            quota: Arc::default(),
            start: Arc::new(Barrier::new(READERS + 1)),
            done: Arc::new(Barrier::new(READERS + 1)),
            lookups: Arc::new(Default::default()),
            writes: Arc::default(),
            threads: Vec::new(),
        };
        for r in 0..READERS {
            let m = Arc::clone(m);
            let subjects = load.subjects.clone();
            let (reading, quit, quota) = (
                Arc::clone(&crew.reading),
                Arc::clone(&crew.quit),
                Arc::clone(&crew.quota),
            );
            let (start, done, lookups) = (
                Arc::clone(&crew.start),
                Arc::clone(&crew.done),
                Arc::clone(&crew.lookups),
            );
            crew.threads.push(std::thread::spawn(move || {
                let topics: Vec<Topic<'_>> =
                    subjects.iter().map(|s| D.parse_topic(s).unwrap()).collect();
                // The two readers start half the cycle apart.
                let mut k = r * topics.len() / READERS;
                let mut out = Vec::new();
                let mut one = |k: &mut usize| {
                    *k = if *k + 1 == topics.len() { 0 } else { *k + 1 };
                    out.clear();
                    m.lookup_into(&topics[*k], &mut out);
                    black_box(out.len());
                };
                loop {
                    start.wait();
                    if quit.load(Relaxed) {
                        return;
                    }
                    let n = quota.load(Relaxed);
                    if n > 0 {
                        for _ in 0..n {
                            one(&mut k);
                        }
                    } else {
                        let mut count = 0;
                        while reading.load(Relaxed) {
                            for _ in 0..64 {
                                one(&mut k);
                            }
                            count += 64;
                        }
                        lookups[r].0.fetch_add(count, Relaxed);
                    }
                    done.wait();
                }
            }));
        }
        let m = Arc::clone(m);
        let filters = load.filters.clone();
        let (third, quit, writes) = (
            Arc::clone(&crew.third),
            Arc::clone(&crew.quit),
            Arc::clone(&crew.writes),
        );
        let pace = writer_pace();
        crew.threads.push(std::thread::spawn(move || {
            let mut i = 0;
            // With a pace: the writes due by now, counted from when writing began.
            let mut began: Option<(Instant, u64)> = None;
            while !quit.load(Relaxed) {
                let now = Third::load(&third);
                if now == Third::Spins {
                    // Work on registers only: the flag is the one shared line it reads.
                    let mut x = 1u64;
                    while Third::load(&third) == Third::Spins {
                        for _ in 0..1024 {
                            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                        }
                    }
                    black_box(x);
                    continue;
                }
                if now == Third::Idle {
                    began = None;
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                if let Some(pace) = pace {
                    let (t0, w0) = *began.get_or_insert((Instant::now(), writes.0.load(Relaxed)));
                    let due = (t0.elapsed().as_secs_f64() * pace as f64) as u64;
                    if writes.0.load(Relaxed) - w0 >= due {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                }
                let f = &filters[i % FILTERS];
                m.subscribe(f, 1_000_000);
                m.unsubscribe(f, 1_000_000);
                writes.0.fetch_add(2, Relaxed);
                i += 1;
            }
        }));
        crew
    }

    /// Starts the writer (when asked) and lets it wake from its idle sleep.
    fn set_writer(&self, on: bool) {
        self.set_third(if on { Third::Writes } else { Third::Idle });
    }

    /// Sets what the third thread does, and lets it wake from its idle sleep.
    fn set_third(&self, third: Third) {
        self.third.store(third as u8, Relaxed);
        if third != Third::Idle {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// One criterion round: each reader does `iters / READERS` lookups; returns the wall time.
    fn round(&self, iters: u64, with_writer: bool) -> Duration {
        self.quota
            .store((iters as usize).div_ceil(READERS).max(1), Relaxed);
        self.set_writer(with_writer);
        let t = Instant::now();
        self.start.wait();
        self.done.wait();
        let elapsed = t.elapsed();
        self.set_writer(false);
        elapsed
    }

    /// One free-running window: (lookups/s over both readers, writes/s).
    fn window(&self, third: Third, length: Duration) -> (f64, f64) {
        let total = || self.lookups.iter().map(|c| c.0.load(Relaxed)).sum::<u64>();
        self.quota.store(0, Relaxed);
        let (l0, w0) = (total(), self.writes.0.load(Relaxed));
        self.set_third(third);
        self.reading.store(true, Relaxed);
        let t = Instant::now();
        self.start.wait();
        std::thread::sleep(length);
        self.reading.store(false, Relaxed);
        self.done.wait();
        let secs = t.elapsed().as_secs_f64();
        self.set_writer(false);
        let (l1, w1) = (total(), self.writes.0.load(Relaxed));
        ((l1 - l0) as f64 / secs, (w1 - w0) as f64 / secs)
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        self.quit.store(true, Relaxed);
        self.start.wait();
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
    }
}

fn filled(make: Make, load: &Load) -> Arc<dyn Matcher> {
    let m = make();
    for (p, id) in &load.subs {
        m.subscribe(p, *id);
    }
    m
}

fn criterion_groups(c: &mut Criterion, load: &Load) {
    for (group, with_writer) in [
        ("readers, read-only", false),
        ("readers beside a writer", true),
    ] {
        let mut g = c.benchmark_group(group);
        for &(name, make) in MATCHERS {
            let crew = Crew::new(&filled(make, load), load);
            g.bench_function(BenchmarkId::from_parameter(name), |b| {
                b.iter_custom(|iters| crew.round(iters, with_writer))
            });
        }
        g.finish();
    }
}

/// The median, least and greatest of `v`.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// The ratio table. Every matcher's crew lives for the whole table, and each round runs every
/// matcher's three windows (alone, beside the writer, beside a spinning thread), so the figures
/// of one round share the machine's state.
///
/// The spinning thread is the limit the writer's column is read against: it takes the share of
/// the processors a writer that never blocks takes, and touches nothing the readers read. What
/// the readers keep beside it is what the scheduler leaves them; what they keep beside the
/// writer, over that, is what the writes themselves cost them.
fn ratio_table(load: &Load) {
    let (window, rounds) = if benching() {
        (WINDOW, ROUNDS)
    } else {
        (Duration::from_millis(20), 1)
    };
    // `ONLY=CSTrie` (a comma-separated list) keeps those matchers and the `Trie`, for profiling.
    let only = std::env::var("ONLY").ok();
    let crews: Vec<(&str, Crew)> = MATCHERS
        .iter()
        .filter(|(name, _)| {
            only.as_deref().map_or(true, |o| {
                *name == "Trie" || o.split(',').any(|x| x == *name)
            })
        })
        .map(|&(name, make)| (name, Crew::new(&filled(make, load), load)))
        .collect();
    let n = crews.len();
    let (mut alone, mut beside, mut spun, mut writer) = (
        vec![vec![]; n],
        vec![vec![]; n],
        vec![vec![]; n],
        vec![vec![]; n],
    );
    for _ in 0..rounds {
        for (k, (_, crew)) in crews.iter().enumerate() {
            alone[k].push(crew.window(Third::Idle, window).0);
            let (r, w) = crew.window(Third::Writes, window);
            beside[k].push(r);
            writer[k].push(w);
            spun[k].push(crew.window(Third::Spins, window).0);
        }
    }
    let trie = crews.iter().position(|c| c.0 == "Trie").unwrap();
    let pace = writer_pace().map_or("as fast as it can".into(), |p| format!("paced at {p}/s"));
    println!(
        "\n{READERS} readers beside 1 writer ({FILTERS} `*` filters, {pace}), {rounds} rounds of \
         {} ms windows; median [least-greatest]",
        window.as_millis()
    );
    println!(
        "| matcher | read-only lookups/s | beside the writer | kept | over the Trie's readers \
         | writer ops/s | kept beside a spinning thread | kept / spinning's |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let per_round = |f: &dyn Fn(usize) -> f64| spread((0..rounds).map(f).collect());
    for (k, (name, _)) in crews.iter().enumerate() {
        let (kk, kl, kh) = per_round(&|i| beside[k][i] / alone[k][i]);
        let (o, ol, oh) = per_round(&|i| beside[k][i] / beside[trie][i]);
        let (sk, sl, sh) = per_round(&|i| spun[k][i] / alone[k][i]);
        let (q, ql, qh) = per_round(&|i| beside[k][i] / spun[k][i]);
        let ((a, _, _), (b, _, _)) = (spread(alone[k].clone()), spread(beside[k].clone()));
        let (w, _, _) = spread(writer[k].clone());
        println!(
            "| {name} | {:.2}M | {:.2}M | {kk:.2} [{kl:.2}-{kh:.2}] | {o:.2} [{ol:.2}-{oh:.2}] \
             | {:.0}k | {sk:.2} [{sl:.2}-{sh:.2}] | {q:.2} [{ql:.2}-{qh:.2}] |",
            a / 1e6,
            b / 1e6,
            w / 1e3
        );
    }
    println!();
}

fn main() {
    let load = load();
    let mut c = Criterion::default().configure_from_args();
    if std::env::var_os("RATIOS_ONLY").is_none() {
        criterion_groups(&mut c, &load);
    }
    ratio_table(&load);
    c.final_summary();
}
