//! `LazyDfa` on its own: random interleavings of writes and lookups on a vocabulary small
//! enough that states stay warm across writes, at roomy and tiny budgets; what its statistics
//! promise (flushes, fallbacks, the budget, warm lookups that build nothing, invalidation that
//! spares the states a write does not concern); hostile patterns; and compaction of the NFA.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use topicmatch::dfa::DEFAULT_CACHE_BYTES;
use topicmatch::{DfaStats, Dialect, LazyDfa, Matcher, NaiveMatcher, SubscriberId};

fn sorted(mut v: Vec<SubscriberId>) -> Vec<SubscriberId> {
    v.sort_unstable();
    v
}

fn join(d: Dialect, words: &[&str]) -> String {
    words.join(&(d.separator() as char).to_string())
}

/// Three words, the empty one where it is legal, and `$s` for MQTT's `$` rule: with topics of
/// at most four words there are few enough of them that lookups retrace the same states.
fn words(d: Dialect) -> Vec<&'static str> {
    match d {
        Dialect::Nats => vec!["a", "b", "$s"],
        Dialect::Amqp | Dialect::Mqtt => vec!["a", "b", "", "$s"],
    }
}

fn pattern(d: Dialect) -> impl Strategy<Value = String> {
    let mut body = words(d);
    body.push(d.one_word());
    if d == Dialect::Amqp {
        body.push("#");
        body.push("#");
    }
    let body = prop::collection::vec(prop::sample::select(body), 0..4);
    (body, prop::bool::weighted(0.35)).prop_map(move |(mut w, many)| {
        if d != Dialect::Amqp && (many || w.is_empty()) {
            w.push(d.many_words());
        }
        join(d, &w)
    })
}

fn topic(d: Dialect) -> impl Strategy<Value = String> {
    let min = usize::from(d != Dialect::Amqp);
    prop::collection::vec(prop::sample::select(words(d)), min..5).prop_map(move |w| join(d, &w))
}

#[derive(Clone, Debug)]
enum Op {
    Subscribe(String, SubscriberId),
    Unsubscribe(String, SubscriberId),
    RemoveSubscriber(SubscriberId),
    Lookup(String),
    ClearCache,
}

fn ops(d: Dialect) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (pattern(d), 0..5u32).prop_map(|(p, s)| Op::Subscribe(p, s)),
        2 => (pattern(d), 0..5u32).prop_map(|(p, s)| Op::Unsubscribe(p, s)),
        1 => (0..5u32).prop_map(Op::RemoveSubscriber),
        12 => topic(d).prop_map(Op::Lookup),
    ];
    // A cache emptied by hand, now and then, must answer as one built from nothing.
    let op = prop_oneof![60 => op, 1 => Just(Op::ClearCache)];
    prop::collection::vec(op, 1..300)
}

/// What a run of [`agree`] saw, summed over the cases of a test.
#[derive(Default)]
struct Seen {
    lookups: usize,
    /// Lookups right after a write that changed the pairs, which built no state: the write
    /// left warm the states that lookup walks.
    warm_after_write: usize,
    non_empty: usize,
    flushes: u64,
    fallbacks: u64,
    invalidations: u64,
}

