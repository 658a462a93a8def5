//! C-nodes: one level of the subscription trie, after the C-node of Prokopec et al. (PPoPP
//! 2012, section 2, figure 1), as Workiva's matchbox adapts it to topic words.
//!
//! Where topicmatch departs from the paper: the paper's C-node is a 32-slot array indexed by
//! hash bits, holding S-nodes (keys) and I-nodes (deeper levels). Here a level is one pattern
//! word, so a C-node maps each *word* to a [`Branch`]: the subscribers whose pattern ends with
//! that word, and optionally the I-node of the next level. The one-word and many-words
//! wildcards are two extra slots. The word map and the subscriber sets are persistent HAMTs
//! (`hamt.rs`; a set of one id keeps it inline, `hamt/set.rs`), so a C-node is copied in O(1)
//! and updated in O(log n) however wide it is: the paper achieves the same by splitting wide
//! nodes across hash levels, which a word trie cannot do without mixing levels.
//!
//! Copying a C-node for a write still counts every `Arc` it shares except the word map's
//! path: [`CNode::with`] copies that path by moving the untouched slots where the map is
//! unshared (`hamt.rs`, "Moving instead of counting"), so a write into a level of 1,000,000
//! words touches the nodes on its path and not their 32 children each. The hand-over is
//! committed by `gcas` when, and only when, the new C-node replaces the old one.
//!
//! Invariants:
//! 1. A branch in a C-node is never empty: it has a subscriber or a next I-node (possibly
//!    tombed, until someone cleans it).
//! 2. `here` (the subscribers of the empty pattern, AMQP only) is non-empty only at the root.
//! 3. A C-node's word map is the only owner of the map's root in a main node until a copy
//!    shares it (`renew`, a snapshot, a write of another field): moving copies are made only
//!    from an unshared root, and their moves are committed only by the GCAS that replaces the
//!    C-node they were made from, in its one I-node.
//! 4. A level of one word holds it in `solo`, and its word map is then empty: `solo` is
//!    `Some` only while `words` is empty (see [`CNode`]).

use std::borrow::Borrow;
use std::sync::Arc;

use smol_str::SmolStr;

use super::hamt::{HashKey, Moves, PMap, PSet};
use super::inode::INode;
pub(crate) use crate::dialect::Key;

/// A branch: the subscribers of the pattern prefix ending at this key, and the level below.
#[derive(Clone, Default)]
pub(crate) struct Branch {
    pub(crate) subs: PSet,
    pub(crate) next: Option<Arc<INode>>,
}

impl Branch {
    /// Whether the branch holds nothing and can go.
    pub(crate) fn is_empty(&self) -> bool {
        self.subs.is_empty() && self.next.is_none()
    }
}

/// A word and its branch, behind one `Arc`: the word map's key carries the branch, so copying
/// a 32-slot map node on a write touches one reference count per slot, not three (word,
/// subscriber set, next I-node), each on its own cache line.
#[derive(Clone)]
pub(crate) struct Word(Arc<WordBranch>);

pub(crate) struct WordBranch {
    /// Inline up to 23 bytes: a lookup compares the word in the line it reads the branch
    /// from, with no hop to a text of its own (one dependent miss fewer per level).
    word: SmolStr,
    branch: Branch,
    #[cfg(all(test, loom))]
    _live: live_words::Live,
}

impl Word {
    fn new(word: &str, branch: Branch) -> Word {
        Word(Arc::new(WordBranch {
            word: SmolStr::new(word),
            branch,
            #[cfg(all(test, loom))]
            _live: live_words::Live::new(),
        }))
    }
}

/// A count of the words alive on this OS thread, for the loom models: a loom model runs all
/// its threads on one OS thread, and the test harness runs each model on its own, so a word
/// freed too early (or twice) shows as a count below the words a trie still holds.
#[cfg(all(test, loom))]
pub(crate) mod live_words {
    use std::cell::Cell;

    std::thread_local! {
        static LIVE: Cell<isize> = const { Cell::new(0) };
    }

    pub(crate) struct Live(());

    impl Live {
        pub(crate) fn new() -> Live {
            LIVE.with(|n| n.set(n.get() + 1));
            Live(())
        }
    }

