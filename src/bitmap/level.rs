//! `LevelBitmap`: the optimized inverted bitmap, one table per word position.
//!
//! The technique of the WSO2 Message Broker's bitmap topic matcher and of the
//! fast-topic-matching project's optimized inverted bitmap: distinct patterns are numbered, and
//! level `i` holds a table from the words that patterns name at position `i` to the bitmap of
//! the patterns that accept that word there. A lookup takes one row per topic word, plus one
//! row for where the topic ends, and ANDs them, stopping at the first empty result; no topic
//! cache and no per-pattern test.
//!
//! # Rows of level `i`
//!
//! - `words[w]`: patterns with the literal `w` at position `i`, together with every pattern
//!   that accepts any word there (below). A named word's row is thus complete on its own.
//! - `other`: the patterns that accept any word at position `i`: a one-word wildcard there, or
//!   a trailing many-words wildcard at position `p <= i`. A topic word never named at level `i`
//!   selects this row. It is the union of the one-word and many-words wildcard rows of the
//!   published designs, kept as one row since a lookup only ever needs the union; a new word's
//!   row starts as a copy of it.
//! - `null`: the patterns a topic of exactly `i` words can end on: a pattern without a
//!   many-words wildcard and with `i` words or fewer (the AND of the levels before ensures it
//!   has at least `i`), or a pattern `prefix.#` whose prefix has `p` words, when
//!   `p + many_min <= i` (`#` matches zero words, NATS `>` one or more, so MQTT `a/#` matches
//!   `a` and NATS `a.>` does not).
//!
//! The tables hold one level more than the longest pattern has words (levels are never
//! removed, which is harmless: a deeper level is a copy of the last); the last is saturated (every
//! trailing-wildcard pattern is in its `other`, every pattern in its `null`) and stands for
//! every deeper position. MQTT's `$` rule: at level 0 the row of a word starting with `$` does
//! not take the wildcard patterns, and an unnamed `$` word selects an empty row.
//!
//! Patterns the tables cannot express go to a side index checked exactly with
//! [`pattern_matches`] on every lookup: AMQP patterns with `#` anywhere but last, or with
//! several `#`, and patterns longer than [`MAX_LEVELS`] words (so a pathological pattern cannot
//! make the tables deep). The oracle tests check the union against the reference.
//!
//! # Complexity
//!
//! With `n` topic words, `W_i` words named at level `i` and `S` side patterns:
//!
//! | operation | cost |
//! |---|---|
//! | lookup | at most `n + 1` bitmap ANDs, smallest rows first, stopping at the first empty one (once 16 candidates or fewer remain, each is probed in the remaining rows instead), + `S` pattern tests |
//! | subscribe / unsubscribe of a literal pattern | one row per word; a new word's row starts as a copy of `other` |
//! | subscribe / unsubscribe of `*` at level `i` | one bit in each of the `W_i` rows |
//! | subscribe / unsubscribe of trailing `#` at `p` | one bit in every row of levels `p..` |
//! | memory | each wildcard pattern's bit is repeated in every word row it covers |
//!
//! # Concurrency
//!
//! The whole state is a `LeftRight` (see the [module docs](super)): lookups never block, a
//! write applies its change to both copies in turn.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use roaring::RoaringBitmap;

use super::{LeftRight, PatternTable};
use crate::dialect::{Dialect, Pattern, Token, Topic};
use crate::matcher::{dedup_from, Matcher, SubscriberId};
use crate::reference::pattern_matches;

/// Patterns longer than this many words go to the side index.
pub const MAX_LEVELS: usize = 32;

/// One bitmap table per word position, AND of one row per level.
#[derive(Debug)]
pub struct LevelBitmap {
    dialect: Dialect,
    state: LeftRight<State>,
}

#[derive(Clone, Debug, Default)]
struct State {
    patterns: PatternTable,
    levels: Vec<Level>,
    /// Numbers of the patterns checked with the reference on every lookup.
    side: BTreeSet<u32>,
}

#[derive(Clone, Debug, Default)]
struct Level {
    words: HashMap<Box<str>, Row>,
    other: RoaringBitmap,
    null: RoaringBitmap,
}

