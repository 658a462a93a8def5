//! [`SelectorIndex`]: which subscribers want an update, when subscribers name topics by
//! selectors that no trie can index (URI templates, regular expressions).
//!
//! Source: skipfilter (`dunglas/skipfilter`, Kévin Dunglas, after `kevburnsjr/skipfilter`),
//! written for the Mercure hub, which had been testing every selector of every subscriber
//! against every topic of every update. skipfilter keeps subscribers in a list ordered by an
//! ever-growing id and caches, per topic, a roaring bitmap of the subscribers that want it plus
//! a cursor into the list: a lookup tests only the subscribers added past the cursor, and drops
//! the bits of removed subscribers when it meets them.
//!
//! # Design
//!
//! - **Slots.** Each subscriber (an external [`SubscriberId`]) gets a dense internal slot id, the
//!   lowest free one, so bitmaps stay small and the slot table stays compact; trailing free
//!   slots are truncated.
//! - **Sequence numbers.** skipfilter's cursor is an index into an append-only list; here slot
//!   ids are reused and a subscriber's selectors change one `subscribe` at a time, so the
//!   cursor is a *sequence number* instead. A global counter is bumped whenever a slot is given
//!   to a subscriber or its selector set changes, and the slot takes the new value as its
//!   `seq`; a `BTreeMap` orders live slots by `seq`.
//! - **Topic entries.** A cached topic has a bitmap of slots and a cursor `c`, the counter's
//!   value when the entry was last brought up to date. Invariants:
//!   1. for every live slot `s` with `seq(s) <= c`, bit `s` is set iff one of `s`'s selectors
//!      admits the topic;
//!   2. a set bit for a slot that is not live is stale and is never reported.
//!
//!   A lookup brings an entry up to date by testing the slots whose `seq` is in `(c, counter]`
//!   (a range of the `BTreeMap`: the subscribers new or changed since) and setting *or
//!   clearing* their bit, then sets `c` to the counter. A reused slot id always gets a `seq`
//!   above every cursor, so it is retested and never inherits its previous owner's bit (1).
//!   Bits of freed slots are dropped lazily, when a lookup meets them (2).
//! - **Cache.** Entries live in an LRU of configurable size ([`DEFAULT_CACHE_SIZE`] topics; 0
//!   disables it and each lookup tests every subscriber). Caches of 1,024 topics or more are
//!   split into 16 shards by topic hash, each an exact LRU of a sixteenth of the size.
//! - **Selectors** are compiled once per distinct text and shared by reference count, however
//!   many subscribers use them.
//!
//! # Concurrency
//!
//! Every method takes `&self`; `SelectorIndex` is `Send + Sync`. The subscriber table (slots,
//! selectors, counter) is behind one `RwLock`: writers (`subscribe`, `unsubscribe`,
//! `remove_subscriber`) take it exclusively for O(log n) work (selectors are compiled before
//! it is taken); a lookup holds it shared for its whole run, so many lookups proceed in
//! parallel and all see one state. Lock order: table, then one cache shard's `Mutex` (held only
//! to find or insert an entry, O(1)), then one entry's `RwLock`. A cache hit with nothing new
//! to test takes the entry's lock shared and only ORs its bitmap; bringing an entry up to date
//! or dropping stale bits takes it exclusively, so concurrent lookups of one stale topic test
//! each subscriber once, not once each.
//!
//! # Complexity
//!
//! With `n` live subscribers, `k` selectors per subscriber and `d` subscribers new or changed
//! since a topic's entry was last brought up to date:
//!
//! | operation | cost |
//! |---|---|
//! | `subscribe`, `unsubscribe` | O(log n + k) plus compiling a selector not yet in use |
//! | `remove_subscriber` | O(log n + k) |
//! | `lookup`, cached topic | O(d·k·t) tests plus O(r) to OR and report `r` subscribers |
//! | `lookup`, topic not cached | O(n·k·t) tests, `t` the cost of one test (linear in the topic) |

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use roaring::RoaringBitmap;

use super::lru::Lru;
use super::Selector;
use crate::error::Result;
use crate::matcher::SubscriberId;

/// Topics cached by [`SelectorIndex::new`].
pub const DEFAULT_CACHE_SIZE: usize = 100_000;

/// Shards of a large cache, so that lookups of different topics rarely meet on one mutex.
const SHARDS: usize = 16;

/// Caches smaller than this are one shard, so their LRU order is exact.
const SHARDED_MIN: usize = 1024;

