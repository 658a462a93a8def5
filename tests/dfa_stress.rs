//! `LazyDfa` under one writer and two readers. Writes are serialized, so the matcher goes
//! through versions 0, 1, 2, ... (the pairs after that many writes), and every lookup must
//! answer as the oracle does at one version between the lookup's start and its end: at least
//! the last version finished when it started, at most the last one started when it ended.
//!
//! The writer subscribes and unsubscribes over every pattern of up to three tokens, removes
//! subscribers, and adds and drops literal branches no topic takes (each a new word under a
//! warm state; enough of them that the NFA compacts, which replaces the cache under the
//! readers). The readers look up a small set of topics, so the states they walk stay warm
//! between writes, and the checks see their hot path, the cold path, and with a tiny budget
//! flushes and the NFA simulation, all beside writes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use topicmatch::dfa::DEFAULT_CACHE_BYTES;
use topicmatch::{Dialect, LazyDfa, Matcher, NaiveMatcher, SubscriberId};

const SUBSCRIBERS: u32 = 6;
const N: usize = SUBSCRIBERS as usize;
/// The subscriber of the literal branches, which match no topic: never in an answer.
const BRANCH_OWNER: SubscriberId = 7;
const READERS: usize = 2;

/// xorshift64: the same writes on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn words_up_to(d: Dialect, alphabet: &[&str], most: usize, empty: bool) -> Vec<String> {
    let sep = (d.separator() as char).to_string();
    let mut all = if empty { vec![String::new()] } else { vec![] };
    let mut layer: Vec<Vec<&str>> = vec![vec![]];
    for _ in 0..most {
        let mut next = Vec::new();
        for w in &layer {
            for a in alphabet {
                let mut w = w.clone();
                w.push(a);
                all.push(w.join(&sep));
                next.push(w);
            }
        }
        layer = next;
    }
    all
}

/// The patterns, the topics, and which pattern matches which topic.
struct World {
    d: Dialect,
    patterns: Vec<String>,
    topics: Vec<String>,
    matches: Vec<Vec<bool>>,
}

impl World {
    fn new(d: Dialect) -> World {
        let (one, many) = (d.one_word(), d.many_words());
        let patterns: Vec<String> = words_up_to(d, &["a", "b", one, many], 3, false)
            .into_iter()
            .filter(|p| d.check_pattern(p).is_ok())
            .collect();
        let topics = words_up_to(d, &["a", "b"], 4, d == Dialect::Amqp);
        let matches = patterns
            .iter()
            .map(|p| {
                let oracle = NaiveMatcher::new(d);
                oracle.subscribe_str(p, 0).unwrap();
                topics
                    .iter()
                    .map(|t| oracle.has_interest_str(t).unwrap())
                    .collect()
            })
            .collect();
        World {
            d,
            patterns,
            topics,
            matches,
        }
    }
}

#[derive(Clone, Debug)]
enum Write {
    Sub(usize, SubscriberId),
    Unsub(usize, SubscriberId),
    Remove(SubscriberId),
    /// A literal branch under `a` that no topic takes.
    Branch(u32, bool),
}

/// The writes, what each returns, and each topic's answer after each write (bit `s` for
/// subscriber `s`): `answers[k][t]` is topic `t` at version `k`.
struct Script {
    writes: Vec<(Write, usize)>,
    answers: Vec<Vec<u8>>,
    /// The pairs held after the last write, sorted.
    end: Vec<(String, SubscriberId)>,
}

