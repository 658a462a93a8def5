//! Parsing a topic against its physical limit: `Dialect::parse_topic` beside a split of the
//! same string into words on the stack, in each dialect, on the seed's topic
//! (`foo.bar.baz.qux.quux`) and on a longer one of 12 words (past the words held inline).
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
