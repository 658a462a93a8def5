//! `HeadersMatcher` in Python: criteria and headers are dicts of strings (a criterion's value
//! may be `None`: "present with any value"), subscribers any hashable objects.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use super::gil;
use super::registry::Registry;
use super::topic_index::{check_pickle_format, reduce_by_content};
use crate::bitmap::{Criterion, HeadersMatcher, MatchMode};

/// Content-based routing on headers (OpenAMQ, the AMQP headers exchange).
#[pyclass(name = "HeadersMatcher", module = "topicmatch._core", frozen)]
pub(crate) struct HeadersMatcherPy {
    core: Arc<HeadersMatcher>,
    registry: Registry,
}

fn text(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    obj.cast::<PyString>()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{what} must be a str, not {}",
                obj.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?
        .to_str()
        .map(str::to_owned)
        .map_err(|_| PyValueError::new_err(format!("{what} is not valid UTF-8")))
}

fn criteria(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Criterion>> {
    let dict = obj.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err("criteria must be a dict of header name to str or None")
    })?;
    dict.iter()
        .map(|(k, v)| {
            let value = if v.is_none() {
                None
            } else {
                Some(text(&v, "a criterion value")?)
            };
            Ok((text(&k, "a header name")?, value))
        })
        .collect()
}

fn headers(obj: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
    let dict = obj
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("headers must be a dict of str to str"))?;
    dict.iter()
        .map(|(k, v)| Ok((text(&k, "a header name")?, text(&v, "a header value")?)))
        .collect()
}

fn mode(name: &str) -> PyResult<MatchMode> {
    name.parse()
        .map_err(|e: crate::Error| PyValueError::new_err(e.to_string()))
}

#[pymethods]
impl HeadersMatcherPy {
    #[new]
    #[pyo3(signature = (subscriptions = None))]
    fn new(py: Python<'_>, subscriptions: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let m = HeadersMatcherPy {
            core: Arc::new(HeadersMatcher::new()),
            registry: Registry::new(py),
        };
        if let Some(subs) = subscriptions {
            for item in subs.try_iter()? {
                let (c, s, how): (Bound<'_, PyAny>, Bound<'_, PyAny>, String) = item?.extract()?;
                m.subscribe(&c, &s, &how)?;
            }
        }
        Ok(m)
    }

    /// Subscribes `subscriber` to messages whose headers meet `criteria` (name to value, or
    /// to None for "present"), combined by `match`: "all", "any", "all-with-x" or
    /// "any-with-x" (criteria named `x-…` count only in the `-with-x` modes). True if new.
    #[pyo3(signature = (criteria, subscriber, r#match = "all"))]
    fn subscribe(
        &self,
        criteria: &Bound<'_, PyAny>,
        subscriber: &Bound<'_, PyAny>,
        r#match: &str,
    ) -> PyResult<bool> {
        let (c, how) = (self::criteria(criteria)?, mode(r#match)?);
        self.registry
            .adding(subscriber, |id| Ok(self.core.subscribe(&c, id, how)))
    }

    /// Removes the subscription; True if it was there.
    #[pyo3(signature = (criteria, subscriber, r#match = "all"))]
    fn unsubscribe(
        &self,
        criteria: &Bound<'_, PyAny>,
        subscriber: &Bound<'_, PyAny>,
        r#match: &str,
    ) -> PyResult<bool> {
        let (c, how) = (self::criteria(criteria)?, mode(r#match)?);
        let removed = self.registry.removing(subscriber, |id| {
            Ok(usize::from(self.core.unsubscribe(&c, id, how)))
        })?;
        Ok(removed == 1)
    }

    /// Removes every subscription of `subscriber`; returns how many.
    fn remove_subscriber(&self, subscriber: &Bound<'_, PyAny>) -> PyResult<usize> {
        self.registry
            .removing(subscriber, |id| Ok(self.core.remove_subscriber(id)))
    }

    /// The subscribers with a subscription that the headers satisfy, each once.
    fn lookup<'py>(&self, headers: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let py = headers.py();
        let owned = self::headers(headers)?;
        let pairs: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (&**k, &**v)).collect();
        let guard = crossbeam_epoch::pin();
        let core = &self.core;
        let ids = gil::detach(py, || core.lookup(&pairs));
        let list = self.registry.list(py, &ids);
        drop(guard);
        list
    }

    /// `{subscriber: matched criteria}` for every subscriber with at least one hit: the most
    /// criteria one of its subscriptions has met, whether or not that subscription matched.
    fn hits<'py>(&self, headers: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let py = headers.py();
        let owned = self::headers(headers)?;
        let pairs: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (&**k, &**v)).collect();
        let guard = crossbeam_epoch::pin();
        let core = &self.core;
        let hits = gil::detach(py, || core.hits(&pairs));
        let out = PyDict::new(py);
        for (id, n) in hits {
            if let Some(o) = self.registry.object(py, id) {
                out.set_item(o, n)?;
            }
        }
        drop(guard);
        Ok(out)
    }

    /// Every subscription as (criteria, subscriber, match).
    fn subscriptions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let guard = crossbeam_epoch::pin();
        let mut out = Vec::new();
        for s in self.core.subscriptions() {
            let Some(who) = self.registry.object(py, s.subscriber) else {
                continue;
            };
            let c = PyDict::new(py);
            for (k, v) in &s.criteria {
                c.set_item(k, v)?;
            }
            out.push(PyTuple::new(
                py,
                [
                    c.into_any(),
                    who,
                    s.mode.name().into_pyobject(py)?.into_any(),
                ],
            )?);
        }
        drop(guard);
        PyList::new(py, out)
    }

    fn __len__(&self) -> usize {
        self.core.len()
    }

    fn __repr__(&self) -> String {
        format!("HeadersMatcher(subscriptions={})", self.core.len())
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let args = PyTuple::new(py, [slf.get().subscriptions(py)?])?;
        reduce_by_content(slf.as_any(), args.into_any())
    }

    fn __setstate__(&self, state: &Bound<'_, PyAny>) -> PyResult<()> {
        check_pickle_format(state)
    }
}
