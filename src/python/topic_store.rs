//! `TopicStore` in Python: a dict-like map from topics to any Python objects, whose `match`
//! returns the stored `(topic, value)` pairs a filter matches.
//!
//! Values are held as `Arc<Py<PyAny>>`, so the core clones them out of its lock without the
//! GIL (an `Arc` clone); writes keep the GIL (one path of the trie, shorter than a release),
//! and `match` and `items` release it for stores of [`DETACH_TOPICS`] topics or more.

use std::sync::Arc;

use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::errors::to_py;
use super::gil;
use super::text::{utf8, Kind};
use super::topic_index::{check_pickle_format, parse_dialect, reduce_by_content};
use crate::dialect::Topic;
use crate::store::TopicStore;

/// Topics from which `match` and `items` release the GIL.
const DETACH_TOPICS: usize = 4096;

type Value = Arc<Py<PyAny>>;

/// Values kept per topic, found by topic or by a filter (retained messages).
#[pyclass(name = "TopicStore", module = "topicmatch._core", frozen)]
pub(crate) struct TopicStorePy {
    core: TopicStore<Value>,
}

impl TopicStorePy {
    /// `topic` as a topic of the store's dialect: text or UTF-8 bytes, valid, or the error
    /// that says why not.
    fn topic<'a>(&self, topic: &'a Bound<'_, PyAny>) -> PyResult<Topic<'a>> {
        let text = utf8(topic, Kind::Topic)?;
        self.core.dialect().parse_topic(text).map_err(to_py)
    }

    fn pairs<'py>(
        &self,
        py: Python<'py>,
        pairs: Vec<(String, Value)>,
    ) -> PyResult<Bound<'py, PyList>> {
        let tuples = pairs
            .into_iter()
            .map(|(t, v)| PyTuple::new(py, [t.into_pyobject(py)?.into_any(), v.bind(py).clone()]))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, tuples)
    }

    /// Runs `f` with the GIL released when the store is large.
    fn long<T: Send>(&self, py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
        if self.core.len() >= DETACH_TOPICS {
            gil::detach(py, f)
        } else {
            f()
        }
    }
}

#[pymethods]
impl TopicStorePy {
    #[new]
    #[pyo3(signature = (dialect = "amqp", items = None))]
    fn new(dialect: &str, items: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let store = TopicStorePy {
            core: TopicStore::new(parse_dialect(dialect)?),
        };
        if let Some(items) = items {
            for pair in items.try_iter()? {
                let (topic, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
                store.set(&topic, value)?;
            }
        }
        Ok(store)
    }

    /// Keeps `value` for `topic`; returns the value it replaces, or None.
    fn set(
        &self,
        topic: &Bound<'_, PyAny>,
        value: Bound<'_, PyAny>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let py = value.py();
        let topic = self.topic(topic)?;
        let old = self.core.set(&topic, Arc::new(value.unbind()));
        Ok(old.map(|v| v.clone_ref(py)))
    }

    /// The value kept for `topic`, or `default`.
    #[pyo3(signature = (topic, default = None))]
    fn get(
        &self,
        topic: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let py = topic.py();
        Ok(self
            .core
            .get(&self.topic(topic)?)
            .map(|v| v.clone_ref(py))
            .or(default))
    }

    /// Removes `topic`; True if it had a value.
    fn delete(&self, topic: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.core.delete(&self.topic(topic)?).is_some())
    }

    /// The stored (topic, value) pairs whose topic `filter` matches, each once.
    #[pyo3(name = "match")]
    fn matching<'py>(&self, filter: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let py = filter.py();
        let d = self.core.dialect();
        let pattern = d
            .parse_pattern(utf8(filter, Kind::Pattern)?)
            .map_err(to_py)?;
        let core = &self.core;
        let pairs = self.long(py, || core.matching(&pattern));
        self.pairs(py, pairs)
    }

    /// Every (topic, value) pair.
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let core = &self.core;
        let pairs = self.long(py, || core.items());
        self.pairs(py, pairs)
    }

    /// The dialect of the topics and filters.
    #[getter]
    fn dialect(&self) -> &'static str {
        self.core.dialect().name()
    }

    fn __len__(&self) -> usize {
        self.core.len()
    }

    fn __contains__(&self, topic: &Bound<'_, PyAny>) -> PyResult<bool> {
        // A text that is no valid topic is simply not there, as a dict would say.
        Ok(self.topic(topic).is_ok_and(|t| self.core.get(&t).is_some()))
    }

    fn __getitem__(&self, topic: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.get(topic, None)?
            .ok_or_else(|| PyKeyError::new_err(topic.clone().unbind()))
    }

    fn __setitem__(&self, topic: &Bound<'_, PyAny>, value: Bound<'_, PyAny>) -> PyResult<()> {
        self.set(topic, value).map(drop)
    }

    fn __delitem__(&self, topic: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.delete(topic)? {
            Ok(())
        } else {
            Err(PyKeyError::new_err(topic.clone().unbind()))
        }
    }

    /// The topics, from a copy taken at the call.
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let core = &self.core;
        let topics: Vec<String> = self
            .long(py, || core.items())
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        PyList::new(py, topics)?.try_iter().map(Bound::into_any)
    }

    fn __repr__(&self) -> String {
        format!(
            "TopicStore(dialect={:?}, topics={})",
            self.core.dialect().name(),
            self.core.len()
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let me = slf.get();
        let args = (me.core.dialect().name(), me.items(py)?);
        reduce_by_content(slf.as_any(), args.into_pyobject(py)?.into_any())
    }

    fn __setstate__(&self, state: &Bound<'_, PyAny>) -> PyResult<()> {
        check_pickle_format(state)
    }
}
