//! `Trie`: the subscription trie of RabbitMQ, ZeroMQ and the NATS sublist, behind one `RwLock`.
//!
//! Each node stands for a pattern prefix. Its edges are literal words (a hash map), the
//! one-word wildcard and the many-words wildcard; its subscribers are those whose pattern ends
//! there. Nodes live in an arena and point at each other by index, so neither a lookup, a
//! removal nor dropping the trie recurses: a pattern of 100,000 levels costs loops, not stack.
//!
//! A lookup walks the topic one word at a time with the set of nodes reached so far, and
//! deduplicates that set at every position, so each (node, position) pair is visited at most
//! once: `#.#.#.#.#.x` against a long topic stays polynomial.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

use crate::dialect::{Dialect, Pattern, Token, Topic};
use crate::matcher::{dedup_from, Matcher, SubscriberId};

/// Index of a node in the arena.
type NodeId = u32;
/// No node.
const NONE: NodeId = NodeId::MAX;
/// The root's index; the root is never freed.
const ROOT: NodeId = 0;

/// A word trie behind one reader-writer lock.
#[derive(Debug)]
pub struct Trie {
    dialect: Dialect,
    inner: RwLock<Inner>,
}

#[derive(Debug)]
struct Inner {
    nodes: Vec<Node>,
    free: Vec<NodeId>,
    /// Every pattern of each subscriber, so `remove_subscriber` need not walk the trie.
    by_subscriber: HashMap<SubscriberId, HashSet<Pattern>>,
    len: usize,
}

#[derive(Debug, Default)]
struct Node {
    parent: NodeId,
    /// The edge from the parent to this node.
    edge: Edge,
    words: HashMap<Box<str>, NodeId>,
    one: Option<NodeId>,
    many: Option<NodeId>,
    subscribers: HashSet<SubscriberId>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
enum Edge {
    #[default]
    Root,
    Word(Box<str>),
    One,
    Many,
}

impl Node {
    fn is_empty(&self) -> bool {
        self.words.is_empty()
            && self.one.is_none()
            && self.many.is_none()
            && self.subscribers.is_empty()
    }
}

impl Trie {
    /// An empty trie for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        Trie {
            dialect,
            inner: RwLock::new(Inner {
                nodes: vec![Node {
                    parent: NONE,
                    ..Node::default()
                }],
                free: Vec::new(),
                by_subscriber: HashMap::new(),
                len: 0,
            }),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    fn child(&self, node: NodeId, token: &Token) -> Option<NodeId> {
        let n = &self.nodes[node as usize];
        match token {
            Token::Word(w) => n.words.get(w).copied(),
            Token::One => n.one,
            Token::Many => n.many,
        }
    }

    /// The node of `pattern`, if the trie has its path.
    fn find(&self, pattern: &Pattern) -> Option<NodeId> {
        pattern
            .tokens()
            .iter()
            .try_fold(ROOT, |node, t| self.child(node, t))
    }

    fn alloc(&mut self, parent: NodeId, edge: Edge) -> NodeId {
        let node = Node {
            parent,
            edge,
            ..Node::default()
        };
        if let Some(id) = self.free.pop() {
            self.nodes[id as usize] = node;
            id
        } else {
            let id = NodeId::try_from(self.nodes.len()).expect("more than 2^32 trie nodes");
            self.nodes.push(node);
            id
        }
    }

    fn find_or_insert(&mut self, pattern: &Pattern) -> NodeId {
        let mut node = ROOT;
        for token in pattern.tokens() {
            node = match self.child(node, token) {
                Some(next) => next,
                None => {
                    let edge = match token {
                        Token::Word(w) => Edge::Word(w.clone()),
                        Token::One => Edge::One,
                        Token::Many => Edge::Many,
                    };
                    let next = self.alloc(node, edge.clone());
                    let n = &mut self.nodes[node as usize];
                    match edge {
                        Edge::Word(w) => {
                            n.words.insert(w, next);
                        }
                        Edge::One => n.one = Some(next),
                        Edge::Many => n.many = Some(next),
                        Edge::Root => unreachable!(),
                    }
                    next
                }
            };
        }
        node
    }

    /// Frees `node` and then each ancestor left with nothing, bottom-up.
    fn prune(&mut self, mut node: NodeId) {
        while node != ROOT && self.nodes[node as usize].is_empty() {
            let parent = self.nodes[node as usize].parent;
            let edge = std::mem::take(&mut self.nodes[node as usize].edge);
            let p = &mut self.nodes[parent as usize];
            match edge {
                Edge::Word(w) => {
                    p.words.remove(&w);
                }
                Edge::One => p.one = None,
                Edge::Many => p.many = None,
                Edge::Root => unreachable!(),
            }
            self.nodes[node as usize] = Node::default();
            self.free.push(node);
            node = parent;
        }
    }

    fn remove(&mut self, pattern: &Pattern, id: SubscriberId) -> bool {
        let Some(node) = self.find(pattern) else {
            return false;
        };
        if !self.nodes[node as usize].subscribers.remove(&id) {
            return false;
        }
        self.len -= 1;
        self.prune(node);
        true
    }

