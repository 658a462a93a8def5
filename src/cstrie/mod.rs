//! `CSTrie`: the lock-free concurrent subscription trie with O(1) snapshots, derived from the
//! Ctrie of Prokopec, Bronson, Bagwell and Odersky, "Concurrent Tries with Efficient
//! Non-Blocking Snapshots" (PPoPP 2012), the way Workiva's matchbox derives it for topics.
//!
//! | file | paper |
//! |---|---|
//! | `inode.rs` | I-nodes, main nodes, T-nodes, `Gen` (section 2, figure 1; section 3) |
//! | `cnode.rs` | C-nodes, keyed by word rather than hash (section 2) |
//! | `hamt.rs` | the persistent maps inside a C-node (Bagwell's HAMT) |
//! | `gcas.rs` | `GCAS`, `GCAS_Complete`, `GCAS_READ` (section 3, figure 6) |
//! | `snapshot.rs` | `RDCSS_ROOT`, `RDCSS_Complete`, `RDCSS_READ_ROOT`, `readOnlySnapshot` (figures 5, 7) |
//! | `validate.rs` | the invariants of all of the above, checked on demand |
//! | this file | `insert`, `remove`, `clean`/`cleanParent`, `lookup` (figures 2 to 4) |
//!
//! A pattern of n words is a path of n branches: the branch of word k lives in the C-node of
//! level k and holds the subscribers whose pattern ends there and the I-node of level k + 1.
//!
//! - **Insert** walks down, copying each I-node of an older generation into the current one
//!   first (`renew`), and GCASes one C-node: the branch's subscriber set gains the id, or a
//!   fresh chain of I-nodes for the rest of the pattern hangs off the deepest existing branch.
//! - **Remove** GCASes the last C-node without the id; a branch left with nothing goes, a
//!   C-node left with nothing (not the root) becomes a T-node, and the parent is cleaned: its
//!   branch loses the tombed I-node but keeps its own subscribers (the paper's resurrection),
//!   and an emptied parent is entombed in turn, up the path in a loop. Whoever meets a T-node
//!   while writing cleans its parent and restarts, so an insert never lands in a tomb.
//! - **Lookup** advances a set of live branches one topic word at a time and deduplicates it
//!   at every step, as `trie.rs` does, so each (branch, position) is visited once and `#`
//!   never backtracks. A lookup reads many I-nodes, so to be linearizable as a whole it
//!   validates: it re-reads every I-node it read (a double collect; committed main nodes are
//!   never reused while pinned, so equal means unchanged) and retries on a change. After
//!   [`LOOKUP_ATTEMPTS`] failures it reads a read-only snapshot instead, which always succeeds.
//!
//! Where topicmatch departs from the paper beyond the node layout: retries are loops, never
//! recursion, and nothing recurses with the pattern's length (matchbox's recursive remove
//! overflows its stack; see the regression test). An I-node of an older generation is renewed
//! alone, by one GCAS on its parent, rather than by renewing every child of the parent's
//! C-node (`CNode.renewed`): with 1,000,000 siblings the paper's way would cost O(siblings).
//! Lookups change nothing of their own: they only help finish a GCAS or RDCSS left pending by
//! a writer (as every reader must), never clean tombs, so they work the same on read-only
//! snapshots.
//!
//! Reclamation is crossbeam-epoch: every operation pins, main nodes and root nodes are retired
//! by the one thread that unlinks them, and I-nodes are shared by `Arc` between generations and
//! snapshots (see `inode.rs`). The main nodes a write retires are freed by the writing thread
//! once the epoch releases them, not by whichever reader collects them (`reclaim.rs`). Inside
//! a C-node, an unshared word map is updated by moving slots from the old map's path to the
//! new one rather than counting them (`hamt.rs`, "Moving instead of counting"): a write into a
//! level of 1,000,000 words then touches the nodes on its path, not their children.
//!
//! Not linearizable as a whole: `remove_subscriber` (a snapshot, then one unsubscribe per
//! pattern found) and `len` while writes are in flight (a counter updated after each write).
#![allow(unsafe_code)]

mod cnode;
mod gcas;
mod hamt;
pub(crate) use hamt::{prefetch, WordsHasher};
mod inode;
mod reclaim;
mod sharing;
mod snapshot;
mod validate;

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::{Arc, OnceLock};

use crossbeam_epoch::{self as epoch, Atomic, Guard, Shared};
use smallvec::SmallVec;

use self::cnode::{Branch, CNode, Key, WordMoves};
/// The memory of the word maps' and subscriber sets' nodes, which come from a pool of their
/// own (`hamt/pool.rs`). Under loom they come from the global heap, and the pool stays empty.
pub use self::hamt::pool::{stats as node_memory, NodeMemory};
use self::hamt::PSet;
use self::inode::{Gen, INode, Main, MainNode};
pub use self::reclaim::free_retired;
use self::reclaim::Writing;
use self::sharing::Sharing;
use self::snapshot::RootNode;
pub use self::validate::Quiescence;
use crate::dialect::{AsKey, Dialect, Pattern, Topic};
use crate::error::Result;
use crate::matcher::{dedup_from, size_fresh, Matcher, SubscriberId};
use crate::sync::AtomicUsize;

/// Validated lookups tried before a lookup falls back to a snapshot.
pub const LOOKUP_ATTEMPTS: usize = 4;

/// The lock-free concurrent subscription trie.
///
/// A trie made by [`CSTrie::snapshot`] is read-only: [`is_read_only`](Self::is_read_only) says
/// so, and its writes do nothing and report it: `subscribe` and `unsubscribe` return `false`,
/// `remove_subscriber` returns 0. Check `is_read_only` first where "nothing to do" and "not
/// allowed" must differ (the Python binding raises `TypeError`).
pub struct CSTrie {
    dialect: Dialect,
    root: Atomic<RootNode>,
    read_only: bool,
    /// Pairs in a live trie, updated after each successful write.
    len: AtomicUsize,
    /// Pairs in a read-only trie, counted once on demand.
    frozen_len: OnceLock<usize>,
    /// Which subscribers hold two patterns or more, for a live trie's lookups (`sharing.rs`).
    sharing: Sharing,
    /// For a read-only trie: whether no subscriber held two patterns when it was taken, so
    /// its lookups need no deduplication.
    frozen_unshared: bool,
    #[cfg(loom)]
    collector: crossbeam_epoch::Collector,
}

