//! Soundness of the URI-template reversal: for random templates (every operator and modifier)
//! and random values (undefined, strings, lists, associative arrays, with characters that
//! must be percent-encoded), the expansion that RFC 6570 Appendix A defines is admitted by the
//! template's selector. The expander below is a direct reading of Appendix A, written for this
//! test.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use topicmatch::Selector;

#[derive(Clone, Debug)]
enum Value {
    Undef,
    Str(String),
    List(Vec<String>),
    Assoc(Vec<(String, String)>),
}

#[derive(Clone, Debug)]
enum Modifier {
    None,
    Prefix(usize),
    Explode,
}

#[derive(Clone, Debug)]
enum Part {
    Literal(&'static str),
    Expr(char, Vec<(usize, Modifier)>),
}

const NAMES: &[&str] = &["x", "y", "long.name", "k_2"];

fn is_unreserved(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~".contains(c)
}

fn is_reserved(c: char) -> bool {
    ":/?#[]@!$&'()*+,;=".contains(c)
}

/// Appendix A `encode`: `reserved` is the U+R `allow` of `+` and `#`.
fn encode(s: &str, reserved: bool) -> String {
    let mut out = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    for c in s.chars() {
        let at = i;
        i += c.len_utf8();
        if is_unreserved(c) || (reserved && is_reserved(c)) {
            out.push(c);
        } else if reserved
            && c == '%'
            && b.len() >= at + 3
            && b[at + 1].is_ascii_hexdigit()
            && b[at + 2].is_ascii_hexdigit()
        {
            out.push('%'); // a triplet already in the value passes through
        } else {
            let mut buf = [0; 4];
            for byte in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    out
}

/// Appendix A, `(first, sep, named, ifemp, allow is U+R)` by operator.
fn row(op: char) -> (&'static str, &'static str, bool, &'static str, bool) {
    match op {
        ' ' => ("", ",", false, "", false),
        '+' => ("", ",", false, "", true),
        '#' => ("#", ",", false, "", true),
        '.' => (".", ".", false, "", false),
        '/' => ("/", "/", false, "", false),
        ';' => (";", ";", true, "", false),
        '?' => ("?", "&", true, "=", false),
        '&' => ("&", "&", true, "=", false),
        _ => unreachable!(),
    }
}

fn expand(parts: &[Part], values: &[Value]) -> String {
    let mut out = String::new();
    for part in parts {
        let (op, vars) = match part {
            Part::Literal(l) => {
                out.push_str(l);
                continue;
            }
            Part::Expr(op, vars) => (*op, vars),
        };
        let (first, sep, named, ifemp, reserved) = row(op);
        let mut is_first = true;
        for (var, modifier) in vars {
            let name = NAMES[*var];
            let value = &values[*var];
            match value {
                Value::Undef => continue,
                Value::List(l) if l.is_empty() => continue,
                Value::Assoc(a) if a.is_empty() => continue,
                _ => {}
            }
            out.push_str(if is_first { first } else { sep });
            is_first = false;
            let explode = matches!(modifier, Modifier::Explode);
            match value {
                Value::Undef => unreachable!(),
                Value::Str(s) => {
                    if named {
                        out.push_str(name);
                        if s.is_empty() {
                            out.push_str(ifemp);
                            continue;
                        }
                        out.push('=');
                    }
                    let s: String = match modifier {
                        Modifier::Prefix(n) => s.chars().take(*n).collect(),
                        _ => s.clone(),
                    };
                    out.push_str(&encode(&s, reserved));
                }
                Value::List(items) if !explode => {
                    if named {
                        out.push_str(name);
                        out.push('=');
                    }
                    let enc: Vec<String> = items.iter().map(|i| encode(i, reserved)).collect();
                    out.push_str(&enc.join(","));
                }
                Value::Assoc(pairs) if !explode => {
                    if named {
                        out.push_str(name);
                        out.push('=');
                    }
                    let enc: Vec<String> = pairs
                        .iter()
                        .map(|(k, v)| format!("{},{}", encode(k, reserved), encode(v, reserved)))
                        .collect();
                    out.push_str(&enc.join(","));
                }
                Value::List(items) => {
                    let enc: Vec<String> = items
                        .iter()
                        .map(|i| match (named, i.is_empty()) {
                            (true, true) => format!("{name}{ifemp}"),
                            (true, false) => format!("{name}={}", encode(i, reserved)),
                            (false, _) => encode(i, reserved),
                        })
                        .collect();
                    out.push_str(&enc.join(sep));
                }
                Value::Assoc(pairs) => {
                    let enc: Vec<String> = pairs
                        .iter()
                        .map(|(k, v)| match (named, v.is_empty()) {
                            (true, true) => format!("{}{ifemp}", encode(k, reserved)),
                            _ => format!("{}={}", encode(k, reserved), encode(v, reserved)),
                        })
                        .collect();
                    out.push_str(&enc.join(sep));
                }
            }
        }
    }
    out
}

fn template_text(parts: &[Part]) -> String {
    let mut out = String::new();
    for part in parts {
        match part {
            Part::Literal(l) => out.push_str(l),
            Part::Expr(op, vars) => {
                out.push('{');
                if *op != ' ' {
                    out.push(*op);
                }
                let specs: Vec<String> = vars
                    .iter()
                    .map(|(v, m)| match m {
                        Modifier::None => NAMES[*v].to_owned(),
                        Modifier::Prefix(n) => format!("{}:{n}", NAMES[*v]),
                        Modifier::Explode => format!("{}*", NAMES[*v]),
                    })
                    .collect();
                out.push_str(&specs.join(","));
                out.push('}');
            }
        }
    }
    out
}

fn string() -> impl Strategy<Value = String> {
    let chars = prop::sample::select(vec![
        'a', 'Z', '0', '-', '.', '_', '~', '/', '?', '#', '&', '=', ',', ';', ' ', '%', 'é', '€',
        '😀', ':', '!', '\'', '"',
    ]);
    prop_oneof![
        prop::collection::vec(chars, 0..6).prop_map(|v| v.into_iter().collect()),
        Just("%41".to_owned()),
    ]
}

fn value(prefixed: bool) -> BoxedStrategy<Value> {
    if prefixed {
        prop_oneof![Just(Value::Undef), string().prop_map(Value::Str)].boxed()
    } else {
        prop_oneof![
            Just(Value::Undef),
            string().prop_map(Value::Str),
            prop::collection::vec(string(), 0..4).prop_map(Value::List),
            prop::collection::vec((string(), string()), 0..4).prop_map(Value::Assoc),
        ]
        .boxed()
    }
}

fn parts() -> impl Strategy<Value = Vec<Part>> {
    let literal = prop::sample::select(vec!["https://example.com/users", "/", "a", "?q=1", "-"])
        .prop_map(Part::Literal);
    let modifier = prop_oneof![
        Just(Modifier::None),
        (1usize..6).prop_map(Modifier::Prefix),
        Just(Modifier::Explode),
    ];
    let expr = (
        prop::sample::select(vec![' ', '+', '#', '.', '/', ';', '?', '&']),
        prop::collection::vec((0..NAMES.len(), modifier), 1..5),
    )
        .prop_map(|(op, vars)| Part::Expr(op, vars));
    prop::collection::vec(prop_oneof![literal, expr], 1..5)
}

fn case() -> impl Strategy<Value = (Vec<Part>, Vec<Value>)> {
    parts().prop_flat_map(|parts| {
        let prefixed: Vec<bool> = (0..NAMES.len())
            .map(|v| {
                parts.iter().any(|p| match p {
                    Part::Expr(_, vars) => vars
                        .iter()
                        .any(|(w, m)| *w == v && matches!(m, Modifier::Prefix(_))),
                    Part::Literal(_) => false,
                })
            })
            .collect();
        let values: Vec<BoxedStrategy<Value>> = prefixed.into_iter().map(value).collect();
        (Just(parts), values)
    })
}

#[test]
fn every_expansion_of_a_random_template_is_admitted() {
    let mut runner = TestRunner::new(Config {
        cases: 5000,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&case(), |(parts, values)| {
        let text = template_text(&parts);
        let topic = expand(&parts, &values);
        let s = Selector::parse(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert!(s.admits(&topic), "{} does not admit {:?}", text, topic);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn the_expander_reproduces_rfc6570_examples() {
    let parts = [
        Part::Literal("X"),
        Part::Expr('.', vec![(0, Modifier::Explode)]),
    ];
    let v = [
        Value::List(vec!["red".into(), "green".into()]),
        Value::Undef,
        Value::Undef,
        Value::Undef,
    ];
    assert_eq!(expand(&parts, &v), "X.red.green");
    let parts = [Part::Expr(
        '?',
        vec![(0, Modifier::None), (1, Modifier::Prefix(3))],
    )];
    let v = [
        Value::Str("Hello World!".into()),
        Value::Str("value".into()),
        Value::Undef,
        Value::Undef,
    ];
    assert_eq!(expand(&parts, &v), "?x=Hello%20World%21&y=val");
    let parts = [Part::Expr('+', vec![(0, Modifier::None)])];
    let v = [
        Value::Str("50%25 /x".into()),
        Value::Undef,
        Value::Undef,
        Value::Undef,
    ];
    assert_eq!(expand(&parts, &v), "50%25%20/x");
}
