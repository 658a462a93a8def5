//! Parsing a topic against its physical limit: `Dialect::parse_topic` beside a split of the
//! same string into words on the stack, in each dialect, on the seed's topic
//! (`foo.bar.baz.qux.quux`) and on a longer one of 12 words (past the words held inline); and
//! `Dialect::check_pattern` on the seed's pattern beside the same split.
//! `cargo bench --bench parse -- --quick`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use topicmatch::Dialect;

/// The limit: the words of `text` cut at `sep` into an array on the stack, one byte at a
/// time, with no validation.
fn stack_split(text: &str, sep: u8) -> usize {
    let mut words = [""; 16];
    let (mut n, mut start) = (0, 0);
    for (i, &b) in text.as_bytes().iter().enumerate() {
        if b == sep {
            words[n % 16] = &text[start..i];
            n += 1;
            start = i + 1;
        }
    }
    words[n % 16] = &text[start..];
    black_box(&words);
    n + 1
}

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    for d in [Dialect::Amqp, Dialect::Mqtt, Dialect::Nats] {
        let sep = d.separator() as char;
        let short = ["foo", "bar", "baz", "qux", "quux"].join(&sep.to_string());
        let long = (0..12)
            .map(|i| format!("level{i}"))
            .collect::<Vec<_>>()
            .join(&sep.to_string());
        // The seed's pattern, `foo.*.baz.qux.quux` in the dialect's spelling: scanned as a
        // subscribe of its text scans it (`check_pattern` builds nothing, as the tries' writes
        // walk the words where they lie).
        let pattern = ["foo", d.one_word(), "baz", "qux", "quux"].join(&sep.to_string());
        g.bench_function(
            BenchmarkId::new(format!("{d}/seed pattern"), "check_pattern"),
            |b| b.iter(|| d.check_pattern(black_box(&pattern)).is_ok()),
        );
        g.bench_function(
            BenchmarkId::new(format!("{d}/seed pattern"), "stack split"),
            |b| b.iter(|| stack_split(black_box(&pattern), d.separator())),
        );
        for (label, text) in [("seed", &short), ("12 words", &long)] {
            g.bench_function(
                BenchmarkId::new(format!("{d}/{label}"), "parse_topic"),
                |b| b.iter(|| d.parse_topic(black_box(text)).unwrap().words().len()),
            );
            g.bench_function(
                BenchmarkId::new(format!("{d}/{label}"), "stack split"),
                |b| b.iter(|| stack_split(black_box(text), d.separator())),
            );
        }
    }
    g.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
