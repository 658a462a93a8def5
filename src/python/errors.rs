//! The one place where core errors become Python exceptions, all rooted in `ValueError`.

use pyo3::create_exception;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::error::Error;

create_exception!(
    topicmatch,
    InvalidPattern,
    PyValueError,
    "A subscription pattern or selector that its dialect rejects."
);
create_exception!(
    topicmatch,
    InvalidTopic,
    PyValueError,
    "A message topic that its dialect rejects."
);

/// Converts a core error to the Python exception that stands for it.
pub(crate) fn to_py(err: Error) -> PyErr {
    match &err {
        Error::InvalidPattern(_) => InvalidPattern::new_err(err.to_string()),
        Error::InvalidTopic(_) => InvalidTopic::new_err(err.to_string()),
        Error::UnknownDialect(_) | Error::TooComplex(_) => PyValueError::new_err(err.to_string()),
    }
}

/// The error raised by a write to a read-only snapshot.
pub(crate) fn read_only() -> PyErr {
    PyTypeError::new_err("this matcher is a read-only snapshot; write to the original instead")
}
