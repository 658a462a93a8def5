//! Whether any subscriber holds two patterns or more, so that a lookup deduplicates its
//! answer only when some subscriber could be in it twice.
//!
//! Why: a lookup gathers the subscribers of every pattern that matches, and the same
//! subscriber under two of them would be delivered twice; so every answer was deduplicated.
//! Most subscribers of a broker hold one pattern each (a queue, a device, a session), and in
//! a fan-out of hundreds (the OpenAMQ experiment: about 190 subscribers from up to 32
//! patterns a message) the deduplication took a quarter of the lookup. The `Trie` counts
//! such subscribers under its lock; a lock-free lookup needs the count and the trie it walks
//! to agree, which this module's protocol gives.
//!
//! The protocol, on one word ([`Sharing::word`]): its low half counts the subscribers that
//! hold two patterns or more; its high half counts the times that count rose from zero.
//!
//! - A write that adds a pair counts it here *before* it publishes the pair ([`Sharing::add`];
//!   an insert that finds the pair there after all gives it back), and a write that removes a
//!   pair counts it *after* the pair is gone ([`Sharing::remove`]). So at any instant, if the
//!   trie holds two pairs of one subscriber, the count has been nonzero since before the
//!   second was published.
//! - A lookup reads the word before its walk and again after it validated the walk. If the
//!   first read counts no shared subscriber and the two reads are equal, no subscriber held
//!   two patterns at any instant between them (a rise from zero changes the high half, so the
//!   word cannot leave zero and come back unseen), and the lookup's instant is between them:
//!   its answer holds each subscriber once. Otherwise it deduplicates, as before.
//!
//! The word's operations are sequentially consistent: a writer changes it only when a
//! subscriber passes between one pattern and two, and on x86 a lookup's loads are plain loads.
//! The loom models in `mod.rs` check that a lookup beside such writes never returns a
//! subscriber twice.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::Ordering::SeqCst;

use super::MulHasher;
use crate::matcher::SubscriberId;
use crate::sync::{AtomicU64, Mutex};

/// A subscriber count and its rises from zero, as a lookup reads them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Reading(u64);

impl Reading {
    /// Whether, read before a walk (`self`) and after it (`then`), no subscriber held two
    /// patterns at any instant between: the walk's answer needs no deduplication.
    pub(crate) fn none_shared_until(self, then: Reading) -> bool {
        self.0 & COUNT == 0 && self == then
    }
}

/// The low half of the word.
const COUNT: u64 = u32::MAX as u64;
/// One rise from zero, in the high half.
const RISE: u64 = 1 << 32;

#[cfg(not(loom))]
const SHARDS: usize = 16;
/// One shard under loom: each mutex is one more object for the models to schedule.
#[cfg(loom)]
const SHARDS: usize = 1;

/// Ids below this have their count in a table indexed by id, a byte each: the registry of
/// the Python binding hands out small dense ids, and a map would cost about ten bytes a
/// subscriber (100 B a subscription became 110 at a million `mixed` ones from Python, against
/// 101 with the table). Larger ids (a shared-subscription group's, or any caller's) go to a
/// map. The table grows to the largest id counted: at most 16 MiB.
const DENSE_IDS: SubscriberId = 1 << 24;

/// One shard's counts of patterns per subscriber.
#[derive(Default)]
struct Counts {
    /// The count of id `shard + SHARDS * i` at `i`; `u8::MAX` means "in `spill`".
    dense: Vec<u8>,
    /// The counts of large ids, and of dense ids counted `u8::MAX` times or more. Ids with no
    /// pattern are not kept.
    spill: HashMap<SubscriberId, u32, BuildHasherDefault<MulHasher>>,
}

