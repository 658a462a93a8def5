//! The DFA's state cache: states interned by their set of NFA nodes, each with its derived
//! data (closure, answer, edges) built on demand and published by compare-and-swap.
//!
//! Who writes what:
//!
//! - Readers on the cold path (holding the NFA's read lock) intern states, publish a state's
//!   derived data, and fill the target of an edge or of the default edge. Each is a CAS from
//!   null: two readers building the same thing at once both end with the one copy that won.
//! - The NFA's writer (holding its write lock, so no reader is on the cold path) files edge
//!   keys, clears targets, swaps answers, drops derived data and replaces a full edge table's
//!   derived data with a wider copy. Only it ever adds a key to published derived data, so no
//!   key is lost to a racing insert or a table's growth: a word absent from a state's table is
//!   a word none of its nodes names, which the default edge answers. A key is filed by
//!   writing its word into an empty slot, then its hash with a release store; readers read a
//!   slot's word only after loading its hash (the loom models check it with loom's cell).
//! - Whoever publishes or replaces derived data or an answer (the reader that won the CAS,
//!   or the writer) then stores the state's copies of where its table and answer are; the
//!   writer clears them before it drops derived data, and replaces them before it retires
//!   what they pointed at, so a copy loaded under a guard points at memory the epoch keeps.
//!   A copy a write made stale is caught as the rest: the write stamped the state first.
//! - Readers on the hot path only load.
//!
//! Memory: a [`Generation`] owns its states, a state its derived data, derived data its
//! answer and its edges (inline in one array). Targets point at states of the same
//! generation and own nothing. Whatever is replaced is retired to crossbeam-epoch, and so is a
//! whole generation when the cache is flushed, so a reader pinned before the swap still reads
//! what it loaded.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::mem::{size_of, size_of_val, MaybeUninit};
use std::sync::Arc;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};
use smol_str::SmolStr;

use super::nfa::NodeId;
use crate::cstrie::WordsHasher;
use crate::matcher::{AnswerStamp, SubscriberId};
use crate::sync::{AtomicU64, AtomicUsize, Mutex, RwLock, UnsafeCell};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

/// A word's hash, as edge tables file it; never 0, which marks an empty slot.
pub(crate) fn word_hash(word: &str) -> u64 {
    WordsHasher.hash_one(word).max(1)
}

/// A state's key in the intern table: the hash of its set, its lowest bit the `dollar` flag.
fn state_key(dollar: bool, set: &[NodeId]) -> u64 {
    WordsHasher.hash_one(set) & !1 | u64::from(dollar)
}

/// One state of the DFA: a set of NFA nodes.
///
/// A warm lookup reads, per word, the state's line and one slot of its edge table, and at
/// the last word the state's answer: the state keeps copies of where its derived data's
/// table and answer are ([`State::table`], [`State::answer`]), so the derived data itself
/// is read only on the cold path, for a table too wide for the copy, and by the writer. On
/// a one-line state (64 bytes, aligned to a line) those are two dependent loads a word,
/// against four when the derived data was read first (2026-11-27).
#[repr(align(64))]
pub(crate) struct State {
    /// [`state_key`]: the set's hash, and in its lowest bit whether this is the start state
    /// of an MQTT `$` topic, whose first word takes no wildcard (one word with the hash, to
    /// keep the state in 64 bytes).
    key: u64,
    pub(crate) set: Box<[NodeId]>,
    /// The owner of the edges, closure and answer; null until built, and after a write
    /// dropped them.
    pub(crate) derived: Atomic<Derived>,
    /// The state a word that no node names leads to; null until computed. Cleared with the
    /// derived data (only a new wildcard child changes it).
    pub(crate) default: Atomic<State>,
    /// A copy of `derived`'s edge table: its address with the log2 of its slots in the top
    /// [`TABLE_SHIFT`] bits, or 0 (no derived data, or a table the copy cannot hold).
    table: AtomicU64,
    /// A copy of `derived`'s answer pointer, or null as `table`. Owns nothing.
    answer: Atomic<Accept>,
    /// The write count when the state last changed: a write's (odd) count, stored before
    /// the write changes it, or the (even) count its derived data was built at.
    pub(crate) stamp: AtomicU64,
}

