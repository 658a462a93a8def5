//! `TopicStore` against a scan: a `BTreeMap` of the same topics, each tested with the reference
//! matcher, on random sets, deletes, gets and filter lookups in every dialect; and writers
//! beside readers that must never see a topic twice or a value that was never set.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{pattern, topic};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use topicmatch::{reference, Dialect, TopicStore};

#[derive(Clone, Debug)]
enum Op {
    Set(String, u32),
    Delete(String),
    Get(String),
    Match(String),
}

fn ops(d: Dialect) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (topic(d), 0..100u32).prop_map(|(t, v)| Op::Set(t, v)),
        2 => topic(d).prop_map(Op::Delete),
        1 => topic(d).prop_map(Op::Get),
        4 => pattern(d).prop_map(Op::Match),
    ];
    prop::collection::vec(op, 1..120)
}

#[test]
fn the_store_equals_a_scan_in_every_dialect() {
    for d in Dialect::ALL {
        let mut runner = TestRunner::new(Config {
            cases: 400,
            failure_persistence: None,
            ..Config::default()
        });
        let result = runner.run(&ops(d), |ops| {
            let store = TopicStore::new(d);
            let mut scan: BTreeMap<String, u32> = BTreeMap::new();
            for op in &ops {
                match op {
                    Op::Set(t, v) => {
                        let Ok(parsed) = d.parse_topic(t) else {
                            continue;
                        };
                        prop_assert_eq!(store.set(&parsed, *v), scan.insert(t.clone(), *v));
                    }
                    Op::Delete(t) => {
                        let Ok(parsed) = d.parse_topic(t) else {
                            continue;
                        };
                        prop_assert_eq!(store.delete(&parsed), scan.remove(t));
                    }
                    Op::Get(t) => {
                        let Ok(parsed) = d.parse_topic(t) else {
                            continue;
                        };
                        prop_assert_eq!(store.get(&parsed), scan.get(t).copied());
                    }
                    Op::Match(p) => {
                        let Ok(parsed) = d.parse_pattern(p) else {
                            continue;
                        };
                        let mut got = store.matching(&parsed);
                        got.sort();
                        let want: Vec<(String, u32)> = scan
                            .iter()
                            .filter(|(t, _)| reference::matches(d, p, t).unwrap())
                            .map(|(t, v)| (t.clone(), *v))
                            .collect();
                        prop_assert_eq!(got, want, "{} ({})", p, d);
                    }
                }
                prop_assert_eq!(store.len(), scan.len());
            }
            let mut items = store.items();
            items.sort();
            let want: Vec<(String, u32)> = scan.into_iter().collect();
            prop_assert_eq!(items, want);
            Ok(())
        });
        if let Err(e) = result {
            panic!("{d}: {e}");
        }
    }
}

/// Two readers match `#` and a wildcard filter while a writer sets and deletes topics whose
/// value is their own number: every answer holds each topic once, with its own value.
#[test]
fn readers_beside_a_writer_see_whole_answers() {
    let d = Dialect::Mqtt;
    let store: Arc<TopicStore<usize>> = Arc::new(TopicStore::new(d));
    let topics: Vec<String> = (0..400).map(|i| format!("s/{}/{i}", i % 7)).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = ["#", "s/+/#", "s/3/+"]
        .into_iter()
        .map(|f| {
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            std::thread::spawn(move || {
                let p = d.parse_pattern(f).unwrap();
                let mut rounds = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || rounds < 10 {
                    let got = store.matching(&p);
                    let mut seen = std::collections::HashSet::new();
                    for (t, v) in &got {
                        assert!(seen.insert(t.clone()), "{t} answered twice");
                        assert_eq!(t.rsplit('/').next().unwrap(), v.to_string());
                        assert!(reference::matches(d, f, t).unwrap());
                    }
                    rounds += 1;
                }
            })
        })
        .collect();
    for round in 0..30 {
        for (i, t) in topics.iter().enumerate() {
            let parsed = d.parse_topic(t).unwrap();
            if (i + round) % 3 == 0 {
                store.delete(&parsed);
            } else {
                store.set(&parsed, i);
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
}
