//! `InvertedBitmap`: one roaring bitmap of matching patterns per topic seen, built when the topic
//! is first looked up and kept current on every subscribe and unsubscribe.
//!
//! The technique is the inverted bitmap of Svalgaard and Tveden and of the OpenAMQ white paper
//! ("High-speed message matching", Hintjens, iMatix; OpenAMQ RFC 003): distinct patterns are
//! numbered from 0, numbers of removed patterns reused; each topic seen maps to the bitmap of
//! the numbers of the patterns that match it; a new pattern is tested once against every cached
//! topic, and a removed pattern's bit is cleared everywhere, so no cached answer is ever stale.
//! topicmatch departs from the paper in one way: the topic cache is bounded (least recently
//! used topics dropped), so an unbounded topic space cannot exhaust memory.
//!
//! # Complexity
//!
//! | operation | cost |
//! |---|---|
//! | lookup, cached topic | one hash probe + one walk of the topic's bitmap (its matches) |
//! | lookup, first-seen topic | every pattern tested once with [`pattern_matches`] |
//! | subscribe, new pattern | the pattern tested once against every cached topic |
//! | subscribe, known pattern | O(log subscribers of the pattern) |
//! | unsubscribe of a pattern's last subscriber | one bit cleared per cached topic |
//! | memory | per cached topic: its text and a bitmap of its matches |
//!
//! # Concurrency
//!
//! The pattern table (numbers, patterns, subscribers) is a `LeftRight`: lookups never block
//! on it. The topic cache is written by lookups too, so it cannot be part of it; it is split
//! into shards by topic hash, each a `RwLock`ed map, and is versioned:
//!
//! 1. Every write that changes the set of distinct patterns bumps the table's generation `g`
//!    and records its changes (patterns added or removed) in the table.
//! 2. Every cache entry records the generation its bitmap is exact for.
//! 3. A lookup holding table generation `g` uses an entry of generation `g` as is, and one of
//!    generation `g - 1` with the recorded changes applied on the fly (one pattern test per
//!    added pattern). Anything else it recomputes from the table, and stores if it is newer
//!    than what the cache holds.
//! 4. After publishing generation `g`, the writer brings the entries of generation `g - 1` up to
//!    date shard by shard: it copies their keys under the read lock, tests new patterns with no
//!    lock held, then sets or clears the bits and the generation under the write lock, 64
//!    entries at a time.
//!
//! So a lookup never waits for a writer that is testing patterns: it waits at most for one
//! batch of 64 bit updates in its shard, or for another lookup inserting into its shard (and,
//! when the shard is full, evicting: one pass over the shard every eighth of its size). The
//! shard locks are `RwLock`s, so lookups of cached topics share them; recency is an atomic tick
//! per entry, written under the read lock only when it changes.
//!
//! # Kept answers
//!
//! A topic with many subscribers (a broker's fan-out: hundreds from as many patterns) costs,
//! on each lookup, a walk of its bitmap, a copy of each pattern's subscribers and their
//! deduplication. So an entry also keeps its answer, the subscribers each once, once it has
//! [`KEPT_FROM`] or more, stamped with the pattern table's version (moved on by every pair
//! added or removed); a lookup that reads the table at that version copies it out. Kept
//! answers hold at most [`KEPT_IDS`] ids in all; one that would pass it is not kept.
//!
//! # Cache
//!
//! A bounded LRU by shard: a shard that is full evicts its least recently used eighth (at
//! least one entry) before inserting, so eviction costs O(1) amortised per insert and the cache
//! never holds more than its size. Recency is kept at the granularity of inserts: the shard's
//! clock advances at each insert, and a lookup stamps its entry with the clock's current value,
//! so entries used since the same insert tie (the victim among them is arbitrary). The topic
//! space is split over up to 64 shards by hash, so the LRU order is per shard. A cache of size
//! 0 caches nothing: every lookup tests every pattern.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use roaring::RoaringBitmap;

use super::{LeftRight, PatternChange, PatternTable};
use crate::dialect::{Dialect, Pattern, Topic};
use crate::error::Result;
use crate::matcher::{dedup_from, AnswerStamp, Known, Matcher, SubscriberId};
use crate::reference::pattern_matches;

