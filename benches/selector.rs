//! The Mercure hub's case, as skipfilter was written for it: 5,000 subscribers with 3 topic
//! selectors each (exact topics and RFC 6570 URI templates), updates carrying 2 topics of the
//! form `https://example.com/users/{id}`. `SelectorIndex` against the brute-force scan that
//! Mercure ran before skipfilter (every selector of every subscriber against every topic, with
//! compiled templates), in one run.
//!
//! `cargo bench --bench selector -- --quick` for a fast pass.

use std::hint::black_box;
use std::sync::atomic::{AtomicU32, Ordering};

use criterion::{criterion_group, criterion_main, Criterion};
use topicmatch::{Selector, SelectorIndex};

const SUBSCRIBERS: u32 = 5_000;
const USERS: u32 = 1_000;
const BOOKS: u32 = 10;
const GROUPS: u32 = 50;
const UPDATES: usize = 2_000;

/// Subscriber `i`'s three selectors.
fn selectors(i: u32) -> [String; 3] {
    [
        format!("https://example.com/users/{}", i % USERS),
        format!("https://example.com/groups/{}/users/{{id}}", i % GROUPS),
        if i % 10 == 0 {
            "https://example.com/users/{id}".to_owned()
        } else {
            format!(
                "https://example.com/users/{}/books/{{book}}",
                (i * 7) % USERS
            )
        },
    ]
}

/// Updates of two topics each: a user, and one of that user's books or groups.
fn updates() -> Vec<[String; 2]> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |n: u32| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % u64::from(n)) as u32
    };
    (0..UPDATES)
        .map(|_| {
            let u = next(USERS);
            let second = if next(2) == 0 {
                format!("https://example.com/users/{u}/books/{}", next(BOOKS))
            } else {
                format!("https://example.com/groups/{}/users/{u}", next(GROUPS))
            };
            [format!("https://example.com/users/{u}"), second]
        })
        .collect()
}

/// Mercure before skipfilter: every selector of every subscriber against every topic.
struct BruteForce {
    subscribers: Vec<(u32, Vec<Selector>)>,
}

impl BruteForce {
    fn lookup(&self, topics: &[&str]) -> Vec<u32> {
        self.subscribers
            .iter()
            .filter(|(_, sels)| sels.iter().any(|s| topics.iter().any(|t| s.admits(t))))
            .map(|&(id, _)| id)
            .collect()
    }
}

fn bench(c: &mut Criterion) {
    let updates = updates();
    let index = SelectorIndex::new();
    let mut brute = BruteForce {
        subscribers: Vec::new(),
    };
    for i in 0..SUBSCRIBERS {
        let sels = selectors(i);
        for s in &sels {
            index.subscribe(s, i).unwrap();
        }
        brute.subscribers.push((
            i,
            sels.iter().map(|s| Selector::parse(s).unwrap()).collect(),
        ));
    }
    // Both answer alike, and the index's cache is warm after this pass.
    let mut matched = 0;
    for u in &updates {
        let topics = [u[0].as_str(), u[1].as_str()];
        let mut a = index.lookup(&topics);
        a.sort_unstable();
        assert_eq!(a, brute.lookup(&topics));
        matched += a.len();
    }
    eprintln!(
        "{SUBSCRIBERS} subscribers x 3 selectors ({} distinct), {UPDATES} updates of 2 topics, \
         {:.1} subscribers per update; cache after warm-up: {:?}",
        index.selector_count(),
        matched as f64 / UPDATES as f64,
        index.cache_stats()
    );

    let mut g = c.benchmark_group("mercure_5000x3_2topics");
    let n = AtomicU32::new(0);
    let next = || &updates[n.fetch_add(1, Ordering::Relaxed) as usize % UPDATES];
    g.bench_function("brute_force", |b| {
        b.iter(|| {
            let u = next();
            black_box(brute.lookup(&[&u[0], &u[1]]))
        })
    });
    g.bench_function("selector_index", |b| {
        b.iter(|| {
            let u = next();
            black_box(index.lookup(&[&u[0], &u[1]]))
        })
    });
    // Subscribers come and go: one connects and one leaves before each update, so every
    // cached topic has two subscribers to test (the skipfilter cursor at work).
    let churn = AtomicU32::new(0);
    g.bench_function("selector_index_with_churn", |b| {
        b.iter(|| {
            let k = churn.fetch_add(1, Ordering::Relaxed);
            let id = SUBSCRIBERS + k;
            for s in selectors(k % SUBSCRIBERS) {
                index.subscribe(&s, id).unwrap();
            }
            if k > 0 {
                index.remove_subscriber(id - 1);
            }
            let u = next();
            black_box(index.lookup(&[&u[0], &u[1]]))
        })
    });
    g.finish();
    eprintln!("cache at the end: {:?}", index.cache_stats());
}

criterion_group!(benches, bench);
criterion_main!(benches);
