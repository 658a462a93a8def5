//! RFC 6570 URI templates (levels 1 to 4), compiled once into one anchored regular expression
//! that admits the expansions of the template.
//!
//! Sources: RFC 6570 "URI Template" (Gregorio et al., 2012): the grammar of §2, the expansion
//! rules of §3 and the operator table of Appendix A. The Mercure hub (Kévin Dunglas,
//! `dunglas/mercure`, `topic_selector.go`) matches a topic against a template by turning the
//! template into an anchored regular expression (`yosida95/uritemplate`, `Template.Regexp`);
//! this module does the same, with its own, stricter reversal of the expansion rules.
//!
//! # What a template admits
//!
//! A topic is admitted when some assignment of values (undefined, a string, a list or an
//! associative array, per RFC 6570 §2.3) to the template's variables expands to exactly the
//! topic. Each operator is reversed from its Appendix A row (`first`, `sep`, `named`, `ifemp`,
//! `allow`):
//!
//! - a value is a run of allowed characters (unreserved, plus reserved for `{+x}` and `{#x}`)
//!   and percent-encoded triplets; a non-exploded list or associative array joins its items
//!   with `,`; an exploded one joins them with the operator's separator, as `k=v` pairs for an
//!   associative array;
//! - named operators (`{;x}`, `{?x}`, `{&x}`) check the variable's name, and write `x` (`;`)
//!   or `x=` (`?`, `&`) for an empty value;
//! - every variable may be undefined, so every expression may expand to nothing, and the
//!   defined ones appear in template order, the first after the operator's prefix and the
//!   others after its separator;
//! - a prefix `{x:n}` admits a string of at most `n` characters, a character being one allowed
//!   character or one percent-encoded UTF-8 sequence (one to four triplets). RFC 6570 §2.4.1
//!   makes prefixes inapplicable to lists, so a prefixed variable is taken as a string.
//!
//! Limits of the reversal, all of them on the side of admitting more, never less:
//!
//! - a variable used twice (`{term:1}/{term}`) is matched independently at each use: a
//!   regular expression cannot check that both uses come from one value;
//! - a prefix longer than [`PREFIX_BOUND_MAX`] characters is not bounded, and an expression of
//!   more than [`EXACT_VARS_MAX`] variables whose prefix and separator differ (`{x,y,…}`,
//!   `{?x,y,…}`, `{#x,y,…}`) accepts either before any variable: both keep every compiled
//!   template small whatever a subscriber sends;
//! - `{;x}` also admits `;x=`, which only a list of one empty string expands to.
//!
//! Differences from the Mercure hub, whose regular expression ignores names and prefixes:
//! `{?x}` does not admit `?y=1` here, and `{var:3}` does not admit `value`. A template whose
//! syntax is wrong is an error here ([`crate::Error::InvalidPattern`]); Mercure falls back to
//! comparing it as a plain string.
//!
//! # Complexity
//!
//! Parsing is linear in the template. The regular expression is linear in the template's
//! length, except for expressions with different prefix and separator, which are quadratic in
//! their number of variables, at most [`EXACT_VARS_MAX`]; bounded prefixes add at most
//! [`PREFIX_BOUND_MAX`] copies of one character class. A template whose regular expression
//! would pass 4 MiB of source (checked while building it) or 1 MiB compiled is refused as too
//! large. Matching a topic is linear in the topic's length (the `regex` crate's guarantee).

use regex::{Regex, RegexBuilder};

use crate::error::{Error, Invalid, Result};

/// Prefixes up to this many characters are enforced; longer ones admit values of any length.
/// The bound keeps a compiled template small (a prefix unrolls into that many copies of one
/// character class in the automaton).
pub const PREFIX_BOUND_MAX: u16 = 64;

/// Expressions whose operator writes a different string before the first variable than
/// between variables (simple, `+`, `#`, `?`) are reversed exactly up to this many variables;
/// their regular expression grows with the square of the count.
pub const EXACT_VARS_MAX: usize = 8;

