//! `Cached<M>`: a front cache of lookup results, `topic -> subscribers`, for any [`Matcher`],
//! after the result cache of the NATS server's sublist (`server/sublist.go`: `match` reads the
//! cache first, `Insert`/`Remove` keep it true, `Stats()` reports the hit rate). It is itself a
//! [`Matcher`], so every test and fuzz target runs on it unchanged.
//!
//! Three promises:
//!
//! 1. **It never lies.** A lookup returns what the inner matcher would return at some instant
//!    within the lookup, and a lookup that starts after a write has returned sees that write.
//!    The rule and its proof are in the comment of `Cached::write`.
//! 2. **A hit takes no lock and allocates nothing but the returned list.** The table is a fixed
//!    array of sets of [`WAYS`] slots, each a `crossbeam_epoch::Atomic<Entry>`, a set's slots
//!    and its topic hashes on one cache line, and a topic whose set is full goes to the set's
//!    buddy, the other line of their 128-byte pair: a hit pins, finds its hash, loads that
//!    entry, compares and copies the ids out (or hands the entry's stamp to a caller that
//!    kept what it made of them: `Matcher::lookup_str_stamped`); a miss that stores an entry swaps it in with one
//!    CAS and retires the old one with `defer_destroy`. Entries are immutable once published,
//!    but for the counts through which they are known true, which hits move forward.
//! 3. **It never makes a cold workload slow.** On a wide topic space (`users.<id>.events` with
//!    a million ids) nearly every lookup misses, and a miss that stores an entry costs three
//!    allocations, a CAS and the retirement of the entry it evicts: more than a hit saves on a
//!    small trie. Two rules keep misses cheap. A doorkeeper (TinyLFU's: one bit per topic hash
//!    in a bit array, cleared when half full) lets a miss whose set is full store only a topic
//!    seen before, so topics seen once do not evict; a set with a free slot takes a topic at
//!    its first miss (waiting would cost every topic that repeats a second walk of the matcher
//!    behind). And admission watches each window of lookups: when topics that repeat (hits,
//!    and misses of topics seen before) fall below the bar for the matcher behind (the share
//!    of hits that repays the probes' cost, from that matcher's lookups timed now and then:
//!    [`OFF_BELOW_PERCENT`] for a small trie, a few percent for one whose walk takes
//!    microseconds), or hits below [`STORE_COST`] per entry stored over a stale one
//!    or evicting a live one while the workload outgrows the table, the cache does not pay,
//!    and admission turns it off: lookups go straight to the inner matcher (the doorkeeper
//!    still marks their topics), except those of one topic in [`SAMPLE`] (a slice of the hash
//!    space that moves on after a few passes over the topics held), which still probe and
//!    store, so that a workload turning hot is noticed and the cache turns back on (from twice
//!    the bar, [`ON_FROM_PERCENT`] for a small trie, judged every [`SAMPLED_WINDOW`] sampled
//!    lookups).
//!
//!    Long cycles: a workload that cycles through more topics than a window holds (10,000
//!    topics in turn) looks cold in its first pass. Its second pass shows it repeating, to the
//!    doorkeeper, before the cache has anything to hit; filling the table then evicts in the
//!    sets that fill first, which is not charged while the topics seen lately fit in the
//!    table; and each time sampling turns the cache back on, it gets more windows before too
//!    few repeats turn it off again (see `Cache::judge`). BENCHMARKS.md, "The result cache",
//!    has the hit rate per pass.
//!
//! Bounds: at most `cache_size` entries (rounded up to a power of two of whole sets) and at
//! most `max_bytes` of topic text, ids and entry headers; an entry that would pass the byte
//! budget is not stored. (The budget is checked before the CAS that stores, so lookups storing
//! at the same instant may pass it by one entry each.)
//!
//! A write invalidates only the entries whose results it can change: each write bumps one
//! counter picked by its pattern's leading literal words and leaves a summary of its pattern
//! in that counter's log; an entry stays true while the counters of its topic's leading words
//! stand still, or while every write logged since cannot match its topic (`shards.rs`). A
//! writer that churns `sensors.*.temp` leaves the entries of `orders.eu` alone, and one that
//! churns `+/+/temp` those of `a/b/c/d`. (NATS patches the matching entries on each insert
//! instead, at the cost of a pass over the cache per write.)
//!
//! The topic hash is foldhash's quality hash with a fixed seed (fast, not collision
//! resistant): crafted topics that share a set only lower the hit rate, since a hit compares
//! the whole topic.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::OnceLock;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};
use smol_str::SmolStr;

mod shards;
use self::shards::{LazyPrint, Shards, Summary, TopicPrint, TopicShards, MASKS};

use crate::cstrie::CSTrie;
use crate::dialect::{Dialect, Pattern, Topic};
use crate::error::Result;
use crate::matcher::{AnswerStamp, Known, Matcher, SubscriberId};

/// Slots per set. Four keeps a probe to a few loads and lets two or three hot topics that hash
/// to one set live side by side.
pub const WAYS: usize = 4;

/// Entries a cache holds by default, in the Python bindings (`Trie(cache_size=...)`). The
/// fast-topic-matching workload has about 2,200 distinct topics; 16,384 keeps them all with
/// room, and a full table of small entries stays under 4 MiB (see [`BYTES_PER_ENTRY`]).
pub const DEFAULT_CACHE_SIZE: usize = 16_384;

/// Pairs from which [`Cached::subscribe_each_str`] writes them as one write on every topic
/// rather than one write each: a few dozen single writes already reach most of the shards.
const BULK_PAIRS: usize = 64;

/// Bytes of stored answers from which a batch (`lookup_arrow`, and from Python `lookup_many`
/// and `count_many`) announces its next topics to the cache ([`Matcher::prefetches`]): past a
/// core's own caches (2 MiB, about 10,000 answers of 30 subscribers), a hit waits on memory
/// for its set, then its entry, then the entry's ids, and fetching each a few topics ahead
/// overlaps those waits with the lookups before. On a Spark worker's 100,000 distinct topics
/// `lookup_arrow` took about a third less time so; on answers that stay in the caches the
/// hints are instructions with nothing to overlap (2,000 hot topics: 781 instructions a topic
/// without them, 1,031 with the set and entry hinted, 1,207 with the ids too), hence the
/// threshold.
pub const PREFETCH_FROM_BYTES: usize = 2 << 20;

/// The largest `cache_size` taken: 2^24 entries, a table of 256 MiB (a set of four slots and
/// their tags takes 64 bytes).
pub const MAX_CACHE_SIZE: usize = 1 << 24;

/// The default byte budget per entry of capacity: topic text (past the 23 bytes kept in the
/// header), ids and the entry's header. A typical entry (a 20-byte topic, a few ids, a
/// header of about a hundred bytes) takes under 150.
pub const BYTES_PER_ENTRY: usize = 256;

/// Lookups per admission window (counted per stripe, among those that probe).
pub const WINDOW: u32 = 512;

/// The most failed windows in a row that turning the cache off can take (a power of two).
pub const MAX_STRIKES: u32 = 16;

/// Sampled lookups per admission window while the cache is off: shorter than [`WINDOW`], so
/// that a workload turning hot is noticed within `SAMPLE * SAMPLED_WINDOW` lookups (up to
/// [`WINDOW`] after the store rule failed: see `Cache::judge`).
pub const SAMPLED_WINDOW: u32 = 64;

/// Below this hit rate over a window (percent), admission turns the cache off: a probe that
/// misses costs up to four entry reads from a table that is rarely in the CPU cache, which a
/// quarter of hits pays for even on a small trie. (The store rule, [`STORE_COST`], is the
/// stricter one whenever misses store.)
pub const OFF_BELOW_PERCENT: u32 = 25;

/// From this hit rate among sampled lookups (percent), admission turns the cache back on. Higher
/// than [`OFF_BELOW_PERCENT`] so that a workload near the line does not flip every window.
pub const ON_FROM_PERCENT: u32 = 50;

/// A stored miss costs up to this many times what a hit saves (docs/result-cache.md, "Bounds
/// and admission": about 180 ns to build, publish and later retire an entry, against 113 ns
/// saved by a hit on a `Trie` of 1,000 patterns), so a window pays only with this many hits per
/// store charged (over a stale entry, or evicting while the workload outgrows the table).
pub const STORE_COST: u32 = 2;

/// The store rule's memory, in windows: each window's hits and charged stores count at full
/// weight, the one before at 15/16 of that, the one before that at (15/16)^2, and so on.
/// Where writes come in bursts, entries go stale in bursts: a Python thread that subscribes
/// and unsubscribes in a loop holds the GIL for switch intervals, and the readers' first pass
/// over their topics after one found four entries in five stale, four windows in a row, then
/// twenty windows of hits. Judged by one window, or by a memory of eight, the cache that
/// served 95 % hits beside that writer turned itself off each burst (BENCHMARKS.md, "The
/// store rule's memory"). A workload whose entries keep dying before they pay still turns it
/// off within seven windows of a run of hits.
pub const STORE_MEMORY: u32 = 16;

/// What a probe that misses costs, in nanoseconds: the hash, the set's line and the entries
/// it holds. With the matcher behind's own cost (`Cache::inner_ns`) it sets the hit rate
/// below which the cache does not pay (see `off_below_percent`).
const PROBE_NS: u32 = 50;

/// One lookup in this many of those that go to the matcher behind is timed (not under loom,
/// whose models have no clock: there the bar stays [`OFF_BELOW_PERCENT`]).
#[cfg(not(loom))]
const TIME_EVERY: u64 = 64;

/// The repeats (percent of a window) below which the cache is turned off, for a matcher
/// behind whose lookup costs `inner_ns`: a hit saves about that, a probe that misses costs
/// [`PROBE_NS`], so the cache pays from `PROBE_NS / (inner_ns + PROBE_NS)` hits. Never above
/// [`OFF_BELOW_PERCENT`] (the bar for a small trie, and the bar until a lookup was timed), nor
/// under 1 %. Turning it back on takes twice the bar, as [`ON_FROM_PERCENT`] is twice
/// [`OFF_BELOW_PERCENT`].
fn off_below_percent(inner_ns: u32) -> u32 {
    if inner_ns == 0 {
        return OFF_BELOW_PERCENT;
    }
    (100 * PROBE_NS / inner_ns.saturating_add(PROBE_NS)).clamp(1, OFF_BELOW_PERCENT)
}

/// While the cache is off, the lookups of one topic in this many still probe and store.
pub const SAMPLE: u32 = 64;

/// Lookups of a thread after which the slice of topics it samples moves on (see
/// `Cache::admits`), at the least: the slice stays for [`SLICE_VISITS`] lookups per topic
/// the table holds, up to [`MAX_SLICE_TURN`].
pub const SLICE_TURN: u32 = 512;

