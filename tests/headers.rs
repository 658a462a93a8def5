//! `HeadersMatcher` equals a brute-force evaluation of RabbitMQ's headers-exchange rules on
//! random subscriptions, writes and headers, of text and of typed values; and a table of the
//! typed-value cases, each with the broker source or test that states the fact and what Qpid
//! and LavinMQ do instead (docs/headers.md).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use proptest::prelude::*;
use topicmatch::bitmap::{HeaderValue, HeaderValueRef};
use topicmatch::{HeadersMatcher, HeadersSubscription, MatchMode, SubscriberId};

type Criterion = (String, Option<String>);

/// Few names and values, so criteria and headers collide often; `x-` names and `x-match`.
const NAMES: &[&str] = &["a", "b", "c", "x-a", "x-match"];
const VALUES: &[&str] = &["1", "2", ""];

fn criterion() -> impl Strategy<Value = Criterion> {
    (
        prop::sample::select(NAMES),
        prop::option::weighted(0.7, prop::sample::select(VALUES)),
    )
        .prop_map(|(n, v)| (n.to_string(), v.map(str::to_string)))
}

fn mode() -> impl Strategy<Value = MatchMode> {
    prop::sample::select(MatchMode::ALL.to_vec())
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let mut names = NAMES.to_vec();
    names.push("d");
    prop::collection::vec(
        (prop::sample::select(names), prop::sample::select(VALUES))
            .prop_map(|(n, v)| (n.to_string(), v.to_string())),
        0..5,
    )
}

#[derive(Clone, Debug)]
enum Op {
    Subscribe(Vec<Criterion>, SubscriberId, MatchMode),
    Unsubscribe(Vec<Criterion>, SubscriberId, MatchMode),
    RemoveSubscriber(SubscriberId),
    Lookup(Vec<(String, String)>),
}

fn op() -> impl Strategy<Value = Op> {
    let crit = || prop::collection::vec(criterion(), 0..4);
    prop_oneof![
        4 => (crit(), 0..5u32, mode()).prop_map(|(c, s, m)| Op::Subscribe(c, s, m)),
        2 => (crit(), 0..5u32, mode()).prop_map(|(c, s, m)| Op::Unsubscribe(c, s, m)),
        1 => (0..5u32).prop_map(Op::RemoveSubscriber),
        6 => headers().prop_map(Op::Lookup),
    ]
}

/// A map from name to value, a later value replacing an earlier one, sorted by name.
fn as_map<V: Clone>(pairs: &[(String, V)]) -> Vec<(String, V)> {
    let map: BTreeMap<String, V> = pairs.iter().cloned().collect();
    map.into_iter().collect()
}

/// RabbitMQ's rules, written out plainly.
fn brute_hits(
    criteria: &[Criterion],
    mode: MatchMode,
    headers: &HashMap<&str, &str>,
) -> (bool, u32) {
    let with_x = matches!(mode, MatchMode::AllWithX | MatchMode::AnyWithX);
    let counted: Vec<&Criterion> = criteria
        .iter()
        .filter(|(n, _)| n != "x-match" && (with_x || !n.starts_with("x-")))
        .collect();
    let hits = counted
        .iter()
        .filter(|(n, v)| match v {
            None => headers.contains_key(n.as_str()),
            Some(v) => headers.get(n.as_str()) == Some(&v.as_str()),
        })
        .count();
    let matched = match mode {
        MatchMode::All | MatchMode::AllWithX => hits == counted.len(),
        MatchMode::Any | MatchMode::AnyWithX => hits >= 1,
    };
    (matched, hits as u32)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn headers_matcher_equals_brute_force(ops in prop::collection::vec(op(), 1..80)) {
        let m = HeadersMatcher::new();
        let mut model: BTreeSet<(Vec<Criterion>, MatchMode, SubscriberId)> = BTreeSet::new();
        for op in &ops {
            match op {
                Op::Subscribe(c, s, mode) => {
                    let new = model.insert((as_map(c), *mode, *s));
                    prop_assert_eq!(m.subscribe(c, *s, *mode), new);
                }
                Op::Unsubscribe(c, s, mode) => {
                    let was = model.remove(&(as_map(c), *mode, *s));
                    prop_assert_eq!(m.unsubscribe(c, *s, *mode), was);
                }
                Op::RemoveSubscriber(s) => {
                    let before = model.len();
                    model.retain(|(_, _, id)| id != s);
                    prop_assert_eq!(m.remove_subscriber(*s), before - model.len());
                }
                Op::Lookup(h) => {
                    let refs: Vec<(&str, &str)> = h.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                    let map: HashMap<&str, &str> = refs.iter().copied().collect();
                    let mut want: BTreeSet<SubscriberId> = BTreeSet::new();
                    let mut best: BTreeMap<SubscriberId, u32> = BTreeMap::new();
                    for (c, mode, id) in &model {
                        let (matched, hits) = brute_hits(c, *mode, &map);
                        if matched {
                            want.insert(*id);
                        }
                        if hits > 0 {
                            let b = best.entry(*id).or_insert(0);
                            *b = (*b).max(hits);
                        }
                    }
                    prop_assert_eq!(m.lookup(&refs), want.into_iter().collect::<Vec<_>>(), "lookup {:?}", h);
                    prop_assert_eq!(m.hits(&refs), best.into_iter().collect::<Vec<_>>(), "hits {:?}", h);
                }
            }
            prop_assert_eq!(m.len(), model.len());
        }
        let want: Vec<HeadersSubscription> = model
            .iter()
            .map(|(c, mode, id)| HeadersSubscription {
                criteria: c.iter().map(|(n, v)| (n.clone(), v.clone().map(HeaderValue::Str))).collect(),
                mode: *mode,
                subscriber: *id,
            })
            .collect();
        let mut want = want;
        want.sort();
        prop_assert_eq!(m.subscriptions(), want);
    }
}

