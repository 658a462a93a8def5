//! Relations between two patterns of one dialect, over every topic there is: whether some
//! topic matches both ([`intersects`]: the NATS server's "collide"), and whether every topic
//! one matches, the other matches too ([`subsumes`]: its `subjectIsSubsetMatch`, for every
//! dialect). A broker asks them when a subscription arrives: does an existing one already
//! cover it, which retained topics or permissions can it touch.
//!
//! Both read a pattern as the automaton of [`crate::reference`] (state `i`: the first `i`
//! tokens have matched) and explore pairs of states over an alphabet that is finite although
//! topics are not: a pattern only tells words apart by equality to its literals, so the
//! literals of the two patterns plus one word that is none of them (and does not start with
//! `$`) stand for every word. A topic whose first word starts with `$` and is no literal is
//! matched by no MQTT pattern, so it never decides anything and needs no letter.
//!
//! [`intersects`] runs both automata side by side: at most `(|a| + 1) × (|b| + 1)` pairs, each
//! stepped once per letter. [`subsumes`] must follow every state `a` can be in at once (`b`
//! may take any path, `a` must take none that fails): for MQTT and NATS, whose multi-word
//! wildcard ends a pattern, those sets stay tiny; AMQP's `#` anywhere can make them many
//! (`#.x.*.*.*.*` remembers which of the last words were `x`), because inclusion of such
//! patterns is hard in general. So [`subsumes`] stops with [`Error::TooComplex`] past
//! [`SUBSUMES_STATES`] pairs rather than run unbounded.

use std::collections::{HashSet, VecDeque};

use crate::dialect::{Dialect, Pattern, Token};
use crate::error::{Error, Result};

/// The most pairs of states [`subsumes`] explores before it gives up.
pub const SUBSUMES_STATES: usize = 1 << 20;

/// A word as the two patterns can tell it apart: one of their literals, or any other word.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Letter<'a> {
    Literal(&'a str),
    Other,
}

/// One pattern's automaton, with its dialect's rules.
struct Automaton<'a> {
    tokens: &'a [Token],
    /// `#` matches zero words (AMQP, MQTT); NATS `>` needs one.
    zero_or_more: bool,
    /// The MQTT rule: a first word starting with `$` is not matched by a first-level wildcard.
    dollar_rule: bool,
}

/// A set of states of one automaton: bit `i` for state `i`.
type States = Vec<u64>;

impl<'a> Automaton<'a> {
    fn new(p: &'a Pattern) -> Self {
        let d = p.dialect();
        Automaton {
            tokens: p.tokens(),
            zero_or_more: d.many_min() == 0,
            dollar_rule: d.has_dollar_rule()
                && matches!(p.tokens().first(), Some(Token::One | Token::Many)),
        }
    }

    fn accepts(&self, s: &States) -> bool {
        has(s, self.tokens.len())
    }

    /// Adds state `i` and what it reaches without a word (a `#` that matches none).
    fn add(&self, s: &mut States, mut i: usize) {
        loop {
            put(s, i);
            match self.tokens.get(i) {
                Some(Token::Many) if self.zero_or_more => i += 1,
                _ => return,
            }
        }
    }

    /// The set of the one state `i`.
    fn only(&self, i: usize) -> States {
        let mut s = vec![0; self.tokens.len() / 64 + 1];
        put(&mut s, i);
        s
    }

    fn start(&self) -> States {
        let mut s = vec![0; self.tokens.len() / 64 + 1];
        self.add(&mut s, 0);
        s
    }

    /// The states after one more word, read as the `first` word of the topic or a later one.
    fn step(&self, s: &States, letter: Letter<'_>, first: bool) -> States {
        let mut next = vec![0; s.len()];
        if first && self.dollar_rule && matches!(letter, Letter::Literal(w) if w.starts_with('$')) {
            return next;
        }
        for i in members(s) {
            match self.tokens.get(i) {
                Some(Token::Word(x)) if letter == Letter::Literal(x) => self.add(&mut next, i + 1),
                Some(Token::One) => self.add(&mut next, i + 1),
                Some(Token::Many) => {
                    // The wildcard takes this word and may take more.
                    self.add(&mut next, i);
                    self.add(&mut next, i + 1);
                }
                _ => {}
            }
        }
        next
    }
}

