//! `topicmatch::arrow::lookup_arrow` equals the naive oracle row by row: valid topics, topics
//! the dialect rejects (patterns used as topics), nulls, every string layout, and slices whose
//! offsets do not start at zero. Needs the `arrow` feature (`make test` turns it on).
#![cfg(feature = "arrow")]

#[path = "../fuzz/src/arrow_checks.rs"]
mod arrow_checks;
#[path = "../fuzz/src/checks.rs"]
mod checks;
mod common;

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, LargeStringArray, StringArray, StringViewArray};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use topicmatch::arrow::{lookup_arrow, lookup_arrow_named, lookup_arrow_with};
use topicmatch::{CSTrie, Dialect, Grouped, LazyDfa, Matcher, NaiveMatcher, Trie};

/// A topic of a batch: valid, maybe invalid (a pattern), or null.
fn cell(d: Dialect) -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        6 => common::topic(d).prop_map(Some),
        2 => common::pattern(d).prop_map(Some),
        1 => Just(None),
    ]
}

/// The topics as one of the three string layouts, sliced from `offset`.
fn array(cells: &[Option<String>], layout: u8, offset: usize) -> ArrayRef {
    let strs = cells.iter().map(Option::as_deref);
    let full: ArrayRef = match layout {
        0 => Arc::new(strs.collect::<StringArray>()),
        1 => Arc::new(strs.collect::<LargeStringArray>()),
        _ => Arc::new(strs.collect::<StringViewArray>()),
    };
    full.slice(offset, cells.len() - offset)
}

