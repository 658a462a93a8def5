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
use arrow_array::{Array, ArrayRef, Int64Array, ListArray, StringArray};
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
    /// `list<int64>` (`list<string>` from [`lookup_arrow_named`]): the values of the
    /// subscribers of each topic; null for a rejected topic.
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
    route_strings(
        matcher,
        topics,
        Values {
            map: values,
            values: Vec::new(),
        },
    )
}

/// [`lookup_arrow_with`] answering with names: `rows` maps each topic's ids to rows of `names`
/// (`string`, `large_string` or `string_view`), and `subscribers` is a `list<string>` of those
/// rows' text, built as the topics are looked up (no column of rows, and no gather after).
/// Fails with `InvalidArgumentError` when `names` is not strings, and with `ComputeError`,
/// naming it, on the first row that `names` does not have or that is null there.
///
/// ```
/// use arrow_array::{cast::AsArray, Array, StringArray};
/// use topicmatch::{arrow::lookup_arrow_named, Dialect, Matcher, Trie};
///
/// let m = Trie::new(Dialect::Mqtt);
/// m.subscribe_str("sensors/+/temp", 7).unwrap();
/// let names = StringArray::from(vec!["alice", "bob"]);
/// let topics = StringArray::from(vec!["sensors/1/temp"]);
/// // Subscriber 7 is names[1].
/// let routed = lookup_arrow_named(&m, &topics, &names, |ids, rows| {
///     rows.extend(ids.iter().map(|&id| i64::from(id == 7)))
/// })
/// .unwrap();
/// assert_eq!(routed.subscribers.value(0).as_string::<i32>().value(0), "bob");
/// ```
pub fn lookup_arrow_named<M: Matcher + ?Sized>(
    matcher: &M,
    topics: &dyn Array,
    names: &dyn Array,
    rows: impl FnMut(&[SubscriberId], &mut Vec<i64>),
) -> Result<Routed, ArrowError> {
    let names = Names::of(names)?;
    route_strings(
        matcher,
        topics,
        Named {
            names,
            map: rows,
            rows: Vec::new(),
            bytes: Vec::new(),
            offsets: vec![0],
        },
    )
}

/// The error for an array of `other` type where strings were expected.
fn not_strings(what: &str, other: &DataType) -> ArrowError {
    ArrowError::InvalidArgumentError(format!(
        "{what} must be an Arrow string, large_string or string_view array, not {other}"
    ))
}

/// The loop of [`lookup_arrow`], once per string layout of the topics.
fn route_strings<M: Matcher + ?Sized>(
    matcher: &M,
    topics: &dyn Array,
    answers: impl Answers,
) -> Result<Routed, ArrowError> {
    match topics.data_type() {
        DataType::Utf8 => route(matcher, topics.as_string::<i32>().iter(), answers),
        DataType::LargeUtf8 => route(matcher, topics.as_string::<i64>().iter(), answers),
        DataType::Utf8View => route(matcher, topics.as_string_view().iter(), answers),
        other => Err(not_strings("topics", other)),
    }
}

/// The child column of the answer's lists, filled a topic at a time.
trait Answers {
    /// Appends one topic's subscribers; the child's length after. `done` topics are in with
    /// this one, and `left` more will follow (for [`make_room`]).
    fn push(&mut self, ids: &[SubscriberId], done: usize, left: usize)
        -> Result<usize, ArrowError>;
    /// The child column and its field.
    fn finish(self) -> Result<(Arc<Field>, ArrayRef), ArrowError>;
}

/// `int64` values, mapped from ids by the caller.
struct Values<F> {
    map: F,
    values: Vec<i64>,
}

impl<F: FnMut(&[SubscriberId], &mut Vec<i64>)> Answers for Values<F> {
    fn push(
        &mut self,
        ids: &[SubscriberId],
        done: usize,
        left: usize,
    ) -> Result<usize, ArrowError> {
        make_room(&mut self.values, ids.len(), done, left);
        (self.map)(ids, &mut self.values);
        Ok(self.values.len())
    }

    fn finish(self) -> Result<(Arc<Field>, ArrayRef), ArrowError> {
        let field = Arc::new(Field::new_list_field(DataType::Int64, false));
        Ok((field, Arc::new(Int64Array::from(self.values))))
    }
}

/// A names column in any of the three string layouts; the two with offsets are read through
/// their buffers, and a column with no null skips the validity check, since a batch copies a
/// name per delivery.
enum Names<'a> {
    Utf8(&'a [i32], &'a [u8]),
    Large(&'a [i64], &'a [u8]),
    Other(&'a dyn Array),
}