// ------------------------------------------------------------------------------ typed values

use HeaderValue as V;

fn s(text: &str) -> V {
    V::Str(text.to_string())
}

fn b(bytes: &[u8]) -> V {
    V::Bytes(bytes.to_vec())
}

fn table(pairs: &[(&str, V)]) -> V {
    V::Table(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    )
}

/// One row: a subscription's criteria and mode, a message's headers, whether the message
/// matches, and the broker source or test that says so (see docs/headers.md for Qpid's and
/// LavinMQ's answers where they differ).
struct Case {
    name: &'static str,
    criteria: Vec<(&'static str, Option<V>)>,
    headers: Vec<(&'static str, V)>,
    mode: MatchMode,
    matches: bool,
    source: &'static str,
}

const RMQ_MATCH: &str = "rabbit_exchange_type_headers.erl match/2: maps:get(K, Headers) =:= V, \
                         the field type dropped by mc_amqpl:routing_headers/2";
const RMQ_PARSE: &str = "rabbit_binary_parser:parse_table/1: nested tables and arrays keep \
                         {Type, Value}";

#[rustfmt::skip] // a table, one case a row
fn cases() -> Vec<Case> {
    use MatchMode::{All, AllWithX, Any};
    let case = |name, criteria, headers, mode, matches, source| Case {
        name,
        criteria,
        headers,
        mode,
        matches,
        source,
    };
    vec![
        case("int_widths_equal_by_value", vec![("k", Some(V::Int(5)))], vec![("k", V::Int(5))], All, true,
             "amqp_client_SUITE dead_letter_headers_exchange: binding uint 5 routes message long 5 (Qpid: Integer vs Long differ; LavinMQ: equal)"),
        case("int_is_not_its_string", vec![("k", Some(V::Int(5)))], vec![("k", s("5"))], All, false, RMQ_MATCH),
        case("int_is_not_a_bool", vec![("k", Some(V::Int(1)))], vec![("k", V::Bool(true))], All, false, RMQ_MATCH),
        case("bool_is_not_an_int", vec![("k", Some(V::Bool(true)))], vec![("k", V::Int(1))], All, false, RMQ_MATCH),
        case("bool_equals_bool", vec![("k", Some(V::Bool(true)))], vec![("k", V::Bool(true))], All, true, RMQ_MATCH),
        case("int_is_not_a_float", vec![("k", Some(V::Int(1)))], vec![("k", V::Float(1.0))], All, false,
             "=:= since RabbitMQ 3.13 (3.12's == said equal; LavinMQ: equal; Qpid: differ)"),
        case("float_equals_float", vec![("k", Some(V::Float(1.5)))], vec![("k", V::Float(1.5))], All, true, RMQ_MATCH),
        case("zero_is_not_minus_zero", vec![("k", Some(V::Float(0.0)))], vec![("k", V::Float(-0.0))], All, false,
             "0.0 =:= -0.0 is false from OTP 27 (true before; LavinMQ: equal; Qpid: Double.equals differ)"),
        case("nan_equals_nan", vec![("k", Some(V::Float(f64::NAN)))], vec![("k", V::Float(f64::NAN))], All, true,
             "RabbitMQ cannot decode a NaN; Qpid's Double.equals: equal; LavinMQ: never"),
        case("str_equals_its_bytes", vec![("k", Some(s("a")))], vec![("k", b(b"a"))], All, true,
             "parse_table/1: longstr and byte array are both binaries (Qpid, LavinMQ: differ)"),
        case("bytes_equal_their_str", vec![("k", Some(b(b"a")))], vec![("k", s("a"))], All, true,
             "parse_table/1: longstr and byte array are both binaries (Qpid, LavinMQ: differ)"),
        case("bytes_equal_bytes", vec![("k", Some(b(b"a")))], vec![("k", b(b"a"))], All, true,
             "binaries =:= (Qpid: byte[] equals is identity, never; LavinMQ: equal)"),
        case("bytes_compare_to_utf8", vec![("k", Some(b(b"\xff")))], vec![("k", s("\u{ff}"))], All, false,
             "a str is its UTF-8 bytes: \u{ff} is C3 BF"),
        case("presence_takes_any_value", vec![("k", None)], vec![("k", s("x"))], All, true,
             "exchanges_SUITE headers_exchange_key_presence_only (LavinMQ: a void criterion matches only void)"),
        case("presence_takes_void", vec![("k", None)], vec![("k", V::Void)], All, true,
             "match/2: {K, void, _} is maps:is_key"),
        case("presence_needs_the_name", vec![("k", None)], vec![("j", s("x"))], All, false,
             "exchanges_SUITE headers_exchange_key_presence_only msg4"),
        case("a_value_is_not_void", vec![("k", Some(s("x")))], vec![("k", V::Void)], All, false, RMQ_MATCH),
        case("empty_string_is_a_value", vec![("k", Some(s("")))], vec![("k", s("x"))], All, false,
             "RabbitMQ compares \"\" as a value (Qpid: \"\" means present)"),
        case("arrays_equal", vec![("k", Some(V::Array(vec![V::Int(1), s("a")])))],
             vec![("k", V::Array(vec![V::Int(1), s("a")]))], All, true,
             "decoded lists =:= (Qpid: FieldArray equals is identity, never)"),
        case("array_order_counts", vec![("k", Some(V::Array(vec![V::Int(1), s("a")])))],
             vec![("k", V::Array(vec![s("a"), V::Int(1)]))], All, false, RMQ_PARSE),
        case("nested_str_is_not_nested_bytes", vec![("k", Some(V::Array(vec![s("a")])))],
             vec![("k", V::Array(vec![b(b"a")]))], All, false,
             "parse_array/1: {longstr, V} vs {binary, V}, as pika sends str and bytes"),
        case("nested_int_is_not_nested_float", vec![("k", Some(V::Array(vec![V::Int(1)])))],
             vec![("k", V::Array(vec![V::Float(1.0)]))], All, false,
             "parse_array/1 keeps the type (LavinMQ: equal)"),
        case("tables_equal", vec![("k", Some(table(&[("a", V::Int(1)), ("b", V::Int(2))])))],
             vec![("k", table(&[("a", V::Int(1)), ("b", V::Int(2))]))], All, true,
             "message_routing_spec.cr \"should match nestled amq-protocol tables\" (Qpid: a Map never equals a FieldTable)"),
        case("table_order_counts", vec![("k", Some(table(&[("a", V::Int(1)), ("b", V::Int(2))])))],
             vec![("k", table(&[("b", V::Int(2)), ("a", V::Int(1))]))], All, false,
             "parse_table/1 keeps wire order; only binding args are sorted, at the top (LavinMQ: Table#== ignores order)"),
        case("nested_void_is_a_value", vec![("k", Some(table(&[("a", V::Void)])))],
             vec![("k", table(&[("a", V::Int(1))]))], All, false, RMQ_PARSE),
        case("nested_void_equals_void", vec![("k", Some(table(&[("a", V::Void)])))],
             vec![("k", table(&[("a", V::Void)]))], All, true, RMQ_PARSE),
        case("long_ints", vec![("k", Some(V::Int(1 << 40)))], vec![("k", V::Int(1 << 40))], All, true, RMQ_MATCH),
        case("any_without_counted_criteria_matches_nothing", vec![], vec![("k", V::Int(1))], Any, false,
             "match_any([], ...) is false (Qpid: matches everything)"),
        case("all_of_only_x_matches_a_message_without_headers", vec![("x-k", Some(V::Int(1)))], vec![], All, true,
             "match_all([], ...) is true (LavinMQ spec: \"matches any non-empty headers but not empty headers when args only have x- keys\")"),
        case("x_criteria_count_with_x", vec![("x-k", Some(V::Int(1)))], vec![("x-k", V::Int(1))], AllWithX, true,
             "match_x/2 (Qpid: x- always ignored; LavinMQ: all-with-x refused)"),
        case("x_criteria_fail_with_x", vec![("x-k", Some(V::Int(1)))], vec![("x-k", V::Int(2))], AllWithX, false,
             "match_x/2 (Qpid: x- ignored, so it matches)"),
        case("typed_all", vec![("k", Some(V::Int(5))), ("j", Some(s("a")))],
             vec![("k", V::Int(5)), ("j", b(b"a")), ("z", V::Bool(true))], All, true, RMQ_MATCH),
    ]
}

#[test]
fn typed_values_compare_as_rabbitmq_compares_them() {
    for c in cases() {
        let m = HeadersMatcher::new();
        let criteria: Vec<(String, Option<V>)> = c
            .criteria
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect();
        m.subscribe(&criteria, 1, c.mode);
        let got = m.lookup(&c.headers) == vec![1];
        assert_eq!(got, c.matches, "{}: {}", c.name, c.source);
        // The hit count agrees: an `all` match meets every counted criterion.
        let counted = c.criteria.iter().all(|(n, _)| !n.starts_with("x-"));
        if c.matches && c.mode == MatchMode::All && !c.criteria.is_empty() && counted {
            assert_eq!(
                m.hits(&c.headers),
                vec![(1, c.criteria.len() as u32)],
                "{}",
                c.name
            );
        }
    }
}

/// RabbitMQ's comparison, written out plainly: nested values keep their type; at the top the
/// type is dropped, so a string and a byte string compare by their bytes.
fn oracle_top_eq(a: &V, b: &V) -> bool {
    match (a, b) {
        (V::Str(x), V::Bytes(y)) | (V::Bytes(y), V::Str(x)) => x.as_bytes() == y.as_slice(),
        _ => oracle_eq(a, b),
    }
}

fn oracle_eq(a: &V, b: &V) -> bool {
    match (a, b) {
        (V::Str(x), V::Str(y)) => x == y,
        (V::Bytes(x), V::Bytes(y)) => x == y,
        (V::Int(x), V::Int(y)) => x == y,
        (V::Float(x), V::Float(y)) => (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits(),
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::Void, V::Void) => true,
        (V::Table(x), V::Table(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((kx, vx), (ky, vy))| kx == ky && oracle_eq(vx, vy))
        }
        (V::Array(x), V::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(vx, vy)| oracle_eq(vx, vy))
        }
        _ => false,
    }
}

type TypedCriterion = (String, Option<V>);

/// Criteria as a map: the last value of a name, `Void` as presence, sorted by name.
fn oracle_criteria(criteria: &[TypedCriterion]) -> Vec<TypedCriterion> {
    let mut out: Vec<TypedCriterion> = Vec::new();
    for (n, v) in criteria {
        let v = v.clone().filter(|v| !matches!(v, V::Void));
        match out.iter_mut().find(|(m, _)| m == n) {
            Some(slot) => slot.1 = v,
            None => out.push((n.clone(), v)),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn same_criteria(a: &[TypedCriterion], b: &[TypedCriterion]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((na, va), (nb, vb))| {
            na == nb
                && match (va, vb) {
                    (None, None) => true,
                    (Some(x), Some(y)) => oracle_eq(x, y),
                    _ => false,
                }
        })
}

fn typed_brute_hits(
    criteria: &[TypedCriterion],
    mode: MatchMode,
    headers: &[(String, V)],
) -> (bool, u32) {
    let mut map: HashMap<&str, &V> = HashMap::new();
    for (n, v) in headers {
        map.insert(n, v);
    }
    let with_x = matches!(mode, MatchMode::AllWithX | MatchMode::AnyWithX);
    let counted: Vec<&TypedCriterion> = criteria
        .iter()
        .filter(|(n, _)| n != "x-match" && (with_x || !n.starts_with("x-")))
        .collect();
    let hits = counted
        .iter()
        .filter(|(n, v)| match (v, map.get(n.as_str())) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(want), Some(got)) => oracle_top_eq(want, got),
        })
        .count();
    let matched = if mode.needs_all() {
        hits == counted.len()
    } else {
        hits >= 1
    };
    (matched, hits as u32)
}

/// Few values of each type, so that criteria and headers meet often: `"1"` and `b"1"`, `1`,
/// `true` and `1.0`, both zeros, NaNs of two signs.
fn typed_leaf() -> impl Strategy<Value = V> {
    prop_oneof![
        prop::sample::select(vec!["1", "a", ""]).prop_map(s),
        prop::sample::select(vec![&b"1"[..], b"a", b"\xff"]).prop_map(b),
        prop::sample::select(vec![0, 1, -1, i64::MIN, i64::MAX]).prop_map(V::Int),
        prop::sample::select(vec![0.0, -0.0, 1.0, f64::NAN, -f64::NAN, f64::INFINITY])
            .prop_map(V::Float),
        any::<bool>().prop_map(V::Bool),
        Just(V::Void),
    ]
}

fn typed_value() -> impl Strategy<Value = V> {
    typed_leaf().prop_recursive(3, 10, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(V::Array),
            prop::collection::vec(
                (
                    prop::sample::select(vec!["a", "b"]).prop_map(String::from),
                    inner
                ),
                0..3
            )
            .prop_map(V::Table),
        ]
    })
}