#[test]
fn lookup_arrow_equals_the_oracle_in_every_dialect() {
    let makers: Vec<(&str, common::Factory)> = vec![
        ("Trie", |d| Box::new(Trie::new(d))),
        ("CSTrie", |d| Box::new(CSTrie::new(d))),
        ("LazyDfa", |d| Box::new(LazyDfa::new(d))),
        ("Grouped<CSTrie>", |d| {
            Box::new(Grouped::new(CSTrie::new(d)))
        }),
    ];
    for d in Dialect::ALL {
        let case = (
            prop::collection::vec((common::pattern(d), 0..6u32), 0..30),
            prop::collection::vec(cell(d), 0..40),
            0..3u8,
            0..4usize,
        );
        let mut runner = TestRunner::new(Config {
            cases: 1000,
            ..Config::default()
        });
        runner
            .run(&case, |(pairs, cells, layout, offset)| {
                let offset = offset.min(cells.len());
                // The pattern strategy makes a few patterns the dialect rejects: left out.
                let oracle = NaiveMatcher::new(d);
                let pairs: Vec<_> = pairs
                    .into_iter()
                    .filter(|(p, s)| oracle.subscribe_str(p, *s).is_ok())
                    .collect();
                let topics = array(&cells, layout, offset);
                for (_, make) in &makers {
                    let m = make(d);
                    for (p, s) in &pairs {
                        m.subscribe_str(p, *s).unwrap();
                    }
                    // Values are the ids negated, so the mapping is seen to be applied.
                    let value = |id| -i64::from(id);
                    let routed =
                        lookup_arrow(m.as_ref(), topics.as_ref(), |id| Some(value(id))).unwrap();
                    arrow_checks::assert_rows(&oracle, &routed, &cells[offset..], value);
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{d:?}: {e}"));
    }
}

#[test]
fn other_array_types_are_refused_before_any_lookup() {
    let m = Trie::new(Dialect::Amqp);
    let ints = arrow_array::Int32Array::from(vec![1, 2]);
    let err = lookup_arrow(&m, &ints, |id| Some(i64::from(id))).unwrap_err();
    assert!(
        err.to_string()
            .contains("string, large_string or string_view"),
        "{err}"
    );
}

#[test]
fn a_value_of_none_leaves_the_subscriber_out() {
    let m = Trie::new(Dialect::Amqp);
    m.subscribe_str("a", 1).unwrap();
    m.subscribe_str("a", 2).unwrap();
    let topics = StringArray::from(vec!["a", "b"]);
    let routed = lookup_arrow(&m, &topics, |id| (id == 2).then_some(20)).unwrap();
    assert_eq!(routed.subscribers.value(0).len(), 1);
    assert_eq!(routed.subscribers.value(1).len(), 0);
    assert_eq!(routed.rejected(), 0);
}

#[test]
fn an_empty_array_gives_empty_columns() {
    let m = Trie::new(Dialect::Nats);
    let routed = lookup_arrow(&m, &StringArray::from(Vec::<&str>::new()), |_| None).unwrap();
    assert_eq!((routed.subscribers.len(), routed.reasons.len()), (0, 0));
}

#[test]
fn the_slice_mapping_sees_each_routed_topic_once_with_its_ids() {
    let m = Trie::new(Dialect::Mqtt);
    m.subscribe_str("a/+", 1).unwrap();
    m.subscribe_str("a/b", 2).unwrap();
    m.subscribe_str("#", 3).unwrap();
    let topics = StringArray::from(vec![Some("a/b"), None, Some("a/+"), Some("c")]);
    let mut seen: Vec<Vec<u32>> = Vec::new();
    let routed = lookup_arrow_with(&m, &topics, |ids, values| {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        // One value for the two first ids of a topic: the mapping decides what goes out.
        values.extend(ids.iter().take(2).map(|&id| i64::from(id) * 10));
        seen.push(ids);
    })
    .unwrap();
    // The null and the invalid topic are not handed to the mapping.
    assert_eq!(seen, vec![vec![1, 2, 3], vec![3]]);
    let row = |i: usize| {
        let list = routed.subscribers.value(i);
        let ints = list
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        ints.values().to_vec()
    };
    assert_eq!(row(0), vec![10, 20]);
    assert_eq!(row(3), vec![30]);
    assert_eq!(routed.rejected(), 2);
}

/// Each id's name in `lookup_arrow_named`'s tests (ids are 0..6, names rows 0..8), with
/// bytes past ASCII so that a copy cut anywhere but at a value's ends would show: one empty,
/// the others from 13 to 97 bytes, on both sides of the 32 that a name is copied in one go.
fn name_of(row: i64) -> String {
    if row == 3 {
        return String::new();
    }
    format!(
        "subscriber-{row}-{}",
        "\u{e9}\u{2713}x".repeat(row.max(0) as usize * 2)
    )
}

#[test]
fn lookup_arrow_named_answers_with_the_rows_lookup_arrow_with_answers() {
    let d = Dialect::Mqtt;
    let case = (
        prop::collection::vec((common::pattern(d), 0..6u32), 0..30),
        prop::collection::vec(cell(d), 0..40),
        (0..3u8, 0..4usize),
        (0..3u8, 0..3usize, any::<bool>()),
    );
    let mut runner = TestRunner::new(Config {
        cases: 500,
        ..Config::default()
    });
    runner
        .run(
            &case,
            |(pairs, cells, (layout, offset), (names_layout, names_offset, nulls))| {
                let m = Trie::new(d);
                for (p, s) in &pairs {
                    let _ = m.subscribe_str(p, *s);
                }
                let offset = offset.min(cells.len());
                let topics = array(&cells, layout, offset);
                // Rows 0..8 after the slice: the names array starts `names_offset` rows early.
                // With `nulls`, rows 0 and 1 (which no id maps to) are null: the column is
                // then read row by row rather than through its offsets.
                let names: Vec<Option<String>> = (0..8 + names_offset)
                    .map(|r| r as i64 - names_offset as i64)
                    .map(|row| (!(nulls && (0..2).contains(&row))).then(|| name_of(row)))
                    .collect();
                let names = array(&names, names_layout, names_offset);
                // Ids 0..6 map to rows 7..2, so the mapping is seen to be applied.
                let rows = |ids: &[u32], rows: &mut Vec<i64>| {
                    rows.extend(ids.iter().map(|&id| 7 - i64::from(id)));
                };
                let named = lookup_arrow_named(&m, topics.as_ref(), names.as_ref(), rows).unwrap();
                let ints = lookup_arrow_with(&m, topics.as_ref(), rows).unwrap();
                prop_assert_eq!(&named.reasons, &ints.reasons);
                prop_assert_eq!(named.subscribers.nulls(), ints.subscribers.nulls());
                prop_assert_eq!(named.subscribers.offsets(), ints.subscribers.offsets());
                let got = named.subscribers.values().as_string::<i32>();
                let want = ints
                    .subscribers
                    .values()
                    .as_primitive::<arrow_array::types::Int64Type>();
                prop_assert_eq!(got.len(), want.len());
                for (name, row) in got.iter().zip(want.values()) {
                    let want = name_of(*row);
                    prop_assert_eq!(name, Some(want.as_str()));
                }
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn lookup_arrow_named_refuses_a_row_it_has_no_name_for() {
    let m = Trie::new(Dialect::Amqp);
    m.subscribe_str("a", 1).unwrap();
    let names = StringArray::from(vec![Some("zero"), None]);
    let topics = StringArray::from(vec!["b", "a"]);
    let err = |row: i64| {
        lookup_arrow_named(&m, &topics, &names, |ids, rows| {
            rows.extend(ids.iter().map(|_| row))
        })
        .unwrap_err()
        .to_string()
    };
    assert!(
        err(2).contains("subscriber 2 has no name: names holds rows 0 to 2"),
        "{}",
        err(2)
    );
    assert!(err(-1).contains("subscriber -1 has no name"), "{}", err(-1));
    assert!(err(1).contains("names[1] is null"), "{}", err(1));
    let ok = lookup_arrow_named(&m, &topics, &names, |ids, rows| {
        rows.extend(ids.iter().map(|_| 0))
    })
    .unwrap();
    assert_eq!(ok.subscribers.value(0).len(), 0);
    assert_eq!(ok.subscribers.value(1).as_string::<i32>().value(0), "zero");
    // No names at all, whole or as an empty slice past its start: any subscriber is refused,
    // a topic with none is answered.
    let none = StringArray::from(vec!["x", "y"]);
    for empty in [StringArray::from(Vec::<&str>::new()), none.slice(2, 0)] {
        let routed =
            lookup_arrow_named(&m, &StringArray::from(vec!["b"]), &empty, |_, _| ()).unwrap();
        assert_eq!(routed.subscribers.value(0).len(), 0);
        let err = lookup_arrow_named(&m, &topics, &empty, |ids, rows| {
            rows.extend(ids.iter().map(|_| 0))
        })
        .unwrap_err();
        assert!(err.to_string().contains("names holds rows 0 to 0"), "{err}");
    }
}

#[test]
fn lookup_arrow_named_refuses_names_that_are_not_strings() {
    let m = Trie::new(Dialect::Amqp);
    let ints = arrow_array::Int32Array::from(vec![1, 2]);
    let topics = StringArray::from(vec!["a"]);
    let err = lookup_arrow_named(&m, &topics, &ints, |_, _| ()).unwrap_err();
    assert!(
        matches!(err, arrow_schema::ArrowError::InvalidArgumentError(_)),
        "{err}"
    );
    assert!(err.to_string().contains("names must be"), "{err}");
}

/// A batch on a cache whose answers are past `PREFETCH_FROM_BYTES` announces its next topics
/// ahead of their lookups (and nulls and invalid topics among them): the rows are the same as
/// topic by topic, whatever lies a few rows ahead.
#[test]
fn a_batch_that_prefetches_answers_as_topic_by_topic() {
    use topicmatch::cache::PREFETCH_FROM_BYTES;
    use topicmatch::Cached;
    let m = Cached::new(Trie::new(Dialect::Mqtt), 1 << 14).without_admission();
    for id in 0..1000 {
        m.subscribe_str("a/#", id).unwrap();
    }
    m.subscribe_str("a/+/x", 5000).unwrap();
    let mut cells: Vec<Option<String>> = Vec::new();
    for i in 0..2000 {
        cells.push(Some(format!("a/{}", i % 700)));
        match i % 7 {
            0 => cells.push(None),
            3 => cells.push(Some("a/+".to_owned())),
            5 => cells.push(Some(format!("a/{i}/x"))),
            _ => {}
        }
    }
    let topics: StringArray = cells.iter().map(Option::as_deref).collect();
    let mut prefetched = false;
    for _ in 0..3 {
        prefetched |= m.prefetches();
        let routed = lookup_arrow(&m, &topics, |id| Some(i64::from(id))).unwrap();
        for (row, cell) in cells.iter().enumerate() {
            let want = cell.as_deref().and_then(|t| m.lookup_str(t).ok());
            match want {
                None => assert!(routed.subscribers.is_null(row)),
                Some(mut ids) => {
                    ids.sort_unstable();
                    let list = routed.subscribers.value(row);
                    let mut got: Vec<i64> = list
                        .as_primitive::<arrow_array::types::Int64Type>()
                        .values()
                        .to_vec();
                    got.sort_unstable();
                    let want: Vec<i64> = ids.into_iter().map(i64::from).collect();
                    assert_eq!(got, want, "row {row}");
                }
            }
        }
    }
    assert!(prefetched, "the answers passed {PREFETCH_FROM_BYTES} bytes");
}
