//! The one trait every topic matcher implements, so every test runs against every matcher.

use crate::dialect::{Dialect, Pattern, Topic};
use crate::error::Result;

/// A subscriber as the core knows it: a small integer. The Python binding maps objects to ids.
pub type SubscriberId = u32;

/// What names an answer a result cache stored: a number no other stored answer of any cache
/// in this process has had or will have. A stored answer's ids never change, so a caller that
/// turned them into something of its own (the Python binding: a tuple of the subscriber
/// objects) may keep that under the stamp and reuse it whenever a lookup hands the same stamp
/// back, without comparing the ids again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AnswerStamp(std::num::NonZeroU64);

impl AnswerStamp {
    /// A stamp never handed out before.
    pub(crate) fn fresh() -> Self {
        // One counter for the process: a matcher's snapshots have caches of their own, and
        // the binding keeps the answers of both in one table.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        AnswerStamp(std::num::NonZeroU64::new(n).expect("2^64 stamps are not handed out"))
    }

    /// The stamp as a number, for hashing.
    pub fn get(self) -> u64 {
        self.0.get()
    }

    /// The stamp whose number is `n`, which [`AnswerStamp::get`] of a stamp handed out gave
    /// (kept by a matcher beside the answer it names).
    pub(crate) fn from_raw(n: u64) -> Self {
        AnswerStamp(std::num::NonZeroU64::new(n).expect("a stamp handed out is never 0"))
    }
}

/// [`Matcher::subscribe_each_str`] a pair at a time through `subscribe_str`: the default, and
/// what a matcher with a faster load falls back to where that one does not apply.
pub(crate) fn subscribe_one_by_one<M: Matcher + ?Sized>(
    m: &M,
    pairs: &[(&str, SubscriberId)],
    added: &mut Vec<bool>,
) -> Result<()> {
    for &(pattern, id) in pairs {
        added.push(m.subscribe_str(pattern, id)?);
    }
    Ok(())
}

/// Asked by [`Matcher::lookup_str_stamped`] whether the caller already holds what it made of
/// a stored answer.
pub type Known<'a> = &'a mut dyn FnMut(AnswerStamp, &[SubscriberId]) -> bool;

/// How many topics ahead a batch announces a topic to a matcher that
/// [prefetches](Matcher::prefetches), for each step of [`Matcher::prefetch_str`]. A lookup
/// there takes hundreds of nanoseconds, so a topic or two cover a miss; a line fetched much
/// earlier may be gone again before its lookup.
#[cfg(feature = "arrow")]
pub(crate) const AHEAD: [usize; 3] = [6, 4, 2];

/// Announces to `matcher` the topics [`AHEAD`] of topic `i` of a batch, `topic(j)` being the
/// text of topic `j` (`None` past the end, or for a topic that is not text).
#[cfg(feature = "python")]
#[inline]
pub(crate) fn announce<'t, M: Matcher + ?Sized>(
    matcher: &M,
    i: usize,
    topic: impl Fn(usize) -> Option<&'t str>,
) {
    for (step, ahead) in AHEAD.iter().enumerate() {
        if let Some(t) = topic(i + ahead) {
            matcher.prefetch_str(t, step);
        }
    }
}

/// A set of `(pattern, subscriber)` pairs that answers "who wants this topic?".
///
/// Every method takes `&self`: matchers are shared between threads and synchronise inside.
/// Patterns and topics must be of the matcher's dialect; mixing dialects is a programming error
/// and panics.
pub trait Matcher: Send + Sync {
    /// The dialect of every pattern and topic this matcher takes.
    fn dialect(&self) -> Dialect;

    /// Adds the pair; `true` if it was not there.
    fn subscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool;

    /// Removes the pair; `true` if it was there.
    fn unsubscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool;

    /// Whether `id` is subscribed to `pattern`, given as text. An invalid pattern is never
    /// there. Wrappers ask it before a write that would change nothing (a client that
    /// subscribes again on every reconnect), so that such a write disturbs nobody.
    fn contains(&self, pattern: &str, id: SubscriberId) -> bool;

