//! A small persistent hash array mapped trie (Bagwell, "Ideal Hash Trees", 2001) with counted
//! structural sharing: the branch maps and subscriber sets of [`CNode`](super::cnode::CNode).
//! Each node is one allocation, its slots inline behind a header with the reference count
//! (`hamt/node.rs`).
//!
//! Why it exists: the Ctrie of Prokopec et al. (PPoPP 2012, section 2) bounds a C-node's width
//! by hashing keys across levels, so copying a C-node on every update is cheap. A word trie's
//! levels are the pattern's words instead, so one level may hold 1,000,000 sibling words and one
//! branch 1,000,000 subscribers. Copying such a node per write would be O(n); here an update
//! copies one path of at most 13 nodes of at most 32 slots and shares the rest, so it costs
//! O(log n) and cloning a whole map is O(1) (one count increment).
//!
//! # Moving instead of counting
//!
//! A counted copy of a node clones its up to 32 slots: one count increment per child, and a
//! decrement when the old node is freed. In a level of 1,000,000 words every child is a cold
//! cache line, so a path of four nodes costs some 128 misses to copy and 128 more to free.
//! The word map of a C-node is usually unshared, and then the copy need not count: the C-node's
//! writer ([`PMap::insert_moving`], [`PMap::remove_moving`]) copies each node of the path that
//! is *movable* (it, and every node above it up to the map's root, has a strong count of 1 and
//! owns all its slots) by bit-copying its untouched slots into the new node. Ownership of those
//! slots then passes in two steps:
//!
//! - Until the update is known to have won, the new node marks the bit copies in its `lent`
//!   mask: dropping it (the GCAS lost, or was rolled back) drops only the slot it made.
//! - Once the GCAS that installs the new map has committed, [`Moves::commit`] sets, in each old
//!   node, the slots its copy took, and clears the new node's `lent`. The writer does this
//!   before it unpins, and the old map's main node, retired at the commit, is freed only after
//!   it unpins, so the old node's drop frees only the slot the update replaced.
//! - A copy that took no slot (its source held only the slot the update replaced) owns all its
//!   slots from the start, so it records no move: once its GCAS commits, another writer may
//!   move from it before its own writer returns, and a late `commit` must not clear the `lent`
//!   that the other writer's commit set.
//! - The leaf an update displaces moves too, by the same two steps, rather than being cloned
//!   into its new place and dropped from the old (in a wide map its key is a cold line,
//!   touched twice): an insert that meets another key's leaf moves it down into the new pair
//!   node ([`pair_moving`]), and a removal that leaves a node with one leaf moves that leaf up
//!   into the parent's copy ([`Lender`]). The node that receives it marks it lent, and the
//!   commit hands it over from the node it came from.
//!
//! Why it holds: a main node is owned by one I-node slot, so a map root of count 1 is reached
//! only from the main node being replaced, and only one GCAS from that main node ever commits;
//! it is never reinstated. Every other way to keep a node of the old map past one operation
//! (a counted copy by a racing writer on the same I-node, `renew`'s copy of the main node into
//! a new generation, a snapshot's copy of the root's) belongs to a GCAS or RDCSS that cannot
//! also succeed, so those copies are dropped, and a dropped copy only decrements counts (a
//! node whose last count it drops frees only the slots it owns). Readers still walking an old
//! node reach the moved slots through it: they now belong to the new map, which is freed only
//! after it too is replaced and retired, so after those readers unpin. A snapshot shares the
//! map (count 2), so a shared path takes the counted copy, node by node.
//!
//! Invariants:
//! 1. A branch node (non-zero bitmap) holds exactly one slot per set bit of its bitmap, in bit
//!    order.
//! 2. A collision node (zero bitmap) holds two or more leaves whose 64-bit hashes are all
//!    equal; it only appears where the hash bits are exhausted.
//! 3. No node below the root is empty, and no node below the root holds a single leaf (removal
//!    pulls such a leaf up into its parent), so the shape depends only on the keys.
//! 4. `len` is the number of pairs.
//! 5. Every slot is owned (dropped) by exactly one node: the node holding it, unless that
//!    node's `lent` has the slot's bit. `lent` is non-zero only in a node copied by moving
//!    whose update has not been committed (it owns only the slot it made), and in a node of a
//!    replaced map copied from by moving (it owns only the slot its copy replaced). A node a
//!    committed main node reaches has `lent` zero once its writer has returned.
//!
//! Recursion here is bounded by the hash width (13 levels), never by the data.

use std::borrow::Borrow;
use std::hash::BuildHasher;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::{Arc, OnceLock};

use self::node::{Header, NodeRef};

mod node;
// Under loom the nodes come from the global heap (see `node.rs`): only `stats` is used.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) mod pool;
mod set;

pub(crate) use self::set::PSet;

/// Bits of hash consumed per level.
const BITS: u32 = 5;
/// Slots per node.
const MASK: u64 = (1 << BITS) - 1;
/// Shift at and beyond which the 64 hash bits are exhausted.
const MAX_SHIFT: u32 = 65;
/// Branch levels a path may cross before the hash bits run out: the most moves one update
/// records.
const MAX_DEPTH: usize = MAX_SHIFT.div_ceil(BITS) as usize;

/// Keys hash to 64 bits through this trait so that `u32` ids can use a cheap bijective mix and
/// words a keyed foldhash.
pub(crate) trait HashKey {
    /// The key's 64-bit hash; equal keys hash equally.
    fn hash64(&self) -> u64;

    /// Asks the CPU to fetch whatever cloning the key will write (an `Arc`'s counter); a hint
    /// only. See [`prefetch_children`].
    fn prefetch(&self) {}

