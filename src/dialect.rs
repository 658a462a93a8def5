//! The three dialects: how a string splits into words, which strings are valid, and the parsed
//! forms ([`Pattern`], [`Topic`]) that every matcher shares, so no matcher splits or validates
//! strings on its own.
//!
//! | | AMQP 0-9-1 | MQTT 3.1.1 / 5 | NATS |
//! |---|---|---|---|
//! | separator | `.` | `/` | `.` |
//! | one word | `*` | `+` | `*` |
//! | many words | `#`: zero or more, anywhere, any number of times | `#`: zero or more, last level only | `>`: one or more, last token only |
//! | wildcard inside a word | literal | invalid filter | literal |
//! | empty words | legal | legal | invalid |
//! | empty topic | zero words | invalid | invalid |
//! | `$` topics | nothing special | not matched by a first-level `+` or `#` | nothing special |
//! | wildcards in a topic | literal words | invalid | invalid |

use std::fmt;
use std::mem::MaybeUninit;
use std::str::FromStr;

use smallvec::SmallVec;

use crate::bytes;
use crate::error::{Error, Invalid, Result};

/// The longest MQTT topic or filter: its strings carry a two-byte length prefix.
pub const MQTT_MAX_BYTES: usize = 65_535;

/// A topic-matching dialect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dialect {
    /// AMQP 0-9-1 topic exchange (RabbitMQ, Qpid).
    #[default]
    Amqp,
    /// MQTT 3.1.1 and 5 topic filters (mosquitto, EMQX, paho).
    Mqtt,
    /// NATS subjects (nats-server sublist).
    Nats,
}

/// One word of a pattern, borrowed from the pattern's text: what the tries walk and build
/// by, so that a pattern given as text is never built into an owned [`Pattern`] on the way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Key<'a> {
    Word(&'a str),
    One,
    Many,
}

impl<'a> Key<'a> {
    /// The key of a parsed pattern's token.
    pub(crate) fn of(token: &'a Token) -> Key<'a> {
        match token {
            Token::Word(w) => Key::Word(w),
            Token::One => Key::One,
            Token::Many => Key::Many,
        }
    }
}

/// What the tries' writes walk by: a pattern's words as keys, taken from a parsed
/// [`Pattern`]'s tokens where they lie or from keys scanned out of a pattern's text. A write
/// of a parsed pattern used to collect its tokens into [`Keys`] first: a sixth of the
/// instructions of subscribing a pair already there (the collect, and the move of the
/// 200-byte inline vector it returns).
pub(crate) trait AsKey {
    /// This word as a branch key.
    fn key(&self) -> Key<'_>;
}

impl AsKey for Key<'_> {
    #[inline]
    fn key(&self) -> Key<'_> {
        *self
    }
}

impl AsKey for Token {
    #[inline]
    fn key(&self) -> Key<'_> {
        Key::of(self)
    }
}

/// Keys a scanned pattern holds inline before they spill to the heap. Fewer than a topic's
/// words: [`Dialect::pattern_keys`] returns them through a `Result`, which copies the inline
/// array whole (at 16 keys, 400 bytes: 100 instructions more a subscribe of text, before the
/// writes took their keys in place through [`Dialect::with_pattern_keys`]).
const INLINE_KEYS: usize = 8;

/// A pattern's keys: inline up to [`INLINE_KEYS`], so that scanning a pattern of up to eight
/// words allocates nothing.
pub(crate) type Keys<'a> = SmallVec<[Key<'a>; INLINE_KEYS]>;

/// Room for words that [`Dialect::with_pattern_keys`] keeps on the stack (512 bytes): a
/// pattern of fewer bytes has at most this many words; a longer one allocates.
const STACK_KEYS: usize = 32;

/// `items`, every one of them written, as the keys they hold.
///
/// # Safety
/// Every item of `items` is initialized.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn assume_init<'s, 't>(items: &'s [MaybeUninit<Key<'t>>]) -> &'s [Key<'t>] {
    // SAFETY: `MaybeUninit<T>` has `T`'s size and alignment, so the slices have one layout,
    // and the caller vouches that each item is initialized.
    unsafe { std::slice::from_raw_parts(items.as_ptr().cast::<Key<'t>>(), items.len()) }
}

/// One word of a parsed pattern.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Token {
    /// A literal word, compared byte for byte.
    Word(Box<str>),
    /// Exactly one word: AMQP and NATS `*`, MQTT `+`.
    One,
    /// Many words: AMQP and MQTT `#` (zero or more), NATS `>` (one or more); see
    /// [`Dialect::many_min`].
    Many,
}

impl Dialect {
    /// Every dialect, for tests and tools that iterate over them.
    pub const ALL: [Dialect; 3] = [Dialect::Amqp, Dialect::Mqtt, Dialect::Nats];

