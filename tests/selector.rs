//! Selector semantics (RFC 6570 URI templates, `re:` regular expressions, exact topics, `*`)
//! and `SelectorIndex` behaviour, including a multi-threaded run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use topicmatch::selector::template;
use topicmatch::{Error, Selector, SelectorIndex, SelectorKind};

fn admits(selector: &str, topic: &str) -> bool {
    Selector::parse(selector)
        .unwrap_or_else(|e| panic!("{selector:?} should parse: {e}"))
        .admits(topic)
}

/// Every expansion example of RFC 6570 §3.2 (the variable values of §3.2.1), as the
/// `yosida95/uritemplate` test table lists them: each expansion must be admitted by its
/// template, including those whose values that library cannot recover.
const RFC6570_EXPANSIONS: &[(&str, &str)] = &[
    // § 3.2.1
    ("{count}", "one,two,three"),
    ("{count*}", "one,two,three"),
    ("{/count}", "/one,two,three"),
    ("{/count*}", "/one/two/three"),
    ("{;count}", ";count=one,two,three"),
    ("{;count*}", ";count=one;count=two;count=three"),
    ("{?count}", "?count=one,two,three"),
    ("{?count*}", "?count=one&count=two&count=three"),
    ("{&count*}", "&count=one&count=two&count=three"),
    // § 3.2.2
    ("{var}", "value"),
    ("{hello}", "Hello%20World%21"),
    ("{half}", "50%25"),
    ("O{empty}X", "OX"),
    ("O{undef}X", "OX"),
    ("{x,y}", "1024,768"),
    ("{x,hello,y}", "1024,Hello%20World%21,768"),
    ("?{x,empty}", "?1024,"),
    ("?{x,undef}", "?1024"),
    ("?{undef,y}", "?768"),
    ("{var:3}", "val"),
    ("{var:30}", "value"),
    ("{list}", "red,green,blue"),
    ("{list*}", "red,green,blue"),
    ("{keys}", "semi,%3B,dot,.,comma,%2C"),
    ("{keys*}", "semi=%3B,dot=.,comma=%2C"),
    // § 3.2.3
    ("{+var}", "value"),
    ("{+hello}", "Hello%20World!"),
    ("{+half}", "50%25"),
    ("{base}index", "http%3A%2F%2Fexample.com%2Fhome%2Findex"),
    ("{+base}index", "http://example.com/home/index"),
    ("O{+empty}X", "OX"),
    ("O{+undef}X", "OX"),
    ("{+path}/here", "/foo/bar/here"),
    ("here?ref={+path}", "here?ref=/foo/bar"),
    ("up{+path}{var}/here", "up/foo/barvalue/here"),
    ("{+x,hello,y}", "1024,Hello%20World!,768"),
    ("{+path,x}/here", "/foo/bar,1024/here"),
    ("{+path:6}/here", "/foo/b/here"),
    ("{+list}", "red,green,blue"),
    ("{+list*}", "red,green,blue"),
    ("{+keys}", "semi,;,dot,.,comma,,"),
    ("{+keys*}", "semi=;,dot=.,comma=,"),
    // § 3.2.4
    ("{#var}", "#value"),
    ("{#hello}", "#Hello%20World!"),
    ("{#half}", "#50%25"),
    ("foo{#empty}", "foo#"),
    ("foo{#undef}", "foo"),
    ("{#x,hello,y}", "#1024,Hello%20World!,768"),
    ("{#path,x}/here", "#/foo/bar,1024/here"),
    ("{#path:6}/here", "#/foo/b/here"),
    ("{#list}", "#red,green,blue"),
    ("{#list*}", "#red,green,blue"),
    ("{#keys}", "#semi,;,dot,.,comma,,"),
    ("{#keys*}", "#semi=;,dot=.,comma=,"),
    // § 3.2.5
    ("{.who}", ".fred"),
    ("{.who,who}", ".fred.fred"),
    ("{.half,who}", ".50%25.fred"),
    ("www{.dom*}", "www.example.com"),
    ("X{.var}", "X.value"),
    ("X{.empty}", "X."),
    ("X{.undef}", "X"),
    ("X{.var:3}", "X.val"),
    ("X{.list}", "X.red,green,blue"),
    ("X{.list*}", "X.red.green.blue"),
    ("X{.keys}", "X.semi,%3B,dot,.,comma,%2C"),
    ("X{.keys*}", "X.semi=%3B.dot=..comma=%2C"),
    ("X{.empty_keys}", "X"),
    ("X{.empty_keys*}", "X"),
    // § 3.2.6
    ("{/who}", "/fred"),
    ("{/who,who}", "/fred/fred"),
    ("{/half,who}", "/50%25/fred"),
    ("{/who,dub}", "/fred/me%2Ftoo"),
    ("{/var}", "/value"),
    ("{/var,empty}", "/value/"),
    ("{/var,undef}", "/value"),
    ("{/var,x}/here", "/value/1024/here"),
    ("{/var:1,var}", "/v/value"),
    ("{/list}", "/red,green,blue"),
    ("{/list*}", "/red/green/blue"),
    ("{/list*,path:4}", "/red/green/blue/%2Ffoo"),
    ("{/keys}", "/semi,%3B,dot,.,comma,%2C"),
    ("{/keys*}", "/semi=%3B/dot=./comma=%2C"),
    // § 3.2.7
    ("{;who}", ";who=fred"),
    ("{;half}", ";half=50%25"),
    ("{;empty}", ";empty"),
    ("{;v,empty,who}", ";v=6;empty;who=fred"),
    ("{;v,bar,who}", ";v=6;who=fred"),
    ("{;x,y}", ";x=1024;y=768"),
    ("{;x,y,empty}", ";x=1024;y=768;empty"),
    ("{;x,y,undef}", ";x=1024;y=768"),
    ("{;hello:5}", ";hello=Hello"),
    ("{;list}", ";list=red,green,blue"),
    ("{;list*}", ";list=red;list=green;list=blue"),
    ("{;keys}", ";keys=semi,%3B,dot,.,comma,%2C"),
    ("{;keys*}", ";semi=%3B;dot=.;comma=%2C"),
    // § 3.2.8
    ("{?who}", "?who=fred"),
    ("{?half}", "?half=50%25"),
    ("{?x,y}", "?x=1024&y=768"),
    ("{?x,y,empty}", "?x=1024&y=768&empty="),
    ("{?x,y,undef}", "?x=1024&y=768"),
    ("{?var:3}", "?var=val"),
    ("{?list}", "?list=red,green,blue"),
    ("{?list*}", "?list=red&list=green&list=blue"),
    ("{?keys}", "?keys=semi,%3B,dot,.,comma,%2C"),
    ("{?keys*}", "?semi=%3B&dot=.&comma=%2C"),
    // § 3.2.9
    ("{&who}", "&who=fred"),
    ("{&half}", "&half=50%25"),
    ("?fixed=yes{&x}", "?fixed=yes&x=1024"),
    ("{&x,y,empty}", "&x=1024&y=768&empty="),
    ("{&x,y,undef}", "&x=1024&y=768"),
    ("{&var:3}", "&var=val"),
    ("{&list}", "&list=red,green,blue"),
    ("{&list*}", "&list=red&list=green&list=blue"),
    ("{&keys}", "&keys=semi,%3B,dot,.,comma,%2C"),
    ("{&keys*}", "&semi=%3B&dot=.&comma=%2C"),
    // yosida95/uritemplate "others"
    ("{special_chars}", "2001%3Adb8%3A%3A35"),
];

