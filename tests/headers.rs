//! `HeadersMatcher` equals a brute-force evaluation of RabbitMQ's headers-exchange rules on
//! random subscriptions, writes and headers.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use proptest::prelude::*;
use topicmatch::{HeadersMatcher, HeadersSubscription, MatchMode, SubscriberId};

type Criterion = (String, Option<String>);

/// Few names and values, so criteria and headers collide often; `x-` names and `x-match`.
const NAMES: &[&str] = &["a", "b", "c", "x-a", "x-match"];
const VALUES: &[&str] = &["1", "2", ""];

fn criterion() -> impl Strategy<Value = Criterion> {
    (
        prop::sample::select(NAMES),
        prop::option::weighted(0.7, prop::sample::select(VALUES)),
    )
        .prop_map(|(n, v)| (n.to_string(), v.map(str::to_string)))
}

fn mode() -> impl Strategy<Value = MatchMode> {
    prop::sample::select(MatchMode::ALL.to_vec())
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let mut names = NAMES.to_vec();
    names.push("d");
    prop::collection::vec(
        (prop::sample::select(names), prop::sample::select(VALUES))
            .prop_map(|(n, v)| (n.to_string(), v.to_string())),
        0..5,
    )
}

#[derive(Clone, Debug)]
enum Op {
    Subscribe(Vec<Criterion>, SubscriberId, MatchMode),
    Unsubscribe(Vec<Criterion>, SubscriberId, MatchMode),
    RemoveSubscriber(SubscriberId),
    Lookup(Vec<(String, String)>),
}

fn op() -> impl Strategy<Value = Op> {
    let crit = || prop::collection::vec(criterion(), 0..4);
    prop_oneof![
        4 => (crit(), 0..5u32, mode()).prop_map(|(c, s, m)| Op::Subscribe(c, s, m)),
        2 => (crit(), 0..5u32, mode()).prop_map(|(c, s, m)| Op::Unsubscribe(c, s, m)),
        1 => (0..5u32).prop_map(Op::RemoveSubscriber),
        6 => headers().prop_map(Op::Lookup),
    ]
}

/// A map from name to value, a later value replacing an earlier one, sorted by name.
fn as_map<V: Clone>(pairs: &[(String, V)]) -> Vec<(String, V)> {
    let map: BTreeMap<String, V> = pairs.iter().cloned().collect();
    map.into_iter().collect()
}

/// RabbitMQ's rules, written out plainly.
fn brute_hits(
    criteria: &[Criterion],
    mode: MatchMode,
    headers: &HashMap<&str, &str>,
) -> (bool, u32) {
    let with_x = matches!(mode, MatchMode::AllWithX | MatchMode::AnyWithX);
    let counted: Vec<&Criterion> = criteria
        .iter()
        .filter(|(n, _)| n != "x-match" && (with_x || !n.starts_with("x-")))
        .collect();
    let hits = counted
        .iter()
        .filter(|(n, v)| match v {
            None => headers.contains_key(n.as_str()),
            Some(v) => headers.get(n.as_str()) == Some(&v.as_str()),
        })
        .count();
    let matched = match mode {
        MatchMode::All | MatchMode::AllWithX => hits == counted.len(),
        MatchMode::Any | MatchMode::AnyWithX => hits >= 1,
    };
    (matched, hits as u32)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn headers_matcher_equals_brute_force(ops in prop::collection::vec(op(), 1..80)) {
        let m = HeadersMatcher::new();
        let mut model: BTreeSet<(Vec<Criterion>, MatchMode, SubscriberId)> = BTreeSet::new();
        for op in &ops {
            match op {
                Op::Subscribe(c, s, mode) => {
                    let new = model.insert((as_map(c), *mode, *s));
                    prop_assert_eq!(m.subscribe(c, *s, *mode), new);
                }
                Op::Unsubscribe(c, s, mode) => {
                    let was = model.remove(&(as_map(c), *mode, *s));
                    prop_assert_eq!(m.unsubscribe(c, *s, *mode), was);
                }
                Op::RemoveSubscriber(s) => {
                    let before = model.len();
                    model.retain(|(_, _, id)| id != s);
                    prop_assert_eq!(m.remove_subscriber(*s), before - model.len());
                }
                Op::Lookup(h) => {
                    let refs: Vec<(&str, &str)> = h.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                    let map: HashMap<&str, &str> = refs.iter().copied().collect();
                    let mut want: BTreeSet<SubscriberId> = BTreeSet::new();
                    let mut best: BTreeMap<SubscriberId, u32> = BTreeMap::new();
                    for (c, mode, id) in &model {
                        let (matched, hits) = brute_hits(c, *mode, &map);
                        if matched {
                            want.insert(*id);
                        }
                        if hits > 0 {
                            let b = best.entry(*id).or_insert(0);
                            *b = (*b).max(hits);
                        }
                    }
                    prop_assert_eq!(m.lookup(&refs), want.into_iter().collect::<Vec<_>>(), "lookup {:?}", h);
                    prop_assert_eq!(m.hits(&refs), best.into_iter().collect::<Vec<_>>(), "hits {:?}", h);
                }
            }
            prop_assert_eq!(m.len(), model.len());
        }
        let want: Vec<HeadersSubscription> = model
            .iter()
            .map(|(c, mode, id)| HeadersSubscription { criteria: c.clone(), mode: *mode, subscriber: *id })
            .collect();
        let mut want = want;
        want.sort();
        prop_assert_eq!(m.subscriptions(), want);
    }
}
