//! Shared subscriptions and queue groups: every matcher behind `Grouped` against a model on
//! random workloads in every dialect, load sharing over many messages, and members joining and
//! leaving beside lookups on other threads.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use common::{pattern, topic};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use topicmatch::groups::{check_subscription, parse_subscription, Subscription};
use topicmatch::{
    matches, CSTrie, Cached, Dialect, Error, Grouped, InvertedBitmap, LazyDfa, LevelBitmap,
    Matcher, NaiveMatcher, SubscriberId, Trie,
};

type Factory = fn(Dialect) -> Box<dyn GroupedMatcher>;

/// What the tests ask of a `Grouped<M>`, for any `M`.
trait GroupedMatcher: Send + Sync {
    fn m(&self) -> &dyn Matcher;
    fn join(&self, g: &str, p: &str, id: SubscriberId) -> topicmatch::Result<bool>;
    fn leave(&self, g: &str, p: &str, id: SubscriberId) -> topicmatch::Result<bool>;
    fn groups_of(&self, t: &str) -> topicmatch::Result<(Vec<SubscriberId>, Vec<GroupSet>)>;
    fn memberships(&self) -> Vec<(String, String, SubscriberId)>;
}

/// A matched group as the tests compare it: name, filter, sorted members.
type GroupSet = (String, String, Vec<SubscriberId>);

impl<M: Matcher> GroupedMatcher for Grouped<M> {
    fn m(&self) -> &dyn Matcher {
        self
    }
    fn join(&self, g: &str, p: &str, id: SubscriberId) -> topicmatch::Result<bool> {
        Grouped::join(self, g, p, id)
    }
    fn leave(&self, g: &str, p: &str, id: SubscriberId) -> topicmatch::Result<bool> {
        Grouped::leave(self, g, p, id)
    }
    fn groups_of(&self, t: &str) -> topicmatch::Result<(Vec<SubscriberId>, Vec<GroupSet>)> {
        let (mut plain, groups) = self.lookup_groups_str(t)?;
        plain.sort_unstable();
        let mut groups: Vec<GroupSet> = groups
            .into_iter()
            .map(|g| {
                let mut members = g.members;
                members.sort_unstable();
                (g.name.to_string(), g.filter.to_string(), members)
            })
            .collect();
        groups.sort();
        Ok((plain, groups))
    }
    fn memberships(&self) -> Vec<(String, String, SubscriberId)> {
        let mut v: Vec<_> = self
            .group_subscriptions()
            .into_iter()
            .map(|(g, f, id)| (g.to_string(), f.to_string(), id))
            .collect();
        v.sort();
        v
    }
}

