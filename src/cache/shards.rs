//! Write shards: which cached results a write can change, told by a topic's first words.
//!
//! A write of pattern P can change the result of topic T only if P matches T. Before any
//! many-words wildcard, a pattern's words line up with the topic's one for one, so a literal
//! word of P at position i (with only one-word wildcards before it) must be T's word i. The
//! shard of P is therefore keyed by its *mask*, the set of positions below [`KEY_WORDS`] that
//! hold such a literal word, and by those words; the key stops at the first many-words
//! wildcard and at the pattern's end. A topic's result can change only through writes keyed by
//! one of the topic's own keys: one per mask whose positions the topic has, made of the
//! topic's words at those positions. With two key words that is four shards per topic:
//!
//! | pattern | mask | shard key | results it may change |
//! |---|---|---|---|
//! | `a.b.c`, `a.b.*`, `a.b.#` | {0, 1} | `a`, `b` | topics starting `a.b` |
//! | `a.*.c`, `a.#`, `a` | {0} | `a` | topics starting `a` |
//! | `*.b.c` | {1} | `b` | topics whose second word is `b` |
//! | `#`, `*.*.c`, `#.b`, `*` | {} | (one shard) | any topic |
//!
//! Keys hash into [`SHARDS`] counters per mask; two keys that share a counter only make a
//! write invalidate a little more than it must, never less. `remove_subscriber`, which may
//! change any pattern, takes the shard of the empty mask.
//!
//! Each shard counts the writes that have begun and those that have ended; both only grow. A
//! result is stored with the `begun` count of each of its topic's shards: while none of them
//! moves, no write that could change it has begun. The rule that uses them, and its proof,
//! are at `Cached::write` in `mod.rs`.
//!
//! A shard is coarse: `a.b.c` shares the shard of `a.b.d`, and `*.*.c` shares every topic's.
//! So each shard also keeps its last [`LOG`] writes, each as a [`Summary`] of its pattern (its
//! length, and a 7-bit print of each literal word among the first [`PRINTED`] positions). A
//! reader whose entry's shard has moved reads the summaries of the writes since, and when
//! none of them can match the entry's topic, the entry is still true: it moves the entry's
//! count forward and serves it. A write that matches, or more writes than the log holds, is a
//! miss as before. Under a writer that churns `+/+/x` or `a/b/c/d`, the entries of topics those
//! patterns do not match keep their hits.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

use crate::dialect::{Key, Topic};
use crate::sync::AtomicU64;

/// Leading word positions that key a shard. Two keep a hit to four counter loads; a pattern
/// whose first two words are wildcards lands in the shard every topic reads.
#[cfg(not(loom))]
pub(super) const KEY_WORDS: usize = 2;
/// Under loom, one: a topic's two shards (its first word's and every topic's) carry the
/// protocol, and every counter read is a point where the model branches.
#[cfg(loom)]
pub(super) const KEY_WORDS: usize = 1;

/// Masks of key positions: every subset of the [`KEY_WORDS`] positions.
pub(super) const MASKS: usize = 1 << KEY_WORDS;

/// Counters per mask (a power of two). Among 1,000 topics with distinct leading words, a
/// write then shares its counter with about one other topic's.
#[cfg(not(loom))]
pub(super) const SHARDS: usize = 1024;
/// Under loom, every counter is an object the model tracks: two per mask.
#[cfg(loom)]
pub(super) const SHARDS: usize = 2;

/// Writes each keyed shard remembers. A reader revalidates an entry through at most this
/// many writes on one shard since it last looked; more is a miss. A keyed shard takes the
/// writes of few patterns (in `mixed`, a hundredth of them), but a writer at half a million
/// writes a second on two cores puts ten on one between two reads of a topic, and a miss
/// slows the readers down, which lets more writes in: the log is made deep enough to stay
/// clear of that. 512 bytes, allocated on the shard's first write.
#[cfg(not(loom))]
pub(super) const LOG: usize = 32;
#[cfg(loom)]
pub(super) const LOG: usize = 2;