/// Runs `ops` on `m` and on the oracle, comparing every answer as it goes.
fn agree(m: &LazyDfa, ops: &[Op], seen: &mut Seen) -> Result<(), TestCaseError> {
    let d = m.dialect();
    let oracle = NaiveMatcher::new(d);
    let mut wrote = false;
    for op in ops {
        match op {
            Op::Subscribe(p, s) => {
                let r = m.subscribe_str(p, *s);
                prop_assert_eq!(&r, &oracle.subscribe_str(p, *s), "subscribe {:?} {}", p, s);
                wrote = r == Ok(true);
            }
            Op::Unsubscribe(p, s) => {
                let r = m.unsubscribe_str(p, *s);
                prop_assert_eq!(&r, &oracle.unsubscribe_str(p, *s), "unsubscribe {:?}", p);
                wrote = r == Ok(true);
            }
            Op::RemoveSubscriber(s) => {
                let n = m.remove_subscriber(*s);
                prop_assert_eq!(n, oracle.remove_subscriber(*s), "remove_subscriber {}", s);
                wrote = n > 0;
            }
            Op::ClearCache => {
                m.clear_cache();
                prop_assert_eq!(m.stats().states, 0);
                wrote = false;
            }
            Op::Lookup(t) => {
                let before = m.stats();
                let got = m.lookup_str(t).map(sorted);
                let after = m.stats();
                let want = oracle.lookup_str(t).map(sorted);
                if let Ok(ids) = &got {
                    let mut unique = ids.clone();
                    unique.dedup();
                    prop_assert_eq!(&unique, ids, "duplicates in lookup of {:?}", t);
                }
                prop_assert_eq!(&got, &want, "lookup {:?} ({})", t, d);
                let interest = want
                    .as_ref()
                    .map(|ids| !ids.is_empty())
                    .map_err(Clone::clone);
                prop_assert_eq!(m.has_interest_str(t), interest, "has_interest {:?}", t);
                seen.lookups += 1;
                seen.non_empty += usize::from(want.is_ok_and(|w| !w.is_empty()));
                let built = after.states != before.states || after.flushes != before.flushes;
                seen.warm_after_write += usize::from(wrote && !built);
                wrote = false;
            }
        }
        prop_assert_eq!(m.len(), oracle.len());
    }
    let mut got = m.subscriptions();
    let mut want = oracle.subscriptions();
    got.sort();
    want.sort();
    prop_assert_eq!(got, want);
    let s = m.stats();
    seen.flushes += s.flushes;
    seen.fallbacks += s.fallbacks;
    seen.invalidations += s.invalidations;
    Ok(())
}

fn run_interleavings(budget: usize, cases: u32) -> Vec<(Dialect, Seen)> {
    Dialect::ALL
        .into_iter()
        .map(|d| {
            let mut runner = TestRunner::new(Config {
                cases,
                failure_persistence: None,
                ..Config::default()
            });
            let seen = std::cell::RefCell::new(Seen::default());
            let result = runner.run(&ops(d), |ops| {
                agree(
                    &LazyDfa::with_budget(d, budget),
                    &ops,
                    &mut seen.borrow_mut(),
                )
            });
            if let Err(e) = result {
                panic!("LazyDfa(budget={budget}) ({d}) differs from the oracle: {e}");
            }
            (d, seen.into_inner())
        })
        .collect()
}

#[test]
fn interleavings_equal_the_oracle_with_a_roomy_cache() {
    for (d, seen) in run_interleavings(DEFAULT_CACHE_BYTES, 400) {
        assert!(seen.lookups > 20_000, "{d}: {} lookups", seen.lookups);
        assert!(seen.non_empty > seen.lookups / 5, "{d}: few answers");
        // Warm states met again after writes, and some writes that dropped states: both
        // halves of the selective invalidation were exercised.
        assert!(
            seen.warm_after_write > 1_000,
            "{d}: {} warm lookups after a write",
            seen.warm_after_write
        );
        assert!(seen.invalidations > 0, "{d}: no state was invalidated");
        assert_eq!(seen.flushes + seen.fallbacks, 0, "{d}: the budget was met");
    }
}

#[test]
fn interleavings_equal_the_oracle_with_tiny_caches() {
    // 400 bytes hold about one state: nearly every cold lookup falls back. 1,500 and 3,000
    // hold a few: lookups flush, and some finish in the new cache, some fall back.
    for budget in [400, 1_500, 3_000] {
        for (d, seen) in run_interleavings(budget, 250) {
            assert!(seen.lookups > 10_000, "{d}: {} lookups", seen.lookups);
            assert!(seen.non_empty > seen.lookups / 5, "{d}: few answers");
            eprintln!(
                "budget {budget} ({d}): {} flushes, {} fallbacks",
                seen.flushes, seen.fallbacks
            );
            assert!(
                seen.flushes > 100 && (budget > 1_500 || seen.fallbacks > 100),
                "budget {budget} ({d}): {} flushes, {} fallbacks",
                seen.flushes,
                seen.fallbacks
            );
        }
    }
}

