//! `SelectorIndex` equals a brute-force oracle (test every selector of every subscriber against
//! every topic of the update) on random workloads that interleave subscribes, unsubscribes,
//! subscriber removals and lookups, with caches smaller than the topic space.

use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use topicmatch::{Selector, SelectorIndex};

/// Selectors of every kind, overlapping on the topics below.
const SELECTORS: &[&str] = &[
    "*",
    "a/1",
    "a/{x}",
    "a{/x*}",
    "re:a/[12]",
    "b/{x}",
    "re:b/.*",
    "{+any}",
    "a/{x}/c",
    "re:.*2",
    "a/{x:1}",
    "a/{x}{?q}",
];

/// More topics than the smallest caches hold.
const TOPICS: &[&str] = &[
    "a/1", "a/2", "a/3", "a/22", "b/1", "a/1/c", "a/x/y", "c", "a/1?q=2", "b/2",
];

/// External subscriber ids, sparse on purpose: the index maps them to dense slots.
const SUBSCRIBERS: &[u32] = &[0, 5, 17, 1000, u32::MAX, 3, 42];

#[derive(Clone, Debug)]
enum Op {
    Subscribe(usize, usize),
    Unsubscribe(usize, usize),
    Remove(usize),
    Lookup(Vec<usize>),
}

fn op() -> impl Strategy<Value = Op> {
    let sel = 0..SELECTORS.len();
    let sub = 0..SUBSCRIBERS.len();
    prop_oneof![
        4 => (sel.clone(), sub.clone()).prop_map(|(a, b)| Op::Subscribe(a, b)),
        2 => (sel, sub.clone()).prop_map(|(a, b)| Op::Unsubscribe(a, b)),
        1 => sub.prop_map(Op::Remove),
        6 => prop::collection::vec(0..TOPICS.len(), 0..4).prop_map(Op::Lookup),
    ]
}

/// The oracle: a set of pairs, every selector tested on every lookup.
#[derive(Default)]
struct BruteForce {
    pairs: BTreeSet<(String, u32)>,
    compiled: HashMap<String, Selector>,
}

impl BruteForce {
    fn lookup(&mut self, topics: &[&str]) -> Vec<u32> {
        let mut out = BTreeSet::new();
        for (sel, sub) in &self.pairs {
            let s = self
                .compiled
                .entry(sel.clone())
                .or_insert_with(|| Selector::parse(sel).unwrap());
            if topics.iter().any(|t| s.admits(t)) {
                out.insert(*sub);
            }
        }
        out.into_iter().collect()
    }
}

fn agree(cache: usize, ops: &[Op]) -> Result<usize, TestCaseError> {
    let idx = SelectorIndex::with_cache_size(cache);
    let mut oracle = BruteForce::default();
    let mut lookups = 0;
    for op in ops {
        match op {
            Op::Subscribe(s, b) => {
                let (sel, sub) = (SELECTORS[*s], SUBSCRIBERS[*b]);
                let want = oracle.pairs.insert((sel.to_owned(), sub));
                prop_assert_eq!(idx.subscribe(sel, sub).unwrap(), want, "{:?}", op);
            }
            Op::Unsubscribe(s, b) => {
                let (sel, sub) = (SELECTORS[*s], SUBSCRIBERS[*b]);
                let want = oracle.pairs.remove(&(sel.to_owned(), sub));
                prop_assert_eq!(idx.unsubscribe(sel, sub).unwrap(), want, "{:?}", op);
            }
            Op::Remove(b) => {
                let sub = SUBSCRIBERS[*b];
                let before = oracle.pairs.len();
                oracle.pairs.retain(|(_, s)| *s != sub);
                prop_assert_eq!(idx.remove_subscriber(sub), before - oracle.pairs.len());
            }
            Op::Lookup(ts) => {
                let topics: Vec<&str> = ts.iter().map(|&t| TOPICS[t]).collect();
                let mut got = idx.lookup(&topics);
                got.sort_unstable();
                let n = got.len();
                got.dedup();
                prop_assert_eq!(n, got.len(), "duplicates in {:?}", got);
                prop_assert_eq!(got, oracle.lookup(&topics), "{:?}", topics);
                lookups += 1;
            }
        }
        prop_assert_eq!(idx.len(), oracle.pairs.len());
    }
    idx.validate();
    let mut subs = idx.subscriptions();
    subs.sort();
    prop_assert_eq!(subs, oracle.pairs.iter().cloned().collect::<Vec<_>>());
    // Every topic, after the whole history, still agrees.
    for t in TOPICS {
        let mut got = idx.lookup(&[t]);
        got.sort_unstable();
        prop_assert_eq!(got, oracle.lookup(&[t]), "final {}", t);
    }
    Ok(lookups)
}

#[test]
fn the_index_equals_brute_force_with_small_and_no_caches() {
    // 4096 splits the cache into shards; the others are one exact LRU.
    for cache in [3, 1, 0, 1000, 4096] {
        let mut runner = TestRunner::new(Config {
            cases: 400,
            failure_persistence: None,
            ..Config::default()
        });
        let total = std::cell::Cell::new(0usize);
        let result = runner.run(&prop::collection::vec(op(), 1..300), |ops| {
            total.set(total.get() + agree(cache, &ops)?);
            Ok(())
        });
        if let Err(e) = result {
            panic!("cache {cache}: SelectorIndex differs from brute force: {e}");
        }
        assert!(
            total.get() > 20_000,
            "cache {cache}: only {} lookups",
            total.get()
        );
    }
}