impl std::fmt::Debug for CSTrie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CSTrie")
            .field("dialect", &self.dialect)
            .field("read_only", &self.read_only)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl CSTrie {
    /// An empty trie for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let root = INode::new(Gen::fresh(), Main::C(CNode::default()));
        CSTrie {
            dialect,
            root: Atomic::new(RootNode::INode(Arc::new(root))),
            read_only: false,
            len: AtomicUsize::new(0),
            frozen_len: OnceLock::new(),
            sharing: Sharing::default(),
            frozen_unshared: false,
            #[cfg(loom)]
            collector: crossbeam_epoch::Collector::new(),
        }
    }

    /// A read-only trie frozen at this instant, in O(1): later writes to `self` do not show in
    /// it. Writes after a snapshot copy each I-node on their path once (lazily), so they cost
    /// more until the paths are renewed.
    pub fn snapshot(&self) -> CSTrie {
        self.take_snapshot()
    }

    /// Whether this trie is a read-only snapshot.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// A read-only trie of `root`; `unshared` if no subscriber held two patterns at the
    /// instant `root` was frozen.
    fn share_read_only(&self, root: Arc<INode>, unshared: bool) -> CSTrie {
        CSTrie {
            dialect: self.dialect,
            root: Atomic::new(RootNode::INode(root)),
            read_only: true,
            len: AtomicUsize::new(0),
            frozen_len: OnceLock::new(),
            sharing: Sharing::default(),
            frozen_unshared: unshared,
            #[cfg(loom)]
            collector: self.collector.clone(),
        }
    }

    #[cfg(not(loom))]
    fn pin(&self) -> Guard {
        epoch::pin()
    }

    /// [`pin`](Self::pin) for a write: the [`Writing`] it returns keeps the main nodes the
    /// write retires for this thread to free, and flushes them every few writes (`reclaim.rs`).
    /// Under loom it is the guard alone: the models count on the collector's own schedule and
    /// on [`collect_garbage`](Self::collect_garbage).
    fn pin_for_write(&self) -> Writing {
        Writing::start(self.pin())
    }

    /// Under loom each trie family carries a collector made inside the model
    /// ([`crate::sync::pin_on`]).
    #[cfg(loom)]
    fn pin(&self) -> Guard {
        crate::sync::pin_on(&self.collector)
    }

    /// Pins and flushes until the garbage retired so far is freed, for the loom models: each
    /// flush tries to advance the epoch and frees what is two epochs old, so the fourth frees
    /// what was retired before the first. Call it with no other thread pinned.
    #[cfg(all(test, loom))]
    fn collect_garbage(&self) {
        for _ in 0..4 {
            self.pin().flush();
        }
    }

    /// The C-node of a main node, or `None` for a T-node.
    fn cnode<'g>(m: Shared<'g, MainNode>) -> Option<&'g CNode> {
        // SAFETY: `m` was read under the guard of lifetime `'g` from a reachable I-node; main
        // nodes are retired only after being unlinked, and freed an epoch later.
        match &unsafe { m.deref() }.main {
            Main::C(cn) => Some(cn),
            Main::T => None,
        }
    }

    /// Copies the I-node below `parent`'s branch `key` into generation `gen` and GCASes the
    /// copy into that branch (the paper's `copyToGen`, one child at a time, where the paper
    /// renews every child of the C-node). `true` if the GCAS committed.
    fn renew<'g>(
        &self,
        parent: &'g INode,
        pm: Shared<'g, MainNode>,
        key: Key<'_>,
        gen: Gen,
        guard: &'g Writing,
    ) -> bool {
        let cn = Self::cnode(pm).expect("renewing below a C-node");
        let branch = cn.get(key).expect("renewing an existing branch");
        let child = branch.next.as_deref().expect("renewing an existing I-node");
        let cm = self.gcas_read(child, guard);
        // SAFETY: read under `guard`; see `cnode`.
        let main = unsafe { cm.deref() }.main.clone();
        let copy = Branch {
            subs: branch.subs.clone(),
            next: Some(Arc::new(INode::new(gen, main))),
        };
        let (ncn, moves) = cn.with(key, copy);
        self.gcas(parent, pm, MainNode::new(Main::C(ncn)), moves, guard)
    }

    /// The chain of fresh I-nodes for `rest` (at least one key), whose last branch holds `id`.
    /// Built bottom-up in a loop, so a 100,000-word pattern costs no stack.
    fn chain<K: AsKey>(rest: &[K], id: SubscriberId, gen: Gen) -> Arc<INode> {
        let (last, above) = rest.split_last().expect("a non-empty rest");
        let leaf = Branch {
            subs: PSet::default().insert(id),
            next: None,
        };
        let mut cn = CNode::default().with(last.key(), leaf).0;
        for key in above.iter().rev() {
            let inode = Arc::new(INode::new(gen, Main::C(cn)));
            let branch = Branch {
                subs: PSet::default(),
                next: Some(inode),
            };
            cn = CNode::default().with(key.key(), branch).0;
        }
        Arc::new(INode::new(gen, Main::C(cn)))
    }

    /// insert (figure 2), as a loop: `true` if the pair is new.
    ///
    /// The pair is counted in `sharing` before the first attempt to publish it, and given
    /// back if a later attempt finds it there after all (`sharing.rs`).
    fn insert<K: AsKey>(&self, keys: &[K], id: SubscriberId) -> bool {
        let guard = &self.pin_for_write();
        // Whether `sharing` counts the pair yet.
        let mut counted = false;
        'restart: loop {
            let root = self.rdcss_read_root(false, guard);
            let startgen = root.gen;
            // The parent of `i` (its key in it is `keys[depth - 1]`): only a tomb asks for it,
            // so the walk keeps the pointer alone.
            let (mut i, m, mut parent, mut depth) = self.descend(root, keys, guard);
            // The main node the descent read last, used once: the loop reads afresh after.
            let mut read = Some(m);
            loop {
                let m = read.take().unwrap_or_else(|| self.gcas_read(i, guard));
                let Some(cn) = Self::cnode(m) else {
                    // 0) a tomb: clean the parent, then start over
                    if let Some(p) = parent {
                        self.clean(p, keys[depth - 1].key(), i, depth == 1, guard);
                    }
                    continue 'restart;
                };
                if keys.is_empty() {
                    // 1) the empty pattern, at the root
                    if cn.here.contains(id) {
                        return self.found_present(id, counted);
                    }
                    let mut new = cn.clone();
                    new.here = cn.here.insert(id);
                    self.count_pair(id, &mut counted);
                    if self.gcas(
                        i,
                        m,
                        MainNode::new(Main::C(new)),
                        WordMoves::default(),
                        guard,
                    ) {
                        return true;
                    }
                    continue 'restart;
                }
                let key = keys[depth].key();
                let branch = cn.get(key);
                if depth + 1 == keys.len() {
                    // 2) the last word: add `id` to its branch. A pair already there is told
                    // before the branch is copied: the copy counts a reference on the I-node
                    // below, whose line every lookup through it reads.
                    if branch.is_some_and(|b| b.subs.contains(id)) {
                        return self.found_present(id, counted);
                    }
                    let b = branch.cloned().unwrap_or_default();
                    let nb = Branch {
                        subs: b.subs.insert(id),
                        next: b.next,
                    };
                    let (ncn, moves) = cn.with(key, nb);
                    self.count_pair(id, &mut counted);
                    if self.gcas(i, m, MainNode::new(Main::C(ncn)), moves, guard) {
                        return true;
                    }
                    continue 'restart;
                }
                match branch.and_then(|b| b.next.as_deref().map(|x| (b, x))) {
                    // 3a) descend
                    Some((_, x)) if x.gen == startgen => {
                        parent = Some(i);
                        i = x;
                        depth += 1;
                    }
                    // 3b) an older generation's I-node: copy it into ours, then read `i` again
                    Some(_) => {
                        if !self.renew(i, m, key, startgen, guard) {
                            continue 'restart;
                        }
                    }
                    // 3c) no level below: hang a fresh chain for the rest of the pattern
                    None => {
                        let nb = Branch {
                            subs: branch.map(|b| b.subs.clone()).unwrap_or_default(),
                            next: Some(Self::chain(&keys[depth + 1..], id, startgen)),
                        };
                        let (ncn, moves) = cn.with(key, nb);
                        self.count_pair(id, &mut counted);
                        if self.gcas(i, m, MainNode::new(Main::C(ncn)), moves, guard) {
                            return true;
                        }
                        continue 'restart;
                    }
                }
            }
        }
    }

    /// The walk down a write's path from `root` while it meets nothing but C-nodes of its
    /// generation with a level below for the next key: the I-node of the last key's level,
    /// or of the first level where `insert` has more to do, with its main node as read there,
    /// its parent and its depth. Each step is `insert`'s case 3a, with the same reads.
    ///
    /// Why a loop of its own: the same steps inside `insert`'s loop, among its other cases,
    /// made a subscribe of a pair already there a fifth slower than `holds`' walk over the
    /// same levels, with as many instructions (the word map's loads waited longer there).
    #[inline]
    #[allow(clippy::type_complexity)]
    fn descend<'g, K: AsKey>(
        &self,
        root: &'g INode,
        keys: &[K],
        guard: &'g Guard,
    ) -> (&'g INode, Shared<'g, MainNode>, Option<&'g INode>, usize) {
        let (mut i, mut parent) = (root, None);
        let mut depth = 0;
        loop {
            let m = self.gcas_read(i, guard);
            let next = Self::cnode(m)
                .filter(|_| depth + 1 < keys.len())
                .and_then(|cn| cn.get(keys[depth].key()))
                .and_then(|b| b.next.as_deref())
                .filter(|x| x.gen == root.gen);
            let Some(x) = next else {
                return (i, m, parent, depth);
            };
            parent = Some(i);
            i = x;
            depth += 1;
        }
    }

    /// Counts a pair of `id` in `sharing` before its first attempt to be published.
    fn count_pair(&self, id: SubscriberId, counted: &mut bool) {
        if !std::mem::replace(counted, true) {
            self.sharing.add(id);
        }
    }

    /// `insert`'s answer for a pair already there: `false`, with the count it took given back.
    fn found_present(&self, id: SubscriberId, counted: bool) -> bool {
        if counted {
            self.sharing.remove(id);
        }
        false
    }

    /// remove (figure 3), as a loop: `true` if the pair was there.
    fn remove<K: AsKey>(&self, keys: &[K], id: SubscriberId) -> bool {
        let guard = &self.pin_for_write();
        // The I-nodes above the current one, with the key taken out of each.
        let mut path: Vec<(&INode, Key<'_>)> = Vec::new();
        'restart: loop {
            path.clear();
            let root = self.rdcss_read_root(false, guard);
            let startgen = root.gen;
            let mut i = root;
            loop {
                let depth = path.len();
                let m = self.gcas_read(i, guard);
                let Some(cn) = Self::cnode(m) else {
                    // 0) a tomb: clean the parent, then start over
                    if let Some(&(p, key)) = path.last() {
                        self.clean(p, key, i, path.len() == 1, guard);
                    }
                    continue 'restart;
                };
                if keys.is_empty() {
                    // 1) the empty pattern, at the root
                    let Some(here) = cn.here.remove(id) else {
                        return false;
                    };
                    let mut new = cn.clone();
                    new.here = here;
                    if self.gcas(
                        i,
                        m,
                        MainNode::new(Main::C(new)),
                        WordMoves::default(),
                        guard,
                    ) {
                        // Counted once the pair is gone (`sharing.rs`).
                        self.sharing.remove(id);
                        return true;
                    }
                    continue 'restart;
                }
                let key = keys[depth].key();
                let Some(branch) = cn.get(key) else {
                    return false;
                };
                if depth + 1 < keys.len() {
                    let Some(x) = branch.next.as_deref() else {
                        return false;
                    };
                    if x.gen == startgen {
                        // 2a) descend
                        path.push((i, key));
                        i = x;
                    } else if !self.renew(i, m, key, startgen, guard) {
                        // 2b) renewal failed: start over
                        continue 'restart;
                    }
                    continue;
                }
                // 3) the last word: take `id` out of its branch
                let Some(subs) = branch.subs.remove(id) else {
                    return false;
                };
                // A tombed level below goes too (compression), keeping the branch's subscribers.
                let next = branch
                    .next
                    .clone()
                    .filter(|x| Self::cnode(self.gcas_read(x, guard)).is_some());
                let (ncn, moves) = cn.with(key, Branch { subs, next });
                let entomb = !path.is_empty() && ncn.is_empty();
                // A tomb holds no map: nothing of the source is handed over.
                let (new, moves) = if entomb {
                    (Main::T, WordMoves::default())
                } else {
                    (Main::C(ncn), moves)
                };
                if !self.gcas(i, m, MainNode::new(new), moves, guard) {
                    continue 'restart;
                }
                // Counted once the pair is gone (`sharing.rs`).
                self.sharing.remove(id);
                if entomb {
                    // 4) cleanParent up the path while levels empty out
                    let mut tombed = i;
                    while let Some((p, key)) = path.pop() {
                        if !self.clean(p, key, tombed, path.is_empty(), guard) {
                            break;
                        }
                        tombed = p;
                    }
                }
                return true;
            }
        }
    }

    /// Whether `id` is subscribed to the pattern with these keys: the paper's lookup of one
    /// key, a walk down one path, linearizable at the read of the last C-node. A T-node on
    /// the path is a level emptied by a remove, so the pair is not there.
    fn holds(&self, keys: &[Key<'_>], id: SubscriberId) -> bool {
        let guard = &self.pin();
        let mut i = self.rdcss_read_root(false, guard);
        let Some((last, above)) = keys.split_last() else {
            return Self::cnode(self.gcas_read(i, guard)).is_some_and(|cn| cn.here.contains(id));
        };
        for &key in above {
            let next = Self::cnode(self.gcas_read(i, guard))
                .and_then(|cn| cn.get(key))
                .and_then(|b| b.next.as_deref());
            match next {
                Some(x) => i = x,
                None => return false,
            }
        }
        Self::cnode(self.gcas_read(i, guard))
            .and_then(|cn| cn.get(*last))
            .is_some_and(|b| b.subs.contains(id))
    }

    /// clean / cleanParent: cuts the tombed I-node `tombed` out of `parent`'s branch `key`,
    /// keeping the branch's subscribers; entombs `parent` if that leaves it empty and it is not
    /// the root. Returns whether `parent` was entombed, so the caller may clean the next level.
    /// Retries only while the generation holds, as the paper's cleanParent does.
    fn clean<'g>(
        &self,
        parent: &'g INode,
        key: Key<'_>,
        tombed: &INode,
        parent_is_root: bool,
        guard: &'g Writing,
    ) -> bool {
        loop {
            let pm = self.gcas_read(parent, guard);
            let Some(cn) = Self::cnode(pm) else {
                // Already a tomb: whoever meets it cleans its own parent.
                return false;
            };
            let Some(b) = cn.get(key) else {
                return false;
            };
            if !b.next.as_deref().is_some_and(|x| std::ptr::eq(x, tombed)) {
                // Someone else cleaned it already.
                return false;
            }
            let (ncn, moves) = cn.with(
                key,
                Branch {
                    subs: b.subs.clone(),
                    next: None,
                },
            );
            let entomb = !parent_is_root && ncn.is_empty();
            let (new, moves) = if entomb {
                (Main::T, WordMoves::default())
            } else {
                (Main::C(ncn), moves)
            };
            if self.gcas(parent, pm, MainNode::new(new), moves, guard) {
                return entomb;
            }
            if self.rdcss_read_root(false, guard).gen != parent.gen {
                return false;
            }
        }
    }
}

