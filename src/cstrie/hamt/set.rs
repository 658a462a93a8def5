//! The subscribers of a branch: a persistent set of ids that keeps a single id inline.
//!
//! Why not a plain map of ids: most patterns have one subscriber (a user's own topic under
//! `users.<id>`, a device's under `sensors/<id>/#`), and a map of one id is a node of its
//! own. Inline, that id costs no allocation when the pattern is subscribed, no free when it
//! goes, and no dependent cache miss when a lookup reaches the branch: in a level of
//! 1,000,000 words, the node would be one more cold line after the word's. More than
//! [`FEW_MAX`] ids live in blocks in a map, so a set of 1,000,000 subscribers is still updated
//! in O(log n) and a copy of one block.
//!
//! The set stays 16 bytes, as the map it replaces did (a compile-time check below): a word, its
//! subscribers and its next level still take one 64-byte chunk of the allocator. A larger
//! chunk was measured to slow a wide level down (docs/word-maps-and-pool.md, "Tried for the
//! wide level and not kept").
//!
//! Two to [`FEW_MAX`] ids are a plain array shared by counting (`Few`): a lookup copies it
//! whole into its answer, where walking a map's nodes cost a few nanoseconds an id (on the
//! OpenAMQ experiment, whose answers of about 170 come from sets of a few ids each, that walk
//! was a sixth of a bare lookup; with arrays of up to 64 ids, the one set past them, about 90
//! subscribers of the all-wildcards pattern, was still a fifth, and as an array the bare
//! lookup went from 1,030-1,050 ns to 765-810). An update copies the array, at
//! most 4 KiB, and still costs less than a map's path copy: subscribing and unsubscribing one
//! id of a set of 100 to 1,000 took 255-600 ns as an array against 600-815 ns as a map (a
//! loop of both on one `CSTrie`, 2026-11-28).
//!
//! Larger sets are a persistent map from a block number (an id's bits above the low
//! [`BLOCK_BITS`]) to the sorted array of the set's ids in that block. A lookup copies each
//! block whole; an update copies the one block it changes (at most 1,024 ids) and the map's
//! path to it. The registry hands ids out densely, so a large set fills its blocks: the
//! `fanout` workload's 100,000 subscribers are 98 blocks, copied in 8.7 µs, where a map of
//! single ids spread them over some 33,000 bottom nodes of a few ids each and took 557 µs
//! (and the `Trie`'s one vector 11.5 µs); subscribing and unsubscribing one id of that set took
//! 1.6 µs against 2.2 (2026-11-28). A sparse set (ids far apart) has blocks of a few ids, and
//! costs about what a map of single ids did.
//!
//! Invariant: a set of no id or one is `Small`, of two to [`FEW_MAX`] `Few`, of more `Many`,
//! so the shape depends only on the number of ids; in `Many`, every block is non-empty and
//! sorted, holds only ids of its number, and the blocks' lengths add up to `len`.

use std::ptr::NonNull;
use std::sync::Arc;

use super::node::NodeRef;
use super::{check, find, for_each, insert, remove, single, HashKey, Moves, Removed};

/// The most ids a set keeps as an array. Under Miri, 64, so that its short runs of the tests
/// still cross between an array and a map.
pub(crate) const FEW_MAX: usize = if cfg!(miri) { 64 } else { 1024 };

/// Past [`FEW_MAX`], ids go in blocks of the ids that share all but their low `BLOCK_BITS`
/// bits: a block of up to 1,024 ids is a sorted array.
const BLOCK_BITS: u32 = 10;

/// The block of `id`.
fn block_of(id: u32) -> u32 {
    id >> BLOCK_BITS
}

/// The sorted ids of one block, shared by counting.
type Block = Arc<[u32]>;

/// A persistent set of subscriber ids; every update returns a new set sharing the old one's
/// nodes.
#[derive(Clone, Default)]
pub(crate) struct PSet(Repr);

