//! Reading patterns and topics from Python: `str`, or `bytes` holding UTF-8. Anything that is
//! not valid UTF-8 (a lone surrogate in a `str`, bad bytes) is an invalid pattern or topic, not
//! a `UnicodeError` from deep inside the call.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use super::errors::{InvalidPattern, InvalidTopic};

/// Which kind of string is being read, for the error raised on a bad one.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Pattern,
    Topic,
}

impl Kind {
    fn invalid(self, why: String) -> PyErr {
        match self {
            Kind::Pattern => InvalidPattern::new_err(format!("invalid pattern: {why}")),
            Kind::Topic => InvalidTopic::new_err(format!("invalid topic: {why}")),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Pattern => "pattern",
            Kind::Topic => "topic",
        }
    }
}

/// Borrows the UTF-8 text of a `str` or `bytes` object.
pub(crate) fn utf8<'a>(obj: &'a Bound<'_, PyAny>, kind: Kind) -> PyResult<&'a str> {
    if let Ok(s) = obj.cast::<PyString>() {
        return s
            .to_str()
            .map_err(|_| kind.invalid("not valid UTF-8 (it holds a lone surrogate)".into()));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return std::str::from_utf8(b.as_bytes()).map_err(|e| {
            kind.invalid(format!(
                "bytes are not valid UTF-8 at byte {}",
                e.valid_up_to()
            ))
        });
    }
    Err(PyTypeError::new_err(format!(
        "a {} is a str or UTF-8 bytes, not {}",
        kind.name(),
        obj.get_type().name()?
    )))
}