impl<'a> Names<'a> {
    fn of(names: &'a dyn Array) -> Result<Self, ArrowError> {
        let with_nulls = names.null_count() > 0;
        Ok(match names.data_type() {
            DataType::Utf8 if !with_nulls => {
                let a = names.as_string::<i32>();
                Names::Utf8(a.value_offsets(), a.value_data())
            }
            DataType::LargeUtf8 if !with_nulls => {
                let a = names.as_string::<i64>();
                Names::Large(a.value_offsets(), a.value_data())
            }
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Names::Other(names),
            other => return Err(not_strings("names", other)),
        })
    }

    fn len(&self) -> usize {
        match self {
            Names::Utf8(offsets, _) => offsets.len() - 1,
            Names::Large(offsets, _) => offsets.len() - 1,
            Names::Other(a) => a.len(),
        }
    }
}

/// Row `row` of a string column of any layout, as bytes; `None` if it is null or past the end.
/// The way into a names column that [`copy_rows`] cannot read through its offsets.
fn string_at(a: &dyn Array, row: usize) -> Option<&[u8]> {
    if row >= a.len() || a.is_null(row) {
        return None;
    }
    Some(match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().value(row).as_bytes(),
        DataType::LargeUtf8 => a.as_string::<i64>().value(row).as_bytes(),
        _ => a.as_string_view().value(row).as_bytes(),
    })
}

/// `string` names: the text of the rows the caller maps ids to, copied in as they come.
struct Named<'a, F> {
    names: Names<'a>,
    map: F,
    /// One topic's rows, reused.
    rows: Vec<i64>,
    bytes: Vec<u8>,
    offsets: Vec<i32>,
}

impl<F> Named<'_, F> {
    /// The error for a subscriber whose row of `names` is missing or null.
    fn no_name(&self, row: i64) -> ArrowError {
        let n = self.names.len();
        ArrowError::ComputeError(if usize::try_from(row).is_ok_and(|r| r < n) {
            format!("subscriber {row} has no name: names[{row}] is null")
        } else {
            format!("subscriber {row} has no name: names holds rows 0 to {n} (exclusive)")
        })
    }
}

impl<F: FnMut(&[SubscriberId], &mut Vec<i64>)> Answers for Named<'_, F> {
    fn push(
        &mut self,
        ids: &[SubscriberId],
        done: usize,
        left: usize,
    ) -> Result<usize, ArrowError> {
        self.rows.clear();
        (self.map)(ids, &mut self.rows);
        let (bytes, ends) = (&mut self.bytes, &mut self.offsets);
        let copied = match self.names {
            Names::Utf8(o, data) => copy_rows(o, data, &self.rows, bytes, ends, (done, left)),
            Names::Large(o, data) => copy_rows(o, data, &self.rows, bytes, ends, (done, left)),
            Names::Other(a) => self.rows.iter().try_for_each(|&row| {
                let name = usize::try_from(row).ok().and_then(|r| string_at(a, r));
                bytes.extend_from_slice(name.ok_or(row)?);
                ends.push(bytes.len() as i32);
                Ok(())
            }),
        };
        copied.map_err(|row| self.no_name(row))?;
        // Checked once the topic's names are in: every end before is smaller.
        if i32::try_from(self.bytes.len()).is_err() {
            return Err(ArrowError::OffsetOverflowError(self.bytes.len()));
        }
        Ok(self.offsets.len() - 1)
    }

    fn finish(self) -> Result<(Arc<Field>, ArrayRef), ArrowError> {
        // Nullable, as a `take` of names makes it: the layout Spark's `array<string>` expects.
        let field = Arc::new(Field::new_list_field(DataType::Utf8, true));
        // SAFETY: `new_unchecked` asks what `try_new` checks. The offsets start at 0, and each
        // is the length of `bytes` after a copy, so they never decrease and the last is
        // `bytes.len()`, under `i32::MAX`: checked after every topic, and a `push` whose
        // check fails (the only one that can have cast a wrapped end) ends the batch with an
        // error, so `finish` never sees its ends. Between two offsets lie the bytes of one
        // whole value of `names`, a string array, whose values are UTF-8 (arrow-rs's
        // invariant: its safe constructors check it, and the Python binding imports non-empty
        // arrays with full validation; an empty one has no row to copy); so every value here
        // is UTF-8. No nulls.
        #[allow(unsafe_code)]
        let names = unsafe {
            StringArray::new_unchecked(
                OffsetBuffer::new_unchecked(ScalarBuffer::from(self.offsets)),
                self.bytes.into(),
                None,
            )
        };
        Ok((field, Arc::new(names)))
    }
}