#[derive(Clone)]
enum Repr {
    /// No id, or one.
    Small(Option<u32>),
    /// Two to [`FEW_MAX`] ids, in insertion order.
    Few(Few),
    /// More ids, in a map from each block to its ids (see [`BLOCK_BITS`]): a lookup copies
    /// each block whole, where a map of single ids left a few in each of its bottom nodes
    /// (a set of 100,000 in some 33,000 nodes, a cold line each), and an update copies one
    /// block and the map's path to it.
    Many {
        root: NodeRef<u32, Block>,
        /// Ids in all blocks.
        len: u32,
        _shape: Shape,
    },
}

/// A byte of one value in `Many`, whose other 255 values tell the other shapes apart: with it
/// the set stays 16 bytes (two shapes with a pointer each would need a tag word of their own).
#[derive(Clone, Copy)]
#[repr(u8)]
enum Shape {
    Many,
}

/// An `Arc<[u32]>` of the number of ids and then the ids, kept as its data pointer alone so
/// that a set stays 16 bytes (the `Arc`'s own pointer is two words; the length is read from
/// the first element to put it back together).
struct Few {
    data: NonNull<u32>,
}

// SAFETY: a `Few` is an `Arc<[u32]>`, which is `Send` and `Sync`: its ids are never written
// after it is made, and its count is the `Arc`'s atomic one.
unsafe impl Send for Few {}
// SAFETY: as above.
unsafe impl Sync for Few {}

impl Few {
    fn new(ids: &[u32]) -> Few {
        debug_assert!((2..=FEW_MAX).contains(&ids.len()));
        let n = u32::try_from(ids.len()).expect("at most FEW_MAX ids");
        let arc: Arc<[u32]> = std::iter::once(n).chain(ids.iter().copied()).collect();
        let data = Arc::into_raw(arc).cast::<u32>().cast_mut();
        Few {
            data: NonNull::new(data).expect("an Arc's data is never null"),
        }
    }

    /// The number of ids.
    fn len(&self) -> u32 {
        // SAFETY: `data` points at the first element of a live `Arc<[u32]>` (this `Few` holds
        // one of its counts), which holds the number of ids; nothing writes it.
        unsafe { self.data.as_ptr().read() }
    }

    /// The pointer `Arc::into_raw` gave, put back together.
    fn raw(&self) -> *const [u32] {
        std::ptr::slice_from_raw_parts(self.data.as_ptr(), self.len() as usize + 1)
    }

    fn ids(&self) -> &[u32] {
        // SAFETY: `raw` is the `Arc`'s own pointer, and this `Few` holds one of its counts, so
        // the elements live at least as long as `self`; nothing writes them.
        let all: &[u32] = unsafe { &*self.raw() };
        &all[1..]
    }
}

impl Clone for Few {
    fn clone(&self) -> Few {
        // SAFETY: `raw` came from `Arc::into_raw` and `self` holds a count, so the `Arc` is alive.
        unsafe { Arc::increment_strong_count(self.raw()) };
        Few { data: self.data }
    }
}

impl Drop for Few {
    fn drop(&mut self) {
        // SAFETY: as in `clone`; this gives back the count `self` held, once.
        unsafe { Arc::decrement_strong_count(self.raw()) };
    }
}

const _: () = assert!(std::mem::size_of::<PSet>() == 16);

impl Default for Repr {
    fn default() -> Self {
        Repr::Small(None)
    }
}

impl PSet {
    /// The number of ids.
    pub(crate) fn len(&self) -> usize {
        match &self.0 {
            Repr::Small(one) => usize::from(one.is_some()),
            Repr::Few(few) => few.len() as usize,
            Repr::Many { len, .. } => *len as usize,
        }
    }

