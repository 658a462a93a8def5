//! Each id's subscriber as an `i64`, for `lookup_arrow`: one word an id.
//!
//! An id's word is its subscriber's value when that is an int that fits, except that the three
//! lowest `i64`s are markers: the id is released, its subscriber is not an int, or its value is
//! itself one of the three and sits in a side map. A lookup reads one word per subscriber and
//! compares it once; a two-word enum per id doubled the table's cache lines, which a batch of
//! 31 subscribers a topic reads at random. Below [`IntTable::same_below`], where every id is
//! its own value, it reads nothing. Tested here (the run of own values against a brute-force
//! count, on random writes) and from Python (`tests/python/test_arrow.py`: the int64 edges,
//! released and reused ids, ids that are their own values).

use std::collections::{BTreeSet, HashMap};

use crate::matcher::SubscriberId;

/// No subscriber has this id now.
const RELEASED: i64 = i64::MIN;
/// The subscriber is not an int that fits in an `i64`.
const NOT_INT: i64 = i64::MIN + 1;
/// The subscriber is an int equal to one of the markers: its value is in `markers`.
const MARKER: i64 = i64::MIN + 2;

/// A subscriber as `lookup_arrow` sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IntValue {
    /// An int that fits in an `i64`.
    Int(i64),
    /// Any other object, or an int out of range.
    NotInt,
    /// No subscriber has this id now.
    Released,
}

/// The words, indexed by id, and the side map of the ints equal to a marker.
#[derive(Default)]
pub(crate) struct IntTable {
    words: Vec<i64>,
    /// The ids whose subscriber is an int equal to a marker, with that int.
    markers: HashMap<SubscriberId, i64>,
    /// The run of ids that are their own value ([`IntTable::same_below`]) is kept as the ids
    /// scanned so far, `0..reach` (only grows: each word is scanned once in the table's life),
    /// and `holes`, the ids below `reach` that are not their own value now. The id at `reach`
    /// is not its own value either, or the scan would have passed it.
    reach: usize,
    holes: BTreeSet<SubscriberId>,
}

impl IntTable {
    pub(crate) fn set(&mut self, id: SubscriberId, value: IntValue) {
        let at = id as usize;
        if at >= self.words.len() {
            self.words.resize(at + 1, RELEASED);
        }
        if !self.markers.is_empty() {
            self.markers.remove(&id);
        }
        self.words[at] = match value {
            IntValue::Int(v) if v <= MARKER => {
                self.markers.insert(id, v);
                MARKER
            }
            IntValue::Int(v) => v,
            IntValue::NotInt => NOT_INT,
            IntValue::Released => RELEASED,
        };
        let own = value == IntValue::Int(i64::from(id));
        if at < self.reach {
            // A set of the holes, not a rescan from the lowest: a low id that gets its own
            // value back after a release must not cost a pass over a million ids that are.
            if own {
                self.holes.remove(&id);
            } else {
                self.holes.insert(id);
            }
        } else if own && at == self.reach {
            while self.words.get(self.reach) == Some(&(self.reach as i64)) {
                self.reach += 1;
            }
        }
    }

    /// How many ids, from 0, have their own number as their subscriber: below it an id is
    /// its value, with nothing to read. That is the common case of int subscribers numbered
    /// in the order they first subscribe (the dictionary indices of a Spark job's names, rows
    /// of `lookup_arrow`'s `names`), where reading each id's word was a sixth of a batch.
    pub(crate) fn same_below(&self) -> usize {
        self.holes.first().map_or(self.reach, |&hole| hole as usize)
    }

    pub(crate) fn get(&self, id: SubscriberId) -> IntValue {
        match self.words.get(id as usize).copied().unwrap_or(RELEASED) {
            RELEASED => IntValue::Released,
            NOT_INT => IntValue::NotInt,
            MARKER => IntValue::Int(self.markers[&id]),
            v => IntValue::Int(v),
        }
    }

    /// Appends the values of `ids` to `values`, leaving released ids out; returns the first id
    /// whose subscriber is not an int, after appending the rest.
    pub(crate) fn extend(
        &self,
        ids: &[SubscriberId],
        values: &mut Vec<i64>,
    ) -> Option<SubscriberId> {
        values.reserve(ids.len());
        let mut not_int = None;
        for &id in ids {
            match self.words.get(id as usize).copied().unwrap_or(RELEASED) {
                v if v > MARKER => values.push(v),
                _ => match self.get(id) {
                    IntValue::Int(v) => values.push(v),
                    IntValue::Released => {}
                    IntValue::NotInt => {
                        not_int.get_or_insert(id);
                    }
                },
            }
        }
        not_int
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The run counted the slow way: ids from 0 whose value is their own number.
    fn own_run(t: &IntTable) -> usize {
        (0..)
            .take_while(|&id: &SubscriberId| t.get(id) == IntValue::Int(i64::from(id)))
            .count()
    }

    #[test]
    fn ids_below_same_below_are_their_own_values() {
        let mut t = IntTable::default();
        assert_eq!(t.same_below(), 0);
        // Set out of order: the run grows once its gap is filled.
        t.set(1, IntValue::Int(1));
        assert_eq!(t.same_below(), 0);
        t.set(0, IntValue::Int(0));
        t.set(2, IntValue::Int(2));
        assert_eq!(t.same_below(), 3);
        // Any other value, a release included, ends the run at that id.
        t.set(3, IntValue::Int(30));
        assert_eq!(t.same_below(), 3);
        t.set(1, IntValue::Released);
        assert_eq!(t.same_below(), 1);
        t.set(1, IntValue::NotInt);
        assert_eq!(t.same_below(), 1);
        // Id 1 back to its own number: the run reaches the next id that is not.
        t.set(1, IntValue::Int(1));
        assert_eq!(t.same_below(), 3);
        t.set(3, IntValue::Int(3));
        assert_eq!(t.same_below(), 4);
        // A marker value inside the run, and an id far past it (the table grows).
        t.set(2, IntValue::Int(i64::MIN + 1));
        assert_eq!(t.same_below(), 2);
        t.set(1_000, IntValue::Int(1_000));
        assert_eq!(t.same_below(), 2);
        t.set(2, IntValue::Int(2));
        assert_eq!(t.same_below(), 4);
        t.set(0, IntValue::Int(-1));
        assert_eq!(t.same_below(), 0);
        for id in 0..4 {
            let want = if id == 0 { -1 } else { i64::from(id) };
            assert_eq!(t.get(id), IntValue::Int(want));
        }
    }

    fn value() -> impl Strategy<Value = IntValue> {
        prop_oneof![
            (-3i64..14).prop_map(IntValue::Int),
            (0i64..3).prop_map(|k| IntValue::Int(i64::MIN + k)),
            Just(IntValue::NotInt),
            Just(IntValue::Released),
        ]
    }

    proptest! {
        #[test]
        fn same_below_is_the_run_of_own_values_after_every_write(
            writes in proptest::collection::vec((0u32..12, value()), 0..200),
        ) {
            let mut t = IntTable::default();
            let mut model = std::collections::HashMap::new();
            for (id, v) in writes {
                t.set(id, v);
                model.insert(id, v);
                prop_assert_eq!(t.same_below(), own_run(&t));
                for (&id, &v) in &model {
                    prop_assert_eq!(t.get(id), v);
                }
            }
        }
    }
}