/// Counters of the topic cache, read with [`SelectorIndex::cache_stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Topic lookups that found an entry in the cache.
    pub hits: u64,
    /// Topic lookups that did not (every lookup when the cache is disabled).
    pub misses: u64,
    /// Entries evicted to make room.
    pub evictions: u64,
    /// Subscriber-against-topic tests run (each tests all of one subscriber's selectors).
    pub tests: u64,
    /// Topics in the cache now.
    pub topics: usize,
    /// Most topics the cache holds (0: disabled).
    pub capacity: usize,
}

/// One subscriber's slot.
#[derive(Debug)]
struct Slot {
    external: SubscriberId,
    /// The counter's value when this slot was last given out or changed.
    seq: u64,
    selectors: Vec<Arc<Selector>>,
}

impl Slot {
    fn admits(&self, topic: &str) -> bool {
        self.selectors.iter().any(|s| s.admits(topic))
    }
}

/// The subscriber table. Caller holds the `SelectorIndex`'s lock.
#[derive(Debug, Default)]
struct Table {
    slots: Vec<Option<Slot>>,
    /// Free slot ids below `slots.len()`, lowest reused first.
    free: BTreeSet<u32>,
    by_external: HashMap<SubscriberId, u32>,
    /// Live slots by `seq`.
    by_seq: BTreeMap<u64, u32>,
    /// Compiled selectors in use, with the number of subscribers using each.
    selectors: HashMap<Box<str>, (Arc<Selector>, usize)>,
    /// The last sequence number given out.
    seq: u64,
    /// `(selector, subscriber)` pairs.
    pairs: usize,
}

impl Table {
    fn live(&self, slot: u32) -> Option<&Slot> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    /// Gives `slot` a new sequence number: every topic entry will retest it.
    fn touch(&mut self, slot: u32) {
        self.seq += 1;
        let seq = self.seq;
        let s = self.slots[slot as usize]
            .as_mut()
            .expect("touch a live slot");
        self.by_seq.remove(&s.seq);
        s.seq = seq;
        self.by_seq.insert(seq, slot);
    }

    /// The slot of `external`, given out (lowest free id first) if it has none.
    fn slot_of(&mut self, external: SubscriberId) -> u32 {
        if let Some(&slot) = self.by_external.get(&external) {
            return slot;
        }
        let slot = match self.free.pop_first() {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                u32::try_from(self.slots.len() - 1).expect("more than 2^32 subscribers")
            }
        };
        self.slots[slot as usize] = Some(Slot {
            external,
            seq: 0,
            selectors: Vec::new(),
        });
        self.by_external.insert(external, slot);
        self.touch(slot);
        slot
    }

    /// Frees `slot`, truncating trailing free slots; its bits in cached topics go stale.
    fn free_slot(&mut self, slot: u32) -> Slot {
        let s = self.slots[slot as usize].take().expect("free a live slot");
        self.by_seq.remove(&s.seq);
        self.by_external.remove(&s.external);
        self.free.insert(slot);
        while let Some(None) = self.slots.last() {
            self.slots.pop();
            self.free.remove(&(self.slots.len() as u32));
        }
        s
    }

    /// Drops one use of a selector, and the selector with its last use.
    fn release(&mut self, selector: &str) {
        if let Some((_, uses)) = self.selectors.get_mut(selector) {
            *uses -= 1;
            if *uses == 0 {
                self.selectors.remove(selector);
            }
        }
    }
}

/// A cached topic: the slots whose selectors admit it, complete up to `cursor`.
#[derive(Debug, Default)]
struct Entry {
    cursor: u64,
    bits: RoaringBitmap,
}

impl Entry {
    /// Tests the slots new or changed since `cursor`; returns how many. Caller holds the
    /// table lock (shared) and this entry's lock (exclusive).
    fn refresh(&mut self, table: &Table, topic: &str) -> u64 {
        let mut tests = 0;
        for (_, &slot) in table.by_seq.range(self.cursor + 1..) {
            let s = table.live(slot).expect("by_seq names live slots");
            if s.admits(topic) {
                self.bits.insert(slot);
            } else {
                self.bits.remove(slot);
            }
            tests += 1;
        }
        self.cursor = table.seq;
        tests
    }
}

type Shard = Mutex<Lru<Arc<RwLock<Entry>>>>;

/// The topic cache: one or [`SHARDS`] LRU shards.
struct TopicCache {
    shards: Box<[Shard]>,
    hasher: RandomState,
    capacity: usize,
}