fn matchers() -> Vec<(&'static str, Factory)> {
    vec![
        ("Naive", |d| {
            Box::new(Grouped::new(NaiveMatcher::new(d))) as _
        }),
        ("Trie", |d| Box::new(Grouped::new(Trie::new(d))) as _),
        ("CSTrie", |d| Box::new(Grouped::new(CSTrie::new(d))) as _),
        ("LevelBitmap", |d| {
            Box::new(Grouped::new(LevelBitmap::new(d))) as _
        }),
        ("LazyDfa", |d| Box::new(Grouped::new(LazyDfa::new(d))) as _),
        ("LazyDfa(budget=400)", |d| {
            Box::new(Grouped::new(LazyDfa::with_budget(d, 400))) as _
        }),
        ("InvertedBitmap(cache=3)", |d| {
            Box::new(Grouped::new(InvertedBitmap::with_cache_size(d, 3))) as _
        }),
        ("Cached<CSTrie>(cache=4, always)", |d| {
            Box::new(Grouped::new(
                Cached::new(CSTrie::new(d), 4).without_admission(),
            )) as _
        }),
        ("Cached<Trie>(cache=8, always)", |d| {
            Box::new(Grouped::new(
                Cached::new(Trie::new(d), 8).without_admission(),
            )) as _
        }),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Subscribe(String, SubscriberId),
    Unsubscribe(String, SubscriberId),
    Join(&'static str, String, SubscriberId),
    Leave(&'static str, String, SubscriberId),
    RemoveSubscriber(SubscriberId),
    Lookup(String),
}

fn ops(d: Dialect) -> impl Strategy<Value = Vec<Op>> {
    let group = prop::sample::select(vec!["g", "h"]);
    let op = prop_oneof![
        3 => (pattern(d), 0..6u32).prop_map(|(p, s)| Op::Subscribe(p, s)),
        1 => (pattern(d), 0..6u32).prop_map(|(p, s)| Op::Unsubscribe(p, s)),
        4 => (group.clone(), pattern(d), 0..6u32).prop_map(|(g, p, s)| Op::Join(g, p, s)),
        2 => (group, pattern(d), 0..6u32).prop_map(|(g, p, s)| Op::Leave(g, p, s)),
        1 => (0..6u32).prop_map(Op::RemoveSubscriber),
        6 => topic(d).prop_map(Op::Lookup),
    ];
    prop::collection::vec(op, 1..200)
}

/// What the matcher should hold: plain pairs, and each group's members.
#[derive(Default)]
struct Model {
    plain: BTreeSet<(String, SubscriberId)>,
    groups: BTreeMap<(String, String), BTreeSet<SubscriberId>>,
}

impl Model {
    fn lookup_groups(&self, d: Dialect, t: &str) -> (Vec<SubscriberId>, Vec<GroupSet>) {
        let hit = |p: &str| matches(d, p, t).unwrap_or(false);
        let plain: BTreeSet<SubscriberId> = self
            .plain
            .iter()
            .filter(|(p, _)| hit(p))
            .map(|&(_, s)| s)
            .collect();
        let groups = self
            .groups
            .iter()
            .filter(|((_, f), members)| !members.is_empty() && hit(f))
            .map(|((g, f), members)| (g.clone(), f.clone(), members.iter().copied().collect()))
            .collect();
        (plain.into_iter().collect(), groups)
    }

    fn len(&self) -> usize {
        self.plain.len() + self.groups.values().map(BTreeSet::len).sum::<usize>()
    }
}

fn agree_with_model(m: &dyn GroupedMatcher, ops: &[Op]) -> Result<(), TestCaseError> {
    let d = m.m().dialect();
    let mut model = Model::default();
    for op in ops {
        let written = match op {
            Op::Subscribe(p, _)
            | Op::Unsubscribe(p, _)
            | Op::Join(_, p, _)
            | Op::Leave(_, p, _) => Some(p),
            _ => None,
        };
        if let Some(p) = written.filter(|p| d.check_pattern(p).is_err()) {
            // Refused with a typed error, changing nothing.
            let result = match op {
                Op::Subscribe(_, s) => m.m().subscribe_str(p, *s),
                Op::Unsubscribe(_, s) => m.m().unsubscribe_str(p, *s),
                Op::Join(g, _, s) => m.join(g, p, *s),
                Op::Leave(g, _, s) => m.leave(g, p, *s),
                _ => unreachable!(),
            };
            prop_assert!(matches!(result, Err(Error::InvalidPattern(_))));
            prop_assert_eq!(m.m().len(), model.len());
            continue;
        }
        match op {
            Op::Subscribe(p, s) => {
                let want = model.plain.insert((p.clone(), *s));
                prop_assert_eq!(m.m().subscribe_str(p, *s), Ok(want), "subscribe {:?}", p);
            }
            Op::Unsubscribe(p, s) => {
                let want = model.plain.remove(&(p.clone(), *s));
                prop_assert_eq!(m.m().unsubscribe_str(p, *s), Ok(want));
            }
            Op::Join(g, p, s) => {
                let members = model.groups.entry((g.to_string(), p.clone())).or_default();
                prop_assert_eq!(m.join(g, p, *s), Ok(members.insert(*s)));
                // The same membership, written the MQTT way, is already there.
                if d == Dialect::Mqtt {
                    let shared = format!("$share/{g}/{p}");
                    prop_assert_eq!(m.m().subscribe_str(&shared, *s), Ok(false));
                    prop_assert!(m.m().contains(&shared, *s));
                }
            }
            Op::Leave(g, p, s) => {
                let key = (g.to_string(), p.clone());
                let want = model.groups.get_mut(&key).is_some_and(|ms| ms.remove(s));
                prop_assert_eq!(m.leave(g, p, *s), Ok(want));
            }
            Op::RemoveSubscriber(s) => {
                let before = model.len();
                model.plain.retain(|(_, id)| id != s);
                for members in model.groups.values_mut() {
                    members.remove(s);
                }
                prop_assert_eq!(m.m().remove_subscriber(*s), before - model.len());
            }
            Op::Lookup(t) if d.parse_topic(t).is_err() => {
                prop_assert!(matches!(m.groups_of(t), Err(Error::InvalidTopic(_))));
                prop_assert!(m.m().lookup_str(t).is_err());
            }
            Op::Lookup(t) => {
                let (plain, groups) = model.lookup_groups(d, t);
                prop_assert_eq!(m.groups_of(t), Ok((plain.clone(), groups.clone())));
                let got = m.m().lookup_str(t).expect("a valid topic");
                let got_set: BTreeSet<SubscriberId> = got.iter().copied().collect();
                prop_assert_eq!(got_set.len(), got.len(), "a subscriber twice in {:?}", got);
                let plain: BTreeSet<SubscriberId> = plain.into_iter().collect();
                prop_assert!(got_set.is_superset(&plain), "plain subscribers missing");
                for extra in got_set.difference(&plain) {
                    prop_assert!(
                        groups.iter().any(|(_, _, ms)| ms.contains(extra)),
                        "{} is in no matched group",
                        extra
                    );
                }
                for (g, f, members) in &groups {
                    prop_assert!(
                        members.iter().any(|s| got_set.contains(s)),
                        "no member of {}/{} in {:?}",
                        g,
                        f,
                        got
                    );
                }
                let interest = !got.is_empty();
                prop_assert_eq!(m.m().has_interest_str(t), Ok(interest));
            }
        }
        prop_assert_eq!(m.m().len(), model.len());
    }
    let mut plain = m.m().subscriptions();
    plain.sort();
    prop_assert_eq!(plain, model.plain.iter().cloned().collect::<Vec<_>>());
    let memberships: Vec<_> = model
        .groups
        .iter()
        .flat_map(|((g, f), ms)| ms.iter().map(|&s| (g.clone(), f.clone(), s)))
        .collect();
    prop_assert_eq!(m.memberships(), memberships);
    Ok(())
}

#[test]
fn every_matcher_with_groups_equals_the_model_in_every_dialect() {
    for (name, make) in matchers() {
        for d in Dialect::ALL {
            let mut runner = TestRunner::new(Config {
                cases: 200,
                failure_persistence: None,
                ..Config::default()
            });
            if let Err(e) = runner.run(&ops(d), |ops| agree_with_model(make(d).as_ref(), &ops)) {
                panic!("{name} ({d}) differs from the model: {e}");
            }
        }
    }
}

/// MQTT 5 section 4.8.2: what a `$share/` filter is, and what is not one.
#[test]
fn shared_filters_follow_mqtt_5() {
    let shared = |text| match parse_subscription(Dialect::Mqtt, text) {
        Ok(Subscription::Shared { group, filter }) => Ok(Some((group, filter))),
        Ok(Subscription::Plain(_)) => Ok(None),
        Err(e) => Err(e),
    };
    assert_eq!(shared("$share/g/a/+"), Ok(Some(("g", "a/+"))));
    assert_eq!(shared("$share/g/#"), Ok(Some(("g", "#"))));
    assert_eq!(
        shared("$share/consumer1//finance"),
        Ok(Some(("consumer1", "/finance")))
    );
    assert_eq!(
        shared("$share/g1/topic/$share"),
        Ok(Some(("g1", "topic/$share")))
    );
    for plain in ["$share", "$Share/g/x", "$sharefoo/x", "a/$share/g/x"] {
        assert_eq!(shared(plain), Ok(None), "{plain}");
    }
    for bad in [
        "$share/",
        "$share//t",
        "$share/g",
        "$share/g/",
        "$share/+/t",
        "$share/#/t",
        "$share/a+b/t",
        "$share/g/a/#/b",
        "$share/g1/$share/g2/t",
    ] {
        assert!(
            matches!(shared(bad), Err(Error::InvalidPattern(_))),
            "{bad} is not a valid shared subscription"
        );
    }
    // Other dialects have no `$share/` form: the text is an ordinary pattern.
    assert_eq!(
        parse_subscription(Dialect::Nats, "$share/g/a"),
        Ok(Subscription::Plain("$share/g/a"))
    );
    // Queue names: NATS rejects white space, MQTT the share name's separators.
    assert!(check_subscription(Dialect::Nats, "foo", Some("q 1")).is_err());
    assert!(check_subscription(Dialect::Nats, "foo", Some("")).is_err());
    assert!(check_subscription(Dialect::Nats, "foo", Some("q.1")).is_ok());
    assert!(check_subscription(Dialect::Mqtt, "foo", Some("a/b")).is_err());
    assert!(check_subscription(Dialect::Mqtt, "$share/g/foo", Some("g")).is_err());
    assert!(check_subscription(Dialect::Amqp, "foo.#", Some("any name")).is_ok());
}

#[test]
fn an_invalid_shared_subscription_writes_nothing() {
    let m = Grouped::new(Trie::new(Dialect::Mqtt));
    assert!(m.subscribe_str("$share/g", 1).is_err());
    assert!(m.join("g", "a/#/b", 1).is_err());
    assert!(m.join("g/h", "a", 1).is_err());
    assert!(m.join("g", "$share/h/a", 1).is_err());
    assert!(m.is_empty());
    assert!(m.group_subscriptions().is_empty());
    assert!(!m.contains("$share/g", 1));
}

/// Over 10,000 messages to a group of 3, each member gets a third.
#[test]
fn members_share_the_load_evenly() {
    for (name, make) in matchers() {
        let m = make(Dialect::Mqtt);
        for s in 1..=3 {
            m.m().subscribe_str("$share/workers/jobs/+", s).unwrap();
        }
        m.m().subscribe_str("jobs/#", 9).unwrap();
        let mut got: HashMap<SubscriberId, usize> = HashMap::new();
        for i in 0..10_000 {
            for s in m.m().lookup_str(&format!("jobs/{}", i % 7)).unwrap() {
                *got.entry(s).or_default() += 1;
            }
        }
        assert_eq!(
            got[&9], 10_000,
            "{name}: the plain subscriber gets every message"
        );
        for s in 1..=3 {
            let share = got[&s] as f64 / 10_000.0;
            assert!(
                (share - 1.0 / 3.0).abs() < 0.02,
                "{name}: member {s} got {share:.3} of the messages"
            );
        }
    }
}

/// Members join and leave between lookups: every message reaches exactly one member that is
/// in the group when it is looked up.
#[test]
fn members_joining_and_leaving_between_lookups_get_each_message_once() {
    for (name, make) in matchers() {
        let m = make(Dialect::Nats);
        let mut members: BTreeSet<SubscriberId> = BTreeSet::new();
        let mut delivered = 0;
        for step in 0..3_000u32 {
            // A deterministic churn: member `step % 5` toggles every seventh step.
            if step % 7 == 0 {
                let s = step / 7 % 5;
                if members.remove(&s) {
                    assert_eq!(m.leave("q", "orders.>", s), Ok(true));
                } else {
                    members.insert(s);
                    assert_eq!(m.join("q", "orders.>", s), Ok(true));
                }
            }
            let got = m.m().lookup_str("orders.eu.1").unwrap();
            if members.is_empty() {
                assert!(
                    got.is_empty(),
                    "{name}: a message with no member to take it"
                );
                continue;
            }
            assert_eq!(got.len(), 1, "{name}: {got:?} for one group");
            assert!(
                members.contains(&got[0]),
                "{name}: {} is not a member",
                got[0]
            );
            delivered += 1;
        }
        assert!(delivered > 2_000, "{name}: {delivered} deliveries");
    }
}

/// One writer makes members join and leave while readers look up on other threads. Member 0
/// stays, so every lookup delivers to exactly one member, and that member was in the group at
/// some instant of the lookup (its join started before the lookup ended, its leave ended
/// after the lookup started). A second group gains and loses all its members: a lookup gets
/// at most one of them.
#[test]
fn lookups_beside_joins_and_leaves_are_linearizable() {
    for (name, make) in matchers() {
        let m: Arc<dyn GroupedMatcher> = Arc::from(make(Dialect::Mqtt));
        m.join("stable", "t/+", 0).unwrap();
        let clock = Arc::new(AtomicU64::new(1));
        let done = Arc::new(AtomicBool::new(false));
        // (member, join started, leave ended) of the churning members.
        let history: Arc<Mutex<Vec<(SubscriberId, u64, u64)>>> = Arc::default();
        let writer = {
            let (m, clock, done, history) =
                (m.clone(), clock.clone(), done.clone(), history.clone());
            std::thread::spawn(move || {
                for round in 0..2_000u32 {
                    let s = 1 + round % 4;
                    let group = if round % 2 == 0 { "stable" } else { "volatile" };
                    let joined = clock.fetch_add(1, SeqCst);
                    m.join(group, "t/+", s).unwrap();
                    m.join(group, "t/+", s + 100).unwrap();
                    m.leave(group, "t/+", s).unwrap();
                    m.leave(group, "t/+", s + 100).unwrap();
                    let left = clock.fetch_add(1, SeqCst);
                    let mut h = history.lock().unwrap();
                    h.push((s, joined, left));
                    h.push((s + 100, joined, left));
                }
                done.store(true, SeqCst);
            })
        };
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (m, clock, done) = (m.clone(), clock.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut seen = Vec::new();
                    while !done.load(SeqCst) {
                        let start = clock.load(SeqCst);
                        let got = m.m().lookup_str("t/x").unwrap();
                        let end = clock.load(SeqCst);
                        seen.push((start, end, got));
                    }
                    seen
                })
            })
            .collect();
        writer.join().unwrap();
        let history = history.lock().unwrap();
        for reader in readers {
            for (start, end, got) in reader.join().unwrap() {
                // One member of "stable" and at most one of "volatile": at most two ids, and
                // member 0 or a churning member in place of the stable group's.
                assert!(!got.is_empty() && got.len() <= 2, "{name}: {got:?}");
                for s in got.iter().filter(|&&s| s != 0) {
                    assert!(
                        history
                            .iter()
                            .any(|&(h, joined, left)| h == *s && joined < end && left >= start),
                        "{name}: {s} delivered at [{start}, {end}] outside its membership"
                    );
                }
            }
        }
        assert_eq!(m.memberships(), vec![("stable".into(), "t/+".into(), 0)]);
    }
}

