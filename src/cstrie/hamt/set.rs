//! The subscribers of a branch: a persistent set of ids that keeps a single id inline.
//!
//! Why not a plain map of ids: most patterns have one subscriber (a user's own topic under
//! `users.<id>`, a device's under `sensors/<id>/#`), and a map of one id is a node of its
//! own. Inline, that id costs no allocation when the pattern is subscribed, no free when it
//! goes, and no dependent cache miss when a lookup reaches the branch: in a level of
//! 1,000,000 words, the node would be one more cold line after the word's. Two ids or more
//! live in a map as before, so a set of 1,000,000 subscribers is still updated in O(log n).
//!
//! The set stays 16 bytes, as the map it replaces did (a compile-time check below): a word, its
//! subscribers and its next level still take one 64-byte chunk of the allocator. A larger
//! chunk was measured to slow a wide level down (docs/word-maps-and-pool.md, "Tried for the
//! wide level and not kept").
//!
//! Invariant: `Many` holds two ids or more; a set of one id is always `Small`, so the shape
//! depends only on the ids.

use super::node::NodeRef;
use super::{check, find, for_each, insert, pair, remove, HashKey, Moves, Removed};

/// A persistent set of subscriber ids; every update returns a new set sharing the old one's
/// nodes.
#[derive(Clone, Default)]
pub(crate) struct PSet(Repr);

#[derive(Clone)]
enum Repr {
    /// No id, or one.
    Small(Option<u32>),
    /// Two ids or more, in a map's nodes.
    Many { root: NodeRef<u32, ()>, len: u32 },
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
            Repr::Many { root, .. } => find(root, id.hash64(), &id).is_some(),
        }
    }

    /// Calls `f` on every id, in hash order.
    pub(crate) fn for_each(&self, f: &mut impl FnMut(u32)) {
        match &self.0 {
            Repr::Small(one) => one.iter().for_each(|&id| f(id)),
            Repr::Many { root, .. } => for_each(root, &mut |&id, _| f(id)),
        }
    }

    /// The set with `id` added (the same set if it was there).
    pub(crate) fn insert(&self, id: u32) -> PSet {
        match &self.0 {
            Repr::Small(None) => PSet(Repr::Small(Some(id))),
            Repr::Small(Some(one)) if *one == id => self.clone(),
            Repr::Small(Some(one)) => PSet(Repr::Many {
                root: pair(0, (one.hash64(), *one, ()), (id.hash64(), id, ())),
                len: 2,
            }),
            Repr::Many { root, len } => {
                // A counted copy: a set is shared by every copy of the branch that holds it.
                let (root, added) = insert(root, false, 0, id.hash64(), id, (), &mut no_moves());
                // Ids are `u32`, so a set holds at most 2^32 of them: as many as `len` can
                // count only if every id were subscribed, some 64 GiB of leaves.
                let len = len
                    .checked_add(u32::from(added))
                    .expect("a set of fewer than 2^32 ids");
                PSet(Repr::Many { root, len })
            }
        }
    }

    /// The set without `id`, or `None` if `id` was not there.
    pub(crate) fn remove(&self, id: u32) -> Option<PSet> {
        match &self.0 {
            Repr::Small(one) => (*one == Some(id)).then(PSet::default),
            Repr::Many { root, len } => {
                match remove(root, false, 0, id.hash64(), &id, &mut no_moves()) {
                    Removed::Absent => None,
                    // Not from a set of two ids or more, but an empty set is what it would
                    // mean.
                    Removed::Empty => Some(PSet::default()),
                    Removed::Single(_, one, (), _) => Some(PSet(Repr::Small(Some(one)))),
                    Removed::Node(root) => Some(PSet(Repr::Many { root, len: len - 1 })),
                }
            }
        }
    }

    /// Checks the invariant above and those of the map (`PMap::check`).
    pub(crate) fn check(&self) -> Result<(), String> {
        match &self.0 {
            Repr::Small(_) => Ok(()),
            Repr::Many { len: 0 | 1, .. } => Err("a map of fewer than two ids".into()),
            Repr::Many { root, len } => check(Some(root), *len as usize),
        }
    }
}

/// The hand-overs of an update that moves nothing: sets are always copied by counting.
fn no_moves() -> Moves<u32, ()> {
    Moves::default()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::BTreeSet;

    use super::{PSet, Repr};

    /// Fewer under Miri, which runs these some thousand times slower.
    const STEPS: u32 = if cfg!(miri) { 300 } else { 20_000 };
    const LARGE: u32 = if cfg!(miri) { 100 } else { 10_000 };

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
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
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
