//! The named workloads of `python/topicmatch/workload.py`, mirrored for the criterion benches:
//! the same shapes and proportions, generated from a seed with a small SplitMix64 generator.
//! The random numbers are this file's own, so the data is not equal to Python's, only alike.
//!
//! Included by each bench file with `#[path = "workload.rs"] mod workload;`.
#![allow(dead_code)]

use topicmatch::Dialect;

/// SplitMix64 (Steele, Lea and Flood): tiny, fast, and good enough to draw workloads.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n > 0`); the modulo bias is far below what a benchmark can see.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Subscriptions as `(pattern, subscriber id)` pairs and topics to route.
pub struct Workload {
    pub dialect: Dialect,
    pub subscriptions: Vec<(String, u32)>,
    pub topics: Vec<String>,
}

fn join(d: Dialect, words: &[&str]) -> String {
    words.join(&(d.separator() as char).to_string())
}

/// The seed's benchmark pattern, `foo.*.baz.qux.quux` in the dialect's spelling.
pub fn seed_pattern(d: Dialect) -> String {
    join(d, &["foo", d.one_word(), "baz", "qux", "quux"])
}

/// The seed's benchmark topic, `foo.bar.baz.qux.quux` in the dialect's spelling.
pub fn seed_topic(d: Dialect) -> String {
    join(d, &["foo", "bar", "baz", "qux", "quux"])
}

/// A random 5-word literal topic, each word a random 63-bit integer (the seed's shape).
pub fn random_word5(d: Dialect, rng: &mut Rng) -> String {
    let words: Vec<String> = (0..5).map(|_| (rng.next_u64() >> 1).to_string()).collect();
    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
    join(d, &refs)
}

/// The seed's hot matcher: `n` random 5-word literal topics plus the benchmark pattern (id
/// `n`). Topics: the benchmark topic, then subscribed topics and fresh ones alternately.
pub fn seed(n: usize, n_topics: usize, d: Dialect, seed: u64) -> Workload {
    let mut rng = Rng::new(seed);
    let mut subscriptions: Vec<(String, u32)> = (0..n)
        .map(|i| (random_word5(d, &mut rng), i as u32))
        .collect();
    subscriptions.push((seed_pattern(d), n as u32));
    let mut topics = vec![seed_topic(d)];
    while topics.len() < n_topics {
        if topics.len() % 2 == 1 && n > 0 {
            topics.push(subscriptions[rng.below(n)].0.clone());
        } else {
            topics.push(random_word5(d, &mut rng));
        }
    }
    topics.truncate(n_topics);
    Workload {
        dialect: d,
        subscriptions,
        topics,
    }
}

/// The seed's msg/s run: 3-level digit patterns, a wildcard in level 1 for every 10th, level 2
/// for every 25th, level 3 for every 45th; message `i` is pattern `i mod n` with each wildcard
/// replaced by a random digit.
pub fn seed_throughput(n: usize, n_topics: usize, d: Dialect, seed: u64) -> Workload {
    let mut rng = Rng::new(seed);
    let one = d.one_word();
    let mut patterns: Vec<Vec<String>> = Vec::with_capacity(n);
    for i in 0..n {
        let mut words: Vec<String> = (0..3).map(|_| rng.below(10).to_string()).collect();
        if i % 10 == 0 {
            words[0] = one.to_string();
        } else if i % 25 == 0 {
            words[1] = one.to_string();
        } else if i % 45 == 0 {
            words[2] = one.to_string();
        }
        patterns.push(words);
    }
    let topics = (0..if n > 0 { n_topics } else { 0 })
        .map(|i| {
            let words: Vec<String> = patterns[i % n]
                .iter()
                .map(|w| {
                    if w == one {
                        rng.below(10).to_string()
                    } else {
                        w.clone()
                    }
                })
                .collect();
            let refs: Vec<&str> = words.iter().map(String::as_str).collect();
            join(d, &refs)
        })
        .collect();
    let subscriptions = patterns
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let refs: Vec<&str> = w.iter().map(String::as_str).collect();
            (join(d, &refs), i as u32)
        })
        .collect();
    Workload {
        dialect: d,
        subscriptions,
        topics,
    }
}

/// The keys of the seed's concurrency runs: `j%10 . j%50 . j`.
pub fn seed_items(n: usize, d: Dialect) -> Vec<String> {
    (0..n)
        .map(|j| {
            join(
                d,
                &[&(j % 10).to_string(), &(j % 50).to_string(), &j.to_string()],
            )
        })
        .collect()
}

