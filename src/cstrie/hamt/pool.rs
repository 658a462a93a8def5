//! The memory of the map nodes: blocks of whole cache lines, carved from chunks of their own
//! on huge pages, and recycled through per-thread free lists.
//!
//! Why not the global allocator: a write into a level of 1,000,000 words copies a path of
//! four or five nodes of up to 536 bytes, and the collector frees the old path an epoch later,
//! in batches. Through glibc those nodes were spread over the whole heap among the words, a
//! walk down a wide level took a TLB miss and a cache miss per level, and each batch of frees
//! made glibc coalesce the freed chunks with their cold neighbours. Here the nodes sit
//! together, on 2 MiB pages where the kernel grants them (`MADV_HUGEPAGE`), a node starts on a
//! cache line (its header and first slots share one, and the line a walk prefetches is the
//! one it guessed), and a free is a push on a list of the freeing thread.
//!
//! The parts, each lock-free:
//! - a thread's own free list per size class: no atomics at all;
//! - a depot per class ([`SegQueue`] of batches), where a thread that frees more than it
//!   allocates leaves its surplus and a thread that allocates more takes it: the collector
//!   runs a node's drop on whichever thread flushes, which need not be the thread that made it;
//! - the chunks, bump-allocated with one `fetch_add`; a full chunk is replaced by CAS.
//!
//! Fork: the depot's queue is lock-free but not wait-free. A push reserves a slot and then
//! writes it, and a take of that slot waits for the write. A process that forked between the
//! two would give the child a slot no thread there will ever write, and the child's next take
//! from that class would wait forever (`a_child_forked_beside_depot_traffic_finds_it_whole`
//! showed it: 16 children of 3,000 hung before the gate). So the depot is gated
//! ([`with_depot`]): a handler registered with `pthread_atfork` closes the gate before the
//! fork and waits for the operations inside to finish, and opens it again in parent and
//! child. While it is closed, threads keep their surplus and carve fresh blocks instead. The
//! chunks need no gate: carving is one `fetch_add` or one CAS, never a wait on a thread.
//!
//! The memory is not given back to the system: freed blocks wait for the next node of their
//! class, as in most allocators. [`stats`] tells how much is reserved and how much is in use.
//! Nodes larger than the largest class (collision nodes of more than 34 keys) go to the global
//! allocator.

use std::alloc::{alloc as sys_alloc, dealloc as sys_dealloc, handle_alloc_error, Layout};
use std::cell::Cell;
use std::ptr::{null_mut, NonNull};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicPtr, AtomicUsize};

use crossbeam_queue::SegQueue;

/// Blocks are whole cache lines, and start on one.
const LINE: usize = 64;
/// Classes of 1 to 9 lines: every branch node of 16-byte slots (a 24-byte header and at most
/// 32 slots: 536 bytes) has a class.
const CLASSES: usize = 9;
/// A chunk is four huge pages. Under Miri, which tracks every byte, a small one.
const CHUNK: usize = if cfg!(miri) { 64 << 10 } else { 8 << 20 };
/// Chunks are aligned to a huge page, so that each of their huge pages can be one.
const CHUNK_ALIGN: usize = if cfg!(miri) { LINE } else { 2 << 20 };
/// Blocks a thread hands to the depot, or takes from it, at once.
const BATCH: usize = 128;

/// A free block: the first word of its memory links it to the next.
struct Free {
    next: *mut Free,
}

/// A chunk of blocks.
struct Chunk {
    base: *mut u8,
    /// Bytes handed out; past the chunk's size it is full (several threads may overshoot).
    cursor: AtomicUsize,
    /// The chunk made before this one: every chunk stays reachable from the newest.
    older: *mut Chunk,
}

/// The chunks blocks are carved from: the process's one list ([`CHUNKS`]), or a test's.
struct Chunks {
    /// The newest chunk, the one blocks are carved from; null before the first.
    current: AtomicPtr<Chunk>,
    /// Bytes in chunks.
    reserved: AtomicUsize,
    layout: Layout,
}

/// The process's chunks. They are never freed: a block may be in use anywhere in any of them.
static CHUNKS: Chunks = Chunks::new(CHUNK, CHUNK_ALIGN);
/// Bytes in blocks in use, as merged by threads that have exited (see [`Local`]).
static IN_USE: AtomicIsize = AtomicIsize::new(0);

/// A list of free blocks of one class, as the depot holds it.
struct Batch {
    head: NonNull<Free>,
    len: usize,
}