impl TopicCache {
    fn new(capacity: usize) -> Self {
        let n = if capacity >= SHARDED_MIN { SHARDS } else { 1 };
        let per_shard = capacity.div_ceil(n);
        TopicCache {
            shards: (0..n).map(|_| Mutex::new(Lru::new(per_shard))).collect(),
            hasher: RandomState::new(),
            capacity,
        }
    }

    /// The entry of `topic`, inserted empty if absent; whether it was there; whether an entry
    /// was evicted for it.
    fn entry(&self, topic: &str) -> (Arc<RwLock<Entry>>, bool, bool) {
        let shard = if self.shards.len() == 1 {
            &self.shards[0]
        } else {
            &self.shards[self.hasher.hash_one(topic) as usize % self.shards.len()]
        };
        let mut lru = shard.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = lru.get(topic) {
            return (e.clone(), true, false);
        }
        let e = Arc::new(RwLock::new(Entry::default()));
        let evicted = lru.insert(topic, e.clone());
        (e, false, evicted)
    }

    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

/// Subscribers and their selectors; answers which subscribers want an update.
///
/// ```
/// use topicmatch::SelectorIndex;
///
/// let index = SelectorIndex::new();
/// index.subscribe("https://example.com/books/{id}", 7).unwrap();
/// index.subscribe("https://example.com/books/1", 8).unwrap();
/// index.subscribe("re:https://example\\.com/authors/[0-9]+", 9).unwrap();
/// let mut who = index.lookup(&["https://example.com/books/1", "https://example.com/authors/2"]);
/// who.sort();
/// assert_eq!(who, vec![7, 8, 9]);
/// ```
pub struct SelectorIndex {
    table: RwLock<Table>,
    /// `None`: caching disabled.
    cache: Option<TopicCache>,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    tests: AtomicU64,
}

impl Default for SelectorIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for SelectorIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelectorIndex")
            .field("pairs", &self.len())
            .field("cache", &self.cache_stats())
            .finish()
    }
}

impl SelectorIndex {
    /// An empty index caching [`DEFAULT_CACHE_SIZE`] topics.
    pub fn new() -> Self {
        Self::with_cache_size(DEFAULT_CACHE_SIZE)
    }

