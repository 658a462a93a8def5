//! The Python topic matcher classes. Each is a frozen wrapper over a [`TopicIndex`]; the
//! methods are the same on every class, so one macro writes them.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyTuple};

use super::topic_index::{check_pickle_format, parse_dialect, TopicIndex};
use crate::cache::{CacheStats, DEFAULT_CACHE_SIZE, MAX_CACHE_SIZE};
use crate::dfa::{DfaStats, DEFAULT_CACHE_BYTES};
use crate::{CSTrie, Cached, InvertedBitmap, LazyDfa, LevelBitmap, Matcher, NaiveMatcher, Trie};

// The Python signatures spell the defaults out, so that they show in `help()` and the stubs.
const _: () = assert!(DEFAULT_CACHE_SIZE == 16_384);
const _: () = assert!(DEFAULT_CACHE_BYTES == 67_108_864);

/// A `cache_size` argument: an int from 0 to `MAX_CACHE_SIZE`; a bool or any other type is a
/// `TypeError`, an int out of range a `ValueError` (never pyo3's `OverflowError`).
pub(crate) struct CacheSize(usize);

impl<'a, 'py> FromPyObject<'a, 'py> for CacheSize {
    type Error = PyErr;

    fn extract(value: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
            return Err(PyTypeError::new_err(format!(
                "cache_size must be an int, not {}",
                value.get_type().name()?
            )));
        }
        match value.extract::<i64>() {
            Ok(n) if (0..=MAX_CACHE_SIZE as i64).contains(&n) => Ok(CacheSize(n as usize)),
            _ => Err(PyValueError::new_err(format!(
                "cache_size must be from 0 (no cache) to {MAX_CACHE_SIZE}, not {}",
                value.str()?
            ))),
        }
    }
}

/// A `cache_bytes` argument: a non-negative int that fits in a `usize`, with the errors of
/// [`CacheSize`]: a bool or any other type is a `TypeError`, an int out of range a
/// `ValueError`.
pub(crate) struct CacheBytes(usize);

impl<'a, 'py> FromPyObject<'a, 'py> for CacheBytes {
    type Error = PyErr;

    fn extract(value: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
            return Err(PyTypeError::new_err(format!(
                "cache_bytes must be an int, not {}",
                value.get_type().name()?
            )));
        }
        match value.extract::<usize>() {
            Ok(n) => Ok(CacheBytes(n)),
            Err(_) => Err(PyValueError::new_err(format!(
                "cache_bytes must be from 0 to {} bytes, not {}",
                usize::MAX,
                value.str()?
            ))),
        }
    }
}

/// `LazyDFA.stats()` as a dict, keyed by the names of [`DfaStats`]' fields.
fn dfa_stats_dict<'py>(py: Python<'py>, s: &DfaStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("states", s.states)?;
    d.set_item("transitions", s.transitions)?;
    d.set_item("bytes", s.bytes)?;
    d.set_item("budget", s.budget)?;
    d.set_item("flushes", s.flushes)?;
    d.set_item("fallbacks", s.fallbacks)?;
    d.set_item("invalidations", s.invalidations)?;
    d.set_item("compactions", s.compactions)?;
    d.set_item("nodes", s.nodes)?;
    Ok(d)
}

/// `cache_stats()` as a dict, with the names of `SelectorIndex.cache_stats()` where they match.
fn cache_stats_dict<'py>(py: Python<'py>, s: &CacheStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("hits", s.hits)?;
    d.set_item("misses", s.misses)?;
    d.set_item("bypassed", s.bypassed)?;
    d.set_item("evictions", s.evictions)?;
    d.set_item("topics", s.topics)?;
    d.set_item("bytes", s.bytes)?;
    d.set_item("capacity", s.capacity)?;
    d.set_item("max_bytes", s.max_bytes)?;
    d.set_item("admitting", u8::from(s.admitting))?;
    Ok(d)
}

