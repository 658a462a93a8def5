//! Roaring-bitmap matchers: the inverted-bitmap family.
//!
//! | type | technique | source |
//! |---|---|---|
//! | [`InvertedBitmap`] | one bitmap of matching patterns per topic seen, kept current on every write | Svalgaard and Tveden; the OpenAMQ white paper (Hintjens, iMatix) |
//! | [`LevelBitmap`] | one table per word position, AND of one row per level | WSO2 Message Broker; the fast-topic-matching project's optimized inverted bitmap |
//! | [`HeadersMatcher`] | criteria bitmaps and hit counts over key/value headers | OpenAMQ white paper; AMQP headers exchange (RabbitMQ) |
//!
//! Bitmaps are [`roaring::RoaringBitmap`]s of small integers: distinct patterns (or headers
//! subscriptions) are numbered from 0 and a removed one's number is reused, lowest first, so
//! the numbers stay dense and the bitmaps small.
//!
//! # Concurrency: left-right copies
//!
//! All three keep their index in a `LeftRight`: two copies of the state, each behind its own
//! `RwLock`, and an atomic index naming the published one.
//!
//! - A reader loads the index and `try_read`s that copy; if the copy is taken by the writer it
//!   tries the other one. It never blocks: at most one copy is held by the writer at any time,
//!   and a reader that finds both taken (the writer flipped between its two attempts) just
//!   tries again. After acquiring a copy the reader checks that it is still the published
//!   one, so a read sees exactly the state of the last completed publication (reads are
//!   linearizable).
//! - A writer takes a writer mutex, applies its change to the unpublished copy, publishes it
//!   by storing the index, then waits for the readers still on the old copy to leave and
//!   applies the same change there. So a write costs twice its work and may wait for readers;
//!   a lookup never waits for a writer.
//!
//! Why not one `RwLock`: a lookup would wait for every write. Why not an atomically swapped
//! immutable snapshot (`arc-swap`, or crossbeam-epoch, which would need `unsafe` here): each
//! write would copy the whole index (tables of bitmaps) or need persistent maps, so a
//! subscribe at 100,000 subscriptions would cost a copy of everything. Left-right keeps
//! writes proportional to the change, at twice the memory, without a new dependency.
//!
//! Changes are applied twice, so they must be deterministic functions of the state: free
//! numbers are kept in a `BTreeSet` (the lowest is reused) and per-subscriber sets are
//! ordered, so both copies number a new pattern alike.
//!
//! [`InvertedBitmap`]'s topic cache is written by lookups; it lives beside the left-right
//! tables, in sharded `RwLock`s, and is versioned by a generation number (see its docs).

mod headers;
mod inverted;
mod level;

pub use headers::{
    AsHeaderValue, Criterion, Header, HeaderValue, HeaderValueRef, HeadersMatcher,
    HeadersSubscription, MatchMode,
};
pub use inverted::{InvertedBitmap, DEFAULT_CACHE_SIZE};
pub use level::{LevelBitmap, MAX_LEVELS};

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, TryLockError};

use crate::dialect::Pattern;
use crate::matcher::SubscriberId;

/// Two copies of `T`: readers use the published one without ever blocking, the writer
/// changes both in turn. See the module docs.
#[derive(Debug)]
pub(crate) struct LeftRight<T> {
    copies: [RwLock<T>; 2],
    /// Index (0 or 1) of the copy readers should use.
    published: AtomicUsize,
    /// Serialises writers.
    writer: Mutex<()>,
}

impl<T: Clone> LeftRight<T> {
    /// Both copies start as `value`.
    pub(crate) fn new(value: T) -> Self {
        LeftRight {
            copies: [RwLock::new(value.clone()), RwLock::new(value)],
            published: AtomicUsize::new(0),
            writer: Mutex::new(()),
        }
    }
}

