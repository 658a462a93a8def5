#![allow(dead_code)] // each fuzz target uses only its own half of these checks
//! The properties the fuzz targets check, shared with `tests/fuzz_regressions.rs`, which
//! replays the saved corpus and every crash ever found on each `cargo test`.

use arbitrary::{Arbitrary, Unstructured};
use topicmatch::{
    reference, CSTrie, Cached, Dialect, InvertedBitmap, LazyDfa, LevelBitmap, Matcher,
    NaiveMatcher, SubscriberId, Token, Trie,
};

/// Any bytes, in every dialect: parsing never panics, a parsed pattern or topic gives back its
/// text and its words, and a literal pattern matches exactly its own text.
pub fn check_parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (left, right) = text.split_once('|').unwrap_or((text, text));
    for d in Dialect::ALL {
        let sep = (d.separator() as char).to_string();
        let _ = d.parse_topic(left);
        let Ok(p) = d.parse_pattern(left) else {
            continue;
        };
        assert_eq!(p.text(), left);
        let words: Vec<&str> = p
            .tokens()
            .iter()
            .map(|t| match t {
                Token::Word(w) => &**w,
                Token::One => d.one_word(),
                Token::Many => d.many_words(),
            })
            .collect();
        assert_eq!(words.join(&sep), left);
        if let Ok(t) = d.parse_topic(right) {
            assert_eq!(t.words().join(&sep), right);
            let matched = reference::pattern_matches(&p, &t);
            if p.is_literal() {
                assert_eq!(matched, left == right, "{d} {left:?} ~ {right:?}");
            }
        }
    }
}

/// Words chosen to collide: empty, `$`, wildcard look-alikes, and the wildcards themselves.
const WORDS: [&str; 10] = ["a", "b", "", "$s", "a*", "x#", "+", "*", "#", ">"];

/// One step of a differential run.
#[derive(Arbitrary, Debug)]
pub enum Op {
    Subscribe(Vec<u8>, u8),
    Unsubscribe(Vec<u8>, u8),
    RemoveSubscriber(u8),
    Lookup(Vec<u8>),
    /// Freeze a CSTrie snapshot and the oracle's state beside it; later lookups check both.
    Snapshot,
}

/// A differential run: a dialect and a sequence of operations.
#[derive(Arbitrary, Debug)]
pub struct Case {
    pub dialect: u8,
    pub ops: Vec<Op>,
}

pub fn text(d: Dialect, words: &[u8]) -> String {
    let sep = (d.separator() as char).to_string();
    let ws: Vec<&str> = words
        .iter()
        .take(8)
        .map(|&w| WORDS[w as usize % WORDS.len()])
        .collect();
    ws.join(&sep)
}

/// Most snapshots one run keeps.
const SNAPSHOTS: usize = 4;

fn sorted(mut v: Vec<SubscriberId>) -> Vec<SubscriberId> {
    v.sort_unstable();
    v
}

/// Decodes `data` as a [`Case`] and runs it against every matcher and the oracle.
pub fn check_differential_bytes(data: &[u8]) {
    if let Ok(case) = Case::arbitrary_take_rest(Unstructured::new(data)) {
        check_differential(&case);
    }
}

/// Runs `case` against every matcher and the oracle; any difference panics.
pub fn check_differential(case: &Case) {
    let d = Dialect::ALL[case.dialect as usize % 3];
    let oracle = NaiveMatcher::new(d);
    // Every matcher under test; the CSTrie also gives the snapshots.
    let (trie, cstrie) = (Trie::new(d), CSTrie::new(d));
    let (inverted, small, level) = (
        InvertedBitmap::new(d),
        InvertedBitmap::with_cache_size(d, 2),
        LevelBitmap::new(d),
    );
    // Result caches small enough to evict, one always storing (admission off).
    let cached_cstrie = Cached::new(CSTrie::new(d), 4).without_admission();
    let cached_trie = Cached::new(Trie::new(d), 2);
    // The lazy DFA with room for every state an input can build, and with so little that
    // lookups flush the cache and fall back to simulating the NFA.
    let (dfa, tiny_dfa) = (LazyDfa::new(d), LazyDfa::with_budget(d, 600));
    let ms: [&dyn Matcher; 9] = [
        &trie,
        &cstrie,
        &inverted,
        &small,
        &level,
        &cached_cstrie,
        &cached_trie,
        &dfa,
        &tiny_dfa,
    ];
    let mut snapshots: Vec<(CSTrie, NaiveMatcher)> = Vec::new();
    for op in &case.ops {
        match op {
            Op::Subscribe(p, s) => {
                let (p, s) = (text(d, p), SubscriberId::from(*s % 8));
                let want = oracle.subscribe_str(&p, s);
                for m in &ms {
                    assert_eq!(m.subscribe_str(&p, s), want, "subscribe {p:?}");
                }
            }
            Op::Unsubscribe(p, s) => {
                let (p, s) = (text(d, p), SubscriberId::from(*s % 8));
                let want = oracle.unsubscribe_str(&p, s);
                for m in &ms {
                    assert_eq!(m.unsubscribe_str(&p, s), want, "unsubscribe {p:?}");
                }
            }
            Op::RemoveSubscriber(s) => {
                let want = oracle.remove_subscriber(SubscriberId::from(*s % 8));
                for m in &ms {
                    assert_eq!(m.remove_subscriber(SubscriberId::from(*s % 8)), want);
                }
            }
            Op::Lookup(t) => {
                let t = text(d, t);
                let want = oracle.lookup_str(&t).map(sorted);
                for m in &ms {
                    assert_eq!(m.lookup_str(&t).map(sorted), want, "lookup {t:?} ({d})");
                }
                for (snap, frozen) in &snapshots {
                    let want = frozen.lookup_str(&t).map(sorted);
                    assert_eq!(
                        snap.lookup_str(&t).map(sorted),
                        want,
                        "snapshot {t:?} ({d})"
                    );
                }
            }
            Op::Snapshot => {
                if snapshots.len() == SNAPSHOTS {
                    snapshots.remove(0);
                }
                let frozen = NaiveMatcher::new(d);
                for (p, s) in oracle.subscriptions() {
                    frozen
                        .subscribe_str(&p, s)
                        .expect("the oracle's own pattern");
                }
                snapshots.push((cstrie.snapshot(), frozen));
            }
        }
        for m in &ms {
            assert_eq!(m.len(), oracle.len());
        }
    }
}