/// Declares a `#[pyclass]` named `$name` over the core type `$core`, with the API of
/// DESIGN.md. `$scan` says whether a single lookup's cost grows with the matcher's size.
macro_rules! topic_matcher_class {
    // Classes built from a dialect alone.
    ($py_type:ident, $name:literal, $core:ty, scan = $scan:expr, doc = $doc:literal
     $(, extra { $($extra:tt)* })?) => {
        topic_matcher_class!(@class $py_type, $name, $core, doc = $doc, ctor {
            #[new]
            #[pyo3(signature = (dialect = "amqp", subscriptions = None))]
            fn new(
                py: Python<'_>,
                dialect: &str,
                subscriptions: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Self> {
                let inner = TopicIndex::new(py, <$core>::new(parse_dialect(dialect)?), $scan);
                if let Some(pairs) = subscriptions {
                    inner.subscribe_many(pairs)?;
                }
                Ok($py_type { inner })
            }

            fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
                slf.get().inner.reduce(slf.as_any(), &[])
            }
        } $(, extra { $($extra)* })?);
    };
    // Classes with a result cache in front (`Cached<$core>`): a `cache_size` keyword that
    // pickles, and `cache_stats()`.
    ($py_type:ident, $name:literal, cached $core:ty, doc = $doc:literal
     $(, extra { $($extra:tt)* })?) => {
        topic_matcher_class!(@class $py_type, $name, Cached<$core>, doc = $doc, ctor {
            #[new]
            #[pyo3(
                signature = (dialect = "amqp", subscriptions = None, cache_size = CacheSize(16_384)),
                text_signature = "(dialect='amqp', subscriptions=None, cache_size=16384)"
            )]
            fn new(
                py: Python<'_>,
                dialect: &str,
                subscriptions: Option<&Bound<'_, PyAny>>,
                cache_size: CacheSize,
            ) -> PyResult<Self> {
                let core = Cached::new(<$core>::new(parse_dialect(dialect)?), cache_size.0);
                let inner = TopicIndex::new(py, core, false);
                if let Some(pairs) = subscriptions {
                    inner.subscribe_many(pairs)?;
                }
                Ok($py_type { inner })
            }

            fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
                let inner = &slf.get().inner;
                let size = inner.core.matcher().cache_size().into_pyobject(slf.py())?.into_any();
                inner.reduce(slf.as_any(), &[size])
            }

            /// Most lookup results the cache holds (0: no cache).
            #[getter]
            fn cache_size(&self) -> usize {
                self.inner.core.matcher().cache_size()
            }

            /// The result cache's counters: hits, misses (bypassed ones included), bypassed
            /// (lookups that skipped the cache while admission had it off), evictions, topics
            /// (entries held), bytes, capacity, max_bytes and admitting (1 while on).
            fn cache_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                cache_stats_dict(py, &self.inner.core.matcher().cache_stats())
            }
        } $(, extra { $($extra)* })?);
    };
    (@class $py_type:ident, $name:literal, $core:ty, doc = $doc:literal,
     ctor { $($ctor:tt)* } $(, extra { $($extra:tt)* })?) => {
        #[doc = $doc]
        #[pyclass(name = $name, module = "topicmatch._core", frozen)]
        pub(crate) struct $py_type {
            inner: TopicIndex<$core>,
        }

        #[pymethods]
        impl $py_type {
            $($ctor)*

            /// The dialect's name: "amqp", "mqtt" or "nats".
            #[getter]
            fn dialect(&self) -> &'static str {
                self.inner.core.dialect().name()
            }

            /// Subscribes `subscriber` to `pattern`; True if the subscription is new. With
            /// `group`, or with an MQTT `$share/{group}/{filter}` pattern, `subscriber` joins
            /// the group on that filter: a message goes to one member of each group.
            #[pyo3(signature = (pattern, subscriber, group = None))]
            fn subscribe(
                &self,
                pattern: &Bound<'_, PyAny>,
                subscriber: &Bound<'_, PyAny>,
                group: Option<&str>,
            ) -> PyResult<bool> {
                self.inner.subscribe(pattern, subscriber, group)
            }

            /// Subscribes every (pattern, subscriber) pair and (pattern, subscriber, group)
            /// triple; returns how many were new.
            fn subscribe_many(&self, subscriptions: &Bound<'_, PyAny>) -> PyResult<usize> {
                self.inner.subscribe_many(subscriptions)
            }

            /// Removes the subscription (a group's membership with `group` or `$share/`);
            /// True if it was there.
            #[pyo3(signature = (pattern, subscriber, group = None))]
            fn unsubscribe(
                &self,
                pattern: &Bound<'_, PyAny>,
                subscriber: &Bound<'_, PyAny>,
                group: Option<&str>,
            ) -> PyResult<bool> {
                self.inner.unsubscribe(pattern, subscriber, group)
            }

            /// Removes every pattern of `subscriber`; returns how many.
            fn remove_subscriber(&self, subscriber: &Bound<'_, PyAny>) -> PyResult<usize> {
                self.inner.remove_subscriber(subscriber)
            }

            /// The subscribers whose patterns match `topic`, each once.
            fn lookup<'py>(&self, topic: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
                self.inner.lookup(topic)
            }

            /// The plain subscribers of `topic` and, for each group it matches, all members:
            /// `(subscribers, [(group, filter, members), ...])`.
            fn lookup_groups<'py>(&self, topic: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
                self.inner.lookup_groups(topic)
            }

            /// Every (group, filter, subscriber) membership of a shared subscription.
            fn group_subscriptions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
                self.inner.group_subscriptions(py)
            }

            /// One list of subscribers per topic, computed with the GIL released.
            fn lookup_many<'py>(&self, topics: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
                self.inner.lookup_many(topics)
            }

            /// Every topic's answer in one list, and where each ends (see the stubs).
            fn lookup_flat<'py>(&self, topics: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
                self.inner.lookup_flat(topics)
            }

            /// `(subscribers, reasons)` for an Arrow array of topics, as two pyarrow arrays:
            /// `list<int64>` of int subscribers (null for a rejected topic), or with `names`
            /// `list<string>` of `names[subscriber]`, and `string` reasons (null for a routed
            /// one). The GIL is released for the whole batch.
            #[pyo3(signature = (topics, names = None))]
            fn lookup_arrow<'py>(
                &self,
                topics: &Bound<'py, PyAny>,
                names: Option<&Bound<'py, PyAny>>,
            ) -> PyResult<Bound<'py, PyTuple>> {
                self.inner.lookup_arrow(topics, names)
            }

            /// Subscribes the pairs of two Arrow arrays of one length, patterns (strings) and
            /// subscribers (ints), all checked before any is added; returns how many were new.
            fn subscribe_arrow(
                &self,
                patterns: &Bound<'_, PyAny>,
                subscribers: &Bound<'_, PyAny>,
            ) -> PyResult<usize> {
                self.inner.subscribe_arrow(patterns, subscribers)
            }

            /// How many subscribers `topic` reaches, without making their list.
            fn count(&self, topic: &Bound<'_, PyAny>) -> PyResult<usize> {
                self.inner.count(topic)
            }

            /// How many subscribers each topic reaches, computed with the GIL released.
            fn count_many<'py>(&self, topics: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
                self.inner.count_many(topics)
            }

            /// Whether any pattern matches `topic` (NATS: HasInterest).
            fn has_interest(&self, topic: &Bound<'_, PyAny>) -> PyResult<bool> {
                self.inner.has_interest(topic)
            }

            /// The (pattern, subscriber) pairs whose patterns share at least one topic with
            /// `pattern` (NATS: ReverseMatch).
            fn reverse_match<'py>(&self, pattern: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
                self.inner.reverse_match(pattern)
            }

            /// Every plain (pattern, subscriber) pair; memberships are group_subscriptions().
            fn subscriptions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
                self.inner.subscriptions(py)
            }

            fn __len__(&self) -> usize {
                self.inner.len()
            }

            fn __repr__(&self) -> String {
                self.inner.repr($name)
            }

            fn __setstate__(&self, state: &Bound<'_, PyAny>) -> PyResult<()> {
                check_pickle_format(state)
            }

            $($($extra)*)?
        }
    };
}