    /// `self == other`. Words compare eight bytes at a time in line (`crate::bytes::same`): a
    /// call to `memcmp` for a few bytes was its own entry in a hot lookup's profile.
    fn same(&self, other: &Self) -> bool
    where
        Self: PartialEq,
    {
        self == other
    }
}

/// Hints the CPU to fetch the cache line at `p`. Free of effects on the program's state.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: `prefetch` is a hint: it never faults, whatever the address, and changes no
        // memory; SSE, which it needs, is part of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Fetches what a counted copy of `slots` is about to write: every child's counter.
///
/// Why: cloning a slot increments a counter in the child's own allocation. In a level of
/// 1,000,000 words those 32 children are cold, and each increment, a locked instruction,
/// waits for its own cache miss before the next begins: a path of four nodes cost 128 misses
/// in a row. Fetching every child first lets the misses overlap.
fn prefetch_children<K: HashKey, V>(slots: &[Slot<K, V>]) {
    for slot in slots {
        match slot {
            Slot::Leaf { key, .. } => key.prefetch(),
            Slot::Node(n) => prefetch(n.as_ptr()),
        }
    }
}

/// Hints the CPU to fetch every line of `slots`, which a moving copy is about to read whole:
/// issued on the way down a path, the fetches of all its nodes overlap instead of each copy
/// waiting for its own.
fn prefetch_slots<K: HashKey, V>(slots: &[Slot<K, V>]) {
    let p = slots.as_ptr().cast::<u8>();
    for off in (0..std::mem::size_of_val(slots)).step_by(64) {
        prefetch(p.wrapping_add(off));
    }
}

/// One process-wide keyed hasher: every trie and snapshot must agree on word hashes because
/// they share nodes, and a random key keeps crafted word collisions out.
///
/// foldhash's quality variant rather than std's SipHash: a lookup hashes every topic word,
/// and on the seed workload's 19-byte words this made the CSTrie's lookups 12 % faster
/// (docs/cstrie.md, "What a lookup does, and what is left of it"). It is keyed per process but
/// not built to withstand an attacker who learns the key; what such an attacker gains here is
/// bounded: a word map files words by 64-bit hash across at most 13 levels, and only words
/// whose whole hashes collide share a collision node, scanned linearly in that one level.
fn words_hasher() -> &'static foldhash::quality::RandomState {
    static STATE: OnceLock<foldhash::quality::RandomState> = OnceLock::new();
    STATE.get_or_init(foldhash::quality::RandomState::default)
}

/// [`words_hasher`] as a zero-sized `BuildHasher`, for std maps and sets that hash words or
/// ids the same way: a map keeps no hasher state of its own (16 bytes with std's).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WordsHasher;

impl BuildHasher for WordsHasher {
    type Hasher = foldhash::quality::FoldHasher<'static>;

    fn build_hasher(&self) -> Self::Hasher {
        words_hasher().build_hasher()
    }
}

impl HashKey for str {
    fn hash64(&self) -> u64 {
        words_hasher().hash_one(self)
    }

    fn same(&self, other: &str) -> bool {
        crate::bytes::same(self.as_bytes(), other.as_bytes())
    }
}

impl HashKey for Arc<str> {
    fn hash64(&self) -> u64 {
        (**self).hash64()
    }
}

