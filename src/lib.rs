//! Fast, concurrent topic matching for AMQP, MQTT and NATS subscriptions.
//!
//! A [`Matcher`] holds `(pattern, subscriber)` pairs and answers, for a message topic, which
//! subscribers want it. Every matcher implements the same trait and the same semantics, defined
//! once in [`reference`](mod@reference); they differ in how they trade memory, write cost and
//! lookup cost:
//!
//! | matcher | technique |
//! |---|---|
//! | [`NaiveMatcher`] | scans every pattern: the oracle and the baseline |
//! | [`Trie`] | word trie behind one `RwLock` (RabbitMQ, ZeroMQ, NATS sublist) |
//! | [`LazyDfa`] | lazy DFA over words, built while matching (RabbitMQ's topic-exchange study) |
//! | [`Cached`] | a result cache in front of any matcher (NATS sublist's cache) |
//!
//! ```
//! use topicmatch::{Dialect, Matcher, Trie};
//!
//! let m = Trie::new(Dialect::Mqtt);
//! m.subscribe_str("sensors/+/temp", 1).unwrap();
//! m.subscribe_str("sensors/#", 2).unwrap();
//! let mut ids = m.lookup_str("sensors/1/temp").unwrap();
//! ids.sort();
//! assert_eq!(ids, vec![1, 2]);
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "arrow")]
pub mod arrow;
pub mod bitmap;
mod bytes;
pub mod cache;
pub mod cstrie;
pub mod dfa;
pub mod dialect;
pub mod error;
pub mod groups;
pub mod matcher;
pub mod naive;
pub mod overlap;
pub mod reference;
pub mod selector;
pub mod store;
pub mod trie;

mod sync;

#[cfg(feature = "python")]
mod python;

pub use bitmap::{
    HeaderValue, HeadersMatcher, HeadersSubscription, InvertedBitmap, LevelBitmap, MatchMode,
};
pub use cache::Cached;
pub use cstrie::CSTrie;
pub use dfa::{DfaStats, LazyDfa};
pub use dialect::{Dialect, Pattern, Token, Topic};
pub use error::{Error, Invalid, Result};
pub use groups::{GroupMatch, Grouped};
pub use matcher::{AnswerStamp, Known, Matcher, SubscriberId};
pub use naive::NaiveMatcher;
pub use overlap::{intersects, subsumes};
pub use reference::matches;
pub use selector::{Selector, SelectorIndex, SelectorKind};
pub use store::TopicStore;
pub use trie::Trie;