/// One multiply for keys that are already well spread but for their low bits: the addresses
/// of live prefixes ([`Seen`], aligned to 8) and subscriber ids (`sharing.rs`, small and
/// dense).
#[derive(Default)]
pub(crate) struct MulHasher(u64);

impl MulHasher {
    const SPREAD: u64 = 0x9e37_79b9_7f4a_7c15;
}

impl Hasher for MulHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only addresses and ids are hashed")
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64 >> 3).wrapping_mul(Self::SPREAD);
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(Self::SPREAD);
    }
}

/// Every I-node a lookup read, with the committed main node it saw, in the order of the walk:
/// the list the double collect re-reads.
///
/// Each live prefix reads the I-node below it once, when it is made, and keeps the C-node it
/// saw ([`Live::next`]), so the walk never asks whether it read an I-node before. An I-node
/// reached twice in one attempt (only repeated prefixes can, before they are deduplicated) is
/// read and listed twice; if the two reads differ, the earlier no longer holds at the
/// double collect, and the attempt retries.
///
/// The order of reads is the order of the walk, never an order of addresses: a loom model
/// replays each execution and requires every replay to make the same atomic operations in the
/// same order, and allocation addresses differ from one execution to the next.
///
/// Inline up to 32 reads, as the sets of live prefixes are up to 16 ([`Lives`]): a lookup of a
/// few live prefixes allocates nothing but its answer.
type Reads<'g> = SmallVec<[(&'g INode, Shared<'g, MainNode>); 32]>;

