//! The NFA a [`LazyDfa`](super::LazyDfa) is built from: a word trie of the patterns, prefixes
//! merged and tails not (the RabbitMQ study's NFA of the bindings), whose nodes are the
//! automaton's positions. A literal word or a one-word wildcard moves from a node to a child;
//! a many-words node loops on every word; entering a node also enters the chain of many-words
//! children below it where `#` may match nothing (the NFA's epsilon moves).
//!
//! Unlike [`Trie`](crate::Trie), removing a pair never frees a node: a DFA state names nodes
//! by index, so an index must keep its meaning while any state holds it. Empty branches are
//! harmless to a lookup (they carry no subscriber); [`Nfa::wants_compaction`] says when they
//! outnumber the live ones, and the owner then rebuilds the trie and drops its DFA states.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::cstrie::WordsHasher;
use crate::dialect::{Dialect, Key};
use crate::matcher::SubscriberId;

type Map<K, V> = HashMap<K, V, WordsHasher>;
type Set<T> = HashSet<T, WordsHasher>;

/// Index of a node.
pub(crate) type NodeId = u32;
/// The root: the empty prefix.
pub(crate) const ROOT: NodeId = 0;

/// The edge from a node's parent to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Edge {
    Root,
    Word(Arc<str>),
    One,
    Many,
}

#[derive(Debug)]
struct Node {
    parent: NodeId,
    edge: Edge,
    words: Map<Arc<str>, NodeId>,
    one: Option<NodeId>,
    many: Option<NodeId>,
    subscribers: Set<SubscriberId>,
    /// Words from the root: the length of the pattern that ends here.
    depth: u32,
}

impl Node {
    fn new(parent: NodeId, edge: Edge, depth: u32) -> Self {
        Node {
            parent,
            edge,
            words: Map::default(),
            one: None,
            many: None,
            subscribers: Set::default(),
            depth,
        }
    }
}

/// What a write changed at one node, for the DFA states that hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// The node gained a literal child on this word: only that word's edge moves.
    Word(Arc<str>),
    /// The node gained a wildcard child: every edge of the states that hold it moves, and
    /// with a many-words child, what entering the node reaches.
    Wildcard,
    /// The node's subscribers changed: `id` was added (`true`) or removed.
    Subscriber(SubscriberId, bool),
}

/// The pattern trie.
#[derive(Debug)]
pub(crate) struct Nfa {
    dialect: Dialect,
    nodes: Vec<Node>,
    by_subscriber: Map<SubscriberId, Vec<NodeId>>,
    len: usize,
    /// Sum of the lengths of the patterns that have subscribers: the size of a trie that
    /// holds only them, which [`Nfa::wants_compaction`] compares the node count with.
    live_words: usize,
}