/// Compiled size limit of one template or `re:` regular expression, in bytes.
pub(crate) const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Longest regular-expression source a template may turn into, in bytes: checked while the
/// source is built, so that a huge template is refused before it costs time or memory.
const SOURCE_LIMIT: usize = 1 << 22;

/// Lazy-DFA cache limit of one regular expression, in bytes.
pub(crate) const REGEX_DFA_SIZE_LIMIT: usize = 1 << 18;

/// Unreserved characters (RFC 3986 §2.3), as the inside of a regex character class.
const UNRESERVED: &str = "\\-.0-9A-Z_a-z~";
/// Reserved characters (RFC 3986 §2.2), as the inside of a regex character class.
const RESERVED: &str = ":/?#\\[\\]@!$\\&'()*+,;=";
/// One percent-encoded triplet.
const PCT: &str = "%[0-9A-Fa-f]{2}";

/// The eight expression types of RFC 6570 (Appendix A), named after §3.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operator {
    /// `{x}`, §3.2.2.
    Simple,
    /// `{+x}`, §3.2.3.
    Reserved,
    /// `{#x}`, §3.2.4.
    Fragment,
    /// `{.x}`, §3.2.5.
    Label,
    /// `{/x}`, §3.2.6.
    PathSegment,
    /// `{;x}`, §3.2.7.
    PathParameter,
    /// `{?x}`, §3.2.8.
    Query,
    /// `{&x}`, §3.2.9.
    QueryContinuation,
}

/// One row of RFC 6570 Appendix A.
struct Row {
    first: &'static str,
    sep: &'static str,
    named: bool,
    ifemp: &'static str,
    /// `allow` is U+R (reserved characters pass unencoded) rather than U.
    reserved: bool,
}

impl Operator {
    fn from_char(c: char) -> Option<Operator> {
        Some(match c {
            '+' => Operator::Reserved,
            '#' => Operator::Fragment,
            '.' => Operator::Label,
            '/' => Operator::PathSegment,
            ';' => Operator::PathParameter,
            '?' => Operator::Query,
            '&' => Operator::QueryContinuation,
            _ => return None,
        })
    }

    fn row(self) -> Row {
        let (first, sep, named, ifemp, reserved) = match self {
            Operator::Simple => ("", ",", false, "", false),
            Operator::Reserved => ("", ",", false, "", true),
            Operator::Fragment => ("#", ",", false, "", true),
            Operator::Label => (".", ".", false, "", false),
            Operator::PathSegment => ("/", "/", false, "", false),
            Operator::PathParameter => (";", ";", true, "", false),
            Operator::Query => ("?", "&", true, "=", false),
            Operator::QueryContinuation => ("&", "&", true, "=", false),
        };
        Row {
            first,
            sep,
            named,
            ifemp,
            reserved,
        }
    }
}

/// A varspec's modifier (RFC 6570 §2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Modifier {
    None,
    /// `:n`, 1 to 9999.
    Prefix(u16),
    /// `*`.
    Explode,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct VarSpec {
    name: String,
    modifier: Modifier,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Expression { op: Operator, vars: Vec<VarSpec> },
}

fn invalid(text: &str, position: usize, reason: impl Into<String>) -> Error {
    Error::InvalidPattern(Invalid::new(None, text, position, reason))
}

/// Characters a template may hold outside expressions (RFC 6570 §2.1, `literals`), apart from
/// `%`, which must start a percent-encoded triplet.
fn is_literal(c: char) -> bool {
    let u = c as u32;
    matches!(
        u,
        0x21 | 0x23..=0x24 | 0x26 | 0x28..=0x3B | 0x3D | 0x3F..=0x5B | 0x5D | 0x5F | 0x61..=0x7A | 0x7E
    ) || is_ucschar(u)
        || is_iprivate(u)
}