    impl Drop for Live {
        fn drop(&mut self) {
            LIVE.with(|n| n.set(n.get() - 1));
        }
    }

    /// The words alive on this thread now.
    pub(crate) fn count() -> isize {
        LIVE.with(Cell::get)
    }
}

/// Words compare by their text only: the branch rides along.
impl PartialEq for Word {
    fn eq(&self, other: &Word) -> bool {
        self.0.word == other.0.word
    }
}

impl Eq for Word {}

impl Borrow<str> for Word {
    fn borrow(&self) -> &str {
        &self.0.word
    }
}

impl HashKey for Word {
    fn hash64(&self) -> u64 {
        self.0.word.as_str().hash64()
    }

    fn prefetch(&self) {
        super::hamt::prefetch(Arc::as_ptr(&self.0));
    }
}

/// The one word of a level that has one, and its branch (see [`CNode`]).
#[derive(Clone)]
pub(crate) struct Solo {
    word: SmolStr,
    branch: Branch,
}

/// The hash a word map files `w` under, for [`CNode::word`].
pub(crate) fn word_hash(w: &str) -> u64 {
    w.hash64()
}

/// The hand-overs of a moving update of a word map (see `hamt.rs`).
pub(crate) type WordMoves = Moves<Word, ()>;

/// One level: branches keyed by word, plus the wildcard slots.
///
/// A level of one word keeps it and its branch in `solo`, inside the C-node, with no word map:
/// most levels below the first hold one word (a topic space is a tree that fans out near its
/// root), and a map of one costs a map node and a shared word of their own, two dependent
/// loads more per level on every lookup that passes. A lookup then reads the I-node and its
/// main node per level, as in the paper. Invariant 4: `solo` is `Some` only while `words` is
/// empty. A second word moves both into a fresh map; a map that shrinks to one word stays a
/// map.
#[derive(Clone, Default)]
pub(crate) struct CNode {
    pub(crate) here: PSet,
    pub(crate) solo: Option<Solo>,
    pub(crate) words: PMap<Word, ()>,
    pub(crate) one: Option<Branch>,
    pub(crate) many: Option<Branch>,
}

impl CNode {
    /// Whether the level holds nothing (and so may be entombed, unless it is the root).
    pub(crate) fn is_empty(&self) -> bool {
        self.here.is_empty()
            && self.solo.is_none()
            && self.words.is_empty()
            && self.one.is_none()
            && self.many.is_none()
    }

    /// The branch of `key`.
    #[inline]
    pub(crate) fn get(&self, key: Key<'_>) -> Option<&Branch> {
        match key {
            Key::Word(w) => self.word(w, &mut None),
            Key::One => self.one.as_ref(),
            Key::Many => self.many.as_ref(),
        }
    }

    /// The branch of the word `w`. Its hash ([`word_hash`]) is computed into `hash`, for a
    /// caller that looks `w` up in several levels, on the first level that has a word map, and
    /// only then. A level held solo, or holding wildcards only, needs none, and most levels
    /// below the first are solo: hashing every topic word up front was a sixth of a lookup of
    /// the seed.
    ///
    /// On x86-64 the walk of the word map runs as a copy compiled for `popcnt` when the CPU
    /// has it (Intel's since 2008, AMD's since 2007; the baseline x86-64 that the wheels are
    /// built for has none): without it a map node's slot index, a count of bits, is a dozen
    /// instructions in a chain, a quarter of this function's time on the seed's hot lookup.
    /// A solo word is compared here, in line: the call to either copy, its feature test and
    /// the registers it saves cost a solo level a third of its instructions.
    #[inline]
    pub(crate) fn word(&self, w: &str, hash: &mut Option<u64>) -> Option<&Branch> {
        if let Some(solo) = &self.solo {
            return crate::bytes::same(solo.word.as_bytes(), w.as_bytes()).then_some(&solo.branch);
        }
        if self.words.is_empty() {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("popcnt") {
            // SAFETY: the CPU has `popcnt`, checked just above (the check reads a flag that
            // std sets once per process).
            return unsafe { self.word_popcnt(w, hash) };
        }
        self.word_portable(w, hash)
    }

    /// [`CNode::word`]'s walk of the word map, for a CPU with `popcnt`.
    ///
    /// # Safety
    ///
    /// The CPU has `popcnt`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    unsafe fn word_popcnt(&self, w: &str, hash: &mut Option<u64>) -> Option<&Branch> {
        self.word_in(w, hash)
    }

