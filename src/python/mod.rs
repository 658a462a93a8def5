//! PyO3 bindings: `topicmatch._core`. Methods extract arguments, run the core (with the GIL
//! released where the work can be long) and convert the result; nothing else lives here.

mod answers;
mod arrow;
mod errors;
mod gil;
mod headers;
mod ints;
mod matchers;
mod registry;
mod selector;
mod text;
mod topic_index;
mod topic_store;

use pyo3::prelude::*;

use self::text::{utf8, Kind};
use self::topic_index::parse_dialect;

/// Whether `pattern` matches `topic` in `dialect`, without building an index.
#[pyfunction]
#[pyo3(signature = (pattern, topic, dialect = "amqp"))]
fn matches(pattern: &Bound<'_, PyAny>, topic: &Bound<'_, PyAny>, dialect: &str) -> PyResult<bool> {
    let dialect = parse_dialect(dialect)?;
    let pattern = utf8(pattern, Kind::Pattern)?;
    let topic = utf8(topic, Kind::Topic)?;
    crate::reference::matches(dialect, pattern, topic).map_err(errors::to_py)
}

/// Parses `a` and `b` as patterns of `dialect`, for the two relations between patterns.
fn two_patterns(
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    dialect: &str,
) -> PyResult<(crate::Pattern, crate::Pattern)> {
    let dialect = parse_dialect(dialect)?;
    let parse = |p| {
        let text = utf8(p, Kind::Pattern)?;
        dialect.parse_pattern(text).map_err(errors::to_py)
    };
    Ok((parse(a)?, parse(b)?))
}

/// Whether some topic matches both patterns.
#[pyfunction]
#[pyo3(signature = (a, b, dialect = "amqp"))]
fn intersects(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>, dialect: &str) -> PyResult<bool> {
    let (a, b) = two_patterns(a, b, dialect)?;
    Ok(crate::overlap::intersects(&a, &b))
}

/// Whether every topic that `b` matches, `a` matches too. Usually microseconds, but AMQP
/// patterns with `#` before other wildcards can take up to a second or two before the core
/// gives up: the GIL goes by the write rule (released when other threads use the module).
#[pyfunction]
#[pyo3(signature = (a, b, dialect = "amqp"))]
fn subsumes(
    py: Python<'_>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    dialect: &str,
) -> PyResult<bool> {
    let (a, b) = two_patterns(a, b, dialect)?;
    gil::write(py, || crate::overlap::subsumes(&a, &b)).map_err(errors::to_py)
}

/// Why each pattern of an Arrow string array cannot be subscribed in `dialect`, as a pyarrow
/// string array: null where `subscribe` would take the pattern, the reason it would raise
/// `InvalidPattern` otherwise, "null pattern" for a null. The GIL is released for the array.
#[pyfunction]
#[pyo3(signature = (patterns, dialect = "amqp"))]
fn pattern_errors<'py>(patterns: &Bound<'py, PyAny>, dialect: &str) -> PyResult<Bound<'py, PyAny>> {
    let py = patterns.py();
    let dialect = parse_dialect(dialect)?;
    let array = arrow::import(patterns)?;
    let reasons = gil::detach(py, || crate::arrow::pattern_errors(dialect, array.as_ref()))
        .map_err(arrow::argument_error)?;
    arrow::export(py, reasons)
}

#[pymodule(gil_used = false)]
mod _core {
    #[pymodule_export]
    use super::errors::{InvalidPattern, InvalidTopic};
    #[pymodule_export]
    use super::gil::_gil_stats;
    #[pymodule_export]
    use super::headers::HeadersMatcherPy;
    #[pymodule_export]
    use super::matchers::{
        CSTriePy, InvertedBitmapPy, LazyDfaPy, LevelBitmapPy, NaiveMatcherPy, TriePy,
    };
    #[pymodule_export]
    use super::selector::SelectorIndexPy;
    #[pymodule_export]
    use super::topic_store::TopicStorePy;
    #[pymodule_export]
    use super::{intersects, matches, pattern_errors, subsumes};

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))
    }

    use pyo3::prelude::*;
}
