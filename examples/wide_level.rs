//! A loop to profile, not a benchmark: fills a `CSTrie` level with `n` sibling words
//! (`users.0` to `users.<n-1>`), then for `secs` seconds subscribes 4,096 fresh words and
//! unsubscribes them again, as the criterion group "subscribe into a level of n siblings"
//! does, and prints the mean time of a subscribe and of a whole round.
//!
//! ```text
//! cargo run --release --example wide_level -- 1000000 5
//! READY_FILE=/tmp/ready cargo run --release --example wide_level -- 1000000 9 &
//! # once /tmp/ready exists the fill is over: attach `perf record -p <pid>` to the loop alone
//! ```
//!
//! Figures come from the criterion benches (BENCHMARKS.md); this only makes a profile of the
//! steady state easy to take, without the fill in it.

use std::time::{Duration, Instant};

use topicmatch::{CSTrie, Dialect, Matcher};

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: wide_level <n> [seconds]";
    let n: usize = args.next().and_then(|a| a.parse().ok()).expect(usage);
    let secs: f64 = args.next().map_or(5.0, |a| a.parse().expect(usage));

    let d = Dialect::Amqp;
    let parse = |text: String| d.parse_pattern(&text).expect("a valid pattern");
    // Parsed before the fill, so that the patterns sit together on fresh pages, as a pattern
    // just parsed by a caller would be hot: parsed after, they land in whatever the fill left
    // free across the heap, and a lookup of their words then misses on the caller's data.
    let fresh: Vec<_> = (0..4096)
        .map(|i| parse(format!("users.{}", n + i)))
        .collect();
    let m = CSTrie::new(d);
    for i in 0..n {
        m.subscribe(&parse(format!("users.{i}")), 1);
    }
    if let Ok(path) = std::env::var("READY_FILE") {
        std::fs::write(path, b"").expect("READY_FILE is writable");
    }

    let start = Instant::now();
    let (mut subscribing, mut rounds) = (Duration::ZERO, 0u64);
    while start.elapsed().as_secs_f64() < secs {
        let t = Instant::now();
        for p in &fresh {
            m.subscribe(p, 2);
        }
        subscribing += t.elapsed();
        for p in &fresh {
            m.unsubscribe(p, 2);
        }
        rounds += 1;
    }
    let ops = (rounds * fresh.len() as u64) as f64;
    println!(
        "{n} siblings: {:.1} ns per subscribe, {:.1} ns per subscribe and unsubscribe ({rounds} rounds)",
        subscribing.as_nanos() as f64 / ops,
        start.elapsed().as_nanos() as f64 / ops,
    );
}