    /// Whether the set holds no id.
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self.0, Repr::Small(None))
    }

    /// Whether `id` is in the set.
    pub(crate) fn contains(&self, id: u32) -> bool {
        match &self.0 {
            Repr::Small(one) => *one == Some(id),
            Repr::Few(few) => few.ids().contains(&id),
            Repr::Many { root, .. } => {
                block(root, block_of(id)).is_some_and(|b| b.binary_search(&id).is_ok())
            }
        }
    }

    /// Calls `f` on every id, in no order to rely on.
    pub(crate) fn for_each(&self, f: &mut impl FnMut(u32)) {
        match &self.0 {
            Repr::Small(one) => one.iter().for_each(|&id| f(id)),
            Repr::Few(few) => few.ids().iter().for_each(|&id| f(id)),
            Repr::Many { root, .. } => for_each(root, &mut |_, b: &Block| {
                b.iter().for_each(|&id| f(id));
            }),
        }
    }

    /// Appends every id to `out`: a copy of the array for a few ids.
    #[inline]
    pub(crate) fn extend_into(&self, out: &mut Vec<u32>) {
        match &self.0 {
            Repr::Small(one) => out.extend(one.iter().copied()),
            Repr::Few(few) => out.extend_from_slice(few.ids()),
            Repr::Many { root, .. } => for_each(root, &mut |_, b: &Block| out.extend_from_slice(b)),
        }
    }

    /// The set with `id` added (the same set if it was there).
    pub(crate) fn insert(&self, id: u32) -> PSet {
        match &self.0 {
            Repr::Small(None) => PSet(Repr::Small(Some(id))),
            Repr::Small(Some(one)) if *one == id => self.clone(),
            Repr::Small(Some(one)) => PSet(Repr::Few(Few::new(&[*one, id]))),
            Repr::Few(few) if few.ids().contains(&id) => self.clone(),
            Repr::Few(few) if (few.len() as usize) < FEW_MAX => {
                let mut ids = Vec::with_capacity(few.len() as usize + 1);
                ids.extend_from_slice(few.ids());
                ids.push(id);
                PSet(Repr::Few(Few::new(&ids)))
            }
            Repr::Few(few) => {
                // The first id past `FEW_MAX`: into blocks.
                let mut ids = few.ids().to_vec();
                ids.push(id);
                PSet(Repr::Many {
                    root: blocks(ids),
                    len: few.len() + 1,
                    _shape: Shape::Many,
                })
            }
            Repr::Many { root, len, .. } => {
                let key = block_of(id);
                let ids: Block = match block(root, key) {
                    Some(b) => match b.binary_search(&id) {
                        Ok(_) => return self.clone(),
                        Err(at) => b[..at]
                            .iter()
                            .chain([&id])
                            .chain(&b[at..])
                            .copied()
                            .collect(),
                    },
                    None => Arc::from([id]),
                };
                // A counted copy: a set is shared by every copy of the branch that holds it.
                let (root, _) = insert(root, false, 0, key.hash64(), key, ids, &mut no_moves());
                // Ids are `u32`, so a set holds at most 2^32 of them: as many as `len` can
                // count only if every id were subscribed, some 16 GiB of blocks.
                let len = len.checked_add(1).expect("a set of fewer than 2^32 ids");
                PSet(Repr::Many {
                    root,
                    len,
                    _shape: Shape::Many,
                })
            }
        }
    }

    /// The set without `id`, or `None` if `id` was not there.
    pub(crate) fn remove(&self, id: u32) -> Option<PSet> {
        match &self.0 {
            Repr::Small(one) => (*one == Some(id)).then(PSet::default),
            Repr::Few(few) => {
                let at = few.ids().iter().position(|&x| x == id)?;
                Some(if few.len() == 2 {
                    PSet(Repr::Small(Some(few.ids()[1 - at])))
                } else {
                    let mut ids = few.ids().to_vec();
                    ids.remove(at);
                    PSet(Repr::Few(Few::new(&ids)))
                })
            }
            Repr::Many { root, len, .. } => {
                let key = block_of(id);
                let b = block(root, key)?;
                let at = b.binary_search(&id).ok()?;
                let len = len - 1;
                if len as usize <= FEW_MAX {
                    // Back to `FEW_MAX` ids: an array again.
                    let mut ids = Vec::with_capacity(FEW_MAX);
                    self.for_each(&mut |x| {
                        if x != id {
                            ids.push(x);
                        }
                    });
                    return Some(PSet(Repr::Few(Few::new(&ids))));
                }
                let root = if b.len() == 1 {
                    match remove(root, false, 0, key.hash64(), &key, &mut no_moves()) {
                        Removed::Node(root) => root,
                        Removed::Single(hash, key, ids, _) => single(hash, key, ids, false),
                        // Not with more than `FEW_MAX` ids left in other blocks.
                        Removed::Absent | Removed::Empty => unreachable!("a block of one id"),
                    }
                } else {
                    let ids: Block = b[..at].iter().chain(&b[at + 1..]).copied().collect();
                    insert(root, false, 0, key.hash64(), key, ids, &mut no_moves()).0
                };
                Some(PSet(Repr::Many {
                    root,
                    len,
                    _shape: Shape::Many,
                }))
            }
        }
    }

    /// Checks the invariant above and those of the map of blocks (`PMap::check`).
    pub(crate) fn check(&self) -> Result<(), String> {
        match &self.0 {
            Repr::Small(_) => Ok(()),
            Repr::Few(few) => {
                let ids = few.ids();
                if !(2..=FEW_MAX).contains(&ids.len()) {
                    return Err(format!("an array of {} ids", ids.len()));
                }
                let mut sorted = ids.to_vec();
                sorted.sort_unstable();
                sorted.dedup();
                if sorted.len() != ids.len() {
                    return Err("an id twice in an array".into());
                }
                Ok(())
            }
            Repr::Many { len, .. } if (*len as usize) <= FEW_MAX => {
                Err(format!("a map of {len} ids, which an array holds"))
            }
            Repr::Many { root, len, .. } => {
                let (mut blocks, mut ids, mut bad) = (0, 0, None);
                for_each(root, &mut |&key, b: &Block| {
                    blocks += 1;
                    ids += b.len();
                    if b.is_empty() || !b.windows(2).all(|w| w[0] < w[1]) {
                        bad.get_or_insert(format!("block {key} empty or not sorted"));
                    }
                    if b.iter().any(|&id| block_of(id) != key) {
                        bad.get_or_insert(format!("an id of another block in block {key}"));
                    }
                });
                if let Some(bad) = bad {
                    return Err(bad);
                }
                if ids != *len as usize {
                    return Err(format!("{ids} ids in blocks, {len} counted"));
                }
                check(Some(root), blocks)
            }
        }
    }
}

