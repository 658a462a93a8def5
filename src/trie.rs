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
use std::hash::BuildHasher;
use std::sync::RwLock;

use smallvec::SmallVec;
use smol_str::SmolStr;

use crate::cstrie::WordsHasher;
use crate::dialect::{AsKey, Dialect, Key, Pattern, Topic};
use crate::error::Result;
use crate::matcher::{dedup_from, size_fresh, Matcher, SubscriberId};

type Map<K, V> = HashMap<K, V, WordsHasher>;
type Set<T> = HashSet<T, WordsHasher>;

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
    /// Each node's parent and edge, by node id: what writes and `pattern_text` read, kept out
    /// of the nodes so that a node is one cache line.
    links: Vec<Link>,
    /// The positions of the ids of each node that holds [`INDEXED_FROM`] or more (see
    /// [`Subscribers`]).
    positions: Map<NodeId, Positions>,
    free: Vec<NodeId>,
    /// The node of every pattern of each subscriber, so `remove_subscriber` need not walk
    /// the trie. A node stands for its pattern (its path from the root spells it), and it
    /// cannot be freed while it holds the subscriber, so its id stays good.
    by_subscriber: Map<SubscriberId, Ends>,
    len: usize,
    /// Subscribers with two patterns or more: while there are none, no lookup can reach a
    /// subscriber twice (it reaches each node once), so none is deduplicated.
    shared: usize,
}

/// What a lookup reads of a node, on one cache line: its word edges, its wildcard edges and
/// its subscribers. Whether the node is itself a many-words wildcard, which a lookup also
/// needs, travels with the node's id in the lookup's live set ([`MANY_BIT`]). At 112 bytes
/// with its parent and edge, a node took two lines, and on `mixed` 100k a lookup reaches 62.
#[derive(Debug)]
#[repr(align(64))]
struct Node {
    words: Words,
    subscribers: Subscribers,
    /// The one-word wildcard's child, or [`NONE`].
    one: NodeId,
    /// The many-words wildcard's child, or [`NONE`].
    many: NodeId,
}

impl Default for Node {
    fn default() -> Self {
        Node {
            words: Words::default(),
            subscribers: Subscribers::default(),
            one: NONE,
            many: NONE,
        }
    }
}

const _: () = assert!(std::mem::size_of::<Node>() == 64);

/// A node's parent and the edge from it.
#[derive(Debug, Default)]
struct Link {
    parent: NodeId,
    edge: Edge,
}

/// In a lookup's live set, marks a node reached through a many-words edge: such a node takes
/// every further word too. Node ids stay under it.
const MANY_BIT: NodeId = 1 << 31;

/// `id` as an edge, if there is one.
fn edge(id: NodeId) -> Option<NodeId> {
    (id != NONE).then_some(id)
}

/// A node's word edges, looked up by the word's hash: a lookup hashes each topic word once for
/// every live node it looks it up in, where a map would hash it again in each (on the OpenAMQ
/// experiment, up to 16 live nodes a level). A word of up to 23 bytes is kept inline in its
/// slot, so comparing it reads the slot's line and no other: a boxed word cost a cache miss
/// a probe once the table outgrew the caches (`memcmp` was 13 % of a Spark worker's samples).
#[derive(Debug, Default)]
struct Words(hashbrown::HashTable<(SmolStr, NodeId)>);

impl Words {
    /// The hash [`Words::get`] takes for `word`.
    fn hash(word: &str) -> u64 {
        WordsHasher.hash_one(word)
    }

    /// The edge of `word`. Its hash is computed into `hash` on the first node that has two
    /// edges or more, and only then: a node of one edge compares its word with no hash, and
    /// most nodes below the first levels have one (a path of a subscribe, or a lookup's walk
    /// once it leaves the root's fan-out, hashed a word at each, a fifth of a `subscribe` of a
    /// pair already there). In line in the walk: called, it cost `mixed` 100k's lookups an
    /// eighth more instructions.
    #[inline(always)]
    fn find(&self, word: &str, hash: &mut Option<u64>) -> Option<NodeId> {
        match (self.0.len(), *hash) {
            (0, _) => None,
            // One edge and no hash yet: its word compared. (With the hash at hand, a probe
            // reads no more than this would.)
            (1, None) => {
                let (w, id) = self.0.iter().next()?;
                crate::bytes::same(w.as_bytes(), word.as_bytes()).then_some(*id)
            }
            (_, Some(h)) => self.get(h, word),
            (_, None) => self.get(*hash.insert(Words::hash(word)), word),
        }
    }