fn dfa(d: Dialect, budget: usize, pairs: &[(&str, SubscriberId)]) -> LazyDfa {
    let m = LazyDfa::with_budget(d, budget);
    for &(p, s) in pairs {
        m.subscribe_str(p, s).unwrap();
    }
    m
}

fn oracle(d: Dialect, pairs: &[(&str, SubscriberId)]) -> NaiveMatcher {
    let m = NaiveMatcher::new(d);
    for &(p, s) in pairs {
        m.subscribe_str(p, s).unwrap();
    }
    m
}

/// Every topic of up to `most` words over `alphabet`, each after the topic one word shorter
/// that it extends, so a lookup in this order builds at most one state past its prefix's.
fn topics_in_prefix_order(d: Dialect, alphabet: &[&str], most: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut layer: Vec<Vec<&str>> = vec![vec![]];
    for _ in 0..most {
        let mut next = Vec::new();
        for w in &layer {
            for a in alphabet {
                let mut w = w.clone();
                w.push(a);
                out.push(join(d, &w));
                next.push(w);
            }
        }
        layer = next;
    }
    out.retain(|t| d.parse_topic(t).is_ok());
    out
}

/// Subscriptions with several states per topic, wildcards and a `$` word in each dialect.
fn workload(d: Dialect) -> Vec<(&'static str, SubscriberId)> {
    match d {
        Dialect::Amqp => vec![
            ("a.*.c", 1),
            ("a.#", 2),
            ("#.c", 3),
            ("a.b.c", 1),
            ("*.b.#.c", 4),
            ("b.#.b.*", 5),
            ("#", 6),
            ("c", 7),
        ],
        Dialect::Mqtt => vec![
            ("a/+/c", 1),
            ("a/#", 2),
            ("+/b/#", 3),
            ("a/b/c", 1),
            ("$s/#", 4),
            ("#", 5),
            ("b/+/+/c", 6),
            ("c", 7),
        ],
        Dialect::Nats => vec![
            ("a.*.c", 1),
            ("a.>", 2),
            ("*.b.>", 3),
            ("a.b.c", 1),
            ("$s.>", 4),
            (">", 5),
            ("b.*.*.c", 6),
            ("c", 7),
        ],
    }
}

fn vocabulary(d: Dialect) -> Vec<&'static str> {
    match d {
        Dialect::Nats => vec!["a", "b", "c", "$s", "z"],
        _ => vec!["a", "b", "c", "$s", "z", ""],
    }
}

#[test]
fn a_tiny_budget_flushes_and_falls_back_and_answers_right() {
    for d in Dialect::ALL {
        let pairs = workload(d);
        let (m, o) = (dfa(d, 400, &pairs), oracle(d, &pairs));
        let topics = topics_in_prefix_order(d, &vocabulary(d), 4);
        for t in topics.iter().chain(topics.iter().rev()) {
            assert_eq!(
                sorted(m.lookup_str(t).unwrap()),
                sorted(o.lookup_str(t).unwrap()),
                "{d} {t:?}"
            );
        }
        let s = m.stats();
        assert!(s.flushes > 0 && s.fallbacks > 0, "{d}: {s:?}");
        assert_eq!(s.budget, 400);
    }
}

