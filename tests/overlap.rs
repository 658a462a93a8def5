//! `intersects` and `subsumes` against brute force: every topic of up to six words over an
//! alphabet that holds the patterns' literals, a `$` word and a word no pattern names, checked
//! with the reference matcher, in every dialect.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use topicmatch::{intersects, reference, subsumes, Dialect, Pattern, Topic};

/// The words topics are made of: `$s` shows the MQTT rule, `z` is named by no pattern.
const WORDS: [&str; 4] = ["a", "b", "$s", "z"];
/// The longest topic tried: longer than two patterns of up to three tokens need for a witness.
const MAX_WORDS: usize = 6;

/// Every valid topic of `d` of up to [`MAX_WORDS`] words over [`WORDS`].
fn topics(d: Dialect) -> Vec<String> {
    let sep = (d.separator() as char).to_string();
    let mut all = vec![String::new()];
    let mut layer = vec![Vec::<&str>::new()];
    for _ in 0..MAX_WORDS {
        layer = layer
            .iter()
            .flat_map(|t| {
                WORDS.iter().map(move |w| {
                    let mut t = t.clone();
                    t.push(w);
                    t
                })
            })
            .collect();
        all.extend(layer.iter().map(|t| t.join(&sep)));
    }
    all.into_iter()
        .filter(|t| d.parse_topic(t).is_ok())
        .collect()
}

/// Patterns of up to three tokens: literals, `$s`, and the dialect's wildcards.
fn pattern(d: Dialect) -> impl Strategy<Value = Pattern> {
    let token = prop::sample::select(vec!["a", "b", "$s", "1", "M"]);
    prop::collection::vec(token, 0..=3).prop_filter_map("invalid pattern", move |ts| {
        let sep = (d.separator() as char).to_string();
        let text = ts
            .iter()
            .map(|t| match *t {
                "1" => d.one_word(),
                "M" => d.many_words(),
                w => w,
            })
            .collect::<Vec<_>>()
            .join(&sep);
        d.parse_pattern(&text).ok()
    })
}

#[test]
fn intersects_and_subsumes_equal_brute_force_in_every_dialect() {
    for d in Dialect::ALL {
        let topics = topics(d);
        let topics: Vec<Topic<'_>> = topics.iter().map(|t| d.parse_topic(t).unwrap()).collect();
        let mut runner = TestRunner::new(Config {
            cases: 600,
            failure_persistence: None,
            ..Config::default()
        });
        let result = runner.run(&(pattern(d), pattern(d)), |(a, b)| {
            let (ma, mb): (Vec<bool>, Vec<bool>) = topics
                .iter()
                .map(|t| {
                    (
                        reference::pattern_matches(&a, t),
                        reference::pattern_matches(&b, t),
                    )
                })
                .unzip();
            let both = ma.iter().zip(&mb).any(|(&x, &y)| x && y);
            let covers = ma.iter().zip(&mb).all(|(&x, &y)| x || !y);
            prop_assert_eq!(intersects(&a, &b), both, "{} meets {}", a.text(), b.text());
            prop_assert_eq!(
                subsumes(&a, &b).unwrap(),
                covers,
                "{} covers {}",
                a.text(),
                b.text()
            );
            Ok(())
        });
        if let Err(e) = result {
            panic!("{d}: {e}");
        }
    }
}