    /// An empty index caching at most `topics` topics; 0 disables the cache, so every lookup
    /// tests every subscriber.
    pub fn with_cache_size(topics: usize) -> Self {
        SelectorIndex {
            table: RwLock::default(),
            cache: (topics > 0).then(|| TopicCache::new(topics)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            tests: AtomicU64::new(0),
        }
    }

    /// Subscribes `subscriber` to `selector`; `Ok(true)` if the pair is new.
    /// An invalid selector is [`crate::Error::InvalidPattern`].
    pub fn subscribe(&self, selector: &str, subscriber: SubscriberId) -> Result<bool> {
        let known = read(&self.table)
            .selectors
            .get(selector)
            .map(|(s, _)| s.clone());
        // Compile outside the lock: a regular expression can take a while.
        let compiled = match known {
            Some(s) => s,
            None => Arc::new(Selector::parse(selector)?),
        };
        let mut t = write(&self.table);
        if let Some(&slot) = t.by_external.get(&subscriber) {
            let s = t.live(slot).expect("by_external names live slots");
            if s.selectors.iter().any(|x| x.as_str() == selector) {
                return Ok(false);
            }
        }
        let shared = match t.selectors.get_mut(selector) {
            Some((s, uses)) => {
                *uses += 1;
                s.clone()
            }
            None => {
                t.selectors.insert(selector.into(), (compiled.clone(), 1));
                compiled
            }
        };
        let slot = t.slot_of(subscriber);
        t.slots[slot as usize]
            .as_mut()
            .expect("slot_of gives a live slot")
            .selectors
            .push(shared);
        t.touch(slot);
        t.pairs += 1;
        Ok(true)
    }

    /// Unsubscribes `subscriber` from `selector`; `Ok(true)` if the pair was there.
    /// An invalid selector is [`crate::Error::InvalidPattern`], as in [`Self::subscribe`].
    pub fn unsubscribe(&self, selector: &str, subscriber: SubscriberId) -> Result<bool> {
        {
            let mut t = write(&self.table);
            if t.selectors.contains_key(selector) {
                let Some(&slot) = t.by_external.get(&subscriber) else {
                    return Ok(false);
                };
                let s = t.slots[slot as usize].as_mut().expect("live slot");
                let Some(i) = s.selectors.iter().position(|x| x.as_str() == selector) else {
                    return Ok(false);
                };
                s.selectors.swap_remove(i);
                let now_empty = s.selectors.is_empty();
                t.release(selector);
                t.pairs -= 1;
                if now_empty {
                    t.free_slot(slot);
                } else {
                    t.touch(slot);
                }
                return Ok(true);
            }
        }
        // No subscriber uses it: only say whether it is valid (compiled outside the lock).
        Selector::parse(selector).map(|_| false)
    }

    /// Removes every selector of `subscriber`; returns how many there were.
    pub fn remove_subscriber(&self, subscriber: SubscriberId) -> usize {
        let mut t = write(&self.table);
        let Some(&slot) = t.by_external.get(&subscriber) else {
            return 0;
        };
        let s = t.free_slot(slot);
        for sel in &s.selectors {
            t.release(sel.as_str());
        }
        t.pairs -= s.selectors.len();
        s.selectors.len()
    }

    /// The subscribers with a selector that admits at least one of `topics` (an update's
    /// topics), each once, in no particular order.
    pub fn lookup(&self, topics: &[&str]) -> Vec<SubscriberId> {
        if topics.is_empty() {
            return Vec::new();
        }
        let t = read(&self.table);
        let mut found = RoaringBitmap::new();
        let Some(cache) = &self.cache else {
            let mut tests = 0;
            for (&_, &slot) in &t.by_seq {
                let s = t.live(slot).expect("by_seq names live slots");
                tests += 1;
                if topics.iter().any(|topic| s.admits(topic)) {
                    found.insert(slot);
                }
            }
            self.misses.fetch_add(topics.len() as u64, Relaxed);
            self.tests.fetch_add(tests, Relaxed);
            return found
                .iter()
                .map(|slot| t.slots[slot as usize].as_ref().expect("live").external)
                .collect();
        };
        let mut entries = Vec::with_capacity(topics.len());
        for &topic in topics {
            let (entry, hit, evicted) = cache.entry(topic);
            if hit {
                self.hits.fetch_add(1, Relaxed);
            } else {
                self.misses.fetch_add(1, Relaxed);
            }
            if evicted {
                self.evictions.fetch_add(1, Relaxed);
            }
            {
                let e = read(&entry);
                if e.cursor == t.seq {
                    found |= &e.bits;
                    entries.push(entry.clone());
                    continue;
                }
            }
            {
                let mut e = write(&entry);
                if e.cursor != t.seq {
                    let tests = e.refresh(&t, topic);
                    self.tests.fetch_add(tests, Relaxed);
                }
                found |= &e.bits;
            }
            entries.push(entry);
        }
        let mut out = Vec::with_capacity(found.len() as usize);
        let mut stale = RoaringBitmap::new();
        for slot in &found {
            match t.live(slot) {
                Some(s) => out.push(s.external),
                None => {
                    stale.insert(slot);
                }
            }
        }
        if !stale.is_empty() {
            for entry in &entries {
                let mut e = write(entry);
                e.bits -= &stale;
            }
        }
        out
    }

    /// The number of `(selector, subscriber)` pairs.
    pub fn len(&self) -> usize {
        read(&self.table).pairs
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of subscribers with at least one selector.
    pub fn subscriber_count(&self) -> usize {
        read(&self.table).by_external.len()
    }

    /// The number of distinct selectors in use, each compiled once.
    pub fn selector_count(&self) -> usize {
        read(&self.table).selectors.len()
    }

    /// Every `(selector, subscriber)` pair, in no particular order.
    pub fn subscriptions(&self) -> Vec<(String, SubscriberId)> {
        let t = read(&self.table);
        let mut out = Vec::with_capacity(t.pairs);
        for s in t.slots.iter().flatten() {
            for sel in &s.selectors {
                out.push((sel.as_str().to_owned(), s.external));
            }
        }
        out
    }

    /// The topic cache's counters.
    pub fn cache_stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
            tests: self.tests.load(Relaxed),
            topics: self.cache.as_ref().map_or(0, TopicCache::len),
            capacity: self.cache.as_ref().map_or(0, |c| c.capacity),
        }
    }