    /// Appends to `out` every subscriber with a pattern that matches `topic`, each once, in no
    /// particular order.
    fn lookup_into(&self, topic: &Topic<'_>, out: &mut Vec<SubscriberId>);

    /// Removes every pair of `id`; returns how many there were.
    fn remove_subscriber(&self, id: SubscriberId) -> usize;

    /// Whether any pattern matches `topic`: what the NATS server asks (`HasInterest`) before
    /// it does any work for a message. Matchers that can stop at the first match override it.
    fn has_interest(&self, topic: &Topic<'_>) -> bool {
        let mut out = Vec::new();
        self.lookup_into(topic, &mut out);
        !out.is_empty()
    }

    /// [`Matcher::has_interest`] of a topic given as text; an invalid topic is an error. A
    /// matcher that answers from the text alone (a result cache's hit) overrides it.
    fn has_interest_str(&self, topic: &str) -> Result<bool> {
        self.dialect().with_topic(topic, |t| self.has_interest(t))
    }

    /// The pairs whose patterns share at least one topic with `pattern` (the NATS server's
    /// `ReverseMatch`): which subscriptions a new pattern overlaps. The default tests every
    /// pair with [`crate::overlap::intersects`]: time linear in the pairs.
    fn reverse_match(&self, pattern: &Pattern) -> Vec<(String, SubscriberId)> {
        let d = self.dialect();
        assert_eq!(pattern.dialect(), d, "pattern of another dialect");
        self.subscriptions()
            .into_iter()
            .filter(|(text, _)| {
                let stored = d.parse_pattern(text).expect("a stored pattern is valid");
                crate::overlap::intersects(&stored, pattern)
            })
            .collect()
    }

    /// The number of `(pattern, subscriber)` pairs.
    fn len(&self) -> usize;

    /// Every `(pattern, subscriber)` pair, in no particular order.
    fn subscriptions(&self) -> Vec<(String, SubscriberId)>;

    /// Whether there are no pairs.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The subscribers that want `topic`, each once.
    fn lookup(&self, topic: &Topic<'_>) -> Vec<SubscriberId> {
        let mut out = Vec::new();
        self.lookup_into(topic, &mut out);
        out
    }

    /// Parses `pattern` and subscribes `id` to it. The tries override it to walk the pattern's
    /// words borrowed from the text, so that a pair already there costs no allocation.
    fn subscribe_str(&self, pattern: &str, id: SubscriberId) -> Result<bool> {
        Ok(self.subscribe(&self.dialect().parse_pattern(pattern)?, id))
    }

    /// Subscribes the pairs of `pairs` (patterns as text) in order, as
    /// [`subscribe_str`](Self::subscribe_str) does one, and appends to `added` whether each
    /// was new. Stops at the first invalid pattern with its error: the pairs before it are in
    /// and told in `added`, the rest are not tried. For loading many pairs at once: a matcher
    /// may take fewer steps than a write per pair (the `Trie` takes its lock once for many and
    /// scans each pattern once; a result cache counts one write for all of them, which makes
    /// every answer it holds stale once). A lookup meanwhile sees each pair in or out.
    fn subscribe_each_str(
        &self,
        pairs: &[(&str, SubscriberId)],
        added: &mut Vec<bool>,
    ) -> Result<()> {
        subscribe_one_by_one(self, pairs, added)
    }

    /// Parses `pattern` and unsubscribes `id` from it.
    fn unsubscribe_str(&self, pattern: &str, id: SubscriberId) -> Result<bool> {
        Ok(self.unsubscribe(&self.dialect().parse_pattern(pattern)?, id))
    }

    /// Looks up `topic` given as text, appending to `out` as [`Matcher::lookup_into`] does;
    /// an invalid topic is an error and appends nothing. A matcher that can answer from the
    /// text alone (a result cache's hit) overrides it and parses only when it must.
    fn lookup_str_into(&self, topic: &str, out: &mut Vec<SubscriberId>) -> Result<()> {
        self.dialect()
            .with_topic(topic, |t| self.lookup_into(t, out))
    }

    /// [`Matcher::lookup_str_into`], saying whether what it found is an answer a result cache
    /// stored, and which ([`AnswerStamp`]); `None` for an answer made by this lookup. On a
    /// stored answer `known` is asked first, with its stamp and ids: when it answers `true`
    /// (the caller holds what it made of them) the ids are not appended.
    fn lookup_str_stamped(
        &self,
        topic: &str,
        out: &mut Vec<SubscriberId>,
        known: Known<'_>,
    ) -> Result<Option<AnswerStamp>> {
        let _ = known;
        self.lookup_str_into(topic, out).map(|()| None)
    }

    /// Whether a batch gains by announcing its next topics with [`Matcher::prefetch_str`]:
    /// `true` for a result cache whose stored answers are too large to stay in a core's own
    /// caches (`cache::PREFETCH_FROM_BYTES`).
    fn prefetches(&self) -> bool {
        false
    }

    /// Hints that `topic` will be looked up soon, so that a batch's lookups overlap their
    /// waits on memory: `step` 0 asks for the line a lookup of it reads first, step `k` for
    /// the line it reads after those of the steps before, which the batch asked for a few
    /// topics earlier (this crate's batches: six, four and two topics ahead of the lookup).
    /// Changes nothing; the default does nothing.
    fn prefetch_str(&self, topic: &str, step: usize) {
        let _ = (topic, step);
    }

    /// Looks up `topic` given as text.
    fn lookup_str(&self, topic: &str) -> Result<Vec<SubscriberId>> {
        let mut out = Vec::new();
        self.lookup_str_into(topic, &mut out)?;
        Ok(out)
    }
}

/// A shared matcher is a matcher: a [`Cached`](crate::Cached) can front an `Arc` that other
/// code also holds (the benches time one trie with and without the cache this way). Writes
/// made through another holder bypass the cache's generation: only lookups may go around it.
impl<M: Matcher + ?Sized> Matcher for std::sync::Arc<M> {
    fn dialect(&self) -> Dialect {
        (**self).dialect()
    }