    /// The dialect's lower-case name, as Python spells it.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Amqp => "amqp",
            Dialect::Mqtt => "mqtt",
            Dialect::Nats => "nats",
        }
    }

    /// The byte that separates words.
    pub fn separator(self) -> u8 {
        match self {
            Dialect::Mqtt => b'/',
            Dialect::Amqp | Dialect::Nats => b'.',
        }
    }

    /// The word that stands for exactly one word.
    pub fn one_word(self) -> &'static str {
        match self {
            Dialect::Mqtt => "+",
            Dialect::Amqp | Dialect::Nats => "*",
        }
    }

    /// The word that stands for many words.
    pub fn many_words(self) -> &'static str {
        match self {
            Dialect::Nats => ">",
            Dialect::Amqp | Dialect::Mqtt => "#",
        }
    }

    /// The fewest words that [`Token::Many`] matches: 0 for `#`, 1 for NATS `>`.
    pub fn many_min(self) -> usize {
        match self {
            Dialect::Nats => 1,
            Dialect::Amqp | Dialect::Mqtt => 0,
        }
    }

    /// Whether the MQTT rule applies: a topic whose first level starts with `$` is not matched
    /// by a filter whose first level is a wildcard.
    pub fn has_dollar_rule(self) -> bool {
        self == Dialect::Mqtt
    }

    /// The text of a topic or pattern from its words: `words` joined by the separator.
    pub(crate) fn join<S: AsRef<str>>(self, words: &[S]) -> String {
        let mut text = String::new();
        for (i, w) in words.iter().enumerate() {
            if i > 0 {
                text.push(self.separator() as char);
            }
            text.push_str(w.as_ref());
        }
        text
    }

    /// Splits `text` into words. AMQP's empty string is zero words; everywhere else the empty
    /// string between two separators is an (empty) word.
    fn split(self, text: &str) -> impl Iterator<Item = (usize, &str)> {
        let sep = self.separator() as char;
        let empty_amqp = self == Dialect::Amqp && text.is_empty();
        let mut offset = 0;
        text.split(sep).filter(move |_| !empty_amqp).map(move |w| {
            let at = offset;
            offset += w.len() + 1;
            (at, w)
        })
    }

    /// Checks what every word of a string must satisfy in this dialect, pattern or topic.
    fn check_common(self, text: &str, make: fn(Invalid) -> Error) -> Result<()> {
        let fail = |at: usize, why: &str| Err(make(Invalid::new(Some(self), text, at, why)));
        match self {
            Dialect::Amqp => {}
            Dialect::Mqtt => {
                if text.is_empty() {
                    return fail(0, "MQTT topics and filters are at least one character long");
                }
                if text.len() > MQTT_MAX_BYTES {
                    return fail(MQTT_MAX_BYTES, "longer than MQTT's 65,535 bytes");
                }
                if let Some(at) = text.bytes().position(|b| b == 0) {
                    return fail(at, "MQTT forbids the NUL character");
                }
            }
            Dialect::Nats => {
                if text.is_empty() {
                    return fail(0, "a NATS subject is at least one token");
                }
                if let Some(at) = text.bytes().position(|b| b" \t\r\n\x0c".contains(&b)) {
                    return fail(at, "NATS subjects contain no white space");
                }
                // The server's rune check (`isValidSubject` with `checkRunes`) and the NATS
                // documentation's "any ASCII character except null".
                if let Some(at) = text.bytes().position(|b| b == 0) {
                    return fail(at, "NATS subjects contain no NUL character");
                }
                for (at, word) in self.split(text) {
                    if word.is_empty() {
                        return fail(at, "NATS subjects have no empty tokens");
                    }
                }
            }
        }
        Ok(())
    }

    /// Parses and validates a subscription pattern.
    pub fn parse_pattern(self, text: &str) -> Result<Pattern> {
        let mut tokens = Vec::new();
        self.scan_pattern(text, |key| {
            tokens.push(match key {
                Key::Word(w) => Token::Word(w.into()),
                Key::One => Token::One,
                Key::Many => Token::Many,
            })
        })?;
        Ok(Pattern {
            dialect: self,
            text: text.into(),
            tokens,
        })
    }

    /// Validates a subscription pattern as [`Dialect::parse_pattern`] does, with the same
    /// errors, without building it: nothing is allocated for a valid pattern.
    pub fn check_pattern(self, text: &str) -> Result<()> {
        self.scan_pattern(text, |_| {})
    }

    /// Validates a subscription pattern as [`Dialect::parse_pattern`] does and returns its
    /// words borrowed from `text`: nothing is allocated for up to [`INLINE_KEYS`] words. For
    /// callers that keep the keys; a write uses [`with_pattern_keys`](Self::with_pattern_keys).
    pub(crate) fn pattern_keys(self, text: &str) -> Result<Keys<'_>> {
        self.with_pattern_keys(text, Keys::from_slice)
    }

    /// Validates a subscription pattern and hands its words to `f` where they were gathered:
    /// a write of text that took them through `pattern_keys`'s `Result` copied them (200
    /// bytes, a tenth of a subscribe's instructions when the pair is already there), even
    /// with `pattern_keys` inlined.
    ///
    /// A pattern under [`STACK_KEYS`] bytes has its words put in an array on the stack, left
    /// uninitialized past them, a longer one in a vector: a `SmallVec` asked at each push
    /// where its items lie and how much room it has (`subscribe_str` of a pair already there
    /// on the `Trie`: 732 instructions with it, 710 so). `f` is called from one place, so that
    /// it is put in line (called from two, it was not, and the gain went).
    #[inline]
    #[allow(unsafe_code)]
    pub(crate) fn with_pattern_keys<'t, R>(
        self,
        text: &'t str,
        f: impl FnOnce(&[Key<'t>]) -> R,
    ) -> Result<R> {
        let mut stack = [MaybeUninit::<Key<'t>>::uninit(); STACK_KEYS];
        let mut heap: Vec<Key<'t>> = Vec::new();
        // A pattern has at most one word more than it has bytes.
        let keys = if text.len() < STACK_KEYS {
            let mut n = 0;
            self.scan_pattern(text, |key| {
                stack[n].write(key);
                n += 1;
            })?;
            // SAFETY: the first `n` items were written, one at each push before `n` counted it.
            unsafe { assume_init(&stack[..n]) }
        } else {
            self.scan_pattern(text, |key| heap.push(key))?;
            &heap
        };
        Ok(f(keys))
    }

    /// Checks `text` as a pattern and hands each of its words to `each`, in one pass over its
    /// bytes. On a fault `each` may have seen the words before it (every caller drops what
    /// it gathered with the error), and [`scan_pattern_by_rules`](Self::scan_pattern_by_rules)
    /// names the fault.
    ///
    /// Why a pass of its own: the rules checked one at a time (a scan for NUL and white
    /// space, a split into words and a peek past each, a string compare per wildcard) cost
    /// about 930 instructions on `foo.*.baz.qux.quux`, more than walking a `CSTrie` to find
    /// the pair there already.
    #[inline]
    fn scan_pattern<'t>(self, text: &'t str, each: impl FnMut(Key<'t>)) -> Result<()> {
        // One copy of the scan per dialect, each with its dialect a constant: its bytes, its
        // rules and the chunk test fold into the code.
        match self {
            Dialect::Amqp => Self::scan_pattern_as::<{ Dialect::Amqp as u8 }>(text, each),
            Dialect::Mqtt => Self::scan_pattern_as::<{ Dialect::Mqtt as u8 }>(text, each),
            Dialect::Nats => Self::scan_pattern_as::<{ Dialect::Nats as u8 }>(text, each),
        }
    }

    /// [`scan_pattern`](Self::scan_pattern) for the dialect `D`, written once for the three. A
    /// copy of its own per dialect, not one copy in line three times: that one's closures
    /// were called from three places, left out of line, and the dialect with them.
    #[inline(always)]
    fn scan_pattern_as<'t, const D: u8>(
        text: &'t str,
        mut each: impl FnMut(Key<'t>),
    ) -> Result<()> {
        let this = Dialect::ALL[D as usize];
        let bytes = text.as_bytes();
        let class = &PATTERN_CLASSES[this as usize];
        let faulty = match this {
            // AMQP's empty pattern has no words.
            Dialect::Amqp if bytes.is_empty() => return Ok(()),
            Dialect::Mqtt => bytes.is_empty() || bytes.len() > MQTT_MAX_BYTES,
            Dialect::Amqp | Dialect::Nats => false,
        };
        if !faulty {
            let mut start = 0;
            // Eight bytes at a time while no chunk may hold a banned byte, or one that must
            // stand alone and may not (`cut_chunks`), as the topic parser does; a suspect chunk
            // goes to the byte loop with the rest. A byte at a time, the scan was a third of a
            // subscribe of a pair already there.
            let reached = this.cut_chunks(bytes, true, |end| {
                match this.key_of(text, start, end, false, false) {
                    Some(key) => {
                        each(key);
                        start = end + 1;
                        true
                    }
                    None => false,
                }
            });
            let (mut i, mut ok) = match reached {
                Some(at) => (at, true),
                None => (0, false),
            };
            // Whether the word being cut holds a byte that must stand alone (none before `i`).
            let mut alone = false;
            while ok {
                // Ordinary bytes: one load and a compare each.
                while i < bytes.len() && class[bytes[i] as usize] == 0 {
                    i += 1;
                }
                if i < bytes.len() {
                    match class[bytes[i] as usize] {
                        BANNED => ok = false,
                        ALONE => {
                            alone = true;
                            i += 1;
                            continue;
                        }
                        _ => {} // SEPARATOR
                    }
                }
                if !ok {
                    break;
                }
                let last = i == bytes.len();
                let Some(key) = this.key_of(text, start, i, alone, last) else {
                    ok = false;
                    break;
                };
                each(key);
                if last {
                    break;
                }
                i += 1;
                start = i;
                alone = false;
            }
            if ok {
                return Ok(());
            }
        }
        this.scan_pattern_by_rules(text, |_| {})?;
        unreachable!("the one-pass scan of {text:?} found a fault the rules did not")
    }

    /// The key of the pattern's word `start..end` of `text`, or `None` if it breaks a rule;
    /// `alone`: it holds a byte that must stand alone, `last`: no separator follows it. In line
    /// in each dialect's copy of the scan (called, it was a sixth of a scan).
    #[inline(always)]
    fn key_of(
        self,
        text: &str,
        start: usize,
        end: usize,
        alone: bool,
        last: bool,
    ) -> Option<Key<'_>> {
        let (one, many) = (
            self.one_word().as_bytes()[0],
            self.many_words().as_bytes()[0],
        );
        Some(match &text.as_bytes()[start..end] {
            [b] if *b == one => Key::One,
            [b] if *b == many => {
                if self != Dialect::Amqp && !last {
                    return None;
                }
                Key::Many
            }
            [] if self == Dialect::Nats => return None,
            _ if alone => return None,
            _ => Key::Word(word_between(text, start, end)),
        })
    }

    /// Checks `text` as a pattern one rule at a time and hands each of its words to `each`:
    /// what names the first fault for [`scan_pattern`](Self::scan_pattern), and its oracle in
    /// the tests.
    fn scan_pattern_by_rules<'t>(self, text: &'t str, mut each: impl FnMut(Key<'t>)) -> Result<()> {
        self.check_common(text, Error::InvalidPattern)?;
        let fail = |at: usize, why: &str| {
            Err(Error::InvalidPattern(Invalid::new(
                Some(self),
                text,
                at,
                why,
            )))
        };
        let (one, many) = (self.one_word(), self.many_words());
        let mut words = self.split(text).peekable();
        while let Some((at, word)) = words.next() {
            let last = words.peek().is_none();
            let key = if word == one {
                Key::One
            } else if word == many {
                if self != Dialect::Amqp && !last {
                    return fail(at, "the multi-level wildcard must be the last word");
                }
                Key::Many
            } else {
                if self == Dialect::Mqtt {
                    if let Some(i) = word.find(['+', '#']) {
                        return fail(at + i, "a wildcard must occupy a whole level");
                    }
                }
                Key::Word(word)
            };
            each(key);
        }
        Ok(())
    }

    /// Parses and validates a message topic, in one pass over its bytes and without
    /// allocating for topics of up to [`INLINE_WORDS`] words.
    #[inline]
    pub fn parse_topic(self, text: &str) -> Result<Topic<'_>> {
        let mut topic = Topic::unparsed(self, text);
        self.parse_in_place(&mut topic)?;
        Ok(topic)
    }

    /// Parses `text` as [`Dialect::parse_topic`] does and calls `f` with the topic where the
    /// parser wrote it. A topic returned inside a `Result` is copied out of it (150 bytes, a
    /// `memcpy` call whose loads stall on the parser's stores just made: 5 % of a bare hot
    /// lookup's time), so the lookups of a text (`Matcher::lookup_str_into` and its kin) use
    /// this instead.
    #[inline]
    pub(crate) fn with_topic<R>(self, text: &str, f: impl FnOnce(&Topic<'_>) -> R) -> Result<R> {
        let mut topic = Topic::unparsed(self, text);
        self.parse_in_place(&mut topic)?;
        Ok(f(&topic))
    }

    /// The part of a topic parse or a pattern scan done eight bytes at a time: calls `cut` with
    /// the index of each separator in `bytes`, in order, chunk by chunk, until fewer than eight
    /// bytes are left or a chunk is suspect. Returns where the byte loop goes on (that chunk's
    /// start, or the tail's), or `None` as soon as `cut` returns `false`.
    ///
    /// A chunk is suspect if it may hold a byte a topic of this dialect bans, which is also
    /// every byte a pattern bans or must have alone in its word (MQTT: NUL, `+`, `#`); the test
    /// is true of every such chunk and of a few others (NATS's control bytes that are allowed).
    /// For a `pattern`, an MQTT `+` with a separator (or the text's end) on each side is not
    /// suspect: the filters' single-level wildcard is a word of its own, which the chunks cut
    /// as any other (it sent the rest of the filter to the byte loop, a third of its scan).
    /// The dialect is matched once, here, not at every chunk.
    #[inline(always)]
    fn cut_chunks(
        self,
        bytes: &[u8],
        pattern: bool,
        mut cut: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        let (below, plus_or_hash) = match self {
            Dialect::Amqp => (0, false),
            Dialect::Mqtt => (1, true),
            Dialect::Nats => (b' ' + 1, false),
        };
        let sep = self.separator();
        // Whether the byte at `i` is a separator or lies outside the text (`None`: before it).
        let edge = |i: Option<usize>| match i.map(|i| bytes.get(i)) {
            None | Some(None) => true,
            Some(Some(&b)) => b == sep,
        };
        let mut at = 0;
        while let Some(chunk) = bytes.get(at..at + 8) {
            let x = bytes::word_at(chunk);
            if bytes::any_below(x, below) {
                break;
            }
            let mut seps = bytes::bytes_equal(x, sep);
            let (plus, hash) = (bytes::bytes_equal(x, b'+'), bytes::bytes_equal(x, b'#'));
            if plus_or_hash && plus | hash != 0 {
                // A `+` alone in its word, in a pattern, is cut as a word: each `+` has a
                // separator, or the text's edge, in the byte before it and in the byte after
                // (their high bits moved onto its own). Anything else goes to the byte loop.
                let alone = || {
                    let before = seps << 8 | u64::from(edge(at.checked_sub(1))) << 7;
                    let after = seps >> 8 | u64::from(edge(Some(at + 8))) << 63;
                    plus & !(before & after) == 0
                };
                if !pattern || hash != 0 || !alone() {
                    break;
                }
            }
            while seps != 0 {
                if !cut(at + (seps.trailing_zeros() / 8) as usize) {
                    return None;
                }
                seps &= seps - 1;
            }
            at += 8;
        }
        Some(at)
    }

    /// [`Dialect::parse_topic`] into a topic made by [`Topic::unparsed`]`(self, text)`.
    #[inline]
    fn parse_in_place(self, topic: &mut Topic<'_>) -> Result<()> {
        // One copy per dialect, as the pattern scan's.
        match self {
            Dialect::Amqp => Self::parse_in_place_as::<{ Dialect::Amqp as u8 }>(topic),
            Dialect::Mqtt => Self::parse_in_place_as::<{ Dialect::Mqtt as u8 }>(topic),
            Dialect::Nats => Self::parse_in_place_as::<{ Dialect::Nats as u8 }>(topic),
        }
    }

    /// [`parse_in_place`](Self::parse_in_place) for the dialect `D`.
    #[inline(always)]
    fn parse_in_place_as<const D: u8>(topic: &mut Topic<'_>) -> Result<()> {
        let this = Dialect::ALL[D as usize];
        debug_assert!(topic.dialect == this && topic.words.is_empty());
        let text = topic.text;
        let words = &mut topic.words;
        let sep = this.separator();
        // The bytes no topic of this dialect may hold anywhere, all below 64, as bits of one
        // mask: the test is a compare and a shift a byte whatever the dialect, where a match
        // on the dialect and the bytes' classes made NATS's topics the slowest to parse.
        let banned_bits: u64 = match this {
            Dialect::Amqp => 0,
            Dialect::Mqtt => 1 | 1 << b'+' | 1 << b'#',
            Dialect::Nats => 1 | 1 << b' ' | 1 << b'\t' | 1 << b'\r' | 1 << b'\n' | 1 << b'\x0c',
        };
        let banned = |b: u8| b < 64 && banned_bits >> b & 1 != 0;
        // A word NATS cannot publish to: empty, or a wildcard.
        let bad_word = |w: &str| this == Dialect::Nats && (w.is_empty() || w == "*" || w == ">");
        let mut valid = this != Dialect::Mqtt || (!text.is_empty() && text.len() <= MQTT_MAX_BYTES);
        // Every byte is checked once while the words are cut at the separators, eight bytes at
        // a time while no chunk is suspect (a byte at a time took 2.7 cycles a byte, twice a
        // plain split's); on anything wrong the loop stops, and `topic_error` finds the first
        // fault and says what it is. (AMQP's empty topic has no words at all.)
        if !(this == Dialect::Amqp && text.is_empty()) {
            let bytes = text.as_bytes();
            let mut start = 0;
            // Cuts the word that ends at `end` (a separator's index, or the text's length);
            // `false` if NATS cannot publish to it.
            let mut cut = |end: usize| {
                let w = word_between(text, start, end);
                words.push(w);
                start = end + 1;
                !bad_word(w)
            };
            // Eight bytes at a time while no chunk is suspect; only a suspect chunk, and what
            // follows it, is checked byte by byte.
            let at = this.cut_chunks(bytes, false, &mut cut);
            valid = valid && at.is_some();
            let at = at.unwrap_or(0);
            if valid {
                for (i, &b) in bytes.iter().enumerate().skip(at) {
                    if b == sep && !cut(i) || banned(b) {
                        valid = false;
                        break;
                    }
                }
                valid = valid && cut(text.len());
            }
        }
        if !valid {
            return Err(this.topic_error(text));
        }
        topic.dollar = this.has_dollar_rule() && words.first().is_some_and(|w| w.starts_with('$'));
        Ok(())
    }

    /// The error of a topic that `parse_topic` found invalid: the checks one at a time, in the
    /// order that decides which fault a topic with several is reported for.
    #[cold]
    fn topic_error(self, text: &str) -> Error {
        if let Err(e) = self.check_common(text, Error::InvalidTopic) {
            return e;
        }
        let fail =
            |at: usize, why: &str| Error::InvalidTopic(Invalid::new(Some(self), text, at, why));
        match self {
            Dialect::Amqp => {}
            Dialect::Mqtt => {
                if let Some(at) = text.find(['+', '#']) {
                    return fail(at, "MQTT topic names contain no wildcards");
                }
            }
            Dialect::Nats => {
                for (at, word) in self.split(text) {
                    if word == "*" || word == ">" {
                        return fail(at, "a NATS subject to publish to contains no wildcards");
                    }
                }
            }
        }
        unreachable!("parse_topic rejected a valid topic: {text:?}")
    }
}

