//! A least-recently-used map from topic to value: a `HashMap` from key to slot and a slab of
//! nodes in one doubly linked list by index (most recent at the head), so `get`, `insert` and
//! eviction are O(1) and no node is allocated after the slab has grown to capacity.
//!
//! Not thread-safe by itself: [`super::index`] puts each shard behind a `Mutex`.

use std::collections::HashMap;
use std::sync::Arc;

/// No node.
const NIL: u32 = u32::MAX;

struct Node<V> {
    key: Arc<str>,
    value: V,
    prev: u32,
    next: u32,
}

/// A bounded map that evicts its least recently used entry when full.
pub(crate) struct Lru<V> {
    map: HashMap<Arc<str>, u32>,
    nodes: Vec<Node<V>>,
    head: u32,
    tail: u32,
    capacity: usize,
}

impl<V> Lru<V> {
    /// An empty map holding at most `capacity` entries (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, NIL as usize - 1);
        Lru {
            map: HashMap::new(),
            nodes: Vec::new(),
            head: NIL,
            tail: NIL,
            capacity,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The value of `key`, now the most recently used.
    pub(crate) fn get(&mut self, key: &str) -> Option<&V> {
        let i = *self.map.get(key)?;
        self.unlink(i);
        self.push_front(i);
        Some(&self.nodes[i as usize].value)
    }

    /// Inserts `key` (which must be absent) as the most recently used; returns `true` if the
    /// least recently used entry was evicted to make room.
    pub(crate) fn insert(&mut self, key: &str, value: V) -> bool {
        debug_assert!(!self.map.contains_key(key));
        let key: Arc<str> = key.into();
        if self.map.len() >= self.capacity {
            let i = self.tail;
            self.unlink(i);
            let node = &mut self.nodes[i as usize];
            self.map.remove(&node.key);
            node.key = key.clone();
            node.value = value;
            self.map.insert(key, i);
            self.push_front(i);
            true
        } else {
            let i = self.nodes.len() as u32;
            self.nodes.push(Node {
                key: key.clone(),
                value,
                prev: NIL,
                next: NIL,
            });
            self.map.insert(key, i);
            self.push_front(i);
            false
        }
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let n = &self.nodes[i as usize];
            (n.prev, n.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
    }

    fn push_front(&mut self, i: u32) {
        let old = self.head;
        {
            let n = &mut self.nodes[i as usize];
            n.prev = NIL;
            n.next = old;
        }
        if old == NIL {
            self.tail = i;
        } else {
            self.nodes[old as usize].prev = i;
        }
        self.head = i;
    }
}

#[cfg(test)]
mod tests {
    use super::Lru;

    #[test]
    fn evicts_the_least_recently_used() {
        let mut lru = Lru::new(2);
        assert!(!lru.insert("a", 1));
        assert!(!lru.insert("b", 2));
        assert_eq!(lru.get("a"), Some(&1)); // b is now the least recent
        assert!(lru.insert("c", 3));
        assert_eq!(lru.get("b"), None);
        assert_eq!(lru.get("a"), Some(&1));
        assert_eq!(lru.get("c"), Some(&3));
        assert_eq!(lru.len(), 2);
        assert!(lru.insert("d", 4)); // evicts a
        assert_eq!(lru.get("a"), None);
        assert_eq!(lru.get("d"), Some(&4));
    }

    #[test]
    fn capacity_one_keeps_the_last() {
        let mut lru = Lru::new(1);
        lru.insert("a", 1);
        assert!(lru.insert("b", 2));
        assert_eq!(lru.get("a"), None);
        assert_eq!(lru.get("b"), Some(&2));
    }
}
