#![allow(dead_code)] // tests/arrow.rs uses only `assert_rows`
//! The Arrow entry point against the oracle, shared by the `arrow` fuzz target and
//! `tests/fuzz_regressions.rs` (which replays its corpus when the `arrow` feature is on).

use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, Int64Array, LargeStringArray, StringArray, StringViewArray};
use topicmatch::arrow::{
    lookup_arrow, lookup_arrow_named, lookup_arrow_with, pattern_errors, Routed, NULL_PATTERN,
    NULL_TOPIC,
};
use topicmatch::{CSTrie, Dialect, LazyDfa, Matcher, NaiveMatcher, SubscriberId, Trie};

use crate::checks::text;

/// A row of the topic column.
#[derive(Arbitrary, Debug)]
pub enum Cell {
    /// Words chosen to collide with the patterns (wildcards included: invalid topics).
    Words(Vec<u8>),
    /// Any UTF-8 text.
    Raw(String),
    Null,
}

/// Subscriptions, a column of topics, its string layout and the offset of the slice taken.
#[derive(Arbitrary, Debug)]
pub struct ArrowCase {
    pub dialect: u8,
    pub subscriptions: Vec<(Vec<u8>, u8)>,
    pub topics: Vec<Cell>,
    pub layout: u8,
    pub offset: u8,
}

/// Decodes `data` as an [`ArrowCase`] and checks it.
pub fn check_arrow_bytes(data: &[u8]) {
    if let Ok(case) = ArrowCase::arbitrary_take_rest(Unstructured::new(data)) {
        check_arrow(&case);
    }
}

/// Every row of `lookup_arrow`, for three matchers, is the oracle's answer for its topic: the
/// subscribers (mapped to values), or null with the oracle's error, or null with
/// [`NULL_TOPIC`]; and `pattern_errors` of the same column gives the parser's errors. Any
/// difference panics.
pub fn check_arrow(case: &ArrowCase) {
    let d = Dialect::ALL[case.dialect as usize % 3];
    let oracle = NaiveMatcher::new(d);
    let (trie, cstrie, dfa) = (Trie::new(d), CSTrie::new(d), LazyDfa::with_budget(d, 600));
    let ms: [&dyn Matcher; 3] = [&trie, &cstrie, &dfa];
    for (p, s) in case.subscriptions.iter().take(32) {
        let (p, s) = (text(d, p), SubscriberId::from(*s % 8));
        if oracle.subscribe_str(&p, s).is_ok() {
            for m in &ms {
                m.subscribe_str(&p, s).expect("the oracle took it");
            }
        }
    }
    let cells: Vec<Option<String>> = case
        .topics
        .iter()
        .take(64)
        .map(|c| match c {
            Cell::Words(w) => Some(text(d, w)),
            Cell::Raw(s) => Some(s.clone()),
            Cell::Null => None,
        })
        .collect();
    let offset = usize::from(case.offset).min(cells.len());
    let strs = cells.iter().map(Option::as_deref);
    let full: ArrayRef = match case.layout % 3 {
        0 => Arc::new(strs.collect::<StringArray>()),
        1 => Arc::new(strs.collect::<LargeStringArray>()),
        _ => Arc::new(strs.collect::<StringViewArray>()),
    };
    let topics = full.slice(offset, cells.len() - offset);
    let cells = &cells[offset..];
    for m in &ms {
        // Values are ids plus 100: the mapping is seen to be applied.
        let value = |id| i64::from(id) + 100;
        let routed =
            lookup_arrow(*m, topics.as_ref(), |id| Some(value(id))).expect("a string column");
        assert_rows(&oracle, &routed, cells, value);
        // With names: ids 0..8 are rows of eight names, copied in where the ints were.
        let names: StringArray = (0..8).map(|i| Some(format!("name {i}"))).collect();
        let rows = |ids: &[SubscriberId], rows: &mut Vec<i64>| {
            rows.extend(ids.iter().map(|&id| i64::from(id)));
        };
        let named = lookup_arrow_named(*m, topics.as_ref(), &names, rows).expect("named");
        let ints = lookup_arrow_with(*m, topics.as_ref(), rows).expect("a string column");
        assert_eq!(named.reasons, ints.reasons);
        assert_eq!(named.subscribers.nulls(), ints.subscribers.nulls());
        // Row by row, each sorted: two lookups may list a topic's subscribers in two orders.
        for row in (0..cells.len()).filter(|&r| named.subscribers.is_valid(r)) {
            let list = named.subscribers.value(row);
            let mut got: Vec<String> = list
                .as_string::<i32>()
                .iter()
                .flatten()
                .map(String::from)
                .collect();
            let list = ints.subscribers.value(row);
            let values = list.as_primitive::<Int64Type>().values();
            let mut want: Vec<String> = values.iter().map(|v| format!("name {v}")).collect();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "row {row}");
        }
    }
    // The same column read as patterns: each row's reason is the parser's error, or null.
    let reasons = pattern_errors(d, topics.as_ref()).expect("a string column");
    assert_eq!(reasons.len(), cells.len());
    for (row, cell) in cells.iter().enumerate() {
        let Some(t) = cell else {
            assert_eq!(reasons.value(row), NULL_PATTERN);
            continue;
        };
        if t.starts_with("$share/") {
            continue; // an MQTT shared subscription: its own rules (tests/groups.rs)
        }
        match d.parse_pattern(t) {
            Ok(_) => assert!(reasons.is_null(row), "{t:?}: {}", reasons.value(row)),
            Err(e) => assert_eq!(reasons.value(row), e.to_string(), "{t:?}"),
        }
    }
}

/// Row by row, `routed` is the oracle's answer for `cells`: the values of its subscribers
/// (sorted), or null with its error's text, or null with [`NULL_TOPIC`]. Panics otherwise.
pub fn assert_rows(
    oracle: &NaiveMatcher,
    routed: &Routed,
    cells: &[Option<String>],
    value: impl Fn(SubscriberId) -> i64,
) {
    assert_eq!(routed.subscribers.len(), cells.len());
    assert_eq!(routed.reasons.len(), cells.len());
    for (row, cell) in cells.iter().enumerate() {
        let want = match cell {
            None => Err(NULL_TOPIC.to_owned()),
            Some(t) => oracle.lookup_str(t).map_err(|e| e.to_string()),
        };
        match want {
            Ok(ids) => {
                assert!(routed.reasons.is_null(row), "{cell:?}");
                let list = routed.subscribers.value(row);
                let values = list.as_any().downcast_ref::<Int64Array>().expect("int64");
                let mut got: Vec<i64> = values.values().to_vec();
                got.sort_unstable();
                let mut want: Vec<i64> = ids.into_iter().map(&value).collect();
                want.sort_unstable();
                assert_eq!(got, want, "row {row} {cell:?} ({})", oracle.dialect());
            }
            Err(reason) => {
                assert!(routed.subscribers.is_null(row), "{cell:?}");
                assert_eq!(routed.reasons.value(row), reason, "{cell:?}");
            }
        }
    }
    assert_eq!(routed.rejected(), cells.len() - routed.reasons.null_count());
}
