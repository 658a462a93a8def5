//! The one trait every topic matcher implements, so every test runs against every matcher.

use crate::dialect::{Dialect, Pattern, Topic};
use crate::error::Result;

/// A subscriber as the core knows it: a small integer. The Python binding maps objects to ids.
pub type SubscriberId = u32;

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

    /// Parses `pattern` and unsubscribes `id` from it.
    fn unsubscribe_str(&self, pattern: &str, id: SubscriberId) -> Result<bool> {
        Ok(self.unsubscribe(&self.dialect().parse_pattern(pattern)?, id))
    }

    /// Looks up `topic` given as text, appending to `out` as [`Matcher::lookup_into`] does;
    /// an invalid topic is an error and appends nothing. A matcher that can answer from the
    /// text alone (a result cache's hit) overrides it and parses only when it must.
    fn lookup_str_into(&self, topic: &str, out: &mut Vec<SubscriberId>) -> Result<()> {
        self.lookup_into(&self.dialect().parse_topic(topic)?, out);
        Ok(())
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

    fn lookup_str_into(&self, topic: &str, out: &mut Vec<SubscriberId>) -> Result<()> {
        (**self).lookup_str_into(topic, out)
    }

    fn remove_subscriber(&self, id: SubscriberId) -> usize {
        (**self).remove_subscriber(id)
    }

    fn len(&self) -> usize {
        (**self).len()
    }

    fn subscriptions(&self) -> Vec<(String, SubscriberId)> {
        (**self).subscriptions()
    }
}

/// Sorts and deduplicates `out[start..]`, for matchers that can reach a subscriber twice.
pub(crate) fn dedup_from(out: &mut Vec<SubscriberId>, start: usize) {
    let tail = &mut out[start..];
    if tail.len() < 2 {
        return;
    }
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

#[cfg(test)]
mod tests {
    use super::dedup_from;

    #[test]
    fn dedup_from_keeps_the_prefix() {
        let mut v = vec![9, 9, 3, 1, 3, 2, 1];
        dedup_from(&mut v, 2);
        assert_eq!(v, vec![9, 9, 1, 2, 3]);
    }
}
