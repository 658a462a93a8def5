//! A small persistent hash array mapped trie (Bagwell, "Ideal Hash Trees", 2001) with `Arc`
//! structural sharing: the branch maps and subscriber sets of [`CNode`](super::cnode::CNode).
//!
//! Why it exists: the Ctrie of Prokopec et al. (PPoPP 2012, section 2) bounds a C-node's width
//! by hashing keys across levels, so copying a C-node on every update is cheap. A word trie's
//! levels are the pattern's words instead, so one level may hold 1,000,000 sibling words and one
//! branch 1,000,000 subscribers. Copying such a node per write would be O(n); here an update
//! copies one path of at most 13 nodes of at most 32 slots and shares the rest, so it costs
//! O(log n) and cloning a whole map is O(1) (one `Arc` increment).
//!
//! Invariants:
//! 1. A `Branch` node's `slots` holds exactly one slot per set bit of `bitmap`, in bit order.
//! 2. A `Collision` node holds two or more pairs whose 64-bit hashes are all equal; it only
//!    appears where the hash bits are exhausted.
//! 3. No node below the root is empty, and no node below the root holds a single leaf (removal
//!    pulls such a leaf up into its parent), so the shape depends only on the keys.
//! 4. `len` is the number of pairs.
//!
//! Recursion here is bounded by the hash width (13 levels), never by the data.

use std::borrow::Borrow;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, OnceLock};

/// Bits of hash consumed per level.
const BITS: u32 = 5;
/// Slots per node.
const MASK: u64 = (1 << BITS) - 1;
/// Shift at and beyond which the 64 hash bits are exhausted.
const MAX_SHIFT: u32 = 65;

/// Keys hash to 64 bits through this trait so that `u32` ids can use a cheap bijective mix and
/// words a keyed SipHash.
pub(crate) trait HashKey {
    /// The key's 64-bit hash; equal keys hash equally.
    fn hash64(&self) -> u64;

    /// Asks the CPU to fetch whatever cloning the key will write (an `Arc`'s counter); a hint
    /// only. See [`clone_slots`].
    fn prefetch(&self) {}
}

/// Hints the CPU to fetch the cache line at `p`. Free of effects on the program's state.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: `prefetch` is a hint: it never faults, whatever the address, and changes no
        // memory; SSE, which it needs, is part of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The copy of a node's slots that every update of a persistent node makes.
///
/// Why the prefetch: cloning a slot increments an `Arc` counter in the child's own allocation.
/// In a level of 1,000,000 words those 32 children are cold, and each increment, a locked
/// instruction, waits for its own cache miss before the next begins: a path of four nodes
/// cost 128 misses in a row. Fetching every child first lets the misses overlap.
fn clone_slots<K: HashKey + Clone, V: Clone>(slots: &[Slot<K, V>]) -> Vec<Slot<K, V>> {
    for slot in slots {
        match slot {
            Slot::Leaf { key, .. } => key.prefetch(),
            Slot::Node(n) => prefetch(Arc::as_ptr(n)),
        }
    }
    slots.to_vec()
}

/// One process-wide keyed hasher: every trie and snapshot must agree on word hashes because
/// they share nodes, and a random key keeps crafted word collisions out.
fn words_hasher() -> &'static RandomState {
    static STATE: OnceLock<RandomState> = OnceLock::new();
    STATE.get_or_init(RandomState::new)
}

impl HashKey for str {
    fn hash64(&self) -> u64 {
        words_hasher().hash_one(self)
    }
}

impl HashKey for Arc<str> {
    fn hash64(&self) -> u64 {
        (**self).hash64()
    }
}

