//! A map node in one allocation: a header (reference count, bitmap, `lent` mask, length), then
//! its slots inline. [`NodeRef`] is its counted reference, as `Arc` would be.
//!
//! Why not `Arc<Node>` with a `Vec` of slots: that is two allocations per node, and every
//! step of a walk loads the node, then its slot array, two dependent misses where the map is
//! cold. In a level of 1,000,000 words a write walks four or five nodes, copies them, and
//! frees the old ones an epoch later: one allocation per node halves the misses of the walk
//! and of the drop, and the calls into the allocator. `Arc<[Slot]>` has no room for the
//! header, and an unsized `Arc` is a fat pointer, which would make every slot 24 bytes.
//!
//! A branch node has a non-zero bitmap with one slot per set bit. A collision node (the 64
//! hash bits exhausted) has a zero bitmap and two or more leaves, which may be more than 32.

#[cfg(loom)]
use std::alloc::{alloc, dealloc};
use std::alloc::{handle_alloc_error, Layout};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{fence, AtomicUsize};

// The loom models check the trie's protocols, not the pool's, and run on loom's threads,
// which the pool's thread-local lists would not know: they take nodes from the global heap.
#[cfg(not(loom))]
use super::pool::{alloc, dealloc};
use super::{prefetch, slot_mask, HashKey, Slot};
use crate::sync::AtomicU32;

/// The start of a node's allocation; its slots follow (see [`NodeRef::layout`]).
#[repr(C)]
pub(super) struct Header<K: HashKey, V> {
    /// References to the node. A plain atomic, as `Arc`'s: the loom models check the protocol
    /// of `lent`, not reference counting.
    count: AtomicUsize,
    /// One bit per slot of a branch node, zero in a collision node.
    bitmap: u32,
    /// The slots this node holds without owning them (bit i: slot i), which its drop must
    /// leave alone: see "Moving instead of counting" in `hamt.rs`. A collision node is never
    /// moved from, but a new one may hold a leaf moved into it, lent until the commit.
    pub(super) lent: AtomicU32,
    len: u32,
    _slots: PhantomData<Slot<K, V>>,
}

/// A counted reference to a map node.
pub(super) struct NodeRef<K: HashKey, V> {
    ptr: NonNull<Header<K, V>>,
    /// Owns the header and slots, for the drop checker.
    _owns: PhantomData<Header<K, V>>,
}

// SAFETY: as for `Arc<T>`: the node is shared read-only (its only mutable parts, `count` and
// `lent`, are atomics), and the last reference, on whichever thread, drops the slots, so the
// node may cross threads when its keys and values may be shared and sent.
unsafe impl<K: HashKey + Send + Sync, V: Send + Sync> Send for NodeRef<K, V> {}
// SAFETY: see `Send`.
unsafe impl<K: HashKey + Send + Sync, V: Send + Sync> Sync for NodeRef<K, V> {}

impl<K: HashKey, V> NodeRef<K, V> {
    /// The allocation of a node of `len` slots, and where its slots start (the same for
    /// every `len`, and folded to a constant by the compiler).
    fn layout(len: usize) -> (Layout, usize) {
        // `len` is at most 32 in a branch node and bounded by the keys of one 64-bit hash in
        // a collision node, so this cannot overflow in practice; if it did, it would panic
        // rather than allocate short.
        Layout::array::<Slot<K, V>>(len)
            .and_then(|slots| Layout::new::<Header<K, V>>().extend(slots))
            .map(|(layout, start)| (layout.pad_to_align(), start))
            .expect("node too large")
    }