// SAFETY: a batch owns its blocks, which nobody else reads or writes while they are free; the
// blocks are plain memory, valid on any thread.
unsafe impl Send for Batch {}

static DEPOT: [SegQueue<Batch>; CLASSES] = [const { SegQueue::new() }; CLASSES];

/// Depot operations running now.
static DEPOT_INSIDE: AtomicUsize = AtomicUsize::new(0);
/// Set by the fork handler while a fork is under way: no depot operation may start.
static FORKING: AtomicBool = AtomicBool::new(false);

/// Runs `f` on the depot of class `c`, unless a fork is under way: then `None`, and the
/// caller does without the depot.
///
/// Why no operation is inside when the process forks: an operation raises `DEPOT_INSIDE` and
/// then reads `FORKING`; [`fork_prepare`] sets `FORKING` and then waits for `DEPOT_INSIDE` to
/// read zero. All four accesses are `SeqCst`, so in their single total order either the raise
/// comes before the handler's read (the handler waits for this operation to leave) or the
/// handler's store comes before the operation's read (the operation stays out). The lowering
/// is a release and the handler's read an acquire, so every write the operation made to the
/// depot is in the memory the child copies.
fn with_depot<T>(c: usize, f: impl FnOnce(&SegQueue<Batch>) -> T) -> Option<T> {
    register_fork_handler();
    DEPOT_INSIDE.fetch_add(1, SeqCst);
    let result = (!FORKING.load(SeqCst)).then(|| f(&DEPOT[c]));
    DEPOT_INSIDE.fetch_sub(1, SeqCst);
    result
}

/// Registers [`fork_prepare`] and [`fork_done`] with `pthread_atfork`, once per process.
fn register_fork_handler() {
    #[cfg(all(unix, not(miri)))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: the handlers are plain functions that touch only atomics, which is
            // allowed in a forking thread and in the child; registering has no precondition.
            let err = unsafe {
                libc::pthread_atfork(Some(fork_prepare), Some(fork_done), Some(fork_done))
            };
            // Only ENOMEM fails it, and a pool that can hang a child must not go on silently.
            assert_eq!(err, 0, "pthread_atfork failed");
        });
    }
}

/// Before a fork, in the forking thread: closes the depot and waits for the operations inside
/// it. None of them waits on this thread (it is in `fork`, not in the depot), so the wait ends.
#[cfg(all(unix, not(miri)))]
extern "C" fn fork_prepare() {
    FORKING.store(true, SeqCst);
    while DEPOT_INSIDE.load(SeqCst) != 0 {
        std::hint::spin_loop();
    }
}

/// After a fork, in the parent and in the child: opens the depot again.
#[cfg(all(unix, not(miri)))]
extern "C" fn fork_done() {
    FORKING.store(false, SeqCst);
}

/// A thread's free lists, one per class, and the bytes of blocks it allocated less those it
/// freed (negative on a thread that frees more): kept without atomics, and merged into
/// `IN_USE` when the thread exits.
struct Local {
    heads: [Cell<*mut Free>; CLASSES],
    lens: [Cell<usize>; CLASSES],
    in_use: Cell<isize>,
}

std::thread_local! {
    static LOCAL: Local = const {
        Local {
            heads: [const { Cell::new(null_mut()) }; CLASSES],
            lens: [const { Cell::new(0) }; CLASSES],
            in_use: Cell::new(0),
        }
    };
}

impl Drop for Local {
    /// Hands the exiting thread's free blocks to the depot, and its count to `IN_USE`.
    fn drop(&mut self) {
        for (c, (head, len)) in self.heads.iter().zip(&self.lens).enumerate() {
            if let Some(first) = NonNull::new(head.replace(null_mut())) {
                let batch = Batch {
                    head: first,
                    len: len.replace(0),
                };
                // During a fork the blocks are lost to reuse: never unsafe, and only for a
                // thread that exits while the process forks.
                let _ = with_depot(c, |depot| depot.push(batch));
            }
        }
        IN_USE.fetch_add(self.in_use.replace(0), Relaxed);
    }
}

impl Local {
    fn pop(&self, c: usize) -> Option<NonNull<Free>> {
        let head = NonNull::new(self.heads[c].get())?;
        // SAFETY: a block on this thread's list is free and ours; its first word was written
        // by the push that put it there.
        self.heads[c].set(unsafe { head.as_ref().next });
        self.lens[c].set(self.lens[c].get() - 1);
        Some(head)
    }

