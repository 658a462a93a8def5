//! The matching semantics, once, as the reference every matcher is tested against.
//!
//! A pattern is read as a small automaton over the topic's words: state `i` means "the first
//! `i` tokens have matched the words read so far". The set of live states advances one word at
//! a time, so a match costs O(tokens × words) whatever the pattern: AMQP's
//! `#.#.#.#.#.#.#.#.x` against a topic of 1,000 words takes a few thousand steps, where a
//! backtracking matcher would take exponential time.

use crate::dialect::{Dialect, Pattern, Token, Topic};
use crate::error::Result;

/// Whether `pattern` matches `topic`. Both must be of the same dialect.
pub fn pattern_matches(pattern: &Pattern, topic: &Topic<'_>) -> bool {
    debug_assert_eq!(pattern.dialect(), topic.dialect());
    tokens_match(pattern.dialect(), pattern.tokens(), topic)
}

/// Whether the pattern `tokens` match `topic` under `dialect`'s rules.
pub fn tokens_match(dialect: Dialect, tokens: &[Token], topic: &Topic<'_>) -> bool {
    let words = topic.words();
    if topic.is_dollar() && matches!(tokens.first(), Some(Token::One | Token::Many)) {
        return false;
    }
    if !tokens.contains(&Token::Many) {
        return tokens.len() == words.len()
            && tokens.iter().zip(words).all(|(t, w)| match t {
                Token::Word(x) => **x == **w,
                _ => true,
            });
    }
    let zero_or_more = dialect.many_min() == 0;
    let n = tokens.len();
    // The live states as a sparse list, with `seen[i] == step` marking membership, so a step
    // costs the number of live states rather than the pattern's length.
    let mut seen = vec![usize::MAX; n + 1];
    let mut live = Vec::new();
    let mut next = Vec::new();
    add(tokens, 0, 0, zero_or_more, &mut seen, &mut live);
    for (step, word) in words.iter().enumerate() {
        let step = step + 1;
        next.clear();
        for &i in &live {
            if i == n {
                continue;
            }
            match &tokens[i] {
                Token::Word(x) if **x != **word => {}
                Token::Word(_) | Token::One => {
                    add(tokens, i + 1, step, zero_or_more, &mut seen, &mut next)
                }
                Token::Many => {
                    // The wildcard absorbs this word and may absorb more.
                    add(tokens, i, step, zero_or_more, &mut seen, &mut next);
                    add(tokens, i + 1, step, zero_or_more, &mut seen, &mut next);
                }
            }
        }
        if next.is_empty() {
            return false;
        }
        std::mem::swap(&mut live, &mut next);
    }
    live.contains(&n)
}

/// Adds state `i` to the live list of `step`, and the states reached from it by letting
/// zero-or-more wildcards match nothing.
fn add(
    tokens: &[Token],
    mut i: usize,
    step: usize,
    zero_or_more: bool,
    seen: &mut [usize],
    live: &mut Vec<usize>,
) {
    loop {
        if seen[i] == step {
            return;
        }
        seen[i] = step;
        live.push(i);
        if !(zero_or_more && i < tokens.len() && tokens[i] == Token::Many) {
            return;
        }
        i += 1;
    }
}

/// Parses both strings in `dialect` and tells whether the pattern matches the topic.
pub fn matches(dialect: Dialect, pattern: &str, topic: &str) -> Result<bool> {
    let pattern = dialect.parse_pattern(pattern)?;
    let topic = dialect.parse_topic(topic)?;
    Ok(pattern_matches(&pattern, &topic))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(d: Dialect, p: &str, t: &str) -> bool {
        matches(d, p, t).unwrap()
    }

    #[test]
    fn amqp_hash_anywhere() {
        let d = Dialect::Amqp;
        assert!(m(d, "#", ""));
        assert!(m(d, "", ""));
        assert!(!m(d, "*", ""));
        assert!(m(d, "a.#.b", "a.b"));
        assert!(m(d, "a.#.b", "a.x.y.b"));
        assert!(m(d, "#.a", "a"));
        assert!(m(d, "a.#", "a"));
        assert!(m(d, "#.#", "a.b.c"));
        assert!(!m(d, "a.#.b", "a.b.c"));
        assert!(m(d, "a*b.c", "a*b.c"));
        assert!(!m(d, "a*b.c", "axb.c"));
        assert!(m(d, "*.*", "."));
        assert!(m(d, "a..b", "a..b"));
    }

    #[test]
    fn mqtt_rules() {
        let d = Dialect::Mqtt;
        assert!(m(d, "a/#", "a"));
        assert!(m(d, "+/+", "/a"));
        assert!(!m(d, "#", "$SYS/x"));
        assert!(!m(d, "+/x", "$SYS/x"));
        assert!(m(d, "$SYS/#", "$SYS"));
        assert!(m(d, "a/+/#", "a/b"));
        assert!(!m(d, "a/+/#", "a"));
    }

    #[test]
    fn nats_full_wildcard_needs_a_token() {
        let d = Dialect::Nats;
        assert!(!m(d, "a.>", "a"));
        assert!(m(d, "a.>", "a.b.c"));
        assert!(m(d, ">", "a"));
        assert!(m(d, "a.*", "a.b"));
        assert!(m(d, "a*", "a*"));
    }

    #[test]
    fn hash_chains_stay_polynomial() {
        let topic = vec!["w"; 1000].join(".");
        let pattern = format!("{}x", "#.".repeat(40));
        let start = std::time::Instant::now();
        assert!(!m(Dialect::Amqp, &pattern, &topic));
        assert!(start.elapsed().as_secs() < 5);
    }
}