/// How many times a sampled topic of a workload that cycles through the topics the table
/// holds comes back while its slice is sampled: a first lookup that stores (its entry went
/// stale while off) and three that may hit, enough to pass the store rule (two hits per
/// store) when the entries live.
pub const SLICE_VISITS: u32 = 4;

/// The longest a slice stays sampled, in lookups of a thread: a workload of a few hot topics
/// after a cold one (a table full of cold entries) is found within 64 such turns.
pub const MAX_SLICE_TURN: u32 = 8192;

/// Doorkeeper bits per slot: with eight, a table's worth of distinct topics sets about an
/// eighth of the bits, so a topic seen once is rarely taken for one seen twice.
const DOOR_BITS_PER_SLOT: usize = 8;

/// Counter stripes: each thread counts on its own cache line, so hits on many threads do not
/// fight over one line (NATS's `cacheHits` is one shared counter).
const STRIPES: usize = 16;

/// Admission states.
const ON: u8 = 0;
const OFF: u8 = 1;

/// One cached result. Immutable once published but for `seen`, which only grows.
struct Entry {
    hash: u64,
    /// For each of its topic's shards, the count of `begun` through which the result is known
    /// true: every write on the shard numbered up to it is in the result or cannot match the
    /// topic (see [`Cached::write`]).
    seen: [crate::sync::AtomicU64; MASKS],
    /// Its topic's shards, in the order of `seen`.
    shards: TopicShards,
    /// Inline up to 23 bytes: a hit compares it without loading a line of its own (a boxed
    /// topic was 15 % of `Cache::hit`'s samples on a table past the caches).
    topic: SmolStr,
    ids: Box<[SubscriberId]>,
    /// Handed out with every hit, for callers that keep what they made of the ids.
    stamp: AnswerStamp,
}

impl Entry {
    /// Whether this is the entry of the topic `key`, whose hash is `h`.
    fn is_for(&self, h: u64, key: &[u8]) -> bool {
        self.hash == h && crate::bytes::same(self.topic.as_bytes(), key)
    }

    /// Whether no shard of its topic has moved since the result was last known true.
    fn current(&self, shards: &Shards) -> bool {
        self.seen
            .iter()
            .zip(self.shards.iter())
            .all(|(seen, i)| shards.begun_of(i) == seen.load(Relaxed))
    }

    fn bytes(&self) -> usize {
        // A topic past the inline bytes is an `Arc<str>`: its text and the two counts before it.
        let topic = if self.topic.is_heap_allocated() {
            self.topic.len() + 2 * std::mem::size_of::<usize>()
        } else {
            0
        };
        std::mem::size_of::<Entry>() + topic + std::mem::size_of_val::<[SubscriberId]>(&self.ids)
    }
}

/// One thread's counters, on a cache line of its own.
#[repr(align(128))]
#[derive(Default)]
struct Stripe {
    hits: AtomicU64,
    /// Misses of lookups that probed.
    misses: AtomicU64,
    bypassed: AtomicU64,
    evictions: AtomicU64,
    /// The admission window: probing lookups and hits so far. Read and written with plain
    /// loads and stores: two threads sharing a stripe may lose a count, which only blurs a
    /// heuristic.
    window_lookups: AtomicU32,
    window_hits: AtomicU32,
    /// Misses of topics seen before (by the doorkeeper, or as a stale entry).
    window_repeats: AtomicU32,
    /// Entries stored in the window over another entry: over a stale one, or evicting a live
    /// one while the topics seen lately outnumber the slots (see `Cache::lookup_into`).
    window_stores: AtomicU32,
    /// The hits and charged stores of the windows before this one, faded by
    /// [`STORE_MEMORY`]: the store rule's memory (`Cache::judge`).
    carried_hits: AtomicU32,
    carried_stores: AtomicU32,
    /// This stripe's windows left in the grace after the cache's `grace_of`th turn back on.
    grace_left: AtomicU32,
    grace_of: AtomicU32,
    /// Lookups while off (for sampling) and a turn counter for picking victims.
    ticks: AtomicU32,
    /// The slice of topics this thread samples while off, and the tick at which it moves on.
    slice: AtomicU32,
    slice_ends: AtomicU32,
}

impl Stripe {
    fn bump(counter: &AtomicU32) -> u32 {
        let n = counter.load(Relaxed).wrapping_add(1);
        counter.store(n, Relaxed);
        n
    }
}

/// Counters of a cache, summed over its stripes. The names follow the
/// [`SelectorIndex`](crate::SelectorIndex)'s `CacheStats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that were not, bypassed ones included. A disabled cache (size 0) counts
    /// nothing: its lookups go to the inner matcher with no bookkeeping at all.
    pub misses: u64,
    /// Of the misses, those that skipped the cache because admission had turned it off.
    pub bypassed: u64,
    /// Live entries (true as of now) replaced by another topic's.
    pub evictions: u64,
    /// Entries in the table now, live or stale.
    pub topics: usize,
    /// Bytes those entries take (topic text, ids, headers).
    pub bytes: usize,
    /// Most entries the cache holds (0: disabled).
    pub capacity: usize,
    /// Most bytes the entries may take.
    pub max_bytes: usize,
    /// Whether admission has the cache on now.
    pub admitting: bool,
}

/// The sets and the doorkeeper's bits.
struct Table {
    sets: Box<[Set]>,
    door: Box<[AtomicU64]>,
}

/// One set: the topic hash of each slot's entry (0 for none) and the slots, on one cache line.
/// A hit reads its set's four hashes and loads only the entry whose hash is its topic's, where
/// reading each entry's own hash cost a miss per way on a table larger than the processor's
/// caches; and the slot it loads is on the line it has just read (in two arrays, tags and
/// slots cost a miss each: 10 % of a Spark worker's samples in `Cache::hit` were the slot's).
///
/// The tags are hints only: a hit still compares the entry's hash and topic, and a tag out
/// of date (a store racing another) only sends a hit down the miss path, which reads every
/// entry; [`Cache::publish`] leaves each tag its entry's.
///
/// A slot, once it holds an entry, always holds one (entries are replaced, never taken out,
/// until the table is dropped), and a topic goes to its set's buddy only when its own set has
/// no free slot: so a topic whose own set is not full is not in the buddy either.
#[repr(C, align(64))]
struct Set {
    tags: [AtomicU64; WAYS],
    slots: [Atomic<Entry>; WAYS],
}

impl Set {
    /// Whether every slot holds an entry (a hint: slots change under it).
    fn is_full(&self, guard: &Guard) -> bool {
        self.slots
            .iter()
            .all(|slot| !slot.load(Relaxed, guard).is_null())
    }
}

/// The entry of `set` for the topic `key` of hash `h`, read under `guard`.
#[inline(always)]
fn find<'g>(set: &Set, h: u64, key: &[u8], guard: &'g Guard) -> Option<&'g Entry> {
    for (slot, tag) in set.slots.iter().zip(&set.tags) {
        if tag.load(Relaxed) != h {
            continue;
        }
        // SAFETY: loaded under `guard`; an entry is freed only once every guard pinned when
        // it was unlinked has been let go (see `Cache::lookup_into`).
        let Some(e) = (unsafe { slot.load(Acquire, guard).as_ref() }) else {
            continue;
        };
        if e.is_for(h, key) {
            return Some(e);
        }
    }
    None
}

impl Default for Set {
    fn default() -> Self {
        Set {
            tags: Default::default(),
            slots: std::array::from_fn(|_| Atomic::null()),
        }
    }
}

/// The table and its bookkeeping; absent when the cache size is 0.
struct Cache {
    /// `sets * WAYS` slots and the doorkeeper, allocated on the first lookup (so a snapshot's
    /// cache costs nothing until it is used).
    table: OnceLock<Table>,
    /// Doorkeeper bits set since it was last cleared.
    door_set: AtomicUsize,
    /// `log2(sets)`.
    set_bits: u32,
    max_bytes: usize,
    bytes: AtomicUsize,
    topics: AtomicUsize,
    mode: AtomicU8,
    /// Failed windows in a row while on, and how many times sampling turned the cache back
    /// on: see [`Cache::judge`].
    strikes: AtomicU32,
    reenabled: AtomicU32,
    /// Times in a row the store rule turned the cache off: each doubles the sampled window.
    thrashed: AtomicU32,
    /// Windows of each thread's stripe, after sampling turned the cache back on, in which the
    /// store rule is not applied (see [`Cache::judge`]), and how many times sampling has
    /// turned it back on (a stripe's grace is for the latest).
    grace: AtomicU32,
    turned_on: AtomicU32,
    /// What a lookup of the matcher behind costs, in nanoseconds: a moving average of one
    /// timed lookup in [`TIME_EVERY`] of those that miss or bypass; 0 until the first.
    inner_ns: AtomicU32,
    /// Whether admission may turn the cache off and the doorkeeper refuse first-seen topics
    /// (see [`Cached::without_admission`]).
    adaptive: bool,
    stripes: Box<[Stripe]>,
    /// The write shards, allocated on the first lookup or write.
    shards: OnceLock<Shards>,
}

#[cfg(test)]
thread_local! {
    /// Tests only: how long `publish` waits after its CAS on this thread, so that another
    /// thread's store lands in the window between the swap and the counting.
    static PUBLISH_PAUSE: std::cell::Cell<std::time::Duration> =
        const { std::cell::Cell::new(std::time::Duration::ZERO) };
}

/// A matcher with a result cache in front. See the module docs.
pub struct Cached<M> {
    inner: M,
    cache: Option<Cache>,
    /// The size asked for, as given (for pickling and `cache_size()`).
    cache_size: usize,
}

impl<M: Matcher> std::fmt::Debug for Cached<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cached")
            .field("dialect", &self.inner.dialect())
            .field("cache_size", &self.cache_size)
            .field("stats", &self.cache_stats())
            .finish_non_exhaustive()
    }
}

thread_local! {
    /// This thread's stripe, given out round robin on first use.
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn stripe_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    STRIPE.with(|s| {
        let i = s.get();
        if i != usize::MAX {
            return i;
        }
        let i = NEXT.fetch_add(1, Relaxed) % STRIPES;
        s.set(i);
        i
    })
}

/// A topic's hash: foldhash's quality hasher, with a fixed seed so that a run's sets and
/// doorkeeper bits are the next run's (as they were with the hash before). Every bit of it is
/// used: the high ones pick the set, the low ones the doorkeeper's bit, the middle ones the
/// sampled slice and the shards, and the whole as a set's tag. An FxHash-style hash (eight
/// bytes at a time, rotate, xor, multiply, one final mix) was here before: its low 22 bits
/// took 10,000 values over 100,000 topics `d.d.<i>` (a doorkeeper that took nine first sights
/// in ten for repeats), and 2,732 of 100,000 topics `users.<i>.events` shared their whole
/// 64-bit hash.
fn hash(bytes: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    const STATE: foldhash::quality::FixedState =
        foldhash::quality::FixedState::with_seed(0x243f_6a88_85a3_08d3);
    STATE.hash_one(bytes)
}