fn script(world: &World, n: usize, seed: u64) -> Script {
    let (np, nt) = (world.patterns.len(), world.topics.len());
    let mut held = vec![[false; N]; np];
    // Per topic and subscriber: how many held pairs match.
    let mut count = vec![[0u32; N]; nt];
    let answer = |count: &[[u32; N]]| -> Vec<u8> {
        count
            .iter()
            .map(|c| (0..N).fold(0, |m, s| m | u8::from(c[s] > 0) << s))
            .collect()
    };
    let mut rng = Rng(seed);
    let mut branches: Vec<u32> = Vec::new();
    let mut next_branch = 0;
    let mut writes = Vec::with_capacity(n);
    let mut answers = vec![answer(&count)];
    let set = |held: &mut [[bool; N]], count: &mut [[u32; N]], p: usize, s: u32, on: bool| {
        let was = std::mem::replace(&mut held[p][s as usize], on);
        if was != on {
            for (c, _) in count.iter_mut().zip(&world.matches[p]).filter(|(_, &m)| m) {
                if on {
                    c[s as usize] += 1;
                } else {
                    c[s as usize] -= 1;
                }
            }
        }
        was
    };
    // The pairs held, to unsubscribe one: slightly more of those than subscribes keeps the
    // pairs few, so answers change often and are empty now and then.
    let mut pairs: Vec<(usize, SubscriberId)> = Vec::new();
    for _ in 0..n {
        let roll = rng.below(100);
        let s = rng.below(N) as SubscriberId;
        let w = if roll < 30 {
            let p = rng.below(np);
            let new = !set(&mut held, &mut count, p, s, true);
            if new {
                pairs.push((p, s));
            }
            (Write::Sub(p, s), usize::from(new))
        } else if roll < 62 && !pairs.is_empty() {
            let (p, s) = pairs.swap_remove(rng.below(pairs.len()));
            assert!(set(&mut held, &mut count, p, s, false));
            (Write::Unsub(p, s), 1)
        } else if roll < 66 {
            // Mostly a pair not held: answered without a write.
            let p = rng.below(np);
            let was = set(&mut held, &mut count, p, s, false);
            pairs.retain(|&pair| pair != (p, s));
            (Write::Unsub(p, s), usize::from(was))
        } else if roll < 68 {
            let mut removed = 0;
            for p in 0..np {
                removed += usize::from(set(&mut held, &mut count, p, s, false));
            }
            pairs.retain(|&(_, id)| id != s);
            (Write::Remove(s), removed)
        } else if roll < 84 || branches.is_empty() {
            next_branch += 1;
            branches.push(next_branch);
            (Write::Branch(next_branch, true), 1)
        } else {
            let i = rng.below(branches.len());
            (Write::Branch(branches.swap_remove(i), false), 1)
        };
        writes.push(w);
        answers.push(answer(&count));
    }
    let mut end: Vec<(String, SubscriberId)> = pairs
        .iter()
        .map(|&(p, s)| (world.patterns[p].clone(), s))
        .chain(branches.iter().map(|&i| (branch(world.d, i), BRANCH_OWNER)))
        .collect();
    end.sort();
    Script {
        writes,
        answers,
        end,
    }
}

fn branch(d: Dialect, i: u32) -> String {
    let sep = d.separator() as char;
    format!("a{sep}k{i}{sep}{}", d.one_word())
}

/// One lookup as a reader saw it: the topic, the versions it may answer at, the answer
/// (`None` for `has_interest`, whose answer is `interest`).
struct Seen {
    topic: usize,
    lo: u64,
    hi: u64,
    subs: Option<u8>,
    interest: bool,
}

/// What one history showed, for the test to judge whether it meant anything.
#[derive(Debug, Default)]
struct Tally {
    lookups: usize,
    /// Lookups during which a write ran.
    overlapped: usize,
    /// Overlapped lookups whose topic's answer changed between their bounds: only one of
    /// several answers would do.
    contested: usize,
    /// Lookups that answered as a version later than the one finished when they started.
    saw_a_concurrent_write: usize,
    non_empty: usize,
}