    /// A node of `len` slots that `fill` writes.
    ///
    /// # Safety
    ///
    /// `fill` writes all `len` slots, in place, through the pointer it is given to the first.
    /// If it panics, the allocation and what it wrote leak; nothing is dropped twice.
    pub(super) unsafe fn build(
        bitmap: u32,
        lent: u32,
        len: usize,
        fill: impl FnOnce(*mut Slot<K, V>),
    ) -> Self {
        let (layout, start) = Self::layout(len);
        // SAFETY: the layout is never zero-sized: it holds the header.
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<Header<K, V>>()) else {
            handle_alloc_error(layout)
        };
        // SAFETY: `start` is inside the allocation, which has room for `len` slots there.
        fill(unsafe { raw.add(start) }.cast());
        let header = Header {
            count: AtomicUsize::new(1),
            bitmap,
            lent: AtomicU32::new(lent),
            len: u32::try_from(len).expect("node too large"),
            _slots: PhantomData,
        };
        // SAFETY: the header goes at the start of the fresh allocation, which fits it.
        unsafe { ptr.as_ptr().write(header) };
        NodeRef {
            ptr,
            _owns: PhantomData,
        }
    }

    /// A node that owns the slots `slots` yields: exactly `len` of them.
    pub(super) fn from_slots(
        bitmap: u32,
        len: usize,
        slots: impl IntoIterator<Item = Slot<K, V>>,
    ) -> Self {
        // SAFETY: the loop writes `len` slots (the assertion, before the node exists, stops
        // a short iterator with a panic: the allocation and the written slots then leak).
        unsafe {
            Self::build(bitmap, 0, len, |dst| {
                let mut n = 0;
                for slot in slots.into_iter().take(len) {
                    dst.add(n).write(slot);
                    n += 1;
                }
                assert_eq!(n, len, "a node built from too few slots");
            })
        }
    }

    fn header(&self) -> &Header<K, V> {
        // SAFETY: the node is alive while this reference is, and the header was written at
        // construction.
        unsafe { self.ptr.as_ref() }
    }

    /// One bit per slot of a branch node; zero in a collision node.
    pub(super) fn bitmap(&self) -> u32 {
        self.header().bitmap
    }

    /// Whether this is a collision node (the hash bits exhausted).
    pub(super) fn is_collision(&self) -> bool {
        self.header().bitmap == 0
    }

    /// The `lent` mask (see [`Header::lent`]).
    pub(super) fn lent(&self) -> &AtomicU32 {
        &self.header().lent
    }

    /// The node's slots.
    pub(super) fn slots(&self) -> &[Slot<K, V>] {
        // SAFETY: `len` slots were written after the header at construction and are changed
        // only by the drop of the last reference, which this one is not.
        unsafe { std::slice::from_raw_parts(self.slots_ptr(), self.header().len as usize) }
    }

    /// The first slot, with the allocation's own permissions: the drops below move slots out
    /// through it, which a pointer taken from the shared slice of [`slots`](Self::slots) may
    /// not do.
    fn slots_ptr(&self) -> *mut Slot<K, V> {
        // SAFETY: the slots start this far into the allocation (`layout`).
        unsafe { self.ptr.as_ptr().cast::<u8>().add(Self::layout(0).1).cast() }
    }

    /// Asks the CPU to fetch the slot a walk will read next, whose line is unknown until the
    /// header's bitmap is in: the walk's next step then waits for one miss, not two in a row.
    /// The slot's index is at most `bits`, the hash bits of this level, and equal to it in a
    /// full node (as the upper levels of a wide map are); the line of slot `bits` and the one
    /// before cover a nearly full node too. A hint only.
    pub(super) fn prefetch_slot(&self, bits: usize) {
        let base = self.slots_ptr();
        prefetch(base.wrapping_add(bits));
        prefetch(base.wrapping_add(bits.saturating_sub(3)));
    }

    /// The node's address, which names it in [`Moves`](super::Moves).
    pub(super) fn as_ptr(&self) -> *const Header<K, V> {
        self.ptr.as_ptr()
    }

    /// References to the node now; exact only where no other thread can clone or drop one.
    pub(super) fn strong_count(&self) -> usize {
        self.header().count.load(Acquire)
    }

    /// The slots the node owns: all but those `lent` marks.
    fn owned(&self) -> impl Iterator<Item = usize> {
        let len = self.header().len as usize;
        // Acquire: the `commit` that set `lent` happened before the last reference went, and
        // the fence of the caller orders it; acquire costs nothing more here.
        let lent = self.header().lent.load(Acquire);
        let mut owned = !lent & slot_mask(len.min(32), None);
        // Nothing lent: every slot, however many (a collision node may hold more than 32).
        // Lent slots are only ever among the first 32.
        let whole = (lent == 0).then_some(0..len);
        let bits = (lent != 0).then(move || {
            std::iter::from_fn(move || {
                (owned != 0).then(|| {
                    let i = owned.trailing_zeros() as usize;
                    owned &= owned - 1;
                    i
                })
            })
        });
        whole
            .into_iter()
            .flatten()
            .chain(bits.into_iter().flatten())
    }

    /// Frees the node's memory and its header, after its slots were dropped or taken.
    ///
    /// # Safety
    ///
    /// The node has no references left, and each slot it owned is gone already.
    unsafe fn free(ptr: NonNull<Header<K, V>>) {
        // SAFETY: the caller's contract; the header was written at construction and is
        // dropped once, here, before the memory goes with the layout it was allocated with.
        unsafe {
            let len = ptr.as_ref().len as usize;
            std::ptr::drop_in_place(ptr.as_ptr());
            dealloc(ptr.as_ptr().cast(), Self::layout(len).0);
        }
    }

    /// Gives this reference up; if it was the last, hands `f` every pair the node owns, and
    /// those of the nodes below that only it held. Used by the iterative drop of `INode`s.
    pub(super) fn drain_unique(self, f: &mut impl FnMut(K, V)) {
        let this = std::mem::ManuallyDrop::new(self);
        if this.header().count.fetch_sub(1, Release) != 1 {
            return;
        }
        fence(Acquire);
        let base = this.slots_ptr();
        for i in this.owned() {
            // SAFETY: the last reference is gone, so nobody else reads the slot, and each
            // owned slot is read out once; the node is freed below without dropping them. If
            // `f` panics, the rest and the node leak.
            match unsafe { base.add(i).read() } {
                Slot::Leaf { key, value, .. } => f(key, value),
                Slot::Node(n) => n.drain_unique(f),
            }
        }
        // SAFETY: no reference is left and every owned slot was read out above.
        unsafe { Self::free(this.ptr) };
    }
}

