//! Every matcher equals the naive oracle on random workloads, in every dialect.

mod common;

use common::{agree_with_oracle, crowd_ops, ops, Factory};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use topicmatch::{
    CSTrie, Cached, Dialect, Grouped, InvertedBitmap, LazyDfa, LevelBitmap, Matcher, NaiveMatcher,
    SubscriberId, Trie,
};

/// Cases per dialect; each case holds up to 400 operations, about half of them lookups, so
/// every matcher is compared on well over 100,000 lookups per dialect.
const CASES: u32 = 1300;

fn matchers() -> Vec<(&'static str, Factory)> {
    vec![
        ("Trie", |d| Box::new(Trie::new(d)) as Box<dyn Matcher>),
        ("CSTrie", |d| Box::new(CSTrie::new(d)) as Box<dyn Matcher>),
        ("InvertedBitmap", |d| Box::new(InvertedBitmap::new(d))),
        // Smaller than the topic space of the workloads: entries are evicted and recomputed.
        ("InvertedBitmap(cache=3)", |d| {
            Box::new(InvertedBitmap::with_cache_size(d, 3))
        }),
        ("InvertedBitmap(cache=0)", |d| {
            Box::new(InvertedBitmap::with_cache_size(d, 0))
        }),
        ("LevelBitmap", |d| Box::new(LevelBitmap::new(d))),
        ("LazyDfa", |d| Box::new(LazyDfa::new(d))),
        // Budgets that a few states fill: most lookups flush the cache, and at 400 bytes most
        // flush twice and simulate the NFA, so the three paths of a lookup are all compared.
        ("LazyDfa(budget=400)", |d| {
            Box::new(LazyDfa::with_budget(d, 400))
        }),
        ("LazyDfa(budget=3000)", |d| {
            Box::new(LazyDfa::with_budget(d, 3000))
        }),
        // Result caches smaller than the topic space, so entries are evicted; the first two
        // store on every miss (admission would turn a cache off on these mostly-cold
        // workloads and test the bypass instead, as the third does).
        ("Cached<CSTrie>(cache=4, always)", |d| {
            Box::new(Cached::new(CSTrie::new(d), 4).without_admission())
        }),
        ("Cached<Trie>(cache=8, always)", |d| {
            Box::new(Cached::new(Trie::new(d), 8).without_admission())
        }),
        ("Cached<CSTrie>(cache=16)", |d| {
            Box::new(Cached::new(CSTrie::new(d), 16))
        }),
        // What every Python matcher is: shared subscriptions in front, with no group here.
        ("Grouped<Cached<CSTrie>>(cache=16)", |d| {
            Box::new(Grouped::new(Cached::new(CSTrie::new(d), 16)))
        }),
    ]
}

#[test]
fn every_matcher_equals_the_oracle_in_every_dialect() {
    for (name, make) in matchers() {
        for d in Dialect::ALL {
            let mut runner = TestRunner::new(Config {
                cases: CASES,
                failure_persistence: None,
                ..Config::default()
            });
            let total = std::cell::Cell::new(0usize);
            let result = runner.run(&ops(d, 400), |ops| {
                total.set(total.get() + agree_with_oracle(make(d).as_ref(), &ops)?);
                Ok(())
            });
            if let Err(e) = result {
                panic!("{name} ({d}) differs from the oracle: {e}");
            }
            let total = total.get();
            assert!(
                total > 100_000,
                "{name} ({d}): only {total} lookups compared"
            );
        }
    }
}

/// Long answers (crowds of subscribers on one pattern, lookups repeated), which the bitmap
/// matcher keeps in its entries and the result caches copy, equal the oracle's.
#[test]
fn large_answers_equal_the_oracle_in_every_dialect() {
    for (name, make) in matchers() {
        for d in Dialect::ALL {
            let mut runner = TestRunner::new(Config {
                cases: 150,
                failure_persistence: None,
                ..Config::default()
            });
            let long = std::cell::Cell::new(0usize);
            let result = runner.run(&crowd_ops(d, 40), |ops| {
                let m = make(d);
                agree_with_oracle(m.as_ref(), &ops)?;
                let topics = ops.iter().filter_map(|op| match op {
                    common::Op::Lookup(t) => Some(t),
                    _ => None,
                });
                long.set(
                    long.get()
                        + topics
                            .filter(|t| m.lookup_str(t).is_ok_and(|r| r.len() >= 32))
                            .count(),
                );
                Ok(())
            });
            if let Err(e) = result {
                panic!("{name} ({d}) differs from the oracle on long answers: {e}");
            }
            assert!(
                long.get() > 500,
                "{name} ({d}): only {} long answers",
                long.get()
            );
        }
    }
}