impl HashKey for u32 {
    /// splitmix64's finaliser: a bijection, so distinct ids never collide.
    fn hash64(&self) -> u64 {
        let mut z = u64::from(*self).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A persistent map; every update returns a new map sharing all untouched nodes.
pub(crate) struct PMap<K: HashKey, V> {
    root: Option<NodeRef<K, V>>,
    len: usize,
}

/// A node's slot: a pair, or the node below. A collision node holds only leaves.
enum Slot<K: HashKey, V> {
    Leaf { hash: u64, key: K, value: V },
    Node(NodeRef<K, V>),
}

/// The hand-overs of one moving update ([`PMap::insert_moving`], [`PMap::remove_moving`]):
/// for each node copied by moving, the node it was copied from and the slots that copy took
/// over. Applied by [`commit`](Moves::commit) once the update has replaced the map it was made
/// from; dropped unapplied, it leaves every slot with the node it came from.
pub(crate) struct Moves<K: HashKey, V> {
    /// One per node on the path, and one for a leaf moved down into a new pair.
    list: [Move<K, V>; MAX_DEPTH + 1],
    len: usize,
}

struct Move<K: HashKey, V> {
    /// The node copied from.
    old: *const Header<K, V>,
    /// The slots of `old` that `new` took over.
    taken: u32,
    /// The copy, which owns every slot once the move is committed.
    new: *const Header<K, V>,
}

impl<K: HashKey, V> Clone for Move<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: HashKey, V> Copy for Move<K, V> {}

impl<K: HashKey, V> Default for Moves<K, V> {
    fn default() -> Self {
        let none = Move {
            old: std::ptr::null(),
            taken: 0,
            new: std::ptr::null(),
        };
        Moves {
            list: [none; MAX_DEPTH + 1],
            len: 0,
        }
    }
}

impl<K: HashKey, V> Moves<K, V> {
    /// Whether the update moved nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn push(&mut self, old: &NodeRef<K, V>, taken: u32, new: &NodeRef<K, V>) {
        // A copy that took nothing (the node held only the slot the update replaced) owns all
        // its slots from the start: its `lent` is zero, so once its GCAS commits, another
        // writer may move from it before this one commits. Recording it would have `commit`
        // clear a `lent` that the other writer's commit has set since, and the node would
        // drop the slots it handed on.
        if taken == 0 {
            return;
        }
        self.push_raw(old.as_ptr(), taken, new.as_ptr());
    }

    fn push_raw(&mut self, old: *const Header<K, V>, taken: u32, new: *const Header<K, V>) {
        self.list[self.len] = Move { old, taken, new };
        self.len += 1;
    }

    /// Hands the moved slots over: each old node stops owning the slots its copy took, and
    /// each copy starts owning all of its slots.
    ///
    /// # Safety
    ///
    /// The map this update returned has replaced the map it was made from in that map's only
    /// owner, by an atomic step no other update from the same source can also take, so no
    /// update from the source is ever committed again and no new owner of the source's nodes
    /// can appear (see "Moving instead of counting" in the module docs). Both maps' nodes are
    /// still alive: the caller is pinned since before it read the source, and the new map is
    /// freed only after a later replacement and an epoch.
    pub(crate) unsafe fn commit(self) {
        let list = &self.list[..self.len];
        // Every old node gives its slots up first, and then each copy's `lent` is cleared
        // once. A copy may appear in two hand-overs (one that received a leaf moved up, see
        // `Lender`), and it is movable by another writer as soon as its `lent` is zero: a
        // second clear could wipe the `lent` that writer's commit set meanwhile, and the copy
        // would then drop slots it handed on (a double free, found by a loom model).
        for m in list {
            // SAFETY: both nodes are alive (the function's contract); `lent` is atomic, so
            // writing it while readers traverse the node is no data race.
            let old = unsafe { &*m.old };
            let was = old.lent.fetch_or(m.taken, Release);
            debug_assert_eq!(was & m.taken, 0, "a slot moved twice");
        }
        for (i, m) in list.iter().enumerate() {
            if list[..i].iter().any(|earlier| earlier.new == m.new) {
                continue;
            }
            // SAFETY: as above.
            unsafe { &*m.new }.lent.store(0, Release);
        }
    }
}

/// The bits of the first `len` slot positions, but for `except`.
fn slot_mask(len: usize, except: Option<usize>) -> u32 {
    let all = if len >= 32 { u32::MAX } else { (1 << len) - 1 };
    match except {
        Some(i) => all & !(1 << i),
        None => all,
    }
}

impl<K: HashKey, V> Default for PMap<K, V> {
    fn default() -> Self {
        PMap { root: None, len: 0 }
    }
}

impl<K: HashKey, V> Clone for PMap<K, V> {
    fn clone(&self) -> Self {
        PMap {
            root: self.root.clone(),
            len: self.len,
        }
    }
}

impl<K: HashKey + Clone, V: Clone> Clone for Slot<K, V> {
    fn clone(&self) -> Self {
        match self {
            Slot::Leaf { hash, key, value } => Slot::Leaf {
                hash: *hash,
                key: key.clone(),
                value: value.clone(),
            },
            Slot::Node(n) => Slot::Node(n.clone()),
        }
    }
}

fn bit_of(hash: u64, shift: u32) -> u32 {
    1 << ((hash >> shift) & MASK)
}

#[inline(always)]
fn index_of(bitmap: u32, bit: u32) -> usize {
    (bitmap & (bit - 1)).count_ones() as usize
}

/// What a removal left of a node.
enum Removed<K: HashKey, V> {
    /// The key was not there.
    Absent,
    /// Nothing is left.
    Empty,
    /// One pair is left: the parent inlines it (invariant 3). With a [`Lender`], the pair is
    /// a bit copy of a leaf that the lender still owns until the commit.
    Single(u64, K, V, Option<Lender<K, V>>),
    /// A smaller node.
    Node(NodeRef<K, V>),
}

/// The node and slot a leaf was moved out of by an uncommitted update.
struct Lender<K: HashKey, V> {
    node: *const Header<K, V>,
    bit: u32,
}

impl<K: HashKey, V> PMap<K, V> {
    /// The number of pairs.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Calls `f` on every pair, in hash order.
    pub(crate) fn for_each<'a>(&'a self, f: &mut impl FnMut(&'a K, &'a V)) {
        if let Some(root) = &self.root {
            for_each(root, f);
        }
    }

    /// Consumes the map, handing `f` every pair held by a node nobody else shares. Pairs in
    /// shared nodes stay with their other owners. Used by the iterative drop of `INode`s.
    pub(crate) fn drain_unique(self, f: &mut impl FnMut(K, V)) {
        if let Some(node) = self.root {
            node.drain_unique(f);
        }
    }
}

impl<K: HashKey + Eq + Clone, V: Clone> PMap<K, V> {
    // The plain (counted) updates and the lookups by key are the tests' way in: the trie's
    // word maps use `get_key_value_hashed` and the moving updates, and subscriber sets are `PSet`s.

    /// The value of `key`.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: HashKey + Eq + ?Sized,
    {
        self.get_key_value_hashed(key.hash64(), key).map(|(_, v)| v)
    }