    fn subscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        (**self).subscribe(pattern, id)
    }

    fn unsubscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        (**self).unsubscribe(pattern, id)
    }

    fn contains(&self, pattern: &str, id: SubscriberId) -> bool {
        (**self).contains(pattern, id)
    }

    fn lookup_into(&self, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        (**self).lookup_into(topic, out);
    }

    fn subscribe_str(&self, pattern: &str, id: SubscriberId) -> Result<bool> {
        (**self).subscribe_str(pattern, id)
    }

    fn unsubscribe_str(&self, pattern: &str, id: SubscriberId) -> Result<bool> {
        (**self).unsubscribe_str(pattern, id)
    }

    fn subscribe_each_str(
        &self,
        pairs: &[(&str, SubscriberId)],
        added: &mut Vec<bool>,
    ) -> Result<()> {
        (**self).subscribe_each_str(pairs, added)
    }

    fn lookup_str_into(&self, topic: &str, out: &mut Vec<SubscriberId>) -> Result<()> {
        (**self).lookup_str_into(topic, out)
    }

    fn lookup_str_stamped(
        &self,
        topic: &str,
        out: &mut Vec<SubscriberId>,
        known: Known<'_>,
    ) -> Result<Option<AnswerStamp>> {
        (**self).lookup_str_stamped(topic, out, known)
    }

    fn prefetches(&self) -> bool {
        (**self).prefetches()
    }

    fn prefetch_str(&self, topic: &str, step: usize) {
        (**self).prefetch_str(topic, step);
    }

    fn remove_subscriber(&self, id: SubscriberId) -> usize {
        (**self).remove_subscriber(id)
    }

    fn has_interest(&self, topic: &Topic<'_>) -> bool {
        (**self).has_interest(topic)
    }

    fn has_interest_str(&self, topic: &str) -> Result<bool> {
        (**self).has_interest_str(topic)
    }

    fn reverse_match(&self, pattern: &Pattern) -> Vec<(String, SubscriberId)> {
        (**self).reverse_match(pattern)
    }

    fn len(&self) -> usize {
        (**self).len()
    }

    fn subscriptions(&self) -> Vec<(String, SubscriberId)> {
        (**self).subscriptions()
    }
}

