//! The hot path against its physical limit: one `HashMap` probe that clones the stored answer,
//! timed in the same run as
//!
//! - a cached hot lookup (`Cached<Trie>`, `Cached<CSTrie>`, `lookup_str`: text in, ids out);
//! - a bare hot lookup (`Trie`, `CSTrie`, `lookup_str`);
//! - subscribing a pair that is already there (`subscribe_str`, and `subscribe` of a pattern
//!   parsed beforehand),
//! - `has_interest_str` beside `lookup_str`, here and on a topic of 10,000 subscribers (where
//!   a lookup gathers them all and `has_interest` need not),
//!
//! - `Grouped<Cached<CSTrie>>`, what every Python matcher is (shared subscriptions in front),
//!   with no group, beside `Cached<CSTrie>`; and on the fan-out, `Grouped<CSTrie>` with no
//!   group and with one group of 3 members among the 10,000 (its lookup takes the group's id
//!   out of the answer and puts a member in),
//!
//! on the seed's hot matcher: 1,000 random 5-word patterns plus `foo.*.baz.qux.quux`, looked up
//! with `foo.bar.baz.qux.quux`. `cargo bench --bench hot_path -- --quick`.

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use topicmatch::{CSTrie, Cached, Dialect, Grouped, Matcher, SubscriberId, Trie};

mod workload;

const DIALECT: Dialect = Dialect::Amqp;

/// The seed's hot matcher, with the seed pattern subscribed by id 0 as well.
fn hot<M: Matcher>(m: M) -> M {
    let w = workload::seed(1000, 0, DIALECT, 0);
    for (p, id) in &w.subscriptions {
        m.subscribe_str(p, *id).unwrap();
    }
    m.subscribe_str(&workload::seed_pattern(DIALECT), 0)
        .unwrap();
    m
}

fn subjects() -> Vec<(&'static str, Box<dyn Matcher>)> {
    vec![
        ("Trie", Box::new(hot(Trie::new(DIALECT)))),
        ("CSTrie", Box::new(hot(CSTrie::new(DIALECT)))),
        (
            "Cached<Trie>",
            Box::new(hot(Cached::new(Trie::new(DIALECT), 16_384))),
        ),
        (
            "Cached<CSTrie>",
            Box::new(hot(Cached::new(CSTrie::new(DIALECT), 16_384))),
        ),
        (
            "Grouped<Cached<CSTrie>>",
            Box::new(hot(Grouped::new(Cached::new(CSTrie::new(DIALECT), 16_384)))),
        ),
    ]
}

fn hot_path(c: &mut Criterion) {
    let topic = workload::seed_topic(DIALECT);
    let pattern_text = workload::seed_pattern(DIALECT);
    let pattern = DIALECT.parse_pattern(&pattern_text).unwrap();
    let subjects = subjects();
    // The limit: the answer stored under the topic's text, probed and cloned.
    let answer: Vec<SubscriberId> = subjects[0].1.lookup_str(&topic).unwrap();
    let mut map: HashMap<Box<str>, Vec<SubscriberId>> = HashMap::new();
    map.insert(topic.as_str().into(), answer);
    let mut g = c.benchmark_group("hot");
    g.bench_function(BenchmarkId::new("limit", "HashMap probe + clone"), |b| {
        b.iter(|| map.get(black_box(topic.as_str())).cloned())
    });
    for (name, m) in &subjects {
        // Warm: a cached matcher admits a topic on its second miss.
        for _ in 0..4 {
            m.lookup_str(&topic).unwrap();
        }
        g.bench_function(BenchmarkId::new("lookup_str", name), |b| {
            b.iter(|| m.lookup_str(black_box(&topic)).unwrap())
        });
        g.bench_function(BenchmarkId::new("has_interest_str", name), |b| {
            b.iter(|| m.has_interest_str(black_box(&topic)).unwrap())
        });
        g.bench_function(BenchmarkId::new("subscribe_str, present", name), |b| {
            b.iter(|| m.subscribe_str(black_box(&pattern_text), 0).unwrap())
        });
        g.bench_function(BenchmarkId::new("subscribe, present", name), |b| {
            b.iter(|| m.subscribe(black_box(&pattern), 0))
        });
    }
    g.finish();

    // A topic of 10,000 subscribers, each on its own pattern of three kinds.
    let mut g = c.benchmark_group("fan-out of 10,000");
    let one_group = Grouped::new(CSTrie::new(DIALECT));
    for member in 10_000..10_003 {
        one_group.join("workers", "news.#", member).unwrap();
    }
    let wide: Vec<(&str, Box<dyn Matcher>)> = vec![
        ("Trie", Box::new(Trie::new(DIALECT))),
        ("CSTrie", Box::new(CSTrie::new(DIALECT))),
        (
            "Grouped<CSTrie>",
            Box::new(Grouped::new(CSTrie::new(DIALECT))),
        ),
        ("Grouped<CSTrie>, one group", Box::new(one_group)),
    ];
    let hot = "news.sports.live";
    for (name, m) in &wide {
        for id in 0..10_000u32 {
            let p = ["news.sports.live", "news.*.live", "news.#"][id as usize % 3];
            m.subscribe_str(p, id).unwrap();
        }
        g.bench_function(BenchmarkId::new("lookup_str", name), |b| {
            b.iter(|| m.lookup_str(black_box(hot)).unwrap())
        });
        g.bench_function(BenchmarkId::new("has_interest_str", name), |b| {
            b.iter(|| m.has_interest_str(black_box(hot)).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, hot_path);
criterion_main!(benches);