/// Writes the shard of every topic remembers: every topic's entries read its log, and a
/// writer of `+/+/...` patterns fills it at its own pace, so it is deep; there is one.
#[cfg(not(loom))]
pub(super) const EVERY_LOG: usize = 256;
#[cfg(loom)]
pub(super) const EVERY_LOG: usize = 2;

/// Leading positions whose literal words a [`Summary`] prints.
pub(super) const PRINTED: usize = 6;

/// A record's stamp while a writer fills it in.
const FILLING: u64 = u64::MAX;

/// One remembered write: the shard's count that numbered it (its stamp) and its pattern's
/// [`Summary`]. A seqlock with one data word: a writer claims the record (`FILLING`), stores
/// the summary and then its number; a reader takes the summary only between two reads of
/// that number.
struct Record {
    stamp: AtomicU64,
    summary: AtomicU64,
}

/// One shard's counters and its last writes. `begun` is what lookups read on every hit; all
/// sit on one line or two, since the writer that bumps one writes the others.
struct Shard {
    begun: AtomicU64,
    ended: AtomicU64,
    log: Log,
}

/// A shard's records, allocated on its first write: most shards of a cache never see one.
/// (Under loom, at once: a model has three shards, and `OnceLock` is not modelled.)
struct Log {
    #[cfg(not(loom))]
    records: std::sync::OnceLock<Box<[Record]>>,
    #[cfg(loom)]
    records: Box<[Record]>,
    len: usize,
}

impl Log {
    fn new(len: usize) -> Log {
        Log {
            #[cfg(not(loom))]
            records: std::sync::OnceLock::new(),
            #[cfg(loom)]
            records: Log::make(len),
            len,
        }
    }

    fn make(len: usize) -> Box<[Record]> {
        // Stamp 0 numbers no write: counts start at 1.
        (0..len)
            .map(|_| Record {
                stamp: AtomicU64::new(0),
                summary: AtomicU64::new(0),
            })
            .collect()
    }

    /// The records, made if they are not yet.
    fn made(&self) -> &[Record] {
        #[cfg(not(loom))]
        return self.records.get_or_init(|| Log::make(self.len));
        #[cfg(loom)]
        return &self.records;
    }

    /// The records, if a write has made them (a reader finds none before the first write).
    fn get(&self) -> Option<&[Record]> {
        #[cfg(not(loom))]
        return self.records.get().map(|r| &**r);
        #[cfg(loom)]
        return Some(&self.records);
    }
}

impl Shard {
    fn new(log: usize) -> Shard {
        Shard {
            begun: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            log: Log::new(log),
        }
    }

    /// Remembers write `n`. Two writers whose numbers share the record may race for it: the
    /// loser leaves it, and readers looking for its number find another and miss.
    fn remember(&self, n: u64, summary: Summary) {
        let log = self.log.made();
        let record = &log[(n % log.len() as u64) as usize];
        let stamp = record.stamp.load(Relaxed);
        if stamp == FILLING
            || record
                .stamp
                .compare_exchange(stamp, FILLING, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        // Release: a reader that loads this summary (acquire) then sees `FILLING` or later in
        // its second read of the stamp, so it never takes this summary for the old number.
        record.summary.store(summary.0, Release);
        record.stamp.store(n, Release);
    }

    /// The summary of write `n`, if the log still holds it.
    fn recall(&self, n: u64) -> Option<Summary> {
        let log = self.log.get()?;
        let record = &log[(n % log.len() as u64) as usize];
        if record.stamp.load(Acquire) != n {
            return None;
        }
        let summary = record.summary.load(Acquire);
        (record.stamp.load(Relaxed) == n).then_some(Summary(summary))
    }
}

/// The shards of a topic: indexes into the table, one per mask that fits the topic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct TopicShards {
    index: [u32; MASKS],
    len: u8,
}