/// RFC 3987 `ucschar`.
fn is_ucschar(u: u32) -> bool {
    matches!(u, 0xA0..=0xD7FF | 0xF900..=0xFDCF | 0xFDF0..=0xFFEF)
        || ((0x1_0000..=0xD_FFFF).contains(&u) && (u & 0xFFFF) <= 0xFFFD)
        || (0xE_1000..=0xE_FFFD).contains(&u)
}

/// RFC 3987 `iprivate`.
fn is_iprivate(u: u32) -> bool {
    matches!(u, 0xE000..=0xF8FF | 0xF_0000..=0xF_FFFD | 0x10_0000..=0x10_FFFD)
}

/// Whether `text[i..]` starts with a percent-encoded triplet.
fn pct_at(text: &str, i: usize) -> bool {
    let b = text.as_bytes();
    b.len() >= i + 3 && b[i] == b'%' && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit()
}

/// Parses a template (RFC 6570 §2).
fn parse(text: &str) -> Result<Vec<Part>> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut i = 0;
    while let Some(c) = text[i..].chars().next() {
        match c {
            '{' => {
                if !literal.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut literal)));
                }
                let (part, end) = parse_expression(text, i)?;
                parts.push(part);
                i = end;
            }
            '}' => return Err(invalid(text, i, "`}` outside an expression")),
            '%' => {
                if !pct_at(text, i) {
                    return Err(invalid(
                        text,
                        i,
                        "`%` not followed by two hexadecimal digits",
                    ));
                }
                literal.push_str(&text[i..i + 3]);
                i += 3;
            }
            c if is_literal(c) => {
                literal.push(c);
                i += c.len_utf8();
            }
            c => {
                return Err(invalid(
                    text,
                    i,
                    format!("character {c:?} not allowed in a URI template"),
                ))
            }
        }
    }
    if !literal.is_empty() {
        parts.push(Part::Literal(literal));
    }
    Ok(parts)
}

/// Parses the expression that opens at `text[open] == '{'`; returns it and the index after
/// its `}`.
fn parse_expression(text: &str, open: usize) -> Result<(Part, usize)> {
    let b = text.as_bytes();
    let unclosed = || invalid(text, open, "unclosed expression: `{` without `}`");
    let mut i = open + 1;
    let op = match b.get(i) {
        None => return Err(unclosed()),
        Some(b'}') => return Err(invalid(text, open, "empty expression `{}`")),
        Some(&c) if b"=,!@|".contains(&c) => {
            return Err(invalid(
                text,
                i,
                format!(
                    "operator `{}` is reserved by RFC 6570 for future extensions",
                    c as char
                ),
            ))
        }
        Some(&c) => match Operator::from_char(c as char) {
            Some(op) => {
                i += 1;
                op
            }
            None => Operator::Simple,
        },
    };
    let mut vars = Vec::new();
    loop {
        // varname = varchar *( ["."] varchar ); varchar = ALPHA / DIGIT / "_" / pct-encoded
        let start = i;
        let mut after_dot = true;
        loop {
            match b.get(i) {
                Some(c) if c.is_ascii_alphanumeric() || *c == b'_' => {
                    i += 1;
                    after_dot = false;
                }
                Some(b'%') => {
                    if !pct_at(text, i) {
                        return Err(invalid(
                            text,
                            i,
                            "`%` not followed by two hexadecimal digits",
                        ));
                    }
                    i += 3;
                    after_dot = false;
                }
                Some(b'.') => {
                    if after_dot {
                        return Err(invalid(
                            text,
                            i,
                            "a variable name cannot start with `.` or hold `..`",
                        ));
                    }
                    i += 1;
                    after_dot = true;
                }
                _ => break,
            }
        }
        if i == start {
            return Err(match b.get(i) {
                None => unclosed(),
                Some(_) => {
                    let c = text[i..].chars().next().unwrap_or('?');
                    invalid(text, i, format!("expected a variable name, found {c:?}"))
                }
            });
        }
        if after_dot {
            return Err(invalid(text, i - 1, "a variable name cannot end with `.`"));
        }
        let name = text[start..i].to_owned();
        let modifier = match b.get(i) {
            Some(b'*') => {
                i += 1;
                Modifier::Explode
            }
            Some(b':') => {
                i += 1;
                let digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
                let n: u32 = text[i..i + digits].parse().unwrap_or(0);
                if digits == 0 || digits > 4 || b[i] == b'0' || n == 0 {
                    return Err(invalid(
                        text,
                        i,
                        "a prefix length must be a number from 1 to 9999",
                    ));
                }
                i += digits;
                Modifier::Prefix(n as u16)
            }
            _ => Modifier::None,
        };
        vars.push(VarSpec { name, modifier });
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => return Ok((Part::Expression { op, vars }, i + 1)),
            None => return Err(unclosed()),
            Some(_) => {
                let c = text[i..].chars().next().unwrap_or('?');
                return Err(invalid(
                    text,
                    i,
                    format!("expected `,` or `}}` after a variable, found {c:?}"),
                ));
            }
        }
    }
}

