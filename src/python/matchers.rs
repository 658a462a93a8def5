//! The Python topic matcher classes. Each is a frozen wrapper over a [`TopicIndex`]; the
//! methods are the same on every class, so one macro writes them.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::topic_index::{check_pickle_format, parse_dialect, TopicIndex};
use crate::{CSTrie, InvertedBitmap, LevelBitmap, Matcher, NaiveMatcher, Trie};

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

            /// Subscribes `subscriber` to `pattern`; True if the pair is new.
            fn subscribe(
                &self,
                pattern: &Bound<'_, PyAny>,
                subscriber: &Bound<'_, PyAny>,
            ) -> PyResult<bool> {
                self.inner.subscribe(pattern, subscriber)
            }

            /// Subscribes every (pattern, subscriber) pair; returns how many were new.
            fn subscribe_many(&self, subscriptions: &Bound<'_, PyAny>) -> PyResult<usize> {
                self.inner.subscribe_many(subscriptions)
            }

            /// Removes the pair; True if it was there.
            fn unsubscribe(
                &self,
                pattern: &Bound<'_, PyAny>,
                subscriber: &Bound<'_, PyAny>,
            ) -> PyResult<bool> {
                self.inner.unsubscribe(pattern, subscriber)
            }

            /// Removes every pattern of `subscriber`; returns how many.
            fn remove_subscriber(&self, subscriber: &Bound<'_, PyAny>) -> PyResult<usize> {
                self.inner.remove_subscriber(subscriber)
            }

            /// The subscribers whose patterns match `topic`, each once.
            fn lookup<'py>(&self, topic: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
                self.inner.lookup(topic)
            }

            /// One list of subscribers per topic, computed with the GIL released.
            fn lookup_many<'py>(&self, topics: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
                self.inner.lookup_many(topics)
            }

            /// Every (pattern, subscriber) pair.
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
    Trie,
    scan = false,
    doc = "A word trie behind one reader-writer lock (RabbitMQ, ZeroMQ, NATS sublist)."
);

topic_matcher_class!(
    CSTriePy,
    "CSTrie",
    CSTrie,
    scan = false,
    doc = "The lock-free concurrent subscription trie (Ctrie-derived), with O(1) snapshots.",
    extra {
        /// A read-only CSTrie frozen at this instant, in O(1); its writes raise TypeError.
        fn snapshot(&self, py: Python<'_>) -> Self {
            CSTriePy {
                inner: self.inner.share_read_only(py, self.inner.core.snapshot()),
            }
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
            let size = inner.core.cache_size().into_pyobject(slf.py())?.into_any();
            inner.reduce(slf.as_any(), &[size])
        }

        /// Most topics the lookup cache holds (0: no cache).
        #[getter]
        fn cache_size(&self) -> usize {
            self.inner.core.cache_size()
        }
    }
);