#[test]
fn every_rfc6570_expansion_is_admitted_by_its_template() {
    let mut failed = Vec::new();
    for &(template, topic) in RFC6570_EXPANSIONS {
        let s = Selector::parse(template).unwrap();
        assert_eq!(s.kind(), SelectorKind::UriTemplate, "{template}");
        if !s.admits(topic) {
            failed.push((template, topic));
        }
    }
    assert!(failed.is_empty(), "not admitted: {failed:?}");
}

/// `(template, topic, admitted)`: what each operator must reject, and the edges it must take.
const TEMPLATE_CASES: &[(&str, &str, bool)] = &[
    // simple: unreserved and pct-encoded only, so no `/`, `?`, `#` or raw space
    (
        "https://example.com/users/{id}",
        "https://example.com/users/42",
        true,
    ),
    (
        "https://example.com/users/{id}",
        "https://example.com/users/",
        true,
    ),
    (
        "https://example.com/users/{id}",
        "https://example.com/users/4/2",
        false,
    ),
    (
        "https://example.com/users/{id}",
        "https://example.com/users/4?x",
        false,
    ),
    (
        "https://example.com/users/{id}",
        "https://example.com/users/a b",
        false,
    ),
    (
        "https://example.com/users/{id}",
        "https://example.com/users/%zz",
        false,
    ),
    (
        "https://example.com/users/{id}",
        "https://example.com/users/%2F",
        true,
    ),
    (
        "https://example.com/users/{id}",
        "https://example.com/users/caf%C3%A9",
        true,
    ),
    (
        "https://example.com/users/{id}",
        "https://example.com/users/café",
        false,
    ),
    (
        "https://example.com/users/{id}",
        "http://example.com/users/42",
        false,
    ),
    (
        "https://example.com/users/{id}",
        "https://example.com/users/42/",
        false,
    ),
    (
        "https://example.com/users/{id}",
        "xhttps://example.com/users/42",
        false,
    ),
    // literal regex metacharacters in the template are literal
    ("a.b/{x}", "aXb/1", false),
    ("a.b/{x}", "a.b/1", true),
    ("(a)+/{x}", "(a)+/1", true),
    ("(a)+/{x}", "aa/1", false),
    // reserved and fragment pass reserved characters
    ("{+path}", "/a/b?c=d#e", true),
    ("{+path}", "a b", false),
    ("{#frag}", "#a/b", true),
    ("{#frag}", "a/b", false),
    ("{#frag}", "", true),
    // label and path segments: one segment per non-exploded variable
    ("X{.var}", "X.a.b", true), // `.` is unreserved: var = "a.b"
    ("X{.var}", "X.a/b", false),
    ("X{.var*}", "X.a.b", true),
    ("{/seg}", "/a/b", false),
    ("{/seg*}", "/a/b", true),
    ("{/a,b}", "/x/y", true),
    ("{/a,b}", "/x/y/z", false),
    ("/users{/id}", "/users", true),
    ("/users{/id}", "/users/", true),
    ("/users{/id}", "/users/7", true),
    (
        "https://{host}/users{/user}{/media}",
        "https://example.com/users/kevin/pics",
        true,
    ),
    (
        "https://{host}/users{/user}{/media}",
        "https://example.com/users/kevin/pics/x",
        false,
    ),
    // named operators check names and order
    ("{?x}", "?x=1", true),
    ("{?x}", "?y=1", false),
    ("{?x}", "?x", false),
    ("{?x,y}", "?y=2", true),
    ("{?x,y}", "?y=2&x=1", false),
    ("{?x,y}", "&x=1", false),
    ("{?x*}", "?a=1&b=2", true),
    ("{;x}", ";x", true),
    ("{;x}", ";y=1", false),
    ("{;x,y}", ";y=2", true),
    ("{&x}", "&x=1", true),
    ("{&x}", "?x=1", false),
    ("/search{?q,page}", "/search?q=cat&page=2", true),
    ("/search{?q,page}", "/search", true),
    ("/search{?q,page}", "/search?page=2&q=cat", false),
    ("/search{?q}{&page}", "/search?q=cat&page=2", true),
    // prefixes bound strings (a percent-encoded character counts once)
    ("{var:3}", "value", false),
    ("{var:3}", "va", true),
    ("{var:1}", "%C3%A9", true),
    ("{var:1}", "%C3%A9x", false),
    (
        "https://example.com/dictionary/{term:1}/{term}",
        "https://example.com/dictionary/c/cat",
        true,
    ),
    (
        "https://example.com/dictionary/{term:1}/{term}",
        "https://example.com/dictionary/c/a/cat",
        false,
    ),
    (
        "https://example.com/dictionary/{term:1}/{term}",
        "https://example.com/dictionary/ca/cat",
        false,
    ),
    ("{?q:2}", "?q=ab", true),
    ("{?q:2}", "?q=abc", false),
    // a template admits its own text (Mercure compares for equality first)
    (
        "https://example.com/users/{id}",
        "https://example.com/users/{id}",
        true,
    ),
    // many variables with differing prefix and separator (the linear form)
    ("{?a,b,c,d,e,f,g,h,i,j}", "?a=1&j=2", true),
    ("{?a,b,c,d,e,f,g,h,i,j}", "?k=1", false),
];

