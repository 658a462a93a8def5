//! [`TopicStore`]: values kept per topic, found by a filter. What an MQTT broker needs for
//! retained messages (MQTT 5 §3.3.1.3: the last message published with the retain flag is kept
//! per topic, and a client that subscribes to `sensors/+/temp` receives every kept message
//! whose topic that filter matches), and what a NATS or AMQP service needs to ask "which of my
//! known subjects does this pattern cover".
//!
//! The lookup runs the other way from a matcher's: the stored keys are topics and the question
//! is a pattern. The topics are kept in a trie of their words, and [`TopicStore::matching`]
//! walks it with the pattern: a literal word follows one edge, a one-word wildcard every edge,
//! and a multi-word wildcard every path below. Each (trie node, pattern position) pair is
//! visited at most once, so the work grows with the nodes the filter can reach and the answer,
//! not with the store, and no pattern makes it exponential (AMQP's `#.#.#.x` included).
//!
//! One reader-writer lock guards the trie: lookups share it, a write takes it alone for one
//! path. Values are cloned out, so a caller never holds the lock.

use std::collections::HashSet;
use std::sync::RwLock;

use smol_str::SmolStr;

use crate::dialect::{Dialect, Pattern, Token, Topic};

type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A node of the trie: the value of the topic that ends here, and the words below.
struct Node<V> {
    value: Option<V>,
    children: Children<V>,
}

impl<V> Node<V> {
    fn new() -> Self {
        Node {
            value: None,
            children: Children::Few(Vec::new()),
        }
    }
}

/// Up to this many words below a node are kept in a list, searched in order. (Words of up to
/// 23 bytes are kept inline, `SmolStr`.)
const FEW: usize = 8;

/// The words below a node. Most nodes of a store of topics have one word below them or none
/// (`sensors/<site>/<device>/temp`: each device has one), and a hash map per node cost
/// about 485 bytes per stored topic at 1,000,000 topics where a short list costs a fraction.
enum Children<V> {
    Few(Vec<(SmolStr, Node<V>)>),
    Many(Map<SmolStr, Node<V>>),
}

impl<V> Children<V> {
    fn get_key_value(&self, w: &str) -> Option<(&str, &Node<V>)> {
        match self {
            Children::Few(v) => v.iter().find(|(k, _)| **k == *w).map(|(k, n)| (&**k, n)),
            Children::Many(m) => m.get_key_value(w).map(|(k, n)| (&**k, n)),
        }
    }

    fn get_mut(&mut self, w: &str) -> Option<&mut Node<V>> {
        match self {
            Children::Few(v) => v.iter_mut().find(|(k, _)| **k == *w).map(|(_, n)| n),
            Children::Many(m) => m.get_mut(w),
        }
    }

    /// The node below `w`, made if there is none.
    fn get_or_insert(&mut self, w: &str) -> &mut Node<V> {
        if let Children::Few(v) = self {
            if v.len() == FEW && !v.iter().any(|(k, _)| **k == *w) {
                *self = Children::Many(std::mem::take(v).into_iter().collect());
            }
        }
        match self {
            Children::Few(v) => match v.iter().position(|(k, _)| **k == *w) {
                Some(i) => &mut v[i].1,
                None => {
                    // Exactly one more: a first push would reserve room for four.
                    v.reserve_exact(1);
                    v.push((w.into(), Node::new()));
                    &mut v.last_mut().expect("just pushed").1
                }
            },
            Children::Many(m) => m.entry(w.into()).or_insert_with(Node::new),
        }
    }

