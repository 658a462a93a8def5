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
//! result is tagged with the sum of `begun` over its topic's shards: since every counter only
//! grows, an equal sum means that no counter moved. The rule that uses them, and its proof,
//! are at `Cached::write` in `mod.rs`.

use std::sync::atomic::Ordering::SeqCst;

use crate::dialect::{Key, Topic};
use crate::sync::AtomicU64;

/// Leading word positions that key a shard. Two keep a hit to four counter loads; a pattern
/// whose first two words are wildcards invalidates every topic.
pub(super) const KEY_WORDS: usize = 2;

/// Masks of key positions: every subset of the [`KEY_WORDS`] positions.
const MASKS: usize = 1 << KEY_WORDS;

/// Counters per mask (a power of two). Among 1,000 topics with distinct leading words, a
/// write then shares its counter with about one other topic's.
#[cfg(not(loom))]
pub(super) const SHARDS: usize = 1024;
/// Under loom, every counter is an object the model tracks: two per mask.
#[cfg(loom)]
pub(super) const SHARDS: usize = 2;

/// One shard's counters. `begun` is what lookups read on every hit; both sit on one line,
/// since the writer that bumps one bumps the other.
struct Shard {
    begun: AtomicU64,
    ended: AtomicU64,
}

impl Shard {
    fn new() -> Shard {
        Shard {
            begun: AtomicU64::new(0),
            ended: AtomicU64::new(0),
        }
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

/// Every shard counter of one cache: `MASKS * SHARDS` of them (the empty mask uses one).
pub(super) struct Shards {
    table: Box<[Shard]>,
}

impl Shards {
    pub(super) fn new() -> Shards {
        Shards {
            table: (0..MASKS * SHARDS).map(|_| Shard::new()).collect(),
        }
    }

    /// Runs `write` in the bracket of shard `index`: B (`begun += 1`) before it, D
    /// (`ended += 1`) after it, even if it panics.
    pub(super) fn write<R>(&self, index: usize, write: impl FnOnce() -> R) -> R {
        let shard = &self.table[index];
        shard.begun.fetch_add(1, SeqCst);
        let _ended = Ended(shard);
        write()
    }

    /// The sum of `begun` over `shards` (a hit's read, and R1 and R3).
    pub(super) fn begun(&self, shards: &TopicShards) -> u64 {
        shards
            .iter()
            .map(|i| self.table[i].begun.load(SeqCst))
            .fold(0, u64::wrapping_add)
    }

    /// The sum of `ended` over `shards` (the R2 read).
    pub(super) fn ended(&self, shards: &TopicShards) -> u64 {
        shards
            .iter()
            .map(|i| self.table[i].ended.load(SeqCst))
            .fold(0, u64::wrapping_add)
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
        mask * SHARDS + (h >> 32) as usize % SHARDS
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
    }
}

/// The protocol of `Cached` (`Cached::write` in `mod.rs`) for one topic, `a.b`, with the shard
/// counters, the write bracket and the index functions of this file. The inner matcher's
/// answer for the topic is a set of bits, each write adds one (a release store, as the inner
/// matchers' writes publish), and the one slot holds an entry as `(tag, answer)`; a store may
/// overwrite any entry, which allows more than the real compare-and-swap does.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::Dialect;
    use loom::sync::atomic::AtomicU64 as Answer;
    use loom::sync::{Arc, Mutex};
    use std::sync::atomic::Ordering::{Acquire, Release};

    struct Model {
        shards: Shards,
        topic: TopicShards,
        answer: Answer,
        slot: Mutex<Option<(u64, u64)>>,
    }

    impl Model {
        fn new() -> Model {
            let topic = Dialect::Amqp.parse_topic("a.b").unwrap();
            Model {
                shards: Shards::new(),
                topic: of_topic(&topic),
                answer: Answer::new(0),
                slot: Mutex::new(None),
            }
        }

        /// A write of `pattern` that adds `bit` to the topic's answer (0: changes nothing).
        fn write(&self, pattern: &str, bit: u64) {
            let p = Dialect::Amqp.parse_pattern(pattern).unwrap();
            self.shards.write(of_pattern(&p.keys()), || {
                self.answer.fetch_or(bit, Release);
            });
        }

        fn lookup(&self) -> u64 {
            let entry = *self.slot.lock().unwrap();
            if let Some((tag, answer)) = entry {
                if self.shards.begun(&self.topic) == tag {
                    return answer;
                }
            }
            let g = self.shards.begun(&self.topic);
            let quiet = self.shards.ended(&self.topic) == g;
            let answer = self.answer.load(Acquire);
            if quiet && self.shards.begun(&self.topic) == g {
                *self.slot.lock().unwrap() = Some((g, answer));
            }
            answer
        }
    }

    /// Two writers on two of the topic's shards and one on a shard of other topics, against
    /// a reader: a lookup never loses what an earlier lookup of its thread saw, and sees every
    /// write that returned before it started.
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
                    m.write("z.z", 0);
                })
            };
            let reader = {
                let m = Arc::clone(&m);
                loom::thread::spawn(move || {
                    let first = m.lookup();
                    let second = m.lookup();
                    assert_eq!(first & !second, 0, "{first:b} then {second:b}");
                })
            };
            m.write("#", 2);
            assert_ne!(m.lookup() & 2, 0);
            writer.join().unwrap();
            assert_eq!(m.lookup(), 3);
            reader.join().unwrap();
        });
    }
}
