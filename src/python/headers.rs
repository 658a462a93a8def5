//! `HeadersMatcher` in Python: criteria and headers are dicts from header names to typed
//! values (`str`, `int`, `float`, `bool`, `bytes`, `None`, `dict`, `list`; a criterion's
//! top-level `None` is "present with any value"), subscribers any hashable objects.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple,
};

use super::gil;
use super::registry::Registry;
use super::topic_index::{check_pickle_format, reduce_by_content};
use crate::bitmap::{Criterion, HeaderValue, HeadersMatcher, MatchMode};

/// What a lookup costs per pair held, for the GIL rule's estimate (`gil::run_estimated`):
/// 243 µs at 100,000 pairs, 32 µs at 10,000, answers converted included (2026-11-27). A
/// lookup on a small matcher keeps the GIL: releasing it for a few microseconds beside a busy
/// Python thread cost a switch interval (5 ms) every time.
const LOOKUP_PAIR: Duration = Duration::from_nanos(3);
/// The same for `hits`, which counts every subscriber hit: 3.2 ms at 100,000 pairs.
const HITS_PAIR: Duration = Duration::from_nanos(30);

/// Content-based routing on headers (OpenAMQ, the AMQP headers exchange).
#[pyclass(name = "HeadersMatcher", module = "topicmatch._core", frozen)]
pub(crate) struct HeadersMatcherPy {
    core: Arc<HeadersMatcher>,
    registry: Registry,
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// Whose value is converted, for errors: a role ("header", "criterion") and the name as
/// Python gave it, spelled (`header 'k'`) only when an error needs it.
struct Whose<'a, 'py> {
    role: &'static str,
    name: &'a Bound<'py, PyAny>,
}

impl fmt::Display for Whose<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.name.repr().map(|r| r.to_string()).unwrap_or_default();
        write!(f, "{} {name}", self.role)
    }
}

/// A `str` as a `String`; `what` names it in errors, spelled only when one is raised.
fn text(obj: &Bound<'_, PyAny>, what: impl Fn() -> String) -> PyResult<String> {
    obj.cast::<PyString>()
        .map_err(|_| {
            PyTypeError::new_err(format!("{} must be a str, not {}", what(), type_name(obj)))
        })?
        .to_str()
        .map(str::to_owned)
        .map_err(|_| PyValueError::new_err(format!("{} is not valid UTF-8", what())))
}

