//! `TopicStore` at 1,000,000 topics: a filter that selects 1,000 of them, beside a scan that
//! tests every stored topic, parsed in advance, with the reference matcher (what a broker
//! without the store does),
//! and the resident memory each stored topic costs.
//!
//! Topics are `sensors/<site>/<device>/temp`, 1,000 sites of 1,000 devices; the filter
//! `sensors/<site>/+/temp` selects one site's 1,000. A `#` filter under one site is timed too.
//!
//! ```sh
//! cargo bench --bench topic_store            # TOPICS=100000 for a smaller store
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use topicmatch::{reference, Dialect, TopicStore};

const D: Dialect = Dialect::Mqtt;

fn topics() -> usize {
    std::env::var("TOPICS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// Resident memory of the process, in bytes (Linux; 0 elsewhere).
fn resident() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn bench(c: &mut Criterion) {
    let n = topics();
    let texts: Vec<String> = (0..n)
        .map(|i| format!("sensors/{}/{}/temp", i / 1000, i % 1000))
        .collect();
    let before = resident();
    let store = TopicStore::new(D);
    for (i, t) in texts.iter().enumerate() {
        store.set(&D.parse_topic(t).unwrap(), i as u32);
    }
    let after = resident();
    eprintln!(
        "topic_store: {n} topics, resident memory +{} MB, {:.0} B per stored topic \
         (the trie and its values; the topics' own text is kept by the bench beside it)",
        (after - before) >> 20,
        (after - before) as f64 / n as f64
    );
    let site = n / 1000 / 2;
    let plus = D.parse_pattern(&format!("sensors/{site}/+/temp")).unwrap();
    let hash = D.parse_pattern(&format!("sensors/{site}/#")).unwrap();
    assert_eq!(store.matching(&plus).len(), 1000.min(n));

    let mut g = c.benchmark_group("topic_store");
    g.measurement_time(Duration::from_secs(5));
    g.bench_function(format!("match sensors/+/temp of {n}"), |b| {
        b.iter(|| black_box(store.matching(black_box(&plus))))
    });
    g.bench_function(format!("match sensors/site/# of {n}"), |b| {
        b.iter(|| black_box(store.matching(black_box(&hash))))
    });
    // The scan gets its topics parsed in advance: only the matching is timed.
    let parsed: Vec<_> = texts.iter().map(|t| D.parse_topic(t).unwrap()).collect();
    g.sample_size(10);
    g.bench_function(format!("scan of {n} with the reference matcher"), |b| {
        b.iter(|| {
            parsed
                .iter()
                .filter(|t| reference::pattern_matches(&plus, t))
                .count()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