/// An upper bound on the bytes one state (with its derived data) takes: the most that one
/// lookup added to a cache with room to spare, looking up `topics` in prefix order. Each
/// lookup there built one state past its prefix's, or, the first of a dialect without the
/// empty topic, the start state and one more, so the bound may count two states.
fn one_state_worth(d: Dialect, pairs: &[(&str, SubscriberId)], topics: &[String]) -> usize {
    let m = dfa(d, DEFAULT_CACHE_BYTES, pairs);
    let mut most = 0;
    for t in topics {
        let before = m.stats();
        m.lookup_str(t).unwrap();
        let after = m.stats();
        assert!(
            after.states <= before.states + 2,
            "{t:?} built several states"
        );
        most = most.max(after.bytes - before.bytes);
    }
    assert_eq!(m.stats().flushes, 0);
    eprintln!("{d}: one state takes at most {most} bytes");
    most
}

/// A charge that does not fit is still counted and the cache is flushed, or, past the
/// flushes one lookup may make, left over budget while the lookup simulates the NFA: so
/// with no write in between, a lookup ends with the cache at most one charge (a state, or
/// its derived data) over the budget.
#[test]
fn without_writes_a_lookup_ends_at_most_one_state_over_the_budget() {
    for d in Dialect::ALL {
        let pairs = workload(d);
        let o = oracle(d, &pairs);
        let topics = topics_in_prefix_order(d, &vocabulary(d), 4);
        let worth = one_state_worth(d, &pairs, &topics);
        assert!(worth > 0);
        let mut over = 0;
        let mut most_over = 0;
        for budget in [300, 500, 800, 1_200, 2_000, 4_000] {
            let m = dfa(d, budget, &pairs);
            // Prefix order, then scattered: the cache fills in both shapes.
            let scattered = (0..topics.len()).map(|i| &topics[i * 7919 % topics.len()]);
            for t in topics.iter().chain(scattered) {
                assert_eq!(
                    sorted(m.lookup_str(t).unwrap()),
                    sorted(o.lookup_str(t).unwrap()),
                    "{d} budget {budget}: {t:?}"
                );
                let s = m.stats();
                assert!(
                    s.bytes <= budget + worth,
                    "{d} budget {budget}: {} bytes after {t:?}, one state is at most {worth}",
                    s.bytes
                );
                over += usize::from(s.bytes > budget);
                most_over = most_over.max(s.bytes.saturating_sub(budget));
            }
            assert!(m.stats().flushes > 0, "{d} budget {budget}: never full");
            eprintln!("{d} budget {budget}: {:?}", m.stats());
        }
        eprintln!("{d}: at most {most_over} bytes over the budget");
        // The bound above is met with room: the cache does end lookups over budget.
        assert!(over > 0, "{d}: never over the budget");
    }
}

/// Writes grow the answers and edge tables of warm states without checking the budget (a
/// write never flushes), so the bytes may run past it until a lookup next needs to build
/// something: that lookup finds the cache full, flushes it and ends within one state of
/// the budget again.
#[test]
fn writes_may_overfill_the_cache_and_the_next_cold_lookup_flushes_it() {
    let d = Dialect::Amqp;
    let budget = 4_000;
    let m = dfa(d, budget, &[("a.b", 1), ("a.*", 2), ("#.b", 3)]);
    for t in ["a.b", "a", "b"] {
        m.lookup_str(t).unwrap();
    }
    let warm = m.stats();
    assert!(warm.bytes <= budget, "{warm:?}");
    for s in 100..400 {
        m.subscribe_str("a.b", s).unwrap();
        m.subscribe_str("#", s).unwrap();
    }
    let o = NaiveMatcher::new(d);
    for (p, s) in m.subscriptions() {
        o.subscribe_str(&p, s).unwrap();
    }
    // Warm: the answer comes from the states the writes updated, with nothing built.
    assert_eq!(
        sorted(m.lookup_str("a.b").unwrap()),
        sorted(o.lookup_str("a.b").unwrap())
    );
    let after = m.stats();
    assert_eq!(after.flushes, warm.flushes, "{after:?}");
    assert!(
        after.bytes > budget,
        "the writes charged nothing: {after:?}"
    );
    // A topic no state has seen: built from a full cache.
    assert_eq!(
        sorted(m.lookup_str("c.d.e").unwrap()),
        sorted(o.lookup_str("c.d.e").unwrap())
    );
    let cold = m.stats();
    assert!(cold.flushes > after.flushes, "{cold:?}");
    assert!(cold.bytes < after.bytes, "{cold:?}");
}

