//! Main nodes a write retires are freed by the thread that wrote them, not by the readers.
//!
//! Why: crossbeam-epoch runs a retired object's destructor on whichever thread collects the bag
//! it sits in, and every pin collects once in 128. Lookups pin on every call, so beside a
//! writer the readers ran most of its destructors: in `benches/readers_writer.rs` with every
//! `*` at the root (`STAR_AT=0`), a `CSTrie` reader spent about a quarter of its processor time
//! dropping main nodes the writer had replaced, and its frees of boxes the writer had taken from
//! glibc waited on that arena's lock, asleep, while the writer allocated.
//!
//! Here a write keeps the main nodes it retires in a batch of its own thread. Every
//! [`FLUSH_EVERY`] writes that retired a node, the batch is sealed: one deferred function for
//! the whole batch, which only marks it ready. The thread frees its ready batches then, where
//! the memory came from (glibc's cache of the thread, the node pool's list of the thread).
//!
//! A batch's state word decides who frees it, exactly once:
//! - [`SEALED`]: waiting for the epoch. The deferred function swaps in [`READY`]; the owner,
//!   exiting, swaps in [`ORPHANED`]. The second of the two swaps frees the batch (the deferred
//!   function when the owner has gone; the owner when the function has run).
//! - The owner frees a batch it reads as [`READY`]: the function's swap was its last touch.
//!
//! The epoch's guarantee is crossbeam's: the function runs only once every thread pinned when
//! the batch was sealed has unpinned, and the batch's nodes were unlinked before it was sealed.
//! The owner's acquire load of [`READY`] orders its frees after that. The loom model at the
//! end covers the state word; the rest is a deferred function as crossbeam runs any other.
//!
//! Memory: a thread's last batches wait for its next flush or its exit, at most what its last
//! few dozen writes retired (`tests/cstrie_garbage.rs`). A child process forked while other
//! threads wrote keeps their batches and never frees them (those threads do not exist in the
//! child): a bounded leak, of their last few dozen writes each. Outside a write (a lookup
//! that helps a writer's GCAS finish), where the thread-local is gone (thread exit) or busy (a
//! write inside a function a flush runs), and under loom, nodes are retired with
//! `defer_destroy` as before. A writing thread also keeps up to [`SPARE`] emptied batches for
//! reuse, a few kilobytes, until it exits.
#![allow(unsafe_code)]

#[cfg(not(loom))]
use std::cell::Cell;

#[cfg(not(loom))]
use crossbeam_epoch::Owned;

use super::inode::MainNode;
#[cfg(any(not(loom), test))]
use crate::sync::AtomicU8;

/// The state word of a batch, and the three steps on it (module docs).
mod state {
    // Under loom only the model uses them.
    #![cfg_attr(all(loom, not(test)), allow(dead_code))]

    use std::sync::atomic::Ordering::{AcqRel, Acquire};

    use crate::sync::AtomicU8;

    /// Waiting for every reader that could see its nodes to unpin.
    pub(super) const SEALED: u8 = 0;
    /// No reader can see its nodes; its owner frees it.
    pub(super) const READY: u8 = 1;
    /// Its owner has exited; the deferred function frees it.
    pub(super) const ORPHANED: u8 = 2;

    /// The deferred function's step on a batch's state: `true` if it must free the batch
    /// (its owner has gone). Its swap is its last touch of the batch.
    pub(super) fn mark_ready(state: &AtomicU8) -> bool {
        state.swap(READY, AcqRel) == ORPHANED
    }

    /// The owner's poll: `true` if the batch is ready, and the owner's to free.
    pub(super) fn is_ready(state: &AtomicU8) -> bool {
        state.load(Acquire) == READY
    }

    /// The owner's exit: `true` if it must free the batch (the deferred function has run).
    /// After this the owner never touches the batch again.
    pub(super) fn orphan(state: &AtomicU8) -> bool {
        state.swap(ORPHANED, AcqRel) == READY
    }
}

#[cfg(any(not(loom), test))]
use self::state::*;

/// The main nodes one thread's writes retired between two seals.
#[cfg(not(loom))]
struct Batch {
    state: AtomicU8,
    nodes: Vec<Owned<MainNode>>,
}

#[cfg(not(loom))]
impl Batch {
    fn new() -> Box<Batch> {
        Box::new(Batch {
            state: AtomicU8::new(SEALED),
            nodes: Vec::new(),
        })
    }
}

/// A sealed batch's address, handed to the deferred function.
#[cfg(not(loom))]
struct Sealed(*mut Batch);