impl<T> LeftRight<T> {
    /// Runs `f` on the published copy. Never blocks on a writer.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        let mut i = self.published.load(Ordering::Acquire);
        let mut misses = 0u32;
        loop {
            if let Some(guard) = self.try_read(i) {
                // The copy may have been unpublished (and rewritten by the next change) between
                // the load and the lock: only read it if it is still the published one.
                let now = self.published.load(Ordering::Acquire);
                if now == i {
                    return f(&guard);
                }
                i = now;
                continue;
            }
            i ^= 1;
            misses += 1;
            if misses % 2 == 0 {
                // Both copies were taken: the writer flipped between our attempts.
                std::thread::yield_now();
            }
        }
    }

    fn try_read(&self, i: usize) -> Option<RwLockReadGuard<'_, T>> {
        match self.copies[i].try_read() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Applies `f` to both copies, publishing the first before changing the second; returns
    /// what the first application returned. `f` must act alike on equal states.
    pub(crate) fn write<R>(&self, mut f: impl FnMut(&mut T) -> R) -> R {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.published.load(Ordering::Relaxed);
        let new = old ^ 1;
        let result = {
            let mut copy = self.copies[new].write().unwrap_or_else(|e| e.into_inner());
            f(&mut copy)
        };
        self.published.store(new, Ordering::Release);
        {
            // Waits for the readers still on the old copy.
            let mut copy = self.copies[old].write().unwrap_or_else(|e| e.into_inner());
            f(&mut copy);
        }
        result
    }
}

/// One distinct pattern and its subscribers.
#[derive(Clone, Debug)]
pub(crate) struct Slot {
    /// Shared by both left-right copies.
    pub(crate) pattern: Arc<Pattern>,
    /// Sorted, no duplicates.
    pub(crate) subscribers: Vec<SubscriberId>,
}

/// Distinct patterns numbered from 0, numbers of removed patterns reused lowest first.
#[derive(Clone, Debug, Default)]
pub(crate) struct PatternTable {
    numbers: HashMap<Box<str>, u32>,
    slots: Vec<Option<Slot>>,
    free: BTreeSet<u32>,
    by_subscriber: HashMap<SubscriberId, BTreeSet<u32>>,
    len: usize,
    /// Moved on by every pair added or removed: while it stands still, every topic's answer
    /// does (what `InvertedBitmap` keeps answers by).
    version: u64,
}

/// What a write did to the set of distinct patterns.
#[derive(Clone, Debug)]
pub(crate) enum PatternChange {
    /// A new pattern got this number.
    Added(u32),
    /// The pattern with this number lost its last subscriber; the number is free.
    Removed(u32),
}

impl PatternTable {
    /// The pattern numbered `n`, if that number is in use.
    pub(crate) fn slot(&self, n: u32) -> Option<&Slot> {
        self.slots.get(n as usize).and_then(Option::as_ref)
    }