impl<M: Matcher> Cached<M> {
    /// `inner` behind a cache of `cache_size` entries (0: no cache) and the default byte
    /// budget, [`BYTES_PER_ENTRY`] per entry.
    ///
    /// # Panics
    ///
    /// If `cache_size` is over [`MAX_CACHE_SIZE`].
    pub fn new(inner: M, cache_size: usize) -> Self {
        Self::with_limits(
            inner,
            cache_size,
            cache_size.saturating_mul(BYTES_PER_ENTRY),
        )
    }

    /// `inner` behind a cache of at most `cache_size` entries (rounded up to a power of two
    /// number of sets of [`WAYS`]; 0: no cache) taking at most `max_bytes`.
    ///
    /// # Panics
    ///
    /// If `cache_size` is over [`MAX_CACHE_SIZE`].
    pub fn with_limits(inner: M, cache_size: usize, max_bytes: usize) -> Self {
        assert!(
            cache_size <= MAX_CACHE_SIZE,
            "cache_size {cache_size} is over the maximum, {MAX_CACHE_SIZE}"
        );
        let cache = (cache_size > 0).then(|| {
            let sets = cache_size.div_ceil(WAYS).next_power_of_two();
            Cache {
                table: OnceLock::new(),
                door_set: AtomicUsize::new(0),
                set_bits: sets.trailing_zeros(),
                max_bytes,
                bytes: AtomicUsize::new(0),
                topics: AtomicUsize::new(0),
                mode: AtomicU8::new(ON),
                strikes: AtomicU32::new(0),
                reenabled: AtomicU32::new(0),
                thrashed: AtomicU32::new(0),
                grace: AtomicU32::new(0),
                turned_on: AtomicU32::new(0),
                inner_ns: AtomicU32::new(0),
                adaptive: true,
                stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
                shards: OnceLock::new(),
            }
        });
        Cached {
            inner,
            cache,
            cache_size,
        }
    }

    /// The same cache with admission and the doorkeeper turned off: it probes and stores on
    /// every lookup whatever its hit rate (to measure what they save, and to test the store
    /// path; not for production).
    #[must_use]
    pub fn without_admission(mut self) -> Self {
        if let Some(c) = &mut self.cache {
            c.adaptive = false;
        }
        self
    }

    /// The matcher behind the cache.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// The entries asked for when this cache was made (0: no cache).
    pub fn cache_size(&self) -> usize {
        self.cache_size
    }

    /// Hits, misses, evictions and the table's fill, summed over the stripes; each counter is
    /// exact, but they are read one after another while lookups may run.
    pub fn cache_stats(&self) -> CacheStats {
        let Some(c) = &self.cache else {
            return CacheStats::default();
        };
        let mut s = CacheStats {
            topics: c.topics.load(Relaxed),
            bytes: c.bytes.load(Relaxed),
            capacity: WAYS << c.set_bits,
            max_bytes: c.max_bytes,
            admitting: c.mode.load(Relaxed) == ON,
            ..CacheStats::default()
        };
        for st in c.stripes.iter() {
            s.hits += st.hits.load(Relaxed);
            let bypassed = st.bypassed.load(Relaxed);
            s.misses += st.misses.load(Relaxed) + bypassed;
            s.bypassed += bypassed;
            s.evictions += st.evictions.load(Relaxed);
        }
        s
    }

    /// Runs one write of the inner matcher on `shard`, the shard of its pattern, whose summary
    /// is `summary`.
    ///
    /// What a write does to the cache: it runs inside a bracket on the shard of its pattern
    /// (`Shards::write`): B: `begun += 1`, which numbers the write on its shard, and its
    /// summary remembered under that number; C: the inner write; D: `ended += 1`, even if C
    /// panics.
    ///
    /// A lookup of topic T, whose shards are the set K(T), probes T's set of slots, then:
    ///
    /// - if it finds an entry for T, it reads `begun` of each shard k of K(T) (the shards
    ///   stored with the entry; the lookup that stored it computed them from the same text) as
    ///   n_k. Where n_k is above the entry's `seen_k`, it reads the summaries of the writes
    ///   numbered `seen_k + 1 ..= n_k` on k; if every one is still there and cannot match T, it
    ///   raises `seen_k` to n_k. If that holds on every shard, that is a *hit*.
    /// - otherwise, R1: reads g_k = `begun` of each k of K(T), and g = Σ g_k; R2: reads e =
    ///   Σ `ended` over K(T); C': computes from the inner matcher; R3: reads Σ `begun` over K(T)
    ///   again. It stores the result with `seen_k` = g_k only if e = g and R3 read g.
    ///
    /// The counters are read and written `SeqCst`, so they fall into one total order consistent
    /// with each thread's program order; and the inner matcher is linearizable, its writes and
    /// reads synchronising (release/acquire) where a read sees a write.
    ///
    /// **Only writes that match T matter.** A write changes T's result only if its pattern
    /// matches T; such a write is on a shard of K(T) (`shards.rs`), and its summary says it
    /// may match T (`Summary::may_match` answers "cannot" only from words that differ).
    ///
    /// **What a stored entry holds.** Every counter only grows, so R3 reading the sum g that R1
    /// read means that no shard's `begun` moved between its R1 and R3 reads: no write on K(T)
    /// began in that span. Then on each shard, the writes counted at R1 are all the writes
    /// begun up to R2, so that shard's `ended` at R2 is at most its `begun` at R1; the sums
    /// being equal, each is equal: every write numbered up to g_k on its shard k had its D
    /// before R2. D releases and R2 acquires, so its C happened before C'. A write numbered
    /// above g_k had its B after its shard's R3 read, and so after R3; its C comes after its B,
    /// and if C' had seen that C, B would happen before R3 and R3 would read more than g. So C'
    /// saw exactly the writes numbered up to g_k on each k.
    ///
    /// **The invariant.** For an entry of T and each k of K(T), every write on k numbered up to
    /// `seen_k` was seen by the C' that made the entry's result, or cannot match T. True when
    /// the entry is stored (above); kept when a hit raises `seen_k`, since it read that the
    /// writes in between cannot match (a record read between two reads of the same stamp is
    /// the summary of the write with that number: `Shard::recall`). It holds whatever order
    /// raises land in: each covers the writes from the `seen_k` it read.
    ///
    /// **Why a hit is never stale.** Let t be the hit's first read of a `begun`, after its
    /// probe. A write that matches T and had taken effect by t had its B before t, before the
    /// hit read its shard k: it is numbered at most n_k, so at most `seen_k` once the hit has
    /// checked k, and by the invariant C' saw it. A write that C' saw had its D before the
    /// storer's R2, so before the entry was published, before the probe, before t. A write
    /// numbered above n_k began after the hit read k, at or after t, so it had not taken effect
    /// at t. So the writes matching T that had taken effect at t are exactly the matching
    /// writes C' saw, and T's result at t is the entry's: the hit linearizes at t, within the
    /// lookup. A write that returned before the lookup started had its B before t, so the hit
    /// counts it and, if it matches T, serves it. Counters are 64-bit and only grow (2^64
    /// writes), so a stamp names one write.
    ///
    /// A lookup that misses returns what the inner matcher computed, linearized where the inner
    /// lookup is. Nothing on the hit path reads `ended`: a write in flight stops stores on its
    /// shards, not hits of entries that are still true.
    fn write<R>(&self, shard: usize, summary: Summary, f: impl FnOnce(&M) -> R) -> R {
        match &self.cache {
            Some(c) => c.shards().write(shard, summary, || f(&self.inner)),
            None => f(&self.inner),
        }
    }
}

impl Cached<CSTrie> {
    /// A read-only snapshot of the trie (see [`CSTrie::snapshot`]) with a cache of its own, of
    /// the same size: a frozen trie has no writes, so its entries never go stale. The table is
    /// allocated on the snapshot's first lookup, so taking a snapshot stays O(1).
    pub fn snapshot(&self) -> Cached<CSTrie> {
        let max_bytes = self.cache.as_ref().map_or(0, |c| c.max_bytes);
        let mut snap = Cached::with_limits(self.inner.snapshot(), self.cache_size, max_bytes);
        if let (Some(mine), Some(theirs)) = (&self.cache, &mut snap.cache) {
            theirs.adaptive = mine.adaptive;
        }
        snap
    }
}

impl Cache {
    fn shards(&self) -> &Shards {
        self.shards.get_or_init(Shards::new)
    }

    fn table(&self) -> &Table {
        self.table.get_or_init(|| {
            let slots = WAYS << self.set_bits;
            Table {
                sets: (0..1usize << self.set_bits)
                    .map(|_| Set::default())
                    .collect(),
                door: (0..(slots * DOOR_BITS_PER_SLOT).div_ceil(64))
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            }
        })
    }

    /// Runs `lookup`, a lookup of the matcher behind, and times it when `n` (a count of such
    /// lookups) falls on [`TIME_EVERY`], into `inner_ns` (a new time weighs an eighth, and
    /// counts for at most four times the average: a lookup that met a page fault or a
    /// preemption must not decide the next windows). The first lookups, which find the
    /// processor's caches cold, are not timed. Plain loads and stores: two threads timing at
    /// once lose one time.
    fn timed(&self, n: u64, lookup: impl FnOnce()) {
        #[cfg(not(loom))]
        if n % TIME_EVERY == TIME_EVERY - 1 {
            let start = std::time::Instant::now();
            lookup();
            let ns = u32::try_from(start.elapsed().as_nanos()).unwrap_or(u32::MAX);
            let old = self.inner_ns.load(Relaxed);
            let new = if old == 0 {
                ns
            } else {
                old - old / 8 + ns.min(old.saturating_mul(4)) / 8
            };
            self.inner_ns.store(new.max(1), Relaxed);
            return;
        }
        let _ = n;
        lookup();
    }

    /// The doorkeeper: whether `h` was seen since the bits were last cleared; marks it seen.
    /// Races only blur it: a topic stored one miss early or late, a clearing a little late.
    fn seen_before(&self, door: &[AtomicU64], h: u64) -> bool {
        let bits = door.len() * 64;
        // The low bits: the set index took the high ones.
        let bit = (h as usize) % bits;
        let (word, mask) = (&door[bit / 64], 1u64 << (bit % 64));
        let w = word.load(Relaxed);
        if w & mask != 0 {
            return true;
        }
        // Plain stores, no read-modify-write: a cold workload marks a new bit on nearly every
        // lookup, and a lost bit or count (two threads at once) only blurs the filter.
        word.store(w | mask, Relaxed);
        let set = self.door_set.load(Relaxed) + 1;
        self.door_set.store(set, Relaxed);
        if set >= bits / 2 {
            self.door_set.store(0, Relaxed);
            for w in door {
                w.store(0, Relaxed);
            }
        }
        false
    }

