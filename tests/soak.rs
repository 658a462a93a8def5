//! Soak: on every matcher, a writer subscribes and unsubscribes for many rounds while readers
//! look up, and the heap must come back to where it stood after a warm-up round.
//!
//! A counting allocator measures live bytes. Each round subscribes a random set of patterns and
//! then removes every one of them, so the matcher ends each round empty; what it may keep is
//! bounded (hash-map capacity, the lookup caches of `InvertedBitmap` and `SelectorIndex`, epoch
//! bags), and the warm-up round fills those before the baseline is taken. crossbeam-epoch frees
//! retired nodes later, so the garbage is flushed before each measurement.
//!
//! `SOAK_OPS` sets the writes (subscribes and unsubscribes) per matcher: 20,000 by default, a
//! few seconds each in release mode; `make soak` runs a million. The readers (`SOAK_READERS`,
//! 2 by default) look up all along and their lookups are counted apart. This file holds one test, so nothing else allocates
//! while it measures.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use topicmatch::{
    CSTrie, Dialect, HeadersMatcher, InvertedBitmap, LazyDfa, LevelBitmap, MatchMode, Matcher,
    NaiveMatcher, SelectorIndex, Trie,
};

mod counting;

use counting::{collect_garbage, live, LIVE, PEAK};

#[global_allocator]
static A: counting::Counting = counting::Counting;

/// Live bytes a drained matcher may keep above its warmed-up baseline: epoch bags and thread
/// registrations crossbeam keeps, allocator-visible capacity that a map grows by chance in a
/// later round. A leak of one node per round or per write is megabytes at these counts.
const TOLERANCE: isize = 256 * 1024;

/// Patterns a round subscribes before removing them all.
const ROUND: usize = 200;

/// xorshift64: the same sequence on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// One index under soak, seen through the operations the soak needs.
trait Soaked: Sync {
    /// Subscribes a random pattern for `id`; returns what `unsubscribe` needs to remove it.
    fn subscribe(&self, rng: &mut Rng, id: u32) -> String;
    /// Removes what `subscribe` returned.
    fn unsubscribe(&self, key: &str, id: u32);
    /// One lookup of a random topic.
    fn lookup(&self, rng: &mut Rng) -> usize;
    /// Called by the writer between rounds (the CSTrie takes and drops snapshots there).
    fn between_rounds(&self, _rng: &mut Rng) {}
    /// Called by the writer after its last round: drops what `between_rounds` kept, so every
    /// measurement sees the index with no snapshot alive, and brings a `LazyDfa` to its floor
    /// (see [`settle_dfa`]).
    fn end_run(&self) {}
    fn len(&self) -> usize;
}

const WORDS: [&str; 6] = ["a", "b", "c", "", "d", "e"];

fn words(rng: &mut Rng, most: usize, wild: &[&str]) -> String {
    let n = 1 + rng.below(most);
    let ws: Vec<&str> = (0..n)
        .map(|_| {
            if !wild.is_empty() && rng.below(3) == 0 {
                wild[rng.below(wild.len())]
            } else {
                WORDS[rng.below(WORDS.len())]
            }
        })
        .collect();
    ws.join(".")
}

/// A topic matcher in the AMQP dialect, so `#` and `*` may sit anywhere.
struct Topics<M> {
    m: M,
    snapshots: std::sync::Mutex<Vec<CSTrie>>,
    snapshot: Option<fn(&M) -> CSTrie>,
    /// Brings the index to its floor after a run (see [`settle_dfa`]).
    settle: Option<fn(&M)>,
}

impl<M: Matcher> Topics<M> {
    fn new(m: M) -> Self {
        Topics {
            m,
            snapshots: std::sync::Mutex::default(),
            snapshot: None,
            settle: None,
        }
    }
}

impl<M: Matcher> Soaked for Topics<M> {
    fn subscribe(&self, rng: &mut Rng, id: u32) -> String {
        let p = words(rng, 5, &["*", "#"]);
        self.m.subscribe_str(&p, id).unwrap();
        p
    }
    fn unsubscribe(&self, key: &str, id: u32) {
        self.m.unsubscribe_str(key, id).unwrap();
    }
    fn lookup(&self, rng: &mut Rng) -> usize {
        let t = words(rng, 5, &[]);
        let mut n = self.m.lookup_str(&t).unwrap().len();
        let snaps = self.snapshots.lock().unwrap();
        if let Some(s) = snaps.last() {
            n += s.lookup_str(&t).unwrap().len();
        }
        n
    }
    fn between_rounds(&self, rng: &mut Rng) {
        if let Some(take) = self.snapshot {
            let mut snaps = self.snapshots.lock().unwrap();
            snaps.push(take(&self.m));
            // Keep up to three, dropping one at random, so snapshots die in any order.
            if snaps.len() > 3 {
                let i = rng.below(snaps.len());
                snaps.remove(i);
            }
        }
    }
    fn end_run(&self) {
        self.snapshots.lock().unwrap().clear();
        if let Some(settle) = self.settle {
            settle(&self.m);
        }
    }
    fn len(&self) -> usize {
        self.m.len()
    }
}

