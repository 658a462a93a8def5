//! What every Python topic matcher class shares: a core [`Matcher`] plus the subscriber
//! [`Registry`], and the methods of DESIGN.md written once. The classes in `matchers.rs` are
//! generated from this by `topic_matcher_class!`.
//!
//! The GIL: a lookup batch releases it when its measured work repays taking the GIL back
//! (`gil.rs` holds the rule); a scan matcher's lookup estimates its work from its number of
//! patterns ([`SCAN_PATTERN`] each) under the same rule; a single index lookup (a microsecond)
//! keeps it; single writes release it by `gil::write`'s rule (`remove_subscriber` too, on a
//! matcher of up to `SHORT_REMOVAL_PAIRS` pairs); bulk writes, other removals and
//! `subscriptions` always release it.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::answers::{CollectorPaused, KeptTuple};
use super::errors::{read_only, to_py, InvalidPattern, InvalidTopic};
use super::gil;
use super::registry::{Found, Registry};
use super::text::{utf8, Kind};
use crate::dialect::Dialect;
use crate::groups::{self, GroupMatch, Grouped};
use crate::matcher::{AnswerStamp, Matcher, SubscriberId};

impl<M> Drop for TopicIndex<M> {
    fn drop(&mut self) {
        if self.read_only {
            // Dropped from the class's dealloc, attached to the interpreter.
            Python::attach(|py| self.registry.drop_snapshot(py, self.snapshot_seq));
        }
    }
}

/// The version of the pickled form; a later format gets a new number.
pub(crate) const PICKLE_FORMAT: u32 = 1;

/// `__setstate__`: refuses pickles of a format this version cannot read.
pub(crate) fn check_pickle_format(state: &Bound<'_, PyAny>) -> PyResult<()> {
    match state.extract::<u32>() {
        Ok(PICKLE_FORMAT) => Ok(()),
        Ok(n) => Err(PyValueError::new_err(format!(
            "this pickle has format {n}, written by a newer topicmatch; this one reads format \
             {PICKLE_FORMAT}: upgrade topicmatch to load it"
        ))),
        Err(_) => Err(PyValueError::new_err(
            "not a topicmatch pickle state (expected a format number)",
        )),
    }
}

/// Adds the plain pairs of one chunk of a bulk write at once (`Matcher::subscribe_each_str`:
/// the `Trie` takes its lock once for many, a result cache counts one write), and tells
/// whether each was new. The patterns were checked: one that failed would count its pair and
/// those after it as not new, as a single write's error does.
fn subscribe_each<'t>(
    core: &impl Matcher,
    pairs: impl Iterator<Item = (&'t str, SubscriberId)>,
) -> Vec<bool> {
    let pairs: Vec<(&str, SubscriberId)> = pairs.collect();
    let mut added = Vec::with_capacity(pairs.len());
    // An error leaves `added` short; the pairs it does not cover were not added.
    let _ = core.subscribe_each_str(&pairs, &mut added);
    added.resize(pairs.len(), false);
    added
}

/// Bulk writes run in chunks of this many items, answering signals (Ctrl-C) between them.
pub(crate) const CHUNK: usize = gil::HELD_ITEMS;

/// A batch pauses the collector while it makes its lists once they hold this many subscribers
/// (see `CollectorPaused`): below it, a collection walks little.
pub(crate) const PAUSE_FROM: usize = 4096;

