//! I-nodes, main nodes and generations: Prokopec, Bronson, Bagwell and Odersky, "Concurrent
//! Tries with Efficient Non-Blocking Snapshots" (PPoPP 2012), section 2 and figure 1 (the node
//! types) and section 3 (`Gen`, the `prev` field of main nodes).
//!
//! An [`INode`] is a mutable location that stays in place; its main node ([`MainNode`]: a
//! C-node or a T-node) is immutable and is replaced whole by GCAS (`gcas.rs`). Where topicmatch
//! departs from the paper:
//!
//! - There are no S-nodes: a C-node's branches are keyed by pattern words, and each branch holds
//!   its own subscriber set and optionally the I-node of the next level (`cnode.rs`).
//! - A T-node holds nothing. The paper entombs a C-node left with one S-node and resurrects that
//!   S-node in the parent; here a C-node is entombed only when it is empty, and what the paper
//!   resurrects (the key's data) already lives in the parent's branch, which keeps its
//!   subscribers when its tombed I-node is cut off (`clean` in `mod.rs`).
//! - `Gen` is a number from a process-wide counter, compared by value: the paper compares
//!   generation objects by identity, and a fresh number is as unique.
//! - A failed GCAS is marked by tag bit 1 on the `prev` pointer rather than by allocating a
//!   `FailedNode`; the tagged pointer means "FailedNode(prev)".
//!
//! Memory: a main node is owned by exactly one I-node slot (copies for another generation are
//! new allocations), so whoever unlinks it retires it (`reclaim::retire`: freed by the writing
//! thread once the epoch allows, or with `Guard::defer_destroy` outside a write). I-nodes are
//! shared between generations and snapshots, so branches hold them by `Arc`; an I-node dies
//! with the last main node that names it, which is itself freed only after every reader that
//! could see it has unpinned.
//!
//! Invariants:
//! 1. `main` is never null while the I-node is reachable.
//! 2. `prev` of a main node is null (committed), an untagged pointer to the main node it
//!    replaces (pending), or that pointer tagged [`FAILED`] (failed, to be rolled back). Only
//!    a pending node's `prev` ever changes, so at most one pending node sits on an I-node.
//! 3. A T-node is final: no GCAS replaces it.
//! 4. Dropping an I-node never recurses through the levels below it (patterns may be 100,000
//!    levels deep): [`INode`]'s `Drop` walks them with an explicit stack.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{self as epoch, Atomic, Owned, Shared};

use super::cnode::CNode;

/// Tag on `prev` meaning "this GCAS failed; roll back to the untagged pointer".
pub(crate) const FAILED: usize = 1;

/// A generation: I-nodes of one generation may be written only while the trie's root is of
/// the same generation (section 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gen(pub(super) u64);

impl Gen {
    /// A generation never handed out before.
    pub(crate) fn fresh() -> Gen {
        // Uniqueness is all that matters: the counter is not part of any modelled protocol, so
        // it stays a std atomic under loom too.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Gen(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// What a main node is.
#[derive(Clone)]
pub(crate) enum Main {
    /// A C-node: the branches of one level.
    C(CNode),
    /// A T-node: an entombed, empty C-node.
    T,
}

/// A main node: immutable content plus the GCAS `prev` field.
pub(crate) struct MainNode {
    pub(crate) main: Main,
    /// Not owning: see invariant 2. Dropping a main node never follows it.
    pub(crate) prev: Atomic<MainNode>,
}

impl MainNode {
    /// A committed main node.
    pub(crate) fn new(main: Main) -> MainNode {
        MainNode {
            main,
            prev: Atomic::null(),
        }
    }
}

/// An indirection node.
pub(crate) struct INode {
    pub(crate) main: Atomic<MainNode>,
    pub(crate) gen: Gen,
}

impl INode {
    /// An I-node of generation `gen` whose main node is `main`, committed.
    pub(crate) fn new(gen: Gen, main: Main) -> INode {
        INode {
            main: Atomic::new(MainNode::new(main)),
            gen,
        }
    }
}

impl Drop for INode {
    fn drop(&mut self) {
        // Walk the levels below with an explicit stack: each uniquely owned child I-node gives
        // up its main node to the stack before it is dropped, so no drop recurses.
        let mut stack: Vec<MainNode> = Vec::new();
        take_main(&self.main, &mut stack);
        let mut children: Vec<Arc<INode>> = Vec::new();
        while let Some(node) = stack.pop() {
            if let Main::C(cn) = node.main {
                cn.drain_unique_children(&mut children);
            }
            for child in children.drain(..) {
                if let Some(inode) = Arc::into_inner(child) {
                    take_main(&inode.main, &mut stack);
                    // `inode` now has a null main node: its own drop does nothing.
                }
            }
        }
    }
}

/// Moves the main node out of a slot nobody else can reach, with whatever its pending or
/// failed GCAS still holds: a pending node's predecessor was never retired (only the commit
/// retires it) and a failed node was never rolled back (only the rollback retires it), so both
/// are owned here.
fn take_main(slot: &Atomic<MainNode>, stack: &mut Vec<MainNode>) {
    // SAFETY: the caller owns the I-node exclusively (`&mut self` in `drop`, or the last `Arc`),
    // so no thread can load from `slot` concurrently; `unprotected` is sound without concurrency.
    let guard = unsafe { epoch::unprotected() };
    let m = slot.swap(Shared::null(), Ordering::Relaxed, guard);
    if m.is_null() {
        return;
    }
    // SAFETY: `m` was this slot's main node; by invariant 2 and the ownership rule in the
    // module docs nothing else frees it while the slot still names it, and no one can reach it
    // any more.
    let m: Owned<MainNode> = unsafe { m.into_owned() };
    let prev = m.prev.load(Ordering::Relaxed, guard);
    if !prev.is_null() {
        // SAFETY: a pending or failed GCAS left `prev` unretired (see the function docs) and
        // the I-node is unreachable, so nobody will complete the GCAS or free `prev`.
        stack.push(*unsafe { prev.with_tag(0).into_owned() }.into_box());
    }
    stack.push(*m.into_box());
}