impl HashKey for u32 {
    /// splitmix64's finaliser: a bijection, so distinct ids never collide.
    fn hash64(&self) -> u64 {
        let mut z = u64::from(*self).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A persistent map; every update returns a new map sharing all untouched nodes.
pub(crate) struct PMap<K: HashKey, V> {
    root: Option<Arc<Node<K, V>>>,
    len: usize,
}

/// A persistent set of subscriber ids.
pub(crate) type PSet = PMap<u32, ()>;

enum Node<K: HashKey, V> {
    Branch { bitmap: u32, slots: Vec<Slot<K, V>> },
    Collision { pairs: Vec<(K, V)> },
}

enum Slot<K: HashKey, V> {
    Leaf { hash: u64, key: K, value: V },
    Node(Arc<Node<K, V>>),
}

impl<K: HashKey, V> Default for PMap<K, V> {
    fn default() -> Self {
        PMap { root: None, len: 0 }
    }
}

impl<K: HashKey, V> Clone for PMap<K, V> {
    fn clone(&self) -> Self {
        PMap {
            root: self.root.clone(),
            len: self.len,
        }
    }
}

impl<K: HashKey + Clone, V: Clone> Clone for Node<K, V> {
    fn clone(&self) -> Self {
        match self {
            Node::Branch { bitmap, slots } => Node::Branch {
                bitmap: *bitmap,
                slots: slots.clone(),
            },
            Node::Collision { pairs } => Node::Collision {
                pairs: pairs.clone(),
            },
        }
    }
}

impl<K: HashKey + Clone, V: Clone> Clone for Slot<K, V> {
    fn clone(&self) -> Self {
        match self {
            Slot::Leaf { hash, key, value } => Slot::Leaf {
                hash: *hash,
                key: key.clone(),
                value: value.clone(),
            },
            Slot::Node(n) => Slot::Node(Arc::clone(n)),
        }
    }
}

fn bit_of(hash: u64, shift: u32) -> u32 {
    1 << ((hash >> shift) & MASK)
}

fn index_of(bitmap: u32, bit: u32) -> usize {
    (bitmap & (bit - 1)).count_ones() as usize
}

/// What a removal left of a node.
enum Removed<K: HashKey, V> {
    /// The key was not there.
    Absent,
    /// Nothing is left.
    Empty,
    /// One pair is left: the parent inlines it (invariant 3).
    Single(u64, K, V),
    /// A smaller node.
    Node(Node<K, V>),
}

impl<K: HashKey, V> PMap<K, V> {
    /// The number of pairs.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Calls `f` on every pair, in hash order.
    pub(crate) fn for_each<'a>(&'a self, f: &mut impl FnMut(&'a K, &'a V)) {
        if let Some(root) = &self.root {
            root.for_each(f);
        }
    }

    /// Consumes the map, handing `f` every pair held by a node nobody else shares. Pairs in
    /// shared nodes stay with their other owners. Used by the iterative drop of `INode`s.
    pub(crate) fn drain_unique(self, f: &mut impl FnMut(K, V)) {
        if let Some(node) = self.root.and_then(Arc::into_inner) {
            node.drain_unique(f);
        }
    }
}

impl<K: HashKey + Eq + Clone, V: Clone> PMap<K, V> {
    /// The value of `key`.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: HashKey + Eq + ?Sized,
    {
        self.get_key_value(key).map(|(_, v)| v)
    }

    /// The stored key and value of `key`.
    pub(crate) fn get_key_value<Q>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: HashKey + Eq + ?Sized,
    {
        let hash = key.hash64();
        let mut node = self.root.as_deref()?;
        let mut shift = 0;
        loop {
            match node {
                Node::Branch { bitmap, slots } => {
                    let bit = bit_of(hash, shift);
                    if bitmap & bit == 0 {
                        return None;
                    }
                    match &slots[index_of(*bitmap, bit)] {
                        Slot::Leaf {
                            hash: h,
                            key: k,
                            value,
                        } => return (*h == hash && k.borrow() == key).then_some((k, value)),
                        Slot::Node(next) => {
                            node = next;
                            shift += BITS;
                        }
                    }
                }
                Node::Collision { pairs } => {
                    return pairs
                        .iter()
                        .find(|(k, _)| k.borrow() == key)
                        .map(|(k, v)| (k, v))
                }
            }
        }
    }