std::thread_local! {
    /// The ids of the topic a batch counts now (`count_many`); only the core runs while it is
    /// borrowed, never Python code that could start another batch on this thread.
    static SCRATCH: std::cell::RefCell<Vec<SubscriberId>> =
        const { std::cell::RefCell::new(Vec::new()) };

    /// The short answers of the slice a batch looks up now, end to end (`run_answers`): the
    /// core appends each topic's ids, and the slice's conversion reads them in place, so a
    /// batch allocates no vector per short answer. Borrowed only while the core runs; the
    /// conversion takes the buffer out (a finalizer it runs may start a batch of its own on
    /// this thread).
    static FLAT: std::cell::RefCell<Vec<SubscriberId>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The most ids `SCRATCH` and `FLAT` keep room for between batches (256 KiB).
const SCRATCH_KEEP: usize = 1 << 16;

/// Frees `buf` if it grew past [`SCRATCH_KEEP`]: a thread keeps no large buffer past its batch.
fn shed_large(buf: &mut Vec<SubscriberId>) {
    if buf.capacity() > SCRATCH_KEEP {
        *buf = Vec::new();
    }
}

/// Answers of more ids than this leave `FLAT` for a vector of their own: there one allocation
/// costs little beside the ids, and a slice of 4,096 answers of hundreds of subscribers
/// would make the buffer megabytes long, written and read again from past the processor's
/// caches (an `InvertedBitmap`'s `lookup_flat` on the OpenAMQ workload took about 1.5x as
/// long with every answer in the buffer).
const FLAT_MAX_IDS: usize = 64;

/// One topic's answer in a batch: a span of `FLAT`, or ids of its own; with its stamp if a
/// result cache stored it.
enum Span {
    Flat(usize, usize, Option<AnswerStamp>),
    Own(Vec<SubscriberId>, Option<AnswerStamp>),
    /// A stored answer whose tuple the registry keeps: its ids were not copied.
    Kept(KeptTuple),
}

/// Up to this many pairs in the matcher, `remove_subscriber` is a short write (tens of
/// microseconds even for a core that scans its patterns) and takes the rule of `subscribe`.
const SHORT_REMOVAL_PAIRS: usize = 4096;

/// What a scan matcher's lookup costs per pattern, for its estimate (20 tests per µs here).
pub(crate) const SCAN_PATTERN: Duration = Duration::from_nanos(50);

/// A core matcher, with shared subscriptions, and its subscriber registry.
pub(crate) struct TopicIndex<M> {
    pub(crate) core: Arc<Grouped<M>>,
    pub(crate) registry: Arc<Registry>,
    /// Set on snapshots: every write raises `TypeError`.
    pub(crate) read_only: bool,
    /// On a snapshot, its number in the registry (see `Registry::add_snapshot`).
    snapshot_seq: u64,
    /// Whether a lookup's cost grows with the number of patterns (the naive scan).
    pub(crate) scan_lookup: bool,
}

/// What `__reduce__` returns for a class pickled by content: `(type(slf), args,
/// PICKLE_FORMAT)`, where `args` are its constructor's arguments and the format is what its
/// `__setstate__` checks ([`check_pickle_format`]).
pub(crate) fn reduce_by_content<'py>(
    slf: &Bound<'py, PyAny>,
    args: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let py = slf.py();
    PyTuple::new(
        py,
        [
            slf.get_type().into_any(),
            args,
            PICKLE_FORMAT.into_pyobject(py)?.into_any(),
        ],
    )
}

/// An item of `subscribe_many`: a `(pattern, subscriber)` pair or a `(pattern, subscriber,
/// group)` triple with a `str` group; `None` for anything else.
fn subscription_item<'py>(
    item: &Bound<'py, PyAny>,
) -> Option<(Bound<'py, PyAny>, Bound<'py, PyAny>, Option<String>)> {
    if let Ok((pattern, subscriber)) = item.extract() {
        return Some((pattern, subscriber, None));
    }
    let (pattern, subscriber, group): (_, _, String) = item.extract().ok()?;
    Some((pattern, subscriber, Some(group)))
}

pub(crate) fn parse_dialect(name: &str) -> PyResult<Dialect> {
    name.parse().map_err(to_py)
}