    fn push(&self, c: usize, block: NonNull<Free>) {
        // SAFETY: the block is free and now ours; a block of any class holds a pointer.
        unsafe {
            block.as_ptr().write(Free {
                next: self.heads[c].get(),
            })
        };
        self.heads[c].set(block.as_ptr());
        let len = self.lens[c].get() + 1;
        self.lens[c].set(len);
        if len < 2 * BATCH || FORKING.load(Relaxed) {
            // (During a fork the surplus waits here: the list may grow past 2 * BATCH.)
            return;
        }
        // Leave the blocks after the first BATCH in the depot, so the most recently freed
        // (likely still cached) stay here. They are `len - BATCH` of them: BATCH, or more
        // when a fork held them back.
        let mut last = self.heads[c].get();
        for _ in 1..BATCH {
            // SAFETY: the list holds `len` > BATCH linked blocks.
            last = unsafe { (*last).next };
        }
        // SAFETY: as above; `last` is the BATCH-th block and has a successor.
        let rest = unsafe { std::mem::replace(&mut (*last).next, null_mut()) };
        let head = NonNull::new(rest).expect("a list of 2 * BATCH blocks");
        let batch = Batch {
            head,
            len: len - BATCH,
        };
        if with_depot(c, |depot| depot.push(batch)).is_some() {
            self.lens[c].set(BATCH);
        } else {
            // A fork began since the check above: the rest goes back behind `last`.
            // SAFETY: `last` is still the BATCH-th block of this thread's list.
            unsafe { (*last).next = rest };
        }
    }

    /// Takes a batch from the depot: returns its first block, keeps the rest.
    fn refill(&self, c: usize) -> Option<NonNull<Free>> {
        let Batch { head, len } = with_depot(c, SegQueue::pop).flatten()?;
        // SAFETY: the batch's blocks are free and now ours; the list is empty (we only refill
        // an empty list), so the rest of the batch becomes it.
        self.heads[c].set(unsafe { head.as_ref().next });
        self.lens[c].set(len - 1);
        Some(head)
    }
}

/// The class of blocks for `layout`, if it has one.
fn class(layout: Layout) -> Option<usize> {
    let lines = layout.size().div_ceil(LINE);
    (layout.align() <= LINE && (1..=CLASSES).contains(&lines)).then(|| lines - 1)
}

fn block_bytes(c: usize) -> usize {
    (c + 1) * LINE
}

impl Chunks {
    const fn new(size: usize, align: usize) -> Chunks {
        let Ok(layout) = Layout::from_size_align(size, align) else {
            panic!("an invalid chunk layout")
        };
        Chunks {
            current: AtomicPtr::new(null_mut()),
            reserved: AtomicUsize::new(0),
            layout,
        }
    }

    /// Fresh memory of `bytes` (a multiple of `LINE`, at most a chunk) from the newest chunk,
    /// or from a new one if it is full.
    fn carve(&self, bytes: usize) -> NonNull<u8> {
        let size = self.layout.size();
        loop {
            let current = self.current.load(Acquire);
            // SAFETY: a published chunk lives as long as `self`.
            if let Some(chunk) = unsafe { current.as_ref() } {
                // Relaxed: the atomicity of the add alone makes the ranges disjoint, and the
                // chunk itself was published to us by the acquire above.
                let at = chunk.cursor.fetch_add(bytes, Relaxed);
                if at + bytes <= size {
                    // SAFETY: `at + bytes` is within the chunk.
                    return unsafe { NonNull::new_unchecked(chunk.base.add(at)) };
                }
            }
            // SAFETY: the layout is not zero-sized.
            let Some(base) = NonNull::new(unsafe { sys_alloc(self.layout) }) else {
                handle_alloc_error(self.layout)
            };
            advise_huge_pages(base, size);
            let fresh = Box::into_raw(Box::new(Chunk {
                base: base.as_ptr(),
                // The first block is the caller's.
                cursor: AtomicUsize::new(bytes),
                older: current,
            }));
            // Release: publishes the chunk and its fields. Relaxed on failure: the next round
            // loads the winner's chunk with an acquire of its own.
            match self
                .current
                .compare_exchange(current, fresh, Release, Relaxed)
            {
                Ok(_) => {
                    self.reserved.fetch_add(size, Relaxed);
                    return base;
                }
                Err(_) => {
                    // Another thread replaced the chunk first: ours was never seen by anyone.
                    // SAFETY: `fresh` and `base` were made above, with these layouts, and are
                    // unshared.
                    unsafe {
                        drop(Box::from_raw(fresh));
                        sys_dealloc(base.as_ptr(), self.layout);
                    }
                }
            }
        }
    }
}