fn history(world: Arc<World>, m: Arc<LazyDfa>, writes: usize, seed: u64) -> Tally {
    let d = world.d;
    let script = Arc::new(script(&world, writes, seed));
    // Versions started and finished: a lookup that read `finished == lo` before it began and
    // `started == hi` after it ended answers as some version in `lo..=hi`.
    let started = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let go = Arc::new(Barrier::new(READERS + 1));
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (world, m, started, finished, done, go) = (
                world.clone(),
                m.clone(),
                started.clone(),
                finished.clone(),
                done.clone(),
                go.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = Rng(seed ^ (r as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let mut seen = Vec::new();
                go.wait();
                // Bounded, so a slow writer cannot make the record outgrow memory.
                while !done.load(SeqCst) && seen.len() < 1_000_000 {
                    let topic = rng.below(world.topics.len());
                    let t = &world.topics[topic];
                    let ask_interest = rng.below(5) == 0;
                    let lo = finished.load(SeqCst);
                    let (subs, interest) = if ask_interest {
                        (None, m.has_interest_str(t).unwrap())
                    } else {
                        let ids = m.lookup_str(t).unwrap();
                        let mut bits = 0u8;
                        for id in &ids {
                            assert!(*id < SUBSCRIBERS, "{id} in {ids:?} for {t:?}");
                            assert_eq!(bits & 1 << id, 0, "{id} twice in {ids:?} for {t:?}");
                            bits |= 1 << id;
                        }
                        (Some(bits), bits != 0)
                    };
                    let hi = started.load(SeqCst);
                    seen.push(Seen {
                        topic,
                        lo,
                        hi,
                        subs,
                        interest,
                    });
                }
                seen
            })
        })
        .collect();
    go.wait();
    for (k, (w, want)) in script.writes.iter().enumerate() {
        started.store(k as u64 + 1, SeqCst);
        let got = match *w {
            Write::Sub(p, s) => usize::from(m.subscribe_str(&world.patterns[p], s).unwrap()),
            Write::Unsub(p, s) => usize::from(m.unsubscribe_str(&world.patterns[p], s).unwrap()),
            Write::Remove(s) => m.remove_subscriber(s),
            Write::Branch(i, true) => {
                usize::from(m.subscribe_str(&branch(d, i), BRANCH_OWNER).unwrap())
            }
            Write::Branch(i, false) => {
                usize::from(m.unsubscribe_str(&branch(d, i), BRANCH_OWNER).unwrap())
            }
        };
        assert_eq!(got, *want, "write {k}: {w:?}");
        finished.store(k as u64 + 1, SeqCst);
        // A writer that never pauses keeps lookups that need the read lock (every one, at
        // a tiny budget) waiting behind it, as the lock prefers writers: a short pause lets
        // the waiting readers in. A spin, not a yield, which on a loaded machine would cost
        // the writer a time slice each time.
        if k % 8 == 0 {
            let paused = Instant::now();
            while paused.elapsed() < Duration::from_micros(20) {
                std::hint::spin_loop();
            }
        }
    }
    done.store(true, SeqCst);
    let mut tally = Tally::default();
    for r in readers {
        for s in r.join().expect("a reader panicked") {
            let versions = &script.answers[s.lo as usize..=s.hi as usize];
            let at = |v: &Vec<u8>| v[s.topic];
            let ok = versions.iter().any(|v| match s.subs {
                Some(bits) => at(v) == bits,
                None => (at(v) != 0) == s.interest,
            });
            assert!(
                ok,
                "{d}: {} of {:?} answered {:?} (interest {}), but between versions {} and {} \
                 the oracle answered only {:?}",
                if s.subs.is_some() {
                    "lookup"
                } else {
                    "has_interest"
                },
                world.topics[s.topic],
                s.subs,
                s.interest,
                s.lo,
                s.hi,
                versions.iter().map(at).collect::<Vec<_>>()
            );
            tally.lookups += 1;
            tally.non_empty += usize::from(s.interest);
            if s.hi > s.lo {
                tally.overlapped += 1;
                let first = at(&versions[0]);
                tally.contested += usize::from(versions.iter().any(|v| at(v) != first));
                let answered_first = match s.subs {
                    Some(bits) => bits == first,
                    None => s.interest == (first != 0),
                };
                tally.saw_a_concurrent_write += usize::from(!answered_first);
            }
        }
    }
    // At rest: every topic as the last version has it, and the pairs the script left.
    let last = script.answers.last().unwrap();
    for (t, topic) in world.topics.iter().enumerate() {
        let bits = m
            .lookup_str(topic)
            .unwrap()
            .iter()
            .fold(0u8, |b, id| b | 1 << id);
        assert_eq!(bits, last[t], "{d}: {topic:?} at rest");
    }
    let mut pairs = m.subscriptions();
    pairs.sort();
    assert_eq!(pairs, script.end, "{d}: the pairs at rest");
    assert_eq!(m.len(), script.end.len());
    tally
}

/// The counters of a test's matchers, summed.
#[derive(Debug)]
struct Totals {
    flushes: u64,
    fallbacks: u64,
    invalidations: u64,
    compactions: u64,
}