/// A lookup over states already built adds no state, edge or byte, and flushes nothing.
#[test]
fn warm_lookups_build_nothing() {
    for d in Dialect::ALL {
        let pairs = workload(d);
        let (m, o) = (dfa(d, DEFAULT_CACHE_BYTES, &pairs), oracle(d, &pairs));
        let topics = topics_in_prefix_order(d, &vocabulary(d), 4);
        for t in &topics {
            m.lookup_str(t).unwrap();
        }
        let warm = m.stats();
        assert!(
            warm.states > 10 && warm.transitions > warm.states,
            "{d}: {warm:?}"
        );
        for t in topics.iter().rev() {
            assert_eq!(
                sorted(m.lookup_str(t).unwrap()),
                sorted(o.lookup_str(t).unwrap()),
                "{d} {t:?}"
            );
            m.has_interest_str(t).unwrap();
        }
        assert_eq!(m.stats(), warm, "{d}: a warm lookup built something");
        // A word no pattern names takes the default edges the vocabulary's `z` built.
        m.lookup_str(&join(d, &["a", "never-named", "c"])).unwrap();
        assert_eq!(m.stats(), warm, "{d}: an unnamed word built something");
    }
}

/// Asserts that `m` answers `t` as the oracle `o` does.
fn same(m: &LazyDfa, o: &NaiveMatcher, t: &str) {
    assert_eq!(
        sorted(m.lookup_str(t).unwrap()),
        sorted(o.lookup_str(t).unwrap()),
        "{t:?}"
    );
}

/// A write concerns only the states whose nodes it touches: the others keep their edges
/// and answers, and lookups through them build nothing.
#[test]
fn a_write_leaves_the_states_it_does_not_concern_warm() {
    let d = Dialect::Amqp;
    let m = dfa(d, DEFAULT_CACHE_BYTES, &[("a.x.y", 1), ("b.x.y", 2)]);
    let o = oracle(d, &[("a.x.y", 1), ("b.x.y", 2)]);
    let look = |t: &str| same(&m, &o, t);
    for t in ["a.x.y", "b.x.y", "a.x", "b.x"] {
        look(t);
    }
    let warm = m.stats();
    // A wildcard under `b.x`: the states holding that node lose their derived data.
    m.subscribe_str("b.x.*", 3).unwrap();
    o.subscribe_str("b.x.*", 3).unwrap();
    let written = m.stats();
    assert!(written.invalidations > warm.invalidations, "{written:?}");
    look("a.x.y");
    look("a.x");
    assert_eq!(
        m.stats().states,
        written.states,
        "the `a` branch was dropped"
    );
    assert_eq!(m.stats().transitions, written.transitions);
    look("b.x.y");
    look("b.x.q");
    // A new subscriber of a warm pattern: answers swapped in place, nothing dropped.
    let before = m.stats();
    m.subscribe_str("a.x.y", 4).unwrap();
    o.subscribe_str("a.x.y", 4).unwrap();
    assert_eq!(m.stats().invalidations, before.invalidations);
    look("a.x.y");
    assert_eq!(m.stats().states, before.states, "a warm answer was rebuilt");
    // A new literal word under a warm node: one edge moves.
    m.subscribe_str("a.w", 5).unwrap();
    o.subscribe_str("a.w", 5).unwrap();
    assert_eq!(m.stats().invalidations, before.invalidations);
    look("a.w");
    look("a.x.y");
    look("b.x.y");
}