#[test]
fn templates_admit_their_expansions_and_nothing_else() {
    let mut wrong = Vec::new();
    for &(template, topic, expected) in TEMPLATE_CASES {
        if admits(template, topic) != expected {
            wrong.push((template, topic, expected));
        }
    }
    assert!(
        wrong.is_empty(),
        "wrong (template, topic, expected): {wrong:?}"
    );
}

/// The assertions of Mercure's `topic_selector_test.go` (`TestMatch`), as `(topic, selector,
/// admitted)`.
const MERCURE_CASES: &[(&str, &str, bool)] = &[
    (
        "https://example.com/foo/bar",
        "https://example.com/{foo}/bar",
        true,
    ),
    (
        "https://example.com/foo/bar/baz",
        "https://example.com/{foo}/bar",
        false,
    ),
    (
        "https://example.com/kevin/dunglas",
        "https://example.com/{fistname}/{lastname}",
        true,
    ),
    ("https://example.com/foo/bar", "*", true),
    (
        "https://example.com/foo/bar",
        "https://example.com/foo/bar",
        true,
    ),
    ("foo", "foo", true),
    ("foo", "bar", false),
];

#[test]
fn mercure_topic_selector_cases_hold() {
    for &(topic, selector, expected) in MERCURE_CASES {
        assert_eq!(
            admits(selector, topic),
            expected,
            "{selector:?} on {topic:?}"
        );
    }
}