/// Topics cached by default.
pub const DEFAULT_CACHE_SIZE: usize = 100_000;
/// The fewest entries a shard holds before the cache is split further.
const MIN_SHARD: usize = 1024;
/// The most shards: enough that lookups from a few dozen threads rarely meet.
const MAX_SHARDS: usize = 64;
/// Entries a writer updates per write-lock acquisition.
const BATCH: usize = 64;
/// Answers this long or longer are kept in their entries.
pub const KEPT_FROM: usize = 32;
/// Ids held in all kept answers of one matcher (8 MiB).
pub const KEPT_IDS: usize = 1 << 21;

/// One roaring bitmap of matching patterns per topic seen, in a bounded LRU cache.
#[derive(Debug)]
pub struct InvertedBitmap {
    dialect: Dialect,
    table: LeftRight<Table>,
    cache: Cache,
}

/// The left-right state: the patterns and the generation of the set of patterns.
#[derive(Clone, Debug, Default)]
struct Table {
    patterns: PatternTable,
    /// Bumped by every write that adds or removes a distinct pattern.
    generation: u64,
    /// The changes that took generation `generation - 1` to `generation`.
    last: Vec<PatternChange>,
}

#[derive(Debug)]
struct Cache {
    shards: Box<[RwLock<Shard>]>,
    /// Entries per shard; 0 means no caching.
    capacity: usize,
    /// The size asked for; the shards hold it rounded down to a multiple of their number.
    size: usize,
    hasher: std::collections::hash_map::RandomState,
    /// Ids held by kept answers.
    kept_ids: Arc<AtomicUsize>,
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<Arc<str>, Entry>,
    /// Recency clock, advanced by each insert (under the write lock); a use stamps the entry
    /// with the current tick. Readers only load it, so a hot topic's readers do not all write
    /// one shared counter.
    clock: AtomicU64,
}

#[derive(Debug)]
struct Entry {
    /// Numbers of the patterns matching the topic, exact for `generation`.
    bits: RoaringBitmap,
    generation: u64,
    last_used: AtomicU64,
    /// The topic's answer, once it is [`KEPT_FROM`] long.
    kept: RwLock<Option<Box<Kept>>>,
    /// The version of the kept answer (`u64::MAX` for none), read before `kept` so that a
    /// lookup whose answer is not kept takes no lock for it.
    kept_version: AtomicU64,
}

/// An answer kept in its entry: the subscribers of its bits, each once, for the pattern
/// table at `version`.
#[derive(Debug)]
struct Kept {
    version: u64,
    ids: Box<[SubscriberId]>,
    /// The cache's count of kept ids, given back on drop.
    held: Arc<AtomicUsize>,
    /// Handed out with the answer (see [`Matcher::lookup_str_stamped`]).
    stamp: AnswerStamp,
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.held.fetch_sub(self.ids.len(), Ordering::Relaxed);
    }
}

impl InvertedBitmap {
    /// An empty matcher for `dialect` caching up to [`DEFAULT_CACHE_SIZE`] topics.
    pub fn new(dialect: Dialect) -> Self {
        Self::with_cache_size(dialect, DEFAULT_CACHE_SIZE)
    }

    /// An empty matcher for `dialect` caching up to `topics` topics; 0 caches nothing.
    pub fn with_cache_size(dialect: Dialect, topics: usize) -> Self {
        InvertedBitmap {
            dialect,
            table: LeftRight::new(Table::default()),
            cache: Cache::new(topics),
        }
    }

    /// The cache size asked for. The cache is split into shards that each hold an equal
    /// share, so it may hold a few topics fewer (up to one less per shard).
    pub fn cache_size(&self) -> usize {
        self.cache.size
    }

    /// The number of topics cached now.
    pub fn cached_topics(&self) -> usize {
        self.cache.shards.iter().map(|s| read(s).map.len()).sum()
    }

    /// Records a write's pattern changes as a new generation; returns it.
    fn bump(table: &mut Table, changes: Vec<PatternChange>) -> u64 {
        table.generation += 1;
        table.last = changes;
        table.generation
    }

