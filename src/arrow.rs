//! Lookups over Arrow arrays: a column of topics in, a list column of subscribers and a column
//! of reasons out, with no per-row object on either side (feature `arrow`).
//!
//! Row `i` of the answer is, for topic `i`:
//!
//! | topic | `subscribers[i]` | `reasons[i]` |
//! |---|---|---|
//! | valid | the list of its subscribers' values (empty when none matched) | null |
//! | invalid in the dialect | null | why, as the matcher's error says it |
//! | null | null | [`NULL_TOPIC`] |
//!
//! An invalid topic costs its own row only: the batch is never redone topic by topic.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{Array, StringArray};
//! use topicmatch::{arrow::lookup_arrow, Dialect, Matcher, Trie};
//!
//! let m = Trie::new(Dialect::Mqtt);
//! m.subscribe_str("sensors/+/temp", 7).unwrap();
//! let topics = StringArray::from(vec![Some("sensors/1/temp"), Some("sensors/#"), None]);
//! let routed = lookup_arrow(&m, &topics, |id| Some(i64::from(id))).unwrap();
//! assert_eq!(routed.subscribers.value(0).len(), 1);
//! assert!(routed.subscribers.is_null(1) && routed.subscribers.is_null(2));
//! assert_eq!(routed.reasons.value(2), "null topic");
//! ```

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, Int64Array, ListArray, StringArray};
use arrow_buffer::{NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field};

use crate::dialect::Dialect;
use crate::groups;
use crate::matcher::{Matcher, SubscriberId};

/// The reason given for a null topic.
pub const NULL_TOPIC: &str = "null topic";

/// The reason [`pattern_errors`] gives for a null pattern.
pub const NULL_PATTERN: &str = "null pattern";

/// The answer of [`lookup_arrow`]: one row per topic.
#[derive(Debug)]
pub struct Routed {
    /// `list<int64>`: the values of the subscribers of each topic; null for a rejected topic.
    pub subscribers: ListArray,
    /// `string`: null for a routed topic, why for a rejected one.
    pub reasons: StringArray,
}

impl Routed {
    /// How many topics were rejected (null or invalid).
    pub fn rejected(&self) -> usize {
        self.subscribers.null_count()
    }
}

/// Looks up every topic of `topics` (`string`, `large_string` or `string_view`) in `matcher`,
/// and maps each subscriber id to its value with `value` (`None` leaves it out: an id whose
/// subscriber is gone). Fails, before any lookup, on any other array type; and when the
/// answer would hold more subscribers than an Arrow list's 32-bit offsets can count.
pub fn lookup_arrow<M: Matcher + ?Sized>(
    matcher: &M,
    topics: &dyn Array,
    mut value: impl FnMut(SubscriberId) -> Option<i64>,
) -> Result<Routed, ArrowError> {
    lookup_arrow_with(matcher, topics, |ids, values| {
        values.extend(ids.iter().filter_map(|&id| value(id)));
    })
}

/// [`lookup_arrow`] with a mapping that takes each topic's subscriber ids at once and appends
/// their values to `values`: a mapping that locks a table to read it locks it once a topic
/// rather than once a subscriber (the Python binding's, where a read lock per subscriber was
/// most of the cost of a cached batch at 31 subscribers a topic).
pub fn lookup_arrow_with<M: Matcher + ?Sized>(
    matcher: &M,
    topics: &dyn Array,
    values: impl FnMut(&[SubscriberId], &mut Vec<i64>),
) -> Result<Routed, ArrowError> {
    match topics.data_type() {
        DataType::Utf8 => route(matcher, topics.as_string::<i32>().iter(), values),
        DataType::LargeUtf8 => route(matcher, topics.as_string::<i64>().iter(), values),
        DataType::Utf8View => route(matcher, topics.as_string_view().iter(), values),
        other => Err(not_strings("topics", other)),
    }
}

/// The error for an array of `other` type where strings were expected.
fn not_strings(what: &str, other: &DataType) -> ArrowError {
    ArrowError::InvalidArgumentError(format!(
        "{what} must be an Arrow string, large_string or string_view array, not {other}"
    ))
}