/// `text[start..end]`, for a parse that cuts words at separators: `start` is 0 or one past a
/// separator, `end` a separator's index or the text's length, and `start <= end`. Unchecked,
/// because the checked slice tested both ends for a character's boundary at every word (a
/// tenth of a five-word parse's instructions).
#[inline(always)]
#[allow(unsafe_code)]
fn word_between(text: &str, start: usize, end: usize) -> &str {
    debug_assert!(start <= end && text.is_char_boundary(start) && text.is_char_boundary(end));
    // SAFETY: `start <= end <= text.len()` (the caller's contract, checked in debug builds),
    // and both are character boundaries: each is 0, the length, or next to a separator byte,
    // which is ASCII, and an ASCII byte in UTF-8 is never part of a longer character.
    unsafe { text.get_unchecked(start..end) }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dialect {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "amqp" => Ok(Dialect::Amqp),
            "mqtt" => Ok(Dialect::Mqtt),
            "nats" => Ok(Dialect::Nats),
            _ => Err(Error::UnknownDialect(s.to_owned())),
        }
    }
}

/// A validated subscription pattern: its text and its words.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pattern {
    dialect: Dialect,
    text: Box<str>,
    tokens: Vec<Token>,
}

impl Pattern {
    /// Parses `text` in `dialect`; see [`Dialect::parse_pattern`].
    pub fn parse(dialect: Dialect, text: &str) -> Result<Self> {
        dialect.parse_pattern(text)
    }