/// New words under a warm state fill its edge table past half full; the writer then replaces
/// the state's derived data with a copy twice as wide, which keeps the edges already followed,
/// so lookups through them build nothing.
#[test]
fn a_table_widened_by_writes_keeps_its_targets() {
    let d = Dialect::Amqp;
    let m = dfa(d, DEFAULT_CACHE_BYTES, &[("a.x", 1), ("a.*", 2)]);
    let o = oracle(d, &[("a.x", 1), ("a.*", 2)]);
    let look = |t: &str| same(&m, &o, t);
    look("a.x");
    look("a.y");
    let warm = m.stats();
    // The root's table holds `a` in two slots: forty new first words widen it five times.
    let words: Vec<String> = (0..40).map(|i| format!("w{i}")).collect();
    for (i, w) in words.iter().enumerate() {
        let id = 10 + i as SubscriberId;
        m.subscribe_str(&format!("{w}.x"), id).unwrap();
        o.subscribe_str(&format!("{w}.x"), id).unwrap();
    }
    let written = m.stats();
    assert_eq!(written.invalidations, warm.invalidations, "{written:?}");
    look("a.x");
    look("a.y");
    assert_eq!(m.stats().states, written.states, "a warm state was rebuilt");
    assert_eq!(
        m.stats().transitions,
        written.transitions,
        "a warm edge was lost"
    );
    for w in &words {
        look(&format!("{w}.x"));
        look(&format!("{w}.y"));
        look(w);
    }
}

/// `#.#. … .#.x` (30 `#`) against 2,000-word topics: right answers, few states, in every
/// budget (the tiny one simulates the NFA, which must stay polynomial too).
#[test]
fn thirty_many_words_wildcards_against_two_thousand_words() {
    let d = Dialect::Amqp;
    let pattern = format!("{}.x", vec!["#"; 30].join("."));
    let ends_in_x = format!("{}.x", vec!["a"; 1999].join("."));
    let no_x = vec!["a"; 2000].join(".");
    let all_x = vec!["x"; 2000].join(".");
    let mixed: Vec<&str> = (0..2000)
        .map(|i| if i % 3 == 0 { "x" } else { "a" })
        .collect();
    let mixed = mixed.join(".");
    let mixed_then_b = format!("{mixed}.b");
    for budget in [DEFAULT_CACHE_BYTES, 2_000, 300] {
        let m = dfa(d, budget, &[(&pattern, 1), ("a.#.a", 2), ("#.b", 3)]);
        let o = oracle(d, &[(&pattern, 1), ("a.#.a", 2), ("#.b", 3)]);
        for t in [&ends_in_x, &no_x, &all_x, &mixed, &mixed_then_b] {
            for _ in 0..2 {
                let got = sorted(m.lookup_str(t).unwrap());
                assert_eq!(got, sorted(o.lookup_str(t).unwrap()), "budget {budget}");
            }
        }
        assert_eq!(sorted(m.lookup_str(&ends_in_x).unwrap()), vec![1]);
        assert_eq!(sorted(m.lookup_str(&no_x).unwrap()), vec![2]);
        assert!(m.stats().states < 16, "budget {budget}: {:?}", m.stats());
    }
}

/// `(#.a)` fifteen times: the live positions of a word stay a chain, so states stay few
/// however the 2,000 words fall.
#[test]
fn alternating_wildcards_keep_few_states() {
    let d = Dialect::Amqp;
    let pattern = vec!["#.a"; 15].join(".");
    let m = dfa(d, DEFAULT_CACHE_BYTES, &[(&pattern, 1), ("#", 2)]);
    let o = oracle(d, &[(&pattern, 1), ("#", 2)]);
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let mut hits = 0;
    for i in 0..20 {
        let t: Vec<&str> = (0..2000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x % 40 == 0 {
                    "a"
                } else {
                    "b"
                }
            })
            .collect();
        let mut t = t.join(".");
        if i % 2 == 0 {
            t.push_str(".a");
        }
        let got = sorted(m.lookup_str(&t).unwrap());
        assert_eq!(got, sorted(o.lookup_str(&t).unwrap()));
        hits += usize::from(got.contains(&1));
    }
    assert!(hits > 0, "the long pattern never matched");
    assert!(m.stats().states < 64, "{:?}", m.stats());
}