fn has(s: &States, i: usize) -> bool {
    s[i / 64] & (1 << (i % 64)) != 0
}

fn put(s: &mut States, i: usize) {
    s[i / 64] |= 1 << (i % 64);
}

fn members(s: &States) -> impl Iterator<Item = usize> + '_ {
    s.iter().enumerate().flat_map(|(k, &bits)| {
        (0..64)
            .filter(move |b| bits & (1 << b) != 0)
            .map(move |b| k * 64 + b)
    })
}

/// The letters that tell the words of `a` and `b` apart.
fn alphabet<'a>(a: &'a Pattern, b: &'a Pattern) -> Vec<Letter<'a>> {
    let mut seen = HashSet::new();
    let mut letters = vec![Letter::Other];
    for t in a.tokens().iter().chain(b.tokens()) {
        if let Token::Word(w) = t {
            if seen.insert(&**w) {
                letters.push(Letter::Literal(w));
            }
        }
    }
    letters
}

/// The patterns must share a dialect: comparing across dialects is a programming error.
fn same_dialect(a: &Pattern, b: &Pattern) {
    assert_eq!(a.dialect(), b.dialect(), "patterns of different dialects");
}

/// Whether some topic matches both `a` and `b` (NATS calls such subjects colliding).
///
/// # Panics
///
/// If the patterns are of different dialects.
pub fn intersects(a: &Pattern, b: &Pattern) -> bool {
    same_dialect(a, b);
    let (aa, ab) = (Automaton::new(a), Automaton::new(b));
    // AMQP's empty topic is a topic; MQTT and NATS topics have at least one word.
    let empty_ok = a.dialect() == Dialect::Amqp;
    let letters = alphabet(a, b);
    // Both automata may take any path: follow one state of each, so the pairs are at most
    // `(|a| + 1) × (|b| + 1)` (twice: before and after the first word).
    let mut seen = HashSet::new();
    let mut queue = VecDeque::new();
    for i in members(&aa.start()) {
        for j in members(&ab.start()) {
            seen.insert((i, j, false));
            queue.push_back((i, j, false));
        }
    }
    while let Some((i, j, read)) = queue.pop_front() {
        if (read || empty_ok) && i == a.tokens().len() && j == b.tokens().len() {
            return true;
        }
        for &l in &letters {
            let next_a = aa.step(&aa.only(i), l, !read);
            let next_b = ab.step(&ab.only(j), l, !read);
            for i2 in members(&next_a) {
                for j2 in members(&next_b) {
                    if seen.insert((i2, j2, true)) {
                        queue.push_back((i2, j2, true));
                    }
                }
            }
        }
    }
    false
}