/// The block numbered `key` ([`block_of`]), if the set has one.
fn block(root: &NodeRef<u32, Block>, key: u32) -> Option<&Block> {
    find(root, key.hash64(), &key).map(|(_, b)| b)
}

/// A map of the blocks of `ids` (more than [`FEW_MAX`], distinct).
fn blocks(mut ids: Vec<u32>) -> NodeRef<u32, Block> {
    ids.sort_unstable();
    let mut root: Option<NodeRef<u32, Block>> = None;
    for run in ids.chunk_by(|a, b| block_of(*a) == block_of(*b)) {
        let (key, b): (u32, Block) = (block_of(run[0]), Arc::from(run));
        root = Some(match root {
            None => single(key.hash64(), key, b, false),
            Some(r) => insert(&r, false, 0, key.hash64(), key, b, &mut no_moves()).0,
        });
    }
    root.expect("more than FEW_MAX ids")
}

/// The hand-overs of an update that moves nothing: sets are always copied by counting.
fn no_moves() -> Moves<u32, Block> {
    Moves::default()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::BTreeSet;

    use super::{PSet, Repr, FEW_MAX};

    /// Fewer under Miri, which runs these some thousand times slower.
    const STEPS: u32 = if cfg!(miri) { 300 } else { 20_000 };
    const LARGE: u32 = if cfg!(miri) { 100 } else { 10_000 };

    /// One step of Marsaglia's xorshift64: the tests' source of ids and choices.
    fn xorshift(x: &mut u64) {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
    }

    fn ids(s: &PSet) -> BTreeSet<u32> {
        let mut out = BTreeSet::new();
        s.for_each(&mut |id| assert!(out.insert(id), "id {id} twice"));
        out
    }

    #[test]
    fn follows_a_btreeset_through_inserts_and_removals() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let (mut set, mut model) = (PSet::default(), BTreeSet::new());
        for step in 0..STEPS {
            xorshift(&mut x);
            // Few ids, so that the set often shrinks back to one and to none.
            let id = (x % 6) as u32;
            let before = set.clone();
            if x & (1 << 40) == 0 {
                let next = set.insert(id);
                assert_eq!(before.contains(id), !model.insert(id));
                set = next;
            } else {
                let next = set.remove(id);
                assert_eq!(next.is_some(), model.remove(&id));
                set = next.unwrap_or(set);
            }
            set.check().unwrap();
            assert_eq!(ids(&set), model, "step {step}");
            assert_eq!(set.len(), model.len());
            assert_eq!(set.is_empty(), model.is_empty());
            assert_eq!(matches!(set.0, Repr::Small(_)), model.len() < 2);
            // The set before is untouched (persistence).
            before.check().unwrap();
        }
    }

    /// Around `FEW_MAX`, where a set passes between an array and a map, both ways, and every
    /// set before an update keeps its ids.
    #[test]
    fn crosses_between_an_array_and_a_map() {
        // Ids below `RANGE`, inserted more often than removed for `PHASE` steps, until the set
        // is past `FEW_MAX` (it tends to 7/8 of `RANGE`, 1,120 ids), then the other way (to
        // 1/8), over and over: four phases.
        const RANGE: u64 = FEW_MAX as u64 * 5 / 4;
        const PHASE: u32 = 4 * RANGE as u32;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let (mut set, mut model) = (PSet::default(), BTreeSet::new());
        let mut kept = Vec::new();
        for step in 0..4 * PHASE {
            xorshift(&mut x);
            let id = (x % RANGE) as u32;
            let growing = (step / PHASE) % 2 == 0;
            // Seven in eight updates insert while growing, one in eight while shrinking.
            let insert = ((x >> 40) % 8 != 0) == growing;
            let next = if insert {
                model.insert(id);
                set.insert(id)
            } else {
                model.remove(&id);
                set.remove(id).unwrap_or_else(|| set.clone())
            };
            if step % 97 == 0 {
                kept.push((set.clone(), ids(&set)));
            }
            set = next;
            set.check().unwrap();
            assert_eq!(ids(&set), model, "step {step}");
            assert_eq!(set.len(), model.len());
            assert_eq!(
                (
                    matches!(set.0, Repr::Small(_)),
                    matches!(set.0, Repr::Few(_))
                ),
                (model.len() < 2, (2..=FEW_MAX).contains(&model.len()))
            );
        }
        assert!(kept.iter().any(|(s, _)| matches!(s.0, Repr::Many { .. })));
        for (s, want) in kept {
            s.check().unwrap();
            assert_eq!(ids(&s), want);
        }
    }

    /// Past `FEW_MAX`, ids far apart (blocks of a few ids each, blocks made and emptied) and
    /// close together, against a model, every set before an update keeping its ids.
    #[test]
    fn blocks_follow_a_btreeset() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let (mut set, mut model) = (PSet::default(), BTreeSet::new());
        let mut kept = Vec::new();
        let range = FEW_MAX as u64 * 2;
        for step in 0..8 * range as u32 {
            xorshift(&mut x);
            // Half the steps spread ids over some 2,000 blocks, half keep them in two.
            let n = (x % range) as u32;
            let id = if step % 2 == 0 {
                n.wrapping_mul(997)
            } else {
                n
            };
            let next = if (x >> 40) % 4 != 0 {
                model.insert(id);
                set.insert(id)
            } else {
                model.remove(&id);
                set.remove(id).unwrap_or_else(|| set.clone())
            };
            if step % 101 == 0 {
                kept.push((set.clone(), ids(&set)));
            }
            set = next;
            set.check().unwrap();
            assert_eq!(ids(&set), model, "step {step}");
            assert_eq!(set.len(), model.len());
            assert!(model.iter().all(|&id| set.contains(id)));
        }
        assert!(matches!(set.0, Repr::Many { .. }));
        for (s, want) in kept {
            s.check().unwrap();
            assert_eq!(ids(&s), want);
        }
    }

    #[test]
    fn a_large_set_shrinks_to_one_inline_id() {
        let mut set = PSet::default();
        for id in 0..LARGE {
            set = set.insert(id);
        }
        set.check().unwrap();
        assert_eq!(set.len(), LARGE as usize);
        for id in 1..LARGE {
            set = set.remove(id).unwrap();
        }
        assert!(matches!(set.0, Repr::Small(Some(0))));
        assert!(set.remove(7).is_none());
        assert!(set.remove(0).unwrap().is_empty());
    }
}