    fn remove(&mut self, w: &str) {
        match self {
            Children::Few(v) => v.retain(|(k, _)| **k != *w),
            Children::Many(m) => {
                m.remove(w);
            }
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Children::Few(v) => v.is_empty(),
            Children::Many(m) => m.is_empty(),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = (&str, &Node<V>)> + '_> {
        match self {
            Children::Few(v) => Box::new(v.iter().map(|(k, n)| (&**k, n))),
            Children::Many(m) => Box::new(m.iter().map(|(k, n)| (&**k, n))),
        }
    }
}

/// Values kept per topic of one dialect, found by topic or by a pattern that matches topics.
pub struct TopicStore<V> {
    dialect: Dialect,
    inner: RwLock<Inner<V>>,
}

struct Inner<V> {
    root: Node<V>,
    len: usize,
}

impl<V: Clone> TopicStore<V> {
    /// An empty store for topics of `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        TopicStore {
            dialect,
            inner: RwLock::new(Inner {
                root: Node::new(),
                len: 0,
            }),
        }
    }

    /// The dialect of its topics and patterns.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner<V>> {
        // A panic while holding the lock leaves the trie whole (every write is one insertion
        // or removal on a path), so a poisoned lock is still a valid store.
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner<V>> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `value` for `topic`; returns the value it replaces.
    ///
    /// # Panics
    ///
    /// If the topic is of another dialect.
    pub fn set(&self, topic: &Topic<'_>, value: V) -> Option<V> {
        assert_eq!(topic.dialect(), self.dialect, "topic of another dialect");
        let mut inner = self.write();
        let mut node = &mut inner.root;
        for &w in topic.words() {
            node = node.children.get_or_insert(w);
        }
        let old = node.value.replace(value);
        if old.is_none() {
            inner.len += 1;
        }
        old
    }

    /// The value kept for `topic`.
    pub fn get(&self, topic: &Topic<'_>) -> Option<V> {
        assert_eq!(topic.dialect(), self.dialect, "topic of another dialect");
        let inner = self.read();
        let mut node = &inner.root;
        for &w in topic.words() {
            node = node.children.get_key_value(w)?.1;
        }
        node.value.clone()
    }

    /// Removes the value of `topic` and returns it; the path of nodes it alone used goes too.
    pub fn delete(&self, topic: &Topic<'_>) -> Option<V> {
        assert_eq!(topic.dialect(), self.dialect, "topic of another dialect");
        let mut inner = self.write();
        let old = remove(&mut inner.root, topic.words())?;
        inner.len -= 1;
        Some(old)
    }

    /// The number of topics with a value.
    pub fn len(&self) -> usize {
        self.read().len
    }

    /// Whether no topic has a value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every `(topic, value)` pair, in no particular order.
    pub fn items(&self) -> Vec<(String, V)> {
        let inner = self.read();
        let mut walk = Walk::new(&[], self.dialect);
        walk.subtree(&inner.root);
        walk.out
    }

    /// Every `(topic, value)` pair whose topic `pattern` matches, each once, in no particular
    /// order: the retained messages a new subscription receives.
    ///
    /// # Panics
    ///
    /// If the pattern is of another dialect.
    pub fn matching(&self, pattern: &Pattern) -> Vec<(String, V)> {
        assert_eq!(
            pattern.dialect(),
            self.dialect,
            "pattern of another dialect"
        );
        let inner = self.read();
        let mut walk = Walk::new(pattern.tokens(), self.dialect);
        walk.visit(&inner.root, 0, 0);
        walk.out
    }
}

/// Removes the value at the end of `words` below `node`, and the nodes left with neither a
/// value nor children.
fn remove<V>(node: &mut Node<V>, words: &[&str]) -> Option<V> {
    let Some((first, rest)) = words.split_first() else {
        return node.value.take();
    };
    let child = node.children.get_mut(first)?;
    let old = remove(child, rest)?;
    if child.value.is_none() && child.children.is_empty() {
        node.children.remove(first);
    }
    Some(old)
}

/// One walk of the trie by a pattern.
struct Walk<'n, 'p, V> {
    tokens: &'p [Token],
    dialect: Dialect,
    skip_dollar: bool,
    /// Whether the pattern has a multi-word wildcard before its end: the one token that can
    /// reach a (node, position) pair by two paths, or a node inside a subtree gathered whole.
    many: bool,
    /// The (node, position) pairs visited: each once, which bounds the walk and keeps a topic
    /// that two paths of the pattern reach from being answered twice.
    seen: HashSet<(*const Node<V>, usize)>,
    path: Vec<&'n str>,
    out: Vec<(String, V)>,
}

impl<'n, 'p, V: Clone> Walk<'n, 'p, V> {
    fn new(tokens: &'p [Token], dialect: Dialect) -> Self {
        Walk {
            tokens,
            dialect,
            // MQTT: a first-level wildcard does not match a topic whose first word starts
            // with `$` (MQTT 5 §4.7.2).
            skip_dollar: dialect.has_dollar_rule()
                && matches!(tokens.first(), Some(Token::One | Token::Many)),
            many: tokens
                .split_last()
                .is_some_and(|(_, init)| init.contains(&Token::Many)),
            seen: HashSet::new(),
            path: Vec::new(),
            out: Vec::new(),
        }
    }

    /// Visits `node`, at `depth` words from the root, with the first `i` tokens matched.
    fn visit(&mut self, node: &'n Node<V>, i: usize, depth: usize) {
        // Without a multi-word wildcard every pair is reached by one path only.
        if self.many && !self.seen.insert((node as *const Node<V>, i)) {
            return;
        }
        let Some(token) = self.tokens.get(i) else {
            // (AMQP's empty topic is a topic; MQTT and NATS have none, and their root holds
            // no value.)
            self.emit(node);
            return;
        };
        match token {
            Token::Word(w) => {
                if let Some((k, child)) = node.children.get_key_value(w) {
                    self.step(k, child, i + 1, depth);
                }
            }
            Token::One => {
                for (k, child) in node.children.iter() {
                    if self.wildcard_takes(k, depth) {
                        self.step(k, child, i + 1, depth);
                    }
                }
            }
            Token::Many if i + 1 == self.tokens.len() && !self.many => {
                // A final `#` or `>` that no other multi-word wildcard precedes: every node
                // it reaches is at the same depth, so their subtrees are disjoint, and each
                // is gathered whole, with no pair to remember.
                if self.dialect.many_min() == 0 {
                    self.emit(node);
                }
                for (k, child) in node.children.iter() {
                    if self.wildcard_takes(k, depth) {
                        self.path.push(k);
                        self.subtree(child);
                        self.path.pop();
                    }
                }
            }
            Token::Many => {
                if self.dialect.many_min() == 0 {
                    // The wildcard matches no word here.
                    self.visit(node, i + 1, depth);
                }
                for (k, child) in node.children.iter() {
                    if self.wildcard_takes(k, depth) {
                        // It takes this word, and may take more or stop after it.
                        self.step(k, child, i, depth);
                        self.step(k, child, i + 1, depth);
                    }
                }
            }
        }
    }

