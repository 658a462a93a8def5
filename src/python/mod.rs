//! PyO3 bindings: `topicmatch._core`. Methods extract arguments, run the core (with the GIL
//! released where the work can be long) and convert the result; nothing else lives here.

mod answers;
mod errors;
mod gil;
mod headers;
mod matchers;
mod registry;
mod selector;
mod text;
mod topic_index;

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

#[pymodule(gil_used = false)]
mod _core {
    #[pymodule_export]
    use super::errors::{InvalidPattern, InvalidTopic};
    #[pymodule_export]
    use super::gil::_gil_stats;
    #[pymodule_export]
    use super::headers::HeadersMatcherPy;
    #[pymodule_export]
    use super::matchers::{CSTriePy, InvertedBitmapPy, LevelBitmapPy, NaiveMatcherPy, TriePy};
    #[pymodule_export]
    use super::matches;
    #[pymodule_export]
    use super::selector::SelectorIndexPy;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))
    }

    use pyo3::prelude::*;
}
