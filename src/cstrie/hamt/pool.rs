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
//! The memory is not given back to the system: freed blocks wait for the next node of their
//! class, as in most allocators. [`stats`] tells how much is reserved and how much is in use.
//! Nodes larger than the largest class (collision nodes of more than 34 keys) go to the global
//! allocator.

use std::alloc::{alloc as sys_alloc, dealloc as sys_dealloc, handle_alloc_error, Layout};
use std::cell::Cell;
use std::ptr::{null_mut, NonNull};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::atomic::{AtomicIsize, AtomicPtr, AtomicUsize};

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

/// A chunk of blocks. Chunks are never freed: a block may be anywhere in any of them.
struct Chunk {
    base: *mut u8,
    /// Bytes handed out; past `CHUNK` the chunk is full (several threads may overshoot).
    cursor: AtomicUsize,
    /// The chunk made before this one, so that every chunk stays reachable.
    _older: *const Chunk,
}

/// The chunk blocks are carved from.
static CURRENT: AtomicPtr<Chunk> = AtomicPtr::new(null_mut());
/// Bytes in chunks.
static RESERVED: AtomicUsize = AtomicUsize::new(0);
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
        for ((head, len), depot) in self.heads.iter().zip(&self.lens).zip(&DEPOT) {
            if let Some(head) = NonNull::new(head.replace(null_mut())) {
                depot.push(Batch {
                    head,
                    len: len.replace(0),
                });
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
        if len < 2 * BATCH {
            return;
        }
        // Leave a batch in the depot: the BATCH blocks after the first BATCH, so the most
        // recently freed (likely still cached) stay here.
        let mut last = self.heads[c].get();
        for _ in 1..BATCH {
            // SAFETY: the list holds `len` > BATCH linked blocks.
            last = unsafe { (*last).next };
        }
        // SAFETY: as above; `last` is the BATCH-th block and has a successor.
        let rest = unsafe { std::mem::replace(&mut (*last).next, null_mut()) };
        let head = NonNull::new(rest).expect("a list of 2 * BATCH blocks");
        self.lens[c].set(len - BATCH);
        DEPOT[c].push(Batch { head, len: BATCH });
    }

    /// Takes a batch from the depot: returns its first block, keeps the rest.
    fn refill(&self, c: usize) -> Option<NonNull<Free>> {
        let Batch { head, len } = DEPOT[c].pop()?;
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

/// Fresh memory of `bytes` (a multiple of `LINE`, at most a chunk) from the current chunk, or
/// from a new one if it is full.
fn carve(bytes: usize) -> NonNull<u8> {
    loop {
        let current = CURRENT.load(Acquire);
        // SAFETY: a published chunk is never freed.
        if let Some(chunk) = unsafe { current.as_ref() } {
            // Relaxed: the atomicity of the add alone makes the ranges disjoint, and the
            // chunk itself was published by the acquire above.
            let at = chunk.cursor.fetch_add(bytes, Relaxed);
            if at + bytes <= CHUNK {
                // SAFETY: `at + bytes` is within the chunk.
                return unsafe { NonNull::new_unchecked(chunk.base.add(at)) };
            }
        }
        let layout = Layout::from_size_align(CHUNK, CHUNK_ALIGN).expect("a valid chunk layout");
        // SAFETY: the layout is not zero-sized.
        let Some(base) = NonNull::new(unsafe { sys_alloc(layout) }) else {
            handle_alloc_error(layout)
        };
        advise_huge_pages(base);
        let fresh = Box::into_raw(Box::new(Chunk {
            base: base.as_ptr(),
            // The first block is the caller's.
            cursor: AtomicUsize::new(bytes),
            _older: current,
        }));
        // AcqRel: publishes the chunk to threads that load it; acquires nothing we read, but
        // a failed exchange must not be reordered before our reads of `current`.
        match CURRENT.compare_exchange(current, fresh, AcqRel, Acquire) {
            Ok(_) => {
                RESERVED.fetch_add(CHUNK, Relaxed);
                return base;
            }
            Err(_) => {
                // Another thread replaced the chunk first: ours was never seen by anyone.
                // SAFETY: `fresh` and `base` were made above, with these layouts, and are
                // unshared.
                unsafe {
                    drop(Box::from_raw(fresh));
                    sys_dealloc(base.as_ptr(), layout);
                }
            }
        }
    }
}

/// Asks the kernel to back the chunk with huge pages. Only a hint: where it is refused (THP
/// disabled, or not Linux) the chunk works the same on small pages.
fn advise_huge_pages(base: NonNull<u8>) {
    #[cfg(all(target_os = "linux", not(miri)))]
    // SAFETY: `madvise` reads no memory; the range is the chunk just allocated, which we own.
    // Its result is ignored: a refusal changes nothing but the page size.
    unsafe {
        libc::madvise(base.as_ptr().cast(), CHUNK, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = base;
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
        Ok(None) => carve(bytes).as_ptr(),
        Err(_) => {
            IN_USE.fetch_add(bytes as isize, Relaxed);
            carve(bytes).as_ptr()
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
        DEPOT[c].push(Batch {
            head: block,
            len: 1,
        });
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
        reserved: RESERVED.load(Relaxed),
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

    /// A block a thread leaves to another.
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
                    let mut held: Vec<(*mut u8, Layout)> = Vec::new();
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
                            held.push((p, l));
                        } else {
                            let (p, l) = held.swap_remove(x as usize % held.len());
                            // SAFETY: ours, and written whole above.
                            let bytes = unsafe { std::slice::from_raw_parts(p, l.size()) };
                            assert!(bytes.iter().all(|&b| b == t + 1), "a block was shared");
                            // SAFETY: from `alloc` with this layout.
                            unsafe { dealloc(p, l) };
                        }
                    }
                    held.into_iter()
                        .map(|(p, l)| Held(p, l))
                        .collect::<Vec<_>>()
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
}