    /// The stored key and value of `key`, whose hash is `hash` (`key.hash64()`): a lookup
    /// hashes each topic word once and probes many levels with it.
    /// Always in line, so that a caller compiled for `popcnt` (`CNode::word`) walks the map
    /// with it.
    #[inline(always)]
    pub(crate) fn get_key_value_hashed<Q>(&self, hash: u64, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: HashKey + Eq + ?Sized,
    {
        debug_assert_eq!(hash, key.hash64());
        find(self.root.as_ref()?, hash, key)
    }

    /// Whether `key` is in the map.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn contains<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: HashKey + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    /// The map with `key` bound to `value`; an equal key already there is replaced too, since
    /// a key may carry data (the C-node's word keys carry their branch). Counts rather than
    /// moves, so it suits a map being built (a C-node's first map, made from its solo word).
    pub(crate) fn insert(&self, key: K, value: V) -> Self {
        self.insert_with(key, value, None)
    }

    /// [`insert`](Self::insert), copying the nodes on the path that this map alone reaches by
    /// moving their other slots rather than counting them (see "Moving instead of counting"
    /// in the module docs). The hand-overs are recorded in `moves`, for
    /// [`Moves::commit`] once the result has replaced `self`; `moves` must be empty.
    pub(crate) fn insert_moving(&self, key: K, value: V, moves: &mut Moves<K, V>) -> Self {
        debug_assert!(moves.is_empty());
        self.insert_with(key, value, Some(moves))
    }

    fn insert_with(&self, key: K, value: V, moves: Option<&mut Moves<K, V>>) -> Self {
        let hash = key.hash64();
        match &self.root {
            None => PMap {
                root: Some(single(hash, key, value, false)),
                len: 1,
            },
            Some(root) => {
                let mut none = Moves::default();
                let (unique, moves) = match moves {
                    Some(m) => (true, m),
                    None => (false, &mut none),
                };
                let (node, added) = insert(root, unique, 0, hash, key, value, moves);
                PMap {
                    root: Some(node),
                    len: self.len + usize::from(added),
                }
            }
        }
    }

    /// The map without `key`, or `None` if `key` was not there.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn remove<Q>(&self, key: &Q) -> Option<Self>
    where
        K: Borrow<Q>,
        Q: HashKey + Eq + ?Sized,
    {
        self.remove_with(key, None)
    }

    /// [`remove`](Self::remove), moving as [`insert_moving`](Self::insert_moving) does.
    pub(crate) fn remove_moving<Q>(&self, key: &Q, moves: &mut Moves<K, V>) -> Option<Self>
    where
        K: Borrow<Q>,
        Q: HashKey + Eq + ?Sized,
    {
        debug_assert!(moves.is_empty());
        self.remove_with(key, Some(moves))
    }

    fn remove_with<Q>(&self, key: &Q, moves: Option<&mut Moves<K, V>>) -> Option<Self>
    where
        K: Borrow<Q>,
        Q: HashKey + Eq + ?Sized,
    {
        let root = self.root.as_ref()?;
        let mut none = Moves::default();
        let (unique, moves) = match moves {
            Some(m) => (true, m),
            None => (false, &mut none),
        };
        let root = match remove(root, unique, 0, key.hash64(), key, moves) {
            Removed::Absent => return None,
            Removed::Empty => None,
            Removed::Single(hash, key, value, lender) => {
                let root = single(hash, key, value, lender.is_some());
                if let Some(l) = lender {
                    moves.push_raw(l.node, l.bit, root.as_ptr());
                }
                Some(root)
            }
            Removed::Node(node) => Some(node),
        };
        Some(PMap {
            root,
            len: self.len - 1,
        })
    }
}

impl<K: HashKey, V> PMap<K, V> {
    /// Checks invariants 1 to 5, and that every leaf sits where its hash puts it. Call it
    /// while no write that may have moved from this map is in flight.
    pub(crate) fn check(&self) -> Result<(), String> {
        check(self.root.as_ref(), self.len)
    }
}

/// [`PMap::check`] of the map of `len` pairs below `root`.
fn check<K: HashKey, V>(root: Option<&NodeRef<K, V>>, len: usize) -> Result<(), String> {
    let Some(root) = root else {
        return match len {
            0 => Ok(()),
            n => Err(format!("no nodes but len {n}")),
        };
    };
    // (node, shift, the hash bits the path to it fixed)
    let mut stack: Vec<(&NodeRef<K, V>, u32, u64)> = vec![(root, 0, 0)];
    let mut count = 0;
    while let Some((node, shift, prefix)) = stack.pop() {
        let below_root = shift > 0;
        let slots = node.slots();
        if node.lent().load(Acquire) != 0 {
            return Err("a node holding slots it does not own".into());
        }
        if node.is_collision() {
            if shift < MAX_SHIFT || slots.len() < 2 {
                return Err("a collision node that is not one".into());
            }
            let mut hashes = slots.iter().map(|slot| match slot {
                Slot::Leaf { hash, key, .. } => (*hash == key.hash64()).then_some(*hash),
                Slot::Node(_) => None,
            });
            let first = hashes.next().flatten();
            if first.is_none() || hashes.any(|h| h != first) {
                return Err("a collision node of different or stale hashes".into());
            }
            count += slots.len();
            continue;
        }
        let bitmap = node.bitmap();
        if bitmap.count_ones() as usize != slots.len() {
            return Err("bitmap and slots disagree".into());
        }
        if below_root && matches!(slots, [Slot::Leaf { .. }]) {
            return Err("a single leaf below the root".into());
        }
        let bits = (0..32).filter(|b| bitmap & (1 << b) != 0);
        for (slot, b) in slots.iter().zip(bits) {
            let prefix = prefix | (b as u64) << shift;
            match slot {
                Slot::Leaf { hash, key, .. } => {
                    count += 1;
                    if *hash != key.hash64() {
                        return Err("a leaf with a stale hash".into());
                    }
                    let fixed = match shift + BITS {
                        64.. => u64::MAX,
                        bits => (1u64 << bits) - 1,
                    };
                    if hash & fixed != prefix {
                        return Err("a leaf off its hash path".into());
                    }
                }
                Slot::Node(n) => stack.push((n, shift + BITS, prefix)),
            }
        }
    }
    if count != len {
        return Err(format!("{count} pairs but len {len}"));
    }
    Ok(())
}

/// The stored key and value of `key` in the map below `root`.
#[inline(always)]
fn find<'a, K, V, Q>(root: &'a NodeRef<K, V>, hash: u64, key: &Q) -> Option<(&'a K, &'a V)>
where
    K: HashKey + Borrow<Q>,
    Q: HashKey + Eq + ?Sized,
{
    let mut node = root;
    let mut shift = 0;
    loop {
        if node.is_collision() {
            return node.slots().iter().find_map(|slot| match slot {
                Slot::Leaf { key: k, value, .. } if k.borrow().same(key) => Some((k, value)),
                _ => None,
            });
        }
        let bitmap = node.bitmap();
        let bit = bit_of(hash, shift);
        if bitmap & bit == 0 {
            return None;
        }
        match &node.slots()[index_of(bitmap, bit)] {
            Slot::Leaf {
                hash: h,
                key: k,
                value,
            } => return (*h == hash && k.borrow().same(key)).then_some((k, value)),
            Slot::Node(next) => {
                node = next;
                shift += BITS;
                // Past the hash bits (a collision node next) any guess will do.
                let bits = hash.checked_shr(shift).unwrap_or(0) & MASK;
                node.prefetch_slot(bits as usize);
            }
        }
    }
}