/// A set of live prefixes, in the walk's order. Inline up to 16, as the `Trie`'s: at 8 (and 16
/// reads), `mixed` 100k's lookups spilled three times each on average, to the heap and then
/// larger on it, 8 % of their instructions.
type Lives<'g> = SmallVec<[Live<'g>; 16]>;

/// Up to this many entries, `dedup_live` searches linearly (at 32, a few hundred compares of
/// words cost less than hashing them into a set that grows from empty).
const SCAN_MAX: usize = 32;

/// Addresses already in the next set of live prefixes, for an order-keeping deduplication.
type Seen = HashSet<usize, BuildHasherDefault<MulHasher>>;

/// Removes repeated prefixes from `live`, keeping the first of each in place (see `Reads` for
/// why the order must stay). Linear for the short sets most lookups carry.
fn dedup_live(live: &mut Lives<'_>, seen: &mut Seen) {
    if live.len() <= 1 {
        // Most levels of most lookups carry one prefix: nothing to compare.
    } else if live.len() <= SCAN_MAX {
        let mut kept = 0;
        for i in 0..live.len() {
            let id = live[i].id;
            if !live[..kept].iter().any(|q| q.id == id) {
                // Copied only when something before it went: a `Live` is four words, and
                // copying each onto itself stalls on the stores that just wrote it.
                if kept != i {
                    live[kept] = live[i];
                }
                kept += 1;
            }
        }
        live.truncate(kept);
    } else {
        seen.clear();
        seen.reserve(live.len());
        live.retain(|p| seen.insert(p.id));
    }
}