impl TopicShards {
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.index[..usize::from(self.len)]
            .iter()
            .map(|&i| i as usize)
    }
}

/// A pattern, reduced to what tells that it cannot match a topic: how many words it has
/// (and whether a many-words wildcard lets that vary), and a 7-bit print of each literal word
/// among the first [`PRINTED`] positions before any many-words wildcard. Packed in a word:
/// bits 0..42 the prints, 42..48 which positions hold a literal, 48..56 the word count (255:
/// that many or more), 56..64 the position of the first many-words wildcard (255: none, or
/// not among the first 255 words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Summary(u64);

impl Summary {
    /// What `remove_subscriber` writes: it may change any topic's result.
    pub(super) const ANY: Summary = Summary(0); // no literal, no word count, `#` first

    pub(super) fn of(keys: &[Key<'_>]) -> Summary {
        let (mut prints, mut literal) = (0u64, 0u64);
        let mut many = 255u64;
        for (i, key) in keys.iter().enumerate() {
            match key {
                Key::Many => {
                    many = i.min(255) as u64;
                    break;
                }
                Key::One => {}
                Key::Word(w) if i < PRINTED => {
                    prints |= u64::from(print(w)) << (7 * i);
                    literal |= 1 << i;
                }
                Key::Word(_) => {}
            }
        }
        let words = keys.len().min(255) as u64;
        Summary(prints | literal << 42 | words << 48 | many << 56)
    }

    /// False only if a pattern of this summary cannot match the topic printed `t`: a literal
    /// word before any many-words wildcard is not the topic's word at its position (a print
    /// differs), the topic has fewer words than come before that wildcard, or, with no such
    /// wildcard, the word counts differ. True is only "may": prints collide one time in 128,
    /// and nothing after the first many-words wildcard, nor MQTT's `$` rule, is looked at.
    pub(super) fn may_match(self, t: &TopicPrint) -> bool {
        let s = self.0;
        let words = (s >> 48) & 0xff;
        let many = s >> 56;
        if many == 255 && words != 255 && words != t.words as u64 {
            return false;
        }
        // Each word before the first many-words wildcard takes one of the topic's.
        if many != 255 && (t.words as u64) < many {
            return false;
        }
        let literal = (s >> 42) & 0x3f;
        (0..PRINTED).all(|i| {
            literal & (1 << i) == 0
                || (i < t.words && u64::from(t.prints[i]) == (s >> (7 * i)) & 0x7f)
        })
    }
}

/// A topic as [`Summary::may_match`] reads it: its word count and the prints of its first
/// [`PRINTED`] words.
pub(super) struct TopicPrint {
    words: usize,
    prints: [u8; PRINTED],
}

impl TopicPrint {
    pub(super) fn of(topic: &Topic<'_>) -> TopicPrint {
        let words = topic.words();
        let mut prints = [0; PRINTED];
        for (p, w) in prints.iter_mut().zip(words) {
            *p = print(w);
        }
        TopicPrint {
            words: words.len(),
            prints,
        }
    }
}

/// A word's 7-bit print: the top bits of its hash.
fn print(word: &str) -> u8 {
    (super::hash(word.as_bytes()) >> 57) as u8
}

/// Every shard of one cache: [`SHARDS`] for each mask but the empty one, which has one.
pub(super) struct Shards {
    table: Box<[Shard]>,
}

impl Shards {
    pub(super) fn new() -> Shards {
        Shards {
            table: (0..1 + (MASKS - 1) * SHARDS)
                .map(|i| Shard::new(if i == EVERY_TOPIC { EVERY_LOG } else { LOG }))
                .collect(),
        }
    }