/// Converts a Python value to a [`HeaderValue`]. `whose` names the header in errors
/// ("header 'k'", "criterion 'k'"); `depth` counts the tables and arrays around the value.
/// `bool` is tested before `int`, of which it is a subclass.
fn value(obj: &Bound<'_, PyAny>, whose: &Whose<'_, '_>, depth: usize) -> PyResult<HeaderValue> {
    if obj.is_none() {
        return Ok(HeaderValue::Void);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(HeaderValue::Bool(b.is_true()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        let s = s.to_str().map_err(|_| {
            PyValueError::new_err(format!("{whose}: a str value is not valid UTF-8"))
        })?;
        return Ok(HeaderValue::Str(s.to_owned()));
    }
    if obj.cast::<PyInt>().is_ok() {
        return obj.extract::<i64>().map(HeaderValue::Int).map_err(|_| {
            PyValueError::new_err(format!(
                "{whose}: int out of range: AMQP header integers are signed 64-bit \
                 (-2**63 to 2**63 - 1)"
            ))
        });
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(HeaderValue::Float(f.value()));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(HeaderValue::Bytes(b.as_bytes().to_vec()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(HeaderValue::Bytes(b.to_vec()));
    }
    let nested = obj.cast::<PyDict>().is_ok()
        || obj.cast::<PyList>().is_ok()
        || obj.cast::<PyTuple>().is_ok();
    if nested && depth >= HeaderValue::MAX_NESTING {
        return Err(PyValueError::new_err(format!(
            "{whose}: tables and arrays nest deeper than {} levels (or contain themselves)",
            HeaderValue::MAX_NESTING
        )));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut table = Vec::with_capacity(d.len());
        for (k, v) in d.iter() {
            let key = text(&k, || format!("{whose}: a nested table's key"))?;
            table.push((key, value(&v, whose, depth + 1)?));
        }
        return Ok(HeaderValue::Table(table));
    }
    // By index, not through `__iter__`: no Python code runs while a value is converted.
    if let Ok(l) = obj.cast::<PyList>() {
        let array = l.iter().map(|item| value(&item, whose, depth + 1));
        return Ok(HeaderValue::Array(array.collect::<PyResult<_>>()?));
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        let array = t.iter().map(|item| value(&item, whose, depth + 1));
        return Ok(HeaderValue::Array(array.collect::<PyResult<_>>()?));
    }
    Err(PyTypeError::new_err(format!(
        "{whose}: a value of type {} is not a header value (str, int, float, bool, bytes, \
         bytearray, None, dict, list or tuple)",
        type_name(obj)
    )))
}

/// A [`HeaderValue`] as the Python value it came from (`bytearray` comes back as `bytes`,
/// `tuple` as `list`).
fn to_python<'py>(py: Python<'py>, v: &HeaderValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        HeaderValue::Str(s) => PyString::new(py, s).into_any(),
        HeaderValue::Bytes(b) => PyBytes::new(py, b).into_any(),
        HeaderValue::Int(i) => i.into_pyobject(py)?.into_any(),
        HeaderValue::Float(f) => f.into_pyobject(py)?.into_any(),
        HeaderValue::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        HeaderValue::Void => py.None().into_bound(py),
        HeaderValue::Table(t) => {
            let d = PyDict::new(py);
            for (k, v) in t {
                d.set_item(k, to_python(py, v)?)?;
            }
            d.into_any()
        }
        HeaderValue::Array(a) => {
            let items = a
                .iter()
                .map(|v| to_python(py, v))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
    })
}

fn criteria(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Criterion<HeaderValue>>> {
    let dict = obj.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "criteria must be a dict of header name to value (None: present), not {}",
            type_name(obj)
        ))
    })?;
    dict.iter()
        .map(|(k, v)| {
            let name = text(&k, || "a header name".to_owned())?;
            let value = if v.is_none() {
                None
            } else {
                let whose = Whose {
                    role: "criterion",
                    name: &k,
                };
                Some(value(&v, &whose, 0)?)
            };
            Ok((name, value))
        })
        .collect()
}

fn headers(obj: &Bound<'_, PyAny>) -> PyResult<Vec<(String, HeaderValue)>> {
    let dict = obj.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "headers must be a dict of header name to value, not {}",
            type_name(obj)
        ))
    })?;
    dict.iter()
        .map(|(k, v)| {
            let name = text(&k, || "a header name".to_owned())?;
            let whose = Whose {
                role: "header",
                name: &k,
            };
            let value = value(&v, &whose, 0)?;
            Ok((name, value))
        })
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
    /// "any-with-x" (criteria named `x-…` count only in the `-with-x` modes). Values are
    /// str, int (signed 64-bit), float, bool, bytes, dict or list, compared as RabbitMQ
    /// compares them (docs/headers.md). True if new.
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
        let pairs = self::headers(headers)?;
        let guard = crossbeam_epoch::pin();
        let core = &self.core;
        let estimate = gil::work_of(LOOKUP_PAIR, core.len());
        let ids = gil::run_estimated(py, estimate, || core.lookup(&pairs));
        let list = self.registry.list(py, &ids);
        drop(guard);
        list
    }

    /// `{subscriber: matched criteria}` for every subscriber with at least one hit: the most
    /// criteria one of its subscriptions has met, whether or not that subscription matched.
    fn hits<'py>(&self, headers: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let py = headers.py();
        let pairs = self::headers(headers)?;
        let guard = crossbeam_epoch::pin();
        let core = &self.core;
        let estimate = gil::work_of(HITS_PAIR, core.len());
        let hits = gil::run_estimated(py, estimate, || core.hits(&pairs));
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
                match v {
                    None => c.set_item(k, py.None())?,
                    Some(v) => c.set_item(k, to_python(py, v)?)?,
                }
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