#[cfg(not(loom))]
// SAFETY: the batch's nodes are `Send` (crossbeam drops main nodes on any thread), and the
// state word decides which one thread frees the batch (module docs).
unsafe impl Send for Sealed {}

#[cfg(not(loom))]
impl Sealed {
    /// The deferred function's step: marks the batch ready, or frees it if its owner has gone.
    ///
    /// # Safety
    /// Called once per sealed batch, after the batch's grace period.
    unsafe fn ready(self) {
        // SAFETY: the owner frees the batch only after reading `READY` (stored below) or after
        // its own swap found `READY`; until one of those, the batch is alive.
        if mark_ready(&unsafe { &*self.0 }.state) {
            // SAFETY: the owner swapped in `ORPHANED` and will not touch the batch again; the
            // grace period has passed, so no reader holds its nodes.
            drop(unsafe { Box::from_raw(self.0) });
        }
    }
}

/// The batches of one thread.
#[cfg(not(loom))]
#[derive(Default)]
struct Limbo {
    /// What this thread's writes retired since the last seal.
    open: Vec<Owned<MainNode>>,
    /// Sealed batches, oldest first.
    sealed: std::collections::VecDeque<*mut Batch>,
    /// Freed batches kept for reuse, with their vectors' room: boxed, since a sealed batch
    /// travels as the box's address, and reusing the box saves its allocation.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Batch>>,
}

/// Spare batches a thread keeps: enough that a steady writer allocates none.
#[cfg(not(loom))]
const SPARE: usize = 32;
/// Room for nodes a spare batch keeps.
#[cfg(not(loom))]
const SPARE_ROOM: usize = 4 * FLUSH_EVERY as usize;

#[cfg(not(loom))]
impl Limbo {
    /// Seals the open batch, if it holds anything, with one function deferred under `guard`.
    fn seal(&mut self, guard: &crossbeam_epoch::Guard) {
        if self.open.is_empty() {
            return;
        }
        let mut batch = self.spare.pop().unwrap_or_else(Batch::new);
        std::mem::swap(&mut batch.nodes, &mut self.open);
        let b = Box::into_raw(batch);
        self.sealed.push_back(b);
        let sealed = Sealed(b);
        // SAFETY: runs once, after every thread pinned now has unpinned; the batch's nodes were
        // unlinked before they were retired into it, and `guard` is pinned since.
        guard.defer(move || unsafe { sealed.ready() });
    }

    /// The step of every [`FLUSH_EVERY`]th write: seals the open batch, hands it to the
    /// collector (which may run earlier batches' functions), and frees the ready batches.
    fn flush(&mut self, guard: &crossbeam_epoch::Guard) {
        self.seal(guard);
        guard.flush();
        self.free_ready();
    }

    /// Frees the oldest batches while they are ready.
    fn free_ready(&mut self) {
        while let Some(&b) = self.sealed.front() {
            // SAFETY: a batch in `sealed` is alive until its owner (this thread) frees it, or
            // until the deferred function frees it after `ORPHANED`, which only `drop` stores.
            if !is_ready(&unsafe { &*b }.state) {
                break;
            }
            self.sealed.pop_front();
            // SAFETY: `READY` was the deferred function's last touch, and the grace period
            // has passed; this thread owns the batch.
            let mut batch = unsafe { Box::from_raw(b) };
            batch.nodes.clear();
            // A write that renewed a long pattern's levels retired one node a level: its
            // batch's room is not kept.
            batch.nodes.shrink_to(SPARE_ROOM);
            if self.spare.len() < SPARE {
                *batch.state.get_mut() = SEALED;
                self.spare.push(batch);
            }
        }
    }
}

#[cfg(not(loom))]
impl Drop for Limbo {
    fn drop(&mut self) {
        // The thread is exiting: what its last writes retired is handed to the epoch as any
        // retired node, and each sealed batch is freed here if ready, or left to its deferred
        // function. (Pinning here registers afresh if the thread's epoch handle is gone.)
        if !self.open.is_empty() {
            let guard = crossbeam_epoch::pin();
            for m in self.open.drain(..) {
                // SAFETY: unlinked before it was retired into the batch, and retired once.
                unsafe { guard.defer_destroy(m.into_shared(&guard)) };
            }
        }
        for b in self.sealed.drain(..) {
            // SAFETY: as in `free_ready`; after this swap this thread never touches `b` again.
            if orphan(&unsafe { &*b }.state) {
                // SAFETY: the deferred function has run: this thread owns the batch.
                drop(unsafe { Box::from_raw(b) });
            }
        }
    }
}