/// A snapshot keeps the groups as they were; later joins and leaves do not show in it.
#[test]
fn a_snapshot_keeps_its_groups() {
    let m = Grouped::new(Cached::new(CSTrie::new(Dialect::Mqtt), 16));
    m.subscribe_str("$share/g/a/+", 1).unwrap();
    m.subscribe_str("$share/g/a/+", 2).unwrap();
    let snap = m.snapshot_with(Cached::snapshot);
    m.subscribe_str("$share/g/a/+", 3).unwrap();
    m.unsubscribe_str("$share/g/a/+", 1).unwrap();
    m.unsubscribe_str("$share/g/a/+", 2).unwrap();
    let (_, groups) = snap.lookup_groups_str("a/b").unwrap();
    assert_eq!(&*groups[0].members, &[1, 2]);
    let (_, groups) = m.lookup_groups_str("a/b").unwrap();
    assert_eq!(&*groups[0].members, &[3]);
    assert_eq!(snap.len(), 2);
    assert_eq!(m.len(), 1);
}

/// The `$` rule holds inside a shared subscription: `$share/g/#` takes no `$SYS` topic.
#[test]
fn shared_wildcards_skip_dollar_topics() {
    let m = Grouped::new(Trie::new(Dialect::Mqtt));
    m.subscribe_str("$share/g/#", 1).unwrap();
    m.subscribe_str("$share/g/$SYS/#", 2).unwrap();
    assert_eq!(m.lookup_str("$SYS/broker/load").unwrap(), vec![2]);
    assert_eq!(m.lookup_str("sensors/1").unwrap(), vec![1]);
}