topic_matcher_class!(
    NaiveMatcherPy,
    "NaiveMatcher",
    NaiveMatcher,
    scan = true,
    doc = "Tests every pattern on every lookup: the oracle and the baseline."
);

topic_matcher_class!(
    TriePy,
    "Trie",
    cached Trie,
    doc = "A word trie behind one reader-writer lock (RabbitMQ, ZeroMQ, NATS sublist)."
);

topic_matcher_class!(
    CSTriePy,
    "CSTrie",
    cached CSTrie,
    doc = "The lock-free concurrent subscription trie (Ctrie-derived), with O(1) snapshots.",
    extra {
        /// A read-only CSTrie frozen at this instant, in O(1); its writes raise TypeError. It
        /// has a result cache of its own, of the same size, empty until its first lookup.
        fn snapshot(&self, py: Python<'_>) -> PyResult<Self> {
            let core = &self.inner.core;
            Ok(CSTriePy {
                inner: self.inner.share_read_only(py, || core.snapshot_with(Cached::snapshot))?,
            })
        }

        /// Whether this is a read-only snapshot.
        #[getter]
        fn read_only(&self) -> bool {
            self.inner.read_only
        }
    }
);

topic_matcher_class!(
    LevelBitmapPy,
    "LevelBitmap",
    LevelBitmap,
    scan = false,
    doc = "The optimized inverted bitmap (WSO2): one row per word position, ANDed per level."
);