/// Calls `f` on every pair below `node`, in hash order.
fn for_each<'a, K: HashKey, V>(node: &'a NodeRef<K, V>, f: &mut impl FnMut(&'a K, &'a V)) {
    let slots = node.slots();
    // The children's first lines, all asked for before the first is read: a large set's
    // nodes are rarely in the caches, and their misses then overlap instead of each waiting
    // for the last.
    for slot in slots {
        if let Slot::Node(n) = slot {
            let p = n.as_ptr().cast::<u8>();
            for off in [0, 64] {
                prefetch(p.wrapping_add(off));
            }
        }
    }
    for slot in slots {
        match slot {
            Slot::Leaf { key, value, .. } => f(key, value),
            Slot::Node(n) => for_each(n, f),
        }
    }
}

/// A root of one pair, which it owns unless `lent` (a leaf moved up by an uncommitted
/// removal).
fn single<K: HashKey, V>(hash: u64, key: K, value: V, lent: bool) -> NodeRef<K, V> {
    let leaf = Slot::Leaf { hash, key, value };
    // SAFETY: `fill` writes the one slot and cannot panic.
    unsafe { NodeRef::build(bit_of(hash, 0), u32::from(lent), 1, |dst| dst.write(leaf)) }
}

/// Whether an update may move `node`'s slots rather than count them, given that the path
/// above it may be moved (`path_unique`): nobody else holds the node (its only reference is
/// the slot or map it was reached through), it owns all of its slots, and it is a branch.
fn movable<K: HashKey, V>(node: &NodeRef<K, V>, path_unique: bool) -> bool {
    // Acquire (in `strong_count` and here) pairs with `commit`'s release: a node seen owning
    // all its slots was handed them before.
    path_unique
        && node.strong_count() == 1
        && !node.is_collision()
        && node.lent().load(Acquire) == 0
}

/// A branch node of `bitmap` whose slots are `src[..at]`, then `mid` if any, then
/// `src[at + skip..]`. With `moving`, the slots from `src` are bit copies that the new node
/// does not own (its `lent` says so) until [`Moves::commit`] hands them over; without, they
/// are counted clones.
fn spliced<K: HashKey + Clone, V: Clone>(
    bitmap: u32,
    src: &[Slot<K, V>],
    at: usize,
    skip: usize,
    mid: Option<Slot<K, V>>,
    moving: bool,
) -> NodeRef<K, V> {
    spliced_lent(bitmap, src, at, skip, mid, moving, false)
}

/// [`spliced`], where with `mid_lent` the node does not own `mid` either (a leaf moved up by
/// the update, still owned by the node it came from until the commit).
fn spliced_lent<K: HashKey + Clone, V: Clone>(
    bitmap: u32,
    src: &[Slot<K, V>],
    at: usize,
    skip: usize,
    mid: Option<Slot<K, V>>,
    moving: bool,
    mid_lent: bool,
) -> NodeRef<K, V> {
    debug_assert!(moving || !mid_lent, "a lent leaf in a counted copy");
    let own = mid.as_ref().map(|_| at).filter(|_| !mid_lent);
    let len = src.len() - skip + usize::from(mid.is_some());
    let (before, after) = (&src[..at], &src[at + skip..]);
    if !moving {
        prefetch_children(before);
        prefetch_children(after);
        let slots = before
            .iter()
            .cloned()
            .chain(mid)
            .chain(after.iter().cloned());
        return NodeRef::from_slots(bitmap, len, slots);
    }
    // SAFETY: `fill` writes `len` slots: `before`, `mid` if any, then `after`. Those from
    // `src` are bit copies, not counted: the node marks them all in `lent`, so dropping it
    // (the update lost, or its map was a temporary) never drops them, and `src` keeps owning
    // them until `Moves::commit` hands them over after the update won. Nothing in `fill` can
    // panic.
    unsafe {
        NodeRef::build(bitmap, slot_mask(len, own), len, |dst| {
            std::ptr::copy_nonoverlapping(before.as_ptr(), dst, at);
            let mut n = at;
            if let Some(m) = mid {
                dst.add(n).write(m);
                n += 1;
            }
            std::ptr::copy_nonoverlapping(after.as_ptr(), dst.add(n), after.len());
        })
    }
}