// One line: the hot path reads one line of each state it passes.
#[cfg(all(not(loom), target_pointer_width = "64"))]
const _: () = assert!(size_of::<State>() == 64);

/// Where the log2 of a table's slots sits in [`State::table`]: addresses below 2^58 (every
/// 64-bit platform's user space today) leave the top six bits free; a table above it is not
/// copied, and its lookups read the derived data.
const TABLE_SHIFT: u32 = 58;

/// `edges` as a [`State::table`] word: its address, and the log2 of its length (a power of
/// two) in the top bits; 0 for an address the word cannot hold.
fn pack_table(edges: &[Edge]) -> u64 {
    let at = edges.as_ptr() as usize as u64;
    if at >> TABLE_SHIFT == 0 {
        at | u64::from(edges.len().trailing_zeros()) << TABLE_SHIFT
    } else {
        0
    }
}

/// A [`State::table`] word's address and number of slots; `None` for 0.
fn unpack_table(t: u64) -> Option<(*const Edge, usize)> {
    (t != 0).then(|| {
        let at = (t & ((1 << TABLE_SHIFT) - 1)) as usize as *const Edge;
        (at, 1 << (t >> TABLE_SHIFT))
    })
}

/// What a state's copy of its edge table says about a word.
pub(crate) enum Probe<'g> {
    /// A node of the state names the word: its edge.
    Edge(&'g Edge),
    /// No node names it: the default edge answers.
    Absent,
    /// No copy: ask the derived data.
    Unknown,
}

impl State {
    /// What a state of `set_len` nodes is charged.
    fn bytes(set_len: usize) -> usize {
        size_of::<State>() + set_len * size_of::<NodeId>()
    }

    /// Whether this is the start state of an MQTT `$` topic.
    pub(crate) fn dollar(&self) -> bool {
        self.key & 1 == 1
    }

    /// The edge of `word` through the copy of the table.
    #[inline]
    pub(crate) fn probe<'g>(&'g self, word: &str, hash: u64) -> Probe<'g> {
        let Some((edges, slots)) = unpack_table(self.table.load(Acquire)) else {
            return Probe::Unknown;
        };
        // SAFETY: a nonzero copy is the address and size of the table of derived data this
        // state owned when the copy was loaded (stored together in one word, release after
        // the table was filled); derived data is retired to the epoch only after its copy was
        // replaced, and the caller's guard keeps it from being freed while it reads.
        let edges = unsafe { std::slice::from_raw_parts(edges, slots) };
        match find_edge(edges, word, hash) {
            Some(e) => Probe::Edge(e),
            None => Probe::Absent,
        }
    }

    /// The answer through the copy; `None` if there is none.
    #[inline]
    pub(crate) fn answer<'g>(&self, guard: &'g Guard) -> Option<&'g Accept> {
        // SAFETY: as in `probe`: an answer is retired after its copy was replaced.
        unsafe { self.answer.load(Acquire, guard).as_ref() }
    }

    /// Copies where `d`'s table and answer are. Called by whoever just published `d`: the
    /// one reader that won the CAS under the NFA's read lock, or the writer.
    fn copy_from(&self, d: &Derived, guard: &Guard) {
        self.copy_answer(d, guard);
        self.table.store(pack_table(&d.edges), Release);
    }

    /// Copies where `d`'s answer is, after the writer swapped it (the table stays).
    fn copy_answer(&self, d: &Derived, guard: &Guard) {
        self.answer.store(d.accept.load(Acquire, guard), Release);
    }

    /// Drops the copies, before the derived data they point into is retired.
    fn clear_copies(&self) {
        self.table.store(0, Release);
        self.answer.store(Shared::null(), Release);
    }
}

impl Drop for State {
    fn drop(&mut self) {
        // SAFETY: a state is dropped with its generation, when no thread can reach either
        // (the generation was retired to the epoch, or is dropped by its owner).
        unsafe {
            let d = self.derived.load(Relaxed, epoch::unprotected());
            if !d.is_null() {
                drop(d.into_owned());
            }
        }
    }
}