/// The pieces of regular expression one operator's values are made of.
struct Classes {
    /// One character of a value: allowed character or percent-encoded triplet.
    unit: String,
    /// One character of a value or a list's `,`.
    unit_or_comma: String,
    /// One character of a prefixed string (a percent-encoded UTF-8 sequence counts once).
    prefix_unit: String,
}

impl Classes {
    fn new(reserved: bool) -> Classes {
        let allow = if reserved {
            format!("{UNRESERVED}{RESERVED}")
        } else {
            UNRESERVED.to_owned()
        };
        Classes {
            unit: format!("(?:[{allow}]|{PCT})"),
            unit_or_comma: format!("(?:[{allow},]|{PCT})"),
            prefix_unit: format!("(?:[{allow}]|(?:{PCT}){{1,4}})"),
        }
    }

    /// A string of at most `n` characters, or of any length past [`PREFIX_BOUND_MAX`].
    fn prefixed(&self, n: u16) -> String {
        if n <= PREFIX_BOUND_MAX {
            format!("{}{{0,{n}}}", self.prefix_unit)
        } else {
            format!("{}*", self.unit)
        }
    }
}

/// The regular expression of one defined variable of an expression (RFC 6570 Appendix A,
/// without the `first` / `sep` written before it).
fn var_regex(row: &Row, cls: &Classes, var: &VarSpec) -> String {
    let u = &cls.unit;
    let sep = regex::escape(row.sep);
    let value = match var.modifier {
        Modifier::Prefix(n) => cls.prefixed(n),
        _ => format!("{}*", cls.unit_or_comma),
    };
    match (row.named, var.modifier) {
        // A string, or a list / associative array joined with `,`.
        (false, Modifier::None | Modifier::Prefix(_)) => value,
        // A list joined with `sep`, or `k=v` pairs joined with `sep`.
        (false, Modifier::Explode) => {
            format!("(?:{u}*(?:{sep}{u}*)*|{u}*={u}*(?:{sep}{u}*={u}*)*)")
        }
        // `name=value`, or `name` + ifemp for an empty value.
        (true, Modifier::None | Modifier::Prefix(_)) => {
            let name = regex::escape(&var.name);
            if row.ifemp.is_empty() {
                format!("{name}(?:={value})?")
            } else {
                format!("{name}={value}")
            }
        }
        // `name=item` per list item, or `key=value` per pair; `k` + ifemp for an empty value.
        (true, Modifier::Explode) => {
            let pair = if row.ifemp.is_empty() {
                format!("{u}*(?:={u}*)?")
            } else {
                format!("{u}*={u}*")
            };
            format!("{pair}(?:{sep}{pair})*")
        }
    }
}