/// Runs at least three histories on fresh matchers, more until together they raced enough to
/// mean something (on two loaded cores the threads may barely run side by side), then checks
/// that they did.
fn stress(d: Dialect, budget: usize, writes: usize, invalidating: bool) -> (Tally, Totals) {
    let began = Instant::now();
    let world = Arc::new(World::new(d));
    let mut total = Tally::default();
    let mut sum = Totals {
        flushes: 0,
        fallbacks: 0,
        invalidations: 0,
        compactions: 0,
    };
    for run in 0..12u64 {
        let m = Arc::new(LazyDfa::with_budget(d, budget));
        let t = history(
            world.clone(),
            m.clone(),
            writes,
            0x2545_f491_4f6c_dd1d + run,
        );
        total.lookups += t.lookups;
        total.overlapped += t.overlapped;
        total.contested += t.contested;
        total.saw_a_concurrent_write += t.saw_a_concurrent_write;
        total.non_empty += t.non_empty;
        let s = m.stats();
        sum.flushes += s.flushes;
        sum.fallbacks += s.fallbacks;
        sum.invalidations += s.invalidations;
        sum.compactions += s.compactions;
        // Whether a write drops states that readers built depends on timing: a few runs may
        // see none.
        if run >= 2
            && total.contested > 100
            && total.saw_a_concurrent_write > 20
            && total.non_empty > 20
            && (sum.invalidations > 0 || !invalidating)
        {
            break;
        }
    }
    eprintln!(
        "{d} budget {budget}: {total:?}, {sum:?} in {:?}",
        began.elapsed()
    );
    assert!(
        total.contested > 100,
        "{d} budget {budget}: too few lookups raced a write that changed their answer: {total:?}"
    );
    assert!(
        total.saw_a_concurrent_write > 0,
        "{d} budget {budget}: no lookup saw a write that ran beside it: {total:?}"
    );
    assert!(
        total.non_empty > 20 && total.non_empty < total.lookups,
        "{d} budget {budget}: {total:?}"
    );
    assert!(sum.compactions > 0, "{d} budget {budget}: {sum:?}");
    assert!(
        sum.invalidations > 0 || !invalidating,
        "{d} budget {budget}: {sum:?}"
    );
    (total, sum)
}

/// Writes per history: enough for several compactions (the branches add a node each).
const WRITES: usize = if cfg!(debug_assertions) {
    5_000
} else {
    20_000
};

#[test]
fn lookups_beside_writes_answer_as_some_version_in_their_interval() {
    for d in Dialect::ALL {
        let (_, stats) = stress(d, DEFAULT_CACHE_BYTES, WRITES, true);
        assert_eq!(stats.fallbacks, 0, "{d}: {stats:?}");
    }
}

#[test]
fn with_a_tiny_budget_lookups_beside_writes_answer_as_some_version_in_their_interval() {
    for (d, budget) in [
        (Dialect::Amqp, 400),
        (Dialect::Mqtt, 1_500),
        (Dialect::Nats, 400),
    ] {
        // Too small to keep the states a write would drop.
        let (_, stats) = stress(d, budget, WRITES, false);
        assert!(
            stats.flushes > 0 && stats.fallbacks > 0,
            "{d} budget {budget}: {stats:?}"
        );
    }
}

/// A lookup that walks warm states for a long time while a write compacts the NFA, and
/// then needs a state that is not built yet: it must not read the rebuilt NFA with the old
/// one's node numbers. `#` and `#.x` are subscribed after a thousand dead branches, so their
/// nodes are numbered past the end of the compacted NFA.
#[test]
fn a_lookup_beside_a_compaction_answers_right() {
    let d = Dialect::Amqp;
    // Warm steps enough to outlast the writes, then `x`, whose edge no lookup has taken yet.
    let steps = if cfg!(debug_assertions) {
        200_000
    } else {
        1_000_000
    };
    let long: String = "a.".repeat(steps) + "x";
    let mut raced = 0;
    for attempt in 0..10 {
        let m = Arc::new(LazyDfa::new(d));
        for i in 0..1_000 {
            m.subscribe_str(&format!("j{i}"), 9).unwrap();
            m.unsubscribe_str(&format!("j{i}"), 9).unwrap();
        }
        m.subscribe_str("#", 1).unwrap();
        m.subscribe_str("#.x", 2).unwrap();
        assert_eq!(sorted(m.lookup_str("a.a").unwrap()), vec![1]);
        let compactions = m.stats().compactions;
        let (begun, ended) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let reader = {
            let (m, begun, ended, long) = (m.clone(), begun.clone(), ended.clone(), long.clone());
            std::thread::spawn(move || {
                let topic = d.parse_topic(&long).unwrap();
                begun.store(true, SeqCst);
                let got = sorted(m.lookup(&topic));
                ended.store(true, SeqCst);
                got
            })
        };
        while !begun.load(SeqCst) {
            std::hint::spin_loop();
        }
        // Dead branches until the NFA compacts.
        let mut i = 0;
        while m.stats().compactions == compactions {
            m.subscribe_str(&format!("k{i}"), 9).unwrap();
            m.unsubscribe_str(&format!("k{i}"), 9).unwrap();
            i += 1;
        }
        raced += usize::from(!ended.load(SeqCst));
        let got = reader
            .join()
            .expect("the lookup beside the compaction panicked");
        assert_eq!(got, vec![1, 2], "attempt {attempt}");
        if raced >= 3 {
            return;
        }
    }
    assert!(raced > 0, "no compaction ran beside the lookup");
}

fn sorted(mut v: Vec<SubscriberId>) -> Vec<SubscriberId> {
    v.sort_unstable();
    v
}