/// What a state answers, built from its nodes under the NFA's read lock.
///
/// A warm lookup reads it only through its state's copies (see [`State`]): per word, the
/// state and one slot of `edges` (the edge itself: word and target inline). (The edges were
/// boxed one by one behind a table of their own, six loads a word, until 2026-11-27, and
/// the derived data was read on the way, four, until the copies.)
pub(crate) struct Derived {
    /// The nodes the state stands for now: its set's closure in the current NFA, which holds
    /// more than the set when a write added a many-words child under one of its nodes.
    pub(crate) closure: Box<[NodeId]>,
    pub(crate) accept: Atomic<Accept>,
    /// Keys filed in `edges`; only the builder or the writer reads or changes it.
    filed: AtomicUsize,
    /// The state's edges: open addressing on the word's hash, linear probing, at most half
    /// full. A write that finds no room replaces the whole derived data with a copy twice
    /// as wide ([`writer::reset_word`]).
    edges: Box<[Edge]>,
}

/// The subscribers of a state's nodes, each once: one allocation, its length beside them
/// (crossbeam's array of `MaybeUninit`), so that reading it is one load more than its
/// pointer. Its first [`STAMP_WORDS`] elements hold its [`AnswerStamp`]: an answer's ids
/// never change (a write swaps in a new answer), so the stamp names them for good, and a
/// caller that holds what it made of them is not handed them again
/// (`Matcher::lookup_str_stamped`). Made by [`accept`], read by [`ids`] and [`stamp`].
pub(crate) type Accept = [MaybeUninit<SubscriberId>];

/// Elements of an [`Accept`] before its ids: its stamp, low half first.
const STAMP_WORDS: usize = 2;

/// An answer holding `from`, with a stamp of its own.
fn accept(from: &[SubscriberId]) -> Owned<Accept> {
    let mut a = Owned::<Accept>::init(STAMP_WORDS + from.len());
    let n = AnswerStamp::fresh().get();
    let stamp = [n as SubscriberId, (n >> 32) as SubscriberId];
    for (slot, &id) in a.iter_mut().zip(stamp.iter().chain(from)) {
        slot.write(id);
    }
    a
}

/// The subscribers of an answer.
pub(crate) fn ids(a: &Accept) -> &[SubscriberId] {
    // SAFETY: every element was written by `accept` before the answer could be shared, and
    // `MaybeUninit<u32>` has the layout of `u32`.
    unsafe { &*(&a[STAMP_WORDS..] as *const Accept as *const [SubscriberId]) }
}

/// The stamp of an answer.
pub(crate) fn stamp(a: &Accept) -> AnswerStamp {
    // SAFETY: as in `ids`: `accept` wrote the stamp's elements first.
    let word = |i: usize| u64::from(unsafe { a[i].assume_init() });
    AnswerStamp::from_raw(word(0) | word(1) << 32)
}

impl Drop for Derived {
    fn drop(&mut self) {
        // SAFETY: derived data is dropped when it was retired to the epoch and every reader
        // pinned at the time has unpinned, or with its state (see `State::drop`); either way
        // no thread holds its answer (its state's copy was replaced first). The edges'
        // targets are not owned.
        unsafe {
            let a = self.accept.load(Relaxed, epoch::unprotected());
            if !a.is_null() {
                drop(a.into_owned());
            }
        }
    }
}

impl Derived {
    /// Derived data with `slots` empty edge slots.
    fn empty(closure: Box<[NodeId]>, accept: Owned<Accept>, slots: usize) -> Derived {
        Derived {
            closure,
            accept: Atomic::from(accept),
            filed: AtomicUsize::new(0),
            edges: (0..slots).map(|_| Edge::empty()).collect(),
        }
    }

    /// Derived data with `words` filed, no targets, and room for them at most half full.
    fn new(closure: Box<[NodeId]>, accept: Owned<Accept>, words: &[Arc<str>]) -> Derived {
        let d = Derived::empty(closure, accept, slots_for(words.len()));
        for w in words {
            d.file(w, word_hash(w));
        }
        d
    }

    /// The edge of `word`, if a node of the state names it.
    pub(crate) fn edge(&self, word: &str, hash: u64) -> Option<&Edge> {
        find_edge(&self.edges, word, hash)
    }

