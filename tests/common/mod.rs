//! Shared by the integration tests: random workloads in every dialect, and a driver that runs
//! one against any matcher and the naive oracle side by side.
#![allow(dead_code)]

use proptest::prelude::*;
use topicmatch::{Dialect, Matcher, NaiveMatcher, SubscriberId};

/// A small alphabet so that random patterns and topics collide often; it holds the empty word,
/// a `$` word and words that look like wildcards.
pub fn alphabet(d: Dialect) -> Vec<&'static str> {
    match d {
        Dialect::Amqp => vec!["a", "b", "c", "", "$s", "a*", "x#"],
        Dialect::Mqtt => vec!["a", "b", "c", "", "$s", "ab"],
        Dialect::Nats => vec!["a", "b", "c", "$s", "a*", "b>"],
    }
}

fn join(d: Dialect, words: Vec<String>) -> String {
    words.join(&(d.separator() as char).to_string())
}

/// Random patterns of up to 6 words; `#`/`>` anywhere for AMQP, last for the others.
pub fn pattern(d: Dialect) -> impl Strategy<Value = String> {
    let mut choices: Vec<String> = alphabet(d).into_iter().map(String::from).collect();
    choices.push(d.one_word().into());
    choices.push(d.one_word().into());
    if d == Dialect::Amqp {
        choices.push("#".into());
        choices.push("#".into());
    }
    let body = prop::collection::vec(prop::sample::select(choices), 0..6);
    (body, prop::bool::weighted(0.3)).prop_map(move |(mut words, many)| {
        if many && d != Dialect::Amqp {
            words.push(d.many_words().into());
        }
        if words.is_empty() && d != Dialect::Amqp {
            words.push(d.many_words().into());
        }
        join(d, words)
    })
}

/// Random topics of up to 7 words.
pub fn topic(d: Dialect) -> impl Strategy<Value = String> {
    let words: Vec<String> = alphabet(d).into_iter().map(String::from).collect();
    let min = if d == Dialect::Amqp { 0 } else { 1 };
    prop::collection::vec(prop::sample::select(words), min..7).prop_map(move |w| join(d, w))
}

/// One step of a workload.
#[derive(Clone, Debug)]
pub enum Op {
    Subscribe(String, SubscriberId),
    Unsubscribe(String, SubscriberId),
    RemoveSubscriber(SubscriberId),
    Lookup(String),
}

/// Random workloads mixing writes and lookups, over a few subscribers.
pub fn ops(d: Dialect, len: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (pattern(d), 0..6u32).prop_map(|(p, s)| Op::Subscribe(p, s)),
        2 => (pattern(d), 0..6u32).prop_map(|(p, s)| Op::Unsubscribe(p, s)),
        1 => (0..6u32).prop_map(Op::RemoveSubscriber),
        6 => topic(d).prop_map(Op::Lookup),
    ];
    prop::collection::vec(op, 1..len)
}

/// Workloads of crowds: up to 60 subscribers joining one pattern at once (half the time one
/// that matches most topics), single unsubscribes and removals, and each lookup made twice,
/// so that answers are long and repeat (matchers keep long answers: this checks them).
pub fn crowd_ops(d: Dialect, len: usize) -> impl Strategy<Value = Vec<Op>> {
    let many = d.many_words();
    let broad = prop::sample::select(vec![
        many.to_string(),
        join(d, vec![d.one_word().to_string(), many.to_string()]),
    ]);
    let crowd_pattern = prop_oneof![pattern(d), broad];
    let step = prop_oneof![
        2 => (crowd_pattern, 0..100u32, 1..60u32).prop_map(|(p, s, n)| {
            (s..s + n).map(|i| Op::Subscribe(p.clone(), i)).collect::<Vec<_>>()
        }),
        3 => (pattern(d), 0..160u32).prop_map(|(p, s)| vec![Op::Unsubscribe(p, s)]),
        1 => (0..160u32).prop_map(|s| vec![Op::RemoveSubscriber(s)]),
        6 => topic(d).prop_map(|t| vec![Op::Lookup(t.clone()), Op::Lookup(t)]),
    ];
    prop::collection::vec(step, 1..len).prop_map(|v| v.into_iter().flatten().collect())
}

fn sorted(mut v: Vec<SubscriberId>) -> Vec<SubscriberId> {
    v.sort_unstable();
    v
}

/// Runs `ops` against `m` and the oracle, failing on the first difference (return values,
/// lookups, sizes, `contains`, the final list of pairs). Returns how many lookups were compared.
pub fn agree_with_oracle(m: &dyn Matcher, ops: &[Op]) -> Result<usize, TestCaseError> {
    let d = m.dialect();
    let oracle = NaiveMatcher::new(d);
    let mut lookups = 0;
    for op in ops {
        match op {
            Op::Subscribe(p, s) => {
                prop_assert_eq!(
                    m.subscribe_str(p, *s),
                    oracle.subscribe_str(p, *s),
                    "subscribe {:?}",
                    p
                )
            }
            Op::Unsubscribe(p, s) => prop_assert_eq!(
                m.unsubscribe_str(p, *s),
                oracle.unsubscribe_str(p, *s),
                "unsubscribe {:?}",
                p
            ),
            Op::RemoveSubscriber(s) => {
                prop_assert_eq!(m.remove_subscriber(*s), oracle.remove_subscriber(*s))
            }
            Op::Lookup(t) => {
                let got = m.lookup_str(t).map(sorted);
                let want = oracle.lookup_str(t).map(sorted);
                if let Ok(ids) = &got {
                    let mut unique = ids.clone();
                    unique.dedup();
                    prop_assert_eq!(&unique, ids, "duplicates in lookup of {:?}", t);
                }
                let interest = want.clone().map(|ids| !ids.is_empty());
                prop_assert_eq!(got, want, "lookup {:?} ({})", t, d);
                prop_assert_eq!(
                    m.has_interest_str(t),
                    interest.clone(),
                    "has_interest {:?}",
                    t
                );
                if let Ok(topic) = d.parse_topic(t) {
                    prop_assert_eq!(Ok(m.has_interest(&topic)), interest.clone());
                }
                lookups += 1;
            }
        }
        prop_assert_eq!(m.len(), oracle.len());
        // Which subscribers hold the op's pattern now (a topic's text read as a pattern,
        // valid or not, for the lookups): the path of a pair present, absent, or half there.
        let text = match op {
            Op::Subscribe(p, _) | Op::Unsubscribe(p, _) => Some(p),
            Op::Lookup(t) => Some(t),
            Op::RemoveSubscriber(_) => None,
        };
        if let Some(text) = text {
            for s in 0..6 {
                prop_assert_eq!(
                    m.contains(text, s),
                    oracle.contains(text, s),
                    "contains {:?} {}",
                    text,
                    s
                );
            }
        }
    }
    let mut got = m.subscriptions();
    let mut want = oracle.subscriptions();
    got.sort();
    want.sort();
    prop_assert_eq!(got, want);
    Ok(lookups)
}

/// A factory for a matcher under test.
pub type Factory = fn(Dialect) -> Box<dyn Matcher>;