#[test]
fn selector_kinds_follow_mercure() {
    let kind = |s: &str| Selector::parse(s).unwrap().kind();
    assert_eq!(kind("*"), SelectorKind::All);
    assert_eq!(kind("https://example.com/a"), SelectorKind::Exact);
    assert_eq!(kind("https://example.com/a}"), SelectorKind::Exact);
    assert_eq!(kind("a b c"), SelectorKind::Exact);
    assert_eq!(kind("https://example.com/{a}"), SelectorKind::UriTemplate);
    assert_eq!(kind("re:a.*"), SelectorKind::Regex);
    assert_eq!(kind("re:a\\{1,2\\}"), SelectorKind::Regex);
    // exact selectors compare whole strings
    assert!(admits("https://example.com/a", "https://example.com/a"));
    assert!(!admits("https://example.com/a", "https://example.com/a/"));
    assert!(!admits("https://example.com/a", "https://example.com/"));
    // `*` is only `*` alone
    assert_eq!(kind("**"), SelectorKind::Exact);
    assert!(!admits("**", "x"));
}

#[test]
fn regex_selectors_match_whole_topics() {
    let cases: &[(&str, &str, bool)] = &[
        (
            "re:https://example\\.com/books/[0-9]+",
            "https://example.com/books/12",
            true,
        ),
        (
            "re:https://example\\.com/books/[0-9]+",
            "https://example.com/books/12/x",
            false,
        ),
        (
            "re:https://example\\.com/books/[0-9]+",
            "see https://example.com/books/12",
            false,
        ),
        ("re:books", "books", true),
        ("re:books", "all books", false),
        ("re:.*books.*", "all books here", true),
        ("re:a|b", "a", true),
        ("re:a|b", "ab", false),
        ("re:(?i)BOOKS", "books", true),
        // `(?m)` cannot turn the anchors into line anchors
        ("re:(?m)^a$", "a\nb", false),
        ("re:(?s).*", "a\nb", true),
        ("re:\\d+", "١٢", true), // Unicode digits, the regex crate's default
        ("re:\\{x\\}", "{x}", true),
    ];
    for &(selector, topic, expected) in cases {
        assert_eq!(
            admits(selector, topic),
            expected,
            "{selector:?} on {topic:?}"
        );
    }
}

