//! The root, RDCSS and O(1) snapshots: Prokopec et al. (PPoPP 2012), section 3, figures 5 and 7
//! (`RDCSS_ROOT`, `RDCSS_Complete`, `RDCSS_READ_ROOT`, `snapshot`, `readOnlySnapshot`), after
//! the restricted double-compare single-swap of Harris, Fraser and Pratt (2002).
//!
//! A snapshot swaps the root I-node `r` for a copy of it in a fresh generation, on condition
//! that `r`'s main node is still the one just read. The old root, frozen because no GCAS can
//! commit in its generation any more, becomes the root of the read-only snapshot; the live trie
//! copies each I-node of the old generation lazily, on the first write that passes through it
//! (see `renew` in `mod.rs`). Both steps are O(1): who pays is the first writer on each path.
//!
//! Where topicmatch departs: only read-only snapshots are public (the Python API wants a
//! frozen view). The descriptor's outcome is decided by a CAS on its `state` before the root is
//! swung, so the creator learns the outcome exactly; the paper sets a `committed` flag after
//! the swing, which a slow helper can leave unset while the creator already reads it.
//! `RDCSS_Complete` is a loop where the paper recurses.

use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::sync::Arc;

use crossbeam_epoch::{Guard, Owned, Shared};

use super::inode::{Gen, INode, Main, MainNode};
use super::CSTrie;
use crate::sync::AtomicU8;

/// What the root slot holds.
pub(crate) enum RootNode {
    /// The root I-node.
    INode(Arc<INode>),
    /// A snapshot in progress.
    Desc(Rdcss),
}

/// An RDCSS descriptor: swing the root from `ov` to `nv` if `ov`'s main node is `expmain`.
pub(crate) struct Rdcss {
    ov: Arc<INode>,
    /// Compared by address only. It cannot be freed and reused while the descriptor is in the
    /// root: its creator stays pinned until the descriptor is gone.
    expmain: *const MainNode,
    nv: Arc<INode>,
    state: AtomicU8,
}

// SAFETY: `expmain` is only compared, never dereferenced; every other field is Send + Sync.
unsafe impl Send for Rdcss {}
// SAFETY: as above.
unsafe impl Sync for Rdcss {}

const UNDECIDED: u8 = 0;
const COMMITTED: u8 = 1;
const ABORTED: u8 = 2;