    /// The dialect the pattern was parsed in.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The pattern as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The pattern's words.
    pub fn tokens(&self) -> &[Token] {
        &self.tokens
    }

    /// The pattern's words as keys, borrowed from it.
    pub(crate) fn keys(&self) -> Keys<'_> {
        self.tokens.iter().map(Key::of).collect()
    }

    /// Whether the pattern holds no wildcard, so matches exactly one topic.
    pub fn is_literal(&self) -> bool {
        self.tokens.iter().all(|t| matches!(t, Token::Word(_)))
    }
}

/// The class of a byte in a pattern, for [`Dialect::scan_pattern`]: ordinary (0), or one of
/// these.
const SEPARATOR: u8 = 1;
/// A byte no pattern of the dialect holds anywhere.
const BANNED: u8 = 2;
/// A byte that stands only as a whole word (MQTT's wildcards).
const ALONE: u8 = 3;

/// Each dialect's class of every byte in a pattern, indexed by `Dialect as usize`.
const PATTERN_CLASSES: [[u8; 256]; 3] = {
    let mut t = [[0; 256]; 3];
    t[Dialect::Amqp as usize][b'.' as usize] = SEPARATOR;
    t[Dialect::Mqtt as usize][b'/' as usize] = SEPARATOR;
    t[Dialect::Mqtt as usize][0] = BANNED;
    t[Dialect::Mqtt as usize][b'+' as usize] = ALONE;
    t[Dialect::Mqtt as usize][b'#' as usize] = ALONE;
    let nats = Dialect::Nats as usize;
    t[nats][b'.' as usize] = SEPARATOR;
    let mut banned = [0u8, b' ', b'\t', b'\r', b'\n', b'\x0c'].as_slice();
    while let [b, rest @ ..] = banned {
        t[nats][*b as usize] = BANNED;
        banned = rest;
    }
    t
};