    /// Whether `key` is in the map.
    pub(crate) fn contains<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: HashKey + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    /// The map with `key` bound to `value`; an equal key already there is replaced too, since
    /// a key may carry data (the C-node's word keys carry their branch).
    pub(crate) fn insert(&self, key: K, value: V) -> Self {
        let hash = key.hash64();
        match &self.root {
            None => PMap {
                root: Some(Arc::new(Node::Branch {
                    bitmap: bit_of(hash, 0),
                    slots: vec![Slot::Leaf { hash, key, value }],
                })),
                len: 1,
            },
            Some(root) => {
                let (node, added) = root.insert(0, hash, key, value);
                PMap {
                    root: Some(Arc::new(node)),
                    len: self.len + usize::from(added),
                }
            }
        }
    }

    /// The map without `key`, or `None` if `key` was not there.
    pub(crate) fn remove<Q>(&self, key: &Q) -> Option<Self>
    where
        K: Borrow<Q>,
        Q: HashKey + Eq + ?Sized,
    {
        let root = self.root.as_ref()?;
        let root = match root.remove(0, key.hash64(), key) {
            Removed::Absent => return None,
            Removed::Empty => None,
            Removed::Single(hash, key, value) => Some(Arc::new(Node::Branch {
                bitmap: bit_of(hash, 0),
                slots: vec![Slot::Leaf { hash, key, value }],
            })),
            Removed::Node(node) => Some(Arc::new(node)),
        };
        Some(PMap {
            root,
            len: self.len - 1,
        })
    }
}

impl<K: HashKey, V> PMap<K, V> {
    /// Checks invariants 1 to 4, and that every leaf sits where its hash puts it.
    pub(crate) fn check(&self) -> Result<(), String> {
        let Some(root) = &self.root else {
            return match self.len {
                0 => Ok(()),
                n => Err(format!("no nodes but len {n}")),
            };
        };
        // (node, shift, the hash bits the path to it fixed)
        let mut stack: Vec<(&Node<K, V>, u32, u64)> = vec![(root, 0, 0)];
        let mut count = 0;
        while let Some((node, shift, prefix)) = stack.pop() {
            let below_root = shift > 0;
            match node {
                Node::Branch { bitmap, slots } => {
                    if bitmap.count_ones() as usize != slots.len() {
                        return Err("bitmap and slots disagree".into());
                    }
                    if below_root && slots.is_empty() {
                        return Err("an empty node below the root".into());
                    }
                    if below_root && matches!(slots.as_slice(), [Slot::Leaf { .. }]) {
                        return Err("a single leaf below the root".into());
                    }
                    let bits = (0..32).filter(|b| bitmap & (1 << b) != 0);
                    for (slot, b) in slots.iter().zip(bits) {
                        let prefix = prefix | (b as u64) << shift;
                        match slot {
                            Slot::Leaf { hash, key, .. } => {
                                count += 1;
                                if *hash != key.hash64() {
                                    return Err("a leaf with a stale hash".into());
                                }
                                let fixed = match shift + BITS {
                                    64.. => u64::MAX,
                                    bits => (1u64 << bits) - 1,
                                };
                                if hash & fixed != prefix {
                                    return Err("a leaf off its hash path".into());
                                }
                            }
                            Slot::Node(n) => stack.push((n, shift + BITS, prefix)),
                        }
                    }
                }
                Node::Collision { pairs } => {
                    if shift < MAX_SHIFT || pairs.len() < 2 {
                        return Err("a collision node that is not one".into());
                    }
                    let h = pairs[0].0.hash64();
                    if pairs.iter().any(|(k, _)| k.hash64() != h) {
                        return Err("a collision node of different hashes".into());
                    }
                    count += pairs.len();
                }
            }
        }
        if count != self.len {
            return Err(format!("{count} pairs but len {}", self.len));
        }
        Ok(())
    }
}

impl<K: HashKey, V> Node<K, V> {
    fn for_each<'a>(&'a self, f: &mut impl FnMut(&'a K, &'a V)) {
        match self {
            Node::Branch { slots, .. } => {
                for slot in slots {
                    match slot {
                        Slot::Leaf { key, value, .. } => f(key, value),
                        Slot::Node(n) => n.for_each(f),
                    }
                }
            }
            Node::Collision { pairs } => pairs.iter().for_each(|(k, v)| f(k, v)),
        }
    }

