//! `SelectorIndex` in Python: subscribers are any hashable objects (through the same
//! [`Registry`] as the topic matchers), selectors are strings, lookups take one topic or a list.
//!
//! GIL: a lookup that may test every subscriber (a topic not in the cache) is long, one served
//! from the cache is a bitmap walk; since which one it will be is not known before, lookups
//! release the GIL once the index holds [`DETACH_PAIRS`] pairs or more.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use super::errors::to_py;
use super::gil;
use super::registry::Registry;
use super::text::{utf8, Kind};
use super::topic_index::{check_pickle_format, reduce_by_content};
use crate::selector::{Selector, SelectorIndex, DEFAULT_CACHE_SIZE};

// The Python signature spells the default out, so that it shows in `help()` and the stubs.
const _: () = assert!(DEFAULT_CACHE_SIZE == 100_000);

/// Pairs from which a lookup releases the GIL (a full scan of them is about 0.2 ms).
const DETACH_PAIRS: usize = 4096;

/// Skipfilter-style index of URI-template, regular-expression and exact-topic selectors.
#[pyclass(name = "SelectorIndex", module = "topicmatch._core", frozen)]
pub(crate) struct SelectorIndexPy {
    core: Arc<SelectorIndex>,
    registry: Registry,
}

#[pymethods]
impl SelectorIndexPy {
    #[new]
    #[pyo3(signature = (cache_size = 100_000, subscriptions = None))]
    fn new(
        py: Python<'_>,
        cache_size: usize,
        subscriptions: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let index = SelectorIndexPy {
            core: Arc::new(SelectorIndex::with_cache_size(cache_size)),
            registry: Registry::new(py),
        };
        if let Some(pairs) = subscriptions {
            for pair in pairs.try_iter()? {
                let (selector, subscriber): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
                    pair?.extract()?;
                index.subscribe(&selector, &subscriber)?;
            }
        }
        Ok(index)
    }

    /// Subscribes `subscriber` to `selector`: `*`, an exact topic, an RFC 6570 URI template,
    /// or `re:<regular expression>` (matched against the whole topic). True if the pair is new.
    fn subscribe(
        &self,
        selector: &Bound<'_, PyAny>,
        subscriber: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let selector = utf8(selector, Kind::Pattern)?;
        let core = &self.core;
        // The rule of single writes: beside threads that keep the GIL, releasing it for a
        // compile of microseconds cost a switch interval. A regular expression that takes
        // milliseconds to compile then holds those threads for as long, no longer than the
        // interpreter's own switch interval would.
        self.registry.adding(subscriber, |id| {
            gil::write(subscriber.py(), || core.subscribe(selector, id)).map_err(to_py)
        })
    }

    /// Removes the pair; True if it was there.
    fn unsubscribe(
        &self,
        selector: &Bound<'_, PyAny>,
        subscriber: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let selector = utf8(selector, Kind::Pattern)?;
        let removed = self.registry.removing(subscriber, |id| {
            Ok(usize::from(
                self.core.unsubscribe(selector, id).map_err(to_py)?,
            ))
        })?;
        if removed == 0 {
            // The core is never asked when the subscriber is unknown: an invalid selector must
            // still raise, as it does for a known subscriber.
            gil::write(subscriber.py(), || Selector::parse(selector)).map_err(to_py)?;
        }
        Ok(removed == 1)
    }

    /// Removes every selector of `subscriber`; returns how many.
    fn remove_subscriber(&self, subscriber: &Bound<'_, PyAny>) -> PyResult<usize> {
        self.registry
            .removing(subscriber, |id| Ok(self.core.remove_subscriber(id)))
    }

    /// The subscribers that any selector admits for any of the update's topics (one topic as a
    /// string, or a list of them), each once.
    fn lookup<'py>(&self, topics: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let py = topics.py();
        // One topic is a str or bytes (as the stub says); bytes must not be iterated as ints.
        let one = topics.is_instance_of::<PyString>() || topics.is_instance_of::<PyBytes>();
        let items: Vec<Bound<'py, PyAny>> = if one {
            vec![topics.clone()]
        } else {
            topics.try_iter()?.collect::<PyResult<_>>()?
        };
        let texts = items
            .iter()
            .map(|t| utf8(t, Kind::Topic))
            .collect::<PyResult<Vec<&str>>>()?;
        let core = &self.core;
        let guard = crossbeam_epoch::pin();
        let ids = if core.len() >= DETACH_PAIRS {
            gil::detach(py, || core.lookup(&texts))
        } else {
            core.lookup(&texts)
        };
        let list = self.registry.list(py, &ids);
        drop(guard);
        list
    }

    /// Every (selector, subscriber) pair.
    fn subscriptions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let guard = crossbeam_epoch::pin();
        let tuples = self
            .core
            .subscriptions()
            .iter()
            .filter_map(|(s, id)| Some((s, self.registry.object(py, *id)?)))
            .map(|(s, o)| PyTuple::new(py, [s.into_pyobject(py)?.into_any(), o]))
            .collect::<PyResult<Vec<_>>>()?;
        drop(guard);
        PyList::new(py, tuples)
    }

    /// Hits, misses, evictions, subscriber tests run, cached topics and capacity.
    fn cache_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.core.cache_stats();
        let d = PyDict::new(py);
        d.set_item("hits", s.hits)?;
        d.set_item("misses", s.misses)?;
        d.set_item("evictions", s.evictions)?;
        d.set_item("tests", s.tests)?;
        d.set_item("topics", s.topics)?;
        d.set_item("capacity", s.capacity)?;
        Ok(d)
    }

    fn __len__(&self) -> usize {
        self.core.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "SelectorIndex(cache_size={}, subscriptions={})",
            self.core.cache_stats().capacity,
            self.core.len()
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let me = slf.get();
        let args = (me.core.cache_stats().capacity, me.subscriptions(py)?);
        reduce_by_content(slf.as_any(), args.into_pyobject(py)?.into_any())
    }

    fn __setstate__(&self, state: &Bound<'_, PyAny>) -> PyResult<()> {
        check_pickle_format(state)
    }
}