/// Two leaves with different keys, as a node at `shift`.
fn pair<K: HashKey, V>(shift: u32, a: (u64, K, V), b: (u64, K, V)) -> NodeRef<K, V> {
    let leaf = |(hash, key, value)| Slot::Leaf { hash, key, value };
    if shift >= MAX_SHIFT {
        return NodeRef::from_slots(0, 2, [leaf(a), leaf(b)]);
    }
    let (ba, bb) = (bit_of(a.0, shift), bit_of(b.0, shift));
    if ba == bb {
        return NodeRef::from_slots(ba, 1, [Slot::Node(pair(shift + BITS, a, b))]);
    }
    let slots = if ba < bb {
        [leaf(a), leaf(b)]
    } else {
        [leaf(b), leaf(a)]
    };
    NodeRef::from_slots(ba | bb, 2, slots)
}

/// [`pair`], where `moved` is a bit copy of a leaf that another node still owns: the node that
/// holds it (returned with the pair's top node) marks it lent until [`Moves::commit`].
fn pair_moving<K: HashKey, V>(
    shift: u32,
    moved: (u64, K, V),
    fresh: (u64, K, V),
) -> (NodeRef<K, V>, *const Header<K, V>) {
    let leaf = |(hash, key, value)| Slot::Leaf { hash, key, value };
    if shift >= MAX_SHIFT {
        let node = lent_node(0, 0b01, [leaf(moved), leaf(fresh)]);
        let holder = node.as_ptr();
        return (node, holder);
    }
    let (bm, bf) = (bit_of(moved.0, shift), bit_of(fresh.0, shift));
    if bm == bf {
        let (below, holder) = pair_moving(shift + BITS, moved, fresh);
        let node = NodeRef::from_slots(bm, 1, [Slot::Node(below)]);
        return (node, holder);
    }
    let node = if bm < bf {
        lent_node(bm | bf, 0b01, [leaf(moved), leaf(fresh)])
    } else {
        lent_node(bm | bf, 0b10, [leaf(fresh), leaf(moved)])
    };
    let holder = node.as_ptr();
    (node, holder)
}

/// A node of two slots that owns only those `lent` leaves out.
fn lent_node<K: HashKey, V>(bitmap: u32, lent: u32, slots: [Slot<K, V>; 2]) -> NodeRef<K, V> {
    let [a, b] = slots;
    // SAFETY: `fill` writes both slots and cannot panic.
    unsafe {
        NodeRef::build(bitmap, lent, 2, |dst| {
            dst.write(a);
            dst.add(1).write(b);
        })
    }
}

/// A copy of `this` with the pair added; `true` if the key is new. With `path_unique` (the
/// map and every node above `this` may be moved), a movable `this` is copied by moving and the
/// move recorded in `moves`.
fn insert<K: HashKey + Eq + Clone, V: Clone>(
    this: &NodeRef<K, V>,
    path_unique: bool,
    shift: u32,
    hash: u64,
    key: K,
    value: V,
    moves: &mut Moves<K, V>,
) -> (NodeRef<K, V>, bool) {
    let slots = this.slots();
    if this.is_collision() {
        let at = slots
            .iter()
            .position(|s| matches!(s, Slot::Leaf { key: k, .. } if *k == key));
        let leaf = Slot::Leaf { hash, key, value };
        let node = match at {
            Some(at) => spliced(0, slots, at, 1, Some(leaf), false),
            None => spliced(0, slots, slots.len(), 0, Some(leaf), false),
        };
        return (node, at.is_none());
    }
    let moving = movable(this, path_unique);
    if moving {
        prefetch_slots(slots);
    }
    let bitmap = this.bitmap();
    let bit = bit_of(hash, shift);
    let at = index_of(bitmap, bit);
    if bitmap & bit == 0 {
        let leaf = Slot::Leaf { hash, key, value };
        let node = spliced(bitmap | bit, slots, at, 0, Some(leaf), moving);
        if moving {
            moves.push(this, slot_mask(slots.len(), None), &node);
        }
        return (node, true);
    }
    let (slot, added) = match &slots[at] {
        Slot::Leaf {
            hash: h, key: k, ..
        } if *h == hash && *k == key => (Slot::Leaf { hash, key, value }, false),
        Slot::Leaf {
            hash: h,
            key: k,
            value: v,
        } if moving => {
            // The leaf moves down into the new pair too, rather than being cloned there and
            // dropped from here: in a wide map its key is a cold line, touched twice.
            // SAFETY: a bit copy, owned by `this` until the commit hands it over: the pair
            // marks it lent until then, so dropping the pair (the update lost) leaves it.
            let old = unsafe { (*h, std::ptr::read(k), std::ptr::read(v)) };
            let (node, holder) = pair_moving(shift + BITS, old, (hash, key, value));
            moves.push_raw(this.as_ptr(), 1 << at, holder);
            (Slot::Node(node), true)
        }
        Slot::Leaf {
            hash: h,
            key: k,
            value: v,
        } => {
            let old = (*h, k.clone(), v.clone());
            (
                Slot::Node(pair(shift + BITS, old, (hash, key, value))),
                true,
            )
        }
        Slot::Node(n) => {
            let (node, added) = insert(n, moving, shift + BITS, hash, key, value, moves);
            (Slot::Node(node), added)
        }
    };
    let node = spliced(bitmap, slots, at, 1, Some(slot), moving);
    if moving {
        moves.push(this, slot_mask(slots.len(), Some(at)), &node);
    }
    (node, added)
}