/// A `LazyDfa` keeps, by design, up to its budget of cached states (64 MiB by default) and
/// the NFA's empty branches until they outnumber the live ones; how much of either a run
/// ends with depends on where it stopped, by hundreds of kilobytes. Its pairs all gone, dead
/// branches written until the NFA compacts bring both to the floor (a compaction replaces the
/// cache), so the measurements compare like with like; a leak per write, per flush or per
/// compaction still shows.
fn settle_dfa(m: &LazyDfa) {
    assert!(m.is_empty());
    let compactions = m.stats().compactions;
    for i in 0..100_000 {
        let p = format!("settle.{i}");
        m.subscribe_str(&p, 0).unwrap();
        m.unsubscribe_str(&p, 0).unwrap();
        if m.stats().compactions > compactions {
            m.clear_cache();
            return;
        }
    }
    panic!("dead branches never compacted: {:?}", m.stats());
}

const HEADER_NAMES: [&str; 4] = ["a", "b", "x-c", "d"];
const HEADER_VALUES: [&str; 3] = ["1", "2", "3"];
const MODES: [MatchMode; 4] = MatchMode::ALL;

impl Soaked for HeadersMatcher {
    fn subscribe(&self, rng: &mut Rng, id: u32) -> String {
        // The key spells the criteria and the mode so `unsubscribe` can rebuild them.
        let n = 1 + rng.below(3);
        let mut key = MODES[rng.below(4)].name().to_string();
        for _ in 0..n {
            let name = HEADER_NAMES[rng.below(4)];
            let value = rng.below(4);
            key.push_str(&format!(" {name}={value}"));
        }
        let (criteria, mode) = parse_headers_key(&key);
        HeadersMatcher::subscribe(self, &criteria, id, mode);
        key
    }
    fn unsubscribe(&self, key: &str, id: u32) {
        let (criteria, mode) = parse_headers_key(key);
        HeadersMatcher::unsubscribe(self, &criteria, id, mode);
    }
    fn lookup(&self, rng: &mut Rng) -> usize {
        let mut headers: Vec<(&str, &str)> = Vec::new();
        for name in HEADER_NAMES {
            if rng.below(2) == 0 {
                headers.push((name, HEADER_VALUES[rng.below(3)]));
            }
        }
        HeadersMatcher::lookup(self, &headers).len() + self.hits(&headers).len()
    }
    fn len(&self) -> usize {
        HeadersMatcher::len(self)
    }
}

fn parse_headers_key(key: &str) -> (Vec<(String, Option<String>)>, MatchMode) {
    let mut parts = key.split(' ');
    let mode = parts.next().unwrap().parse().unwrap();
    let mut criteria: Vec<(String, Option<String>)> = parts
        .map(|c| {
            let (name, value) = c.split_once('=').unwrap();
            let value = (value != "3").then(|| value.to_string());
            (name.to_string(), value)
        })
        .collect();
    criteria.sort();
    criteria.dedup_by(|a, b| a.0 == b.0);
    (criteria, mode)
}

const SELECTORS: [&str; 6] = [
    "*",
    "https://example.com/books/{id}",
    "https://example.com/{kind}/1",
    "re:https://example\\.com/(books|users)/[0-9]*[02]",
    "https://example.com/users/3",
    "https://example.com/users{/id}",
];

impl Soaked for SelectorIndex {
    fn subscribe(&self, rng: &mut Rng, id: u32) -> String {
        let s = SELECTORS[rng.below(SELECTORS.len())].to_string();
        SelectorIndex::subscribe(self, &s, id).unwrap();
        s
    }
    fn unsubscribe(&self, key: &str, id: u32) {
        SelectorIndex::unsubscribe(self, key, id).unwrap();
    }
    fn lookup(&self, rng: &mut Rng) -> usize {
        // More topics than the cache holds, so it evicts all along.
        let kind = ["books", "users", "authors"][rng.below(3)];
        let t = format!("https://example.com/{kind}/{}", rng.below(100));
        SelectorIndex::lookup(self, &[&t]).len()
    }
    fn len(&self) -> usize {
        SelectorIndex::len(self)
    }
}

/// What one soak measured.
struct Figures {
    writes: u64,
    lookups: u64,
    seconds: f64,
    baseline: isize,
    peak: isize,
    last: isize,
}