impl<M: Matcher + 'static> TopicIndex<M> {
    pub(crate) fn new(py: Python<'_>, core: M, scan_lookup: bool) -> Self {
        TopicIndex {
            core: Arc::new(Grouped::new(core)),
            registry: Arc::new(Registry::new(py)),
            read_only: false,
            snapshot_seq: 0,
            scan_lookup,
        }
    }

    /// A read-only index over the snapshot of `self.core` that `take` makes, sharing the
    /// registry, so its ids keep their objects for as long as it lives.
    ///
    /// The snapshot is counted before `take` runs: an id released before that was removed
    /// from the core before, so the snapshot cannot hold it, and one released after waits
    /// for this snapshot. Counted after, a release in between (another thread's unsubscribe
    /// taking the registry's lock while this one waited for it) freed an id the snapshot
    /// held, and its number could go to the next new subscriber.
    pub(crate) fn share_read_only(
        &self,
        py: Python<'_>,
        take: impl FnOnce() -> Grouped<M>,
    ) -> PyResult<Self> {
        let snapshot_seq = self.registry.add_snapshot(py)?;
        Ok(TopicIndex {
            core: Arc::new(take()),
            registry: Arc::clone(&self.registry),
            read_only: true,
            snapshot_seq,
            scan_lookup: self.scan_lookup,
        })
    }

    /// What one lookup costs, estimated before running it: known for a scan matcher, zero
    /// (to be measured) for an index.
    fn lookup_estimate(&self) -> Duration {
        if self.scan_lookup {
            gil::work_of(SCAN_PATTERN, self.core.len())
        } else {
            Duration::ZERO
        }
    }

    fn writable(&self) -> PyResult<()> {
        if self.read_only {
            Err(read_only())
        } else {
            Ok(())
        }
    }

    /// The text of a valid subscription (a pattern, and the group it joins if any), checked
    /// before any subscriber is registered. The core takes it as text and walks its words
    /// borrowed from it, so nothing is built for it.
    fn pattern<'a>(&self, pattern: &'a Bound<'_, PyAny>, group: Option<&str>) -> PyResult<&'a str> {
        let text = utf8(pattern, Kind::Pattern)?;
        groups::check_subscription(self.core.dialect(), text, group).map_err(to_py)?;
        Ok(text)
    }

    pub(crate) fn subscribe(
        &self,
        pattern: &Bound<'_, PyAny>,
        subscriber: &Bound<'_, PyAny>,
        group: Option<&str>,
    ) -> PyResult<bool> {
        self.writable()?;
        let text = self.pattern(pattern, group)?;
        let core = &self.core;
        self.registry.adding(subscriber, |id| {
            gil::write(subscriber.py(), || core.subscribe_in(group, text, id)).map_err(to_py)
        })
    }

    /// Subscribes many pairs: all patterns are checked before any is added, and the core work
    /// runs with the GIL released. Returns how many pairs were new.
    ///
    /// The check keeps only the Python objects (16 bytes a pair); each chunk's patterns are
    /// parsed again just before they are added. Parsed forms of every pattern held at once (a
    /// few hundred bytes each) would be freed at the end, but among the trie's own nodes, so the
    /// allocator could not give them back: at a million pairs that tripled the resident memory
    /// a subscription costs.
    pub(crate) fn subscribe_many(&self, pairs: &Bound<'_, PyAny>) -> PyResult<usize> {
        self.writable()?;
        let py = pairs.py();
        let dialect = self.core.dialect();
        let numbered = |i: usize, e: PyErr| {
            PyErr::from_type(
                e.get_type(py),
                format!("subscriptions[{i}]: {}", e.value(py)),
            )
        };
        let mut checked: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = Vec::new();
        let mut groups: Vec<Option<String>> = Vec::new();
        for (i, item) in pairs.try_iter()?.enumerate() {
            let (pattern, subscriber, group) = subscription_item(&item?).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "subscriptions[{i}] is not a (pattern, subscriber) pair or a \
                     (pattern, subscriber, group) triple with a str group"
                ))
            })?;
            let text = utf8(&pattern, Kind::Pattern).map_err(|e| numbered(i, e))?;
            groups::check_subscription(dialect, text, group.as_deref())
                .map_err(|e| numbered(i, to_py(e)))?;
            subscriber.hash()?;
            checked.push((pattern, subscriber));
            groups.push(group);
        }
        let ids = self.registry.pin_each(
            py,
            checked.iter().map(|(_, subscriber)| Ok(subscriber.clone())),
        )?;
        let core = &self.core;
        self.add_pinned(py, &ids, |rows| {
            let texts = checked[rows.clone()]
                .iter()
                .map(|(pattern, _)| utf8(pattern, Kind::Pattern))
                .collect::<PyResult<Vec<&str>>>()?;
            // `str` and `bytes` are immutable, so each pattern is as valid as it was checked:
            // no error comes back, and one would only count the pair as not new.
            Ok(gil::detach(py, || {
                if groups[rows.clone()].iter().all(Option::is_none) {
                    return subscribe_each(
                        &**core,
                        texts.iter().copied().zip(ids[rows].iter().copied()),
                    );
                }
                texts
                    .iter()
                    .zip(&ids[rows.clone()])
                    .zip(&groups[rows])
                    .map(|((text, &id), group)| {
                        matches!(core.subscribe_in(group.as_deref(), text, id), Ok(true))
                    })
                    .collect()
            }))
        })
    }

    /// The last step of the bulk writes: adds the pairs whose subscribers `ids` pins (one pin
    /// a pair), `CHUNK` at a time, with `add` (which reports whether each pair of its rows was
    /// new); gives back the pins of pairs that were not new, and of every pair not added
    /// when `add` fails or a signal (Ctrl-C) comes between chunks. Pairs already added stay:
    /// each pair is in or out, never half. Returns how many pairs were new.
    fn add_pinned(
        &self,
        py: Python<'_>,
        ids: &[SubscriberId],
        mut add: impl FnMut(std::ops::Range<usize>) -> PyResult<Vec<bool>>,
    ) -> PyResult<usize> {
        let mut added = 0;
        for start in (0..ids.len()).step_by(CHUNK) {
            let rows = start..ids.len().min(start + CHUNK);
            let end = rows.end;
            let new = match add(rows.clone()) {
                Ok(new) => new,
                Err(e) => {
                    for &id in &ids[start..] {
                        self.registry.unpin(py, id, 1);
                    }
                    return Err(e);
                }
            };
            for (&id, &new) in ids[rows].iter().zip(&new) {
                if new {
                    added += 1;
                } else {
                    self.registry.unpin(py, id, 1);
                }
            }
            if let Err(interrupt) = py.check_signals() {
                for &id in &ids[end..] {
                    self.registry.unpin(py, id, 1);
                }
                return Err(interrupt);
            }
        }
        Ok(added)
    }

    /// Subscribes the pairs of two Arrow arrays of one length: `patterns` (strings) and
    /// `subscribers` (ints of any width, subscribed as Python ints). Every row is checked,
    /// with the GIL released, before any pair is added: a null or invalid pattern raises
    /// `InvalidPattern` and a null subscriber `ValueError`, each naming its row, and nothing
    /// is added. The writes run with the GIL released. Returns how many pairs were new.
    pub(crate) fn subscribe_arrow(
        &self,
        patterns: &Bound<'_, PyAny>,
        subscribers: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        self.writable()?;
        let py = patterns.py();
        let (pattern_array, subscriber_array) = (
            super::arrow::import(patterns)?,
            super::arrow::import(subscribers)?,
        );
        if pattern_array.len() != subscriber_array.len() {
            return Err(PyValueError::new_err(format!(
                "patterns has {} rows and subscribers {}: give one subscriber a pattern",
                pattern_array.len(),
                subscriber_array.len()
            )));
        }
        let texts: Vec<Option<&str>> = crate::arrow::strings(pattern_array.as_ref(), "patterns")
            .map_err(super::arrow::argument_error)?
            .collect();
        let values = crate::arrow::integers(subscriber_array.as_ref(), "subscribers")
            .map_err(super::arrow::argument_error)?;
        // The rows are checked as `pattern_errors` checks them; the first bad row in either
        // column is named (a row with both faults, by its pattern).
        let dialect = self.core.dialect();
        let reasons = gil::detach(py, || {
            crate::arrow::pattern_errors(dialect, pattern_array.as_ref())
        })
        .map_err(super::arrow::argument_error)?;
        let bad_pattern = reasons.iter().position(|reason| reason.is_some());
        let null_subscriber = values.iter().position(Option::is_none);
        if let Some(row) = bad_pattern.into_iter().chain(null_subscriber).min() {
            return Err(match texts[row] {
                None => InvalidPattern::new_err(format!("patterns[{row}] is null")),
                Some(_) if bad_pattern == Some(row) => {
                    InvalidPattern::new_err(format!("patterns[{row}]: {}", reasons.value(row)))
                }
                Some(text) => {
                    PyValueError::new_err(format!("subscribers[{row}] is null (pattern {text:?})"))
                }
            });
        }
        let ints = values.iter().flatten().map(|value| {
            value
                .into_pyobject(py)
                .map(|int| int.into_any())
                .map_err(PyErr::from)
        });
        let ids = self.registry.pin_each(py, ints)?;
        let core = &self.core;
        self.add_pinned(py, &ids, |rows| {
            Ok(gil::detach(py, || {
                // Checked above, and Arrow arrays are immutable: no pattern is null or fails.
                let texts = texts[rows.clone()]
                    .iter()
                    .map(|text| text.unwrap_or_default());
                subscribe_each(&**core, texts.zip(ids[rows].iter().copied()))
            }))
        })
    }

    pub(crate) fn unsubscribe(
        &self,
        pattern: &Bound<'_, PyAny>,
        subscriber: &Bound<'_, PyAny>,
        group: Option<&str>,
    ) -> PyResult<bool> {
        self.writable()?;
        let text = self.pattern(pattern, group)?;
        let core = &self.core;
        let removed = self.registry.removing(subscriber, |id| {
            let removed = gil::write(subscriber.py(), || core.unsubscribe_in(group, text, id));
            Ok(usize::from(removed.map_err(to_py)?))
        })?;
        Ok(removed == 1)
    }

    pub(crate) fn remove_subscriber(&self, subscriber: &Bound<'_, PyAny>) -> PyResult<usize> {
        self.writable()?;
        let core = &self.core;
        let py = subscriber.py();
        // A small matcher's removal is a short write, whatever the core walks (the `CSTrie`
        // scans its patterns): it takes the rule of single writes. A larger one may run for
        // milliseconds and always releases.
        let short = core.len() <= SHORT_REMOVAL_PAIRS;
        self.registry.removing(subscriber, |id| {
            Ok(if short {
                gil::write(py, || core.remove_subscriber(id))
            } else {
                gil::detach(py, || core.remove_subscriber(id))
            })
        })
    }

    /// The ids of one topic, with the GIL held or not by the rule for single lookups.
    fn ids_of(&self, py: Python<'_>, text: &str) -> PyResult<Vec<SubscriberId>> {
        let core = &self.core;
        let mut ids = Vec::new();
        // The topic is parsed inside the core, and only if a result cache cannot answer it.
        gil::run_estimated(py, self.lookup_estimate(), || {
            core.lookup_str_into(text, &mut ids)
        })
        .map_err(to_py)?;
        Ok(ids)
    }

    /// Looks `text` up, appending its ids to `out`, unless what it finds is a stored answer
    /// whose tuple the registry keeps: that tuple comes back instead, and the core copies no
    /// id out. Takes no GIL; the caller holds an epoch guard, as for any lookup.
    fn look_kept(
        &self,
        text: &str,
        out: &mut Vec<SubscriberId>,
    ) -> crate::Result<(Option<AnswerStamp>, Option<KeptTuple>)> {
        let mut kept = None;
        let mut known = |stamp, ids: &[SubscriberId]| {
            kept = self.registry.stamped(stamp, ids.len());
            kept.is_some()
        };
        let stamp = self.core.lookup_str_stamped(text, out, &mut known)?;
        Ok((stamp, kept))
    }

    pub(crate) fn lookup<'py>(&self, topic: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let py = topic.py();
        let text = utf8(topic, Kind::Topic)?;
        let guard = crossbeam_epoch::pin();
        let mut ids = Vec::new();
        let (stamp, kept) = gil::run_estimated(py, self.lookup_estimate(), || {
            self.look_kept(text, &mut ids)
        })
        .map_err(to_py)?;
        let found = Found {
            topic: text,
            ids: &ids,
            stamp,
            kept: kept.as_ref(),
        };
        let list = self.registry.answer(py, found);
        drop(kept);
        drop(guard);
        list
    }

    /// Runs a batch of lookups: `look` looks up every topic, off the GIL when the rule says
    /// it pays; `sink` gets each slice's results, with the GIL and the slice's topics.
    fn run_many<T: Send>(
        &self,
        topics: &Bound<'_, PyAny>,
        look: impl Fn(&str) -> crate::Result<T> + Sync,
        mut sink: impl FnMut(&[&str], Vec<T>) -> PyResult<()>,
    ) -> PyResult<()> {
        let items: Vec<Bound<'_, PyAny>> = topics.try_iter()?.collect::<PyResult<_>>()?;
        let texts: Vec<&str> = items
            .iter()
            .map(|item| utf8(item, Kind::Topic))
            .collect::<PyResult<_>>()?;
        // On a cache past the caches of a core, the topics a few ahead are announced to it.
        let prefetch = self.core.prefetches();
        let step = |i: usize| -> PyResult<T> {
            if prefetch {
                crate::matcher::announce(self.core.as_ref(), i, |j| texts.get(j).copied());
            }
            look(texts[i]).map_err(|e| InvalidTopic::new_err(format!("topics[{i}]: {e}")))
        };
        let mut done = 0;
        gil::run_batch(
            topics.py(),
            texts.len(),
            self.lookup_estimate(),
            step,
            |results| {
                let slice = &texts[done..done + results.len()];
                done += results.len();
                sink(slice, results)
            },
        )
    }

    /// Runs a batch of lookups whose answers are converted: each topic's ids go on the end of
    /// this thread's `FLAT` buffer, and `sink` gets each slice's answers, read in place, with
    /// the GIL.
    fn run_answers(
        &self,
        topics: &Bound<'_, PyAny>,
        mut sink: impl FnMut(&[Found<'_>]) -> PyResult<()>,
    ) -> PyResult<()> {
        // What a batch that failed left behind. (A batch started by a finalizer during a
        // conversion finds the buffer empty: the conversion has taken it.)
        FLAT.with_borrow_mut(Vec::clear);
        let look = |text: &str| {
            FLAT.with_borrow_mut(|flat| {
                let start = flat.len();
                let (stamp, kept) = match self.look_kept(text, flat) {
                    Ok(found) => found,
                    Err(e) => {
                        flat.truncate(start);
                        return Err(e);
                    }
                };
                if let Some(kept) = kept {
                    return Ok(Span::Kept(kept));
                }
                if flat.len() - start <= FLAT_MAX_IDS {
                    return Ok(Span::Flat(start, flat.len(), stamp));
                }
                let own = flat[start..].to_vec();
                flat.truncate(start);
                Ok(Span::Own(own, stamp))
            })
        };
        let done = self.run_many(topics, look, |slice, found| {
            let mut flat = FLAT.with_borrow_mut(std::mem::take);
            let answers: Vec<Found<'_>> = found
                .iter()
                .zip(slice)
                .map(|(f, topic)| {
                    let (ids, stamp, kept) = match f {
                        Span::Flat(a, b, stamp) => (&flat[*a..*b], *stamp, None),
                        Span::Own(ids, stamp) => (&ids[..], *stamp, None),
                        Span::Kept(kept) => (&[][..], None, Some(kept)),
                    };
                    Found {
                        topic,
                        ids,
                        stamp,
                        kept,
                    }
                })
                .collect();
            let converted = sink(&answers);
            drop(answers);
            flat.clear();
            // The next slice reuses it: the buffer grows once a batch.
            FLAT.with_borrow_mut(|f| {
                if f.capacity() < flat.capacity() {
                    *f = flat;
                }
            });
            converted
        });
        FLAT.with_borrow_mut(shed_large);
        done
    }

    pub(crate) fn lookup_many<'py>(
        &self,
        topics: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let py = topics.py();
        let mut lists = Vec::new();
        let mut large = false;
        self.run_answers(topics, |answers| {
            large |= answers.iter().map(Found::len).sum::<usize>() >= PAUSE_FROM;
            let _paused = large.then(|| CollectorPaused::new(py));
            lists.extend(self.registry.answers(py, answers.iter().copied())?);
            Ok(())
        })?;
        let _paused = large.then(|| CollectorPaused::new(py));
        PyList::new(py, lists)
    }

    /// Every topic's answer in one list: the subscribers of `topics[i]` are
    /// `flat[ends[i]:ends[i + 1]]`, with `ends` starting at 0. The same lookups as
    /// `lookup_many`, with no list per topic: a batch makes two lists, so the cyclic collector
    /// has nothing to walk, and a large repeated answer goes in as one copy of its kept tuple.
    pub(crate) fn lookup_flat<'py>(
        &self,
        topics: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let py = topics.py();
        let flat = PyList::empty(py);
        let mut ends = vec![0];
        self.run_answers(topics, |answers| {
            self.registry
                .extend_flat(&flat, &mut ends, answers.iter().copied())
        })?;
        let ends = PyList::new(py, ends)?;
        PyTuple::new(py, [flat.into_any(), ends.into_any()])
    }

    /// `lookup_many` for an Arrow array: the core routes the whole array with the GIL
    /// released, mapping ids to int subscribers through the registry's table of them, and
    /// answers with two Arrow arrays (see `crate::arrow`). A subscriber that is not an int
    /// cannot go in an int64 column: that is a `TypeError`, raised after the batch. With
    /// `names`, each int is a row of it and the answer is those rows' text (`list<string>`),
    /// made in the same pass; an int that is not a row of `names`, or is a null one, is a
    /// `ValueError`, raised at once (before a `TypeError` for a later non-int). `names` is
    /// validated on each call, a scan of its bytes: small beside a batch's lookups.
    pub(crate) fn lookup_arrow<'py>(
        &self,
        topics: &Bound<'py, PyAny>,
        names: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let py = topics.py();
        let array = super::arrow::import(topics)?;
        let names = names.map(super::arrow::import).transpose()?;
        let (core, registry) = (&self.core, &self.registry);
        // Pinned through the batch: an id it reads cannot be handed to another subscriber
        // before its value is read (the registry's rule 1).
        let guard = crossbeam_epoch::pin();
        let (routed, not_int) = gil::detach(py, || {
            let mut not_int = None;
            let values = |ids: &[SubscriberId], values: &mut Vec<i64>| {
                if let Some(id) = registry.int_values(ids, values) {
                    not_int.get_or_insert(id);
                }
            };
            let routed = match &names {
                None => crate::arrow::lookup_arrow_with(core.as_ref(), array.as_ref(), values),
                Some(names) => crate::arrow::lookup_arrow_named(
                    core.as_ref(),
                    array.as_ref(),
                    names.as_ref(),
                    values,
                ),
            };
            (routed, not_int)
        });
        let routed = routed.map_err(|e| match e {
            arrow_schema::ArrowError::OffsetOverflowError(n) => PyOverflowError::new_err(format!(
                "the answer holds {n} or more subscribers (or bytes of names), past an Arrow \
                 list's 2**31 - 1: look the topics up in smaller arrays"
            )),
            other => super::arrow::argument_error(other),
        })?;
        if let Some(id) = not_int {
            let what = match registry.object(py, id) {
                Some(obj) => obj.repr()?.to_string(),
                None => "a subscriber".to_owned(),
            };
            return Err(PyTypeError::new_err(format!(
                "lookup_arrow answers with int64 subscribers; {what} is not an int that fits in \
                 64 bits: subscribe ints (such as indexes into a table of names) to use it"
            )));
        }
        drop(guard);
        let subscribers = super::arrow::export(py, routed.subscribers)?;
        let reasons = super::arrow::export(py, routed.reasons)?;
        PyTuple::new(py, [subscribers, reasons])
    }

    /// How many subscribers `topic` reaches: a lookup that makes no Python object.
    pub(crate) fn count(&self, topic: &Bound<'_, PyAny>) -> PyResult<usize> {
        let text = utf8(topic, Kind::Topic)?;
        Ok(self.ids_of(topic.py(), text)?.len())
    }

    /// How many subscribers each topic reaches, computed as `lookup_many` computes its lists.
    pub(crate) fn count_many<'py>(
        &self,
        topics: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut counts = Vec::new();
        let look = |text: &str| {
            // One buffer for the batch's lookups, on whichever thread runs them: a fresh
            // vector per topic grew by doubling, seven reallocations for an answer of 190.
            SCRATCH.with_borrow_mut(|ids| {
                ids.clear();
                let found = self.core.lookup_str_into(text, ids).map(|()| ids.len());
                shed_large(ids);
                found
            })
        };
        self.run_many(topics, look, |_, n| {
            counts.extend(n);
            Ok(())
        })?;
        PyList::new(topics.py(), counts)
    }

    pub(crate) fn len(&self) -> usize {
        self.core.len()
    }

    pub(crate) fn subscriptions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let guard = crossbeam_epoch::pin();
        let core = &self.core;
        let pairs = gil::detach(py, || core.subscriptions());
        let list = self.pairs(py, &pairs);
        drop(guard);
        list
    }

    /// `(plain subscribers, [(group, filter, members)])` of `topic`, with the GIL held or
    /// not as for one lookup.
    pub(crate) fn lookup_groups<'py>(
        &self,
        topic: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let py = topic.py();
        let text = utf8(topic, Kind::Topic)?;
        let core = &self.core;
        let guard = crossbeam_epoch::pin();
        let (plain, matched): (Vec<SubscriberId>, Vec<GroupMatch>) =
            gil::run_estimated(py, self.lookup_estimate(), || core.lookup_groups_str(text))
                .map_err(to_py)?;
        let plain = self.registry.list(py, &plain)?;
        let matched = matched
            .iter()
            .map(|g| {
                let members = self.registry.list(py, &g.members)?;
                PyTuple::new(
                    py,
                    [
                        g.name.into_pyobject(py)?.into_any(),
                        g.filter.into_pyobject(py)?.into_any(),
                        members.into_any(),
                    ],
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        let answer = PyTuple::new(py, [plain.into_any(), PyList::new(py, matched)?.into_any()]);
        drop(guard);
        answer
    }

    /// Every membership as Python objects `[group, filter, subscriber]`, read under an epoch
    /// guard (so no id is released and reused meanwhile).
    fn memberships<'py>(&self, py: Python<'py>) -> PyResult<Vec<[Bound<'py, PyAny>; 3]>> {
        let guard = crossbeam_epoch::pin();
        let objects = self
            .core
            .group_subscriptions()
            .into_iter()
            .filter_map(|(group, filter, id)| Some((group, filter, self.registry.object(py, id)?)))
            .map(|(group, filter, o)| {
                Ok([
                    group.into_pyobject(py)?.into_any(),
                    filter.into_pyobject(py)?.into_any(),
                    o,
                ])
            })
            .collect();
        drop(guard);
        objects
    }

    /// Every `(group, filter, subscriber)` membership.
    pub(crate) fn group_subscriptions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let triples = self
            .memberships(py)?
            .into_iter()
            .map(|triple| PyTuple::new(py, triple))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, triples)
    }

    /// Whether any pattern matches `topic`, with the GIL held or not as for one lookup.
    pub(crate) fn has_interest(&self, topic: &Bound<'_, PyAny>) -> PyResult<bool> {
        let text = utf8(topic, Kind::Topic)?;
        let core = &self.core;
        gil::run_estimated(topic.py(), self.lookup_estimate(), || {
            core.has_interest_str(text)
        })
        .map_err(to_py)
    }

    /// The (pattern, subscriber) pairs whose patterns share a topic with `pattern`; a scan of
    /// every pair, with the GIL released.
    pub(crate) fn reverse_match<'py>(
        &self,
        pattern: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let py = pattern.py();
        let parsed = self
            .core
            .dialect()
            .parse_pattern(utf8(pattern, Kind::Pattern)?)
            .map_err(to_py)?;
        let guard = crossbeam_epoch::pin();
        let core = &self.core;
        let pairs = gil::detach(py, || core.reverse_match(&parsed));
        let list = self.pairs(py, &pairs);
        drop(guard);
        list
    }

    /// `(pattern, subscriber)` tuples of core pairs (the caller holds an epoch guard, so that
    /// no id is released and reused meanwhile).
    fn pairs<'py>(
        &self,
        py: Python<'py>,
        pairs: &[(String, SubscriberId)],
    ) -> PyResult<Bound<'py, PyList>> {
        let tuples = pairs
            .iter()
            .filter_map(|(p, id)| Some((p, self.registry.object(py, *id)?)))
            .map(|(p, o)| PyTuple::new(py, [p.into_pyobject(py)?.into_any(), o]))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, tuples)
    }

    pub(crate) fn repr(&self, class: &str) -> String {
        format!(
            "{class}(dialect={:?}, subscriptions={}{})",
            self.core.dialect().name(),
            self.core.len(),
            if self.read_only {
                ", read_only=True"
            } else {
                ""
            }
        )
    }

    /// `(type, (dialect, pairs), PICKLE_FORMAT)`: pickles by content, so unpickling goes
    /// through the constructor and never depends on node layout; the state is the format
    /// number, checked by [`check_pickle_format`].
    pub(crate) fn reduce<'py>(
        &self,
        slf: &Bound<'py, PyAny>,
        extra: &[Bound<'py, PyAny>],
    ) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        // Plain pairs, then memberships as (pattern, subscriber, group) triples, which the
        // constructor's `subscribe_many` takes back.
        let subscriptions = self.subscriptions(py)?;
        for [group, filter, subscriber] in self.memberships(py)? {
            subscriptions.append(PyTuple::new(py, [filter, subscriber, group])?)?;
        }
        let mut args = vec![
            self.core.dialect().name().into_pyobject(py)?.into_any(),
            subscriptions.into_any(),
        ];
        args.extend(extra.iter().cloned());
        reduce_by_content(slf, PyTuple::new(py, args)?.into_any())
    }
}