/// What a lookup attempt gathers at the end of the topic.
enum Gather<'a> {
    /// Every subscriber of every live prefix.
    Ids(&'a mut Vec<SubscriberId>),
    /// Whether any live prefix has a subscriber.
    Any(&'a mut bool),
}

/// A live pattern prefix during a lookup.
#[derive(Clone, Copy)]
struct Live<'g> {
    /// Identity for deduplication: the branch's address (stable while pinned), or the root
    /// I-node's for the empty prefix.
    id: usize,
    subs: &'g PSet,
    /// The level below the prefix, as this attempt read it when the prefix was made; `None`
    /// where there is none (no I-node, a tomb, or not needed: see [`CSTrie::live`]).
    next: Option<&'g CNode>,
    /// Whether the prefix ends with the many-words wildcard, which absorbs further words.
    many: bool,
}

impl CSTrie {
    /// The C-node of `x` as this attempt sees it, listed in `reads`; `None` for a tomb, which
    /// holds nothing.
    fn read<'g>(&self, x: &'g INode, reads: &mut Reads<'g>, guard: &'g Guard) -> Option<&'g CNode> {
        let m = self.gcas_read(x, guard);
        reads.push((x, m));
        Self::cnode(m)
    }

    /// The live prefix that ends with branch `b`. Its level below is read now, once, unless
    /// `read_next` is false (the topic's last word in a dialect whose many-words wildcard
    /// needs a word: nothing below the prefix can match any more).
    fn live<'g>(
        &self,
        b: &'g Branch,
        many: bool,
        read_next: bool,
        reads: &mut Reads<'g>,
        guard: &'g Guard,
    ) -> Live<'g> {
        let next = match (read_next, b.next.as_deref()) {
            (true, Some(x)) => self.read(x, reads, guard),
            _ => None,
        };
        Live {
            id: b as *const Branch as usize,
            subs: &b.subs,
            next,
            many,
        }
    }

    /// Adds `p` to `live`, and the chain of many-words branches below it when `#` may match
    /// nothing (`a.#.#` reaches both wildcards without reading a word); `true` if it added
    /// such a branch.
    #[inline(always)]
    fn enter<'g>(
        &self,
        mut p: Live<'g>,
        zero_or_more: bool,
        live: &mut Lives<'g>,
        reads: &mut Reads<'g>,
        guard: &'g Guard,
    ) -> bool {
        live.push(p);
        if !zero_or_more {
            return false;
        }
        let mut many_words = false;
        while let Some(many) = p.next.and_then(|cn| cn.many.as_ref()) {
            p = self.live(many, true, true, reads, guard);
            live.push(p);
            many_words = true;
        }
        many_words
    }

    /// One lookup attempt from `root`: the subscribers of every live prefix at the end of the
    /// topic, possibly repeated, go to `out`; or, for `has_interest`, only whether there is
    /// one. Follows `Trie::collect` step by step.
    fn collect<'g>(
        &self,
        root: &'g INode,
        topic: &Topic<'_>,
        reads: &mut Reads<'g>,
        out: &mut Gather<'_>,
        guard: &'g Guard,
    ) {
        let zero_or_more = self.dialect.many_min() == 0;
        let Some(root_cn) = self.read(root, reads, guard) else {
            return;
        };
        let start = Live {
            id: root as *const INode as usize,
            subs: &root_cn.here,
            next: Some(root_cn),
            many: false,
        };
        // Two buffers whose roles swap at each word by swapping the references: swapping the
        // vectors themselves copies both inline arrays per word (2 x 264 bytes when they held
        // 8), which a profile of the seed lookup had at a fifth of its time.
        let (mut live_buf, mut next_buf) = (Lives::new(), Lives::new());
        let (mut live, mut next) = (&mut live_buf, &mut next_buf);
        let mut seen = Seen::default();
        // Whether a many-words wildcard has been live: until one is, every live prefix was
        // reached by one reading of the words (its pattern has no `#` to take more or fewer),
        // from one parent by one edge, so no level holds one twice and none is deduplicated.
        // (On the OpenAMQ experiment, levels of up to 32 `*` prefixes, the bare `count_many`
        // went from 97-101M to 104-113M matches/s.)
        let mut may_repeat = false;
        // At the root, a `$` topic takes no wildcard edge.
        if topic.is_dollar() {
            live.push(start);
        } else {
            may_repeat = self.enter(start, zero_or_more, live, reads, guard);
        }
        let words = topic.words();
        for (pos, word) in words.iter().enumerate() {
            next.clear();
            let wildcards_allowed = !(pos == 0 && topic.is_dollar());
            // Past the last word only a zero-words `#` below a prefix can still match.
            let read_next = zero_or_more || pos + 1 < words.len();
            // Hashed once for every level it is looked up in, and only where a level has a
            // word map to look it up in.
            let mut hash = None;
            // Each prefix is read field by field where it lies, not copied out whole: the
            // copy loaded it 16 bytes at a time, across the 8-byte stores that had just
            // written it, and a load that spans two stores waits for both to reach the cache
            // (a quarter of this function's time on the seed's hot lookup).
            for p in live.iter() {
                if p.many {
                    // A many-words wildcard absorbs this word too.
                    next.push(*p);
                    may_repeat = true;
                }
                let Some(cn) = p.next else {
                    continue;
                };
                if let Some(b) = cn.word(word, &mut hash) {
                    let b = self.live(b, false, read_next, reads, guard);
                    may_repeat |= self.enter(b, zero_or_more, next, reads, guard);
                }
                if wildcards_allowed {
                    if let Some(b) = &cn.one {
                        let b = self.live(b, false, read_next, reads, guard);
                        may_repeat |= self.enter(b, zero_or_more, next, reads, guard);
                    }
                    if let (false, Some(b)) = (zero_or_more, &cn.many) {
                        // NATS `>`: the wildcard takes this word as its first.
                        next.push(self.live(b, true, read_next, reads, guard));
                        may_repeat = true;
                    }
                }
            }
            if may_repeat {
                // Deduplicate keeping the walk's order (see `Reads` for why not by sorting).
                dedup_live(next, &mut seen);
            }
            std::mem::swap(&mut live, &mut next);
            if live.is_empty() {
                return;
            }
        }
        match out {
            Gather::Ids(out) => {
                size_fresh(out, || live.iter().map(|p| p.subs.len()).sum());
                for p in live.iter() {
                    p.subs.extend_into(out);
                }
            }
            // The walk is the same, so the same reads are checked; what a topic of many
            // subscribers saves is gathering them (and deduplicating them after).
            Gather::Any(found) => **found = live.iter().any(|p| !p.subs.is_empty()),
        }
    }

    /// The double collect: whether every I-node read (and the root) is unchanged.
    ///
    /// Each `m` was read committed, and a committed main node stays committed (its `prev` is
    /// never set again, gcas.rs), so an I-node whose main node is still `m` is unchanged
    /// without `gcas_read`'s second load. One whose main node is a pending GCAS counts as
    /// changed, even if that GCAS would roll back to `m`: a retry too many, never a wrong
    /// answer.
    fn unchanged<'g>(&self, root: &'g INode, reads: &Reads<'g>, guard: &'g Guard) -> bool {
        std::ptr::eq(self.rdcss_read_root(false, guard), root)
            && reads.iter().all(|&(x, m)| x.main.load(Acquire, guard) == m)
    }

    /// The pattern word a branch key stands for, in this trie's dialect.
    fn key_text(&self, key: Key<'_>) -> String {
        match key {
            Key::Word(w) => w.to_owned(),
            Key::One => self.dialect.one_word().to_owned(),
            Key::Many => self.dialect.many_words().to_owned(),
        }
    }

    /// Walks every branch of a read-only trie with an explicit stack, calling `f` with each
    /// pattern text and subscriber set.
    fn for_each_pattern(&self, f: &mut impl FnMut(&str, &PSet)) {
        debug_assert!(self.read_only);
        let guard = &self.pin();
        let root = self.rdcss_read_root(false, guard);
        let Some(cn) = Self::cnode(self.gcas_read(root, guard)) else {
            return;
        };
        if !cn.here.is_empty() {
            f("", &cn.here);
        }
        let word = |key| self.key_text(key);
        // (depth, word, branch): `path` holds the words above the branch being visited.
        let mut stack: Vec<(usize, String, &Branch)> = Vec::new();
        let mut path: Vec<String> = Vec::new();
        cn.for_each_branch(&mut |k, b| stack.push((0, word(k), b)));
        while let Some((depth, w, b)) = stack.pop() {
            path.truncate(depth);
            path.push(w);
            if !b.subs.is_empty() {
                f(&self.dialect.join(&path), &b.subs);
            }
            if let Some(cn) = b
                .next
                .as_deref()
                .and_then(|x| Self::cnode(self.gcas_read(x, guard)))
            {
                cn.for_each_branch(&mut |k, b| stack.push((depth + 1, word(k), b)));
            }
        }
    }

    /// Walks `self` if it is read-only, else a fresh snapshot of it.
    fn for_each_frozen_pattern(&self, f: &mut impl FnMut(&str, &PSet)) {
        if self.read_only {
            self.for_each_pattern(f);
        } else {
            self.snapshot().for_each_pattern(f);
        }
    }
}