#[cfg(not(loom))]
std::thread_local! {
    static LIMBO: std::cell::RefCell<Limbo> = std::cell::RefCell::new(Limbo::default());
    /// Writes in progress on this thread (a write may run inside another). Apart from
    /// [`LIMBO`], and constant-initialized without a destructor, so that a write's start and
    /// end read it without the lazy-initialization check.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Outermost writes this thread has ended that retired a node.
    static WRITES: Cell<u32> = const { Cell::new(0) };
    /// Whether the write in progress on this thread retired a node into [`LIMBO`]. A write
    /// that changed nothing (a pair already there, or one not there to remove) has nothing
    /// to flush and is not counted: when it was, every sixteenth such write flushed to the
    /// collector, about 8 % of the time of subscribing a pair already there (`perf`).
    static KEPT: Cell<bool> = const { Cell::new(false) };
}

/// Outermost writes by one thread that retired a node, between two flushes of its retired
/// nodes.
///
/// Why flush at all: crossbeam-epoch keeps up to 64 retired objects per thread and tries to
/// free garbage only every 128 pins, so a replaced main node was freed some hundreds of writes
/// after it was retired. Its word-map path (one node per level of the hash trie, up to 32
/// slots each) had gone cold by then, and so had the memory the next writes got back from the
/// allocator: in a level of 1,000,000 words a subscribe spent about a fifth of its time in
/// those misses. Sealing and flushing every few writes frees the path while it is still
/// cached, at the cost of one push to the collector's shared queue per flush.
#[cfg(not(loom))]
const FLUSH_EVERY: u32 = 16;

/// A write in progress on this thread, pinned: once it has [begun](Writing::begin) to
/// change the trie, [`retire`] keeps what it retires for this thread to free. Every
/// [`FLUSH_EVERY`] outermost writes that retired a node, dropping one seals the thread's open
/// batch, flushes it to the collector, and frees the thread's ready batches.
/// Under loom it is only the guard: the models count on the collector's own schedule.
pub(super) struct Writing {
    guard: crossbeam_epoch::Guard,
    /// Whether this write counts in [`DEPTH`]. A write that finds its pair already there never
    /// begins, and its end is the guard's alone.
    #[cfg(not(loom))]
    begun: Cell<bool>,
}

impl Writing {
    /// Starts a write under `guard`.
    pub(super) fn start(guard: crossbeam_epoch::Guard) -> Writing {
        Writing {
            guard,
            #[cfg(not(loom))]
            begun: Cell::new(false),
        }
    }

    /// Marks the write as one that may retire nodes: called by each of its GCASes, whose
    /// commits retire the nodes they replace, so that those go to this thread's batch. Until
    /// then a node retired by helping another write's GCAS goes to the collector, as a
    /// lookup's does. Why lazy: a subscribe of a pair already there changes nothing, and the
    /// count's increment, decrement and check of [`KEPT`] were about a tenth of its
    /// instructions.
    #[inline]
    pub(super) fn begin(&self) {
        #[cfg(not(loom))]
        if !self.begun.replace(true) {
            DEPTH.with(|d| d.set(d.get() + 1));
        }
    }
}

impl std::ops::Deref for Writing {
    type Target = crossbeam_epoch::Guard;

    fn deref(&self) -> &crossbeam_epoch::Guard {
        &self.guard
    }
}

#[cfg(not(loom))]
impl Drop for Writing {
    fn drop(&mut self) {
        if !self.begun.get() {
            return;
        }
        let depth = DEPTH.with(|d| {
            d.set(d.get() - 1);
            d.get()
        });
        if depth > 0 || !KEPT.with(|k| k.replace(false)) {
            return;
        }
        let writes = WRITES.with(|w| {
            w.set(w.get().wrapping_add(1));
            w.get()
        });
        if writes % FLUSH_EVERY == 0 {
            // At thread exit `LIMBO` may be gone: then nothing was kept in it (`retire`).
            // A write inside a function the flush runs finds `LIMBO` borrowed: it retires with
            // `defer_destroy` (`retire`) and leaves the sealing to a later flush.
            let _ = LIMBO.try_with(|l| {
                if let Ok(mut l) = l.try_borrow_mut() {
                    l.flush(&self.guard);
                }
            });
        }
    }
}

/// Seals what this thread's writes retired since its last flush and frees its batches that
/// no reader can see any more, as every `FLUSH_EVERY`th write does. What it seals is freed
/// by a later call (or write) once the epoch has moved on past every thread pinned now, this
/// call's own pin included: call it again after other pins and flushes, as the tests that count
/// the heap do in a loop. For a thread that has stopped writing for long where the memory its
/// last writes retired matters; a thread's exit hands it all to the epoch anyway.
pub fn free_retired() {
    #[cfg(not(loom))]
    let _ = LIMBO.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            l.flush(&crossbeam_epoch::pin());
        }
    });
}