    /// [`CNode::word`]'s walk of the word map, for any CPU, kept out of line like the other
    /// copy.
    #[inline(never)]
    fn word_portable(&self, w: &str, hash: &mut Option<u64>) -> Option<&Branch> {
        self.word_in(w, hash)
    }

    #[inline(always)]
    fn word_in(&self, w: &str, hash: &mut Option<u64>) -> Option<&Branch> {
        // [`CNode::word`] has looked at `solo`; a level with a solo word has no map (invariant 4).
        debug_assert!(self.solo.is_none());
        let hash = *hash.get_or_insert_with(|| word_hash(w));
        self.words
            .get_key_value_hashed(hash, w)
            .map(|(k, _)| &k.0.branch)
    }

    /// A copy with `key`'s branch replaced by `branch`, or removed if it is empty (invariant
    /// 1). O(log width). The word map is copied by moving where it can (invariant 3): the
    /// returned [`WordMoves`] must be committed if, and only if, the copy replaces `self` in
    /// its I-node (see [`CSTrie::gcas`](super::CSTrie::gcas)).
    pub(crate) fn with(&self, key: Key<'_>, branch: Branch) -> (CNode, WordMoves) {
        let mut moves = WordMoves::default();
        let keep = !branch.is_empty();
        let mut cn = CNode {
            here: self.here.clone(),
            solo: self.solo.clone(),
            words: PMap::default(),
            one: self.one.clone(),
            many: self.many.clone(),
        };
        cn.words = match key {
            Key::Word(w) if self.words.is_empty() => {
                // One word at most: `solo` (invariant 4).
                let replaces = cn.solo.as_ref().map_or(true, |s| s.word.as_str() == w);
                match (keep, replaces) {
                    (true, true) => {
                        cn.solo = Some(Solo {
                            word: SmolStr::new(w),
                            branch,
                        })
                    }
                    (false, true) => cn.solo = None,
                    // A second word: both go into a map of their own, made fresh, so nothing
                    // is moved from another map.
                    (true, false) => {
                        let solo = cn.solo.take().expect("a word that is not replaced");
                        return (
                            CNode {
                                words: PMap::default()
                                    .insert(Word::new(&solo.word, solo.branch), ())
                                    .insert(Word::new(w, branch), ()),
                                ..cn
                            },
                            moves,
                        );
                    }
                    // Removing a word that is not there.
                    (false, false) => {}
                }
                PMap::default()
            }
            Key::Word(w) if keep => self
                .words
                .insert_moving(Word::new(w, branch), (), &mut moves),
            Key::Word(w) => self
                .words
                .remove_moving(w, &mut moves)
                .unwrap_or_else(|| self.words.clone()),
            Key::One => {
                cn.one = keep.then_some(branch);
                self.words.clone()
            }
            Key::Many => {
                cn.many = keep.then_some(branch);
                self.words.clone()
            }
        };
        (cn, moves)
    }