/// Why `selector` is rejected (a `re:` one) or is not a template (any other: it is then an
/// exact selector, Mercure's rule).
fn reason_of(selector: &str) -> String {
    let checked = if selector.starts_with("re:") {
        Selector::parse(selector).map(drop)
    } else {
        template::check(selector)
    };
    match checked {
        Err(Error::InvalidPattern(i)) => i.reason,
        other => panic!("{selector:?} should be an invalid pattern, got {other:?}"),
    }
}

#[test]
fn invalid_selectors_are_rejected_with_a_reason() {
    let cases: &[(&str, &str, usize)] = &[
        ("", "empty selector", 0),
        ("re:", "empty regular expression", 3),
        ("re:(", "invalid regular expression", 3),
        ("re:a)|(b", "invalid regular expression", 3),
        ("re:a{1000000}", "", 3),
        ("https://example.com/{id", "unclosed expression", 20),
        ("https://example.com/{", "unclosed expression", 20),
        ("https://example.com/{}", "empty expression", 20),
        ("https://example.com/{=x}", "reserved by RFC 6570", 21),
        ("https://example.com/{!x}", "reserved by RFC 6570", 21),
        ("https://example.com/{@x}", "reserved by RFC 6570", 21),
        ("https://example.com/{|x}", "reserved by RFC 6570", 21),
        ("https://example.com/{,x}", "reserved by RFC 6570", 21),
        ("https://example.com/{a b}", "expected `,` or `}`", 22),
        ("https://example.com/{a-b}", "expected `,` or `}`", 22),
        ("https://example.com/{a,}", "expected a variable name", 23),
        ("https://example.com/{.}", "expected a variable name", 22),
        (
            "https://example.com/{a..b}",
            "cannot start with `.` or hold `..`",
            23,
        ),
        ("https://example.com/{a.}", "cannot end with `.`", 22),
        ("https://example.com/{a:0}", "prefix length", 23),
        ("https://example.com/{a:10000}", "prefix length", 23),
        ("https://example.com/{a:}", "prefix length", 23),
        ("https://example.com/{a:01}", "prefix length", 23),
        ("https://example.com/{a*:3}", "expected `,` or `}`", 23),
        ("https://example.com/{a%2}", "`%` not followed", 22),
        ("https://example.com/{{a}}", "expected a variable name", 21),
        (
            "https://example.com/a b/{id}",
            "not allowed in a URI template",
            21,
        ),
        (
            "https://example.com/\"/{id}",
            "not allowed in a URI template",
            20,
        ),
        (
            "https://example.com/</{id}",
            "not allowed in a URI template",
            20,
        ),
        ("https://example.com/%zz/{id}", "`%` not followed", 20),
        ("https://example.com/{id}}", "`}` outside an expression", 24),
    ];
    for &(selector, reason, position) in cases {
        // A selector holding `{` that is no template is an exact selector (Mercure's rule);
        // `template::check` says why it is not a template.
        let checked = if selector.starts_with("re:") || selector.is_empty() {
            Selector::parse(selector).map(drop)
        } else {
            let exact = Selector::parse(selector).expect("a non-template is an exact selector");
            assert_eq!(exact.kind(), SelectorKind::Exact, "{selector:?}");
            assert!(exact.admits(selector), "{selector:?} admits its own text");
            assert!(
                !exact.admits("https://example.com/1"),
                "{selector:?} admits only itself"
            );
            template::check(selector)
        };
        match checked {
            Err(Error::InvalidPattern(i)) => {
                assert!(
                    i.reason.contains(reason),
                    "{selector:?}: reason {:?} lacks {reason:?}",
                    i.reason
                );
                assert_eq!(i.position, position, "{selector:?}: {}", i.reason);
            }
            other => panic!("{selector:?} should be invalid, got {other:?}"),
        }
    }
    assert!(reason_of("re:a{1000000}").contains("too large"));
}