/// Whether every topic that `b` matches, `a` matches too (`a` is at least as wide as `b`).
///
/// Returns [`Error::TooComplex`] when deciding it would explore more than
/// [`SUBSUMES_STATES`] pairs of states, which only AMQP patterns with `#` before other
/// wildcards can ask for.
///
/// # Panics
///
/// If the patterns are of different dialects.
pub fn subsumes(a: &Pattern, b: &Pattern) -> Result<bool> {
    same_dialect(a, b);
    let (aa, ab) = (Automaton::new(a), Automaton::new(b));
    let empty_ok = a.dialect() == Dialect::Amqp;
    let letters = alphabet(a, b);
    // A counterexample is a topic that `b` matches by some path and `a` by none: follow one
    // state of `b` at a time, and every state of `a` at once.
    let sa = aa.start();
    let mut queue = VecDeque::new();
    let mut seen = HashSet::new();
    for i in members(&ab.start()) {
        if seen.insert((i, sa.clone(), false)) {
            queue.push_back((i, sa.clone(), false));
        }
    }
    while let Some((i, sa, read)) = queue.pop_front() {
        if i == b.tokens().len() && (read || empty_ok) && !aa.accepts(&sa) {
            return Ok(false);
        }
        for &l in &letters {
            for j in members(&ab.step(&ab.only(i), l, !read)) {
                let next = (j, aa.step(&sa, l, !read), true);
                if !seen.contains(&next) {
                    if seen.len() == SUBSUMES_STATES {
                        return Err(Error::TooComplex(format!(
                            "deciding whether {:?} covers {:?} takes more than {SUBSUMES_STATES} states",
                            a.text(),
                            b.text()
                        )));
                    }
                    seen.insert(next.clone());
                    queue.push_back(next);
                }
            }
        }
    }
    Ok(true)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn p(d: Dialect, s: &str) -> Pattern {
        d.parse_pattern(s).unwrap()
    }

    /// (dialect, a, b, a and b intersect, a subsumes b, b subsumes a)
    const FACTS: &[(Dialect, &str, &str, bool, bool, bool)] = &[
        // NATS sublist_test.go, TestSubjectIsSubsetMatch and the collide cases.
        (Dialect::Nats, "foo.*", "foo.bar", true, true, false),
        (Dialect::Nats, "foo.>", "foo.bar.baz", true, true, false),
        (Dialect::Nats, ">", "foo.*", true, true, false),
        (Dialect::Nats, "foo.*", "foo.>", true, false, true),
        (Dialect::Nats, "foo.bar", "foo.baz", false, false, false),
        (Dialect::Nats, "*.bar", "foo.*", true, false, false),
        (Dialect::Nats, "foo.>", "foo", false, false, false),
        (Dialect::Nats, "*", "*.*", false, false, false),
        // MQTT: `#` covers its parent, and the `$` rule.
        (Dialect::Mqtt, "a/#", "a", true, true, false),
        (Dialect::Mqtt, "#", "$SYS/#", false, false, false),
        (Dialect::Mqtt, "+/x", "$SYS/x", false, false, false),
        (Dialect::Mqtt, "$SYS/+", "$SYS/#", true, false, true),
        (Dialect::Mqtt, "#", "+/+", true, true, false),
        (Dialect::Mqtt, "+", "/", false, false, false),
        (Dialect::Mqtt, "+/+", "/", true, true, false),
        // AMQP: `#` anywhere, and the empty topic.
        (Dialect::Amqp, "#", "", true, true, false),
        (Dialect::Amqp, "#.#", "#", true, true, true),
        (Dialect::Amqp, "a.#.b", "a.*.b", true, true, false),
        (Dialect::Amqp, "#.x.#", "*.x", true, true, false),
        (Dialect::Amqp, "#.a", "b.#", true, false, false),
        (Dialect::Amqp, "*.#", "#.*", true, true, true),
        (Dialect::Amqp, "*", "", false, false, false),
    ];

    #[test]
    fn the_table_of_facts() {
        for &(d, a, b, meet, a_b, b_a) in FACTS {
            let (pa, pb) = (p(d, a), p(d, b));
            assert_eq!(intersects(&pa, &pb), meet, "{d} {a} meets {b}");
            assert_eq!(intersects(&pb, &pa), meet, "{d} {b} meets {a}");
            assert_eq!(subsumes(&pa, &pb).unwrap(), a_b, "{d} {a} covers {b}");
            assert_eq!(subsumes(&pb, &pa).unwrap(), b_a, "{d} {b} covers {a}");
        }
    }

    #[test]
    fn a_hostile_amqp_pair_is_refused_not_run_forever() {
        let stars = vec!["*"; 24].join(".");
        let a = p(Dialect::Amqp, &format!("#.x.{stars}"));
        let b = p(Dialect::Amqp, &format!("#.x.{stars}.#"));
        assert!(matches!(subsumes(&a, &b), Err(Error::TooComplex(_))));
        // Intersection stays polynomial for any pair.
        assert!(intersects(&a, &b));
    }
}