#[derive(Clone, Debug, Default)]
struct Row {
    /// How many patterns name this word here; the row goes when none does.
    named: u32,
    bits: RoaringBitmap,
}

/// How a pattern sits in the level tables.
enum Shape<'a> {
    /// No many-words wildcard: the pattern's words.
    Exact(&'a [Token]),
    /// One trailing many-words wildcard after these words.
    Prefix(&'a [Token]),
    /// Anything else: the side index.
    Side,
}

fn shape(pattern: &Pattern) -> Shape<'_> {
    let tokens = pattern.tokens();
    let manys = tokens.iter().filter(|t| **t == Token::Many).count();
    if tokens.len() > MAX_LEVELS {
        return Shape::Side;
    }
    match (manys, tokens.last()) {
        (0, _) => Shape::Exact(tokens),
        (1, Some(Token::Many)) => Shape::Prefix(&tokens[..tokens.len() - 1]),
        _ => Shape::Side,
    }
}

impl LevelBitmap {
    /// An empty matcher for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        LevelBitmap {
            dialect,
            state: LeftRight::new(State::default()),
        }
    }

    /// How many distinct patterns sit in the side index (checked one by one on every lookup).
    pub fn side_patterns(&self) -> usize {
        self.state.read(|s| s.side.len())
    }
}

impl State {
    /// Whether the row of `word` at level `i` takes wildcard patterns (MQTT `$` rule).
    fn takes_wildcards(dialect: Dialect, i: usize, word: &str) -> bool {
        !(i == 0 && dialect.has_dollar_rule() && word.starts_with('$'))
    }

    /// Makes sure levels `0..=depth` exist, new ones copied from the saturated last.
    fn grow(&mut self, depth: usize) {
        while self.levels.len() <= depth {
            let next = match self.levels.last() {
                Some(last) => Level {
                    words: HashMap::new(),
                    other: last.other.clone(),
                    null: last.null.clone(),
                },
                None => Level::default(),
            };
            self.levels.push(next);
        }
    }

    /// Sets or clears bit `n` in every row of level `i` that accepts any word.
    fn set_any(&mut self, dialect: Dialect, i: usize, n: u32, on: bool) {
        let level = &mut self.levels[i];
        flip(&mut level.other, n, on);
        for (word, row) in level.words.iter_mut() {
            if Self::takes_wildcards(dialect, i, word) {
                flip(&mut row.bits, n, on);
            }
        }
    }

    /// Adds or removes pattern `n` as a literal `word` at level `i`.
    fn set_word(&mut self, dialect: Dialect, i: usize, word: &str, n: u32, on: bool) {
        let level = &mut self.levels[i];
        if on {
            let row = level.words.entry(word.into()).or_insert_with(|| Row {
                named: 0,
                bits: if Self::takes_wildcards(dialect, i, word) {
                    level.other.clone()
                } else {
                    RoaringBitmap::new()
                },
            });
            row.named += 1;
            flip(&mut row.bits, n, true);
        } else if let Some(row) = level.words.get_mut(word) {
            row.named -= 1;
            flip(&mut row.bits, n, false);
            if row.named == 0 {
                // What is left is exactly `other` (or nothing): the row adds no information.
                level.words.remove(word);
            }
        }
    }

    /// Adds (`on`) or removes pattern `n` from the tables or the side index.
    fn index(&mut self, dialect: Dialect, pattern: &Pattern, n: u32, on: bool) {
        let (prefix, many) = match shape(pattern) {
            Shape::Side => {
                if on {
                    self.side.insert(n);
                } else {
                    self.side.remove(&n);
                }
                return;
            }
            Shape::Exact(t) => (t, false),
            Shape::Prefix(t) => (t, true),
        };
        self.grow(pattern.tokens().len());
        for (i, token) in prefix.iter().enumerate() {
            match token {
                Token::Word(w) => self.set_word(dialect, i, w, n, on),
                Token::One => self.set_any(dialect, i, n, on),
                Token::Many => unreachable!("only in the side index"),
            }
        }
        let p = prefix.len();
        if many {
            for i in p..self.levels.len() {
                self.set_any(dialect, i, n, on);
            }
        }
        let ends_from = if many { p + dialect.many_min() } else { p };
        for level in &mut self.levels[ends_from..] {
            flip(&mut level.null, n, on);
        }
    }