/// Only a test's chunks are dropped ([`CHUNKS`] is a static), once its blocks are dead.
impl Drop for Chunks {
    fn drop(&mut self) {
        let mut chunk = *self.current.get_mut();
        while !chunk.is_null() {
            // SAFETY: every chunk on the list was made by `carve` and is freed once, here.
            let Chunk { base, older, .. } = *unsafe { Box::from_raw(chunk) };
            // SAFETY: `base` was allocated with this layout.
            unsafe { sys_dealloc(base, self.layout) };
            chunk = older;
        }
    }
}

/// Asks the kernel to back the chunk with huge pages. Only a hint: where it is refused (THP
/// disabled, or not Linux) the chunk works the same on small pages.
fn advise_huge_pages(base: NonNull<u8>, size: usize) {
    #[cfg(all(target_os = "linux", not(miri)))]
    // SAFETY: `madvise` reads no memory; the range is the chunk just allocated, which we own.
    // Its result is ignored: a refusal changes nothing but the page size.
    unsafe {
        libc::madvise(base.as_ptr().cast(), size, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = (base, size);
}

/// Memory for `layout`, as [`std::alloc::alloc`] gives it: never null (an exhausted system
/// aborts through `handle_alloc_error`).
///
/// # Safety
///
/// `layout` is not zero-sized. The memory is freed, if ever, by [`dealloc`] with the same
/// layout.
pub(super) unsafe fn alloc(layout: Layout) -> *mut u8 {
    let Some(c) = class(layout) else {
        // SAFETY: the caller's contract.
        return unsafe { sys_alloc(layout) };
    };
    let bytes = block_bytes(c);
    // A thread whose locals are already destroyed (a node made by a destructor at thread
    // exit) carves fresh memory and counts it globally.
    let block = LOCAL.try_with(|local| {
        local.in_use.set(local.in_use.get() + bytes as isize);
        local.pop(c).or_else(|| local.refill(c))
    });
    match block {
        Ok(Some(block)) => block.as_ptr().cast(),
        Ok(None) => CHUNKS.carve(bytes).as_ptr(),
        Err(_) => {
            IN_USE.fetch_add(bytes as isize, Relaxed);
            CHUNKS.carve(bytes).as_ptr()
        }
    }
}

/// Frees memory from [`alloc`].
///
/// # Safety
///
/// `ptr` came from [`alloc`] with this `layout`, and is not used again.
pub(super) unsafe fn dealloc(ptr: *mut u8, layout: Layout) {
    let Some(c) = class(layout) else {
        // SAFETY: the caller's contract: it came from `sys_alloc` with this layout.
        return unsafe { sys_dealloc(ptr, layout) };
    };
    let bytes = block_bytes(c) as isize;
    // SAFETY: `alloc` never returns null.
    let block = unsafe { NonNull::new_unchecked(ptr.cast::<Free>()) };
    let pushed = LOCAL.try_with(|local| {
        local.in_use.set(local.in_use.get() - bytes);
        local.push(c, block);
    });
    if pushed.is_err() {
        // A node freed by a destructor at thread exit, after this thread's lists went.
        // SAFETY: the block is free and ours; it becomes a batch of one.
        unsafe { block.as_ptr().write(Free { next: null_mut() }) };
        let batch = Batch {
            head: block,
            len: 1,
        };
        // During a fork the block is lost to reuse (as in `Local::drop`).
        let _ = with_depot(c, |depot| depot.push(batch));
        IN_USE.fetch_sub(bytes, Relaxed);
    }
}

/// The memory of the map nodes of every trie in the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeMemory {
    /// Bytes taken from the system for nodes, and kept: freed nodes are reused, not returned.
    pub reserved: usize,
    /// Bytes in nodes alive now: those of threads that have exited and of the calling thread
    /// are exact; a thread still running counts its nodes only when it exits, so with other
    /// threads running this may be off by what they allocated or freed.
    pub in_use: isize,
}

/// See [`NodeMemory`].
pub fn stats() -> NodeMemory {
    let here = LOCAL.try_with(|l| l.in_use.get()).unwrap_or(0);
    NodeMemory {
        reserved: CHUNKS.reserved.load(Relaxed),
        in_use: IN_USE.load(Relaxed) + here,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(bytes: usize) -> Layout {
        Layout::from_size_align(bytes, 8).unwrap()
    }

    #[test]
    fn blocks_are_lines_of_their_class() {
        assert_eq!(class(layout(1)), Some(0));
        assert_eq!(class(layout(64)), Some(0));
        assert_eq!(class(layout(65)), Some(1));
        assert_eq!(class(layout(536)), Some(8));
        assert_eq!(class(layout(576)), Some(8));
        assert_eq!(class(layout(577)), None);
        assert_eq!(class(Layout::from_size_align(64, 128).unwrap()), None);
    }

    /// Threads racing to carve from chunks barely larger than a block, so that most carves
    /// race the replacement of a full chunk: every block is whole, on a line, inside a chunk,
    /// and no two overlap (each thread fills its blocks with its own byte, checked after all
    /// threads are done).
    #[test]
    fn racing_carves_never_overlap() {
        let chunks = Chunks::new(2 * CLASSES * LINE, LINE);
        let size = chunks.layout.size();
        let per_thread = if cfg!(miri) { 30 } else { 3000 };
        let blocks: Vec<Vec<(usize, usize)>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4u8)
                .map(|t| {
                    let chunks = &chunks;
                    s.spawn(move || {
                        (0..per_thread)
                            .map(|i| {
                                let bytes = block_bytes((i * 7 + usize::from(t)) % CLASSES);
                                let p = chunks.carve(bytes).as_ptr();
                                // SAFETY: `bytes` bytes at `p` are this thread's.
                                unsafe { p.write_bytes(t, bytes) };
                                (p.addr(), bytes)
                            })
                            .collect()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let mut all: Vec<(usize, usize, u8)> = Vec::new();
        for (t, mine) in blocks.iter().enumerate() {
            all.extend(mine.iter().map(|&(p, n)| (p, n, t as u8)));
        }
        all.sort_unstable();
        for w in all.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "two blocks overlap");
        }
        // Every block still holds its thread's byte: none was written by another.
        let mut chunk = chunks.current.load(Acquire);
        let mut bases = Vec::new();
        // SAFETY: the chunks live as long as `chunks`.
        while let Some(c) = unsafe { chunk.as_ref() } {
            bases.push(c.base);
            chunk = c.older;
        }
        for &(p, n, t) in &all {
            assert_eq!(p % LINE, 0);
            let base = bases
                .iter()
                .find(|b| (b.addr()..b.addr() + size).contains(&p))
                .expect("a block outside every chunk");
            // SAFETY: the block lies inside a live chunk (checked above) and was written whole.
            let bytes = unsafe { std::slice::from_raw_parts(base.add(p - base.addr()), n) };
            assert!(
                bytes.iter().all(|&b| b == t),
                "a block was handed out twice"
            );
        }
        assert_eq!(chunks.reserved.load(Relaxed), bases.len() * size);
    }

    /// A block a test thread holds, and may leave to another.
    struct Held(*mut u8, Layout);

    // SAFETY: a block is plain memory, and only its holder uses it.
    unsafe impl Send for Held {}

    /// Blocks alive at once never overlap, freed blocks come back, and a thread's surplus
    /// goes through the depot to another thread: every thread writes its own byte over each
    /// block it holds and checks it is still there before freeing it.
    #[test]
    fn blocks_are_disjoint_across_threads() {
        let rounds = if cfg!(miri) { 40 } else { 4000 };
        let threads: Vec<_> = (0..3u8)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut held: Vec<Held> = Vec::new();
                    let mut x = 0x9e37_79b9_u32 ^ u32::from(t);
                    for i in 0..rounds {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        // Two allocations to a free in the first half, the reverse in the second,
                        // so lists grow past a batch and shrink to empty.
                        let grow = held.is_empty() || (x % 3 != 0) == (i < rounds / 2);
                        if grow {
                            let l = layout(8 + (x as usize % 600));
                            // SAFETY: not zero-sized; freed below with the same layout.
                            let p = unsafe { alloc(l) };
                            // SAFETY: `l.size()` bytes are ours.
                            unsafe { p.write_bytes(t + 1, l.size()) };
                            held.push(Held(p, l));
                        } else {
                            let Held(p, l) = held.swap_remove(x as usize % held.len());
                            // SAFETY: ours, and written whole above.
                            let bytes = unsafe { std::slice::from_raw_parts(p, l.size()) };
                            assert!(bytes.iter().all(|&b| b == t + 1), "a block was shared");
                            // SAFETY: from `alloc` with this layout.
                            unsafe { dealloc(p, l) };
                        }
                    }
                    held
                })
            })
            .collect();
        let left: Vec<_> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        for Held(p, l) in left {
            // SAFETY: from `alloc` with this layout, on another thread, which is fine.
            unsafe { dealloc(p, l) };
        }
    }

    /// A thread's list that grew past two batches while a fork held the depot closed is split
    /// whole when the depot opens: the thread keeps BATCH blocks, the depot gets all the rest,
    /// and the count the thread keeps is the length of its list (a count larger than the list
    /// would make a later split walk off its end).
    #[test]
    fn a_list_grown_during_a_fork_is_split_whole() {
        let l = layout(9 * LINE);
        let c = class(l).unwrap();
        FORKING.store(true, SeqCst);
        // SAFETY: not zero-sized; freed right below with the same layout.
        let blocks: Vec<_> = (0..3 * BATCH + 5).map(|_| unsafe { alloc(l) }).collect();
        for p in blocks {
            // SAFETY: from `alloc` with this layout.
            unsafe { dealloc(p, l) };
        }
        FORKING.store(false, SeqCst);
        // SAFETY: as above; the free is the push that finds the depot open.
        unsafe { dealloc(alloc(l), l) };
        LOCAL.with(|local| {
            let mut n = 0;
            let mut p = local.heads[c].get();
            while !p.is_null() {
                n += 1;
                // SAFETY: a block on this thread's list links to the next.
                p = unsafe { (*p).next };
            }
            assert_eq!(n, local.lens[c].get(), "the count is not the list's length");
            assert!(n < 2 * BATCH, "the surplus stayed here: {n}");
        });
    }

    /// A fork taken while other threads push to and take from the depot: the child finds
    /// every class of the depot whole, takes every batch in it and leaves through `_exit`.
    /// Before the fork handler, a child forked while a thread was inside a push could find a
    /// slot reserved but never written and wait for it forever; the parent counts a child
    /// that has not exited within its deadline as hung.
    #[cfg(all(unix, not(miri)))]
    #[test]
    fn a_child_forked_beside_depot_traffic_finds_it_whole() {
        use std::sync::atomic::AtomicBool;
        use std::time::{Duration, Instant};

        const FORKS: usize = 1000;
        const DEADLINE: Duration = Duration::from_secs(3);
        let stop = AtomicBool::new(false);
        let hung = std::thread::scope(|s| {
            for t in 0..2usize {
                let stop = &stop;
                s.spawn(move || {
                    // Each round frees 4 batches' worth of blocks and takes them back, so
                    // the thread pushes to and takes from the depot several times a round.
                    let l = layout(64 * (1 + t));
                    let mut held = Vec::with_capacity(4 * BATCH);
                    while !stop.load(Relaxed) {
                        // SAFETY: not zero-sized; freed below with the same layout.
                        held.extend((0..4 * BATCH).map(|_| Held(unsafe { alloc(l) }, l)));
                        for Held(p, l) in held.drain(..) {
                            // SAFETY: from `alloc` with this layout.
                            unsafe { dealloc(p, l) };
                        }
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(50));
            let mut hung = 0;
            for _ in 0..FORKS {
                // SAFETY: the child runs only the depot's own code and leaves through `_exit`,
                // never returning into the test harness.
                let pid = unsafe { libc::fork() };
                assert!(pid >= 0, "fork failed");
                if pid == 0 {
                    for depot in &DEPOT {
                        while depot.pop().is_some() {}
                    }
                    // SAFETY: ends the child without running anything of the parent's.
                    unsafe { libc::_exit(0) };
                }
                let start = Instant::now();
                let mut status = 0;
                loop {
                    // SAFETY: `pid` is our child; `status` is ours to write.
                    let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
                    if done == pid {
                        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
                        break;
                    }
                    if start.elapsed() > DEADLINE {
                        hung += 1;
                        // SAFETY: `pid` is our child, not yet reaped.
                        unsafe {
                            libc::kill(pid, libc::SIGKILL);
                            libc::waitpid(pid, &mut status, 0);
                        }
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            stop.store(true, Relaxed);
            hung
        });
        assert_eq!(hung, 0, "{hung} of {FORKS} children hung on the depot");
    }
}