impl CSTrie {
    /// RDCSS_READ_ROOT: the root I-node, completing (or, with `abort`, aborting) a snapshot in
    /// progress.
    pub(super) fn rdcss_read_root<'g>(&self, abort: bool, guard: &'g Guard) -> &'g INode {
        let r = self.root.load(Acquire, guard);
        // SAFETY: the root slot is never null, and a replaced root node is retired with
        // `defer_destroy`, so it outlives `guard`.
        match unsafe { r.deref() } {
            RootNode::INode(inode) => inode,
            RootNode::Desc(_) => self.rdcss_complete(abort, guard).0,
        }
    }

    /// The root I-node as an `Arc`, for a snapshot to hold.
    fn rdcss_read_root_arc<'g>(&self, guard: &'g Guard) -> (&'g Arc<INode>, Shared<'g, RootNode>) {
        loop {
            let r = self.root.load(Acquire, guard);
            // SAFETY: as in `rdcss_read_root`.
            match unsafe { r.deref() } {
                RootNode::INode(inode) => return (inode, r),
                RootNode::Desc(_) => {
                    self.rdcss_complete(false, guard);
                }
            }
        }
    }

    /// RDCSS_Complete: resolves the descriptor in the root, if any, and returns the root I-node.
    #[cold]
    fn rdcss_complete<'g>(&self, abort: bool, guard: &'g Guard) -> (&'g INode, bool) {
        loop {
            let r = self.root.load(Acquire, guard);
            // SAFETY: as in `rdcss_read_root`.
            let desc = match unsafe { r.deref() } {
                RootNode::INode(inode) => return (inode, false),
                RootNode::Desc(desc) => desc,
            };
            let mut decision = desc.state.load(Acquire);
            if decision == UNDECIDED {
                let want = if abort {
                    ABORTED
                } else {
                    // Reading `ov`'s main node may complete a pending GCAS, which reads the root
                    // with `abort` and so may abort this very descriptor: the CAS below sees it.
                    let main = self.gcas_read(&desc.ov, guard);
                    if std::ptr::eq(main.as_raw(), desc.expmain) {
                        COMMITTED
                    } else {
                        ABORTED
                    }
                };
                decision = match desc
                    .state
                    .compare_exchange(UNDECIDED, want, AcqRel, Acquire)
                {
                    Ok(_) => want,
                    Err(now) => now,
                };
            }
            let target = if decision == COMMITTED {
                &desc.nv
            } else {
                &desc.ov
            };
            let swung = Owned::new(RootNode::INode(Arc::clone(target)));
            if let Ok(new) = self.root.compare_exchange(r, swung, AcqRel, Acquire, guard) {
                // SAFETY: the descriptor is unlinked by this CAS, which one thread wins; it
                // was reachable only from the root slot, and readers are pinned.
                unsafe { guard.defer_destroy(r) };
                // SAFETY: just installed; retired only after a later swing, after `guard`.
                if let RootNode::INode(inode) = unsafe { new.deref() } {
                    return (inode, decision == COMMITTED);
                }
            }
        }
    }

    /// The read-only snapshot (`readOnlySnapshot`): O(1).
    pub(super) fn take_snapshot(&self) -> CSTrie {
        if self.read_only {
            return self.share_read_only(Arc::clone(&self.read_only_root()), self.frozen_unshared);
        }
        let guard = &self.pin();
        loop {
            // The snapshot's instant is its commit, between the two reads (`sharing.rs`).
            let before = self.sharing.read();
            let (r, r_shared) = self.rdcss_read_root_arc(guard);
            let expmain = self.gcas_read(r, guard);
            // SAFETY: read under `guard` from `r`; main nodes are freed only after an epoch.
            let main = match &unsafe { expmain.deref() }.main {
                Main::C(cn) => Main::C(cn.clone()),
                Main::T => unreachable!("the root is never entombed"),
            };
            let nv = Arc::new(INode::new(Gen::fresh(), main));
            let desc = Owned::new(RootNode::Desc(Rdcss {
                ov: Arc::clone(r),
                expmain: expmain.as_raw(),
                nv,
                state: AtomicU8::new(UNDECIDED),
            }));
            let ov = Arc::clone(r);
            match self
                .root
                .compare_exchange(r_shared, desc, AcqRel, Acquire, guard)
            {
                Ok(d) => {
                    // SAFETY: the old root node is unlinked by this CAS (one winner); the
                    // descriptor holds its own `Arc` to the I-node.
                    unsafe { guard.defer_destroy(r_shared) };
                    self.rdcss_complete(false, guard);
                    // SAFETY: `d` is retired only after `guard`, which is still pinned.
                    let RootNode::Desc(desc) = (unsafe { d.deref() }) else {
                        unreachable!("installed a descriptor")
                    };
                    if desc.state.load(Acquire) == COMMITTED {
                        let unshared = before.none_shared_until(self.sharing.read());
                        return self.share_read_only(ov, unshared);
                    }
                }
                Err(_) => continue,
            }
        }
    }

    /// The root I-node of a read-only trie, which never changes.
    fn read_only_root(&self) -> Arc<INode> {
        let guard = &self.pin();
        Arc::clone(self.rdcss_read_root_arc(guard).0)
    }
}