    /// Runs `write`, of a pattern summarised `summary`, in the bracket of shard `index`: B
    /// (`begun += 1`, which numbers the write, and the write remembered under that number)
    /// before it, D (`ended += 1`) after it, even if it panics.
    pub(super) fn write<R>(&self, index: usize, summary: Summary, write: impl FnOnce() -> R) -> R {
        let shard = &self.table[index];
        let n = shard.begun.fetch_add(1, SeqCst) + 1;
        shard.remember(n, summary);
        let _ended = Ended(shard);
        write()
    }

    /// The count of `begun` of each of `shards` (R1, and a hit's read), in their order.
    pub(super) fn begun_each(&self, shards: &TopicShards) -> [u64; MASKS] {
        let mut each = [0; MASKS];
        for (n, i) in each.iter_mut().zip(shards.iter()) {
            *n = self.begun_of(i);
        }
        each
    }

    /// The count of `begun` of shard `index`.
    pub(super) fn begun_of(&self, index: usize) -> u64 {
        self.table[index].begun.load(SeqCst)
    }

    /// The sum of `begun` over `shards` (R3).
    pub(super) fn begun(&self, shards: &TopicShards) -> u64 {
        shards
            .iter()
            .map(|i| self.begun_of(i))
            .fold(0, u64::wrapping_add)
    }

    /// The sum of `ended` over `shards` (the R2 read).
    pub(super) fn ended(&self, shards: &TopicShards) -> u64 {
        shards
            .iter()
            .map(|i| self.table[i].ended.load(SeqCst))
            .fold(0, u64::wrapping_add)
    }

    /// Whether none of the writes numbered `from + 1 ..= to` on shard `index` can have changed
    /// the result of `topic`: every one of them still in the log, and its summary unable to
    /// match.
    pub(super) fn passed(
        &self,
        index: usize,
        from: u64,
        to: u64,
        topic: &mut LazyPrint<'_>,
    ) -> bool {
        let shard = &self.table[index];
        if to.saturating_sub(from) > shard.log.len as u64 {
            return false;
        }
        (from + 1..=to).all(|n| {
            shard
                .recall(n)
                .is_some_and(|s| topic.get().is_some_and(|t| !s.may_match(t)))
        })
    }
}

/// The hit's reads (see `Cached::write`): whether a result known true through `seen`, one
/// count per shard of `shards`, is true still. On each shard that has moved, the writes since
/// must all be remembered and unable to match the topic; then `seen` moves up to them.
pub(super) fn still_true(
    shards: &Shards,
    seen: &[AtomicU64; MASKS],
    topic_shards: &TopicShards,
    topic: &mut LazyPrint<'_>,
) -> bool {
    for (seen, i) in seen.iter().zip(topic_shards.iter()) {
        let now = shards.begun_of(i);
        // Relaxed: `seen` states a fact about the shard's numbered writes, which each reader
        // checks for itself in the log; the result it vouches for was published by the CAS
        // that stored the entry.
        let was = seen.load(Relaxed);
        if now <= was {
            continue;
        }
        if !shards.passed(i, was, now, topic) {
            return false;
        }
        seen.fetch_max(now, Relaxed);
    }
    true
}

/// A topic's [`TopicPrint`], made on first use: most hits need none.
pub(super) struct LazyPrint<'a> {
    make: &'a dyn Fn() -> Option<TopicPrint>,
    print: Option<Option<TopicPrint>>,
}

impl<'a> LazyPrint<'a> {
    /// `make` gives the print, or nothing when the topic cannot be read (then no write is
    /// passed over).
    pub(super) fn new(make: &'a dyn Fn() -> Option<TopicPrint>) -> LazyPrint<'a> {
        LazyPrint { make, print: None }
    }

    fn get(&mut self) -> Option<&TopicPrint> {
        self.print.get_or_insert_with(self.make).as_ref()
    }
}

/// Ends a write's bracket (D) when dropped.
struct Ended<'a>(&'a Shard);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, SeqCst);
    }
}