/// A subscriber that is plain and a group's member appears once in a lookup, and both in
/// `lookup_groups`.
#[test]
fn a_plain_subscriber_in_a_group_appears_once() {
    let m = Grouped::new(CSTrie::new(Dialect::Amqp));
    m.subscribe_str("a.*", 1).unwrap();
    m.join("g", "a.#", 1).unwrap();
    m.join("h", "#", 1).unwrap();
    assert_eq!(m.lookup_str("a.b").unwrap(), vec![1]);
    let (plain, groups) = m.lookup_groups_str("a.b").unwrap();
    assert_eq!(plain, vec![1]);
    assert_eq!(groups.len(), 2);
    assert_eq!(m.remove_subscriber(1), 3);
    assert!(m.is_empty());
    assert!(!m.has_interest_str("a.b").unwrap());
}

/// Members of a group whose filter overlaps a pattern are in `reverse_match`, with the
/// group's filter.
#[test]
fn reverse_match_names_group_members() {
    let m = Grouped::new(Trie::new(Dialect::Nats));
    m.subscribe_str("foo.*", 1).unwrap();
    m.join("q", "foo.>", 2).unwrap();
    m.join("q", "foo.>", 3).unwrap();
    m.join("r", "bar", 4).unwrap();
    let pattern = Dialect::Nats.parse_pattern("foo.bar").unwrap();
    let mut got = m.reverse_match(&pattern);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("foo.*".to_string(), 1),
            ("foo.>".to_string(), 2),
            ("foo.>".to_string(), 3)
        ]
    );
}