/// Snapshot loom models: a snapshot racing an insert, and a lookup racing it too.
///
/// Run with:
/// `make test-loom`; see the loom models in `gcas.rs` for the bound.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::super::loom_support::{
        check, check_alive, model, model_bounded, pairs, pattern, spawn,
    };
    use super::super::CSTrie;
    use crate::{Dialect, Matcher};
    use loom::sync::Arc;

    #[test]
    fn snapshot_racing_an_insert_sees_all_or_nothing() {
        model(|| {
            let t = Arc::new(CSTrie::new(Dialect::Amqp));
            t.subscribe(&pattern(Dialect::Amqp, "a.b"), 1);
            let w = {
                let t = Arc::clone(&t);
                spawn(move || {
                    assert!(t.subscribe(&pattern(Dialect::Amqp, "a.c"), 2));
                })
            };
            let snap = t.snapshot();
            w.join().unwrap();
            let got = pairs(&snap);
            assert!(
                got == vec![("a.b".to_string(), 1)]
                    || got == vec![("a.b".to_string(), 1), ("a.c".to_string(), 2)],
                "{got:?}"
            );
            assert!(!snap.subscribe(&pattern(Dialect::Amqp, "x"), 3));
            check(&t, &[("a.b", 1), ("a.c", 2)]);
        });
    }

    /// A lookup racing an insert and then a snapshot (which renews the root generation) sees
    /// the insert or not, and reads nothing freed.
    #[test]
    fn lookup_racing_an_insert_and_a_snapshot() {
        model(|| {
            let t = Arc::new(CSTrie::new(Dialect::Amqp));
            t.subscribe(&pattern(Dialect::Amqp, "a.#"), 1);
            let w = {
                let t = Arc::clone(&t);
                spawn(move || {
                    assert!(t.subscribe(&pattern(Dialect::Amqp, "a.b"), 2));
                    let _ = t.snapshot();
                })
            };
            let mut got = t.lookup_str("a.b").unwrap();
            got.sort();
            assert!(got == vec![1] || got == vec![1, 2], "{got:?}");
            w.join().unwrap();
            check(&t, &[("a.#", 1), ("a.b", 2)]);
        });
    }

    /// A snapshot racing a write that moves the word map of a level it shares: the write
    /// commits before the snapshot (it moved from a map that only the live trie then held) or
    /// fails and retries in the new generation (its moved copy freed without the slots it did
    /// not own). Later writes on the live trie, which copy the shared maps by counting, must
    /// leave every word of the snapshot alive and its contents as taken.
    ///
    /// At three preemptions: 373 s at four (2026-11-27), 67 s at three.
    #[test]
    fn snapshot_racing_a_moving_write_keeps_both_whole() {
        model_bounded(Some(3), || {
            let d = Dialect::Amqp;
            let t = Arc::new(CSTrie::new(d));
            for p in ["a.b", "a.c"] {
                t.subscribe(&pattern(d, p), 1);
            }
            let w = {
                let t = Arc::clone(&t);
                spawn(move || assert!(t.subscribe(&pattern(d, "a.d"), 2)))
            };
            let snap = t.snapshot();
            w.join().unwrap();
            let mut want = vec![("a.b", 1), ("a.c", 1)];
            if pairs(&snap).len() == 3 {
                want.push(("a.d", 2));
            }
            check(&snap, &want);
            assert!(t.unsubscribe(&pattern(d, "a.b"), 1));
            assert!(t.subscribe(&pattern(d, "a.e"), 3));
            check(&t, &[("a.c", 1), ("a.d", 2), ("a.e", 3)]);
            check_alive(&snap, &want);
        });
    }

    /// Preemptions for the model below: two `renew`s, their GCASes and the writes after
    /// them make far more interleavings than the other models.
    const BOUND: usize = 2;

    /// Two writers race into a level of an older generation: each must first renew it (a
    /// counted copy of its main node into the new generation), and one of them may then move
    /// from the renewed map while the other's renew or write loses. The snapshot keeps its
    /// level, and every word of both stays alive.
    #[test]
    fn writes_racing_a_renew_keep_the_snapshot_whole() {
        model_bounded(Some(BOUND), || {
            let d = Dialect::Amqp;
            let t = Arc::new(CSTrie::new(d));
            for p in ["a.b", "a.c"] {
                t.subscribe(&pattern(d, p), 1);
            }
            let snap = t.snapshot();
            let w = {
                let t = Arc::clone(&t);
                spawn(move || assert!(t.subscribe(&pattern(d, "a.d"), 2)))
            };
            assert!(t.unsubscribe(&pattern(d, "a.b"), 1));
            w.join().unwrap();
            check(&t, &[("a.c", 1), ("a.d", 2)]);
            check_alive(&snap, &[("a.b", 1), ("a.c", 1)]);
        });
    }
}