/// A copy of `this` without `key`, moving as [`insert`] does.
fn remove<K, V, Q>(
    this: &NodeRef<K, V>,
    path_unique: bool,
    shift: u32,
    hash: u64,
    key: &Q,
    moves: &mut Moves<K, V>,
) -> Removed<K, V>
where
    K: HashKey + Eq + Clone + Borrow<Q>,
    V: Clone,
    Q: HashKey + Eq + ?Sized,
{
    let slots = this.slots();
    if this.is_collision() {
        let Some(at) = slots
            .iter()
            .position(|s| matches!(s, Slot::Leaf { key: k, .. } if k.borrow() == key))
        else {
            return Removed::Absent;
        };
        if slots.len() == 2 {
            if let Slot::Leaf { hash, key, value } = &slots[1 - at] {
                return Removed::Single(*hash, key.clone(), value.clone(), None);
            }
        }
        return Removed::Node(spliced(0, slots, at, 1, None, false));
    }
    let moving = movable(this, path_unique);
    let bitmap = this.bitmap();
    let bit = bit_of(hash, shift);
    if bitmap & bit == 0 {
        return Removed::Absent;
    }
    if moving {
        prefetch_slots(slots);
    }
    let at = index_of(bitmap, bit);
    let (replacement, lender) = match &slots[at] {
        Slot::Leaf {
            hash: h, key: k, ..
        } => {
            if *h != hash || k.borrow() != key {
                return Removed::Absent;
            }
            (None, None)
        }
        Slot::Node(n) => match remove(n, moving, shift + BITS, hash, key, moves) {
            Removed::Absent => return Removed::Absent,
            Removed::Empty => (None, None),
            Removed::Single(hash, key, value, lender) => {
                (Some(Slot::Leaf { hash, key, value }), lender)
            }
            Removed::Node(node) => (Some(Slot::Node(node)), None),
        },
    };
    let bitmap = if replacement.is_some() {
        bitmap
    } else {
        bitmap & !bit
    };
    // What is left when at most one slot is: nothing, or a lone leaf for the parent to inline
    // (invariant 3): the replacement itself, or the other slot's leaf, moved up where this
    // node may be moved (rather than cloned there and dropped from here: in a wide map its
    // key is a cold line, touched twice), else a counted clone.
    match (slots.len(), replacement) {
        (1, None) => Removed::Empty,
        (1, Some(Slot::Leaf { hash, key, value })) => Removed::Single(hash, key, value, lender),
        (2, None) => {
            match &slots[1 - at] {
                Slot::Leaf { hash, key, value } if moving => {
                    // SAFETY: a bit copy, owned by `this` until the commit hands it over;
                    // whichever node takes it marks it lent until then (`Lender`).
                    let (key, value) = unsafe { (std::ptr::read(key), std::ptr::read(value)) };
                    let lender = Lender {
                        node: this.as_ptr(),
                        bit: 1 << (1 - at),
                    };
                    return Removed::Single(*hash, key, value, Some(lender));
                }
                Slot::Leaf { hash, key, value } => {
                    return Removed::Single(*hash, key.clone(), value.clone(), None);
                }
                Slot::Node(_) => {}
            }
            let node = spliced(bitmap, slots, at, 1, None, moving);
            Removed::finish(this, node, slots.len(), at, moving, moves)
        }
        (_, replacement) => {
            let mid_lent = lender.is_some();
            let node = spliced_lent(bitmap, slots, at, 1, replacement, moving, mid_lent);
            if let Some(l) = lender {
                moves.push_raw(l.node, l.bit, node.as_ptr());
            }
            Removed::finish(this, node, slots.len(), at, moving, moves)
        }
    }
}