/// Subscribing and unsubscribing many distinct patterns leaves empty branches, which the
/// NFA drops by rebuilding itself (and the cache with it); answers, pairs and warm states
/// are right after each rebuild.
#[test]
fn compaction_drops_empty_branches_and_keeps_answers() {
    for d in Dialect::ALL {
        for budget in [DEFAULT_CACHE_BYTES, 1_000] {
            let m = LazyDfa::with_budget(d, budget);
            let o = NaiveMatcher::new(d);
            let both = |p: &str, s: SubscriberId, on: bool| {
                if on {
                    assert_eq!(m.subscribe_str(p, s), o.subscribe_str(p, s), "{p:?}");
                } else {
                    assert_eq!(m.unsubscribe_str(p, s), o.unsubscribe_str(p, s), "{p:?}");
                }
            };
            for (p, s) in workload(d) {
                both(p, s, true);
            }
            let topics = topics_in_prefix_order(d, &vocabulary(d), 3);
            let check = |when: &str| {
                for t in &topics {
                    assert_eq!(
                        sorted(m.lookup_str(t).unwrap()),
                        sorted(o.lookup_str(t).unwrap()),
                        "{d} budget {budget} {when}: {t:?}"
                    );
                }
            };
            check("before");
            let mut most_nodes = 0;
            let one = d.one_word();
            for i in 0..3_000u32 {
                // Distinct branches: one under the warm node of `a`, one under the
                // wildcard's, each matching a topic of its own while it lives.
                let k = format!("k{i}");
                let p = join(d, &["a", &k, one]);
                let q = join(d, &[one, "c", &k]);
                both(&p, i % 9, true);
                both(&q, 8, true);
                if i % 250 == 0 {
                    check("with branches");
                    for t in [join(d, &["a", &k, "b"]), join(d, &["b", "c", &k])] {
                        let got = sorted(m.lookup_str(&t).unwrap());
                        assert_eq!(got, sorted(o.lookup_str(&t).unwrap()), "{d} {t:?}");
                        assert!(!got.is_empty(), "{d} {t:?}");
                    }
                }
                both(&p, i % 9, false);
                both(&q, 8, false);
                most_nodes = most_nodes.max(m.stats().nodes);
            }
            let s = m.stats();
            // Three nodes a round, 9,000 without compaction.
            assert!(s.compactions >= 3, "{d}: {s:?}");
            assert!(most_nodes < 2_500, "{d}: {most_nodes} nodes at most");
            check("after");
            check("after, warm");
            let mut got = m.subscriptions();
            let mut want = o.subscriptions();
            got.sort();
            want.sort();
            assert_eq!(got, want, "{d}");
            assert_eq!(m.len(), o.len());
            for (p, s) in workload(d) {
                both(p, s, false);
            }
            assert!(m.is_empty());
            check("emptied");
        }
    }
}

/// `clear_cache` empties the cache and nothing else.
#[test]
fn clear_cache_starts_over_with_the_same_answers() {
    for d in Dialect::ALL {
        let pairs = workload(d);
        let (m, o) = (dfa(d, DEFAULT_CACHE_BYTES, &pairs), oracle(d, &pairs));
        let topics = topics_in_prefix_order(d, &vocabulary(d), 3);
        for t in &topics {
            m.lookup_str(t).unwrap();
        }
        let full = m.stats();
        m.clear_cache();
        let empty = m.stats();
        assert_eq!(
            DfaStats {
                states: 0,
                transitions: 0,
                ..full.clone()
            },
            DfaStats {
                bytes: full.bytes,
                ..empty.clone()
            },
            "{d}"
        );
        assert!(empty.bytes < full.bytes);
        for t in &topics {
            assert_eq!(
                sorted(m.lookup_str(t).unwrap()),
                sorted(o.lookup_str(t).unwrap()),
                "{d} {t:?}"
            );
        }
        assert_eq!(m.stats().states, full.states, "{d}");
    }
}