/// An invalid pattern is never there, and writing it is an error that changes nothing, on
/// every matcher and on the way through a result cache, whatever valid pairs are held.
#[test]
fn an_invalid_pattern_is_never_there_and_never_written() {
    let invalid = [
        (Dialect::Mqtt, "a/#/b"),
        (Dialect::Mqtt, "a/b+"),
        (Dialect::Mqtt, ""),
        (Dialect::Mqtt, "a/\u{0}"),
        (Dialect::Nats, "a..b"),
        (Dialect::Nats, ""),
        (Dialect::Nats, ">.a"),
        (Dialect::Nats, "a b"),
    ];
    for (name, make) in matchers() {
        for (d, text) in invalid {
            let m = make(d);
            for valid in ["a", "a/b", "a.b", "#", ">", "*", "+"] {
                let _ = m.subscribe_str(valid, 1);
            }
            let len = m.len();
            assert!(!m.contains(text, 1), "{name} ({d}) contains {text:?}");
            assert!(m.subscribe_str(text, 1).is_err(), "{name} ({d}) {text:?}");
            assert!(m.unsubscribe_str(text, 1).is_err(), "{name} ({d}) {text:?}");
            assert_eq!(m.len(), len, "{name} ({d}) {text:?}");
        }
    }
}

/// One step of a workload of loads: many pairs at once, or a single write or lookup between.
#[derive(Clone, Debug)]
enum Step {
    Load(Vec<(String, SubscriberId)>),
    Unsubscribe(String, SubscriberId),
    Lookup(String),
}

/// Loads of many pairs (`subscribe_each_str`: one hold of the `Trie`'s lock for many, one
/// write on every topic for a result cache past its bulk size) equal the same pairs written
/// one at a time to the oracle: what each load says was new, and every lookup after it, on
/// every matcher and in every dialect, with answers cached between the loads.
#[test]
fn loads_of_many_pairs_equal_pair_by_pair_writes() {
    for (name, make) in matchers() {
        for d in Dialect::ALL {
            let step = prop_oneof![
                2 => prop::collection::vec((common::pattern(d), 0..6u32), 1..150)
                    .prop_map(Step::Load),
                1 => (common::pattern(d), 0..6u32).prop_map(|(p, s)| Step::Unsubscribe(p, s)),
                4 => common::topic(d).prop_map(Step::Lookup),
            ];
            let mut runner = TestRunner::new(Config {
                cases: 120,
                failure_persistence: None,
                ..Config::default()
            });
            let result = runner.run(&prop::collection::vec(step, 1..30), |steps| {
                let m = make(d);
                let oracle = NaiveMatcher::new(d);
                for step in &steps {
                    match step {
                        Step::Load(pairs) => {
                            let refs: Vec<(&str, SubscriberId)> =
                                pairs.iter().map(|(p, s)| (p.as_str(), *s)).collect();
                            let mut added = Vec::new();
                            let got = m.subscribe_each_str(&refs, &mut added);
                            // The oracle one pair at a time, up to the first invalid pattern.
                            let (mut want, mut outcome) = (Vec::new(), Ok(()));
                            for (p, s) in pairs {
                                match oracle.subscribe_str(p, *s) {
                                    Ok(new) => want.push(new),
                                    Err(e) => {
                                        outcome = Err(e);
                                        break;
                                    }
                                }
                            }
                            prop_assert_eq!(got, outcome, "load of {:?}", pairs);
                            prop_assert_eq!(added, want, "load of {:?}", pairs);
                        }
                        Step::Unsubscribe(p, s) => {
                            prop_assert_eq!(m.unsubscribe_str(p, *s), oracle.unsubscribe_str(p, *s))
                        }
                        Step::Lookup(t) => {
                            let sorted = |r: Vec<SubscriberId>| {
                                let mut r = r;
                                r.sort_unstable();
                                r
                            };
                            prop_assert_eq!(
                                m.lookup_str(t).map(sorted),
                                oracle.lookup_str(t).map(sorted),
                                "lookup {:?}",
                                t
                            );
                        }
                    }
                }
                prop_assert_eq!(m.len(), oracle.len());
                Ok(())
            });
            if let Err(e) = result {
                panic!("{name} ({d}): a load differs from pair-by-pair writes: {e}");
            }
        }
    }
}

/// A load stops at its first invalid pattern with that pattern's error: the pairs before it
/// are in and told, the rest are not tried, whether the load is small or past a result
/// cache's bulk size.
#[test]
fn a_load_stops_at_its_first_invalid_pattern() {
    for (name, make) in matchers() {
        for n in [3, 200] {
            let m = make(Dialect::Mqtt);
            let patterns: Vec<String> = (0..n).map(|i| format!("a/{i}/+")).collect();
            let mut pairs: Vec<(&str, SubscriberId)> =
                patterns.iter().map(|p| (p.as_str(), 1)).collect();
            pairs.insert(n / 2, ("a/#/b", 1));
            let mut added = Vec::new();
            let err = m.subscribe_each_str(&pairs, &mut added);
            assert_eq!(
                err,
                Err(Dialect::Mqtt.parse_pattern("a/#/b").unwrap_err()),
                "{name}, {n} pairs"
            );
            assert_eq!(added, vec![true; n / 2], "{name}, {n} pairs");
            assert_eq!(m.len(), n / 2, "{name}, {n} pairs");
            assert_eq!(
                m.lookup_str(&format!("a/{}/x", n / 2 - 1)).unwrap(),
                vec![1]
            );
            assert!(m.lookup_str(&format!("a/{}/x", n / 2)).unwrap().is_empty());
        }
    }
}