/// Runs `rounds` rounds of writes (the writer) against lookups (`readers` threads until it
/// ends); returns the writes and the lookups done.
fn run(index: &dyn Soaked, rounds: usize, readers: u64, seed: u64) -> (u64, u64) {
    let done = AtomicBool::new(false);
    let lookups = AtomicU64::new(0);
    let mut writes = 0u64;
    std::thread::scope(|s| {
        for r in 0..readers {
            let (done, lookups) = (&done, &lookups);
            s.spawn(move || {
                let mut rng = Rng(seed ^ (r + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let mut n = 0;
                while !done.load(Ordering::Relaxed) {
                    std::hint::black_box(index.lookup(&mut rng));
                    n += 1;
                }
                lookups.fetch_add(n, Ordering::Relaxed);
            });
        }
        let mut rng = Rng(seed | 1);
        for _ in 0..rounds {
            let held: Vec<(String, u32)> = (0..ROUND)
                .map(|_| {
                    let id = rng.below(16) as u32;
                    (index.subscribe(&mut rng, id), id)
                })
                .collect();
            index.between_rounds(&mut rng);
            for (key, id) in held.iter().rev() {
                index.unsubscribe(key, *id);
            }
            assert_eq!(index.len(), 0, "a round must leave the index empty");
            writes += 2 * ROUND as u64;
        }
        index.end_run();
        done.store(true, Ordering::Relaxed);
    });
    (writes, lookups.load(Ordering::Relaxed))
}

fn soak(name: &str, index: &dyn Soaked, ops: u64, readers: u64) -> Figures {
    let rounds = (ops / (2 * ROUND as u64)).max(4) as usize;
    // At least 20 rounds, so the caches fill (and their maps reach full size) even in the short
    // run of `make test`.
    run(index, rounds.div_ceil(10).max(20), readers, 1);
    collect_garbage();
    let baseline = live();
    // The peak is the heap's, counted from the heap's own level: it includes any chunk of map
    // nodes reserved meanwhile, which `live` leaves out.
    let heap = LIVE.load(Ordering::Relaxed);
    PEAK.store(heap, Ordering::Relaxed);
    let start = Instant::now();
    let (writes, lookups) = run(index, rounds, readers, 2);
    let seconds = start.elapsed().as_secs_f64();
    collect_garbage();
    let figures = Figures {
        writes,
        lookups,
        seconds,
        baseline,
        peak: baseline + PEAK.load(Ordering::Relaxed) - heap,
        last: live(),
    };
    eprintln!(
        "soak {name:<16} {:>9} writes, {:>10} lookups in {:>6.1} s: live bytes {:>7} at start, \
         peak {:>8}, end {:>7}, drift {:+}",
        figures.writes,
        figures.lookups,
        figures.seconds,
        figures.baseline,
        figures.peak,
        figures.last,
        figures.last - figures.baseline
    );
    figures
}

#[test]
fn every_matcher_returns_to_its_baseline_after_churn() {
    let count = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .map_or(default, |s| s.replace('_', "").parse().expect("a count"))
    };
    let ops = count("SOAK_OPS", 20_000);
    // Under valgrind, which runs one thread at a time, `make leak-check` asks for one reader.
    let readers = count("SOAK_READERS", 2);
    let d = Dialect::Amqp;
    let mut cstrie = Topics::new(CSTrie::new(d));
    cstrie.snapshot = Some(CSTrie::snapshot);
    let mut dfa = Topics::new(LazyDfa::new(d));
    dfa.settle = Some(settle_dfa);
    let mut small_dfa = Topics::new(LazyDfa::with_budget(d, 4096));
    small_dfa.settle = Some(settle_dfa);
    let indexes: Vec<(&str, Box<dyn Soaked>)> = vec![
        ("NaiveMatcher", Box::new(Topics::new(NaiveMatcher::new(d)))),
        ("Trie", Box::new(Topics::new(Trie::new(d)))),
        ("CSTrie+snapshots", Box::new(cstrie)),
        (
            "InvertedBitmap",
            Box::new(Topics::new(InvertedBitmap::with_cache_size(d, 256))),
        ),
        ("LevelBitmap", Box::new(Topics::new(LevelBitmap::new(d)))),
        ("LazyDfa", Box::new(dfa)),
        ("LazyDfa(4 KiB)", Box::new(small_dfa)),
        ("HeadersMatcher", Box::new(HeadersMatcher::new())),
        (
            "SelectorIndex",
            Box::new(SelectorIndex::with_cache_size(64)),
        ),
    ];
    let mut failed = Vec::new();
    for (name, index) in indexes {
        let f = soak(name, &*index, ops, readers);
        if f.last - f.baseline >= TOLERANCE {
            failed.push(format!("{name}: {} bytes more", f.last - f.baseline));
        }
    }
    assert!(failed.is_empty(), "live bytes grew: {failed:?}");
}