    /// Answers the node's topic, if it has a value.
    fn emit(&mut self, node: &Node<V>) {
        if let Some(v) = &node.value {
            self.out.push((self.dialect.join(&self.path), v.clone()));
        }
    }

    /// Answers every topic at or below `node`.
    fn subtree(&mut self, node: &'n Node<V>) {
        self.emit(node);
        for (k, child) in node.children.iter() {
            self.path.push(k);
            self.subtree(child);
            self.path.pop();
        }
    }

    /// Whether a wildcard may take the word `k` at `depth`.
    fn wildcard_takes(&self, k: &str, depth: usize) -> bool {
        !(self.skip_dollar && depth == 0 && k.starts_with('$'))
    }

    fn step(&mut self, word: &'n str, child: &'n Node<V>, i: usize, depth: usize) {
        self.path.push(word);
        self.visit(child, i, depth + 1);
        self.path.pop();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn store(d: Dialect, topics: &[&str]) -> TopicStore<usize> {
        let s = TopicStore::new(d);
        for (i, t) in topics.iter().enumerate() {
            s.set(&d.parse_topic(t).unwrap(), i);
        }
        s
    }

    fn matching(s: &TopicStore<usize>, pattern: &str) -> Vec<String> {
        let p = s.dialect().parse_pattern(pattern).unwrap();
        let mut got: Vec<String> = s.matching(&p).into_iter().map(|(t, _)| t).collect();
        got.sort();
        got
    }

    #[test]
    fn retained_topics_by_filter_in_mqtt() {
        let s = store(Dialect::Mqtt, &["a", "a/b", "a/b/c", "$SYS/x", "/", "b/a"]);
        assert_eq!(matching(&s, "a/#"), ["a", "a/b", "a/b/c"]);
        assert_eq!(matching(&s, "#"), ["/", "a", "a/b", "a/b/c", "b/a"]);
        assert_eq!(matching(&s, "+/a"), ["b/a"]);
        assert_eq!(matching(&s, "+/+"), ["/", "a/b", "b/a"]);
        assert_eq!(matching(&s, "$SYS/#"), ["$SYS/x"]);
        assert_eq!(matching(&s, "+/x"), Vec::<String>::new());
    }

    #[test]
    fn a_delete_prunes_and_len_counts_values() {
        let d = Dialect::Amqp;
        let s = store(d, &["a.b.c", "a", ""]);
        assert_eq!(s.len(), 3);
        assert_eq!(s.set(&d.parse_topic("a").unwrap(), 9), Some(1));
        assert_eq!(s.len(), 3);
        assert_eq!(s.delete(&d.parse_topic("a.b.c").unwrap()), Some(0));
        assert_eq!(s.delete(&d.parse_topic("a.b").unwrap()), None);
        assert!(
            s.read()
                .root
                .children
                .get_key_value("a")
                .unwrap()
                .1
                .children
                .is_empty(),
            "a.b pruned"
        );
        assert_eq!(matching(&s, "#"), ["", "a"]);
        assert_eq!(s.get(&d.parse_topic("").unwrap()), Some(2));
    }

    #[test]
    fn a_wide_node_moves_from_a_list_to_a_map() {
        let d = Dialect::Nats;
        let topics: Vec<String> = (0..3 * FEW).map(|i| format!("w.{i}.x")).collect();
        let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
        let s = store(d, &refs);
        assert!(matches!(
            s.read()
                .root
                .children
                .get_key_value("w")
                .unwrap()
                .1
                .children,
            Children::Many(_)
        ));
        for t in &topics[..FEW] {
            assert!(s.delete(&d.parse_topic(t).unwrap()).is_some());
        }
        let mut want: Vec<String> = topics[FEW..].to_vec();
        want.sort();
        assert_eq!(matching(&s, "w.*.x"), want);
        assert_eq!(matching(&s, "w.>"), want);
        assert_eq!(s.get(&d.parse_topic("w.20.x").unwrap()), Some(20));
        assert_eq!(s.get(&d.parse_topic("w.2.x").unwrap()), None);
    }

    #[test]
    fn hashes_in_the_middle_answer_each_topic_once() {
        let d = Dialect::Amqp;
        let s = store(d, &["x", "a.x", "a.x.x", "x.a"]);
        assert_eq!(matching(&s, "#.x.#"), ["a.x", "a.x.x", "x", "x.a"]);
        assert_eq!(matching(&s, "#.#.#.x"), ["a.x", "a.x.x", "x"]);
        assert_eq!(
            matching(&store(Dialect::Nats, &["a", "a.b", "a.b.c"]), "a.>"),
            ["a.b", "a.b.c"]
        );
    }
}