    /// Files `word`, which the table does not hold, in an empty slot; there must be room.
    /// Only one thread files at a time: the builder of derived data not yet published, or
    /// the writer, under the NFA's write lock.
    fn file(&self, word: &str, hash: u64) -> &Edge {
        let mask = self.edges.len() - 1;
        let mut i = hash as usize & mask;
        while self.edges[i].hash.load(Relaxed) != 0 {
            i = (i + 1) & mask;
        }
        let e = &self.edges[i];
        // SAFETY: the slot is empty: no reader reads its word, since a reader reads a word
        // only after it loaded the slot's hash as stored below, and no other thread files
        // (the contract above). The word is written once; `Edge::drop` drops it.
        e.word
            .with_mut(|w| unsafe { (*w).write(SmolStr::new(word)) });
        // The release: a reader that loads the hash reads the word written before it.
        e.hash.store(hash, Release);
        self.filed.fetch_add(1, Relaxed);
        e
    }

    /// Whether one more key fits at most half full.
    fn has_room(&self) -> bool {
        (self.filed.load(Relaxed) + 1) * 2 <= self.edges.len()
    }

    /// What this derived data was charged when published: its bytes, its words' heap bytes
    /// and its state's entries in the holder lists. The writer gives it back when it drops
    /// or replaces the data, so the budget counts what a generation holds, not what it ever
    /// held (a writer that swapped answers and widened tables filled the budget with bytes
    /// long freed, and the next cold lookup flushed every state).
    fn footprint(&self, guard: &Guard) -> usize {
        // SAFETY: an answer in place is retired only by the writer; the caller is the writer,
        // or the reader that built `self` and has not published it.
        let accept = ids(unsafe { self.accept.load(Acquire, guard).deref() }).len();
        let words: usize = self
            .edges
            .iter()
            .filter(|e| e.hash.load(Relaxed) != 0)
            .map(|e| Edge::word_bytes(e.word()))
            .sum();
        Derived::bytes(self.closure.len(), accept, self.edges.len())
            + words
            + self.closure.len() * size_of::<StatePtr>()
    }

    /// Bytes of derived data with `slots` edge slots and an answer of `accept` ids, words'
    /// heap bytes aside.
    fn bytes(closure: usize, accept: usize, slots: usize) -> usize {
        size_of::<Derived>()
            + size_of::<usize>()
            + (closure + STAMP_WORDS + accept) * size_of::<u32>()
            + slots * size_of::<Edge>()
    }
}

/// The edge of `word` in a table of slots (a power of two, at most half full).
#[inline]
fn find_edge<'e>(edges: &'e [Edge], word: &str, hash: u64) -> Option<&'e Edge> {
    let mask = edges.len() - 1;
    let mut i = hash as usize & mask;
    loop {
        let e = &edges[i];
        match e.hash.load(Acquire) {
            0 => return None,
            h if h == hash && crate::bytes::same(e.word().as_bytes(), word.as_bytes()) => {
                return Some(e)
            }
            _ => i = (i + 1) & mask,
        }
    }
}

/// Slots for `words` keys at most half full.
fn slots_for(words: usize) -> usize {
    (words * 2).next_power_of_two().max(2)
}

/// The longest word a `SmolStr` keeps inline, with no allocation of its own.
const INLINE_WORD: usize = 23;

/// One edge: a word and the state it leads to (null until computed). A slot whose hash is 0
/// is empty, its word never written.
pub(crate) struct Edge {
    hash: AtomicU64,
    /// Inline up to [`INLINE_WORD`] bytes: comparing the word reads no other cache line.
    word: UnsafeCell<MaybeUninit<SmolStr>>,
    pub(crate) target: Atomic<State>,
}

// SAFETY: the only field that is not itself `Sync` is `word`, written once by the one thread
// that files the slot, before the release store of its hash, and read only by threads that
// loaded that hash (`Derived::file`, `Edge::word`).
unsafe impl Sync for Edge {}

impl Edge {
    fn empty() -> Edge {
        Edge {
            hash: AtomicU64::new(0),
            word: UnsafeCell::new(MaybeUninit::uninit()),
            target: Atomic::null(),
        }
    }

