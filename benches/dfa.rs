//! `LazyDfa` against the bare `Trie` it is built from, in one run:
//!
//! - warm lookups (every topic looked up once before timing) on `mixed` 10k and 100k and on a
//!   `#`-heavy 100k set (a third of the patterns with `#` in a middle position), AMQP;
//! - first (cold) lookups: the cache emptied, then one pass over the same topics;
//! - the hostile case: `#.#.#.#.#.#.#.#.#.#.x` against topics of 2,000 and 4,000 words, warm
//!   and cold, to show that the time is linear in the topic's length.
//!
//! The criterion groups time each; the ratio table printed after them (`RATIOS_ONLY=1`
//! prints it alone) times the DFA and the trie in alternating passes over the same topics,
//! [`ROUNDS`] times, and gives the median ratio with its range.
//!
//! ```sh
//! cargo bench --bench dfa -- --quick
//! RATIOS_ONLY=1 cargo bench --bench dfa
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use topicmatch::{Dialect, LazyDfa, Matcher, Topic, Trie};

#[path = "workload.rs"]
mod workload;

const D: Dialect = Dialect::Amqp;
const TOPICS: usize = 10_000;
const ROUNDS: usize = 7;

/// Whether this is a real bench run (`cargo bench`) rather than `cargo test`'s smoke pass.
fn benching() -> bool {
    std::env::args().any(|a| a == "--bench")
}

struct Case {
    name: &'static str,
    trie: Trie,
    dfa: LazyDfa,
    topics: Vec<String>,
}

fn case(name: &'static str, w: workload::Workload) -> Case {
    let trie = Trie::new(D);
    let dfa = LazyDfa::new(D);
    for (p, id) in &w.subscriptions {
        trie.subscribe_str(p, *id).unwrap();
        dfa.subscribe_str(p, *id).unwrap();
    }
    Case {
        name,
        trie,
        dfa,
        topics: w.topics,
    }
}

fn cases() -> Vec<Case> {
    let scale = if benching() { 1 } else { 100 };
    vec![
        case(
            "mixed 10k",
            workload::mixed(10_000 / scale, TOPICS / scale, D, 1),
        ),
        case(
            "mixed 100k",
            workload::mixed(100_000 / scale, TOPICS / scale, D, 2),
        ),
        case(
            "#-heavy 100k",
            workload::middle_many(100_000 / scale, TOPICS / scale, D, 3),
        ),
    ]
}

fn hostile_pattern() -> String {
    let mut words = vec!["#"; 10];
    words.push("x");
    words.join(".")
}

fn hostile_topic(words: usize) -> String {
    let mut t = vec!["a"; words - 1];
    t.push("x");
    t.join(".")
}