    /// Brings the cache entries of generation `generation - 1` to `generation`, which the
    /// table has published with `changes`. Caller holds no lock.
    fn update_cache(&self, generation: u64, changes: &[(PatternChange, Option<Arc<Pattern>>)]) {
        if self.cache.capacity == 0 || changes.is_empty() {
            return;
        }
        let added = changes
            .iter()
            .any(|(c, _)| matches!(c, PatternChange::Added(_)));
        for shard in self.cache.shards.iter() {
            let keys: Vec<Arc<str>> = read(shard)
                .map
                .iter()
                .filter(|(_, e)| e.generation + 1 == generation)
                .map(|(k, _)| Arc::clone(k))
                .collect();
            // Test the new patterns with no lock held: `set[i * changes.len() + j]` tells
            // whether change `j` leaves bit set in entry `keys[i]`.
            let mut set: Vec<bool> = Vec::with_capacity(keys.len() * changes.len());
            for key in &keys {
                let topic = if added {
                    self.dialect.parse_topic(key).ok()
                } else {
                    None
                };
                set.extend(changes.iter().map(|(change, pattern)| match change {
                    PatternChange::Added(_) => match (&topic, pattern) {
                        (Some(t), Some(p)) => pattern_matches(p, t),
                        _ => false,
                    },
                    PatternChange::Removed(_) => false,
                }));
            }
            for (batch, sets) in keys.chunks(BATCH).zip(set.chunks(BATCH * changes.len())) {
                let mut shard = write(shard);
                for (key, sets) in batch.iter().zip(sets.chunks(changes.len())) {
                    let Some(entry) = shard.map.get_mut(key) else {
                        continue;
                    };
                    if entry.generation + 1 != generation {
                        continue;
                    }
                    for ((change, _), &on) in changes.iter().zip(sets) {
                        let n = match change {
                            PatternChange::Added(n) | PatternChange::Removed(n) => *n,
                        };
                        if on {
                            entry.bits.insert(n);
                        } else {
                            entry.bits.remove(n);
                        }
                    }
                    entry.generation = generation;
                }
            }
        }
    }

    /// Applies a write to the table; if it changed the set of patterns, publishes a new
    /// generation and updates the cache. Returns what `f` returned.
    fn write_table<R>(&self, f: impl Fn(&mut PatternTable) -> (R, Vec<PatternChange>)) -> R {
        let (result, changes, generation) = self.table.write(|t| {
            let (result, changes) = f(&mut t.patterns);
            if changes.is_empty() {
                return (result, Vec::new(), t.generation);
            }
            let with_patterns: Vec<(PatternChange, Option<Arc<Pattern>>)> = changes
                .iter()
                .map(|c| match c {
                    PatternChange::Added(n) => {
                        (c.clone(), t.patterns.slot(*n).map(|s| s.pattern.clone()))
                    }
                    PatternChange::Removed(_) => (c.clone(), None),
                })
                .collect();
            let generation = Self::bump(t, changes);
            (result, with_patterns, generation)
        });
        self.update_cache(generation, &changes);
        result
    }
}

impl Table {
    /// The numbers of every pattern matching `topic`.
    fn compute(&self, topic: &Topic<'_>) -> RoaringBitmap {
        let mut bits = RoaringBitmap::new();
        for (n, slot) in self.patterns.iter() {
            if pattern_matches(&slot.pattern, topic) {
                bits.insert(n);
            }
        }
        bits
    }

    /// Emits the subscribers of an entry one generation old, applying `self.last`.
    fn emit_previous(&self, bits: &RoaringBitmap, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        let removed = |n: u32| {
            self.last
                .iter()
                .any(|c| matches!(c, PatternChange::Removed(m) if *m == n))
        };
        for n in bits {
            if !removed(n) {
                self.patterns.emit(n, out);
            }
        }
        for change in &self.last {
            if let PatternChange::Added(n) = change {
                if let Some(slot) = self.patterns.slot(*n) {
                    if pattern_matches(&slot.pattern, topic) {
                        out.extend_from_slice(&slot.subscribers);
                    }
                }
            }
        }
    }

    fn emit(&self, bits: &RoaringBitmap, out: &mut Vec<SubscriberId>) {
        for n in bits {
            self.patterns.emit(n, out);
        }
    }
}

impl Entry {
    /// Copies the kept answer into `out` if it is the answer at table `version`.
    fn copy_kept(
        &self,
        version: u64,
        out: &mut Vec<SubscriberId>,
        known: Known<'_>,
    ) -> Option<AnswerStamp> {
        if self.kept_version.load(Ordering::Relaxed) != version {
            return None;
        }
        let kept = self.kept.read().unwrap_or_else(|e| e.into_inner());
        match &*kept {
            Some(k) if k.version == version => {
                if !known(k.stamp, &k.ids) {
                    out.extend_from_slice(&k.ids);
                }
                Some(k.stamp)
            }
            _ => None,
        }
    }

