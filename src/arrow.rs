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
use arrow_array::{Array, Int64Array, ListArray, StringArray};
use arrow_buffer::{NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field};

use crate::matcher::{Matcher, SubscriberId};

/// The reason given for a null topic.
pub const NULL_TOPIC: &str = "null topic";

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
        other => Err(ArrowError::InvalidArgumentError(format!(
            "topics must be an Arrow string, large_string or string_view array, not {other}"
        ))),
    }
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