/// Appends the regular expression of one expression to `out`: nothing, or the defined
/// variables in order, the first after `first` and the others after `sep`. `None` once `out`
/// passes [`SOURCE_LIMIT`].
fn expression_regex(op: Operator, vars: &[VarSpec], out: &mut String) -> Option<()> {
    let row = op.row();
    let cls = Classes::new(row.reserved);
    let vs: Vec<String> = vars.iter().map(|v| var_regex(&row, &cls, v)).collect();
    let first = regex::escape(row.first);
    let sep = regex::escape(row.sep);
    let push = |out: &mut String, piece: &str| {
        out.push_str(piece);
        (out.len() <= SOURCE_LIMIT).then_some(())
    };
    if row.first == row.sep {
        // Each defined variable is written after the same string: exact and linear.
        for v in &vs {
            push(out, &format!("(?:{sep}{v})?"))?;
        }
    } else if vs.len() <= EXACT_VARS_MAX {
        // Which variable is the first defined one: exact, quadratic in the count.
        push(out, &format!("(?:{first}(?:"))?;
        for (i, v) in vs.iter().enumerate() {
            if i > 0 {
                push(out, "|")?;
            }
            push(out, v)?;
            for w in &vs[i + 1..] {
                push(out, &format!("(?:{sep}{w})?"))?;
            }
        }
        push(out, "))?")?;
    } else {
        // Linear over-approximation: either string before any variable.
        for v in &vs {
            push(out, &format!("(?:(?:{first}|{sep}){v})?"))?;
        }
    }
    Some(())
}

/// The anchored regular expression source of a parsed template; `None` if it would pass
/// [`SOURCE_LIMIT`].
fn regex_source(parts: &[Part]) -> Option<String> {
    let mut out = String::from("\\A");
    for part in parts {
        match part {
            Part::Literal(l) => out.push_str(&regex::escape(l)),
            Part::Expression { op, vars } => expression_regex(*op, vars, &mut out)?,
        }
        if out.len() > SOURCE_LIMIT {
            return None;
        }
    }
    out.push_str("\\z");
    Some(out)
}

/// Builds a regular expression with the size limits every selector uses.
pub(crate) fn build_regex(source: &str) -> std::result::Result<Regex, regex::Error> {
    RegexBuilder::new(source)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_DFA_SIZE_LIMIT)
        .build()
}

/// Checks `text` as a URI template: `Ok` if it parses and compiles, else
/// [`crate::Error::InvalidPattern`] with the reason and the byte at fault. A selector that
/// fails it is still a selector (one that admits only its own text, as in Mercure); this tells
/// a hub, or a user, why it is not a template.
pub fn check(text: &str) -> Result<()> {
    compile(text).map(drop)
}

/// Parses `text` as a URI template and compiles it into an anchored regular expression.
pub(crate) fn compile(text: &str) -> Result<Regex> {
    let parts = parse(text)?;
    let too_large = |limit: usize| {
        invalid(
            text,
            0,
            format!("URI template too large to compile (over {limit} bytes)"),
        )
    };
    let source = regex_source(&parts).ok_or_else(|| too_large(SOURCE_LIMIT))?;
    build_regex(&source).map_err(|e| match e {
        regex::Error::CompiledTooBig(limit) => too_large(limit),
        other => invalid(text, 0, format!("URI template did not compile: {other}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_splits_literals_and_expressions() {
        let parts = parse("a/{+b,c:3}/{?d*}").unwrap();
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[0], Part::Literal("a/".into()));
        assert_eq!(
            parts[1],
            Part::Expression {
                op: Operator::Reserved,
                vars: vec![
                    VarSpec {
                        name: "b".into(),
                        modifier: Modifier::None
                    },
                    VarSpec {
                        name: "c".into(),
                        modifier: Modifier::Prefix(3)
                    },
                ]
            }
        );
        assert_eq!(
            parts[3],
            Part::Expression {
                op: Operator::Query,
                vars: vec![VarSpec {
                    name: "d".into(),
                    modifier: Modifier::Explode
                }]
            }
        );
    }

    #[test]
    fn dotted_and_encoded_variable_names_parse() {
        assert!(parse("{a.b.c}").is_ok());
        assert!(parse("{a%20b}").is_ok());
        assert!(parse("{.a}").is_ok()); // label operator, name `a`
    }
}