    fn drain_unique(mut self, f: &mut impl FnMut(K, V)) {
        match &mut self {
            Node::Branch { slots, .. } => {
                for slot in std::mem::take(slots) {
                    match slot {
                        Slot::Leaf { key, value, .. } => f(key, value),
                        Slot::Node(n) => {
                            if let Some(n) = Arc::into_inner(n) {
                                n.drain_unique(f);
                            }
                        }
                    }
                }
            }
            Node::Collision { pairs } => {
                std::mem::take(pairs).into_iter().for_each(|(k, v)| f(k, v))
            }
        }
    }
}

impl<K: HashKey, V> Drop for Node<K, V> {
    /// Fetches the children before the slots are dropped, for the reason `clone_slots` gives:
    /// each drop decrements a counter in a child that is cold in a wide map.
    fn drop(&mut self) {
        if let Node::Branch { slots, .. } = self {
            for slot in slots.iter() {
                match slot {
                    Slot::Leaf { key, .. } => key.prefetch(),
                    Slot::Node(n) => prefetch(Arc::as_ptr(n)),
                }
            }
        }
    }
}

impl<K: HashKey + Eq + Clone, V: Clone> Node<K, V> {
    /// Two leaves with different keys, as a node at `shift`.
    fn pair(shift: u32, a: (u64, K, V), b: (u64, K, V)) -> Self {
        if shift >= MAX_SHIFT {
            return Node::Collision {
                pairs: vec![(a.1, a.2), (b.1, b.2)],
            };
        }
        let (ba, bb) = (bit_of(a.0, shift), bit_of(b.0, shift));
        if ba == bb {
            return Node::Branch {
                bitmap: ba,
                slots: vec![Slot::Node(Arc::new(Node::pair(shift + BITS, a, b)))],
            };
        }
        let leaf = |(hash, key, value)| Slot::Leaf { hash, key, value };
        let slots = if ba < bb {
            vec![leaf(a), leaf(b)]
        } else {
            vec![leaf(b), leaf(a)]
        };
        Node::Branch {
            bitmap: ba | bb,
            slots,
        }
    }

    /// A copy of this node with the pair added; `true` if the key is new.
    fn insert(&self, shift: u32, hash: u64, key: K, value: V) -> (Self, bool) {
        match self {
            Node::Branch { bitmap, slots } => {
                let bit = bit_of(hash, shift);
                let at = index_of(*bitmap, bit);
                let mut slots = clone_slots(slots);
                if bitmap & bit == 0 {
                    slots.insert(at, Slot::Leaf { hash, key, value });
                    return (
                        Node::Branch {
                            bitmap: bitmap | bit,
                            slots,
                        },
                        true,
                    );
                }
                let added = match &mut slots[at] {
                    Slot::Leaf {
                        hash: h,
                        key: k,
                        value: v,
                    } => {
                        if *h == hash && *k == key {
                            *k = key;
                            *v = value;
                            false
                        } else {
                            let old = (*h, k.clone(), v.clone());
                            let node = Node::pair(shift + BITS, old, (hash, key, value));
                            slots[at] = Slot::Node(Arc::new(node));
                            true
                        }
                    }
                    Slot::Node(n) => {
                        let (node, added) = n.insert(shift + BITS, hash, key, value);
                        slots[at] = Slot::Node(Arc::new(node));
                        added
                    }
                };
                (
                    Node::Branch {
                        bitmap: *bitmap,
                        slots,
                    },
                    added,
                )
            }
            Node::Collision { pairs } => {
                let mut pairs = pairs.clone();
                if let Some(p) = pairs.iter_mut().find(|(k, _)| *k == key) {
                    *p = (key, value);
                    (Node::Collision { pairs }, false)
                } else {
                    pairs.push((key, value));
                    (Node::Collision { pairs }, true)
                }
            }
        }
    }