    /// Keeps `ids`, the answer at table `version`, if it is long enough and the budget
    /// allows.
    fn keep(&self, version: u64, ids: &[SubscriberId], held: &Arc<AtomicUsize>) {
        if ids.len() < KEPT_FROM {
            return;
        }
        if held.fetch_add(ids.len(), Ordering::Relaxed) + ids.len() > KEPT_IDS {
            held.fetch_sub(ids.len(), Ordering::Relaxed);
            return;
        }
        let new = Box::new(Kept {
            version,
            ids: ids.into(),
            held: Arc::clone(held),
            stamp: AnswerStamp::fresh(),
        });
        let mut kept = self.kept.write().unwrap_or_else(|e| e.into_inner());
        let old = kept.replace(new);
        // A hint only: `copy_kept` checks the version again under the lock.
        self.kept_version.store(version, Ordering::Relaxed);
        drop(kept);
        drop(old);
    }

    /// Stamps the entry with `tick`, writing only if it changes (no shared write per lookup).
    fn touch(&self, tick: u64) {
        if self.last_used.load(Ordering::Relaxed) != tick {
            self.last_used.store(tick, Ordering::Relaxed);
        }
    }
}

fn read(lock: &RwLock<Shard>) -> RwLockReadGuard<'_, Shard> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write(lock: &RwLock<Shard>) -> RwLockWriteGuard<'_, Shard> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

impl Cache {
    fn new(topics: usize) -> Self {
        // A power of two, so a shard is picked by masking the hash.
        let shards = match topics {
            0 => 0,
            _ => (topics / MIN_SHARD)
                .clamp(1, MAX_SHARDS)
                .next_power_of_two()
                .min(MAX_SHARDS),
        };
        let capacity = topics.checked_div(shards).unwrap_or(0);
        Cache {
            shards: (0..shards).map(|_| RwLock::default()).collect(),
            capacity,
            size: topics,
            hasher: Default::default(),
            kept_ids: Arc::default(),
        }
    }

    fn shard(&self, text: &str) -> &RwLock<Shard> {
        let h = self.hasher.hash_one(text);
        &self.shards[(h as usize) & (self.shards.len() - 1)]
    }

    /// Stores `bits` for `text` unless the cache already holds a newer entry.
    fn insert(&self, text: &str, bits: RoaringBitmap, generation: u64) {
        let mut shard = write(self.shard(text));
        let tick = shard.clock.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(entry) = shard.map.get_mut(text) {
            if entry.generation < generation {
                entry.bits = bits;
                entry.generation = generation;
            }
            entry.last_used.store(tick, Ordering::Relaxed);
            return;
        }
        if shard.map.len() >= self.capacity {
            evict(&mut shard, self.capacity);
        }
        shard.map.insert(
            text.into(),
            Entry {
                bits,
                generation,
                last_used: AtomicU64::new(tick),
                kept: RwLock::default(),
                kept_version: AtomicU64::new(u64::MAX),
            },
        );
    }
}

/// Drops the least recently used eighth of a full shard (at least one entry).
fn evict(shard: &mut Shard, capacity: usize) {
    let drop = (capacity / 8).max(1).min(shard.map.len());
    if drop == 0 {
        return;
    }
    let mut ages: Vec<(u64, Arc<str>)> = shard
        .map
        .iter()
        .map(|(k, e)| (e.last_used.load(Ordering::Relaxed), Arc::clone(k)))
        .collect();
    ages.select_nth_unstable_by_key(drop - 1, |(t, _)| *t);
    for (_, key) in &ages[..drop] {
        shard.map.remove(key);
    }
}