    /// Whether the lookup of a topic hashed `h` goes through the cache: always while on; while
    /// off, if the topic is in the slice of topics sampled now, one in [`SAMPLE`] by hash,
    /// which moves on every [`SLICE_VISITS`] lookups of the thread per topic held (from
    /// [`SLICE_TURN`] to [`MAX_SLICE_TURN`]).
    ///
    /// Sampling topics rather than lookups keeps each sampled topic at its own rate of
    /// lookups, the rate it would have with the cache on: an entry that writes beside it keep
    /// revising (`shards.rs`) stays true only while it is read about as often as its shards
    /// are written, so one lookup in 64 of every topic would find its entry lost each time
    /// and keep the cache off under any writer. The slice stays long enough for a workload
    /// that cycles through the table's topics to come back to a sampled topic several times:
    /// when it moved on every 512 lookups, a cycle of 2,000 topics beside a writer met each
    /// sampled topic once, stale, and the cache never came back on. A workload of a few hot
    /// topics is still found: the slice passes over each of them in turn.
    fn admits(&self, stripe: &Stripe, h: u64) -> bool {
        if self.mode.load(Relaxed) == ON {
            return true;
        }
        let tick = Stripe::bump(&stripe.ticks);
        let mut slice = stripe.slice.load(Relaxed);
        // Past the slice's end (wrapping): the next slice, for as long as the table now asks.
        if tick.wrapping_sub(stripe.slice_ends.load(Relaxed)) as i32 >= 0 {
            let held = u32::try_from(self.topics.load(Relaxed)).unwrap_or(u32::MAX);
            let turn = held
                .saturating_mul(SLICE_VISITS)
                .clamp(SLICE_TURN, MAX_SLICE_TURN);
            slice = (slice + 1) % SAMPLE;
            stripe.slice.store(slice, Relaxed);
            stripe.slice_ends.store(tick.wrapping_add(turn), Relaxed);
        }
        // Bits the set index (high) and the doorkeeper (low) do not lean on.
        (h >> 24) as u32 % SAMPLE == slice
    }

    /// Counts a probing lookup in the window (`hit`, or a miss of a topic seen before:
    /// `repeat`); at the window's end, turns the cache off when repeating topics were under
    /// [`OFF_BELOW_PERCENT`] or hits under [`STORE_COST`] per entry stored over another, and
    /// back on when both rules pass with [`ON_FROM_PERCENT`].
    ///
    /// Each time sampling turns the cache back on, turning it off for too few repeats takes
    /// twice as many failed windows in a row (up to [`MAX_STRIKES`]): a workload that cycles
    /// through more topics than a window fails its first windows only because the doorkeeper
    /// has not seen its topics yet, and the longer trial lets it see them. A workload that
    /// never repeats is never turned back on, so it pays for one window only. Failing the
    /// store rule turns the cache off at once and ends the patience: there, entries die
    /// before they pay, and waiting does not change that; each such failure in a row doubles
    /// the sampled window (up to [`WINDOW`]), so that sampling does not keep turning a
    /// thrashing cache back on.
    fn judge(&self, stripe: &Stripe, hit: bool, repeat: bool) {
        let hits = if hit {
            Stripe::bump(&stripe.window_hits)
        } else {
            stripe.window_hits.load(Relaxed)
        };
        let repeats = if repeat {
            Stripe::bump(&stripe.window_repeats)
        } else {
            stripe.window_repeats.load(Relaxed)
        };
        if !self.adaptive {
            return;
        }
        let mode = self.mode.load(Relaxed);
        let window = if mode == ON {
            WINDOW
        } else {
            SAMPLED_WINDOW
                << self
                    .thrashed
                    .load(Relaxed)
                    .min((WINDOW / SAMPLED_WINDOW).ilog2())
        };
        if Stripe::bump(&stripe.window_lookups) < window {
            return;
        }
        let percent = (hits + repeats).saturating_mul(100) / window;
        let off_below = off_below_percent(self.inner_ns.load(Relaxed));
        // Just turned back on, the entries of topics outside the sampled slices are stale
        // (nothing revised them while off: `shards.rs`), and refreshing them is charged;
        // that is not writes killing entries, so for as many windows as it takes to look up
        // every topic the table holds once, only the repeats rule judges.
        let graced = mode == ON && self.in_grace(stripe);
        // The store rule over this window and, fading, the ones before (`STORE_MEMORY`).
        let fade = |carried: &AtomicU32| {
            let c = carried.load(Relaxed);
            c - c / STORE_MEMORY
        };
        let hits_due = hits.saturating_add(fade(&stripe.carried_hits));
        let stores_due = stripe
            .window_stores
            .load(Relaxed)
            .saturating_add(fade(&stripe.carried_stores));
        let paid = graced || hits_due >= STORE_COST.saturating_mul(stores_due);
        if mode == ON && !paid {
            // Entries die before they pay (writes, or more hot topics than the table holds):
            // no amount of patience helps.
            self.reenabled.store(0, Relaxed);
            self.strikes.store(0, Relaxed);
            self.thrashed.fetch_add(1, Relaxed);
            self.mode.store(OFF, Relaxed);
        } else if mode == ON && percent < off_below {
            let needed = 1 << self.reenabled.load(Relaxed).min(MAX_STRIKES.ilog2());
            if self.strikes.fetch_add(1, Relaxed) + 1 >= needed {
                self.strikes.store(0, Relaxed);
                self.mode.store(OFF, Relaxed);
            }
        } else if mode == ON {
            // Stored only when they change: the line holds what every hit reads first (the
            // mode, the table), and a store, even of the value there, takes it from the other
            // cores' caches once a window per thread.
            if self.strikes.load(Relaxed) != 0 {
                self.strikes.store(0, Relaxed);
            }
            if self.thrashed.load(Relaxed) != 0 {
                self.thrashed.store(0, Relaxed);
            }
        } else if percent >= off_below * (ON_FROM_PERCENT / OFF_BELOW_PERCENT) && paid {
            self.reenabled.fetch_add(1, Relaxed);
            let topics = u32::try_from(self.topics.load(Relaxed)).unwrap_or(u32::MAX);
            self.grace.store(topics.div_ceil(WINDOW) + 1, Relaxed);
            self.turned_on.fetch_add(1, Relaxed);
            self.mode.store(ON, Relaxed);
        }
        // A window in grace, or one that switched the cache, starts the memory afresh: its
        // stores refreshed entries left stale while off, or belong to the other mode.
        let (carry_hits, carry_stores) = if graced || self.mode.load(Relaxed) != mode {
            (0, 0)
        } else {
            (hits_due, stores_due)
        };
        stripe.carried_hits.store(carry_hits, Relaxed);
        stripe.carried_stores.store(carry_stores, Relaxed);
        stripe.window_lookups.store(0, Relaxed);
        stripe.window_hits.store(0, Relaxed);
        stripe.window_repeats.store(0, Relaxed);
        stripe.window_stores.store(0, Relaxed);
    }

    /// Whether this window of `stripe` is in the grace after the cache's latest turn back on,
    /// counting it down. Each stripe has a grace of its own: the windows of every thread
    /// counted against one, two threads that look up the same topics spent it before either
    /// had refreshed them all, and the stale rest turned the cache off again at once.
    fn in_grace(&self, stripe: &Stripe) -> bool {
        let on = self.turned_on.load(Relaxed);
        if stripe.grace_of.load(Relaxed) != on {
            stripe.grace_of.store(on, Relaxed);
            stripe.grace_left.store(self.grace.load(Relaxed), Relaxed);
        }
        let left = stripe.grace_left.load(Relaxed);
        if left == 0 {
            return false;
        }
        stripe.grace_left.store(left - 1, Relaxed);
        true
    }

    /// Answers a topic from its text alone when the cache is on and holds a live entry for
    /// it: the whole of a hit, a hash, a probe, a compare and a copy, with no parse. Only
    /// topics that parsed are ever stored, so a text found here is valid. False, with nothing
    /// counted, otherwise: the caller parses the topic and goes through `lookup_into`, which
    /// probes again and counts the miss (or the bypass).
    fn hit(
        &self,
        dialect: Dialect,
        text: &str,
        out: &mut Vec<SubscriberId>,
        known: Known<'_>,
    ) -> Option<AnswerStamp> {
        if self.mode.load(Relaxed) != ON {
            return None;
        }
        let stripe = &self.stripes[stripe_index()];
        let key = text.as_bytes();
        let h = hash(key);
        let guard = &epoch::pin();
        let found = self.probe(self.table(), h, key, guard)?;
        let print = || dialect.parse_topic(text).ok().map(|t| TopicPrint::of(&t));
        self.serve(stripe, found, &print, out, known)
            .then_some(found.stamp)
    }