    /// Appends the subscribers of every pattern matching `topic`, possibly more than once.
    fn collect(&self, dialect: Dialect, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        let zero_or_more = dialect.many_min() == 0;
        let mut live: Vec<NodeId> = Vec::new();
        let mut next: Vec<NodeId> = Vec::new();
        // At the root, a `$` topic takes no wildcard edge.
        if topic.is_dollar() {
            live.push(ROOT);
        } else {
            self.enter(ROOT, zero_or_more, &mut live);
        }
        for (pos, word) in topic.words().iter().enumerate() {
            next.clear();
            for &id in &live {
                let n = &self.nodes[id as usize];
                let wildcards_allowed = !(pos == 0 && topic.is_dollar());
                if n.edge == Edge::Many {
                    // A many-words wildcard absorbs this word too.
                    next.push(id);
                }
                if let Some(&c) = n.words.get(*word) {
                    self.enter(c, zero_or_more, &mut next);
                }
                if wildcards_allowed {
                    if let Some(c) = n.one {
                        self.enter(c, zero_or_more, &mut next);
                    }
                    if let (false, Some(c)) = (zero_or_more, n.many) {
                        // NATS `>`: the wildcard takes this word as its first.
                        next.push(c);
                    }
                }
            }
            next.sort_unstable();
            next.dedup();
            std::mem::swap(&mut live, &mut next);
            if live.is_empty() {
                return;
            }
        }
        for &id in &live {
            out.extend(&self.nodes[id as usize].subscribers);
        }
    }

    /// Adds `node` to the live set, and the chain of wildcards below it when `#` may match
    /// nothing (`a.#.#` reaches both wildcards without reading a word).
    fn enter(&self, mut node: NodeId, zero_or_more: bool, live: &mut Vec<NodeId>) {
        live.push(node);
        if zero_or_more {
            while let Some(many) = self.nodes[node as usize].many {
                live.push(many);
                node = many;
            }
        }
    }
}

impl Matcher for Trie {
    fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn subscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        assert_eq!(
            pattern.dialect(),
            self.dialect,
            "pattern of another dialect"
        );
        let mut inner = self.write();
        let node = inner.find_or_insert(pattern);
        if !inner.nodes[node as usize].subscribers.insert(id) {
            return false;
        }
        inner.len += 1;
        inner
            .by_subscriber
            .entry(id)
            .or_default()
            .insert(pattern.clone());
        true
    }

    fn unsubscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        assert_eq!(
            pattern.dialect(),
            self.dialect,
            "pattern of another dialect"
        );
        let mut inner = self.write();
        if !inner.remove(pattern, id) {
            return false;
        }
        if let Some(patterns) = inner.by_subscriber.get_mut(&id) {
            patterns.remove(pattern);
            if patterns.is_empty() {
                inner.by_subscriber.remove(&id);
            }
        }
        true
    }

    fn lookup_into(&self, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        assert_eq!(topic.dialect(), self.dialect, "topic of another dialect");
        let start = out.len();
        self.read().collect(self.dialect, topic, out);
        dedup_from(out, start);
    }

    fn remove_subscriber(&self, id: SubscriberId) -> usize {
        let mut inner = self.write();
        let Some(patterns) = inner.by_subscriber.remove(&id) else {
            return 0;
        };
        patterns.iter().filter(|p| inner.remove(p, id)).count()
    }

    fn len(&self) -> usize {
        self.read().len
    }

    fn subscriptions(&self) -> Vec<(String, SubscriberId)> {
        let inner = self.read();
        let mut pairs = Vec::with_capacity(inner.len);
        for (&id, patterns) in &inner.by_subscriber {
            pairs.extend(patterns.iter().map(|p| (p.text().to_owned(), id)));
        }
        pairs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live_nodes(t: &Trie) -> usize {
        let inner = t.read();
        inner.nodes.len() - inner.free.len()
    }

    #[test]
    fn unsubscribing_everything_prunes_back_to_the_root() {
        let t = Trie::new(Dialect::Amqp);
        let patterns = ["a.b.c", "a.*.c", "a.#", "#.x.#", "", "a..b", "*"];
        for (i, p) in patterns.iter().enumerate() {
            assert!(t.subscribe_str(p, i as u32).unwrap());
        }
        assert!(live_nodes(&t) > 5);
        for (i, p) in patterns.iter().enumerate() {
            assert!(t.unsubscribe_str(p, i as u32).unwrap());
        }
        assert_eq!(live_nodes(&t), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn remove_subscriber_prunes_and_keeps_others() {
        let t = Trie::new(Dialect::Mqtt);
        t.subscribe_str("a/+/c", 1).unwrap();
        t.subscribe_str("a/#", 1).unwrap();
        t.subscribe_str("a/#", 2).unwrap();
        assert_eq!(t.remove_subscriber(1), 2);
        assert_eq!(t.lookup_str("a/b/c").unwrap(), vec![2]);
        assert_eq!(t.remove_subscriber(2), 1);
        assert_eq!(live_nodes(&t), 1);
    }

    #[test]
    fn freed_nodes_are_reused() {
        let t = Trie::new(Dialect::Nats);
        for round in 0..10 {
            t.subscribe_str("a.b.c.d", round).unwrap();
            t.unsubscribe_str("a.b.c.d", round).unwrap();
        }
        assert!(t.read().nodes.len() <= 5);
    }
}