/// How many bytes [`copy_rows`] copies at once for a name no longer than that: one fixed-size
/// copy, done in line, where a copy of the name's own length is a call to `memcpy` (most of a
/// batch's copying was those calls, a name being a dozen bytes).
const WIDE: usize = 32;

/// Appends the text of each of `rows` of a names column with offsets (and no null) to
/// `bytes`, and after each its end to `ends`; `Err` with the first row the column does not
/// have. The loop a batch runs once per delivery: the rows are checked and their text
/// measured first, so that the copies write into room reserved once (`(done, left)`, the
/// topics in and to come, for [`make_room`]), with [`WIDE`] bytes to spare for the last
/// name's wide copy.
fn copy_rows<O: arrow_array::OffsetSizeTrait>(
    offsets: &[O],
    data: &[u8],
    rows: &[i64],
    bytes: &mut Vec<u8>,
    ends: &mut Vec<i32>,
    (done, left): (usize, usize),
) -> Result<(), i64> {
    let n = offsets.len() - 1;
    let mut total = 0;
    for &row in rows {
        let r = usize::try_from(row).ok().filter(|&r| r < n).ok_or(row)?;
        let start = offsets[r].as_usize();
        // The names' text, read at random, is on its way while the rest are measured.
        crate::cstrie::prefetch(data.as_ptr().wrapping_add(start));
        total += offsets[r + 1].as_usize() - start;
    }
    make_room(bytes, total + WIDE, done, left);
    make_room(ends, rows.len(), done, left);
    for &row in rows {
        let r = row as usize; // checked above
        let (start, end) = (offsets[r].as_usize(), offsets[r + 1].as_usize());
        let len = bytes.len() + (end - start);
        match data.get(start..start + WIDE) {
            // The name and what follows it: the bytes past the name are cut off again.
            Some(wide) if end - start <= WIDE => {
                bytes.extend_from_slice(wide);
                bytes.truncate(len);
            }
            _ => bytes.extend_from_slice(&data[start..end]),
        }
        ends.push(len as i32);
    }
    Ok(())
}

/// Makes room in `v`, a column a batch fills a topic at a time, for `needed` more items: `done`
/// topics are in with the one they are for, and `left` more will follow. When it must grow,
/// `v` grows to what the topics so far project for the whole batch (at most eight times its
/// size then), not to twice its size: a batch's names column is megabytes, and the allocator
/// grows a block that large by copying it, which doubling did a dozen times a batch.
fn make_room<T>(v: &mut Vec<T>, needed: usize, done: usize, left: usize) {
    if v.capacity() - v.len() >= needed {
        return;
    }
    let now = v.len() + needed;
    let projected = (now / done.max(1)).saturating_mul(left);
    v.reserve(needed + projected.saturating_add(projected / 8).min(8 * now));
}

/// The loop of [`lookup_arrow`]: every topic looked up, its answer pushed to `answers`.
fn route<'a, M: Matcher + ?Sized>(
    matcher: &M,
    topics: impl ExactSizeIterator<Item = Option<&'a str>> + Clone,
    mut answers: impl Answers,
) -> Result<Routed, ArrowError> {
    let n = topics.len();
    let mut offsets: Vec<i32> = Vec::with_capacity(n + 1);
    offsets.push(0);
    let mut valid = NullBufferBuilder::new(n);
    // Reasons are mostly null: kept as (row, text) and laid out once at the end.
    let mut reasons: Vec<(usize, String)> = Vec::new();
    let mut ids: Vec<SubscriberId> = Vec::new();
    let mut end = 0;
    // On a matcher that asks for it, the topics a few rows ahead are announced: their
    // lookups' first reads are on their way while this one runs.
    let prefetch = matcher.prefetches();
    let mut ahead = crate::matcher::AHEAD.map(|n| topics.clone().skip(n));
    for (row, topic) in topics.enumerate() {
        if prefetch {
            for (step, next) in ahead.iter_mut().enumerate() {
                if let Some(Some(t)) = next.next() {
                    matcher.prefetch_str(t, step);
                }
            }
        }
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
                end = answers.push(&ids, row + 1, n - row - 1)?;
                valid.append_non_null();
            }
            Err(reason) => {
                reasons.push((row, reason));
                valid.append_null();
            }
        }
        offsets.push(i32::try_from(end).map_err(|_| ArrowError::OffsetOverflowError(end))?);
    }
    let (field, values) = answers.finish()?;
    let subscribers = ListArray::try_new(
        field,
        OffsetBuffer::new(ScalarBuffer::from(offsets)),
        values,
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