    /// The entry stored for the topic `key` of hash `h`, if its tag says where: in the topic's
    /// set, or in the set's buddy when the set is full (a set with a free slot took the topic
    /// itself: see [`Set`]).
    #[inline(always)]
    fn probe<'g>(&self, table: &Table, h: u64, key: &[u8], guard: &'g Guard) -> Option<&'g Entry> {
        let (own, buddy) = self.pair_of(table, h);
        match (find(own, h, key, guard), buddy) {
            (None, Some(buddy)) if own.is_full(guard) => find(buddy, h, key, guard),
            (found, _) => found,
        }
    }

    /// Whether the stored answers are past [`PREFETCH_FROM_BYTES`].
    fn prefetches(&self) -> bool {
        self.mode.load(Relaxed) == ON && self.bytes.load(Relaxed) >= PREFETCH_FROM_BYTES
    }

    /// Fetches, for a lookup of `text` soon, the line of its set (`step` 0), the entry its set
    /// holds for it (1: the set is there by then), or that entry's ids (2: the entry is): a
    /// hit's three reads that each wait for the one before.
    fn prefetch(&self, text: &str, step: usize) {
        if self.mode.load(Relaxed) != ON {
            return;
        }
        let h = hash(text.as_bytes());
        let table = self.table();
        if step == 0 {
            // The buddy shares the set's 128-byte pair, which the processor fetches together.
            crate::cstrie::prefetch(&table.sets[self.set_index(h)]);
            return;
        }
        let (own, buddy) = self.pair_of(table, h);
        let Some((slot, _)) = std::iter::once(own)
            .chain(buddy)
            .flat_map(|set| set.slots.iter().zip(&set.tags))
            .find(|(_, tag)| tag.load(Relaxed) == h)
        else {
            return;
        };
        if step == 1 {
            // SAFETY: the pointer is only read, never followed: `prefetch` of a line freed
            // since, or of any address, is a hint with no effect on the program.
            let entry = slot.load(Relaxed, unsafe { epoch::unprotected() });
            crate::cstrie::prefetch(entry.as_raw());
            return;
        }
        let guard = &epoch::pin();
        // SAFETY: loaded under `guard`; an entry is freed only once every guard pinned when
        // it was unlinked has been let go.
        if let Some(e) = unsafe { slot.load(Acquire, guard).as_ref() } {
            crate::cstrie::prefetch(e.ids.as_ptr());
        }
    }

    /// The set `h` falls in.
    fn set_index(&self, h: u64) -> usize {
        (h >> (64 - self.set_bits.max(1))) as usize & ((1 << self.set_bits) - 1)
    }

    /// The sets an entry of `h` may be in: the one it falls in, and that set's buddy, the
    /// other set of their 128-byte pair (none when the table is one set). A topic is stored
    /// in its buddy only when its own set is full, so a hit nearly always finds it in the
    /// first; the second turns a set that overflows into eight ways shared with its buddy.
    /// With one set per topic, a set that five topics of a workload fell in evicted one of
    /// them on every pass, each time a walk of the matcher behind (1,976 of 2,000 `mixed`
    /// topics kept and 0.5 % of lookups missing, in 4,096 sets: BENCHMARKS.md, "A set's
    /// buddy").
    fn pair_of<'t>(&self, table: &'t Table, h: u64) -> (&'t Set, Option<&'t Set>) {
        let i = self.set_index(h);
        let buddy = (table.sets.len() > 1).then(|| &table.sets[i ^ 1]);
        (&table.sets[i], buddy)
    }

    /// Serves `e`, the entry of `topic`, if every write on its shards since it was last known
    /// true cannot match the topic (the hit's reads, see `Cached::write`), and counts the hit.
    fn serve(
        &self,
        stripe: &Stripe,
        e: &Entry,
        topic: &dyn Fn() -> Option<TopicPrint>,
        out: &mut Vec<SubscriberId>,
        known: Known<'_>,
    ) -> bool {
        // Most hits find no shard moved: the log, and the topic's print, only when one has.
        let shards = self.shards();
        if !e.current(shards)
            && !shards::still_true(shards, &e.seen, &e.shards, &mut LazyPrint::new(topic))
        {
            return false;
        }
        if !known(e.stamp, &e.ids) {
            // A fresh vector (`lookup_str`'s) is sized once, as a clone is: growing it took
            // `reserve`'s out-of-line path, a ninth of a hit.
            crate::matcher::size_fresh(out, || e.ids.len());
            out.extend_from_slice(&e.ids);
        }
        stripe.hits.fetch_add(1, Relaxed);
        self.judge(stripe, true, false);
        true
    }

    fn lookup_into<M: Matcher>(&self, inner: &M, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        let stripe = &self.stripes[stripe_index()];
        let key = topic.text().as_bytes();
        let h = hash(key);
        if !self.admits(stripe, h) {
            // One counter on this path: `misses` adds the bypassed in `cache_stats`.
            let n = stripe.bypassed.fetch_add(1, Relaxed);
            // While off for too few repeats, the doorkeeper still sees every topic, so that
            // the sampled lookups find a workload's repeats from its second pass on, however
            // long its cycle. (Off by the store rule, repeats are not what is missing.)
            if self.thrashed.load(Relaxed) == 0 {
                self.seen_before(&self.table().door, h);
            }
            self.timed(n, || inner.lookup_into(topic, out));
            return;
        }
        let guard = &epoch::pin();
        // A hit as `hit` finds it; past it, the entries of both sets are read one by one.
        let probed = self.probe(self.table(), h, key, guard);
        if let Some(e) = probed {
            let print = || Some(TopicPrint::of(topic));
            if self.serve(stripe, e, &print, out, &mut |_, _| false) {
                return;
            }
        }
        self.miss(inner, topic, stripe, (h, probed), out, guard);
    }

    /// The rest of [`Cache::lookup_into`] when the probe found no live entry: out of line, so
    /// that a hit's frame stays small. `probed` is the entry the probe found, if any (stale).
    #[inline(never)]
    fn miss<M: Matcher>(
        &self,
        inner: &M,
        topic: &Topic<'_>,
        stripe: &Stripe,
        (h, probed): (u64, Option<&Entry>),
        out: &mut Vec<SubscriberId>,
        guard: &Guard,
    ) {
        let key = topic.text().as_bytes();
        let table = self.table();
        let print = || Some(TopicPrint::of(topic));
        let shards = self.shards();
        // Ways are numbered across the topic's set (0 to WAYS - 1) and its buddy's.
        let (own, buddy) = self.pair_of(table, h);
        let sets = [own, buddy.unwrap_or(own)];
        let slot_of = |way: usize| {
            let set = sets[way / WAYS];
            (&set.slots[way % WAYS], &set.tags[way % WAYS])
        };
        let mut same = None;
        let mut free = None;
        let mut others = [None; WAYS];
        for (way, other) in others.iter_mut().enumerate() {
            let p = slot_of(way).0.load(Acquire, guard);
            // SAFETY: `p` was loaded under `guard`; an entry is retired (`defer_destroy`) only
            // after being swapped out of its slot, and freed only once every guard pinned
            // before that has gone, so it is alive while `guard` is.
            let Some(e) = (unsafe { p.as_ref() }) else {
                free.get_or_insert((way, p));
                continue;
            };
            if e.is_for(h, key) {
                // Served above unless its tag was out of date.
                let tried = probed.is_some_and(|t| std::ptr::eq(t, e));
                if !tried && self.serve(stripe, e, &print, out, &mut |_, _| false) {
                    return;
                }
                same = Some((way, p));
            } else {
                *other = Some((p, e));
            }
        }
        // The buddy, only past a full set (see `Set`): its free slot, or the topic's own entry
        // (the one whose tag is the topic's hash; a tag out of date there costs a duplicate
        // entry, never a wrong answer). Its other entries are not read: they are its own
        // topics', and a miss that read them would wait on four more lines.
        if free.is_none() && same.is_none() && buddy.is_some() {
            for way in WAYS..2 * WAYS {
                let (slot, tag) = slot_of(way);
                let p = slot.load(Acquire, guard);
                // SAFETY: as above.
                let Some(e) = (unsafe { p.as_ref() }) else {
                    free.get_or_insert((way, p));
                    continue;
                };
                if tag.load(Relaxed) == h && e.is_for(h, key) {
                    let tried = probed.is_some_and(|t| std::ptr::eq(t, e));
                    if !tried && self.serve(stripe, e, &print, out, &mut |_, _| false) {
                        return;
                    }
                    same = Some((way, p));
                    break;
                }
            }
        }
        let n = stripe.misses.fetch_add(1, Relaxed);
        let topic_shards = shards::of_topic(topic);
        // R1, R2, C', R3 (see `Cached::write`).
        let seen = shards.begun_each(&topic_shards);
        let g = seen.iter().fold(0, |a: u64, &n| a.wrapping_add(n));
        // A stale entry of the same topic shows it was seen before; otherwise the doorkeeper
        // answers (and marks it seen).
        let repeat = same.is_some() || (self.adaptive && self.seen_before(&table.door, h));
        self.judge(stripe, false, repeat);
        let quiet = shards.ended(&topic_shards) == g;
        let start = out.len();
        self.timed(n, || inner.lookup_into(topic, out));
        if !quiet || shards.begun(&topic_shards) != g {
            return;
        }
        // A topic's first miss only marks the doorkeeper, unless its set has a free slot: an
        // entry stored there evicts nothing, and waiting for the second miss would cost every
        // topic that repeats a second walk.
        if self.adaptive && !repeat && free.is_none() {
            return;
        }
        let stale = || {
            others
                .iter()
                .enumerate()
                .find_map(|(way, other)| match other {
                    Some((p, e)) if !e.current(shards) => Some((way, *p)),
                    _ => None,
                })
        };
        let (way, old, evicting) = match same.or(free).or_else(stale) {
            Some((way, old)) => (way, old, false),
            None => {
                // Both sets full of live entries: one of the topic's own set goes.
                let way = Stripe::bump(&stripe.ticks) as usize % WAYS;
                (way, slot_of(way).0.load(Acquire, guard), true)
            }
        };
        // What the store rule charges: a stale entry's replacement (writes killed it before
        // it paid), and an eviction when the topics the doorkeeper has seen lately outnumber
        // the slots (entries evict each other before paying). While they fit, evictions are
        // a table filling up: a set full before the table is, which the workload's next pass
        // repays.
        let charged = if evicting {
            self.door_set.load(Relaxed) > WAYS << self.set_bits
        } else {
            !old.is_null()
        };
        let entry = Entry {
            hash: h,
            seen: seen.map(crate::sync::AtomicU64::new),
            shards: topic_shards,
            topic: SmolStr::new(topic.text()),
            ids: out[start..].into(),
            stamp: AnswerStamp::fresh(),
        };
        // SAFETY: as above: `old` was loaded under `guard`.
        let old_bytes = unsafe { old.as_ref() }.map_or(0, Entry::bytes);
        let new_bytes = entry.bytes();
        if new_bytes > old_bytes
            && self.bytes.load(Relaxed) + (new_bytes - old_bytes) > self.max_bytes
        {
            return;
        }
        if charged {
            Stripe::bump(&stripe.window_stores);
        }
        self.publish(slot_of(way), old, entry, evicting, stripe, guard);
    }

    /// Swaps `entry` into `slot` if it still holds `old`, sets the slot's tag, and retires
    /// `old`.
    fn publish(
        &self,
        (slot, tag): (&Atomic<Entry>, &AtomicU64),
        old: Shared<'_, Entry>,
        entry: Entry,
        evicting: bool,
        stripe: &Stripe,
        guard: &Guard,
    ) {
        // Counted before the swap: once the entry is in its slot, another lookup may replace
        // it and subtract its bytes, which must then already be there (counted after, the sum
        // could pass below zero for a moment and wrap).
        let new_bytes = entry.bytes();
        self.bytes.fetch_add(new_bytes, Relaxed);
        if slot
            .compare_exchange(old, Owned::new(entry), SeqCst, Relaxed, guard)
            .is_err()
        {
            // Another lookup stored first; its entry is as good as ours.
            self.bytes.fetch_sub(new_bytes, Relaxed);
            return;
        }
        #[cfg(test)]
        std::thread::sleep(PUBLISH_PAUSE.get());
        // The tag of whatever the slot holds now, checked again after the store: of two
        // lookups storing in turn, the one that stores its tag last then sees the entry it
        // tagged still there, or tags again. So the last tag stored is the entry's. (SeqCst:
        // a tag store must not pass the load after it, or an older tag could land last.)
        loop {
            let now = slot.load(SeqCst, guard);
            // SAFETY: loaded under `guard` (see `lookup_into`).
            tag.store(unsafe { now.as_ref() }.map_or(0, |e| e.hash), SeqCst);
            if slot.load(SeqCst, guard) == now {
                break;
            }
        }
        // SAFETY: `old` was loaded under `guard` (see `lookup_into`).
        match unsafe { old.as_ref() } {
            None => {
                self.topics.fetch_add(1, Relaxed);
            }
            Some(e) => {
                self.bytes.fetch_sub(e.bytes(), Relaxed);
                if evicting && e.current(self.shards()) {
                    stripe.evictions.fetch_add(1, Relaxed);
                }
                // SAFETY: the CAS unlinked `old` from its slot, the only place that held it,
                // so no lookup pinned from now on can reach it; lookups pinned before may
                // still read it, and `defer_destroy` frees it only after they unpin.
                unsafe { guard.defer_destroy(old) };
            }
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let Some(Table { sets, .. }) = self.table.get_mut() else {
            return;
        };
        // SAFETY: `&mut self`: no lookup of this cache is running, and its slots are reachable
        // from nowhere else; entries retired earlier are owned by the collector, not the slots.
        let guard = unsafe { epoch::unprotected() };
        for slot in sets.iter().flat_map(|set| &set.slots) {
            let p = slot.swap(Shared::null(), Relaxed, guard);
            if !p.is_null() {
                // SAFETY: the slot owned `p` and nothing else can load it (see above).
                drop(unsafe { p.into_owned() });
            }
        }
    }
}