/// One pass of lookups over `topics`, parsed beforehand; returns the time per lookup.
fn pass(m: &dyn Matcher, topics: &[Topic<'_>], out: &mut Vec<u32>) -> Duration {
    let t = Instant::now();
    for topic in topics {
        out.clear();
        m.lookup_into(topic, out);
        black_box(&out);
    }
    t.elapsed() / topics.len().max(1) as u32
}

fn criterion_groups(c: &mut Criterion, cases: &[Case]) {
    let mut g = c.benchmark_group("dfa warm lookup");
    for case in cases {
        let topics: Vec<Topic<'_>> = case
            .topics
            .iter()
            .map(|t| D.parse_topic(t).unwrap())
            .collect();
        let mut out = Vec::new();
        pass(&case.dfa, &topics, &mut out);
        for (name, m) in [("Trie", &case.trie as &dyn Matcher), ("LazyDfa", &case.dfa)] {
            let mut i = 0;
            g.bench_function(BenchmarkId::new(name, case.name), |b| {
                b.iter(|| {
                    out.clear();
                    m.lookup_into(&topics[i % topics.len()], &mut out);
                    i += 1;
                    black_box(&out);
                })
            });
        }
    }
    g.finish();
    let mut g = c.benchmark_group("dfa hostile");
    let p = hostile_pattern();
    for words in [2_000, 4_000] {
        let topic_text = hostile_topic(words);
        let topic = D.parse_topic(&topic_text).unwrap();
        let dfa = LazyDfa::new(D);
        dfa.subscribe_str(&p, 1).unwrap();
        let trie = Trie::new(D);
        trie.subscribe_str(&p, 1).unwrap();
        for (name, m) in [("Trie", &trie as &dyn Matcher), ("LazyDfa", &dfa)] {
            g.bench_function(BenchmarkId::new(name, words), |b| {
                b.iter(|| black_box(m.lookup(&topic)))
            });
        }
    }
    g.finish();
}

fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn ratio_table(cases: &[Case]) {
    println!("\nLazyDfa / Trie, time per lookup, median of {ROUNDS} alternating passes [range]:");
    println!(
        "| workload | Trie warm | LazyDfa warm | warm ratio | LazyDfa cold | cold ratio | states |"
    );
    println!("|---|---|---|---|---|---|---|");
    for case in cases {
        let topics: Vec<Topic<'_>> = case
            .topics
            .iter()
            .map(|t| D.parse_topic(t).unwrap())
            .collect();
        let mut out = Vec::new();
        let (mut warm, mut cold, mut tw, mut dw, mut dc) = (vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..ROUNDS {
            case.dfa.clear_cache();
            let c = pass(&case.dfa, &topics, &mut out).as_nanos() as f64;
            let d = pass(&case.dfa, &topics, &mut out).as_nanos() as f64;
            let t = pass(&case.trie, &topics, &mut out).as_nanos() as f64;
            warm.push(d / t);
            cold.push(c / t);
            tw.push(t);
            dw.push(d);
            dc.push(c);
        }
        let (w, wl, wh) = spread(warm);
        let (c, cl, ch) = spread(cold);
        println!(
            "| {} | {:.0} ns | {:.0} ns | {w:.2} [{wl:.2}-{wh:.2}] | {:.0} ns | {c:.2} [{cl:.2}-{ch:.2}] | {} |",
            case.name,
            spread(tw).0,
            spread(dw).0,
            spread(dc).0,
            case.dfa.stats().states,
        );
    }
    println!(
        "\nHostile `{}`: time per lookup, median of {ROUNDS} [range]:",
        hostile_pattern()
    );
    println!("| topic words | Trie | LazyDfa warm | LazyDfa cold | states |");
    println!("|---|---|---|---|---|");
    let p = hostile_pattern();
    let mut warm_at = Vec::new();
    for words in [2_000, 4_000] {
        let text = hostile_topic(words);
        let topic = [D.parse_topic(&text).unwrap()];
        let dfa = LazyDfa::new(D);
        dfa.subscribe_str(&p, 1).unwrap();
        let trie = Trie::new(D);
        trie.subscribe_str(&p, 1).unwrap();
        let mut out = Vec::new();
        let (mut t, mut w, mut c) = (vec![], vec![], vec![]);
        for _ in 0..ROUNDS {
            dfa.clear_cache();
            c.push(pass(&dfa, &topic, &mut out).as_nanos() as f64);
            w.push(pass(&dfa, &topic, &mut out).as_nanos() as f64);
            t.push(pass(&trie, &topic, &mut out).as_nanos() as f64);
        }
        let (w, wl, wh) = spread(w);
        warm_at.push(w);
        let (t, tl, th) = spread(t);
        let (c, cl, ch) = spread(c);
        println!(
            "| {words} | {t:.0} ns [{tl:.0}-{th:.0}] | {w:.0} ns [{wl:.0}-{wh:.0}] | {c:.0} ns [{cl:.0}-{ch:.0}] | {} |",
            dfa.stats().states
        );
    }
    println!(
        "\nLazyDfa warm, 4,000 words / 2,000 words: {:.2}",
        warm_at[1] / warm_at[0]
    );
}

fn main() {
    let cases = cases();
    if std::env::var_os("RATIOS_ONLY").is_none() {
        let mut c = Criterion::default()
            .configure_from_args()
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        criterion_groups(&mut c, &cases);
        c.final_summary();
    }
    if benching() {
        ratio_table(&cases);
    }
}