    /// Appends the subscribers of every pattern matching `topic`, possibly more than once.
    fn collect(&self, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        for &n in &self.side {
            if let Some(slot) = self.patterns.slot(n) {
                if pattern_matches(&slot.pattern, topic) {
                    out.extend_from_slice(&slot.subscribers);
                }
            }
        }
        let Some(last) = self.levels.last() else {
            return;
        };
        let empty = RoaringBitmap::new();
        let words = topic.words();
        let mut rows: Vec<&RoaringBitmap> = Vec::with_capacity(words.len() + 1);
        for (i, word) in words.iter().enumerate() {
            let level = self.levels.get(i).unwrap_or(last);
            let row = match level.words.get(*word) {
                Some(row) => &row.bits,
                None if i == 0 && topic.is_dollar() => &empty,
                None => &level.other,
            };
            if row.is_empty() {
                return;
            }
            rows.push(row);
        }
        let null = &self.levels.get(words.len()).unwrap_or(last).null;
        if null.is_empty() {
            return;
        }
        rows.push(null);
        // AND the smallest rows first: the accumulator only shrinks. Once it is small, probing
        // each of its bits in the remaining rows is cheaper than a whole-bitmap AND.
        rows.sort_by_cached_key(|r| r.len());
        let mut acc = match rows.as_slice() {
            [only] => (*only).clone(),
            [a, b, ..] => *a & *b,
            [] => unreachable!("the null row is always there"),
        };
        let mut rest = rows.iter().skip(2);
        while acc.len() > PROBE_BELOW {
            match rest.next() {
                Some(row) => acc &= *row,
                None => break,
            }
        }
        let rest: Vec<&RoaringBitmap> = rest.copied().collect();
        for n in &acc {
            if rest.iter().all(|row| row.contains(n)) {
                self.patterns.emit(n, out);
            }
        }
    }
}

/// Below this many candidates, a lookup probes the remaining rows bit by bit.
const PROBE_BELOW: u64 = 16;

/// Sets or clears bit `n`. A new pattern usually has the highest number, so try the end of the
/// bitmap first: a wildcard's write touches every word row of a level, and in each row this
/// reads one cache line where a binary search reads a dozen.
fn flip(bits: &mut RoaringBitmap, n: u32, on: bool) {
    if on {
        if bits.try_push(n).is_err() {
            bits.insert(n);
        }
    } else if bits.max() == Some(n) {
        bits.remove_biggest(1);
    } else {
        bits.remove(n);
    }
}