impl<M: Matcher> Matcher for Cached<M> {
    fn dialect(&self) -> Dialect {
        self.inner.dialect()
    }

    fn prefetches(&self) -> bool {
        self.cache.as_ref().is_some_and(Cache::prefetches)
    }

    fn prefetch_str(&self, topic: &str, step: usize) {
        if let Some(cache) = &self.cache {
            cache.prefetch(topic, step);
        }
    }

    // A write that would change nothing (the pair already there, or not there to remove) is
    // answered by `contains` and does not move the shard counters, so it leaves the shard's
    // entries valid: an MQTT client that subscribes again on every reconnect costs the cache
    // nothing. The answer is linearizable at the `contains` read.

    fn subscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        assert_eq!(
            pattern.dialect(),
            self.dialect(),
            "pattern of another dialect"
        );
        if self.inner.contains(pattern.text(), id) {
            return false;
        }
        let keys = pattern.keys();
        self.write(shards::of_pattern(&keys), Summary::of(&keys), |m| {
            m.subscribe(pattern, id)
        })
    }

    fn unsubscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        assert_eq!(
            pattern.dialect(),
            self.dialect(),
            "pattern of another dialect"
        );
        if !self.inner.contains(pattern.text(), id) {
            return false;
        }
        let keys = pattern.keys();
        self.write(shards::of_pattern(&keys), Summary::of(&keys), |m| {
            m.unsubscribe(pattern, id)
        })
    }

    fn subscribe_str(&self, pattern: &str, id: SubscriberId) -> Result<bool> {
        // Only a valid pattern is ever there.
        if self.inner.contains(pattern, id) {
            return Ok(false);
        }
        self.dialect().with_pattern_keys(pattern, |keys| {
            self.write(shards::of_pattern(keys), Summary::of(keys), |m| {
                m.subscribe_str(pattern, id)
            })
        })?
    }

    /// Many pairs are one write on every topic (as a subscriber's removal is), around the
    /// inner matcher's own loading: each pair skips the check whether it is there and the
    /// scans for its shards, which were most of a pair's cost. Every stored answer is stale
    /// after it, once; fewer than 64 pairs (`BULK_PAIRS`) are written one by one.
    fn subscribe_each_str(
        &self,
        pairs: &[(&str, SubscriberId)],
        added: &mut Vec<bool>,
    ) -> Result<()> {
        if pairs.len() < BULK_PAIRS {
            return crate::matcher::subscribe_one_by_one(self, pairs, added);
        }
        self.write(shards::EVERY_TOPIC, Summary::ANY, |m| {
            m.subscribe_each_str(pairs, added)
        })
    }

    fn unsubscribe_str(&self, pattern: &str, id: SubscriberId) -> Result<bool> {
        self.dialect().with_pattern_keys(pattern, |keys| {
            if !self.inner.contains(pattern, id) {
                return Ok(false);
            }
            self.write(shards::of_pattern(keys), Summary::of(keys), |m| {
                m.unsubscribe_str(pattern, id)
            })
        })?
    }

    fn contains(&self, pattern: &str, id: SubscriberId) -> bool {
        self.inner.contains(pattern, id)
    }

    fn lookup_into(&self, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        match &self.cache {
            Some(c) => {
                assert_eq!(topic.dialect(), self.dialect(), "topic of another dialect");
                c.lookup_into(&self.inner, topic, out);
            }
            None => self.inner.lookup_into(topic, out),
        }
    }

    fn lookup_str_into(&self, topic: &str, out: &mut Vec<SubscriberId>) -> Result<()> {
        self.lookup_str_stamped(topic, out, &mut |_, _| false)
            .map(drop)
    }

    /// A hit hands out its entry's stamp.
    fn lookup_str_stamped(
        &self,
        topic: &str,
        out: &mut Vec<SubscriberId>,
        known: Known<'_>,
    ) -> Result<Option<AnswerStamp>> {
        if let Some(c) = &self.cache {
            if let Some(stamp) = c.hit(self.dialect(), topic, out, known) {
                return Ok(Some(stamp));
            }
        }
        self.dialect()
            .with_topic(topic, |t| self.lookup_into(t, out))?;
        Ok(None)
    }

    /// A cached answer says it at once; without one the matcher behind answers, and may stop
    /// early (the `Trie` does). Nothing is stored: whether anyone wants a topic is not worth
    /// an entry of its own, and the matcher behind is always current.
    fn has_interest_str(&self, topic: &str) -> Result<bool> {
        if let Some(c) = &self.cache {
            // The answer is looked at where it is stored, not copied out.
            let mut any = false;
            let mut known = |_, ids: &[SubscriberId]| {
                any = !ids.is_empty();
                true
            };
            if c.hit(self.dialect(), topic, &mut Vec::new(), &mut known)
                .is_some()
            {
                return Ok(any);
            }
        }
        self.inner.has_interest_str(topic)
    }

    fn has_interest(&self, topic: &Topic<'_>) -> bool {
        self.inner.has_interest(topic)
    }

    fn remove_subscriber(&self, id: SubscriberId) -> usize {
        // Any pattern may lose the id: every topic's results may change.
        self.write(shards::EVERY_TOPIC, Summary::ANY, |m| {
            m.remove_subscriber(id)
        })
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn subscriptions(&self) -> Vec<(String, SubscriberId)> {
        self.inner.subscriptions()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Trie;

    /// A cache that stores every miss (no doorkeeper, no admission), for exact counts.
    fn trie(cache_size: usize) -> Cached<Trie> {
        let m = Cached::new(Trie::new(Dialect::Amqp), cache_size).without_admission();
        m.subscribe_str("a.*", 1).unwrap();
        m.subscribe_str("a.#", 2).unwrap();
        m
    }

    fn sorted(mut v: Vec<SubscriberId>) -> Vec<SubscriberId> {
        v.sort_unstable();
        v
    }

    #[test]
    fn a_repeated_lookup_hits_and_a_write_invalidates() {
        let m = trie(64);
        assert_eq!(sorted(m.lookup_str("a.b").unwrap()), [1, 2]);
        assert_eq!(sorted(m.lookup_str("a.b").unwrap()), [1, 2]);
        let s = m.cache_stats();
        assert_eq!((s.hits, s.misses, s.topics), (1, 1, 1));
        m.subscribe_str("a.b", 3).unwrap();
        assert_eq!(sorted(m.lookup_str("a.b").unwrap()), [1, 2, 3]);
        m.unsubscribe_str("a.*", 1).unwrap();
        assert_eq!(sorted(m.lookup_str("a.b").unwrap()), [2, 3]);
        assert_eq!(m.remove_subscriber(2), 1);
        assert_eq!(m.lookup_str("a.b").unwrap(), [3]);
        assert_eq!(m.lookup_str("a.b").unwrap(), [3]);
        let s = m.cache_stats();
        assert_eq!((s.hits, s.misses, s.topics), (2, 4, 1));
    }

    #[test]
    fn interest_is_read_from_the_stored_answer_empty_or_not() {
        let m = trie(64);
        for topic in ["a.b", "b.c", "a.b", "b.c"] {
            m.lookup_str(topic).unwrap();
        }
        let hits = m.cache_stats().hits;
        assert!(m.has_interest_str("a.b").unwrap());
        assert!(!m.has_interest_str("b.c").unwrap());
        assert_eq!(m.cache_stats().hits, hits + 2, "both answered by the cache");
        m.unsubscribe_str("a.*", 1).unwrap();
        m.unsubscribe_str("a.#", 2).unwrap();
        assert!(!m.has_interest_str("a.b").unwrap());
    }

    #[test]
    fn a_hit_by_text_appends_and_an_invalid_text_is_never_served() {
        let m = Cached::new(Trie::new(Dialect::Mqtt), 64).without_admission();
        m.subscribe_str("a/+", 1).unwrap();
        m.subscribe_str("#", 2).unwrap();
        let mut out = vec![9];
        m.lookup_str_into("a/b", &mut out).unwrap(); // stored
        m.lookup_str_into("a/b", &mut out).unwrap(); // answered from the text
        assert_eq!(m.cache_stats().hits, 1);
        assert_eq!(out[0], 9);
        assert_eq!(sorted(out[1..3].to_vec()), [1, 2]);
        assert_eq!(sorted(out[3..].to_vec()), [1, 2]);
        for _ in 0..2 {
            let mut out = Vec::new();
            assert!(m.lookup_str_into("a/+", &mut out).is_err());
            assert!(m.lookup_str_into("", &mut out).is_err());
            assert!(out.is_empty());
        }
        assert_eq!(m.cache_stats().topics, 1);
    }

    #[test]
    fn a_stored_answer_keeps_its_stamp_until_a_write_makes_it_again() {
        let m = trie(64);
        let never = &mut |_, _: &[SubscriberId]| false;
        let mut out = Vec::new();
        // The miss that stores the entry hands out no stamp: its answer was made by the lookup.
        assert_eq!(m.lookup_str_stamped("a.b", &mut out, never).unwrap(), None);
        let first = m.lookup_str_stamped("a.b", &mut out, never).unwrap();
        assert!(first.is_some());
        assert_eq!(m.lookup_str_stamped("a.b", &mut out, never).unwrap(), first);
        // Another topic's entry, and the same topic's after a write, have stamps of their own.
        m.lookup_str("a.c").unwrap();
        let other = m.lookup_str_stamped("a.c", &mut out, never).unwrap();
        assert!(other.is_some() && other != first);
        m.subscribe_str("a.b", 3).unwrap();
        let mut out = Vec::new();
        assert_eq!(m.lookup_str_stamped("a.b", &mut out, never).unwrap(), None);
        assert_eq!(sorted(out), [1, 2, 3]);
        let again = m.lookup_str_stamped("a.b", &mut Vec::new(), never).unwrap();
        assert!(again.is_some() && again != first && again != other);
        // A snapshot's cache hands out stamps of its own too.
        let snap = Cached::new(CSTrie::new(Dialect::Amqp), 64).without_admission();
        snap.subscribe_str("a.*", 1).unwrap();
        snap.lookup_str("a.b").unwrap();
        let theirs = snap
            .lookup_str_stamped("a.b", &mut Vec::new(), never)
            .unwrap();
        assert!(theirs.is_some() && ![first, other, again].contains(&theirs));
    }

    #[test]
    fn a_known_answer_is_not_appended_and_a_bare_matcher_has_no_stamps() {
        let m = trie(64);
        m.lookup_str("a.b").unwrap();
        let mut asked = Vec::new();
        let mut out = vec![7];
        let stamp = m
            .lookup_str_stamped("a.b", &mut out, &mut |stamp, ids| {
                asked.push((stamp, sorted(ids.to_vec())));
                true
            })
            .unwrap();
        assert_eq!(out, [7]);
        assert_eq!(asked, [(stamp.unwrap(), vec![1, 2])]);
        let mut out = Vec::new();
        m.lookup_str_stamped("a.b", &mut out, &mut |_, _| false)
            .unwrap();
        assert_eq!(sorted(out), [1, 2]);
        // A miss never asks, and hands out no stamp; nor does a disabled cache, ever.
        let bare = Cached::new(Trie::new(Dialect::Amqp), 0);
        bare.subscribe_str("a.*", 1).unwrap();
        bare.subscribe_str("a.#", 2).unwrap();
        for (m, lookups) in [(&m, 1), (&bare, 3)] {
            for _ in 0..lookups {
                let mut out = Vec::new();
                let stamp = m
                    .lookup_str_stamped("a.zz", &mut out, &mut |_, _| panic!("asked on a miss"))
                    .unwrap();
                assert_eq!((stamp, sorted(out)), (None, vec![1, 2]));
            }
        }
    }

    #[test]
    fn a_stored_answer_with_a_group_has_no_stamp_and_picks_a_member_each_time() {
        let m = crate::Grouped::new(Cached::new(Trie::new(Dialect::Mqtt), 64).without_admission());
        m.subscribe_in(None, "a/+", 1).unwrap();
        m.subscribe_in(Some("g"), "a/+", 2).unwrap();
        m.subscribe_in(Some("g"), "a/+", 3).unwrap();
        m.subscribe_in(None, "b/+", 4).unwrap();
        let mut picked = Vec::new();
        for _ in 0..4 {
            let mut out = Vec::new();
            let stamp = m
                .lookup_str_stamped("a/x", &mut out, &mut |_, _| panic!("a grouped answer"))
                .unwrap();
            assert_eq!(stamp, None);
            let out = sorted(out);
            assert_eq!((out.len(), out[0]), (2, 1));
            picked.push(out[1]);
        }
        assert!(picked.contains(&2) && picked.contains(&3), "{picked:?}");
        // An answer with no group keeps its stamp behind the groups' wrapper.
        m.lookup_str("b/x").unwrap();
        let mut out = Vec::new();
        let stamp = m
            .lookup_str_stamped("b/x", &mut out, &mut |_, _| false)
            .unwrap();
        assert!(stamp.is_some());
        assert_eq!(out, [4]);
    }

    #[test]
    fn a_write_that_changes_nothing_keeps_the_entries() {
        let m = trie(64);
        m.lookup_str("a.b").unwrap();
        // Subscribing a pair that is there, and removing one that is not, in both forms.
        assert!(!m.subscribe_str("a.*", 1).unwrap());
        assert!(!m.subscribe(&Dialect::Amqp.parse_pattern("a.#").unwrap(), 2));
        assert!(!m.unsubscribe_str("a.b", 1).unwrap());
        assert!(!m.unsubscribe(&Dialect::Amqp.parse_pattern("a.*").unwrap(), 2));
        assert_eq!(sorted(m.lookup_str("a.b").unwrap()), [1, 2]);
        assert_eq!(m.cache_stats().hits, 1);
        // A write that changes something still invalidates.
        assert!(m.unsubscribe_str("a.*", 1).unwrap());
        assert_eq!(m.lookup_str("a.b").unwrap(), [2]);
        assert_eq!(m.cache_stats().hits, 1);
    }

    #[test]
    fn a_write_its_pattern_cannot_match_keeps_the_entry() {
        let m = trie(64);
        m.lookup_str("a.b").unwrap();
        // On the topic's shards (`a.b...`, `a...`, any topic), none matching `a.b`.
        for (i, p) in ["a.b.c", "a.c.#", "*.*.c", "a.b.*.#"]
            .into_iter()
            .enumerate()
        {
            assert!(m.subscribe_str(p, 10 + i as SubscriberId).unwrap());
            assert_eq!(sorted(m.lookup_str("a.b").unwrap()), [1, 2], "{p}");
        }
        let s = m.cache_stats();
        assert_eq!((s.hits, s.misses), (4, 1));
        // More such writes on one shard than it remembers since the last look: a miss.
        for i in 0..=shards::LOG {
            m.unsubscribe_str("a.b.c", 10).unwrap();
            m.subscribe_str("a.b.c", 10).unwrap();
            assert!(i < 2 || m.cache_stats().hits == 4);
        }
        assert_eq!(sorted(m.lookup_str("a.b").unwrap()), [1, 2]);
        assert_eq!(m.cache_stats().misses, 2);
        // Then it is stored again, and a write that matches is a miss.
        assert_eq!(sorted(m.lookup_str("a.b").unwrap()), [1, 2]);
        assert_eq!(m.cache_stats().hits, 5);
        assert!(m.subscribe_str("*.b", 20).unwrap());
        assert_eq!(sorted(m.lookup_str("a.b").unwrap()), [1, 2, 20]);
        assert_eq!(m.cache_stats().misses, 3);
    }

    #[test]
    fn a_disabled_cache_counts_nothing_and_answers_the_same() {
        let m = trie(0);
        assert_eq!(sorted(m.lookup_str("a.b").unwrap()), [1, 2]);
        assert_eq!(m.cache_stats(), CacheStats::default());
        assert_eq!(m.cache_size(), 0);
    }

    #[test]
    fn a_full_set_evicts_and_counts_it() {
        // One set of four ways: the fifth topic evicts one of the first four.
        let m = trie(WAYS);
        for t in ["a.b", "a.c", "a.d", "a.e", "a.f"] {
            m.lookup_str(t).unwrap();
        }
        let s = m.cache_stats();
        assert_eq!((s.misses, s.evictions, s.topics, s.capacity), (5, 1, 4, 4));
    }

    /// `n` topics `a.<i>` whose own set is set 0 of a table of two.
    fn topics_of_set_zero(n: usize) -> Vec<String> {
        let m = trie(2 * WAYS);
        let cache = m.cache.as_ref().unwrap();
        (0..)
            .map(|i| format!("a.{i}"))
            .filter(|t| cache.set_index(hash(t.as_bytes())) == 0)
            .take(n)
            .collect()
    }

    #[test]
    fn a_full_set_spills_into_its_buddy_before_it_evicts() {
        // Two sets: five topics of set 0 live side by side, the fifth in set 1.
        let m = trie(2 * WAYS);
        let topics = topics_of_set_zero(2 * WAYS + 1);
        for _ in 0..2 {
            for t in &topics[..=WAYS] {
                assert_eq!(sorted(m.lookup_str(t).unwrap()), [1, 2]);
            }
        }
        let s = m.cache_stats();
        let five = WAYS as u64 + 1;
        assert_eq!((s.hits, s.misses, s.evictions), (five, five, 0), "{s:?}");
        assert_eq!(s.topics, WAYS + 1);
        // A write makes the spilled entry stale: its miss stores over it, wherever it is,
        // and the next lookup hits the new answer (one entry per topic, none lost).
        m.subscribe_str(&topics[WAYS], 3).unwrap();
        assert_eq!(sorted(m.lookup_str(&topics[WAYS]).unwrap()), [1, 2, 3]);
        assert_eq!(sorted(m.lookup_str(&topics[WAYS]).unwrap()), [1, 2, 3]);
        let s = m.cache_stats();
        assert_eq!(
            (s.hits, s.topics, s.evictions),
            (five + 1, WAYS + 1, 0),
            "{s:?}"
        );
        // Both sets full: the ninth topic evicts, and the table holds its eight.
        for t in &topics {
            m.lookup_str(t).unwrap();
        }
        let s = m.cache_stats();
        assert_eq!(
            (s.evictions, s.topics, s.capacity),
            (1, 2 * WAYS, 2 * WAYS),
            "{s:?}"
        );
        assert_eq!(s.bytes, bytes_held(&m));
    }

    #[test]
    fn the_byte_budget_refuses_entries_that_do_not_fit() {
        let m = Cached::with_limits(Trie::new(Dialect::Amqp), 64, 100).without_admission();
        for id in 0..100 {
            m.subscribe_str("a.#", id).unwrap();
        }
        m.lookup_str("a.b").unwrap();
        m.lookup_str("a.b").unwrap();
        let s = m.cache_stats();
        assert_eq!((s.hits, s.topics, s.bytes), (0, 0, 0));
        assert!(s.max_bytes == 100);
    }

    #[test]
    fn topics_are_announced_ahead_only_past_the_prefetch_bytes_and_change_nothing() {
        // A budget of 4 MiB (256 bytes an entry), and 1,000 subscribers a topic: each stored
        // answer is about 4 KB.
        let m = Cached::new(Trie::new(Dialect::Amqp), 1 << 14).without_admission();
        for id in 0..1000 {
            m.subscribe_str("a.#", id).unwrap();
        }
        let topics: Vec<String> = (0..1000).map(|i| format!("a.{i}")).collect();
        assert!(!m.prefetches(), "an empty cache is announced nothing");
        let mut stored = 0;
        for t in &topics {
            m.lookup_str(t).unwrap();
            stored += 1;
            if m.cache_stats().bytes >= PREFETCH_FROM_BYTES {
                break;
            }
        }
        assert!(
            m.prefetches(),
            "past the prefetch bytes after {stored} answers"
        );
        let before = m.cache_stats();
        for t in topics
            .iter()
            .chain(["a.b.c".to_owned(), String::new()].iter())
        {
            for step in 0..4 {
                m.prefetch_str(t, step);
            }
        }
        let after = m.cache_stats();
        assert_eq!((after.hits, after.misses), (before.hits, before.misses));
        assert_eq!(m.lookup_str(&topics[0]).unwrap().len(), 1000);
    }

    /// The bytes of the entries the table holds now, counted as `publish` counts them.
    fn bytes_held(m: &Cached<Trie>) -> usize {
        let guard = &epoch::pin();
        let cache = m.cache.as_ref().unwrap();
        cache
            .table()
            .sets
            .iter()
            .flat_map(|set| &set.slots)
            // SAFETY: loaded under `guard`; entries are freed only after it unpins.
            .filter_map(|slot| unsafe { slot.load(Acquire, guard).as_ref() })
            .map(Entry::bytes)
            .sum()
    }

    #[test]
    fn the_byte_count_holds_an_entry_replaced_before_its_store_returned() {
        // A thread stores a large answer and is held between its swap and its counting; a
        // write makes that entry stale and another lookup replaces it with a small one. Were
        // the large entry counted after its swap, the replacement would subtract bytes not yet
        // added, and the count would pass below zero and wrap.
        let m =
            std::sync::Arc::new(Cached::new(Trie::new(Dialect::Amqp), WAYS).without_admission());
        for id in 0..100 {
            m.subscribe_str("a.*", id).unwrap();
        }
        let held = {
            let m = std::sync::Arc::clone(&m);
            std::thread::spawn(move || {
                PUBLISH_PAUSE.set(std::time::Duration::from_millis(200));
                assert_eq!(m.lookup_str("a.b").unwrap().len(), 100);
            })
        };
        // Long enough for the held thread's lookup to reach its pause (it takes microseconds).
        std::thread::sleep(std::time::Duration::from_millis(50));
        for id in 1..100 {
            m.unsubscribe_str("a.*", id).unwrap();
        }
        assert_eq!(m.lookup_str("a.b").unwrap(), [0]);
        let s = m.cache_stats();
        assert!(s.bytes <= s.max_bytes, "{} bytes counted", s.bytes);
        held.join().unwrap();
        assert_eq!(m.cache_stats().bytes, bytes_held(&m));
        assert_eq!(m.cache_stats().topics, 1);
    }

    #[test]
    fn a_first_miss_stores_into_room_and_the_doorkeeper_guards_a_full_set() {
        // One set.
        let m = Cached::new(Trie::new(Dialect::Amqp), WAYS);
        m.subscribe_str("a.*", 1).unwrap();
        // Room: each topic is stored at its first miss, and hit at its second lookup.
        for _ in 0..2 {
            for i in 0..WAYS {
                assert_eq!(m.lookup_str(&format!("a.{i}")).unwrap(), [1]);
            }
        }
        let s = m.cache_stats();
        assert_eq!(
            (s.hits, s.misses, s.topics),
            (WAYS as u64, WAYS as u64, WAYS)
        );
        // The set full: a new topic's first miss only marks the doorkeeper, its second
        // evicts one of the four, and its third is a hit.
        for evictions in [0, 1, 1] {
            assert_eq!(m.lookup_str("a.new").unwrap(), [1]);
            assert_eq!(m.cache_stats().evictions, evictions);
        }
        assert_eq!(m.cache_stats().hits, WAYS as u64 + 1);
        // A stale entry of the topic shows it was seen: the miss after a write stores at once.
        m.subscribe_str("a.#", 2).unwrap();
        m.lookup_str("a.new").unwrap();
        assert_eq!(sorted(m.lookup_str("a.new").unwrap()), [1, 2]);
        assert_eq!(m.cache_stats().hits, WAYS as u64 + 2);
    }

    #[test]
    fn the_threshold_of_repeats_falls_as_the_matcher_behind_costs_more() {
        // Until a lookup is timed, and for a matcher behind as cheap as a probe, the bar is
        // the fixed one; a walk of microseconds pays from a few percent of hits.
        assert_eq!(off_below_percent(0), OFF_BELOW_PERCENT);
        assert_eq!(off_below_percent(1), OFF_BELOW_PERCENT);
        assert_eq!(off_below_percent(150), OFF_BELOW_PERCENT);
        assert_eq!(off_below_percent(950), 5);
        assert_eq!(off_below_percent(2_450), 2);
        assert_eq!(off_below_percent(u32::MAX), 1);
    }

    #[test]
    fn admission_turns_off_on_distinct_topics_and_back_on_when_hot() {
        let m = Cached::new(Trie::new(Dialect::Amqp), 1024);
        m.subscribe_str("a.*", 1).unwrap();
        for i in 0..4 * WINDOW {
            m.lookup_str(&format!("a.{i}")).unwrap();
        }
        let s = m.cache_stats();
        assert!(!s.admitting, "{s:?}");
        assert!(s.bypassed > 0, "{s:?}");
        // A hot set of eight topics: the sampled lookups fill the cache and hit.
        for i in 0..(4 * SAMPLE * WINDOW) {
            m.lookup_str(&format!("b.{}", i % 8)).unwrap();
        }
        assert!(m.cache_stats().admitting, "{:?}", m.cache_stats());
    }

    #[test]
    fn admission_keeps_a_workload_that_repeats_over_a_long_cycle() {
        // More distinct topics than a window: the first pass looks cold, the second repeats.
        let m = Cached::new(Trie::new(Dialect::Amqp), 16_384);
        m.subscribe_str("a.*", 1).unwrap();
        let cycle = 6 * WINDOW;
        let pass = |m: &Cached<Trie>| {
            for i in 0..cycle {
                assert_eq!(m.lookup_str(&format!("a.{i}")).unwrap(), [1]);
            }
        };
        for _ in 0..12 {
            pass(&m);
        }
        let before = m.cache_stats();
        pass(&m);
        let after = m.cache_stats();
        assert!(after.admitting, "{after:?}");
        let hits = after.hits - before.hits;
        assert!(
            hits >= u64::from(cycle) * 9 / 10,
            "{hits} hits of {cycle}: {after:?}"
        );
    }

    /// `passes` passes over `topics` topics `t.<i>.x`, each answered by the pattern
    /// `t.<i>.x` subscribed by `i`, after `burst`; returns the hits over those passes.
    fn passes_after(
        m: &Cached<Trie>,
        topics: usize,
        passes: usize,
        burst: impl Fn(&Cached<Trie>),
    ) -> u64 {
        burst(m);
        let before = m.cache_stats().hits;
        for _ in 0..passes {
            for i in 0..topics {
                let answer = m.lookup_str(&format!("t.{i}.x")).unwrap();
                assert_eq!(answer, [i as SubscriberId]);
            }
        }
        m.cache_stats().hits - before
    }

    /// A cache in front of the patterns `t.<i>.x`, each subscribed by `i`, for `topics` topics.
    fn answering(topics: usize) -> Cached<Trie> {
        let m = Cached::new(Trie::new(Dialect::Amqp), 16_384);
        for i in 0..topics {
            m.subscribe_str(&format!("t.{i}.x"), i as SubscriberId)
                .unwrap();
        }
        m
    }

    /// Two writes that change the answer of topic `t.<i>.x` alone: a pattern that matches it,
    /// subscribed and unsubscribed.
    fn rewrite(m: &Cached<Trie>, i: usize) {
        let pattern = format!("t.{i}.*");
        m.subscribe_str(&pattern, 1 << 20).unwrap();
        m.unsubscribe_str(&pattern, 1 << 20).unwrap();
    }

    /// Writes that change the answers of four topics in five, all at once.
    fn stale_four_in_five(m: &Cached<Trie>, topics: usize) {
        for i in (0..topics).filter(|i| i % 5 != 0) {
            rewrite(m, i);
        }
    }

    /// [`answering`] `topics` topics, after `hot` passes of hits and then four passes each
    /// after writes that left four entries in five stale.
    fn turned_off(topics: usize, hot: usize) -> Cached<Trie> {
        let m = answering(topics);
        passes_after(&m, topics, hot, |_| {});
        for _ in 0..4 {
            passes_after(&m, topics, 1, |m| stale_four_in_five(m, topics));
        }
        m
    }

    #[test]
    fn bursts_of_stale_entries_between_runs_of_hits_keep_the_cache_on() {
        // Each burst of writes leaves the next pass, two windows, four fifths misses; the
        // passes after it all hit. Judged by one window, the first pass turned the cache off.
        let topics = 2 * WINDOW as usize;
        let m = answering(topics);
        passes_after(&m, topics, 8, |_| {});
        for _ in 0..6 {
            let hits = passes_after(&m, topics, 8, |m| stale_four_in_five(m, topics));
            let s = m.cache_stats();
            assert!(s.admitting, "{s:?}");
            // Of 8 passes, all but the burst's four fifths of one hit.
            assert!(hits >= 7 * topics as u64, "{hits} hits: {s:?}");
        }
    }

    #[test]
    fn entries_that_die_before_they_pay_still_turn_the_cache_off() {
        // Every pass finds four entries in five stale: a hit for four stores charged, far
        // under `STORE_COST`, which turns the cache off however long the run of hits before.
        let s = turned_off(2 * WINDOW as usize, 16).cache_stats();
        assert!(!s.admitting, "{s:?}");
    }

    #[test]
    fn the_cache_comes_back_on_once_writes_calm_down_on_a_long_cycle() {
        // A cycle of 2,048 topics, four windows a pass. Writes that leave four entries in
        // five stale before every pass turn the cache off; then writes that change one
        // topic in twenty a pass leave it paying (19 hits per store), and sampling must see
        // that: a sampled topic has to come back while its slice is still sampled.
        let topics = 4 * WINDOW as usize;
        let m = turned_off(topics, 4);
        assert!(!m.cache_stats().admitting, "{:?}", m.cache_stats());
        // A different twentieth each pass.
        let pass = std::cell::Cell::new(0);
        let one_in_twenty = |m: &Cached<Trie>| {
            pass.set(pass.get() + 1);
            for i in (pass.get() % 20..topics).step_by(20) {
                rewrite(m, i);
            }
        };
        for _ in 0..64 {
            passes_after(&m, topics, 1, one_in_twenty);
        }
        let hits = passes_after(&m, topics, 4, one_in_twenty);
        let s = m.cache_stats();
        assert!(s.admitting, "{s:?}");
        assert!(hits >= 3 * topics as u64, "{hits} hits: {s:?}");
    }

    #[test]
    fn a_snapshot_has_its_own_cache_and_ignores_later_writes() {
        let m = Cached::new(CSTrie::new(Dialect::Mqtt), 16).without_admission();
        m.subscribe_str("a/+", 1).unwrap();
        assert_eq!(m.lookup_str("a/b").unwrap(), [1]);
        let snap = m.snapshot();
        m.subscribe_str("a/b", 2).unwrap();
        assert_eq!(snap.lookup_str("a/b").unwrap(), [1]);
        assert_eq!(snap.lookup_str("a/b").unwrap(), [1]);
        assert_eq!(snap.cache_stats().hits, 1);
        assert_eq!(sorted(m.lookup_str("a/b").unwrap()), [1, 2]);
        assert!(snap.inner().is_read_only());
        assert_eq!(snap.cache_size(), 16);
    }
}