    fn get(&self, hash: u64, word: &str) -> Option<NodeId> {
        self.0
            // In line, not a `memcmp` call for a few bytes (8 % of a hot lookup's samples).
            .find(hash, |(w, _)| {
                crate::bytes::same(w.as_bytes(), word.as_bytes())
            })
            .map(|&(_, id)| id)
    }

    /// Adds the edge of `word`, which is not there.
    fn insert(&mut self, word: SmolStr, id: NodeId) {
        let hash = Words::hash(&word);
        self.0
            .insert_unique(hash, (word, id), |(w, _)| Words::hash(w));
    }

    fn remove(&mut self, word: &str) {
        if let Ok(edge) = self
            .0
            .find_entry(Words::hash(word), |(w, _)| w.as_str() == word)
        {
            edge.remove();
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A node's subscribers, in a vector that a lookup copies whole (`extend_from_slice`, where
/// walking a hash set's buckets cost it most of its time on answers of hundreds); past
/// [`INDEXED_FROM`] ids, with each id's position beside them, so that removing one of a
/// million stays O(1) (a `swap_remove` and one position moved).
#[derive(Debug, Default)]
struct Subscribers {
    ids: SmallVec<[SubscriberId; INLINE_IDS]>,
}

/// Each id's position in a node's [`Subscribers`], for nodes with many: kept beside the nodes,
/// by node, so that a node stays one line.
type Positions = Box<Map<SubscriberId, u32>>;

/// Ids a node keeps in itself, in the bytes a vector's pointer, length and capacity take: the
/// patterns of most brokers' tables have one subscriber or a few, and a lookup then copies
/// them from the node's own line, where a vector's buffer was one more cache miss for every
/// node it reached (on `mixed` 100k, 31 a topic).
const INLINE_IDS: usize = 4;

// The inline ids take no more than the vector did (smallvec's `union` layout).
const _: () = assert!(std::mem::size_of::<SmallVec<[SubscriberId; INLINE_IDS]>>() == 24);

/// Ids from which a node's subscribers are indexed by position; under half of it the index is
/// dropped again.
const INDEXED_FROM: usize = 32;

impl Subscribers {
    /// Where `id` is; `at` is the node's positions, if it has them.
    fn position(&self, at: Option<&Positions>, id: SubscriberId) -> Option<usize> {
        match at {
            Some(at) => at.get(&id).map(|&i| i as usize),
            None => self.ids.iter().position(|&x| x == id),
        }
    }

    /// Adds `id`; `false` if it was there. `at` is the node's positions, made here when the
    /// node reaches [`INDEXED_FROM`] ids.
    fn insert(&mut self, at: &mut Option<Positions>, id: SubscriberId) -> bool {
        if self.position(at.as_ref(), id).is_some() {
            return false;
        }
        let i = u32::try_from(self.ids.len()).expect("a node holds under 2^32 subscribers");
        self.ids.push(id);
        match at {
            Some(at) => {
                at.insert(id, i);
            }
            None if self.ids.len() >= INDEXED_FROM => {
                *at = Some(Box::new(
                    self.ids.iter().zip(0..).map(|(&x, i)| (x, i)).collect(),
                ));
            }
            None => {}
        }
        true
    }

    /// Removes `id`; `false` if it was not there. `at` is the node's positions, dropped here
    /// under half of [`INDEXED_FROM`].
    fn remove(&mut self, at: &mut Option<Positions>, id: SubscriberId) -> bool {
        let Some(i) = self.position(at.as_ref(), id) else {
            return false;
        };
        self.ids.swap_remove(i);
        if let Some(index) = at {
            index.remove(&id);
            if let Some(&moved) = self.ids.get(i) {
                index.insert(moved, i as u32);
            }
            if !self.may_be_indexed() {
                *at = None;
            }
        }
        if self.ids.is_empty() {
            // A pruned or emptied node keeps no allocation.
            self.ids = SmallVec::new();
        }
        true
    }

    /// Whether the node may have positions: they are made at [`INDEXED_FROM`] ids and
    /// dropped under half of it, so a node with fewer than half has none.
    fn may_be_indexed(&self) -> bool {
        self.ids.len() >= INDEXED_FROM / 2
    }

    fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    fn as_slice(&self) -> &[SubscriberId] {
        &self.ids
    }
}

/// A set of live nodes during a lookup.
type Nodes = SmallVec<[NodeId; 16]>;

/// The nodes where one subscriber's patterns end: a short inline list while it has few (the
/// common case, and no allocation up to 3), a set once it has many, so that unsubscribing
/// each of a subscriber's many patterns in turn is not quadratic.
#[derive(Debug)]
enum Ends {
    Few(SmallVec<[NodeId; 3]>),
    Many(Box<Set<NodeId>>),
}

/// Most nodes [`Ends::Few`] holds before it becomes a set.
const FEW_ENDS: usize = 16;

impl Ends {
    fn new() -> Self {
        Ends::Few(SmallVec::new())
    }

    /// Adds `node`, which the caller knows is not there yet.
    fn insert(&mut self, node: NodeId) {
        match self {
            Ends::Few(few) if few.len() < FEW_ENDS => few.push(node),
            Ends::Few(few) => {
                let mut set: Set<NodeId> = few.drain(..).collect();
                set.insert(node);
                *self = Ends::Many(Box::new(set));
            }
            Ends::Many(set) => {
                set.insert(node);
            }
        }
    }

    fn remove(&mut self, node: NodeId) {
        match self {
            Ends::Few(few) => {
                if let Some(i) = few.iter().position(|&n| n == node) {
                    few.swap_remove(i);
                }
            }
            Ends::Many(set) => {
                set.remove(&node);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn len(&self) -> usize {
        match self {
            Ends::Few(few) => few.len(),
            Ends::Many(set) => set.len(),
        }
    }

    fn into_vec(self) -> Vec<NodeId> {
        match self {
            Ends::Few(few) => few.into_vec(),
            Ends::Many(set) => set.into_iter().collect(),
        }
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
enum Edge {
    #[default]
    Root,
    /// The word, shared with the parent's [`Words`] slot when it is over 23 bytes.
    Word(SmolStr),
    One,
    Many,
}

impl Node {
    fn is_empty(&self) -> bool {
        self.words.is_empty()
            && self.one == NONE
            && self.many == NONE
            && self.subscribers.is_empty()
    }
}

impl Trie {
    /// An empty trie for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        Trie {
            dialect,
            inner: RwLock::new(Inner {
                nodes: vec![Node::default()],
                links: vec![Link {
                    parent: NONE,
                    edge: Edge::Root,
                }],
                positions: Map::default(),
                free: Vec::new(),
                by_subscriber: Map::default(),
                len: 0,
                shared: 0,
            }),
        }
    }

    /// Adds the pair; `true` if it was not there. A pair already there is found under the
    /// read lock, so subscribing again (a client that reconnects) never stops the readers.
    fn add<K: AsKey>(&self, keys: &[K], id: SubscriberId) -> bool {
        if self.read().holds(keys, id) {
            return false;
        }
        self.write().subscribe(keys, id)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    #[inline(always)]
    fn child(&self, node: NodeId, key: Key<'_>) -> Option<NodeId> {
        let n = &self.nodes[node as usize];
        match key {
            Key::Word(w) => n.words.find(w, &mut None),
            Key::One => edge(n.one),
            Key::Many => edge(n.many),
        }
    }

    /// The positions of `node`'s ids, if it has them (the map is probed only for a node that
    /// may).
    fn positions_of(&self, node: NodeId) -> Option<&Positions> {
        if !self.nodes[node as usize].subscribers.may_be_indexed() {
            return None;
        }
        self.positions.get(&node)
    }

    /// Runs `change` on `node`'s subscribers with its positions, taken out of their map and
    /// put back after (or dropped, if `change` dropped them). The map is probed only for a
    /// node that may have them.
    fn change_subscribers(
        &mut self,
        node: NodeId,
        change: impl FnOnce(&mut Subscribers, &mut Option<Positions>) -> bool,
    ) -> bool {
        let subscribers = &mut self.nodes[node as usize].subscribers;
        let mut at = if subscribers.may_be_indexed() {
            self.positions.remove(&node)
        } else {
            None
        };
        let changed = change(subscribers, &mut at);
        if let Some(at) = at {
            self.positions.insert(node, at);
        }
        changed
    }

    /// The node of the pattern with these keys, if the trie has its path.
    fn find<K: AsKey>(&self, keys: &[K]) -> Option<NodeId> {
        keys.iter()
            .try_fold(ROOT, |node, k| self.child(node, k.key()))
    }

    /// Whether `id` is subscribed to the pattern with these keys.
    fn holds<K: AsKey>(&self, keys: &[K], id: SubscriberId) -> bool {
        self.find(keys).is_some_and(|node| {
            self.nodes[node as usize]
                .subscribers
                .position(self.positions_of(node), id)
                .is_some()
        })
    }

    /// Adds the pair; `true` if it was not there.
    fn subscribe<K: AsKey>(&mut self, keys: &[K], id: SubscriberId) -> bool {
        let node = self.find_or_insert(keys);
        if !self.change_subscribers(node, |s, at| s.insert(at, id)) {
            return false;
        }
        self.len += 1;
        let ends = self.by_subscriber.entry(id).or_insert_with(Ends::new);
        ends.insert(node);
        if ends.len() == 2 {
            self.shared += 1;
        }
        true
    }

    /// Removes the pair; `true` if it was there.
    fn unsubscribe<K: AsKey>(&mut self, keys: &[K], id: SubscriberId) -> bool {
        let Some(node) = self.find(keys) else {
            return false;
        };
        if !self.remove(node, id) {
            return false;
        }
        if let Some(ends) = self.by_subscriber.get_mut(&id) {
            ends.remove(node);
            if ends.len() == 1 {
                self.shared -= 1;
            }
            if ends.is_empty() {
                self.by_subscriber.remove(&id);
            }
        }
        true
    }

    fn alloc(&mut self, parent: NodeId, edge: Edge) -> NodeId {
        let link = Link { parent, edge };
        if let Some(id) = self.free.pop() {
            self.nodes[id as usize] = Node::default();
            self.links[id as usize] = link;
            id
        } else {
            let id = NodeId::try_from(self.nodes.len())
                .ok()
                .filter(|&id| id < MANY_BIT)
                .expect("more than 2^31 trie nodes");
            self.nodes.push(Node::default());
            self.links.push(link);
            id
        }
    }

    fn find_or_insert<K: AsKey>(&mut self, keys: &[K]) -> NodeId {
        let mut node = ROOT;
        for key in keys {
            let key = key.key();
            node = match self.child(node, key) {
                Some(next) => next,
                None => {
                    let edge = match key {
                        Key::Word(w) => Edge::Word(SmolStr::new(w)),
                        Key::One => Edge::One,
                        Key::Many => Edge::Many,
                    };
                    let next = self.alloc(node, edge.clone());
                    let n = &mut self.nodes[node as usize];
                    match edge {
                        Edge::Word(w) => {
                            n.words.insert(w, next);
                        }
                        Edge::One => n.one = next,
                        Edge::Many => n.many = next,
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
            let Link { parent, edge } = std::mem::take(&mut self.links[node as usize]);
            let p = &mut self.nodes[parent as usize];
            match edge {
                Edge::Word(w) => {
                    p.words.remove(&w);
                }
                Edge::One => p.one = NONE,
                Edge::Many => p.many = NONE,
                Edge::Root => unreachable!(),
            }
            self.nodes[node as usize] = Node::default();
            self.free.push(node);
            node = parent;
        }
    }

    /// Removes `id` from `node` and prunes what that leaves empty; false if the node did not
    /// hold the id. The caller keeps `by_subscriber` in step.
    fn remove(&mut self, node: NodeId, id: SubscriberId) -> bool {
        if !self.change_subscribers(node, |s, at| s.remove(at, id)) {
            return false;
        }
        self.len -= 1;
        self.prune(node);
        true
    }

    /// The text of the pattern that ends at `node`: its edges from the root, joined.
    fn pattern_text(&self, dialect: Dialect, mut node: NodeId) -> String {
        let mut words = Vec::new();
        while node != ROOT {
            let link = &self.links[node as usize];
            words.push(match &link.edge {
                Edge::Word(w) => w.as_str(),
                Edge::One => dialect.one_word(),
                Edge::Many => dialect.many_words(),
                Edge::Root => unreachable!("only the root has no edge"),
            });
            node = link.parent;
        }
        words.reverse();
        dialect.join(&words)
    }

    /// Appends the subscribers of every pattern matching `topic`, possibly more than once.
    fn collect(&self, dialect: Dialect, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        self.walk(dialect, topic, |ends| {
            size_fresh(out, || {
                ends.iter()
                    .map(|&id| self.nodes[id as usize].subscribers.as_slice().len())
                    .sum()
            });
            for &id in ends {
                out.extend_from_slice(self.nodes[id as usize].subscribers.as_slice());
            }
        })
    }

    /// Calls `f` with the nodes of the patterns that match `topic` (with or without
    /// subscribers), each once.
    ///
    /// The live sets stay in this frame and only references to them move: swapping the two
    /// inline vectors at each word, and returning the last, copied them 16 bytes at a time
    /// across the 4-byte stores that had just filled them, and a load that spans several
    /// stores waits for all of them (a sixth of the walk's samples on the seed's hot lookup).
    fn walk<R>(&self, dialect: Dialect, topic: &Topic<'_>, f: impl FnOnce(&[NodeId]) -> R) -> R {
        let zero_or_more = dialect.many_min() == 0;
        // Inline up to 16 live nodes: a lookup allocates nothing but its answer. A node
        // reached through a many-words edge carries [`MANY_BIT`] here, and only here.
        let (mut live_buf, mut next_buf) = (Nodes::new(), Nodes::new());
        let (mut live, mut next) = (&mut live_buf, &mut next_buf);
        // At the root, a `$` topic takes no wildcard edge.
        if topic.is_dollar() {
            live.push(ROOT);
        } else {
            self.enter(ROOT, zero_or_more, live);
        }
        for (pos, word) in topic.words().iter().enumerate() {
            next.clear();
            // Hashed on the first live node with two word edges or more, and only then.
            let mut hash = None;
            // Whether a many-words wildcard went in: only those reach a node twice (one that
            // absorbs the word and is entered again, or is the end of two chains). Without
            // one, each node put in is a child of a different live node or through a
            // different edge, and the live nodes need no sorting to be each once. (A node
            // always carries the same mark, so marked ids sort and deduplicate as the ids.)
            let mut many = false;
            for &marked in live.iter() {
                let n = &self.nodes[(marked & !MANY_BIT) as usize];
                let wildcards_allowed = !(pos == 0 && topic.is_dollar());
                if marked & MANY_BIT != 0 {
                    // A many-words wildcard absorbs this word too.
                    next.push(marked);
                    many = true;
                }
                if let Some(c) = n.words.find(word, &mut hash) {
                    many |= self.enter(c, zero_or_more, next);
                }
                if wildcards_allowed {
                    if n.one != NONE {
                        many |= self.enter(n.one, zero_or_more, next);
                    }
                    if !zero_or_more && n.many != NONE {
                        // NATS `>`: the wildcard takes this word as its first.
                        next.push(n.many | MANY_BIT);
                        many = true;
                    }
                }
            }
            if many {
                next.sort_unstable();
                next.dedup();
            }
            std::mem::swap(&mut live, &mut next);
            if live.is_empty() {
                break;
            }
        }
        for id in live.iter_mut() {
            *id &= !MANY_BIT;
        }
        f(live)
    }

    /// Adds `node`, reached through a word or a one-word edge, to the live set, and the chain
    /// of wildcards below it when `#` may match nothing (`a.#.#` reaches both wildcards
    /// without reading a word), marked; `true` if there was such a chain.
    #[inline(always)]
    fn enter(&self, mut node: NodeId, zero_or_more: bool, live: &mut Nodes) -> bool {
        live.push(node);
        let mut chain = false;
        if zero_or_more {
            while let Some(many) = edge(self.nodes[node as usize].many) {
                live.push(many | MANY_BIT);
                node = many;
                chain = true;
            }
        }
        chain
    }
}

/// The most pairs [`Trie::subscribe_each_str`] adds under one hold of the write lock: lookups
/// wait for at most this many inserts (a few hundred microseconds).
const LOCKED_PAIRS: usize = 256;

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
        self.add(pattern.tokens(), id)
    }

    fn unsubscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        assert_eq!(
            pattern.dialect(),
            self.dialect,
            "pattern of another dialect"
        );
        self.write().unsubscribe(pattern.tokens(), id)
    }

    fn subscribe_str(&self, pattern: &str, id: SubscriberId) -> Result<bool> {
        self.dialect
            .with_pattern_keys(pattern, |keys| self.add(keys, id))
    }

    fn unsubscribe_str(&self, pattern: &str, id: SubscriberId) -> Result<bool> {
        self.dialect
            .with_pattern_keys(pattern, |keys| self.write().unsubscribe(keys, id))
    }

    /// Takes the write lock once for up to 256 pairs (`LOCKED_PAIRS`), and scans and walks each
    /// pattern once: a pair at a time, a new pair was walked twice (under the read lock to
    /// tell a pair already there, then under the write lock), and a result cache in front
    /// scanned it twice more.
    fn subscribe_each_str(
        &self,
        pairs: &[(&str, SubscriberId)],
        added: &mut Vec<bool>,
    ) -> Result<()> {
        for some in pairs.chunks(LOCKED_PAIRS) {
            let mut inner = self.write();
            for &(pattern, id) in some {
                added.push(
                    self.dialect
                        .with_pattern_keys(pattern, |keys| inner.subscribe(keys, id))?,
                );
            }
        }
        Ok(())
    }

    fn contains(&self, pattern: &str, id: SubscriberId) -> bool {
        self.dialect
            .with_pattern_keys(pattern, |keys| self.read().holds(keys, id))
            .unwrap_or(false)
    }

    fn lookup_into(&self, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        assert_eq!(topic.dialect(), self.dialect, "topic of another dialect");
        let start = out.len();
        let inner = self.read();
        inner.collect(self.dialect, topic, out);
        let shared = inner.shared > 0;
        drop(inner);
        if shared {
            dedup_from(out, start);
        }
    }

    /// Walks as a lookup does, and stops at the first node of the walk's end that has a
    /// subscriber: no answer is gathered or deduplicated.
    fn has_interest(&self, topic: &Topic<'_>) -> bool {
        assert_eq!(topic.dialect(), self.dialect, "topic of another dialect");
        let inner = self.read();
        inner.walk(self.dialect, topic, |ends| {
            ends.iter()
                .any(|&id| !inner.nodes[id as usize].subscribers.is_empty())
        })
    }

    fn remove_subscriber(&self, id: SubscriberId) -> usize {
        let mut inner = self.write();
        let Some(ends) = inner.by_subscriber.remove(&id) else {
            return 0;
        };
        if ends.len() >= 2 {
            inner.shared -= 1;
        }
        // Each node still holds `id` until its turn, so pruning one never frees another.
        ends.into_vec()
            .into_iter()
            .filter(|&node| inner.remove(node, id))
            .count()
    }

    fn len(&self) -> usize {
        self.read().len
    }

    fn subscriptions(&self) -> Vec<(String, SubscriberId)> {
        let inner = self.read();
        let mut pairs = Vec::with_capacity(inner.len);
        // Freed nodes are reset, so they hold no subscribers and are skipped.
        for (node, n) in inner.nodes.iter().enumerate() {
            if n.subscribers.is_empty() {
                continue;
            }
            let text = inner.pattern_text(self.dialect, node as NodeId);
            pairs.extend(
                n.subscribers
                    .as_slice()
                    .iter()
                    .map(|&id| (text.clone(), id)),
            );
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
    fn a_nodes_subscribers_stay_a_set_across_the_index() {
        // Up past the index and down under half of it, removing from the front, the middle
        // and the end; checked against a set after every step.
        let mut subs = Subscribers::default();
        let mut at: Option<Positions> = None;
        let mut want = std::collections::BTreeSet::new();
        let check = |subs: &Subscribers,
                     at: &Option<Positions>,
                     want: &std::collections::BTreeSet<SubscriberId>| {
            let mut got = subs.as_slice().to_vec();
            got.sort_unstable();
            assert_eq!(got, want.iter().copied().collect::<Vec<_>>());
            for id in 0..120 {
                let found = subs.position(at.as_ref(), id).is_some();
                assert_eq!(found, want.contains(&id), "{id}");
            }
            if want.len() >= INDEXED_FROM {
                assert!(at.is_some());
            }
            if want.len() < INDEXED_FROM / 2 {
                assert!(at.is_none());
            }
            if let Some(at) = at {
                assert_eq!(at.len(), subs.ids.len());
                assert!(at.iter().all(|(&id, &i)| subs.ids[i as usize] == id));
            }
        };
        for id in (0..100).rev() {
            assert!(subs.insert(&mut at, id));
            assert!(!subs.insert(&mut at, id));
            want.insert(id);
            check(&subs, &at, &want);
        }
        assert!(at.is_some());
        for id in (0..100).step_by(3).chain((0..100).filter(|i| i % 3 != 0)) {
            assert!(subs.remove(&mut at, id));
            assert!(!subs.remove(&mut at, id));
            want.remove(&id);
            check(&subs, &at, &want);
        }
        assert!(subs.is_empty() && !subs.ids.spilled());
    }

    #[test]
    fn the_positions_beside_the_nodes_follow_each_node() {
        // Two nodes past the index, one of them a wildcard's, and a small one: each keeps its
        // own positions; emptied, the nodes are pruned and their positions gone with them.
        let t = Trie::new(Dialect::Amqp);
        let patterns = ["a.b", "a.*", "a.#"];
        for id in 0..100 {
            for p in &patterns[..2] {
                assert!(t.subscribe_str(p, id).unwrap());
            }
        }
        t.subscribe_str("a.#", 7).unwrap();
        assert_eq!(t.read().positions.len(), 2);
        for id in 0..100 {
            for p in &patterns {
                assert_eq!(t.contains(p, id), *p != "a.#" || id == 7, "{p} {id}");
            }
        }
        let mut got = t.lookup_str("a.b").unwrap();
        got.sort_unstable();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        for id in (0..100).rev() {
            assert!(t.unsubscribe_str("a.b", id).unwrap());
            assert!(!t.contains("a.b", id));
            assert!(t.contains("a.*", id));
        }
        assert_eq!(t.read().positions.len(), 1);
        for id in 0..100 {
            assert_eq!(t.remove_subscriber(id), 1 + usize::from(id == 7));
        }
        assert!(t.read().positions.is_empty());
        assert_eq!((live_nodes(&t), t.len()), (1, 0));
        assert!(t.lookup_str("a.b").unwrap().is_empty());
    }

    #[test]
    fn a_node_is_one_cache_line_and_marks_its_many_words_edge_in_the_walk() {
        assert_eq!(std::mem::size_of::<Node>(), 64);
        assert_eq!(std::mem::align_of::<Node>(), 64);
        // A many-words node absorbs words, in both spellings of it; a word edge and a
        // one-word edge below it do not.
        for (d, p) in [(Dialect::Amqp, "a.#"), (Dialect::Nats, "a.>")] {
            let t = Trie::new(d);
            t.subscribe_str(p, 1).unwrap();
            t.subscribe_str(&d.join(&["a", d.one_word(), "c"]), 2)
                .unwrap();
            let topic = |words: &[&str]| d.join(words);
            assert_eq!(
                t.lookup_str(&topic(&["a", "b", "c", "d"])).unwrap(),
                [1],
                "{p}"
            );
            let mut got = t.lookup_str(&topic(&["a", "b", "c"])).unwrap();
            got.sort_unstable();
            assert_eq!(got, [1, 2]);
        }
    }

    #[test]
    fn shared_counts_the_subscribers_with_two_patterns_or_more() {
        let t = Trie::new(Dialect::Amqp);
        let shared = || t.read().shared;
        t.subscribe_str("a.*", 1).unwrap();
        t.subscribe_str("a.b", 2).unwrap();
        assert_eq!(shared(), 0);
        assert_eq!(t.lookup_str("a.b").unwrap().len(), 2);
        t.subscribe_str("#", 1).unwrap();
        t.subscribe_str("a.#", 1).unwrap();
        assert_eq!(shared(), 1);
        assert_eq!(
            t.lookup_str("a.b").unwrap().len(),
            2,
            "1 reached thrice, once in the answer"
        );
        t.unsubscribe_str("#", 1).unwrap();
        assert_eq!(shared(), 1);
        t.unsubscribe_str("a.#", 1).unwrap();
        assert_eq!(shared(), 0);
        t.subscribe_str("*.b", 2).unwrap();
        assert_eq!(shared(), 1);
        assert_eq!(t.remove_subscriber(2), 2);
        assert_eq!(shared(), 0);
        assert_eq!(t.lookup_str("a.b").unwrap(), vec![1]);
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
    fn a_subscriber_with_many_patterns_keeps_them_in_a_set() {
        let t = Trie::new(Dialect::Amqp);
        let patterns: Vec<String> = (0..3 * FEW_ENDS).map(|i| format!("a.{i}.#")).collect();
        for p in &patterns {
            assert!(t.subscribe_str(p, 7).unwrap());
        }
        assert!(matches!(t.read().by_subscriber[&7], Ends::Many(_)));
        for p in patterns.iter().step_by(2) {
            assert!(t.unsubscribe_str(p, 7).unwrap());
            assert!(!t.unsubscribe_str(p, 7).unwrap());
        }
        assert_eq!(t.lookup_str("a.1.x").unwrap(), vec![7]);
        assert!(t.lookup_str("a.2.x").unwrap().is_empty());
        let mut texts: Vec<String> = t.subscriptions().into_iter().map(|(p, _)| p).collect();
        texts.sort();
        let mut want: Vec<String> = patterns.iter().skip(1).step_by(2).cloned().collect();
        want.sort();
        assert_eq!(texts, want);
        assert_eq!(t.remove_subscriber(7), 3 * FEW_ENDS / 2);
        assert_eq!(live_nodes(&t), 1);
        assert!(t.read().by_subscriber.is_empty());
    }

    #[test]
    fn subscriptions_spell_each_pattern_as_written() {
        for (d, patterns) in [
            (Dialect::Amqp, &["", "a..b", "#", "*.#.x", "a.*"][..]),
            (Dialect::Mqtt, &["/", "+/+", "#", "a//#", "$SYS/+"][..]),
            (Dialect::Nats, &["a.*.c", ">", "x.>", "*"][..]),
        ] {
            let t = Trie::new(d);
            for p in patterns {
                t.subscribe_str(p, 1).unwrap();
            }
            let mut got: Vec<String> = t.subscriptions().into_iter().map(|(p, _)| p).collect();
            got.sort();
            let mut want: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
            want.sort();
            assert_eq!(got, want, "{d}");
        }
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
