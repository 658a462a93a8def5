//! Each id's subscriber as an `i64`, for `lookup_arrow`: one word an id.
//!
//! An id's word is its subscriber's value when that is an int that fits, except that the three
//! lowest `i64`s are markers: the id is released, its subscriber is not an int, or its value is
//! itself one of the three and sits in a side map. A lookup reads one word per subscriber and
//! compares it once; a two-word enum per id doubled the table's cache lines, which a batch of
//! 31 subscribers a topic reads at random. Tested from Python
//! (`tests/python/test_arrow.py`: the int64 edges, released and reused ids, ids that are
//! their own values).

use std::collections::HashMap;

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
    /// Every id below this one has its own number as its subscriber ([`IntTable::same_below`]).
    same: usize,
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
        if value == IntValue::Int(i64::from(id)) {
            while self.words.get(self.same) == Some(&(self.same as i64)) {
                self.same += 1;
            }
        } else {
            self.same = self.same.min(at);
        }
    }

    /// How many ids, from 0, have their own number as their subscriber: below it an id is
    /// its value, with nothing to read. That is the common case of int subscribers numbered
    /// in the order they first subscribe (the dictionary indices of a Spark job's names, rows
    /// of `lookup_arrow`'s `names`), where reading each id's word was a sixth of a batch.
    pub(crate) fn same_below(&self) -> usize {
        self.same
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
    use super::*;

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
        t.set(0, IntValue::Int(-1));
        assert_eq!(t.same_below(), 0);
        for id in 0..4 {
            let want = if id == 0 { -1 } else { i64::from(id) };
            assert_eq!(t.get(id), IntValue::Int(want));
        }
    }
}