#[test]
fn adversarial_templates_compile_small_and_match_fast() {
    // 9999 is the largest prefix: it is not unrolled.
    let s = Selector::parse("{a:9999}{b:9999}").unwrap();
    assert!(s.admits("abc"));
    // Many variables in one expression stay linear...
    let query = |n: usize| {
        let vars: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
        format!("https://example.com/{{?{}}}", vars.join(","))
    };
    let s = Selector::parse(&query(200)).unwrap();
    assert!(s.admits("https://example.com/?v0=1&v199=2"));
    let long = format!("https://example.com/?v0={}", "a".repeat(100_000));
    assert!(s.admits(&long));
    // ...and past the size limit the template is refused, quickly, rather than compiled.
    let started = std::time::Instant::now();
    assert!(reason_of(&query(20_000)).contains("too large"));
    assert!(reason_of(&"{a:64}".repeat(100_000)).contains("too large"));
    assert!(reason_of(&format!("{{?{}}}", vec!["a:64"; 100_000].join(","))).contains("too large"));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn the_index_answers_an_update_with_several_topics_once_per_subscriber() {
    let idx = SelectorIndex::with_cache_size(100);
    idx.subscribe("https://example.com/books/{id}", 1).unwrap();
    idx.subscribe("https://example.com/books/1", 1).unwrap();
    idx.subscribe("https://example.com/authors/{id}", 2)
        .unwrap();
    idx.subscribe("re:.*/books/1", 3).unwrap();
    idx.subscribe("*", 4).unwrap();
    idx.subscribe("https://example.com/reviews/{id}", 5)
        .unwrap();
    let mut who = idx.lookup(&[
        "https://example.com/books/1",
        "https://example.com/authors/7",
    ]);
    who.sort();
    assert_eq!(who, vec![1, 2, 3, 4]);
    assert_eq!(idx.lookup(&[]), Vec::<u32>::new());
    assert_eq!(idx.len(), 6);
    let mut subs = idx.subscriptions();
    subs.sort();
    assert_eq!(subs[0], ("*".to_owned(), 4));
    assert_eq!(subs.len(), 6);
}

#[test]
fn subscribe_and_unsubscribe_report_changes_and_errors() {
    let idx = SelectorIndex::new();
    assert!(idx.subscribe("a/{x}", 1).unwrap());
    assert!(!idx.subscribe("a/{x}", 1).unwrap());
    assert!(idx.subscribe("a/{x}", 2).unwrap());
    assert_eq!(idx.selector_count(), 1, "one compiled selector for both");
    assert!(matches!(
        idx.subscribe("re:(", 1),
        Err(Error::InvalidPattern(_))
    ));
    assert!(matches!(
        idx.unsubscribe("re:(", 1),
        Err(Error::InvalidPattern(_))
    ));
    // Not a template, so an exact selector: it admits its own text.
    assert!(idx.subscribe("a/{x", 1).unwrap());
    assert_eq!(idx.lookup(&["a/{x"]), vec![1]);
    assert!(idx.unsubscribe("a/{x", 1).unwrap());
    assert!(!idx.unsubscribe("a/{y}", 1).unwrap());
    assert!(!idx.unsubscribe("a/{x}", 3).unwrap());
    assert!(idx.unsubscribe("a/{x}", 1).unwrap());
    assert!(!idx.unsubscribe("a/{x}", 1).unwrap());
    assert_eq!(idx.len(), 1);
    assert_eq!(idx.remove_subscriber(2), 1);
    assert_eq!(idx.remove_subscriber(2), 0);
    assert!(idx.is_empty());
    assert_eq!(idx.selector_count(), 0);
    idx.validate();
}

#[test]
fn the_cache_evicts_and_counts() {
    let idx = SelectorIndex::with_cache_size(2);
    idx.subscribe("t/{x}", 1).unwrap();
    for t in ["t/1", "t/2", "t/3", "t/1"] {
        assert_eq!(idx.lookup(&[t]), vec![1]);
    }
    let s = idx.cache_stats();
    assert_eq!(
        (s.hits, s.misses, s.evictions, s.topics, s.capacity),
        (0, 4, 2, 2, 2)
    );
    assert_eq!(idx.lookup(&["t/1"]), vec![1]);
    assert_eq!(idx.cache_stats().hits, 1);
    let big = SelectorIndex::with_cache_size(2048); // sharded
    big.subscribe("t/{x}", 1).unwrap();
    for i in 0..5000 {
        assert_eq!(big.lookup(&[&format!("t/{i}")]), vec![1]);
    }
    let s = big.cache_stats();
    assert!(s.topics <= 2048 && s.topics > 1500, "{s:?}");
    assert_eq!(s.evictions as usize, 5000 - s.topics);
    let off = SelectorIndex::with_cache_size(0);
    off.subscribe("t/{x}", 1).unwrap();
    assert_eq!(off.lookup(&["t/1", "t/2"]), vec![1]);
    assert_eq!(off.cache_stats().capacity, 0);
}

/// Stable subscribers (never changed) must be reported exactly, whatever other threads do to
/// other subscribers meanwhile; at the end, the index equals a brute-force scan.
#[test]
fn lookups_run_in_parallel_with_writers() {
    const STABLE: u32 = 200;
    let idx = Arc::new(SelectorIndex::with_cache_size(16));
    let topics: Vec<String> = (0..40)
        .map(|i| format!("https://example.com/users/{i}"))
        .collect();
    let stable_selector = |i: u32| match i % 4 {
        0 => "https://example.com/users/{id}".to_owned(),
        1 => format!("https://example.com/users/{}", i % 40),
        2 => format!("re:https://example\\.com/users/{}[0-9]*", i % 10),
        _ => "https://example.com/groups/{id}".to_owned(),
    };
    for i in 0..STABLE {
        idx.subscribe(&stable_selector(i), i).unwrap();
    }
    let expected: Vec<Vec<u32>> = topics
        .iter()
        .map(|t| {
            (0..STABLE)
                .filter(|&i| Selector::parse(&stable_selector(i)).unwrap().admits(t))
                .collect()
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let idx = idx.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let id = 1000 + w * 100 + n % 50;
                    let sel = match n % 3 {
                        0 => "*".to_owned(),
                        1 => "https://example.com/users/{id}".to_owned(),
                        _ => format!("https://example.com/users/{}", n % 40),
                    };
                    idx.subscribe(&sel, id).unwrap();
                    if n % 5 == 0 {
                        idx.remove_subscriber(1000 + w * 100 + (n / 5) % 50);
                    } else if n % 7 == 0 {
                        idx.unsubscribe(&sel, id).unwrap();
                    }
                    n += 1;
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let idx = idx.clone();
            let topics = topics.clone();
            let expected = expected.clone();
            std::thread::spawn(move || {
                for round in 0..300 {
                    let i = (round * 7 + r * 13) % topics.len();
                    let j = (i + 1) % topics.len();
                    let mut got: Vec<u32> = idx
                        .lookup(&[&topics[i], &topics[j]])
                        .into_iter()
                        .filter(|&s| s < STABLE)
                        .collect();
                    got.sort_unstable();
                    let mut want: Vec<u32> =
                        expected[i].iter().chain(&expected[j]).copied().collect();
                    want.sort_unstable();
                    want.dedup();
                    assert_eq!(got, want, "topics {i} and {j}");
                }
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    idx.validate();
    let subs = idx.subscriptions();
    for t in &topics {
        let mut want: Vec<u32> = subs
            .iter()
            .filter(|(s, _)| Selector::parse(s).unwrap().admits(t))
            .map(|&(_, id)| id)
            .collect();
        want.sort_unstable();
        want.dedup();
        let mut got = idx.lookup(&[t]);
        got.sort_unstable();
        assert_eq!(got, want, "{t}");
    }
}