impl<K: HashKey, V> Clone for NodeRef<K, V> {
    fn clone(&self) -> Self {
        // Relaxed, as `Arc::clone`: a new reference comes from an existing one, which keeps
        // the node alive meanwhile.
        let old = self.header().count.fetch_add(1, Relaxed);
        if old > isize::MAX as usize {
            // As `Arc`: so many references can only come from leaked clones.
            std::process::abort();
        }
        NodeRef {
            ptr: self.ptr,
            _owns: PhantomData,
        }
    }
}

impl<K: HashKey, V> Drop for NodeRef<K, V> {
    /// Drops the node with its last reference: the slots it owns (not those `lent` marks),
    /// fetching the children first when it owns them all, for the reason `prefetch_children` gives.
    fn drop(&mut self) {
        // Release and acquire, as `Arc`: every use of the node through other references
        // happens before it is freed.
        if self.header().count.fetch_sub(1, Release) != 1 {
            return;
        }
        fence(Acquire);
        let slots = self.slots();
        if self.header().lent.load(Relaxed) == 0 {
            for slot in slots {
                match slot {
                    Slot::Leaf { key, .. } => key.prefetch(),
                    Slot::Node(n) => prefetch(n.as_ptr()),
                }
            }
        }
        let base = self.slots_ptr();
        for i in self.owned() {
            // SAFETY: the last reference is gone, and each owned slot is dropped once; a
            // panicking drop leaks the rest of the node rather than dropping anything twice.
            unsafe { std::ptr::drop_in_place(base.add(i)) };
        }
        // SAFETY: no reference is left and every owned slot was dropped above.
        unsafe { Self::free(self.ptr) };
    }
}