/// A 10-word vocabulary over 5 levels: 60 % exact, 25 % one single-word wildcard, 10 % two,
/// 5 % two to four words then the many-words wildcard; random 5-word topics; subscriber ids
/// `i mod n/2` (two patterns per subscriber).
pub fn mixed(n: usize, n_topics: usize, d: Dialect, seed: u64) -> Workload {
    let mut rng = Rng::new(seed);
    let vocab: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let clients = (n / 2).max(1);
    let mut subscriptions = Vec::with_capacity(n);
    for i in 0..n {
        let roll = rng.unit();
        let mut words: Vec<&str> = (0..5).map(|_| vocab[rng.below(10)].as_str()).collect();
        if roll < 0.60 {
        } else if roll < 0.85 {
            words[rng.below(5)] = d.one_word();
        } else if roll < 0.95 {
            let a = rng.below(5);
            let b = (a + 1 + rng.below(4)) % 5;
            words[a] = d.one_word();
            words[b] = d.one_word();
        } else {
            words.truncate(2 + rng.below(3));
            words.push(d.many_words());
        }
        subscriptions.push((join(d, &words), (i % clients) as u32));
    }
    let topics = (0..n_topics)
        .map(|_| {
            let words: Vec<&str> = (0..5).map(|_| vocab[rng.below(10)].as_str()).collect();
            join(d, &words)
        })
        .collect();
    Workload {
        dialect: d,
        subscriptions,
        topics,
    }
}

/// A wide level: `users.<id>.events` for `n` distinct ids (subscriber = the index), plus
/// `users.*.events` and `users.#` (ids `n`, `n + 1`); topics name a subscribed user nine
/// times in ten and an unsubscribed one otherwise.
pub fn ids(n: usize, n_topics: usize, d: Dialect, seed: u64) -> Workload {
    let mut rng = Rng::new(seed);
    let space = (10 * n).max(1000);
    let mut taken = std::collections::HashSet::with_capacity(n);
    let mut user_ids = Vec::with_capacity(n);
    while user_ids.len() < n {
        let u = rng.below(space);
        if taken.insert(u) {
            user_ids.push(u);
        }
    }
    let topic = |u: usize| join(d, &["users", &u.to_string(), "events"]);
    let mut subscriptions: Vec<(String, u32)> = user_ids
        .iter()
        .enumerate()
        .map(|(i, &u)| (topic(u), i as u32))
        .collect();
    subscriptions.push((join(d, &["users", d.one_word(), "events"]), n as u32));
    subscriptions.push((join(d, &["users", d.many_words()]), n as u32 + 1));
    let topics = (0..n_topics)
        .map(|_| {
            if n > 0 && rng.unit() < 0.9 {
                topic(user_ids[rng.below(n)])
            } else {
                loop {
                    let u = rng.below(space);
                    if !taken.contains(&u) {
                        break topic(u);
                    }
                }
            }
        })
        .collect();
    Workload {
        dialect: d,
        subscriptions,
        topics,
    }
}

/// One hot topic, `news.sports.live`, with `n` subscribers: 90 % exact, 5 % `news.*.live`,
/// 5 % `news.#`.
pub fn fanout(n: usize, n_topics: usize, d: Dialect, seed: u64) -> Workload {
    let mut rng = Rng::new(seed);
    let hot = join(d, &["news", "sports", "live"]);
    let shapes = [
        hot.clone(),
        join(d, &["news", d.one_word(), "live"]),
        join(d, &["news", d.many_words()]),
    ];
    let subscriptions = (0..n)
        .map(|i| {
            let roll = rng.unit();
            let shape = if roll < 0.90 {
                0
            } else if roll < 0.95 {
                1
            } else {
                2
            };
            (shapes[shape].clone(), i as u32)
        })
        .collect();
    Workload {
        dialect: d,
        subscriptions,
        topics: vec![hot; n_topics],
    }
}

/// The word tables of the OpenAMQ matching experiment, one per topic level.
pub const OPENAMQ_LEVELS: [usize; 5] = [6, 7, 6, 5, 6];
/// The chance that a level of a subscription is the one-word wildcard: 180 expected matches
/// per message at 2,000 subscriptions, the experiment's own figure.
pub const OPENAMQ_WILDCARD: f64 = 0.54;