/// Gives a fresh answer vector (`lookup_str`'s, of no capacity) room for its `n()` ids at
/// once: its first push went through the vector's growth path, 70 instructions beside
/// `malloc`. A reused vector is left to grow as it goes, which costs it nothing.
#[inline]
pub(crate) fn size_fresh(out: &mut Vec<SubscriberId>, n: impl FnOnce() -> usize) {
    if out.capacity() == 0 {
        *out = Vec::with_capacity(n());
    }
}

/// Deduplicates `out[start..]`, for matchers that can reach a subscriber twice. A tail of a
/// few ids keeps the first of each in place, each compared with those kept before it (an
/// answer of two ids took 71 instructions to sort, 47 so; 2,100 the whole hot lookup). A
/// longer one is deduplicated in one pass over a per-thread bitmap of the ids seen, which is
/// cleared again through the kept ids alone, when its ids are small enough for that bitmap,
/// and sorted otherwise. (Tails of 9 to 48 ids were sorted until 2026-12-06: on `mixed` 100k,
/// answers of 32 subscribers on average, sorting them was a fifth of a `Trie` lookup's
/// instructions and marking them an eighth less than sorting.)
pub(crate) fn dedup_from(out: &mut Vec<SubscriberId>, start: usize) {
    let tail = &mut out[start..];
    if tail.len() < 2 {
        return;
    }
    if tail.len() <= SCAN_MAX {
        let mut keep = 1;
        for i in 1..tail.len() {
            let id = tail[i];
            if !tail[..keep].contains(&id) {
                tail[keep] = id;
                keep += 1;
            }
        }
        out.truncate(start + keep);
        return;
    }
    if dedup_marked(out, start) {
        return;
    }
    let tail = &mut out[start..];
    tail.sort_unstable();
    let mut keep = start + 1;
    for i in start + 1..out.len() {
        if out[i] != out[keep - 1] {
            out[keep] = out[i];
            keep += 1;
        }
    }
    out.truncate(keep);
}

/// Tails up to this long are deduplicated by compares alone (at most 28 of them).
const SCAN_MAX: usize = 8;

/// Distinct ids too large for the bitmap that a marking compares among themselves, at most;
/// a tail of more is sorted.
const LARGE_MAX: usize = 48;

/// Ids below this are deduplicated by marking: a thread's bitmap is 128 KiB.
const MARK_IDS: SubscriberId = 1 << 20;

/// The words of a thread's bitmap.
const MARK_WORDS: usize = MARK_IDS as usize / 64;

