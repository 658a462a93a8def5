//! A read-only snapshot of a `CSTrie`, taken at any point of a random workload, equals the
//! oracle's state at that point whatever is written afterwards, in every dialect; and both the
//! live trie (after every write) and each snapshot keep the invariants `CSTrie::validate` checks.

mod common;

use common::{ops, Op};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use topicmatch::cstrie::Quiescence;
use topicmatch::{CSTrie, Dialect, Matcher, NaiveMatcher};

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// A snapshot, with the oracle's pairs and lookups when it was taken.
type Taken = (CSTrie, Vec<(String, u32)>, Vec<Vec<u32>>);

/// Runs `ops`, snapshotting before every operation whose index is in `at`, and checks each
/// snapshot at the end against the oracle's pairs and lookups at the moment it was taken.
fn snapshots_stay_frozen(d: Dialect, ops: &[Op], every: usize) -> Result<(), TestCaseError> {
    let trie = CSTrie::new(d);
    let oracle = NaiveMatcher::new(d);
    let topics: Vec<&String> = ops
        .iter()
        .filter_map(|op| match op {
            Op::Lookup(t) => Some(t),
            _ => None,
        })
        .collect();
    let mut taken: Vec<Taken> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if i % every == 0 {
            let want_lookups = topics
                .iter()
                .map(|t| oracle.lookup_str(t).map(sorted).unwrap_or_default())
                .collect();
            taken.push((
                trie.snapshot(),
                sorted(oracle.subscriptions()),
                want_lookups,
            ));
        }
        match op {
            Op::Subscribe(p, s) => {
                prop_assert_eq!(trie.subscribe_str(p, *s), oracle.subscribe_str(p, *s))
            }
            Op::Unsubscribe(p, s) => {
                prop_assert_eq!(trie.unsubscribe_str(p, *s), oracle.unsubscribe_str(p, *s))
            }
            Op::RemoveSubscriber(s) => {
                prop_assert_eq!(trie.remove_subscriber(*s), oracle.remove_subscriber(*s))
            }
            Op::Lookup(_) => {}
        }
        // The live trie keeps its invariants after every write, snapshots or not.
        if let Err(e) = trie.validate(Quiescence::Sequential) {
            prop_assert!(false, "after {:?}: {}", op, e);
        }
    }
    for (snap, pairs, lookups) in &taken {
        prop_assert!(snap.is_read_only());
        if let Err(e) = snap.validate(Quiescence::Sequential) {
            prop_assert!(false, "snapshot: {}", e);
        }
        prop_assert_eq!(&sorted(snap.subscriptions()), pairs);
        prop_assert_eq!(snap.len(), pairs.len());
        for (t, want) in topics.iter().zip(lookups) {
            let got = snap.lookup_str(t).map(sorted).unwrap_or_default();
            prop_assert_eq!(&got, want, "lookup {:?} in {}", t, d);
        }
    }
    Ok(())
}

#[test]
fn snapshot_equals_the_oracle_at_its_instant_in_every_dialect() {
    for d in Dialect::ALL {
        let mut runner = TestRunner::new(Config {
            cases: 300,
            failure_persistence: None,
            ..Config::default()
        });
        let result = runner.run(&(ops(d, 120), 1..8usize), |(ops, every)| {
            snapshots_stay_frozen(d, &ops, every)
        });
        if let Err(e) = result {
            panic!("CSTrie snapshot ({d}) differs from the oracle: {e}");
        }
    }
}
