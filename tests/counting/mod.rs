//! A global allocator that counts live bytes and their peak, and a collection of
//! crossbeam-epoch's garbage, for the tests that check nothing leaks. Each test binary that
//! uses it registers it itself:
//! `#[global_allocator] static A: counting::Counting = counting::Counting;`.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

pub struct Counting;

/// Bytes allocated and not yet freed.
pub static LIVE: AtomicIsize = AtomicIsize::new(0);
/// The highest `LIVE` since a test last reset it.
pub static PEAK: AtomicIsize = AtomicIsize::new(0);

// SAFETY: delegates to `System` and only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        PEAK.fetch_max(now + layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let grow = new_size as isize - layout.size() as isize;
        let now = LIVE.fetch_add(grow, Ordering::Relaxed);
        PEAK.fetch_max(now + grow, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Live bytes as these tests count them: the heap's, less the chunks topicmatch keeps for
/// its map nodes (they are reserved once and reused, never returned), plus the nodes alive in
/// them. Exact on the calling thread once every other thread that used a trie has exited.
pub fn live() -> isize {
    let nodes = topicmatch::cstrie::node_memory();
    LIVE.load(Ordering::Relaxed) - nodes.reserved as isize + nodes.in_use
}

/// Pins and flushes until crossbeam-epoch has freed the garbage retired so far: each flush
/// tries to advance the epoch and frees what is two epochs old (and the `CSTrie` main nodes
/// this thread's writes retired, which this thread frees: `cstrie::free_retired`). Then it
/// waits, a few milliseconds at a time, until a round frees nothing more: garbage that threads
/// just joined left behind can stay out of reach of the first flushes (seen as up to 390 KB of
/// a CSTrie soak's garbage, freed after one 5 ms pause), which made a reading land above or
/// below the level the heap settles at.
pub fn collect_garbage() {
    let flush = || {
        for _ in 0..2048 {
            crossbeam_epoch::pin().flush();
        }
        // What this thread's writes retired waits for the thread to free it once released.
        topicmatch::cstrie::free_retired();
    };
    flush();
    let mut last = live();
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        flush();
        let now = live();
        if now == last {
            return;
        }
        last = now;
    }
}