    /// Calls `f` on every branch with its key.
    pub(crate) fn for_each_branch<'a>(&'a self, f: &mut impl FnMut(Key<'a>, &'a Branch)) {
        if let Some(s) = &self.solo {
            f(Key::Word(s.word.as_str()), &s.branch);
        }
        self.words
            .for_each(&mut |k, _| f(Key::Word(k.0.word.as_str()), &k.0.branch));
        if let Some(b) = &self.one {
            f(Key::One, b);
        }
        if let Some(b) = &self.many {
            f(Key::Many, b);
        }
    }

    /// Calls `f` on the text of every word of the word map (not the solo word), for the loom
    /// models' count of live word objects.
    #[cfg(all(test, loom))]
    pub(crate) fn for_each_map_word(&self, f: &mut impl FnMut(&str)) {
        self.words.for_each(&mut |k, _| f(k.0.word.as_str()));
    }

    /// Consumes the C-node, pushing the child I-nodes that only it held (see `INode`'s drop).
    pub(crate) fn drain_unique_children(self, out: &mut Vec<Arc<INode>>) {
        let CNode {
            solo,
            words,
            one,
            many,
            ..
        } = self;
        out.extend(solo.and_then(|s| s.branch.next));
        words.drain_unique(&mut |k: Word, ()| {
            // A word shared with another map stays with it.
            if let Some(wb) = Arc::into_inner(k.0) {
                out.extend(wb.branch.next);
            }
        });
        out.extend(one.and_then(|b| b.next));
        out.extend(many.and_then(|b| b.next));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn branch(id: u32) -> Branch {
        Branch {
            subs: PSet::default().insert(id),
            next: None,
        }
    }

    /// The words of `cn` with each branch's first subscriber, sorted, and whether the level
    /// is held solo.
    fn shape(cn: &CNode) -> (Vec<(String, bool)>, bool) {
        let mut words = Vec::new();
        cn.for_each_branch(&mut |k, b| {
            if let Key::Word(w) = k {
                words.push((w.to_owned(), b.subs.contains(1)));
            }
        });
        words.sort();
        assert!(cn.solo.is_none() || cn.words.is_empty(), "invariant 4");
        (words, cn.solo.is_some())
    }

    fn with(cn: &CNode, w: &str, b: Branch) -> CNode {
        let (cn, moves) = cn.with(Key::Word(w), b);
        // SAFETY: in the test below every word map is the source of at most one update (the
        // C-nodes copied several times hold no map, so their updates move nothing), and each
        // source stays alive until after its copy is last read, as `commit` requires.
        unsafe { moves.commit() };
        cn
    }

    #[test]
    fn the_portable_walk_and_the_popcnt_walk_find_the_same_branches() {
        // Wide enough for a map three nodes deep, where the slot counts decide the path.
        let mut cn = CNode::default();
        for i in 0..2_000u32 {
            cn = with(&cn, &format!("w{i}"), branch(i));
        }
        for i in 0..2_500u32 {
            let w = format!("w{i}");
            let found = cn.word(&w, &mut None).map(|b| b as *const Branch);
            assert_eq!(found.is_some(), i < 2_000, "{w}");
            assert_eq!(
                cn.word_portable(&w, &mut None).map(|b| b as *const Branch),
                found
            );
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("popcnt") {
                // SAFETY: checked just above.
                let b = unsafe { cn.word_popcnt(&w, &mut None) };
                assert_eq!(b.map(|b| b as *const Branch), found);
            }
            if let Some(b) = cn.word(&w, &mut None) {
                assert!(b.subs.contains(i));
            }
        }
    }

    #[test]
    fn one_word_is_held_solo_and_a_second_makes_a_map_that_stays() {
        let w = |s: &str, one: bool| (s.to_owned(), one);
        let a = with(&CNode::default(), "a", branch(1));
        assert_eq!(shape(&a), (vec![w("a", true)], true));
        assert!(a.word("a", &mut None).is_some());
        assert!(a.word("b", &mut None).is_none());
        // Replacing the solo word's branch keeps it solo.
        let a2 = with(&a, "a", branch(2));
        assert_eq!(shape(&a2), (vec![w("a", false)], true));
        // Removing a word that is not there changes nothing.
        let same = with(&a, "zzz", Branch::default());
        assert_eq!(shape(&same), (vec![w("a", true)], true));
        // A second word: both in a map.
        let ab = with(&a, "b", branch(2));
        assert_eq!(shape(&ab), (vec![w("a", true), w("b", false)], false));
        assert!(ab.word("a", &mut None).is_some_and(|b| b.subs.contains(1)));
        // Shrunk to one, the map stays a map; emptied, the level is empty.
        let b = with(&ab, "a", Branch::default());
        assert_eq!(shape(&b), (vec![w("b", false)], false));
        let empty = with(&b, "b", Branch::default());
        assert!(empty.is_empty());
        // The solo word removed: empty too, and the next word is solo again.
        assert!(with(&a, "a", Branch::default()).is_empty());
        let c = with(&empty, "c", branch(1));
        assert_eq!(shape(&c), (vec![w("c", true)], true));
        // The originals are untouched (C-nodes are persistent).
        assert_eq!(shape(&a), (vec![w("a", true)], true));
        assert_eq!(shape(&ab).0.len(), 2);
    }
}