impl InvertedBitmap {
    /// The lookup, handing out the stamp of a kept answer (and asking `known` first).
    fn lookup_known(
        &self,
        topic: &Topic<'_>,
        out: &mut Vec<SubscriberId>,
        known: Known<'_>,
    ) -> Option<AnswerStamp> {
        assert_eq!(topic.dialect(), self.dialect, "topic of another dialect");
        let start = out.len();
        // Whether `out[start..]` is the answer already, each subscriber once, and the stamp
        // of a kept answer.
        let (done, stamp) = self.table.read(|t| {
            if self.cache.capacity == 0 {
                t.emit(&t.compute(topic), out);
                return (false, None);
            }
            let text = topic.text();
            {
                let shard = read(self.cache.shard(text));
                if let Some(entry) = shard.map.get(text) {
                    entry.touch(shard.clock.load(Ordering::Relaxed));
                    if entry.generation == t.generation {
                        let version = t.patterns.version();
                        if let Some(stamp) = entry.copy_kept(version, out, known) {
                            return (true, Some(stamp));
                        }
                        t.emit(&entry.bits, out);
                        dedup_from(out, start);
                        entry.keep(version, &out[start..], &self.cache.kept_ids);
                        return (true, None);
                    }
                    if entry.generation + 1 == t.generation {
                        t.emit_previous(&entry.bits, topic, out);
                        return (false, None);
                    }
                }
            }
            let bits = t.compute(topic);
            t.emit(&bits, out);
            self.cache.insert(text, bits, t.generation);
            (false, None)
        });
        if !done {
            dedup_from(out, start);
        }
        stamp
    }
}