/// Retires `m`, already unlinked: into this thread's open batch if a write is in progress on
/// it; otherwise (and under loom) with `defer_destroy`.
///
/// # Safety
/// As for `Guard::defer_destroy`: `m` is unlinked, and no other thread will retire it.
pub(super) unsafe fn retire(
    m: crossbeam_epoch::Shared<'_, MainNode>,
    guard: &crossbeam_epoch::Guard,
) {
    #[cfg(not(loom))]
    {
        let kept = DEPTH.with(Cell::get) > 0
            && LIMBO
                .try_with(|l| match l.try_borrow_mut() {
                    Ok(mut l) => {
                        // SAFETY: the caller's contract: `m` is unlinked and retired once, here.
                        l.open.push(unsafe { m.into_owned() });
                        KEPT.with(|k| k.set(true));
                        true
                    }
                    // Borrowed by a flush whose deferred function wrote: retired below.
                    Err(_) => false,
                })
                .unwrap_or(false);
        if kept {
            return;
        }
    }
    // SAFETY: the caller's contract.
    unsafe { guard.defer_destroy(m) };
}

#[cfg(all(test, loom))]
mod loom_tests {
    use std::sync::atomic::AtomicUsize as Count;
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;

    use loom::cell::UnsafeCell;
    use loom::thread;

    use super::*;

    /// A batch in the model: the state word and a stand-in for its nodes, which counts frees.
    struct Model {
        state: AtomicU8,
        nodes: UnsafeCell<u32>,
        freed: Arc<Count>,
    }

    impl Drop for Model {
        fn drop(&mut self) {
            // Freeing writes the nodes: loom fails the model unless this is ordered after the
            // reader's touch in the other thread.
            // SAFETY: loom checks this write against every other access to the cell.
            self.nodes.with_mut(|n| unsafe { *n = 0 });
            self.freed.fetch_add(1, Relaxed);
        }
    }

    /// The deferred function and the owner race on one batch: the owner polls it (freeing it
    /// if ready), then exits (freeing it if the function has run by then). The other thread
    /// is a reader's last touch of the nodes followed by the deferred function, as the epoch
    /// orders them. The batch is freed exactly once, and after the reader's touch.
    #[test]
    fn the_batch_is_freed_once_after_its_readers() {
        loom::model(|| {
            let freed = Arc::new(Count::new(0));
            let batch = Box::into_raw(Box::new(Model {
                state: AtomicU8::new(SEALED),
                nodes: UnsafeCell::new(1),
                freed: Arc::clone(&freed),
            }));
            let addr = batch as usize;
            let deferred = thread::spawn(move || {
                let b = addr as *mut Model;
                // SAFETY: the batch is alive until the state word says otherwise.
                let model = unsafe { &*b };
                // SAFETY: loom checks this read against the free's write.
                model.nodes.with(|n| assert_eq!(unsafe { *n }, 1));
                if mark_ready(&model.state) {
                    // SAFETY: the owner has gone.
                    drop(unsafe { Box::from_raw(b) });
                }
            });
            // The owner's own last look at the batch before it gives it up: the deferred
            // function's free must come after it (`orphan` releases, `mark_ready` acquires).
            // SAFETY: as above, for the owner.
            unsafe { &*batch }
                .nodes
                .with(|n| assert_eq!(unsafe { *n }, 1));
            // SAFETY: as above, for the owner.
            if is_ready(&unsafe { &*batch }.state) || orphan(&unsafe { &*batch }.state) {
                // SAFETY: the state word gave the batch to the owner.
                drop(unsafe { Box::from_raw(batch) });
            }
            deferred.join().unwrap();
            assert_eq!(freed.load(Relaxed), 1);
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A write that never begins (a subscribe of a pair already there) leaves its thread's
    /// count as it found it; one that begins, nested or not and however often, gives its
    /// count back when it ends.
    #[test]
    fn a_write_counts_on_its_thread_only_once_begun() {
        let depth = || DEPTH.with(Cell::get);
        assert_eq!(depth(), 0);
        drop(Writing::start(crossbeam_epoch::pin()));
        assert_eq!(depth(), 0);
        {
            let outer = Writing::start(crossbeam_epoch::pin());
            assert_eq!(depth(), 0);
            outer.begin();
            outer.begin();
            assert_eq!(depth(), 1);
            {
                let inner = Writing::start(crossbeam_epoch::pin());
                inner.begin();
                assert_eq!(depth(), 2);
            }
            assert_eq!(depth(), 1);
        }
        assert_eq!(depth(), 0);
    }
}