/// A value near `v` that RabbitMQ tells apart from it or not, by the rules under test: a
/// string's bytes, an integer's float, a float's negation (a NaN stays a NaN, `0.0` becomes
/// `-0.0`), a table's reversal.
fn twin(v: &V) -> V {
    match v {
        V::Str(t) => V::Bytes(t.as_bytes().to_vec()),
        V::Bytes(b) => V::Str(String::from_utf8_lossy(b).into_owned()),
        V::Int(i) => V::Float(*i as f64),
        V::Float(f) => V::Float(-f),
        V::Bool(x) => V::Int(i64::from(*x)),
        V::Void => s(""),
        V::Table(t) if t.len() > 1 => V::Table(t.iter().rev().cloned().collect()),
        V::Table(t) => V::Table(t.iter().map(|(k, v)| (k.clone(), twin(v))).collect()),
        V::Array(a) => V::Array(a.iter().map(twin).collect()),
    }
}

/// A value picked from the case's pool, as is or as its [`twin`], so that criteria and
/// headers meet (or nearly) often.
type Pick = (prop::sample::Index, bool);

fn pick() -> impl Strategy<Value = Pick> {
    (any::<prop::sample::Index>(), prop::bool::weighted(0.3))
}

fn resolve(pool: &[V], (i, twinned): &Pick) -> V {
    let v = i.get(pool);
    if *twinned {
        twin(v)
    } else {
        v.clone()
    }
}