impl Counts {
    /// Counts one pattern more (`up`) or one fewer for `id`; returns its count after.
    fn change(&mut self, id: SubscriberId, up: bool) -> u32 {
        if id < DENSE_IDS {
            let i = id as usize / SHARDS;
            if i >= self.dense.len() {
                self.dense.resize(i + 1, 0);
            }
            let slot = &mut self.dense[i];
            match (*slot, up) {
                (c, true) if c < u8::MAX - 1 => {
                    *slot = c + 1;
                    return u32::from(*slot);
                }
                (c, false) if c < u8::MAX => {
                    debug_assert!(c > 0, "a pattern of {id} removed that was never counted");
                    *slot = c.saturating_sub(1);
                    return u32::from(*slot);
                }
                // From `u8::MAX - 1` up, into the map.
                (c, true) if c == u8::MAX - 1 => {
                    *slot = u8::MAX;
                    self.spill.insert(id, u32::from(u8::MAX));
                    return u32::from(u8::MAX);
                }
                _ => {}
            }
        }
        let n = self.spill.entry(id).or_insert(0);
        if up {
            *n += 1;
        } else {
            debug_assert!(*n > 0, "a pattern of {id} removed that was never counted");
            *n = n.saturating_sub(1);
        }
        let now = *n;
        if id < DENSE_IDS && now < u32::from(u8::MAX) {
            // Back under the table's range.
            self.spill.remove(&id);
            self.dense[id as usize / SHARDS] = now as u8;
        } else if now == 0 {
            self.spill.remove(&id);
        }
        now
    }

    #[cfg(all(test, not(loom)))]
    fn is_empty(&self) -> bool {
        self.spill.is_empty() && self.dense.iter().all(|&c| c == 0)
    }
}

/// Each subscriber's number of patterns, and the word.
pub(crate) struct Sharing {
    word: AtomicU64,
    patterns: Box<[Mutex<Counts>]>,
}

