//! Every matcher equals the naive oracle on random workloads, in every dialect.

mod common;

use common::{agree_with_oracle, ops, Factory};
use proptest::test_runner::{Config, TestRunner};
use topicmatch::{CSTrie, Dialect, Matcher, Trie};

/// Cases per dialect; each case holds up to 400 operations, about half of them lookups, so
/// every matcher is compared on well over 100,000 lookups per dialect.
const CASES: u32 = 1300;

fn matchers() -> Vec<(&'static str, Factory)> {
    vec![
        ("Trie", |d| Box::new(Trie::new(d)) as Box<dyn Matcher>),
        ("CSTrie", |d| Box::new(CSTrie::new(d)) as Box<dyn Matcher>),
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