impl Matcher for CSTrie {
    fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Adds the pair; `false` if it was there, or if this trie is read-only.
    fn subscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        assert_eq!(
            pattern.dialect(),
            self.dialect,
            "pattern of another dialect"
        );
        if self.read_only || !self.insert(pattern.tokens(), id) {
            return false;
        }
        self.len.fetch_add(1, Relaxed);
        true
    }

    /// Removes the pair; `false` if it was not there, or if this trie is read-only.
    fn unsubscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        assert_eq!(
            pattern.dialect(),
            self.dialect,
            "pattern of another dialect"
        );
        if self.read_only || !self.remove(pattern.tokens(), id) {
            return false;
        }
        self.len.fetch_sub(1, Relaxed);
        true
    }

    fn subscribe_str(&self, pattern: &str, id: SubscriberId) -> Result<bool> {
        let added = self
            .dialect
            .with_pattern_keys(pattern, |keys| !self.read_only && self.insert(keys, id))?;
        if added {
            self.len.fetch_add(1, Relaxed);
        }
        Ok(added)
    }

    fn unsubscribe_str(&self, pattern: &str, id: SubscriberId) -> Result<bool> {
        let removed = self
            .dialect
            .with_pattern_keys(pattern, |keys| !self.read_only && self.remove(keys, id))?;
        if removed {
            self.len.fetch_sub(1, Relaxed);
        }
        Ok(removed)
    }

    fn contains(&self, pattern: &str, id: SubscriberId) -> bool {
        self.dialect
            .with_pattern_keys(pattern, |keys| self.holds(keys, id))
            .unwrap_or(false)
    }

    fn lookup_into(&self, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        assert_eq!(topic.dialect(), self.dialect, "topic of another dialect");
        let start = out.len();
        {
            let guard = &self.pin();
            let mut reads = Reads::new();
            let attempts = if self.read_only { 1 } else { LOOKUP_ATTEMPTS };
            for _ in 0..attempts {
                reads.clear();
                // Read before the walk and after its check (`sharing.rs`).
                let before = self.sharing.read();
                let root = self.rdcss_read_root(false, guard);
                self.collect(root, topic, &mut reads, &mut Gather::Ids(out), guard);
                // A read-only trie is frozen: one pass is consistent.
                if self.read_only || self.unchanged(root, &reads, guard) {
                    let unshared = if self.read_only {
                        self.frozen_unshared
                    } else {
                        before.none_shared_until(self.sharing.read())
                    };
                    if !unshared {
                        dedup_from(out, start);
                    }
                    return;
                }
                out.truncate(start);
            }
        }
        self.snapshot().lookup_into(topic, out);
    }

    /// The lookup's walk and double collect, stopping short of gathering the subscribers.
    fn has_interest(&self, topic: &Topic<'_>) -> bool {
        assert_eq!(topic.dialect(), self.dialect, "topic of another dialect");
        {
            let guard = &self.pin();
            let mut reads = Reads::new();
            let attempts = if self.read_only { 1 } else { LOOKUP_ATTEMPTS };
            for _ in 0..attempts {
                reads.clear();
                let mut found = false;
                let root = self.rdcss_read_root(false, guard);
                self.collect(root, topic, &mut reads, &mut Gather::Any(&mut found), guard);
                if self.read_only || self.unchanged(root, &reads, guard) {
                    return found;
                }
            }
        }
        self.snapshot().has_interest(topic)
    }

    /// Finds the patterns of `id` on a snapshot and unsubscribes each: pairs of `id` added
    /// meanwhile may stay. Returns 0 on a read-only trie.
    fn remove_subscriber(&self, id: SubscriberId) -> usize {
        if self.read_only {
            return 0;
        }
        let mut patterns = Vec::new();
        self.snapshot().for_each_pattern(&mut |text, subs| {
            if subs.contains(id) {
                patterns.push(text.to_owned());
            }
        });
        patterns
            .iter()
            .filter(|text| {
                let pattern = self
                    .dialect
                    .parse_pattern(text)
                    .expect("a pattern the trie holds parses");
                self.unsubscribe(&pattern, id)
            })
            .count()
    }

    fn len(&self) -> usize {
        if !self.read_only {
            return self.len.load(Relaxed);
        }
        *self.frozen_len.get_or_init(|| {
            let mut n = 0;
            self.for_each_pattern(&mut |_, subs| n += subs.len());
            n
        })
    }

    fn subscriptions(&self) -> Vec<(String, SubscriberId)> {
        let mut pairs = Vec::new();
        self.for_each_frozen_pattern(&mut |text, subs| {
            subs.for_each(&mut |id| pairs.push((text.to_owned(), id)));
        });
        pairs
    }
}

