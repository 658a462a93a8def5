//! Selectors that no trie can index, and [`SelectorIndex`], which matches them the skipfilter
//! way.
//!
//! Sources: the Mercure hub (Kévin Dunglas, `dunglas/mercure`), whose subscribers name the
//! topics they want by topic selectors (`*`, an exact topic or an RFC 6570 URI template), and
//! `dunglas/skipfilter` (after `kevburnsjr/skipfilter`), which stopped Mercure from testing
//! every selector of every subscriber against every topic of every update by caching, per
//! topic, a roaring bitmap of the subscribers that want it. URI templates follow RFC 6570
//! (see [`template`]).
//!
//! # Selectors
//!
//! | selector | admits |
//! |---|---|
//! | `*` | every topic |
//! | `re:<pattern>` | topics that `pattern` (the `regex` crate's syntax) matches *in full*: the pattern is anchored at both ends, like every other selector; write `re:.*part.*` to search |
//! | a string with `{` that parses as an RFC 6570 URI template | its expansions (see `template.rs`), and the template's own text |
//! | any other string (a `{` that is no template included) | that exact topic |
//!
//! The `{` rule is Mercure's (`topic_selector.go` tries a selector as a template only if it
//! holds `{`). Mercure compares a selector with the topic for equality before anything else, so
//! a template admits its own text too, and a selector that does not parse as a template admits
//! its own text and nothing else; so does this module ([`template::check`] says why such a
//! selector is not a template). An invalid `re:` pattern (not Mercure's) and the empty selector
//! are rejected with [`Error::InvalidPattern`] and the reason.
//!
//! # Complexity
//!
//! [`Selector::parse`] is linear in the selector (a `re:` pattern is compiled twice: alone, to
//! check that it is a whole pattern, then anchored). [`Selector::admits`] is O(1) for `*`,
//! linear in the topic otherwise (string comparison or one regex run, linear time by the
//! `regex` crate's guarantee); a template first compares the literal text before its first
//! expression and after its last with the topic's ends, which rejects most topics without
//! running the regex. Compiled regular expressions are capped at 1 MiB each.

mod index;
mod lru;
pub mod template;

use std::fmt;

use regex::Regex;

use crate::error::{Error, Invalid, Result};

pub use index::{CacheStats, SelectorIndex, DEFAULT_CACHE_SIZE};

/// The prefix that marks a regular-expression selector.
pub const REGEX_PREFIX: &str = "re:";

/// What kind of selector a string is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelectorKind {
    /// `*`: every topic.
    All,
    /// A topic compared for equality.
    Exact,
    /// An RFC 6570 URI template.
    UriTemplate,
    /// `re:<pattern>`: a regular expression matched against the whole topic.
    Regex,
}

#[derive(Clone)]
enum Compiled {
    All,
    Exact,
    /// The regex, and the lengths of the literal text before the first expression and after
    /// the last: a topic must start and end with them, checked before the regex runs, so that
    /// most rejections touch neither the regex nor its cache.
    Template(Regex, usize, usize),
    Regex(Regex),
}

/// A parsed and compiled topic selector.
#[derive(Clone)]
pub struct Selector {
    text: Box<str>,
    compiled: Compiled,
}

impl fmt::Debug for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Selector")
            .field("text", &self.text)
            .field("kind", &self.kind())
            .finish()
    }
}

impl PartialEq for Selector {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Selector {}

impl Selector {
    /// Parses and compiles a selector; [`Error::InvalidPattern`] says why one is rejected.
    pub fn parse(text: &str) -> Result<Selector> {
        let compiled = if text.is_empty() {
            return Err(Error::InvalidPattern(Invalid::new(
                None,
                text,
                0,
                "empty selector",
            )));
        } else if text == "*" {
            Compiled::All
        } else if let Some(pattern) = text.strip_prefix(REGEX_PREFIX) {
            Compiled::Regex(compile_regex(text, pattern)?)
        } else if text.contains('{') {
            let head = text.find('{').unwrap_or(0);
            let tail = text.len() - text.rfind('}').map_or(text.len(), |i| i + 1);
            // Mercure's rule: what is not a template is compared as a string.
            match template::compile(text) {
                Ok(re) => Compiled::Template(re, head, tail),
                Err(_) => Compiled::Exact,
            }
        } else {
            Compiled::Exact
        };
        Ok(Selector {
            text: text.into(),
            compiled,
        })
    }

    /// The selector as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The kind of selector.
    pub fn kind(&self) -> SelectorKind {
        match self.compiled {
            Compiled::All => SelectorKind::All,
            Compiled::Exact => SelectorKind::Exact,
            Compiled::Template(..) => SelectorKind::UriTemplate,
            Compiled::Regex(_) => SelectorKind::Regex,
        }
    }

    /// Whether the selector admits `topic`.
    pub fn admits(&self, topic: &str) -> bool {
        match &self.compiled {
            Compiled::All => true,
            Compiled::Exact => *self.text == *topic,
            Compiled::Template(re, head, tail) => {
                topic.starts_with(&self.text[..*head])
                    && topic.ends_with(&self.text[self.text.len() - tail..])
                    && (*self.text == *topic || re.is_match(topic))
            }
            Compiled::Regex(re) => re.is_match(topic),
        }
    }
}

/// Compiles the pattern of a `re:` selector, anchored at both ends.
fn compile_regex(text: &str, pattern: &str) -> Result<Regex> {
    let at = REGEX_PREFIX.len();
    let err = |e: regex::Error| {
        let reason = match e {
            regex::Error::CompiledTooBig(limit) => {
                format!("regular expression too large to compile (over {limit} bytes)")
            }
            regex::Error::Syntax(msg) => {
                // The message quotes the pattern over several lines; keep the "error:" line.
                let line = msg
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("error: "))
                    .unwrap_or(msg.trim());
                format!("invalid regular expression: {line}")
            }
            other => format!("invalid regular expression: {other}"),
        };
        Error::InvalidPattern(Invalid::new(None, text, at, reason))
    };
    if pattern.is_empty() {
        return Err(Error::InvalidPattern(Invalid::new(
            None,
            text,
            at,
            "empty regular expression",
        )));
    }
    // Compiled alone first, so that a pattern such as `a)|(b` cannot escape the anchoring
    // group below: a pattern that compiles alone has balanced groups.
    template::build_regex(pattern).map_err(err)?;
    template::build_regex(&format!("\\A(?:{pattern})\\z")).map_err(err)
}