topic_matcher_class!(
    @class InvertedBitmapPy,
    "InvertedBitmap",
    InvertedBitmap,
    doc = "One roaring bitmap of matching patterns per topic seen, kept current (OpenAMQ).",
    ctor {
        #[new]
        #[pyo3(signature = (dialect = "amqp", subscriptions = None, cache_size = 100_000))]
        fn new(
            py: Python<'_>,
            dialect: &str,
            subscriptions: Option<&Bound<'_, PyAny>>,
            cache_size: usize,
        ) -> PyResult<Self> {
            let core = InvertedBitmap::with_cache_size(parse_dialect(dialect)?, cache_size);
            let inner = TopicIndex::new(py, core, false);
            if let Some(pairs) = subscriptions {
                inner.subscribe_many(pairs)?;
            }
            Ok(InvertedBitmapPy { inner })
        }

        fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
            let inner = &slf.get().inner;
            let size = inner.core.matcher().cache_size().into_pyobject(slf.py())?.into_any();
            inner.reduce(slf.as_any(), &[size])
        }

        /// Most topics the lookup cache holds (0: no cache).
        #[getter]
        fn cache_size(&self) -> usize {
            self.inner.core.matcher().cache_size()
        }
    }
);

topic_matcher_class!(
    @class LazyDfaPy,
    "LazyDFA",
    LazyDfa,
    doc = "The lazy DFA of RabbitMQ's topic-exchange study: DFA states built while matching, \
           within a memory budget.",
    ctor {
        #[new]
        #[pyo3(
            signature = (dialect = "amqp", subscriptions = None, cache_bytes = CacheBytes(67_108_864)),
            text_signature = "(dialect='amqp', subscriptions=None, cache_bytes=67108864)"
        )]
        fn new(
            py: Python<'_>,
            dialect: &str,
            subscriptions: Option<&Bound<'_, PyAny>>,
            cache_bytes: CacheBytes,
        ) -> PyResult<Self> {
            let core = LazyDfa::with_budget(parse_dialect(dialect)?, cache_bytes.0);
            let inner = TopicIndex::new(py, core, false);
            if let Some(pairs) = subscriptions {
                inner.subscribe_many(pairs)?;
            }
            Ok(LazyDfaPy { inner })
        }

        /// Pickles the patterns and the budget; the cache is built again on the other side.
        fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
            let inner = &slf.get().inner;
            let budget = inner.core.matcher().cache_bytes().into_pyobject(slf.py())?.into_any();
            inner.reduce(slf.as_any(), &[budget])
        }

        /// The state cache's memory budget in bytes.
        #[getter]
        fn cache_bytes(&self) -> usize {
            self.inner.core.matcher().cache_bytes()
        }

        /// The state cache's figures: states, transitions, bytes (taken since the last flush,
        /// counted against budget), budget, flushes (times a full cache was emptied),
        /// fallbacks (lookups answered from the NFA because the budget could not hold them),
        /// invalidations (states a write reset), compactions (NFA rebuilds) and nodes (of the
        /// NFA).
        fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
            dfa_stats_dict(py, &self.inner.core.matcher().stats())
        }

        /// Empties the state cache: states are built again by the lookups that need them.
        fn clear_cache(&self) {
            self.inner.core.matcher().clear_cache()
        }
    }
);