    /// Every number in use with its slot.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &Slot)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(n, s)| s.as_ref().map(|s| (n as u32, s)))
    }

    /// Appends the subscribers of pattern `n` to `out`.
    pub(crate) fn emit(&self, n: u32, out: &mut Vec<SubscriberId>) {
        if let Some(slot) = self.slot(n) {
            out.extend_from_slice(&slot.subscribers);
        }
    }

    /// The number of `(pattern, subscriber)` pairs.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The count of pairs added and removed so far.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// Adds the pair. `None` if it was there; else the pattern's number and whether the
    /// pattern is new.
    pub(crate) fn subscribe(
        &mut self,
        pattern: &Arc<Pattern>,
        id: SubscriberId,
    ) -> Option<(u32, bool)> {
        let (n, new) = match self.numbers.get(pattern.text()) {
            Some(&n) => (n, false),
            None => {
                let n = match self.free.pop_first() {
                    Some(n) => n,
                    None => {
                        let n = u32::try_from(self.slots.len()).expect("more than 2^32 patterns");
                        self.slots.push(None);
                        n
                    }
                };
                self.slots[n as usize] = Some(Slot {
                    pattern: Arc::clone(pattern),
                    subscribers: Vec::new(),
                });
                self.numbers.insert(pattern.text().into(), n);
                (n, true)
            }
        };
        let subs = &mut self.slots[n as usize]
            .as_mut()
            .expect("numbered")
            .subscribers;
        match subs.binary_search(&id) {
            Ok(_) => None,
            Err(at) => {
                subs.insert(at, id);
                self.by_subscriber.entry(id).or_default().insert(n);
                self.len += 1;
                self.version += 1;
                Some((n, new))
            }
        }
    }

    /// Whether the pair is there (only valid patterns are ever numbered).
    pub(crate) fn contains(&self, text: &str, id: SubscriberId) -> bool {
        self.numbers
            .get(text)
            .and_then(|&n| self.slot(n))
            .is_some_and(|slot| slot.subscribers.binary_search(&id).is_ok())
    }

    /// Removes the pair. `None` if it was not there; else the pattern's number and whether
    /// the pattern is gone (its number freed).
    pub(crate) fn unsubscribe(&mut self, text: &str, id: SubscriberId) -> Option<(u32, bool)> {
        let n = *self.numbers.get(text)?;
        let gone = self.remove_pair(n, id)?.is_some();
        if let Some(set) = self.by_subscriber.get_mut(&id) {
            set.remove(&n);
            if set.is_empty() {
                self.by_subscriber.remove(&id);
            }
        }
        Some((n, gone))
    }

    /// Removes `id` from pattern `n`; `None` if absent, else the pattern if it is gone.
    /// Leaves `by_subscriber` to the caller.
    fn remove_pair(&mut self, n: u32, id: SubscriberId) -> Option<Option<Arc<Pattern>>> {
        let slot = self.slots.get_mut(n as usize)?.as_mut()?;
        let at = slot.subscribers.binary_search(&id).ok()?;
        slot.subscribers.remove(at);
        self.len -= 1;
        self.version += 1;
        if !slot.subscribers.is_empty() {
            return Some(None);
        }
        let slot = self.slots[n as usize].take().expect("numbered");
        self.numbers.remove(slot.pattern.text());
        self.free.insert(n);
        // Keep `slots` short when the highest numbers go.
        while let Some(None) = self.slots.last() {
            let last = (self.slots.len() - 1) as u32;
            self.slots.pop();
            self.free.remove(&last);
        }
        Some(Some(slot.pattern))
    }

    /// Removes every pair of `id`: the numbers of its patterns, in increasing order, each
    /// with the pattern if it is gone (its number freed).
    pub(crate) fn remove_subscriber(
        &mut self,
        id: SubscriberId,
    ) -> Vec<(u32, Option<Arc<Pattern>>)> {
        let Some(numbers) = self.by_subscriber.remove(&id) else {
            return Vec::new();
        };
        numbers
            .into_iter()
            .filter_map(|n| self.remove_pair(n, id).map(|gone| (n, gone)))
            .collect()
    }

    /// Every `(pattern, subscriber)` pair.
    pub(crate) fn subscriptions(&self) -> Vec<(String, SubscriberId)> {
        let mut pairs = Vec::with_capacity(self.len);
        for (_, slot) in self.iter() {
            let text = slot.pattern.text();
            pairs.extend(slot.subscribers.iter().map(|&id| (text.to_owned(), id)));
        }
        pairs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::Dialect;

    fn p(text: &str) -> Arc<Pattern> {
        Arc::new(Dialect::Amqp.parse_pattern(text).unwrap())
    }

    #[test]
    fn numbers_are_reused_lowest_first() {
        let mut t = PatternTable::default();
        assert_eq!(t.subscribe(&p("a"), 1), Some((0, true)));
        assert_eq!(t.subscribe(&p("b"), 1), Some((1, true)));
        assert_eq!(t.subscribe(&p("c"), 1), Some((2, true)));
        assert_eq!(t.subscribe(&p("a"), 2), Some((0, false)));
        assert_eq!(t.subscribe(&p("a"), 2), None);
        assert_eq!(t.unsubscribe("b", 1), Some((1, true)));
        assert_eq!(t.unsubscribe("a", 1), Some((0, false)));
        assert_eq!(t.subscribe(&p("d"), 3), Some((1, true)));
        assert_eq!(t.remove_subscriber(1), vec![(2, Some(p("c")))]);
        assert_eq!(t.subscribe(&p("e"), 3), Some((2, true)));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn left_right_reads_see_completed_writes() {
        let lr = LeftRight::new(0u64);
        for i in 1..=10 {
            lr.write(|v| *v += 1);
            assert_eq!(lr.read(|v| *v), i);
        }
    }

    #[test]
    fn left_right_readers_never_see_a_torn_pair() {
        let lr = LeftRight::new((0u64, 0u64));
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..2000 {
                    lr.write(|(a, b)| {
                        *a += 1;
                        *b += 1;
                    });
                }
            });
            for _ in 0..2 {
                s.spawn(|| {
                    let mut last = 0;
                    for _ in 0..20_000 {
                        let (a, b) = lr.read(|v| *v);
                        assert_eq!(a, b);
                        assert!(a >= last, "reads went back in time");
                        last = a;
                    }
                });
            }
        });
    }
}