    /// The word of a filed slot.
    fn word(&self) -> &str {
        debug_assert_ne!(self.hash.load(Relaxed), 0);
        // SAFETY: called on filed slots only: after the caller loaded a nonzero hash (with
        // acquire, or on the filing thread), which was stored after the word was written.
        self.word
            .with(|w| unsafe { (*w).assume_init_ref().as_str() })
    }

    /// Bytes a word takes beyond its slot.
    fn word_bytes(word: &str) -> usize {
        if word.len() > INLINE_WORD {
            word.len()
        } else {
            0
        }
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        if self.hash.load(Relaxed) != 0 {
            // SAFETY: filed (a nonzero hash), so the word was written; the slot is being
            // dropped, so nothing reads it again.
            self.word.with_mut(|w| unsafe { (*w).assume_init_drop() });
        }
    }
}

/// How a state's derived data is built, for [`Generation::publish_derived`].
pub(crate) struct Built {
    pub(crate) closure: Vec<NodeId>,
    pub(crate) accept: Vec<SubscriberId>,
    pub(crate) words: Vec<Arc<str>>,
    /// The write count the NFA was at.
    pub(crate) stamp: u64,
}

/// One generation of the cache: what a flush drops at once.
pub(crate) struct Generation {
    /// The intern table of states: open addressing on the set's hash, at most half full.
    /// Readers file states under the read side by CAS; the one that finds it half full
    /// takes the write side and doubles it (interning is the cold path: the hot path never
    /// reads this table).
    slots: RwLock<Box<[Atomic<State>]>>,
    /// The start states: `[plain, dollar]`.
    pub(crate) start: [Atomic<State>; 2],
    states: AtomicUsize,
    transitions: AtomicUsize,
    bytes: AtomicUsize,
    /// For each NFA node, the states whose closure holds it: whom a write at that node
    /// concerns. Written on the cold path (sharded, to keep readers building different states
    /// apart) and read by the writer.
    holders: Box<[Mutex<Holders>]>,
}

/// One shard of [`Generation::holders`]: node -> the states filed under it.
type Holders = HashMap<NodeId, Vec<StatePtr>, WordsHasher>;

/// A state's address in a holder list. It stays good while the generation lives.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct StatePtr(*const State);

// SAFETY: a `StatePtr` is an address that is only dereferenced by the writer, under the NFA's
// write lock, while the generation that owns the state is the current one (a flush needs the
// read lock or the write lock, so it cannot retire it meanwhile).
unsafe impl Send for StatePtr {}

#[cfg(not(loom))]
const HOLDER_SHARDS: usize = 16;
/// One shard under loom: each shard's mutex is one more object for the models to schedule.
#[cfg(loom)]
const HOLDER_SHARDS: usize = 1;

/// The shard of `node`'s holders.
fn shard_of(node: NodeId) -> usize {
    // Under loom, with one shard, clippy would call the modulo useless.
    #[allow(clippy::modulo_one)]
    let shard = node as usize % HOLDER_SHARDS;
    shard
}

impl Drop for Generation {
    fn drop(&mut self) {
        // SAFETY: a generation is dropped when retired and unreachable, or by its owner; it
        // owns its states, each filed once in the intern table, and nothing else does. The
        // start states are filed in the table too.
        unsafe {
            let g = epoch::unprotected();
            let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
            for s in slots.iter() {
                let st = s.load(Relaxed, g);
                if !st.is_null() {
                    drop(st.into_owned());
                }
            }
        }
    }
}

/// Slots of a new generation's intern table.
const FIRST_SLOTS: usize = 16;

/// The cache ran out of its budget: the caller flushes it.
#[derive(Debug)]
pub(crate) struct Full;