#[derive(Clone, Debug)]
enum RawOp {
    Subscribe(Vec<(&'static str, Option<Pick>)>, SubscriberId, MatchMode),
    Unsubscribe(Vec<(&'static str, Option<Pick>)>, SubscriberId, MatchMode),
    RemoveSubscriber(SubscriberId),
    Lookup(Vec<(&'static str, Pick)>),
}

fn raw_op() -> impl Strategy<Value = RawOp> {
    let crit = || {
        prop::collection::vec(
            (
                prop::sample::select(NAMES),
                prop::option::weighted(0.8, pick()),
            ),
            0..4,
        )
    };
    let mut names = NAMES.to_vec();
    names.push("d");
    let headers = prop::collection::vec((prop::sample::select(names), pick()), 0..6);
    prop_oneof![
        4 => (crit(), 0..5u32, mode()).prop_map(|(c, s, m)| RawOp::Subscribe(c, s, m)),
        2 => (crit(), 0..5u32, mode()).prop_map(|(c, s, m)| RawOp::Unsubscribe(c, s, m)),
        1 => (0..5u32).prop_map(RawOp::RemoveSubscriber),
        6 => headers.prop_map(RawOp::Lookup),
    ]
}

#[derive(Clone, Debug)]
enum TypedOp {
    Subscribe(Vec<TypedCriterion>, SubscriberId, MatchMode),
    Unsubscribe(Vec<TypedCriterion>, SubscriberId, MatchMode),
    RemoveSubscriber(SubscriberId),
    Lookup(Vec<(String, V)>),
}

/// Operations over a small pool of typed values.
fn typed_ops() -> impl Strategy<Value = Vec<TypedOp>> {
    (
        prop::collection::vec(typed_value(), 1..5),
        prop::collection::vec(raw_op(), 1..60),
    )
        .prop_map(|(pool, raw)| {
            let crit = |c: &[(&str, Option<Pick>)]| -> Vec<TypedCriterion> {
                c.iter()
                    .map(|(n, p)| (n.to_string(), p.as_ref().map(|p| resolve(&pool, p))))
                    .collect()
            };
            raw.iter()
                .map(|op| match op {
                    RawOp::Subscribe(c, s, m) => TypedOp::Subscribe(crit(c), *s, *m),
                    RawOp::Unsubscribe(c, s, m) => TypedOp::Unsubscribe(crit(c), *s, *m),
                    RawOp::RemoveSubscriber(s) => TypedOp::RemoveSubscriber(*s),
                    RawOp::Lookup(h) => TypedOp::Lookup(
                        h.iter()
                            .map(|(n, p)| (n.to_string(), resolve(&pool, p)))
                            .collect(),
                    ),
                })
                .collect()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn typed_headers_matcher_equals_brute_force(ops in typed_ops()) {
        let m = HeadersMatcher::new();
        // Distinct (criteria, mode, subscriber) triples, found by the oracle's equality.
        let mut model: Vec<(Vec<TypedCriterion>, MatchMode, SubscriberId)> = Vec::new();
        let find = |model: &[(Vec<TypedCriterion>, MatchMode, SubscriberId)], c: &[TypedCriterion], mode, id| {
            model.iter().position(|(mc, mm, mi)| *mm == mode && *mi == id && same_criteria(mc, c))
        };
        for op in &ops {
            match op {
                TypedOp::Subscribe(given, id, mode) => {
                    let c = oracle_criteria(given);
                    let new = find(&model, &c, *mode, *id).is_none();
                    prop_assert_eq!(m.subscribe(given, *id, *mode), new);
                    if new {
                        model.push((c, *mode, *id));
                    }
                }
                TypedOp::Unsubscribe(c, id, mode) => {
                    // Unnormalised on purpose: the matcher normalises.
                    let at = find(&model, &oracle_criteria(c), *mode, *id);
                    prop_assert_eq!(m.unsubscribe(c, *id, *mode), at.is_some());
                    if let Some(at) = at {
                        model.remove(at);
                    }
                }
                TypedOp::RemoveSubscriber(id) => {
                    let before = model.len();
                    model.retain(|(_, _, i)| i != id);
                    prop_assert_eq!(m.remove_subscriber(*id), before - model.len());
                }
                TypedOp::Lookup(h) => {
                    let mut want: BTreeSet<SubscriberId> = BTreeSet::new();
                    let mut best: BTreeMap<SubscriberId, u32> = BTreeMap::new();
                    for (c, mode, id) in &model {
                        let (matched, hits) = typed_brute_hits(c, *mode, h);
                        if matched {
                            want.insert(*id);
                        }
                        if hits > 0 {
                            let e = best.entry(*id).or_insert(0);
                            *e = (*e).max(hits);
                        }
                    }
                    let want: Vec<SubscriberId> = want.into_iter().collect();
                    prop_assert_eq!(m.lookup(h), want.clone(), "lookup {:?}", h);
                    prop_assert_eq!(m.hits(h), best.into_iter().collect::<Vec<_>>(), "hits {:?}", h);
                    // Borrowed headers, strings as text: the same answer.
                    let refs: Vec<(&str, HeaderValueRef<'_>)> = h
                        .iter()
                        .map(|(n, v)| match v {
                            V::Str(t) => (n.as_str(), HeaderValueRef::Text(t)),
                            v => (n.as_str(), HeaderValueRef::Value(v)),
                        })
                        .collect();
                    prop_assert_eq!(m.lookup(&refs), want);
                }
            }
            prop_assert_eq!(m.len(), model.len());
        }
        let listed = m.subscriptions();
        prop_assert_eq!(listed.len(), model.len());
        for sub in &listed {
            prop_assert!(
                find(&model, &sub.criteria, sub.mode, sub.subscriber).is_some(),
                "listed but not subscribed: {:?}", sub
            );
        }
    }
}