impl Drop for CSTrie {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no operation on this trie is running, and other tries (snapshots)
        // never touch this root slot; so nothing else can load it.
        let guard = unsafe { epoch::unprotected() };
        let r = self.root.swap(Shared::null(), Acquire, guard);
        if !r.is_null() {
            // SAFETY: the slot owned `r`; it is unlinked now and unreachable (see above). The
            // I-nodes it names are `Arc`s, which other tries may still hold.
            drop(unsafe { r.into_owned() });
        }
    }
}

/// Helpers shared by the loom models in `gcas.rs` and `snapshot.rs`.
#[cfg(all(test, loom))]
mod loom_support {
    use std::cell::Cell;
    use std::collections::HashSet;

    use super::cnode::live_words;
    use super::validate::Quiescence;
    use super::CSTrie;
    use crate::{Dialect, Matcher, Pattern};
    use loom::sync::Arc;

    pub(crate) fn pattern(d: Dialect, text: &str) -> Pattern {
        d.parse_pattern(text).unwrap()
    }

    pub(crate) fn pairs(t: &CSTrie) -> Vec<(String, u32)> {
        let mut got = t.subscriptions();
        got.sort();
        got
    }

    /// The trie holds exactly `want`, and its invariants hold (among them: every moving
    /// write's hand-over committed, so no map node holds slots it does not own).
    pub(crate) fn check(t: &CSTrie, want: &[(&str, u32)]) {
        let mut want: Vec<(String, u32)> = want.iter().map(|(p, s)| (p.to_string(), *s)).collect();
        want.sort();
        assert_eq!(pairs(t), want);
        assert_eq!(t.len(), want.len());
        t.validate(Quiescence::AfterConcurrentWrites).unwrap();
    }

    /// [`check`], and once every retired node is freed, every word the trie holds is still
    /// alive: a moving write whose hand-over went wrong frees, with the map it moved from,
    /// words the new map holds. Costly under loom (the collection is many atomic steps), so
    /// only the models of moving writes call it.
    pub(crate) fn check_alive(t: &CSTrie, want: &[(&str, u32)]) {
        check(t, want);
        t.collect_garbage();
        let held = held_words(t);
        let live = live_words::count() - BASE.with(Cell::get);
        assert!(live >= held, "{live} words alive, {held} held");
    }

    /// The distinct shared words `t` holds in its word maps, at every level (a word object is
    /// told by its text's address, which it owns). A level's solo word lives in its C-node,
    /// not in a word object, and is not counted.
    fn held_words(t: &CSTrie) -> isize {
        let guard = &t.pin();
        let mut seen = HashSet::new();
        let mut stack = vec![t.rdcss_read_root(false, guard)];
        while let Some(inode) = stack.pop() {
            let Some(cn) = CSTrie::cnode(t.gcas_read(inode, guard)) else {
                continue;
            };
            cn.for_each_map_word(&mut |w| {
                seen.insert(w.as_ptr());
            });
            cn.for_each_branch(&mut |_, branch| stack.extend(branch.next.as_deref()));
        }
        seen.len() as isize
    }

    std::thread_local! {
        /// The words alive when the running model started.
        static BASE: Cell<isize> = const { Cell::new(0) };
    }

    /// Stack for model threads: loom runs threads on 32 KiB generator stacks by default,
    /// which a lookup (a hash table and two vectors of live branches) overflows.
    const STACK: usize = 1 << 20;