std::thread_local! {
    /// The ids a deduplication has seen so far; all zero between deduplications.
    static MARKS: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Deduplicates `out[start..]` keeping the first of each id, by marking; `false` when more
/// than a few distinct ids are too large for the bitmap, with the tail then holding each of
/// the ids it held, in some order, for the sort. The few are compared among themselves: a
/// shared-subscription group's id (bit 31 set, see `groups.rs`) in a fan-out of thousands must
/// not send the whole answer to the sort.
///
/// The bitmap has room for every id under [`MARK_IDS`] from the first use on (its pages are
/// touched only where ids fall): sizing it to the tail's largest id took a pass of its own
/// over the tail first, 4 % of a `Trie` lookup on `mixed` 100k.
fn dedup_marked(out: &mut Vec<SubscriberId>, start: usize) -> bool {
    MARKS.with(|marks| {
        let mut marks = marks.borrow_mut();
        if marks.is_empty() {
            *marks = vec![0; MARK_WORDS];
        }
        // A power of two, so that a mask keeps each id's word in bounds where a check per id
        // would (the checks were a sixth of this function's instructions on `mixed` 100k).
        let (marks, mask) = (&mut marks[..MARK_WORDS], MARK_WORDS - 1);
        let mut kept_large: smallvec::SmallVec<[SubscriberId; 4]> = smallvec::SmallVec::new();
        let tail = &mut out[start..];
        let mut keep = 0;
        let mut marked = true;
        for i in 0..tail.len() {
            let id = tail[i];
            let first = if id >= MARK_IDS {
                let first = !kept_large.contains(&id);
                if first {
                    if kept_large.len() == LARGE_MAX {
                        // Too many to compare: the ids kept so far and those not read yet
                        // go to the sort (the ids between are copies already kept).
                        marked = false;
                        tail.copy_within(i.., keep);
                        keep += tail.len() - i;
                        break;
                    }
                    kept_large.push(id);
                }
                first
            } else {
                let (word, bit) = ((id as usize / 64) & mask, 1u64 << (id % 64));
                let first = marks[word] & bit == 0;
                marks[word] |= bit;
                first
            };
            // Written whether kept or not (`keep <= i`, so nothing unread is overwritten): a
            // repeat is not a branch to predict.
            tail[keep] = id;
            keep += usize::from(first);
        }
        for &id in &tail[..keep] {
            if id < MARK_IDS {
                marks[(id as usize / 64) & mask] = 0;
            }
        }
        out.truncate(start + keep);
        marked
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::dedup_from;

    #[test]
    fn dedup_from_keeps_the_prefix() {
        // A short tail keeps the first of each id where it was.
        let mut v = vec![9, 9, 3, 1, 3, 2, 1];
        dedup_from(&mut v, 2);
        assert_eq!(v, vec![9, 9, 3, 1, 2]);
        // A longer one is marked, and keeps its order too.
        let mut v = vec![9, 9, 5, 3, 1, 3, 2, 1, 8, 7, 5, 4];
        dedup_from(&mut v, 2);
        assert_eq!(v, vec![9, 9, 5, 3, 1, 2, 8, 7, 4]);
        // One of more ids past the bitmap than a marking compares is sorted.
        let large = super::MARK_IDS;
        let mut v: Vec<u32> = (0..60).chain(0..60).map(|i| large + 59 - i % 60).collect();
        v.push(1);
        dedup_from(&mut v, 0);
        let mut want: Vec<u32> = (large..large + 60).collect();
        want.insert(0, 1);
        assert_eq!(v, want);
    }

    proptest::proptest! {
        /// Long tails (marked, or sorted when more than `LARGE_MAX` distinct ids are past the
        /// bitmap) and a few ids drawn from fewer values (compared), small ids and ids past
        /// the bitmap: the prefix stays, each id of the tail once, and the marks are clear
        /// afterwards (the next deduplication on the thread sees none of this one's ids).
        #[test]
        fn dedup_from_keeps_each_id_once(
            prefix in proptest::collection::vec(0u32..50, 0..4),
            tail in proptest::collection::vec(0u32..300, 0..200),
            few in proptest::option::of(1usize..=super::SCAN_MAX + 1),
            big in proptest::bool::ANY,
        ) {
            let shift = if big { super::MARK_IDS - 100 } else { 0 };
            let tail: Vec<u32> = match few {
                // At most SCAN_MAX + 1 ids of five values: repeats in most tails.
                Some(n) => tail.iter().take(n).map(|&x| x % 5 + shift).collect(),
                None => tail.iter().map(|&x| x + shift).collect(),
            };
            for _ in 0..2 {
                let mut v = prefix.clone();
                v.extend(&tail);
                dedup_from(&mut v, prefix.len());
                proptest::prop_assert_eq!(&v[..prefix.len()], &prefix[..]);
                let mut got = v[prefix.len()..].to_vec();
                got.sort_unstable();
                let mut want = tail.clone();
                want.sort_unstable();
                want.dedup();
                proptest::prop_assert_eq!(got, want);
            }
        }
    }
}