    fn remove<Q>(&self, shift: u32, hash: u64, key: &Q) -> Removed<K, V>
    where
        K: Borrow<Q>,
        Q: HashKey + Eq + ?Sized,
    {
        match self {
            Node::Branch { bitmap, slots } => {
                let bit = bit_of(hash, shift);
                if bitmap & bit == 0 {
                    return Removed::Absent;
                }
                let at = index_of(*bitmap, bit);
                let replacement = match &slots[at] {
                    Slot::Leaf {
                        hash: h, key: k, ..
                    } => {
                        if *h != hash || k.borrow() != key {
                            return Removed::Absent;
                        }
                        None
                    }
                    Slot::Node(n) => match n.remove(shift + BITS, hash, key) {
                        Removed::Absent => return Removed::Absent,
                        Removed::Empty => None,
                        Removed::Single(hash, key, value) => Some(Slot::Leaf { hash, key, value }),
                        Removed::Node(node) => Some(Slot::Node(Arc::new(node))),
                    },
                };
                let mut slots = clone_slots(slots);
                let mut bitmap = *bitmap;
                match replacement {
                    Some(slot) => slots[at] = slot,
                    None => {
                        slots.remove(at);
                        bitmap &= !bit;
                    }
                }
                match slots.as_slice() {
                    [] => Removed::Empty,
                    [Slot::Leaf { hash, key, value }] => {
                        Removed::Single(*hash, key.clone(), value.clone())
                    }
                    _ => Removed::Node(Node::Branch { bitmap, slots }),
                }
            }
            Node::Collision { pairs } => {
                let Some(at) = pairs.iter().position(|(k, _)| k.borrow() == key) else {
                    return Removed::Absent;
                };
                let mut pairs = pairs.clone();
                pairs.remove(at);
                if pairs.len() == 1 {
                    let (k, v) = pairs.pop().expect("one pair left");
                    Removed::Single(hash, k, v)
                } else {
                    Removed::Node(Node::Collision { pairs })
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A key whose hash the test chooses, to force collisions.
    #[derive(Clone, PartialEq, Eq, Debug)]
    struct Fixed(u64, u32);
    impl HashKey for Fixed {
        fn hash64(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn persistent_map_equals_a_hash_map_and_old_versions_stay() {
        let mut model: HashMap<u32, u32> = HashMap::new();
        let mut m: PMap<u32, u32> = PMap::default();
        let mut versions = Vec::new();
        let mut x: u32 = 7;
        for step in 0..20_000u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let k = (x >> 8) % 3000;
            if x % 3 == 0 {
                let removed = m.remove(&k);
                assert_eq!(removed.is_some(), model.remove(&k).is_some());
                if let Some(r) = removed {
                    m = r;
                }
            } else {
                m = m.insert(k, step);
                model.insert(k, step);
            }
            assert_eq!(m.len(), model.len());
            if step % 2000 == 0 {
                versions.push((m.clone(), model.clone()));
            }
        }
        for (m, model) in versions {
            let mut seen = 0;
            m.for_each(&mut |k, v| {
                assert_eq!(model.get(k), Some(v));
                seen += 1;
            });
            assert_eq!(seen, model.len());
        }
    }

    #[test]
    fn full_hash_collisions_and_shared_prefixes() {
        let mut m: PMap<Fixed, ()> = PMap::default();
        let keys: Vec<Fixed> = (0..50)
            .map(|i| Fixed(if i % 2 == 0 { 42 } else { 42 | (1 << 63) }, i))
            .collect();
        for k in &keys {
            m = m.insert(k.clone(), ());
        }
        assert_eq!(m.len(), 50);
        for k in &keys {
            assert!(m.contains(k));
        }
        for k in &keys {
            m = m.remove(k).expect("present");
            assert!(!m.contains(k));
        }
        assert!(m.is_empty());
    }
}