impl Matcher for InvertedBitmap {
    fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn subscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        assert_eq!(
            pattern.dialect(),
            self.dialect,
            "pattern of another dialect"
        );
        let pattern = Arc::new(pattern.clone());
        self.write_table(|t| match t.subscribe(&pattern, id) {
            None => (false, Vec::new()),
            Some((n, true)) => (true, vec![PatternChange::Added(n)]),
            Some((_, false)) => (true, Vec::new()),
        })
    }

    fn unsubscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        assert_eq!(
            pattern.dialect(),
            self.dialect,
            "pattern of another dialect"
        );
        self.write_table(|t| match t.unsubscribe(pattern.text(), id) {
            None => (false, Vec::new()),
            Some((n, true)) => (true, vec![PatternChange::Removed(n)]),
            Some((_, false)) => (true, Vec::new()),
        })
    }

    fn contains(&self, pattern: &str, id: SubscriberId) -> bool {
        self.table.read(|t| t.patterns.contains(pattern, id))
    }

    fn lookup_into(&self, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        self.lookup_known(topic, out, &mut |_, _| false);
    }

    /// A kept answer hands out its stamp.
    fn lookup_str_stamped(
        &self,
        topic: &str,
        out: &mut Vec<SubscriberId>,
        known: Known<'_>,
    ) -> Result<Option<AnswerStamp>> {
        Ok(self.lookup_known(&self.dialect.parse_topic(topic)?, out, known))
    }

    fn remove_subscriber(&self, id: SubscriberId) -> usize {
        self.write_table(|t| {
            let removed = t.remove_subscriber(id);
            let changes = removed
                .iter()
                .filter(|(_, gone)| gone.is_some())
                .map(|&(n, _)| PatternChange::Removed(n))
                .collect();
            (removed.len(), changes)
        })
    }

    fn len(&self) -> usize {
        self.table.read(|t| t.patterns.len())
    }

    fn subscriptions(&self) -> Vec<(String, SubscriberId)> {
        self.table.read(|t| t.patterns.subscriptions())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(mut v: Vec<SubscriberId>) -> Vec<SubscriberId> {
        v.sort_unstable();
        v
    }

    #[test]
    fn cached_topics_follow_writes() {
        let m = InvertedBitmap::new(Dialect::Amqp);
        m.subscribe_str("a.*", 1).unwrap();
        assert_eq!(m.lookup_str("a.b").unwrap(), vec![1]);
        assert_eq!(m.cached_topics(), 1);
        m.subscribe_str("#", 2).unwrap();
        assert_eq!(sorted(m.lookup_str("a.b").unwrap()), vec![1, 2]);
        m.unsubscribe_str("a.*", 1).unwrap();
        assert_eq!(m.lookup_str("a.b").unwrap(), vec![2]);
        // Number 0 is reused by a pattern that does not match the cached topic.
        m.subscribe_str("x", 3).unwrap();
        assert_eq!(m.lookup_str("a.b").unwrap(), vec![2]);
        assert_eq!(m.remove_subscriber(2), 1);
        assert!(m.lookup_str("a.b").unwrap().is_empty());
        assert_eq!(m.cached_topics(), 1);
    }

    #[test]
    fn long_answers_are_kept_until_a_pair_changes_and_counted_while_kept() {
        let m = InvertedBitmap::with_cache_size(Dialect::Amqp, 2);
        let kept = || m.cache.kept_ids.load(Ordering::Relaxed);
        for id in 0..40 {
            m.subscribe_str("a.*", id).unwrap();
            m.subscribe_str("#", id).unwrap(); // every subscriber reached twice
        }
        assert_eq!(
            sorted(m.lookup_str("a.b").unwrap()),
            (0..40).collect::<Vec<_>>()
        );
        assert_eq!(kept(), 0, "stored on the first lookup, kept on the second");
        assert_eq!(
            sorted(m.lookup_str("a.b").unwrap()),
            (0..40).collect::<Vec<_>>()
        );
        assert_eq!(kept(), 40);
        assert_eq!(m.lookup_str("a.b").unwrap().len(), 40);
        // A pair of a pattern already there: no new generation, a new version.
        m.unsubscribe_str("a.*", 7).unwrap();
        m.unsubscribe_str("#", 7).unwrap();
        m.subscribe_str("a.*", 99).unwrap();
        let want: Vec<SubscriberId> = (0..40).filter(|&i| i != 7).chain([99]).collect();
        assert_eq!(sorted(m.lookup_str("a.b").unwrap()), want);
        assert_eq!(kept(), 40, "the new answer replaced the old one");
        assert_eq!(sorted(m.lookup_str("a.b").unwrap()), want);
        // Other topics' long answers are kept too, within the two entries cached.
        for t in ["x", "y", "z", "w"] {
            m.lookup_str(t).unwrap();
            m.lookup_str(t).unwrap();
        }
        assert_eq!(kept(), 2 * 39, "`#` has 39 subscribers now");
        // With no subscribers, answers are empty and not kept; evicting the entries that
        // kept long ones gives their ids back.
        for id in (0..40).chain([99]) {
            m.remove_subscriber(id);
        }
        for t in ["p", "q", "r", "s"] {
            assert!(m.lookup_str(t).unwrap().is_empty());
        }
        assert_eq!(kept(), 0);
    }

    #[test]
    fn a_kept_answer_hands_out_its_stamp_until_a_pair_changes() {
        let m = InvertedBitmap::with_cache_size(Dialect::Amqp, 8);
        for id in 0..40 {
            m.subscribe_str("a.*", id).unwrap();
        }
        // The stamp and how many ids were appended, `known` answering `known` after checking
        // that it is asked about the whole answer.
        let stamped = |known: bool, len: usize| {
            let mut out = Vec::new();
            let stamp = m
                .lookup_str_stamped("a.b", &mut out, &mut |_, ids| {
                    assert_eq!(ids.len(), len);
                    known
                })
                .unwrap();
            (stamp, out.len())
        };
        // Stored on the first lookup, kept on the second, stamped from the third.
        assert_eq!(stamped(false, 40), (None, 40));
        assert_eq!(stamped(false, 40), (None, 40));
        let (first, n) = stamped(false, 40);
        assert!(first.is_some() && n == 40);
        assert_eq!(
            stamped(true, 40),
            (first, 0),
            "a known answer is not appended"
        );
        // A new pair: the kept answer is stale; the next one kept has a stamp of its own.
        m.subscribe_str("a.b", 40).unwrap();
        assert_eq!(stamped(false, 41), (None, 41));
        let (again, n) = stamped(false, 41);
        assert!(again.is_some() && again != first && n == 41);
        assert!(InvertedBitmap::with_cache_size(Dialect::Amqp, 0)
            .lookup_str_stamped("a.b", &mut Vec::new(), &mut |_, _| true)
            .unwrap()
            .is_none());
    }

    #[test]
    fn the_cache_stays_within_its_size() {
        let m = InvertedBitmap::with_cache_size(Dialect::Mqtt, 3);
        m.subscribe_str("#", 1).unwrap();
        for i in 0..50 {
            assert_eq!(m.lookup_str(&format!("t/{i}")).unwrap(), vec![1]);
            assert!(m.cached_topics() <= 3);
        }
        // The most recent topic is still cached.
        assert_eq!(m.cache_size(), 3);
    }

    #[test]
    fn least_recently_used_topics_go_first() {
        let m = InvertedBitmap::with_cache_size(Dialect::Nats, 3);
        m.subscribe_str(">", 1).unwrap();
        for t in ["a", "b", "c"] {
            m.lookup_str(t).unwrap();
        }
        m.lookup_str("a").unwrap(); // b is now the least recently used
        m.lookup_str("d").unwrap();
        let cached: Vec<bool> = ["a", "b", "c", "d"]
            .iter()
            .map(|t| read(m.cache.shard(t)).map.contains_key(*t))
            .collect();
        assert_eq!(cached, vec![true, false, true, true]);
    }

    #[test]
    fn cache_size_zero_caches_nothing() {
        let m = InvertedBitmap::with_cache_size(Dialect::Amqp, 0);
        m.subscribe_str("a.#", 7).unwrap();
        assert_eq!(m.lookup_str("a.b.c").unwrap(), vec![7]);
        assert_eq!(m.cached_topics(), 0);
        assert_eq!(m.cache_size(), 0);
    }

    #[test]
    fn an_entry_one_generation_old_is_corrected_on_the_fly() {
        let m = InvertedBitmap::new(Dialect::Amqp);
        m.subscribe_str("a", 1).unwrap();
        m.lookup_str("a").unwrap();
        // Age the entry by hand, as if the writer had not reached its shard yet.
        m.table.write(|t| {
            t.patterns
                .subscribe(&Arc::new(Dialect::Amqp.parse_pattern("*").unwrap()), 2);
            InvertedBitmap::bump(t, vec![PatternChange::Added(1)]);
        });
        assert_eq!(sorted(m.lookup_str("a").unwrap()), vec![1, 2]);
    }

    /// Publishes a subscribe in the table only, as a writer that has not yet reached the cache.
    fn subscribe_table_only(m: &InvertedBitmap, pattern: &str, id: SubscriberId) {
        let p = Arc::new(m.dialect.parse_pattern(pattern).unwrap());
        m.table.write(|t| {
            let changes = match t.patterns.subscribe(&p, id) {
                Some((n, true)) => vec![PatternChange::Added(n)],
                _ => Vec::new(),
            };
            InvertedBitmap::bump(t, changes);
        });
    }

    fn entry_generation(m: &InvertedBitmap, topic: &str) -> Option<u64> {
        read(m.cache.shard(topic))
            .map
            .get(topic)
            .map(|e| e.generation)
    }

    #[test]
    fn an_entry_two_generations_old_is_recomputed_and_replaced() {
        let m = InvertedBitmap::new(Dialect::Mqtt);
        m.subscribe_str("a/+", 1).unwrap();
        m.lookup_str("a/b").unwrap();
        assert_eq!(entry_generation(&m, "a/b"), Some(1));
        subscribe_table_only(&m, "a/b", 2);
        subscribe_table_only(&m, "#", 3);
        assert_eq!(sorted(m.lookup_str("a/b").unwrap()), vec![1, 2, 3]);
        assert_eq!(entry_generation(&m, "a/b"), Some(3));
        // A writer arriving late for generation 3 finds the entry current and leaves it.
        let p = Arc::new(m.dialect.parse_pattern("#").unwrap());
        m.update_cache(3, &[(PatternChange::Added(2), Some(p))]);
        assert_eq!(sorted(m.lookup_str("a/b").unwrap()), vec![1, 2, 3]);
    }

    #[test]
    fn an_older_result_never_overwrites_a_newer_entry() {
        let m = InvertedBitmap::new(Dialect::Amqp);
        m.subscribe_str("a", 1).unwrap();
        m.lookup_str("a").unwrap();
        let mut stale = RoaringBitmap::new();
        stale.insert(7);
        m.cache.insert("a", stale, 0);
        assert_eq!(entry_generation(&m, "a"), Some(1));
        assert_eq!(m.lookup_str("a").unwrap(), vec![1]);
    }

    #[test]
    fn a_reused_number_is_never_read_through_a_stale_bit() {
        let m = InvertedBitmap::new(Dialect::Amqp);
        m.subscribe_str("a", 1).unwrap(); // number 0 matches "a"
        m.lookup_str("a").unwrap();
        // Remove it and reuse number 0 for a pattern that does not match, all behind the
        // cache's back: the entry is two generations old and must not be trusted.
        m.table.write(|t| {
            let (n, _) = t.patterns.unsubscribe("a", 1).unwrap();
            InvertedBitmap::bump(t, vec![PatternChange::Removed(n)]);
        });
        subscribe_table_only(&m, "b", 2);
        assert!(m.lookup_str("a").unwrap().is_empty());
    }
}
