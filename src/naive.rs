//! `NaiveMatcher`: a map from pattern to subscribers, every pattern tested on every lookup.
//! The test oracle and the baseline: simple enough to be obviously right.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

use crate::dialect::{Dialect, Pattern, Topic};
use crate::matcher::{Matcher, SubscriberId};
use crate::reference::pattern_matches;

/// Scans every pattern on every lookup.
#[derive(Debug, Default)]
pub struct NaiveMatcher {
    dialect: Dialect,
    state: RwLock<State>,
}

#[derive(Debug, Default)]
struct State {
    patterns: HashMap<Box<str>, (Pattern, HashSet<SubscriberId>)>,
    len: usize,
}

impl NaiveMatcher {
    /// An empty matcher for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        NaiveMatcher {
            dialect,
            state: RwLock::default(),
        }
    }
}

impl Matcher for NaiveMatcher {
    fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn subscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        assert_eq!(
            pattern.dialect(),
            self.dialect,
            "pattern of another dialect"
        );
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let entry = state
            .patterns
            .entry(pattern.text().into())
            .or_insert_with(|| (pattern.clone(), HashSet::new()));
        let new = entry.1.insert(id);
        state.len += usize::from(new);
        new
    }

    fn unsubscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        assert_eq!(
            pattern.dialect(),
            self.dialect,
            "pattern of another dialect"
        );
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let Some((_, subs)) = state.patterns.get_mut(pattern.text()) else {
            return false;
        };
        let removed = subs.remove(&id);
        if subs.is_empty() {
            state.patterns.remove(pattern.text());
        }
        state.len -= usize::from(removed);
        removed
    }

    fn contains(&self, pattern: &str, id: SubscriberId) -> bool {
        // Only valid patterns are ever keys.
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state
            .patterns
            .get(pattern)
            .is_some_and(|(_, subs)| subs.contains(&id))
    }

    fn lookup_into(&self, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        assert_eq!(topic.dialect(), self.dialect, "topic of another dialect");
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut found: HashSet<SubscriberId> = HashSet::new();
        for (pattern, subs) in state.patterns.values() {
            if pattern_matches(pattern, topic) {
                found.extend(subs);
            }
        }
        out.extend(found);
    }

    fn remove_subscriber(&self, id: SubscriberId) -> usize {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let mut removed = 0;
        state.patterns.retain(|_, (_, subs)| {
            removed += usize::from(subs.remove(&id));
            !subs.is_empty()
        });
        state.len -= removed;
        removed
    }

    fn len(&self) -> usize {
        self.state.read().unwrap_or_else(|e| e.into_inner()).len
    }

    fn subscriptions(&self) -> Vec<(String, SubscriberId)> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut pairs = Vec::with_capacity(state.len);
        for (text, (_, subs)) in &state.patterns {
            pairs.extend(subs.iter().map(|&id| (text.to_string(), id)));
        }
        pairs
    }
}