impl Default for Sharing {
    fn default() -> Self {
        Sharing {
            word: AtomicU64::new(0),
            patterns: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl Sharing {
    /// The word, for a lookup (module docs).
    pub(crate) fn read(&self) -> Reading {
        Reading(self.word.load(SeqCst))
    }

    /// Counts one more pattern of `id`: called before the write that adds the pair is
    /// published.
    pub(crate) fn add(&self, id: SubscriberId) {
        let held = self.shard(id).change(id, true);
        if held == 2 {
            let mut w = self.word.load(SeqCst);
            loop {
                let rise = if w & COUNT == 0 { RISE } else { 0 };
                // Wrapping: the high half counts rises modulo 2^32; only equality is asked.
                let new = (w + 1).wrapping_add(rise);
                match self.word.compare_exchange(w, new, SeqCst, SeqCst) {
                    Ok(_) => break,
                    Err(now) => w = now,
                }
            }
        }
    }

    /// Counts one pattern of `id` fewer: called once the pair is gone, or for an
    /// [`add`](Self::add) whose write found the pair there already.
    pub(crate) fn remove(&self, id: SubscriberId) {
        let held = self.shard(id).change(id, false);
        if held == 1 {
            self.word.fetch_sub(1, SeqCst);
        }
    }

    fn shard(&self, id: SubscriberId) -> crate::sync::MutexGuard<'_, Counts> {
        // Under loom, with one shard, clippy would call the modulo useless.
        #[allow(clippy::modulo_one)]
        let shard = &self.patterns[id as usize % SHARDS];
        shard.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_word_counts_subscribers_of_two_patterns_and_their_rises() {
        let s = Sharing::default();
        let start = s.read();
        assert!(start.none_shared_until(s.read()));
        s.add(1);
        assert!(
            start.none_shared_until(s.read()),
            "one pattern is not shared"
        );
        s.add(1);
        let two = s.read();
        assert!(!start.none_shared_until(two));
        assert!(!two.none_shared_until(s.read()), "a count above zero");
        s.add(1);
        s.remove(1);
        assert_eq!(
            s.read(),
            two,
            "three patterns and back to two change nothing"
        );
        s.remove(1);
        let back = s.read();
        assert!(back.none_shared_until(s.read()));
        assert!(
            !start.none_shared_until(back),
            "a rise and a fall between two reads is seen"
        );
        s.remove(1);
        assert!(s.patterns.iter().all(|m| m.lock().unwrap().is_empty()));
    }

    /// Counts through the table's range and back, for a small id and a large one.
    #[test]
    fn counts_cross_into_the_map_and_back() {
        for id in [3, DENSE_IDS + 5] {
            let mut c = Counts::default();
            for n in 1..=600 {
                assert_eq!(c.change(id, true), n);
            }
            for n in (0..600).rev() {
                assert_eq!(c.change(id, false), n);
            }
            assert!(c.is_empty(), "{id}");
        }
    }

    use crate::{CSTrie, Dialect, Matcher};

    fn sorted(t: &CSTrie, topic: &str) -> Vec<u32> {
        let mut v = t.lookup_str(topic).unwrap();
        v.sort_unstable();
        v
    }

    /// Lookups answer each subscriber once whether or not it holds two patterns, and so do
    /// snapshots taken in either case, later writes aside.
    #[test]
    fn answers_stay_deduplicated_as_subscribers_gain_and_lose_patterns() {
        let t = CSTrie::new(Dialect::Amqp);
        t.subscribe_str("a.b", 1).unwrap();
        t.subscribe_str("a.*", 2).unwrap();
        let unshared = t.snapshot();
        assert!(unshared.frozen_unshared);
        t.subscribe_str("#", 1).unwrap();
        t.subscribe_str("a.#", 1).unwrap();
        let shared = t.snapshot();
        assert!(!shared.frozen_unshared);
        assert!(!shared.snapshot().frozen_unshared);
        assert_eq!(sorted(&t, "a.b"), vec![1, 2]);
        assert_eq!(sorted(&shared, "a.b"), vec![1, 2]);
        assert_eq!(sorted(&unshared, "a.b"), vec![1, 2]);
        // A present pair counts nothing.
        assert!(!t.subscribe_str("#", 1).unwrap());
        assert!(t.unsubscribe_str("#", 1).unwrap());
        assert_eq!(sorted(&t, "a.b"), vec![1, 2]);
        assert!(t.unsubscribe_str("a.#", 1).unwrap());
        assert!(t.sharing.read().none_shared_until(t.sharing.read()));
        assert_eq!(sorted(&t, "a.b"), vec![1, 2]);
        assert!(t.snapshot().frozen_unshared);
        assert_eq!(t.remove_subscriber(1), 1);
        assert_eq!(t.remove_subscriber(2), 1);
        assert!(t
            .sharing
            .patterns
            .iter()
            .all(|m| m.lock().unwrap().is_empty()));
    }
}

/// Loom models of the protocol through the trie's own operations: a lookup beside a write that
/// gives its subscriber a second matching pattern, takes one away, or gives one and takes it
/// back, answers the subscriber once. Each fails when `insert` counts the pair after
/// publishing it (checked by moving the count).
#[cfg(all(test, loom))]
mod loom_tests {
    use super::super::loom_support::{pattern, run2_bounded};
    use crate::{CSTrie, Dialect, Matcher};

    const D: Dialect = Dialect::Amqp;

    fn once(t: &CSTrie) {
        assert_eq!(
            t.lookup_str("a.b").unwrap(),
            vec![1],
            "a subscriber answered twice"
        );
    }

    /// A lookup of `a.b` beside `write`, on a trie `setup` made, answers 1 once, as does one
    /// after both.
    fn beside_a_lookup(setup: fn(&CSTrie), write: fn(&CSTrie)) {
        run2_bounded(None, D, setup, write, once, once);
    }

    #[test]
    fn a_second_pattern_beside_a_lookup() {
        beside_a_lookup(
            |t| {
                t.subscribe(&pattern(D, "a.b"), 1);
            },
            |t| assert!(t.subscribe(&pattern(D, "a.*"), 1)),
        );
    }

    #[test]
    fn a_second_pattern_removed_beside_a_lookup() {
        beside_a_lookup(
            |t| {
                t.subscribe(&pattern(D, "a.b"), 1);
                t.subscribe(&pattern(D, "a.*"), 1);
            },
            |t| assert!(t.unsubscribe(&pattern(D, "a.*"), 1)),
        );
    }

    /// The rise and the fall both land between the lookup's two reads of the word.
    #[test]
    fn a_second_pattern_given_and_taken_beside_a_lookup() {
        beside_a_lookup(
            |t| {
                t.subscribe(&pattern(D, "a.b"), 1);
            },
            |t| {
                assert!(t.subscribe(&pattern(D, "a.*"), 1));
                assert!(t.unsubscribe(&pattern(D, "a.*"), 1));
            },
        );
    }
}