impl Generation {
    /// An empty generation; what it takes is charged against the budget as it grows.
    pub(crate) fn new() -> Generation {
        let cap = FIRST_SLOTS;
        Generation {
            slots: RwLock::new((0..cap).map(|_| Atomic::null()).collect()),
            start: [Atomic::null(), Atomic::null()],
            states: AtomicUsize::new(0),
            transitions: AtomicUsize::new(0),
            bytes: AtomicUsize::new(cap * size_of::<usize>()),
            holders: (0..HOLDER_SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
        }
    }

    pub(crate) fn states(&self) -> usize {
        self.states.load(Relaxed)
    }

    pub(crate) fn transitions(&self) -> usize {
        self.transitions.load(Relaxed)
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }

    /// Counts `n` more bytes against `budget`; `Full` if they do not fit.
    fn charge(&self, n: usize, budget: usize) -> Result<(), Full> {
        if self.bytes.fetch_add(n, Relaxed) + n > budget {
            Err(Full)
        } else {
            Ok(())
        }
    }

    /// Counts bytes the writer added. A write is never refused for the budget: the next
    /// cold lookup that finds the cache full flushes it.
    fn charge_writer(&self, n: usize) {
        self.bytes.fetch_add(n, Relaxed);
    }

    /// Gives back bytes charged to this generation for data the writer retires.
    fn uncharge(&self, n: usize) {
        let before = self.bytes.fetch_sub(n, Relaxed);
        debug_assert!(before >= n, "uncharged {n} of {before} bytes");
    }

    /// The state of `set`, interned: the one already filed, or `set` filed now.
    pub(crate) fn intern<'g>(
        &self,
        dollar: bool,
        set: Vec<NodeId>,
        budget: usize,
        guard: &'g Guard,
    ) -> Result<Shared<'g, State>, Full> {
        let key = state_key(dollar, &set);
        let mut mine: Option<Owned<State>> = None;
        loop {
            let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
            let mask = slots.len() - 1;
            let mut i = key as usize & mask;
            loop {
                let cur = slots[i].load(Acquire, guard);
                // SAFETY: states are freed only with their generation, which the caller
                // reached under `guard`.
                if let Some(s) = unsafe { cur.as_ref() } {
                    if s.key == key && *s.set == *set {
                        if mine.is_some() {
                            // Charged, lost to another reader's copy, dropped here.
                            self.uncharge(State::bytes(set.len()));
                        }
                        return Ok(cur);
                    }
                    i = (i + 1) & mask;
                    continue;
                }
                // Half full: double the table, then probe again.
                if (self.states.load(Relaxed) + 1) * 2 > slots.len() {
                    break;
                }
                let new = match mine.take() {
                    Some(m) => m,
                    None => {
                        self.charge(State::bytes(set.len()), budget)?;
                        Owned::new(State {
                            key,
                            set: set.clone().into_boxed_slice(),
                            derived: Atomic::null(),
                            default: Atomic::null(),
                            table: AtomicU64::new(0),
                            answer: Atomic::null(),
                            stamp: AtomicU64::new(0),
                        })
                    }
                };
                match slots[i].compare_exchange(Shared::null(), new, AcqRel, Acquire, guard) {
                    Ok(filed) => {
                        self.states.fetch_add(1, Relaxed);
                        return Ok(filed);
                    }
                    // Another reader filed a state here first: compare it on the next turn.
                    Err(e) => mine = Some(e.new),
                }
            }
            let len = slots.len();
            drop(slots);
            self.grow(len, budget, guard)?;
        }
    }

    /// Doubles the intern table unless another reader did since it was `len` slots.
    fn grow(&self, len: usize, budget: usize, guard: &Guard) -> Result<(), Full> {
        let mut slots = self.slots.write().unwrap_or_else(|p| p.into_inner());
        if slots.len() != len {
            return Ok(());
        }
        // Twice the slots, and the old table's are freed below: `len` slots more.
        self.charge(len * size_of::<usize>(), budget)?;
        let grown: Box<[Atomic<State>]> = (0..len * 2).map(|_| Atomic::null()).collect();
        let mask = grown.len() - 1;
        for slot in slots.iter() {
            let st = slot.load(Relaxed, guard);
            // SAFETY: as in `intern`; the write side keeps every other interner out.
            if let Some(s) = unsafe { st.as_ref() } {
                let mut i = s.key as usize & mask;
                while !grown[i].load(Relaxed, guard).is_null() {
                    i = (i + 1) & mask;
                }
                grown[i].store(st, Relaxed);
            }
        }
        // The old table's box holds pointers only: dropping it frees no state.
        *slots = grown;
        Ok(())
    }

    /// Publishes `built` as `state`'s derived data unless another reader did first, and
    /// files the state under each node of its closure. Returns the derived data in place.
    pub(crate) fn publish_derived<'g>(
        &self,
        state: &'g State,
        built: Built,
        budget: usize,
        guard: &'g Guard,
    ) -> Result<&'g Derived, Full> {
        let d = Derived::new(
            built.closure.into_boxed_slice(),
            accept(&built.accept),
            &built.words,
        );
        // What the writer gives back when it drops or replaces this data.
        let n = d.footprint(guard);
        self.charge(n, budget)?;
        // Before the publishing CAS (a release): whoever reads the new data reads the stamp.
        state.stamp.store(built.stamp, Relaxed);
        let d = Owned::new(d);
        let d = match state
            .derived
            .compare_exchange(Shared::null(), d, AcqRel, Acquire, guard)
        {
            Ok(d) => d,
            Err(e) => {
                // Another reader's copy is the one kept, and was charged by it.
                self.uncharge(n);
                // SAFETY: derived data in place is retired only by the writer, which the
                // caller's read lock keeps out, and freed after `guard` unpins.
                return Ok(unsafe { e.current.deref() });
            }
        };
        // SAFETY: just published under `guard`; see above for why it stays.
        let d = unsafe { d.deref() };
        state.copy_from(d, guard);
        let ptr = StatePtr(state as *const State);
        for &node in d.closure.iter() {
            let shard = &self.holders[shard_of(node)];
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            let list = shard.entry(node).or_default();
            if list.last() != Some(&ptr) {
                list.push(ptr);
            }
        }
        Ok(d)
    }

    /// Publishes `next` as the target of `slot` (an edge's or the default) unless another
    /// reader did first; returns the target in place.
    pub(crate) fn publish_target<'g>(
        &self,
        slot: &Atomic<State>,
        next: Shared<'g, State>,
        guard: &'g Guard,
    ) -> Shared<'g, State> {
        match slot.compare_exchange(Shared::null(), next, AcqRel, Acquire, guard) {
            Ok(_) => {
                self.transitions.fetch_add(1, Relaxed);
                next
            }
            Err(e) => e.current,
        }
    }

    /// The states filed under `node`, for the writer. Clears the list when `take`: the
    /// states lose their derived data and file themselves again when it is rebuilt.
    pub(crate) fn holders_of(&self, node: NodeId, take: bool) -> Vec<StatePtr> {
        let shard = &self.holders[shard_of(node)];
        let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
        if take {
            shard.remove(&node).unwrap_or_default()
        } else {
            match shard.get_mut(&node) {
                Some(list) => {
                    list.sort_unstable();
                    list.dedup();
                    list.clone()
                }
                None => Vec::new(),
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
impl Generation {
    /// Panics unless the bytes charged are what the generation holds now: its intern table,
    /// its states and their derived data. Single-threaded callers only (a reader between
    /// its charge and its publication is counted in one and not yet in the other).
    pub(crate) fn assert_bytes_counted(&self, guard: &Guard) {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        let mut held = slots.len() * size_of::<usize>();
        for slot in slots.iter() {
            // SAFETY: as in `assert_copies_current`.
            let Some(s) = (unsafe { slot.load(Acquire, guard).as_ref() }) else {
                continue;
            };
            held += State::bytes(s.set.len());
            // SAFETY: as the state.
            if let Some(d) = unsafe { s.derived.load(Acquire, guard).as_ref() } {
                held += d.footprint(guard);
            }
        }
        assert_eq!(self.bytes(), held, "bytes charged against bytes held");
    }

    /// Panics unless every state's copies are those of its derived data (or empty, with none).
    pub(crate) fn assert_copies_current(&self, guard: &Guard) {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        for slot in slots.iter() {
            // SAFETY: states live as long as their generation, which the caller reached
            // under `guard`.
            let Some(s) = (unsafe { slot.load(Acquire, guard).as_ref() }) else {
                continue;
            };
            let (t, a) = (s.table.load(Acquire), s.answer.load(Acquire, guard));
            // SAFETY: as the state.
            match unsafe { s.derived.load(Acquire, guard).as_ref() } {
                None => assert!(t == 0 && a.is_null(), "copies of dropped derived data"),
                Some(d) => {
                    assert!(a == d.accept.load(Acquire, guard), "a stale answer copy");
                    let (at, slots) = unpack_table(t).expect("a table copy beside derived data");
                    assert_eq!(at, d.edges.as_ptr(), "a stale table copy");
                    assert_eq!(slots, d.edges.len(), "a stale table size");
                }
            }
        }
    }
}

impl StatePtr {
    /// The state.
    ///
    /// # Safety
    ///
    /// The generation that filed the pointer is the cache's current one and the caller holds
    /// the NFA's write lock (see the `Send` impl).
    pub(crate) unsafe fn state(&self) -> &State {
        // SAFETY: the caller's contract.
        unsafe { &*self.0 }
    }
}

/// What the writer does to the states a write concerns.
pub(crate) mod writer {
    use super::*;

    /// Drops a state's derived data and default edge: its next lookup rebuilds them from the
    /// NFA (and charges them again).
    pub(crate) fn invalidate(g: &Generation, state: &State, guard: &Guard) {
        state.clear_copies();
        state.default.store(Shared::null(), Release);
        let old = state.derived.swap(Shared::null(), AcqRel, guard);
        // SAFETY: unlinked just now but not yet retired: only this writer retires it.
        if let Some(d) = unsafe { old.as_ref() } {
            g.uncharge(d.footprint(guard));
            // SAFETY: unlinked just now; readers that loaded it are pinned, and the epoch
            // frees it after they unpin.
            unsafe { guard.defer_destroy(old) };
        }
    }

    /// The word's edge moves: its target is cleared, or the key is added when new. A table
    /// with no room is replaced, with the rest of `state`'s derived data `d`, by a copy twice
    /// as wide (targets and answer kept), charged in place of `d`.
    pub(crate) fn reset_word(
        g: &Generation,
        state: &State,
        d: &Derived,
        word: &Arc<str>,
        guard: &Guard,
    ) {
        let hash = word_hash(word);
        if let Some(e) = d.edge(word, hash) {
            e.target.store(Shared::null(), Release);
            return;
        }
        if d.has_room() {
            // In place (the writer is the only one filing keys). A reader probing meanwhile
            // may miss it; the write's seqlock sends that reader round again.
            d.file(word, hash);
            g.charge_writer(Edge::word_bytes(word));
            return;
        }
        // SAFETY: an answer is replaced only by this writer; `d` is current.
        let accept = unsafe { d.accept.load(Acquire, guard).deref() };
        let wide = Derived::empty(
            d.closure.clone(),
            super::accept(ids(accept)),
            d.edges.len() * 2,
        );
        for e in d.edges.iter() {
            let hash = e.hash.load(Relaxed);
            if hash != 0 {
                let to = wide.file(e.word(), hash);
                to.target.store(e.target.load(Acquire, guard), Relaxed);
            }
        }
        wide.file(word, hash);
        g.uncharge(d.footprint(guard));
        g.charge_writer(wide.footprint(guard));
        let wide = Owned::new(wide).into_shared(guard);
        // The release publishes the copy whole; the caller stamped the state before.
        let old = state.derived.swap(wide, AcqRel, guard);
        // SAFETY: just published under `guard`; only this writer retires it.
        state.copy_from(unsafe { wide.deref() }, guard);
        // SAFETY: unlinked just now, and the state's copies point at the copy; freed after
        // the readers pinned now unpin.
        unsafe { guard.defer_destroy(old) };
    }

    /// Swaps the answer of `state`, whose derived data is `d`, for `new`, charging the
    /// difference in size.
    pub(crate) fn set_accept(
        g: &Generation,
        state: &State,
        d: &Derived,
        new: &[SubscriberId],
        guard: &Guard,
    ) {
        let old = d.accept.swap(super::accept(new), AcqRel, guard);
        state.copy_answer(d, guard);
        // SAFETY: unlinked just now, not yet retired (only this writer retires answers).
        g.uncharge(size_of_val(ids(unsafe { old.deref() })));
        g.charge_writer(size_of_val(new));
        // SAFETY: unlinked just now, and the state's copy points at the new answer; freed
        // after the readers pinned now unpin.
        unsafe { guard.defer_destroy(old) };
    }
}

/// Counters that outlive generations.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) flushes: AtomicU64,
    pub(crate) fallbacks: AtomicU64,
    pub(crate) invalidations: AtomicU64,
    pub(crate) compactions: AtomicU64,
}