/// The shard of the empty mask: every topic's results depend on it.
pub(super) const EVERY_TOPIC: usize = 0;

/// Adds the word at `position`, hashed as `word_hash`, to a shard key's hash.
fn mix(h: u64, position: usize, word_hash: u64) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    (h.rotate_left(23) ^ word_hash ^ position as u64).wrapping_mul(K)
}

fn index(mask: usize, h: u64) -> usize {
    if mask == 0 {
        EVERY_TOPIC
    } else {
        1 + (mask - 1) * SHARDS + (h >> 32) as usize % SHARDS
    }
}

/// The shard a write of a pattern with these keys goes to.
pub(super) fn of_pattern(keys: &[Key<'_>]) -> usize {
    let (mut mask, mut h) = (0, 0);
    for (i, key) in keys.iter().take(KEY_WORDS).enumerate() {
        match key {
            Key::Many => break,
            Key::One => {}
            Key::Word(w) => {
                mask |= 1 << i;
                h = mix(h, i, super::hash(w.as_bytes()));
            }
        }
    }
    index(mask, h)
}

/// The shards whose writes may change `topic`'s result.
pub(super) fn of_topic(topic: &Topic<'_>) -> TopicShards {
    let words = topic.words();
    let fit = words.len().min(KEY_WORDS);
    let mut word_hash = [0u64; KEY_WORDS];
    for (h, w) in word_hash.iter_mut().zip(words) {
        *h = super::hash(w.as_bytes());
    }
    let mut shards = TopicShards::default();
    // Masks whose positions all lie below `fit`: exactly those below `1 << fit`.
    for mask in 0..(1usize << fit) {
        let mut h = 0;
        for (i, &wh) in word_hash.iter().enumerate().take(fit) {
            if mask & (1 << i) != 0 {
                h = mix(h, i, wh);
            }
        }
        shards.index[usize::from(shards.len)] = index(mask, h) as u32;
        shards.len += 1;
    }
    shards
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{Dialect, Matcher, NaiveMatcher};
    use proptest::prelude::*;

    /// The law the cache rests on: a write of P is seen by every topic P matches.
    fn law_holds(d: Dialect, pattern: &str, topic: &str) -> bool {
        let (Ok(p), Ok(t)) = (d.parse_pattern(pattern), d.parse_topic(topic)) else {
            return true;
        };
        let m = NaiveMatcher::new(d);
        m.subscribe(&p, 1);
        !m.lookup(&t).contains(&1) || of_topic(&t).iter().any(|i| i == of_pattern(&p.keys()))
    }

    #[test]
    fn a_write_reaches_every_topic_its_pattern_matches() {
        let rows: &[(Dialect, &str, &str)] = &[
            (Dialect::Amqp, "a.b.c", "a.b.c"),
            (Dialect::Amqp, "a.#", "a"),
            (Dialect::Amqp, "a.#.b", "a.x.y.b"),
            (Dialect::Amqp, "*.b", "a.b"),
            (Dialect::Amqp, "#", ""),
            (Dialect::Amqp, "", ""),
            (Dialect::Amqp, "#.b", "b"),
            (Dialect::Amqp, "a..c", "a..c"),
            (Dialect::Mqtt, "a/#", "a"),
            (Dialect::Mqtt, "+/b/#", "x/b"),
            (Dialect::Mqtt, "/a", "/a"),
            (Dialect::Nats, "a.>", "a.b.c"),
            (Dialect::Nats, "*.b.>", "a.b.c"),
        ];
        for &(d, p, t) in rows {
            assert!(
                d.parse_pattern(p)
                    .and_then(|p| d.parse_topic(t).map(|t| (p, t)))
                    .is_ok(),
                "{d:?} {p} {t}"
            );
            assert!(law_holds(d, p, t), "{d:?} {p} {t}");
        }
    }

    #[test]
    fn shards_separate_what_writes_cannot_change() {
        let d = Dialect::Amqp;
        let shard = |p: &str| of_pattern(&d.pattern_keys(p).unwrap());
        let topic = d.parse_topic("x.y.z").unwrap();
        let mine = of_topic(&topic);
        assert_eq!(mine.iter().count(), 4);
        for other in ["a.b.c", "a.*", "*.b", "a.y", "x.b"] {
            assert!(!mine.iter().any(|i| i == shard(other)), "{other}");
        }
        for same in ["x.y.q", "x.*.q", "*.y", "#", "*.*.z", "x.#"] {
            assert!(mine.iter().any(|i| i == shard(same)), "{same}");
        }
        assert_eq!(of_topic(&d.parse_topic("").unwrap()).iter().count(), 1);
    }

    /// Whether a write of `pattern` is passed over for `topic` by its summary.
    fn ruled_out(d: Dialect, pattern: &str, topic: &str) -> bool {
        let keys = d.pattern_keys(pattern).unwrap();
        !Summary::of(&keys).may_match(&TopicPrint::of(&d.parse_topic(topic).unwrap()))
    }

    #[test]
    fn a_summary_rules_out_patterns_by_length_and_literal_words() {
        let d = Dialect::Amqp;
        for (pattern, topic) in [
            ("a.b.c", "a.b"),
            ("a.b", "a.b.c"),
            ("a.b.c", "a.b.d"),
            ("*.*.c", "x.y.z"),
            ("a.b.c.#", "a.b"),
            ("a.*.c.#", "a.b.d.e"),
            ("a.b.*.#", "a.b"),
            ("*.*.*.*.*.f", "a.b.c.d.e.g"),
        ] {
            assert!(ruled_out(d, pattern, topic), "{pattern} {topic}");
        }
        for (pattern, topic) in [
            ("a.b", "a.b"),
            ("#", "x.y"),
            ("a.#", "a"),
            ("*.*.c.#.z", "a.b.c.d"),
            // Words past the printed positions are not read.
            ("a.b.c.d.e.f.g", "a.b.c.d.e.f.x"),
        ] {
            assert!(!ruled_out(d, pattern, topic), "{pattern} {topic}");
        }
        assert!(Summary::ANY.may_match(&TopicPrint::of(&d.parse_topic("").unwrap())));
    }

    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => "[ab]{0,1}".prop_map(String::from),
            1 => Just("*".to_string()),
            1 => Just("#".to_string()),
            1 => Just("+".to_string()),
            1 => Just(">".to_string()),
            1 => Just("$a".to_string()),
        ]
    }

    proptest! {
        #[test]
        fn the_law_holds_on_random_pairs(
            p in proptest::collection::vec(word(), 0..6),
            t in proptest::collection::vec("[ab$]{0,2}", 0..6),
        ) {
            for d in [Dialect::Amqp, Dialect::Mqtt, Dialect::Nats] {
                let sep = (d.separator() as char).to_string();
                prop_assert!(law_holds(d, &p.join(&sep), &t.join(&sep)));
            }
        }

        /// The law revalidation rests on: a summary never rules out a pattern that matches.
        #[test]
        fn a_summary_never_rules_out_a_match(
            p in proptest::collection::vec(word(), 0..9),
            t in proptest::collection::vec("[ab$]{0,2}", 0..9),
        ) {
            for d in [Dialect::Amqp, Dialect::Mqtt, Dialect::Nats] {
                let sep = (d.separator() as char).to_string();
                let (p, t) = (p.join(&sep), t.join(&sep));
                let (Ok(keys), Ok(topic)) = (d.pattern_keys(&p), d.parse_topic(&t)) else {
                    continue;
                };
                let matches = crate::reference::matches(d, &p, &t).unwrap();
                prop_assert!(!matches || Summary::of(&keys).may_match(&TopicPrint::of(&topic)));
            }
        }
    }
}

