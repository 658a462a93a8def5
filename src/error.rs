//! The one error type of the core. It knows nothing of Python: the bindings map it to
//! `topicmatch.InvalidPattern` / `topicmatch.InvalidTopic` in `src/python/errors.rs`.

use std::fmt;

use crate::dialect::Dialect;

/// How much of an offending input an error message quotes; inputs can be megabytes long.
const QUOTE_MAX: usize = 64;

/// What was wrong with a pattern or topic, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// The dialect whose rules were broken (`None` for dialect-free inputs such as selectors).
    pub dialect: Option<Dialect>,
    /// The start of the input, cut to a readable length.
    pub quoted: String,
    /// Byte offset of the offending word or character in the input.
    pub position: usize,
    /// Why the input is invalid, in a few words.
    pub reason: String,
}

impl Invalid {
    pub(crate) fn new(
        dialect: Option<Dialect>,
        text: &str,
        position: usize,
        reason: impl Into<String>,
    ) -> Self {
        let mut end = text.len().min(QUOTE_MAX);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let mut quoted = text[..end].to_owned();
        if end < text.len() {
            quoted.push('…');
        }
        Invalid {
            dialect,
            quoted,
            position,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} at byte {}: {}",
            self.quoted, self.position, self.reason
        )?;
        if let Some(d) = self.dialect {
            write!(f, " ({d})")?;
        }
        Ok(())
    }
}

/// Every error the core returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A subscription pattern (or selector) that its dialect rejects.
    InvalidPattern(Invalid),
    /// A message topic that its dialect rejects.
    InvalidTopic(Invalid),
    /// A dialect name other than `amqp`, `mqtt` or `nats`.
    UnknownDialect(String),
    /// A question whose answer would take more work than the core allows itself (see
    /// [`crate::overlap::subsumes`]); the inputs are valid.
    TooComplex(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidPattern(i) => write!(f, "invalid pattern {i}"),
            Error::InvalidTopic(i) => write!(f, "invalid topic {i}"),
            Error::UnknownDialect(name) => write!(
                f,
                "unknown dialect {name:?}: expected \"amqp\", \"mqtt\" or \"nats\""
            ),
            Error::TooComplex(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Error {}

/// The result type of the core.
pub type Result<T> = std::result::Result<T, Error>;