/// The OpenAMQ white paper's matching experiment: five levels from tables of 6, 7, 6, 5 and 6
/// words; each of `n` subscriptions (one subscriber each) takes the one-word wildcard at a
/// level with chance [`OPENAMQ_WILDCARD`], else a word of the table; each message a word of
/// every table. About 180 subscribers per message at `n` = 2,000.
pub fn openamq(n: usize, n_topics: usize, d: Dialect, seed: u64) -> Workload {
    let mut rng = Rng::new(seed);
    let word = |level: usize, i: usize| format!("l{level}w{i}");
    let mut draw = |wildcard: f64| -> String {
        let words: Vec<String> = OPENAMQ_LEVELS
            .iter()
            .enumerate()
            .map(|(level, &k)| {
                if rng.unit() < wildcard {
                    d.one_word().to_owned()
                } else {
                    word(level, rng.below(k))
                }
            })
            .collect();
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        join(d, &refs)
    };
    let subscriptions = (0..n).map(|i| (draw(OPENAMQ_WILDCARD), i as u32)).collect();
    let topics = (0..n_topics).map(|_| draw(0.0)).collect();
    Workload {
        dialect: d,
        subscriptions,
        topics,
    }
}

/// Mercure-style selectors and updates: `n` subscribers with three selectors each (a URI
/// template of a resource kind, an exact resource URL, or a template narrowed to one parent),
/// and updates of two topics (the resource URL and `?format=jsonld`).
pub struct SelectorWorkload {
    pub subscriptions: Vec<(String, u32)>,
    pub updates: Vec<[String; 2]>,
}

pub fn mercure(n: usize, n_updates: usize, seed: u64) -> SelectorWorkload {
    const BASE: &str = "https://example.com";
    const KINDS: [&str; 5] = [
        "/books/{id}",
        "/authors/{id}",
        "/users/{user}/orders/{id}",
        "/books/{book}/reviews/{id}",
        "/chats/{room}/messages/{id}",
    ];
    let mut rng = Rng::new(seed);
    let fill = |template: &str, rng: &mut Rng| {
        let mut out = String::from(BASE);
        for part in template.split('/').skip(1) {
            out.push('/');
            if part.starts_with('{') {
                out.push_str(&rng.below(1000).to_string());
            } else {
                out.push_str(part);
            }
        }
        out
    };
    let mut subscriptions = Vec::with_capacity(3 * n);
    for i in 0..n {
        for _ in 0..3 {
            let kind = KINDS[rng.below(KINDS.len())];
            let roll = rng.unit();
            let selector = if roll < 0.5 {
                format!("{BASE}{kind}")
            } else if roll < 5.0 / 6.0 || kind.matches('{').count() == 1 {
                fill(kind, &mut rng)
            } else {
                let open = kind.find('{').unwrap_or(0);
                let close = kind[open..].find('}').map_or(open, |c| open + c + 1);
                format!(
                    "{BASE}{}{}{}",
                    &kind[..open],
                    rng.below(1000),
                    &kind[close..]
                )
            };
            subscriptions.push((selector, i as u32));
        }
    }
    let updates = (0..n_updates)
        .map(|_| {
            let url = fill(KINDS[rng.below(KINDS.len())], &mut rng);
            let alt = format!("{url}?format=jsonld");
            [url, alt]
        })
        .collect();
    SelectorWorkload {
        subscriptions,
        updates,
    }
}

/// A `#`-heavy set in the shape of [`mixed`] (10 words over 5 levels, subscriber `i mod n/2`):
/// a third of the patterns put the many-words wildcard in a middle position (level 1, 2 or
/// 3: `w3.#.w1.w7`, the binding shape where a trie explores every split of the topic), the
/// rest are exact or have one single-word wildcard. Topics: random 5-word literals.
pub fn middle_many(n: usize, n_topics: usize, d: Dialect, seed: u64) -> Workload {
    let mut rng = Rng::new(seed);
    let vocab: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let clients = (n / 2).max(1);
    let mut subscriptions = Vec::with_capacity(n);
    for i in 0..n {
        let mut words: Vec<&str> = (0..5).map(|_| vocab[rng.below(10)].as_str()).collect();
        if i % 3 == 0 {
            words[1 + rng.below(3)] = d.many_words();
        } else if rng.unit() < 0.4 {
            words[rng.below(5)] = d.one_word();
        }
        subscriptions.push((join(d, &words), (i % clients) as u32));
    }
    let topics = (0..n_topics)
        .map(|_| {
            let words: Vec<&str> = (0..5).map(|_| vocab[rng.below(10)].as_str()).collect();
            join(d, &words)
        })
        .collect();
    Workload {
        dialect: d,
        subscriptions,
        topics,
    }
}