impl<K: HashKey, V> Removed<K, V> {
    /// A removal's new node, its move recorded if it was made by moving: the copy took every
    /// slot of `old` (of `len`) but the one at `at`, which was removed or replaced.
    fn finish(
        old: &NodeRef<K, V>,
        node: NodeRef<K, V>,
        len: usize,
        at: usize,
        moving: bool,
        moves: &mut Moves<K, V>,
    ) -> Self {
        if moving {
            moves.push(old, slot_mask(len, Some(at)), &node);
        }
        Removed::Node(node)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Random updates per test: fewer under Miri, which checks the node code's unsafe parts
    /// (`cargo +nightly miri test --lib hamt`) at a thousandth of the speed.
    const STEPS: u32 = if cfg!(miri) { 300 } else { 20_000 };

    /// A key whose hash the test chooses, to force collisions.
    #[derive(Clone, PartialEq, Eq, Debug)]
    struct Fixed(u64, u32);
    impl HashKey for Fixed {
        fn hash64(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn persistent_map_equals_a_hash_map_and_old_versions_stay() {
        let mut model: HashMap<u32, u32> = HashMap::new();
        let mut m: PMap<u32, u32> = PMap::default();
        let mut versions = Vec::new();
        let mut x: u32 = 7;
        for step in 0..STEPS {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let k = (x >> 8) % 3000;
            if x % 3 == 0 {
                let removed = m.remove(&k);
                assert_eq!(removed.is_some(), model.remove(&k).is_some());
                if let Some(r) = removed {
                    m = r;
                }
            } else {
                m = m.insert(k, step);
                model.insert(k, step);
            }
            assert_eq!(m.len(), model.len());
            if step % (STEPS / 10) == 0 {
                versions.push((m.clone(), model.clone()));
            }
        }
        for (m, model) in versions {
            let mut seen = 0;
            m.for_each(&mut |k, v| {
                assert_eq!(model.get(k), Some(v));
                seen += 1;
            });
            assert_eq!(seen, model.len());
        }
    }

    #[test]
    fn full_hash_collisions_and_shared_prefixes() {
        let mut m: PMap<Fixed, ()> = PMap::default();
        let keys: Vec<Fixed> = (0..50)
            .map(|i| Fixed(if i % 2 == 0 { 42 } else { 42 | (1 << 63) }, i))
            .collect();
        for k in &keys {
            m = m.insert(k.clone(), ());
        }
        assert_eq!(m.len(), 50);
        for k in &keys {
            assert!(m.contains(k));
        }
        for k in &keys {
            m = m.remove(k).expect("present");
            assert!(!m.contains(k));
        }
        assert!(m.is_empty());
    }

    std::thread_local! {
        /// Tracked keys alive on this thread.
        static LIVE: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
    }

    /// A key that counts its live copies, and whose hash may collide on purpose (the low
    /// 12 bits of the id, and the rest set high), so moves cross collision nodes too.
    #[derive(PartialEq, Eq, Debug)]
    struct Tracked(u32);

    impl Tracked {
        fn new(k: u32) -> Tracked {
            LIVE.with(|n| n.set(n.get() + 1));
            Tracked(k)
        }
    }

    impl Clone for Tracked {
        fn clone(&self) -> Tracked {
            Tracked::new(self.0)
        }
    }

    impl Drop for Tracked {
        fn drop(&mut self) {
            LIVE.with(|n| n.set(n.get() - 1));
        }
    }

    impl HashKey for Tracked {
        fn hash64(&self) -> u64 {
            if self.0 % 7 == 0 {
                u64::from(self.0 % 5)
            } else {
                self.0.hash64()
            }
        }
    }

    fn contents(m: &PMap<Tracked, u32>) -> HashMap<u32, u32> {
        let mut got = HashMap::new();
        m.for_each(&mut |k, v| assert!(got.insert(k.0, *v).is_none()));
        got
    }

    /// Moving updates that win (committed, the old map then dropped), lose (the new map
    /// dropped uncommitted) or meet a shared map (kept versions, which force counted copies)
    /// leave every version reading what it held, and free every key exactly once.
    #[test]
    fn moving_updates_hand_each_slot_to_one_owner() {
        {
            let mut model: HashMap<u32, u32> = HashMap::new();
            let mut m: PMap<Tracked, u32> = PMap::default();
            let mut versions = Vec::new();
            let mut x: u32 = 11;
            for step in 0..STEPS {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                let k = (x >> 8) % 2000;
                let mut moves = Moves::default();
                let (new, new_model) = if x % 3 == 0 {
                    let mut nm = model.clone();
                    let removed = nm.remove(&k).is_some();
                    match m.remove_moving(&Tracked::new(k), &mut moves) {
                        Some(r) => (r, nm),
                        None => {
                            assert!(!removed && moves.is_empty());
                            continue;
                        }
                    }
                } else {
                    let mut nm = model.clone();
                    nm.insert(k, step);
                    (m.insert_moving(Tracked::new(k), step, &mut moves), nm)
                };
                assert_eq!(new.len(), new_model.len());
                match (x >> 4) % 8 {
                    // The update lost: its map goes, the old one stays as it was.
                    0 => drop(new),
                    _ => {
                        // SAFETY: `m` is the only owner of the map `new` was made from, it
                        // is replaced now and never updated again, and both are alive.
                        unsafe { moves.commit() };
                        // A reader still holding the old map reads it whole.
                        assert_eq!(contents(&m), model);
                        m = new;
                        model = new_model;
                    }
                }
                new_check(&m, &model);
                if step % (STEPS / 20) == 0 {
                    versions.push((m.clone(), model.clone()));
                }
                if step % (STEPS / 7) == 0 {
                    versions.clear();
                }
            }
            for (v, model) in &versions {
                new_check(v, model);
            }
        }
        assert_eq!(LIVE.with(std::cell::Cell::get), 0);
    }

    /// A writer may move from a map whose own update has committed its GCAS but not yet its
    /// moves, when that map's new nodes own all their slots (`lent` zero): here the first
    /// update replaces the only key of a one-slot root. The late commit of the first update
    /// must not take back what the second moved on.
    #[test]
    fn a_late_commit_leaves_what_a_later_update_moved_on() {
        {
            // Two keys apart in the low 5 hash bits, so the second lands beside the first.
            let k1 = 1u32;
            let k2 = (2u32..100)
                .find(|k| k % 7 != 0 && (k.hash64() ^ k1.hash64()) & 31 != 0)
                .expect("a key in another slot");
            let m0: PMap<Tracked, u32> = PMap::default().insert(Tracked::new(k1), 1);
            let mut first = Moves::default();
            let m1 = m0.insert_moving(Tracked::new(k1), 2, &mut first);
            let mut second = Moves::default();
            let m2 = m1.insert_moving(Tracked::new(k2), 3, &mut second);
            // SAFETY: `m2` replaced `m1`, and `m1` replaced `m0`, each in its only owner, and
            // every map is alive: the order is the one a preempted first writer meets.
            unsafe {
                second.commit();
                first.commit();
            }
            drop(m0);
            drop(m1);
            assert_eq!(LIVE.with(std::cell::Cell::get), 2, "m2 holds two keys");
            assert_eq!(contents(&m2), HashMap::from([(k1, 2), (k2, 3)]));
            new_check(&m2, &HashMap::from([(k1, 2), (k2, 3)]));
        }
        assert_eq!(LIVE.with(std::cell::Cell::get), 0);
    }

    fn new_check(m: &PMap<Tracked, u32>, model: &HashMap<u32, u32>) {
        assert_eq!(&contents(m), model);
        m.check().unwrap();
    }
}
