//! Vectors from the brokers' own test suites (tests/data/conformance/) against the reference
//! and every matcher.

mod common;

use topicmatch::{
    matches, CSTrie, Dialect, Error, InvertedBitmap, LazyDfa, LevelBitmap, Matcher, NaiveMatcher,
    Trie,
};

/// Decodes a field: `<empty>` is the empty string; `\\`, `\t`, `\n`, `\r`, `\f` and `\xHH`
/// are escapes (see the folder's README).
fn decode(field: &str) -> String {
    if field == "<empty>" {
        return String::new();
    }
    let mut out = String::new();
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                out.push(char::from(
                    u8::from_str_radix(&hex, 16).expect("bad \\x escape"),
                ));
            }
            other => panic!("unknown escape \\{other:?} in {field:?}"),
        }
    }
    out
}

fn rows(name: &str) -> Vec<Vec<String>> {
    let path = format!(
        "{}/tests/data/conformance/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).expect("conformance table");
    text.lines()
        .skip(1)
        .map(|l| l.split('\t').map(String::from).collect())
        .collect()
}

fn dialect(name: &str) -> Dialect {
    name.parse().expect("dialect")
}

#[test]
fn reference_agrees_with_the_brokers() {
    let rows = rows("match.tsv");
    assert!(rows.len() > 500);
    for r in &rows {
        let (d, p, t, expected) = (dialect(&r[0]), decode(&r[1]), decode(&r[2]), r[3].as_str());
        let got = matches(d, &p, &t);
        let ok = match expected {
            "match" => got == Ok(true),
            "nomatch" => got == Ok(false),
            "invalid_pattern" => matches!(got, Err(Error::InvalidPattern(_))),
            "invalid_topic" => matches!(got, Err(Error::InvalidTopic(_))),
            _ => panic!("unknown outcome {expected}"),
        };
        assert!(
            ok,
            "{d} {p:?} ~ {t:?}: expected {expected}, got {got:?} ({})",
            r[4]
        );
    }
}

#[test]
fn validation_agrees_with_the_brokers() {
    for r in rows("valid.tsv") {
        let (d, text, valid) = (dialect(&r[0]), decode(&r[2]), r[3] == "valid");
        let got = match r[1].as_str() {
            "pattern" => d.parse_pattern(&text).is_ok(),
            _ => d.parse_topic(&text).is_ok(),
        };
        assert_eq!(got, valid, "{d} {} {text:?} ({})", r[1], r[4]);
    }
}

#[test]
fn every_matcher_agrees_with_the_brokers() {
    let makers: Vec<common::Factory> = vec![
        |d| Box::new(NaiveMatcher::new(d)) as Box<dyn Matcher>,
        |d| Box::new(Trie::new(d)) as Box<dyn Matcher>,
        |d| Box::new(CSTrie::new(d)) as Box<dyn Matcher>,
        |d| Box::new(InvertedBitmap::new(d)) as Box<dyn Matcher>,
        |d| Box::new(InvertedBitmap::with_cache_size(d, 2)) as Box<dyn Matcher>,
        |d| Box::new(LevelBitmap::new(d)) as Box<dyn Matcher>,
        |d| Box::new(LazyDfa::new(d)) as Box<dyn Matcher>,
        // Too small for the table's states: lookups flush and simulate the NFA.
        |d| Box::new(LazyDfa::with_budget(d, 400)) as Box<dyn Matcher>,
    ];
    let rows = rows("match.tsv");
    for make in makers {
        for d in Dialect::ALL {
            let m = make(d);
            let mine: Vec<_> = rows
                .iter()
                .filter(|r| dialect(&r[0]) == d && r[3].ends_with("match"))
                .collect();
            for (i, r) in mine.iter().enumerate() {
                m.subscribe_str(&decode(&r[1]), i as u32).unwrap();
            }
            for (i, r) in mine.iter().enumerate() {
                let got = m.lookup_str(&decode(&r[2])).unwrap().contains(&(i as u32));
                assert_eq!(
                    got,
                    r[3] == "match",
                    "{d} {:?} ~ {:?} ({})",
                    r[1],
                    r[2],
                    r[4]
                );
            }
        }
    }
}

/// nats-server's rune check (`isValidSubject` with `checkRunes`, `TestSublistValidSubjects`)
/// and the NATS documentation ("any ASCII character except null"): a NUL anywhere in a subject
/// or pattern is invalid, at every place checked here; `valid.tsv` holds two such rows
/// (`\x00`), as the sources state them.
#[test]
fn nats_rejects_nul_as_its_rune_check_does() {
    let d = Dialect::Nats;
    for text in ["foo\0bar", "\0", "foo.\0", "foo.*.\0bar", "foo.>\0"] {
        assert!(d.check_pattern(text).is_err(), "{text:?} as a pattern");
    }
    for text in ["foo\0bar", "\0", "foo.\0"] {
        assert!(d.parse_topic(text).is_err(), "{text:?} as a subject");
    }
    assert!(d.check_pattern("foo.bar").is_ok());
}