    /// Checks the table's invariants; panics with the broken one. For tests.
    #[doc(hidden)]
    pub fn validate(&self) {
        let t = read(&self.table);
        let mut pairs = 0;
        let mut uses: HashMap<&str, usize> = HashMap::new();
        for (i, s) in t.slots.iter().enumerate() {
            match s {
                None => assert!(
                    t.free.contains(&(i as u32)),
                    "slot {i} neither live nor free"
                ),
                Some(s) => {
                    assert!(!s.selectors.is_empty(), "live slot {i} without selectors");
                    assert_eq!(t.by_external.get(&s.external), Some(&(i as u32)));
                    assert_eq!(t.by_seq.get(&s.seq), Some(&(i as u32)));
                    assert!(s.seq <= t.seq);
                    pairs += s.selectors.len();
                    for sel in &s.selectors {
                        *uses.entry(sel.as_str()).or_default() += 1;
                    }
                }
            }
        }
        assert!(!matches!(t.slots.last(), Some(None)), "trailing free slot");
        assert!(t.free.iter().all(|&f| (f as usize) < t.slots.len()));
        assert_eq!(t.by_seq.len(), t.by_external.len());
        assert_eq!(pairs, t.pairs);
        assert_eq!(uses.len(), t.selectors.len());
        for (text, (sel, n)) in &t.selectors {
            assert_eq!(sel.as_str(), &**text);
            assert_eq!(uses.get(&**text), Some(n), "use count of {text:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SelectorIndex;

    const _: fn() = || {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<SelectorIndex>();
    };

    fn sorted(mut v: Vec<u32>) -> Vec<u32> {
        v.sort_unstable();
        v
    }

    #[test]
    fn a_reused_slot_never_inherits_a_stale_bit() {
        let idx = SelectorIndex::with_cache_size(10);
        idx.subscribe("x", 1).unwrap();
        assert_eq!(idx.lookup(&["x"]), vec![1]); // x cached with slot 0 set
        assert_eq!(idx.remove_subscriber(1), 1);
        idx.subscribe("y", 2).unwrap(); // reuses slot 0
        assert_eq!(idx.lookup(&["x"]), Vec::<u32>::new());
        assert_eq!(idx.lookup(&["y"]), vec![2]);
        idx.validate();
    }

    #[test]
    fn a_freed_slot_is_dropped_lazily_and_not_reported() {
        let idx = SelectorIndex::with_cache_size(10);
        idx.subscribe("x", 1).unwrap();
        idx.subscribe("x", 2).unwrap();
        assert_eq!(sorted(idx.lookup(&["x"])), vec![1, 2]);
        idx.remove_subscriber(1);
        assert_eq!(idx.lookup(&["x"]), vec![2]);
        assert_eq!(idx.lookup(&["x"]), vec![2]);
        idx.validate();
    }

    #[test]
    fn unsubscribing_one_selector_clears_the_bit() {
        let idx = SelectorIndex::with_cache_size(10);
        idx.subscribe("x", 1).unwrap();
        idx.subscribe("y", 1).unwrap();
        assert_eq!(idx.lookup(&["x"]), vec![1]);
        assert!(idx.unsubscribe("x", 1).unwrap());
        assert_eq!(idx.lookup(&["x"]), Vec::<u32>::new());
        assert_eq!(idx.lookup(&["y"]), vec![1]);
        idx.validate();
    }

    #[test]
    fn a_new_selector_of_a_known_subscriber_is_tested_at_the_next_lookup() {
        let idx = SelectorIndex::with_cache_size(10);
        idx.subscribe("y", 1).unwrap();
        assert_eq!(idx.lookup(&["x"]), Vec::<u32>::new());
        idx.subscribe("re:x|z", 1).unwrap();
        assert_eq!(idx.lookup(&["x"]), vec![1]);
        let stats = idx.cache_stats();
        assert_eq!((stats.hits, stats.misses, stats.tests), (1, 1, 2));
    }

    #[test]
    fn a_cache_hit_with_nothing_new_runs_no_test() {
        let idx = SelectorIndex::with_cache_size(10);
        for i in 0..100 {
            idx.subscribe("https://example.com/{x}", i).unwrap();
        }
        assert_eq!(idx.lookup(&["https://example.com/1"]).len(), 100);
        assert_eq!(idx.cache_stats().tests, 100);
        assert_eq!(idx.lookup(&["https://example.com/1"]).len(), 100);
        assert_eq!(idx.cache_stats().tests, 100);
        assert_eq!(idx.selector_count(), 1);
    }

    #[test]
    fn slots_stay_compact() {
        let idx = SelectorIndex::with_cache_size(0);
        for i in 0..10 {
            idx.subscribe("a", 100 + i).unwrap();
        }
        for i in 0..10 {
            idx.remove_subscriber(100 + i);
        }
        idx.validate();
        assert_eq!(idx.subscriber_count(), 0);
        assert_eq!(idx.selector_count(), 0);
        assert!(idx.is_empty());
    }
}