impl Matcher for LevelBitmap {
    fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn subscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        assert_eq!(
            pattern.dialect(),
            self.dialect,
            "pattern of another dialect"
        );
        let d = self.dialect;
        let pattern = Arc::new(pattern.clone());
        self.state
            .write(|s| match s.patterns.subscribe(&pattern, id) {
                None => false,
                Some((n, new)) => {
                    if new {
                        s.index(d, &pattern, n, true);
                    }
                    true
                }
            })
    }

    fn unsubscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        assert_eq!(
            pattern.dialect(),
            self.dialect,
            "pattern of another dialect"
        );
        let d = self.dialect;
        self.state
            .write(|s| match s.patterns.unsubscribe(pattern.text(), id) {
                None => false,
                Some((n, gone)) => {
                    if gone {
                        s.index(d, pattern, n, false);
                    }
                    true
                }
            })
    }

    fn contains(&self, pattern: &str, id: SubscriberId) -> bool {
        self.state.read(|s| s.patterns.contains(pattern, id))
    }

    fn lookup_into(&self, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        assert_eq!(topic.dialect(), self.dialect, "topic of another dialect");
        let start = out.len();
        self.state.read(|s| s.collect(topic, out));
        dedup_from(out, start);
    }

    fn remove_subscriber(&self, id: SubscriberId) -> usize {
        let d = self.dialect;
        self.state.write(|s| {
            let removed = s.patterns.remove_subscriber(id);
            for (n, gone) in &removed {
                if let Some(pattern) = gone {
                    s.index(d, pattern, *n, false);
                }
            }
            removed.len()
        })
    }

    fn len(&self) -> usize {
        self.state.read(|s| s.patterns.len())
    }

    fn subscriptions(&self) -> Vec<(String, SubscriberId)> {
        self.state.read(|s| s.patterns.subscriptions())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(mut v: Vec<SubscriberId>) -> Vec<SubscriberId> {
        v.sort_unstable();
        v
    }

    /// `(dialect, pattern, topic, expected)` rows across the dialects' edge cases.
    const TABLE: &[(Dialect, &str, &str, bool)] = &[
        (Dialect::Amqp, "#", "", true),
        (Dialect::Amqp, "", "", true),
        (Dialect::Amqp, "", "a", false),
        (Dialect::Amqp, "*", "", false),
        (Dialect::Amqp, "a.#", "a", true),
        (Dialect::Amqp, "a.#.b", "a.x.b", true),
        (Dialect::Amqp, "#.a", "b.a", true),
        (Dialect::Amqp, "#.#", "a.b", true),
        (Dialect::Amqp, "a..b", "a..b", true),
        (Dialect::Amqp, "*.*", ".", true),
        (Dialect::Amqp, "a*", "ab", false),
        (Dialect::Mqtt, "a/#", "a", true),
        (Dialect::Mqtt, "a/+/#", "a", false),
        (Dialect::Mqtt, "#", "$SYS/x", false),
        (Dialect::Mqtt, "+/x", "$SYS/x", false),
        (Dialect::Mqtt, "$SYS/#", "$SYS", true),
        (Dialect::Mqtt, "+/+", "/a", true),
        (Dialect::Mqtt, "a/b", "a/b/c", false),
        (Dialect::Nats, "a.>", "a", false),
        (Dialect::Nats, "a.>", "a.b.c", true),
        (Dialect::Nats, ">", "a", true),
        (Dialect::Nats, "a.*", "a.b", true),
        (Dialect::Nats, "a.*", "a.b.c", false),
    ];

    #[test]
    fn rows_agree_with_the_reference_table() {
        for &(d, p, t, want) in TABLE {
            let m = LevelBitmap::new(d);
            m.subscribe_str(p, 1).unwrap();
            // Noise, so the tables have named words and deeper levels.
            m.subscribe_str(&format!("q{}z", d.separator() as char), 2)
                .unwrap();
            let got = m.lookup_str(t).unwrap().contains(&1);
            assert_eq!(got, want, "{d}: {p:?} vs {t:?}");
        }
    }

    #[test]
    fn inner_hashes_go_to_the_side_index() {
        let m = LevelBitmap::new(Dialect::Amqp);
        m.subscribe_str("a.#.b", 1).unwrap();
        m.subscribe_str("#.#", 2).unwrap();
        m.subscribe_str("a.#", 3).unwrap();
        assert_eq!(m.side_patterns(), 2);
        assert_eq!(sorted(m.lookup_str("a.x.b").unwrap()), vec![1, 2, 3]);
        m.unsubscribe_str("a.#.b", 1).unwrap();
        assert_eq!(m.side_patterns(), 1);
    }

    #[test]
    fn long_patterns_go_to_the_side_index() {
        let m = LevelBitmap::new(Dialect::Nats);
        let long = vec!["w"; MAX_LEVELS + 5].join(".");
        m.subscribe_str(&long, 1).unwrap();
        assert_eq!(m.side_patterns(), 1);
        assert_eq!(m.lookup_str(&long).unwrap(), vec![1]);
    }

    #[test]
    fn words_deeper_than_every_pattern_take_the_saturated_level() {
        let m = LevelBitmap::new(Dialect::Mqtt);
        m.subscribe_str("a/#", 1).unwrap();
        m.subscribe_str("a/b", 2).unwrap();
        assert_eq!(m.lookup_str("a/b/c/d/e/f").unwrap(), vec![1]);
        m.unsubscribe_str("a/#", 1).unwrap();
        assert!(m.lookup_str("a/b/c/d/e/f").unwrap().is_empty());
        assert_eq!(m.lookup_str("a/b").unwrap(), vec![2]);
    }
}