/// Words a topic holds inline before its word list spills to the heap.
pub const INLINE_WORDS: usize = 16;

/// A topic's words: inline up to [`INLINE_WORDS`], so that parsing a topic allocates nothing.
type Words<'a> = SmallVec<[&'a str; INLINE_WORDS]>;

/// A validated message topic, borrowing the words of its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topic<'a> {
    dialect: Dialect,
    text: &'a str,
    words: Words<'a>,
    dollar: bool,
}

impl<'a> Topic<'a> {
    /// A topic of no words yet, for [`Dialect::parse_in_place`] to fill: never handed out
    /// before that has validated it.
    #[inline]
    fn unparsed(dialect: Dialect, text: &'a str) -> Self {
        Topic {
            dialect,
            text,
            words: Words::new(),
            dollar: false,
        }
    }

    /// Parses `text` in `dialect`; see [`Dialect::parse_topic`].
    pub fn parse(dialect: Dialect, text: &'a str) -> Result<Self> {
        dialect.parse_topic(text)
    }

    /// The dialect the topic was parsed in.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The topic as written.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// The topic's words.
    pub fn words(&self) -> &[&'a str] {
        &self.words
    }

    /// Whether first-level wildcards must not match this topic (MQTT `$` topics).
    pub fn is_dollar(&self) -> bool {
        self.dollar
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The topic parse checked one rule at a time, as `parse_topic` was written before it
    /// became one pass: the oracle of `one_pass_parse_agrees_with_the_rules`.
    fn parse_by_rules(d: Dialect, text: &str) -> Result<Vec<&str>> {
        d.check_common(text, Error::InvalidTopic)?;
        let wildcard = match d {
            Dialect::Amqp => false,
            Dialect::Mqtt => text.contains(['+', '#']),
            Dialect::Nats => d.split(text).any(|(_, w)| w == "*" || w == ">"),
        };
        if wildcard {
            return Err(d.topic_error(text));
        }
        Ok(d.split(text).map(|(_, w)| w).collect())
    }

    /// Up to `max - 1` words drawn from `words`, each joined to the next by either dialect's
    /// separator.
    fn joined(words: Vec<&'static str>, max: usize) -> impl Strategy<Value = String> {
        let word = prop::sample::select(words);
        let sep = prop::sample::select(vec![".", "/"]);
        prop::collection::vec((word, sep), 0..max).prop_map(|parts| {
            let mut text = String::new();
            for (i, (w, s)) in parts.iter().enumerate() {
                if i > 0 {
                    text.push_str(s);
                }
                text.push_str(w);
            }
            text
        })
    }

    /// Strings made of words a pattern may or may not hold (wildcards alone and inside words,
    /// empty words, NUL, white space, a non-ASCII letter): random bytes rarely give a string
    /// that is valid but for one rule, such as `#/a` in MQTT.
    fn pattern_like() -> impl Strategy<Value = String> {
        let words = vec![
            "", "a", "ab", "*", "+", "#", ">", "$a", "a+", "#a", "a*", ">a", " ", "a\t", "\0", "é",
        ];
        joined(words, 10)
    }

    /// Topics of long clean words and of words with one fault or one byte a chunk test must
    /// look at twice (a control byte NATS allows, a byte above 127, an MQTT `+` beside a byte
    /// that is not a separator).
    fn topic_like() -> impl Strategy<Value = String> {
        let words = vec![
            "",
            "a",
            "abc",
            "abcdefgh",
            "abcdefghijk",
            "$a",
            "*",
            ">",
            "+",
            "#",
            "a+",
            "+a",
            "++",
            "abc def",
            "ab\tc",
            "abc\0d",
            "a\u{1}bc",
            "a\u{b}",
            "\u{c}",
            "a\rb",
            "a\nb",
            "é",
            "abcé\u{7f}",
        ];
        joined(words, 16)
    }

    /// What the one-pass pattern scan and the rules give for `text`: the keys, or the error
    /// as it reads.
    type Scan<'t> = std::result::Result<Vec<Key<'t>>, String>;
    fn both_scans(d: Dialect, text: &str) -> (Scan<'_>, Scan<'_>) {
        let scan = |by_rules: bool| {
            let mut keys = Vec::new();
            let r = if by_rules {
                d.scan_pattern_by_rules(text, |k| keys.push(k))
            } else {
                d.scan_pattern(text, |k| keys.push(k))
            };
            r.map(|()| keys).map_err(|e| e.to_string())
        };
        (scan(false), scan(true))
    }

    /// The one-pass pattern scan against the rules on strings valid but for one rule (the
    /// first of them, `#/`, is where a scan that let MQTT's `#` stand before the last level
    /// was caught), and on their valid neighbours.
    #[test]
    fn one_pass_pattern_scan_agrees_with_the_rules_one_rule_from_valid() {
        let texts = [
            "#/", "#/a", "a/#/b", "a/#", "a+/b", "a/+", "\0", "", "a", ">.a", "a.>", "a..b", "a b",
            "#.a", "*.#.*",
        ];
        for d in [Dialect::Amqp, Dialect::Mqtt, Dialect::Nats] {
            for text in texts {
                let (got, want) = both_scans(d, text);
                assert_eq!(got, want, "{d} {text:?}");
            }
        }
    }

    /// An MQTT `+` at every place in a chunk of eight bytes, alone in its word or beside a
    /// letter, the letter in the same chunk or across its edge: the chunks cut a `+` alone
    /// as a word, so what they take for alone must be it.
    #[test]
    fn one_pass_pattern_scan_agrees_with_the_rules_on_a_plus_anywhere() {
        for k in 0..20 {
            let lead = "x".repeat(k);
            for mid in ["+", "a+", "+a", "++", "a+b", "+/+"] {
                for text in [
                    format!("{lead}{mid}/yyyyyyyyy"),
                    format!("{lead}/{mid}/yyyyyyyyy"),
                    format!("{lead}/{mid}"),
                    format!("{lead}{mid}"),
                ] {
                    for d in [Dialect::Amqp, Dialect::Mqtt, Dialect::Nats] {
                        let (got, want) = both_scans(d, &text);
                        assert_eq!(got, want, "{d} {text:?}");
                    }
                }
            }
        }
    }

    /// `with_pattern_keys` hands over the words the rules find, and fails as they do, on
    /// either side of the patterns whose words it keeps on the stack (under [`STACK_KEYS`]
    /// bytes): separators alone (AMQP's and MQTT's empty words, one more than the bytes: 32
    /// words at 31 bytes) and short words with wildcards, up to 80 bytes.
    #[test]
    fn pattern_keys_on_the_stack_and_past_it_are_the_rules_words() {
        let mut texts = Vec::new();
        for n in 0..=80 {
            for unit in [".", "/", "a.", "b/", "*.", "+/", "ab.*.#."] {
                texts.push(unit.repeat(n).chars().take(n).collect::<String>());
            }
            texts.push(format!("{}#", "a/".repeat(n)));
        }
        for d in [Dialect::Amqp, Dialect::Mqtt, Dialect::Nats] {
            for text in &texts {
                let got = d
                    .with_pattern_keys(text, |keys| keys.to_vec())
                    .map_err(|e| e.to_string());
                let (_, want) = both_scans(d, text);
                assert_eq!(got, want, "{d} {text:?}");
            }
        }
    }

    proptest! {
        /// Words, errors and the byte each error names agree with the rules checked one at a
        /// time, in every dialect, on strings rich in separators, wildcards, `$`, NUL, white
        /// space, control bytes NATS allows and bytes above 127, with more words than fit
        /// inline and faults anywhere in the chunks the parser reads eight bytes at a time.
        #[test]
        fn one_pass_parse_agrees_with_the_rules(
            text in proptest::string::string_regex("[aé./+#*>$ \t\u{0}\u{1}\u{b}\u{7f}]{0,80}").unwrap(),
        ) {
            for d in [Dialect::Amqp, Dialect::Mqtt, Dialect::Nats] {
                let want = parse_by_rules(d, &text).map_err(|e| e.to_string());
                let got = d.parse_topic(&text);
                if let Ok(t) = &got {
                    let dollar = d.has_dollar_rule()
                        && t.words().first().is_some_and(|w| w.starts_with('$'));
                    prop_assert_eq!(t.is_dollar(), dollar);
                }
                let got = got.map(|t| t.words().to_vec()).map_err(|e| e.to_string());
                prop_assert_eq!(got, want);
            }
        }

        /// The same on topics of words long and short, where a fault lies inside a chunk of
        /// eight bytes that is otherwise clean (a space among letters is what a chunk test
        /// that missed NATS's space let through: the strings above rarely give one).
        #[test]
        fn one_pass_parse_agrees_with_the_rules_on_long_words(text in topic_like()) {
            for d in [Dialect::Amqp, Dialect::Mqtt, Dialect::Nats] {
                let want = parse_by_rules(d, &text).map_err(|e| e.to_string());
                let got = d.parse_topic(&text).map(|t| t.words().to_vec());
                prop_assert_eq!(got.map_err(|e| e.to_string()), want);
            }
        }

        /// The one-pass pattern scan gives the words, and the errors with the byte each
        /// names, of the rules checked one at a time, in every dialect.
        #[test]
        fn one_pass_pattern_scan_agrees_with_the_rules(text in pattern_like()) {
            for d in [Dialect::Amqp, Dialect::Mqtt, Dialect::Nats] {
                let (got, want) = both_scans(d, &text);
                prop_assert_eq!(got, want);
            }
        }

        /// The same on patterns of words long and short, wildcards among them, where a fault
        /// lies inside a chunk of eight bytes that is otherwise clean.
        #[test]
        fn one_pass_pattern_scan_agrees_with_the_rules_on_long_words(text in topic_like()) {
            for d in [Dialect::Amqp, Dialect::Mqtt, Dialect::Nats] {
                let (got, want) = both_scans(d, &text);
                prop_assert_eq!(got, want);
            }
        }

        /// `check_pattern` accepts what `parse_pattern` parses and names the same fault.
        #[test]
        fn check_pattern_agrees_with_parse_pattern(
            text in proptest::string::string_regex("[a./+#*>$ \t\u{0}]{0,40}").unwrap(),
        ) {
            for d in [Dialect::Amqp, Dialect::Mqtt, Dialect::Nats] {
                let parsed = d.parse_pattern(&text).map(drop).map_err(|e| e.to_string());
                prop_assert_eq!(d.check_pattern(&text).map_err(|e| e.to_string()), parsed);
            }
        }
    }
}
