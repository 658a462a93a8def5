//! Bitmap matchers under concurrent writers and readers: each thread owns its subscribers, so
//! at every moment its own view is known exactly. Every lookup must agree with the thread's own
//! oracle on that thread's subscribers (so a stale cache entry or a torn read shows up at once),
//! and the final state must equal the oracle fed every thread's operations.

mod common;

use common::{ops, Op};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use topicmatch::{
    Dialect, HeadersMatcher, InvertedBitmap, LevelBitmap, MatchMode, Matcher, NaiveMatcher,
    SubscriberId,
};

const THREADS: u32 = 4;
const ROUNDS: usize = 40;
/// Subscriber ids of thread `t` are `t * STRIDE + 0..6`.
const STRIDE: u32 = 100;

fn owned(t: u32, ids: Vec<SubscriberId>) -> Vec<SubscriberId> {
    let mut v: Vec<SubscriberId> = ids.into_iter().filter(|id| id / STRIDE == t).collect();
    v.sort_unstable();
    v
}

fn remap(op: &Op, t: u32) -> Op {
    let id = |s: &SubscriberId| s + t * STRIDE;
    match op {
        Op::Subscribe(p, s) => Op::Subscribe(p.clone(), id(s)),
        Op::Unsubscribe(p, s) => Op::Unsubscribe(p.clone(), id(s)),
        Op::RemoveSubscriber(s) => Op::RemoveSubscriber(id(s)),
        Op::Lookup(topic) => Op::Lookup(topic.clone()),
    }
}

fn apply(m: &dyn Matcher, op: &Op) -> Option<Vec<SubscriberId>> {
    match op {
        Op::Subscribe(p, s) => {
            let _ = m.subscribe_str(p, *s);
        }
        Op::Unsubscribe(p, s) => {
            let _ = m.unsubscribe_str(p, *s);
        }
        Op::RemoveSubscriber(s) => {
            m.remove_subscriber(*s);
        }
        Op::Lookup(topic) => return m.lookup_str(topic).ok(),
    }
    None
}

fn run(name: &str, make: fn(Dialect) -> Box<dyn Matcher>) {
    let mut runner = TestRunner::deterministic();
    for d in Dialect::ALL {
        for round in 0..ROUNDS {
            let m = make(d);
            let workloads: Vec<Vec<Op>> = (0..THREADS)
                .map(|t| {
                    let w = ops(d, 400).new_tree(&mut runner).unwrap().current();
                    w.iter().map(|op| remap(op, t)).collect()
                })
                .collect();
            std::thread::scope(|s| {
                for (t, work) in workloads.iter().enumerate() {
                    let m = m.as_ref();
                    s.spawn(move || {
                        let mine = NaiveMatcher::new(d);
                        for op in work {
                            let want = apply(&mine, op);
                            let got = apply(m, op);
                            if let (Some(got), Some(want)) = (got, want) {
                                assert_eq!(
                                    owned(t as u32, got),
                                    owned(t as u32, want),
                                    "{name} ({d}) round {round}: thread {t}, {op:?}"
                                );
                            }
                        }
                    });
                }
            });
            let oracle = NaiveMatcher::new(d);
            for op in workloads.iter().flatten() {
                apply(&oracle, op);
            }
            assert_eq!(m.len(), oracle.len(), "{name} ({d})");
            let (mut got, mut want) = (m.subscriptions(), oracle.subscriptions());
            got.sort();
            want.sort();
            assert_eq!(got, want, "{name} ({d})");
            for op in workloads.iter().flatten() {
                if let Op::Lookup(topic) = op {
                    let (Ok(mut got), Ok(mut want)) =
                        (m.lookup_str(topic), oracle.lookup_str(topic))
                    else {
                        continue;
                    };
                    got.sort_unstable();
                    want.sort_unstable();
                    assert_eq!(got, want, "{name} ({d}) final lookup {topic:?}");
                }
            }
        }
    }
}

#[test]
fn inverted_bitmap_stays_exact_under_concurrent_writes() {
    run("InvertedBitmap", |d| Box::new(InvertedBitmap::new(d)));
}

#[test]
fn inverted_bitmap_with_a_tiny_cache_stays_exact_under_concurrent_writes() {
    run("InvertedBitmap(cache=3)", |d| {
        Box::new(InvertedBitmap::with_cache_size(d, 3))
    });
}

#[test]
fn level_bitmap_stays_exact_under_concurrent_writes() {
    run("LevelBitmap", |d| Box::new(LevelBitmap::new(d)));
}

#[test]
fn headers_matcher_serves_readers_during_writes() {
    let m = HeadersMatcher::new();
    let crit = |i: u32| vec![("k".to_string(), Some(i.to_string()))];
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let m = &m;
            s.spawn(move || {
                for i in 0..300 {
                    let id = t * STRIDE + i % 7;
                    assert!(m.subscribe(&crit(i), id, MatchMode::All));
                    let v = i.to_string();
                    let got = owned(t, m.lookup(&[("k", &v)]));
                    assert_eq!(got, vec![id]);
                    assert!(m.unsubscribe(&crit(i), id, MatchMode::All));
                    assert!(owned(t, m.lookup(&[("k", &v)])).is_empty());
                    m.subscribe(&crit(i % 5), id, MatchMode::Any);
                }
            });
        }
    });
    assert_eq!(m.len(), (THREADS * 5 * 7) as usize);
}

/// Writers churn patterns, so pattern numbers are freed and reused all the time, while
/// readers look up topics: subscribers of patterns that never match must never appear, and
/// the subscribers subscribed before the threads started must always appear.
fn churn(name: &str, m: &dyn Matcher) {
    let topics = ["s.x", "s.y.z", "t"];
    // Stable: ids 0..3, matching every topic.
    for (i, p) in ["#", "*.#", "#.*"].iter().enumerate() {
        m.subscribe_str(p, i as u32).unwrap();
    }
    let never = &(1_000..2_000u32); // patterns matching none of the topics
    let maybe = &(2_000..3_000u32); // patterns matching some
    std::thread::scope(|s| {
        for w in 0..2u32 {
            s.spawn(move || {
                for i in 0..1_500u32 {
                    let (never_p, maybe_p) = (format!("n{}.#", i % 13), format!("s.#.{}", i % 3));
                    let (a, b) = (1_000 + w * 100 + i % 50, 2_000 + w * 100 + i % 50);
                    m.subscribe_str(&never_p, a).unwrap();
                    m.subscribe_str(&maybe_p, b).unwrap();
                    m.unsubscribe_str(&never_p, a).unwrap();
                    if i % 3 == 0 {
                        m.remove_subscriber(b);
                    }
                }
            });
        }
        for r in 0..2usize {
            s.spawn(move || {
                for i in 0..6_000usize {
                    let got = m.lookup_str(topics[(i + r) % topics.len()]).unwrap();
                    for id in 0..3 {
                        assert!(
                            got.contains(&id),
                            "{name}: stable {id} missing from {got:?}"
                        );
                    }
                    assert!(
                        !got.iter().any(|id| never.contains(id)),
                        "{name}: a never-matching subscriber in {got:?}"
                    );
                    assert!(got.iter().all(|id| *id < 3 || maybe.contains(id)));
                }
            });
        }
    });
}

#[test]
fn reused_pattern_numbers_never_leak_into_lookups() {
    churn("InvertedBitmap", &InvertedBitmap::new(Dialect::Amqp));
    churn(
        "InvertedBitmap(cache=2)",
        &InvertedBitmap::with_cache_size(Dialect::Amqp, 2),
    );
    churn("LevelBitmap", &LevelBitmap::new(Dialect::Amqp));
}