/// The loop of [`lookup_arrow`], once per string layout.
fn route<'a, M: Matcher + ?Sized>(
    matcher: &M,
    topics: impl ExactSizeIterator<Item = Option<&'a str>>,
    mut map: impl FnMut(&[SubscriberId], &mut Vec<i64>),
) -> Result<Routed, ArrowError> {
    let n = topics.len();
    let mut offsets: Vec<i32> = Vec::with_capacity(n + 1);
    offsets.push(0);
    let mut values: Vec<i64> = Vec::new();
    let mut valid = NullBufferBuilder::new(n);
    // Reasons are mostly null: kept as (row, text) and laid out once at the end.
    let mut reasons: Vec<(usize, String)> = Vec::new();
    let mut ids: Vec<SubscriberId> = Vec::new();
    for (row, topic) in topics.enumerate() {
        let outcome = match topic {
            None => Err(NULL_TOPIC.to_owned()),
            Some(text) => {
                ids.clear();
                matcher
                    .lookup_str_into(text, &mut ids)
                    .map_err(|e| e.to_string())
            }
        };
        match outcome {
            Ok(()) => {
                map(&ids, &mut values);
                valid.append_non_null();
            }
            Err(reason) => {
                reasons.push((row, reason));
                valid.append_null();
            }
        }
        let end = i32::try_from(values.len())
            .map_err(|_| ArrowError::OffsetOverflowError(values.len()))?;
        offsets.push(end);
    }
    let field = Arc::new(Field::new_list_field(DataType::Int64, false));
    let subscribers = ListArray::try_new(
        field,
        OffsetBuffer::new(ScalarBuffer::from(offsets)),
        Arc::new(Int64Array::from(values)),
        valid.finish(),
    )?;
    Ok(Routed {
        subscribers,
        reasons: reasons_column(n, &reasons),
    })
}

/// A string column of `n` rows, null but for the given `(row, text)` pairs (in row order).
fn reasons_column(n: usize, reasons: &[(usize, String)]) -> StringArray {
    if reasons.is_empty() {
        return StringArray::new_null(n);
    }
    let mut at = reasons.iter().peekable();
    (0..n)
        .map(|row| {
            at.next_if(|(r, _)| *r == row)
                .map(|(_, text)| text.as_str())
        })
        .collect()
}

/// Why each pattern of `patterns` (`string`, `large_string` or `string_view`) cannot be
/// subscribed in `dialect`: a string column, null for a pattern `subscribe` would take (an
/// MQTT `$share/{group}/{filter}` included), the error `subscribe` would raise for any other,
/// and [`NULL_PATTERN`] for a null. A table of subscriptions is checked in one call, and its
/// bad rows found without redoing it row by row.
///
/// ```
/// use arrow_array::{Array, StringArray};
/// use topicmatch::{arrow::pattern_errors, Dialect};
///
/// let patterns = StringArray::from(vec![Some("a/+/c"), Some("a/#/c"), None]);
/// let reasons = pattern_errors(Dialect::Mqtt, &patterns).unwrap();
/// assert!(reasons.is_null(0) && reasons.value(1).contains('#'));
/// assert_eq!(reasons.value(2), "null pattern");
/// ```
pub fn pattern_errors(dialect: Dialect, patterns: &dyn Array) -> Result<StringArray, ArrowError> {
    let mut reasons = Vec::new();
    for (row, pattern) in strings(patterns, "patterns")?.enumerate() {
        let reason = match pattern {
            None => NULL_PATTERN.to_owned(),
            Some(text) => match groups::check_subscription(dialect, text, None) {
                Ok(()) => continue,
                Err(e) => e.to_string(),
            },
        };
        reasons.push((row, reason));
    }
    Ok(reasons_column(patterns.len(), &reasons))
}

/// The rows of a `string`, `large_string` or `string_view` array; any other type is an error
/// that calls the array `what`.
pub fn strings<'a>(
    array: &'a dyn Array,
    what: &str,
) -> Result<Box<dyn Iterator<Item = Option<&'a str>> + 'a>, ArrowError> {
    Ok(match array.data_type() {
        DataType::Utf8 => Box::new(array.as_string::<i32>().iter()),
        DataType::LargeUtf8 => Box::new(array.as_string::<i64>().iter()),
        DataType::Utf8View => Box::new(array.as_string_view().iter()),
        other => return Err(not_strings(what, other)),
    })
}

/// The rows of an integer array of any width as `i64`s. Any other type is an
/// `InvalidArgumentError`, a `uint64` past `i64::MAX` a `CastError` naming its row; both call
/// the array `what`.
pub fn integers(array: &dyn Array, what: &str) -> Result<Vec<Option<i64>>, ArrowError> {
    macro_rules! widened {
        ($t:ty) => {
            array
                .as_primitive::<$t>()
                .iter()
                .map(|v| v.map(i64::from))
                .collect()
        };
    }
    Ok(match array.data_type() {
        DataType::Int8 => widened!(Int8Type),
        DataType::Int16 => widened!(Int16Type),
        DataType::Int32 => widened!(Int32Type),
        DataType::Int64 => widened!(Int64Type),
        DataType::UInt8 => widened!(UInt8Type),
        DataType::UInt16 => widened!(UInt16Type),
        DataType::UInt32 => widened!(UInt32Type),
        DataType::UInt64 => array
            .as_primitive::<UInt64Type>()
            .iter()
            .enumerate()
            .map(|(row, v)| {
                v.map(|v| {
                    i64::try_from(v).map_err(|_| {
                        ArrowError::CastError(format!(
                            "{what}[{row}] = {v} is past the int64 range"
                        ))
                    })
                })
                .transpose()
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(ArrowError::InvalidArgumentError(format!(
                "{what} must be an Arrow integer array, not {other}"
            )))
        }
    })
}