    /// Spawns a loom thread with a usable stack.
    pub(crate) fn spawn<T: Send + 'static>(
        f: impl FnOnce() -> T + Send + 'static,
    ) -> loom::thread::JoinHandle<T> {
        loom::thread::Builder::new()
            .stack_size(STACK)
            .spawn(f)
            .unwrap()
    }

    /// `loom::model`, with the body on a thread of its own with a usable stack.
    pub(crate) fn model(f: impl Fn() + Send + Sync + 'static) {
        model_bounded(None, f);
    }

    /// [`model`] with at most `preemptions` forced switches, where a model of three
    /// operations with a snapshot and `renew`s in between does not finish in minutes at the
    /// bound `LOOM_MAX_PREEMPTIONS` sets for the rest.
    pub(crate) fn model_bounded(preemptions: Option<usize>, f: impl Fn() + Send + Sync + 'static) {
        let mut builder = loom::model::Builder::new();
        if preemptions.is_some() {
            builder.preemption_bound = preemptions;
        }
        // A std `Arc`: it is made outside the model, where loom's cannot be.
        let f = std::sync::Arc::new(f);
        builder.check(move || {
            let f = std::sync::Arc::clone(&f);
            BASE.with(|b| b.set(live_words::count()));
            spawn(move || f()).join().unwrap();
        });
    }

    /// Sets a trie up, races `a` and `b` on it, then checks it.
    pub(crate) fn run2(
        d: Dialect,
        setup: fn(&CSTrie),
        a: fn(&CSTrie),
        b: fn(&CSTrie),
        after: fn(&CSTrie),
    ) {
        run2_bounded(None, d, setup, a, b, after);
    }

    /// [`run2`] under [`model_bounded`].
    pub(crate) fn run2_bounded(
        preemptions: Option<usize>,
        d: Dialect,
        setup: fn(&CSTrie),
        a: fn(&CSTrie),
        b: fn(&CSTrie),
        after: fn(&CSTrie),
    ) {
        model_bounded(preemptions, move || {
            let t = Arc::new(CSTrie::new(d));
            setup(&t);
            let ta = {
                let t = Arc::clone(&t);
                spawn(move || a(&t))
            };
            b(&t);
            ta.join().unwrap();
            after(&t);
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn p(d: Dialect, s: &str) -> Pattern {
        d.parse_pattern(s).unwrap()
    }

    fn sorted(mut v: Vec<u32>) -> Vec<u32> {
        v.sort_unstable();
        v
    }

    #[test]
    fn matchbox_overflow_sequence_ends_in_the_right_state() {
        let t = CSTrie::new(Dialect::Amqp);
        let d = Dialect::Amqp;
        assert!(t.subscribe(&p(d, "a.#.b"), 1));
        assert!(t.subscribe(&p(d, "a.#"), 1));
        assert!(t.unsubscribe(&p(d, "a.#.b"), 1));
        assert!(!t.unsubscribe(&p(d, "a.#.a"), 1));
        assert_eq!(t.subscriptions(), vec![("a.#".to_string(), 1)]);
        assert_eq!(sorted(t.lookup_str("a.x.b").unwrap()), vec![1]);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn snapshot_ignores_later_writes_and_refuses_its_own() {
        let d = Dialect::Mqtt;
        let t = CSTrie::new(d);
        t.subscribe(&p(d, "a/+"), 1);
        let s = t.snapshot();
        t.subscribe(&p(d, "a/b"), 2);
        t.unsubscribe(&p(d, "a/+"), 1);
        assert!(s.is_read_only());
        assert!(!s.subscribe(&p(d, "x"), 3));
        assert!(!s.unsubscribe(&p(d, "a/+"), 1));
        assert_eq!(s.remove_subscriber(1), 0);
        assert_eq!(sorted(s.lookup_str("a/b").unwrap()), vec![1]);
        assert_eq!(sorted(t.lookup_str("a/b").unwrap()), vec![2]);
        assert_eq!(s.len(), 1);
        assert_eq!(t.len(), 1);
        let s2 = s.snapshot();
        assert_eq!(s2.subscriptions(), vec![("a/+".to_string(), 1)]);
    }

    #[test]
    fn deep_patterns_cost_no_stack() {
        let d = Dialect::Amqp;
        let text = vec!["w"; 100_000].join(".");
        let deep = p(d, &text);
        let t = CSTrie::new(d);
        assert!(t.subscribe(&deep, 1));
        let s = t.snapshot();
        assert!(t.subscribe(&p(d, &format!("{text}.x")), 2));
        assert_eq!(t.lookup_str(&text).unwrap(), vec![1]);
        assert_eq!(s.len(), 1);
        assert!(t.unsubscribe(&deep, 1));
        drop(s);
        assert_eq!(t.len(), 1);
        drop(t);
    }

    #[test]
    fn remove_subscriber_drops_every_pattern_of_one_id() {
        let d = Dialect::Nats;
        let t = CSTrie::new(d);
        for s in ["a.>", "a.*", "b"] {
            t.subscribe(&p(d, s), 7);
            t.subscribe(&p(d, s), 8);
        }
        assert_eq!(t.remove_subscriber(7), 3);
        assert_eq!(t.len(), 3);
        assert_eq!(sorted(t.lookup_str("a.b").unwrap()), vec![8]);
    }

    /// Lookups that read more I-nodes and carry more live prefixes than `SCAN_MAX`, where
    /// `Reads` and `dedup_live` switch from scanning to hashing, agree with the naive matcher.
    #[test]
    fn lookups_past_the_linear_scan_limit() {
        for d in [Dialect::Amqp, Dialect::Mqtt, Dialect::Nats] {
            let t = CSTrie::new(d);
            let naive = crate::NaiveMatcher::new(d);
            let (one, many, sep) = (d.one_word(), d.many_words(), d.separator() as char);
            let mut id = 0;
            for depth in 1..=3 * SCAN_MAX {
                let mut words: Vec<String> = (0..depth).map(|i| format!("w{}", i % 3)).collect();
                for (k, w) in words.iter_mut().enumerate() {
                    if (k + depth) % 4 == 0 {
                        *w = one.to_owned();
                    }
                }
                let texts = [
                    words.join(&sep.to_string()),
                    format!("{}{sep}{many}", words[..depth / 2].join(&sep.to_string())),
                ];
                for text in texts.iter().filter(|x| !x.starts_with(sep)) {
                    let pat = p(d, text);
                    t.subscribe(&pat, id);
                    naive.subscribe(&pat, id);
                    id += 1;
                }
            }
            // Every mix of word and one-word wildcard over five levels: 32 live prefixes at once.
            for mask in 0..32u32 {
                let words: Vec<String> = (0..5)
                    .map(|i| match mask >> i & 1 {
                        1 => one.to_owned(),
                        _ => format!("w{}", i % 3),
                    })
                    .collect();
                let text = format!("{}{sep}{many}", words.join(&sep.to_string()));
                let pat = p(d, &text);
                t.subscribe(&pat, id);
                naive.subscribe(&pat, id);
                id += 1;
            }
            for len in [SCAN_MAX, 2 * SCAN_MAX, 3 * SCAN_MAX + 1] {
                let words: Vec<String> = (0..len).map(|i| format!("w{}", i % 3)).collect();
                let text = words.join(&sep.to_string());
                let topic = d.parse_topic(&text).unwrap();
                assert_eq!(
                    sorted(t.lookup(&topic)),
                    sorted(naive.lookup(&topic)),
                    "{d:?} {len}"
                );
                assert_eq!(
                    sorted(t.snapshot().lookup(&topic)),
                    sorted(naive.lookup(&topic))
                );
            }
        }
    }

    #[test]
    fn wide_levels_and_sets() {
        let d = Dialect::Amqp;
        let t = CSTrie::new(d);
        for i in 0..20_000u32 {
            t.subscribe(&p(d, &format!("users.{i}")), i);
            t.subscribe(&p(d, "all"), i);
        }
        assert_eq!(t.len(), 40_000);
        assert_eq!(t.lookup_str("users.123").unwrap(), vec![123]);
        assert_eq!(t.lookup_str("all").unwrap().len(), 20_000);
        for i in 0..20_000u32 {
            assert!(t.unsubscribe(&p(d, &format!("users.{i}")), i));
        }
        assert_eq!(t.len(), 20_000);
        assert_eq!(t.subscriptions().len(), 20_000);
    }
}