/// The protocol of `Cached` (`Cached::write` in `mod.rs`) for one topic, `a.b`, with the shard
/// counters, the write bracket and its log, the hit's reads (`still_true`) and the index
/// functions of this file. The inner matcher's answer for the topic is a set of bits, each
/// write adds one (a release store, as the inner matchers' writes publish), and the one slot
/// holds an entry; a store may overwrite any entry, which allows more than the real
/// compare-and-swap does.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::Dialect;
    use loom::sync::atomic::AtomicU64 as Answer;
    use loom::sync::{Arc, Mutex};
    use std::sync::atomic::Ordering::{Acquire, Release};

    struct Entry {
        seen: [AtomicU64; MASKS],
        answer: u64,
    }

    struct Model {
        shards: Shards,
        topic: TopicShards,
        answer: Answer,
        slot: Mutex<Option<Arc<Entry>>>,
    }

    const TOPIC: &str = "a.b";

    impl Model {
        fn new() -> Model {
            Model {
                shards: Shards::new(),
                topic: of_topic(&Dialect::Amqp.parse_topic(TOPIC).unwrap()),
                answer: Answer::new(0),
                slot: Mutex::new(None),
            }
        }

        /// A write of `pattern` that adds `bit` to the topic's answer (0: changes nothing).
        fn write(&self, pattern: &str, bit: u64) {
            let keys = Dialect::Amqp.pattern_keys(pattern).unwrap();
            self.shards
                .write(of_pattern(&keys), Summary::of(&keys), || {
                    self.answer.fetch_or(bit, Release);
                });
        }

        /// A lookup; true with it if the entry answered.
        fn lookup(&self) -> (u64, bool) {
            let entry = self.slot.lock().unwrap().clone();
            if let Some(e) = entry {
                let print = || Some(TopicPrint::of(&Dialect::Amqp.parse_topic(TOPIC).unwrap()));
                if still_true(
                    &self.shards,
                    &e.seen,
                    &self.topic,
                    &mut LazyPrint::new(&print),
                ) {
                    return (e.answer, true);
                }
            }
            let seen = self.shards.begun_each(&self.topic);
            let g = seen.iter().fold(0, |a: u64, &n| a.wrapping_add(n));
            let quiet = self.shards.ended(&self.topic) == g;
            let answer = self.answer.load(Acquire);
            if quiet && self.shards.begun(&self.topic) == g {
                *self.slot.lock().unwrap() = Some(Arc::new(Entry {
                    seen: seen.map(AtomicU64::new),
                    answer,
                }));
            }
            (answer, false)
        }
    }

    /// A writer of a pattern the topic matches and of one on the topic's own shard that it does
    /// not (`a.b.c`, which a hit passes over), a writer of `#` on the shard every topic reads,
    /// and a reader: a lookup never loses what an earlier lookup of its thread saw, and sees
    /// every write that returned before it started.
    #[test]
    fn loom_cached_lookups_see_every_returned_write() {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(|| {
            let m = Arc::new(Model::new());
            let writer = {
                let m = Arc::clone(&m);
                loom::thread::spawn(move || {
                    m.write("a.*", 1);
                    m.write("a.b.c", 0);
                })
            };
            let reader = {
                let m = Arc::clone(&m);
                loom::thread::spawn(move || {
                    let (first, _) = m.lookup();
                    let (second, _) = m.lookup();
                    assert_eq!(first & !second, 0, "{first:b} then {second:b}");
                })
            };
            m.write("#", 2);
            assert_ne!(m.lookup().0 & 2, 0);
            writer.join().unwrap();
            assert_eq!(m.lookup().0, 3);
            reader.join().unwrap();
            // Every write has ended: the entry stored now is passed over by none of them, and
            // a write that cannot match the topic leaves it answering.
            m.lookup();
            m.write("a.b.c", 0);
            assert_eq!(m.lookup(), (3, true));
        });
    }
}