impl Nfa {
    pub(crate) fn new(dialect: Dialect) -> Self {
        Nfa {
            dialect,
            nodes: vec![Node::new(ROOT, Edge::Root, 0)],
            by_subscriber: Map::default(),
            len: 0,
            live_words: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    fn child(&self, node: NodeId, key: Key<'_>) -> Option<NodeId> {
        let n = &self.nodes[node as usize];
        match key {
            Key::Word(w) => n.words.get(w).copied(),
            Key::One => n.one,
            Key::Many => n.many,
        }
    }

    /// The node of the pattern with these keys, if the trie has its path.
    pub(crate) fn find(&self, keys: &[Key<'_>]) -> Option<NodeId> {
        keys.iter().try_fold(ROOT, |node, &k| self.child(node, k))
    }

    /// Whether `id` is subscribed to the pattern with these keys.
    pub(crate) fn holds(&self, keys: &[Key<'_>], id: SubscriberId) -> bool {
        self.find(keys)
            .is_some_and(|n| self.nodes[n as usize].subscribers.contains(&id))
    }

    /// Adds the pair, which must not be there, and reports each change to `changed`: the
    /// node the new branch hangs from (if the path was not all there) and the pattern's node.
    pub(crate) fn subscribe(
        &mut self,
        keys: &[Key<'_>],
        id: SubscriberId,
        changed: &mut Vec<(NodeId, Change)>,
    ) {
        let mut node = ROOT;
        for &key in keys {
            node = match self.child(node, key) {
                Some(next) => next,
                None => {
                    let next = self.add_child(node, key);
                    changed.push((
                        node,
                        match key {
                            Key::Word(w) => Change::Word(w.into()),
                            Key::One | Key::Many => Change::Wildcard,
                        },
                    ));
                    next
                }
            };
        }
        let n = &mut self.nodes[node as usize];
        let inserted = n.subscribers.insert(id);
        debug_assert!(inserted, "subscribe of a pair already there");
        if n.subscribers.len() == 1 {
            self.live_words += n.depth as usize;
        }
        self.len += 1;
        self.by_subscriber.entry(id).or_default().push(node);
        changed.push((node, Change::Subscriber(id, true)));
    }

    fn add_child(&mut self, parent: NodeId, key: Key<'_>) -> NodeId {
        let id = NodeId::try_from(self.nodes.len()).expect("more than 2^32 NFA nodes");
        let depth = self.nodes[parent as usize].depth + 1;
        let p = &mut self.nodes[parent as usize];
        let edge = match key {
            Key::Word(w) => {
                let w: Arc<str> = w.into();
                p.words.insert(Arc::clone(&w), id);
                Edge::Word(w)
            }
            Key::One => {
                p.one = Some(id);
                Edge::One
            }
            Key::Many => {
                p.many = Some(id);
                Edge::Many
            }
        };
        self.nodes.push(Node::new(parent, edge, depth));
        id
    }

    /// Removes the pair; `false` if it was not there.
    pub(crate) fn unsubscribe(
        &mut self,
        keys: &[Key<'_>],
        id: SubscriberId,
        changed: &mut Vec<(NodeId, Change)>,
    ) -> bool {
        let Some(node) = self.find(keys) else {
            return false;
        };
        if !self.remove(node, id) {
            return false;
        }
        if let Some(ends) = self.by_subscriber.get_mut(&id) {
            if let Some(i) = ends.iter().position(|&n| n == node) {
                ends.swap_remove(i);
            }
            if ends.is_empty() {
                self.by_subscriber.remove(&id);
            }
        }
        changed.push((node, Change::Subscriber(id, false)));
        true
    }

    fn remove(&mut self, node: NodeId, id: SubscriberId) -> bool {
        let n = &mut self.nodes[node as usize];
        if !n.subscribers.remove(&id) {
            return false;
        }
        if n.subscribers.is_empty() {
            self.live_words -= n.depth as usize;
        }
        self.len -= 1;
        true
    }

    /// Removes every pair of `id`; returns how many.
    pub(crate) fn remove_subscriber(
        &mut self,
        id: SubscriberId,
        changed: &mut Vec<(NodeId, Change)>,
    ) -> usize {
        let Some(ends) = self.by_subscriber.remove(&id) else {
            return 0;
        };
        for &node in &ends {
            let removed = self.remove(node, id);
            debug_assert!(removed, "by_subscriber out of step");
            changed.push((node, Change::Subscriber(id, false)));
        }
        ends.len()
    }

    /// Whether empty branches outnumber the live trie enough to rebuild it.
    pub(crate) fn wants_compaction(&self) -> bool {
        self.nodes.len() > 2 * (self.live_words + 1) + 1024
    }

    /// The trie of the same pairs with no empty branch.
    pub(crate) fn compacted(&self) -> Nfa {
        let mut fresh = Nfa::new(self.dialect);
        for (text, id) in self.subscriptions() {
            let keys = self
                .dialect
                .pattern_keys(&text)
                .expect("a stored pattern is valid");
            fresh.subscribe(&keys, id, &mut Vec::new());
        }
        fresh
    }

    /// Every pair.
    pub(crate) fn subscriptions(&self) -> Vec<(String, SubscriberId)> {
        let mut out = Vec::with_capacity(self.len);
        for (i, n) in self.nodes.iter().enumerate() {
            if n.subscribers.is_empty() {
                continue;
            }
            let text = self.pattern_text(i as NodeId);
            out.extend(n.subscribers.iter().map(|&id| (text.clone(), id)));
        }
        out
    }

    fn pattern_text(&self, mut node: NodeId) -> String {
        let d = self.dialect;
        let mut words = Vec::new();
        while node != ROOT {
            let n = &self.nodes[node as usize];
            words.push(match &n.edge {
                Edge::Word(w) => &**w,
                Edge::One => d.one_word(),
                Edge::Many => d.many_words(),
                Edge::Root => unreachable!("only the root has no edge"),
            });
            node = n.parent;
        }
        words.reverse();
        d.join(&words)
    }

    /// Adds `node` and the chain of many-words nodes that `#` matching nothing reaches from
    /// it (`a.#.#` reaches both wildcards without reading a word).
    fn enter(&self, mut node: NodeId, out: &mut Vec<NodeId>) {
        out.push(node);
        if self.dialect.many_min() == 0 {
            while let Some(many) = self.nodes[node as usize].many {
                out.push(many);
                node = many;
            }
        }
    }

    /// The closure of `set` (which may predate a write that added many-words children):
    /// sorted, without duplicates. The start state's set is `[ROOT]`.
    pub(crate) fn closure(&self, set: &[NodeId]) -> Vec<NodeId> {
        let mut out = Vec::with_capacity(set.len());
        for &n in set {
            self.enter(n, &mut out);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The nodes live after reading `word` from the nodes of `closure`, closed, sorted and
    /// without duplicates. `None` stands for a word that no node of `closure` has a literal
    /// child for (the default edge). `wildcards` is false for the first word of an MQTT `$`
    /// topic, which no first-level wildcard matches.
    pub(crate) fn step(
        &self,
        closure: &[NodeId],
        word: Option<&str>,
        wildcards: bool,
    ) -> Vec<NodeId> {
        let zero_or_more = self.dialect.many_min() == 0;
        let mut next = Vec::new();
        for &id in closure {
            let n = &self.nodes[id as usize];
            if n.edge == Edge::Many {
                // A many-words wildcard absorbs this word too.
                next.push(id);
            }
            if let Some(&c) = word.and_then(|w| n.words.get(w)) {
                self.enter(c, &mut next);
            }
            if wildcards {
                if let Some(c) = n.one {
                    self.enter(c, &mut next);
                }
                if let (false, Some(c)) = (zero_or_more, n.many) {
                    // NATS `>`: the wildcard takes this word as its first.
                    next.push(c);
                }
            }
        }
        next.sort_unstable();
        next.dedup();
        next
    }

    /// The subscribers of the nodes of `closure`, each once.
    pub(crate) fn accept(&self, closure: &[NodeId]) -> Vec<SubscriberId> {
        let mut out: Vec<SubscriberId> = Vec::new();
        let mut holders = 0;
        for &id in closure {
            let s = &self.nodes[id as usize].subscribers;
            if !s.is_empty() {
                holders += 1;
                out.extend(s.iter().copied());
            }
        }
        if holders > 1 {
            out.sort_unstable();
            out.dedup();
        }
        out
    }

    /// Whether a node of `closure` other than `except` holds `id`.
    pub(crate) fn held_elsewhere(
        &self,
        closure: &[NodeId],
        except: NodeId,
        id: SubscriberId,
    ) -> bool {
        closure
            .iter()
            .any(|&n| n != except && self.nodes[n as usize].subscribers.contains(&id))
    }

    /// The words the nodes of `closure` have literal children for, each once: the keys of a
    /// state's edges. A word outside them takes the state's default edge.
    pub(crate) fn named_words(&self, closure: &[NodeId]) -> Vec<Arc<str>> {
        let mut seen: Set<&str> = Set::default();
        let mut out = Vec::new();
        for &id in closure {
            for w in self.nodes[id as usize].words.keys() {
                if closure.len() == 1 || seen.insert(w) {
                    out.push(Arc::clone(w));
                }
            }
        }
        out
    }

    /// The NFA simulation of [`Trie`](crate::Trie)'s lookup: appends the subscribers of the
    /// patterns that match `words`, each once. What a lookup falls back to when the DFA's
    /// budget cannot hold its states.
    pub(crate) fn simulate(&self, words: &[&str], dollar: bool, out: &mut Vec<SubscriberId>) {
        let mut live = if dollar {
            vec![ROOT]
        } else {
            self.closure(&[ROOT])
        };
        for (pos, word) in words.iter().enumerate() {
            live = self.step(&live, Some(word), !(pos == 0 && dollar));
            if live.is_empty() {
                return;
            }
        }
        out.extend(self.accept(&live));
    }
}
