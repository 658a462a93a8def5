//! Several threads hammer one `CSTrie` with subscribe, unsubscribe, lookup, `has_interest` and
//! snapshot on a two-word alphabet with `#` and `*` patterns, so they collide all the time.
//! Every operation's invocation and response are stamped from one global counter, and each short
//! round of the history (the threads meet at a barrier between rounds) is checked for
//! linearizability against the sequential oracle with a Wing–Gong search: some order of the round's
//! operations that respects real time must give every operation the result it got and end in the
//! state the trie is in. The witness orders are replayed on a `NaiveMatcher`, which must end equal
//! to the trie. A snapshot counts as an operation whose result is its whole content.
//!
//! The same check runs on a `Cached<CSTrie>` with a result cache of 8 entries over 15 topics
//! (so entries are evicted) that stores on every miss, with fewer writes so that generations
//! last long enough for lookups to hit.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

use topicmatch::cstrie::Quiescence;
use topicmatch::{CSTrie, Cached, Dialect, Matcher, NaiveMatcher, Pattern};

/// A trie under test: a matcher that also takes snapshots.
trait Subject: Matcher + 'static {
    fn snap(&self) -> Box<dyn Matcher>;
    /// The trie's invariants, after concurrent writes.
    fn validate(&self) -> Result<(), String>;
}

impl Subject for CSTrie {
    fn snap(&self) -> Box<dyn Matcher> {
        Box::new(self.snapshot())
    }
    fn validate(&self) -> Result<(), String> {
        CSTrie::validate(self, Quiescence::AfterConcurrentWrites)
    }
}

impl Subject for Cached<CSTrie> {
    fn snap(&self) -> Box<dyn Matcher> {
        Box::new(self.snapshot())
    }
    fn validate(&self) -> Result<(), String> {
        self.inner().validate(Quiescence::AfterConcurrentWrites)
    }
}

const THREADS: usize = 3;
const OPS_PER_ROUND: usize = 256;
const ROUNDS: usize = 800;
const SUBSCRIBERS: u32 = 4;
const D: Dialect = Dialect::Amqp;

/// One bit per (pattern, subscriber) pair.
type State = [u64; 6];

#[derive(Clone, Copy, Debug)]
enum Op {
    Sub(usize, u32),
    Unsub(usize, u32),
    Lookup(usize),
    /// `has_interest` of a topic.
    Interest(usize),
    Snapshot,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ret {
    Bool(bool),
    /// Bit `s` set if subscriber `s` was returned.
    Subs(u8),
    State(State),
}

#[derive(Clone, Copy, Debug)]
struct Event {
    thread: usize,
    op: Op,
    ret: Ret,
    inv: u64,
    resp: u64,
}

/// Every pattern of up to three tokens over `a`, `b`, `*`, `#`, every topic of up to three words
/// over `a`, `b`, and which pattern matches which topic, as the oracle says.
struct World {
    patterns: Vec<Pattern>,
    topics: Vec<String>,
    matches: Vec<Vec<bool>>,
}

fn words_up_to(alphabet: &[&str], n: usize) -> Vec<String> {
    let mut all = vec![String::new()];
    let mut layer = vec![Vec::<&str>::new()];
    for _ in 0..n {
        let mut next = Vec::new();
        for w in &layer {
            for a in alphabet {
                let mut w = w.clone();
                w.push(a);
                all.push(w.join("."));
                next.push(w);
            }
        }
        layer = next;
    }
    all
}

impl World {
    fn new() -> World {
        let patterns: Vec<Pattern> = words_up_to(&["a", "b", "*", "#"], 3)
            .iter()
            .map(|p| D.parse_pattern(p).unwrap())
            .collect();
        let topics = words_up_to(&["a", "b"], 3);
        let matches = patterns
            .iter()
            .map(|p| {
                let oracle = NaiveMatcher::new(D);
                oracle.subscribe(p, 0);
                topics
                    .iter()
                    .map(|t| !oracle.lookup_str(t).unwrap().is_empty())
                    .collect()
            })
            .collect();
        World {
            patterns,
            topics,
            matches,
        }
    }

    fn pattern_index(&self, text: &str) -> usize {
        self.patterns.iter().position(|p| p.text() == text).unwrap()
    }

    fn state_of(&self, m: &dyn Matcher) -> State {
        let mut s = [0; 6];
        for (p, id) in m.subscriptions() {
            let bit = self.pattern_index(&p) * SUBSCRIBERS as usize + id as usize;
            s[bit / 64] |= 1 << (bit % 64);
        }
        s
    }

    /// The sequential specification.
    fn apply(&self, s: &State, op: Op) -> (State, Ret) {
        let bit = |p: usize, id: u32| p * SUBSCRIBERS as usize + id as usize;
        let has = |s: &State, b: usize| s[b / 64] & (1 << (b % 64)) != 0;
        let mut s = *s;
        let ret = match op {
            Op::Sub(p, id) => {
                let b = bit(p, id);
                let new = !has(&s, b);
                s[b / 64] |= 1 << (b % 64);
                Ret::Bool(new)
            }
            Op::Unsub(p, id) => {
                let b = bit(p, id);
                let was = has(&s, b);
                s[b / 64] &= !(1 << (b % 64));
                Ret::Bool(was)
            }
            Op::Interest(t) => {
                let (_, Ret::Subs(subs)) = self.apply(&s, Op::Lookup(t)) else {
                    unreachable!("a lookup returns subscribers")
                };
                Ret::Bool(subs != 0)
            }
            Op::Lookup(t) => {
                let mut subs = 0u8;
                for p in 0..self.patterns.len() {
                    if self.matches[p][t] {
                        for id in 0..SUBSCRIBERS {
                            if has(&s, bit(p, id)) {
                                subs |= 1 << id;
                            }
                        }
                    }
                }
                Ret::Subs(subs)
            }
            Op::Snapshot => Ret::State(s),
        };
        (s, ret)
    }
}

/// Wing–Gong over one window of the history (no operation of it overlaps one outside it):
/// every state the window can end in from `start`, each with one witness order (indices into
/// `events`) that respects real time (an operation that responded before another was invoked
/// comes first) and gives every operation the result it got. Each thread's operations are
/// sequential, so the search state is how many of each thread's operations are done, plus the
/// abstract state: polynomial in the window's length for a fixed number of threads.
fn window_ends(world: &World, events: &[Event], start: State) -> HashMap<State, Vec<usize>> {
    let mut threads: Vec<Vec<usize>> = vec![Vec::new(); THREADS];
    for (i, e) in events.iter().enumerate() {
        threads[e.thread].push(i);
    }
    let mut ends = HashMap::new();
    let mut seen: HashSet<(Vec<usize>, State)> = HashSet::new();
    // Depth-first with an explicit stack: (done per thread, state, order so far).
    let mut stack = vec![(vec![0usize; THREADS], start, Vec::<usize>::new())];
    while let Some((done, state, order)) = stack.pop() {
        if order.len() == events.len() {
            ends.entry(state).or_insert(order);
            continue;
        }
        if !seen.insert((done.clone(), state)) {
            continue;
        }
        // The next operation of each thread; the earliest response among them bounds who may go.
        let heads: Vec<Option<&Event>> = (0..THREADS)
            .map(|t| threads[t].get(done[t]).map(|&i| &events[i]))
            .collect();
        for t in 0..THREADS {
            let Some(e) = heads[t] else { continue };
            let blocked = heads
                .iter()
                .enumerate()
                .any(|(u, f)| u != t && f.is_some_and(|f| f.resp < e.inv));
            if blocked {
                continue;
            }
            let (next, ret) = world.apply(&state, e.op);
            if ret != e.ret {
                continue;
            }
            let mut done = done.clone();
            let mut order = order.clone();
            order.push(threads[t][done[t]]);
            done[t] += 1;
            stack.push((done, next, order));
        }
    }
    ends
}

/// For each state a window may end in: the state it started from and a witness order.
type Witnesses = HashMap<State, (State, Vec<usize>)>;

/// A small xorshift generator, one per thread, so runs need no extra crate.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[test]
fn concurrent_histories_are_linearizable_and_end_in_the_oracle_state() {
    repeat_until_they_overlap(|run| check_histories(Arc::new(CSTrie::new(D)), 13, run));
}

#[test]
fn cached_histories_are_linearizable_and_end_in_the_oracle_state() {
    let (mut hits, mut evictions) = (0, 0);
    repeat_until_they_overlap(|run| {
        let trie = Arc::new(Cached::new(CSTrie::new(D), 8).without_admission());
        let overlapping = check_histories(Arc::clone(&trie), 4, run);
        let stats = trie.cache_stats();
        eprintln!("{stats:?}");
        hits += stats.hits;
        evictions += stats.evictions;
        overlapping
    });
    assert!(hits > 1000, "too few hits to test them: {hits}");
    assert!(evictions > 0, "no evictions");
}

/// Runs `history` (which checks one recorded history in full and returns how many operations
/// overlapped the previous one) until the runs together overlapped enough for the checks to
/// have meant something. On a loaded machine (2 shared cores) the workers may barely overlap:
/// one run there overlapped only 33 operations.
fn repeat_until_they_overlap(mut history: impl FnMut(u64) -> usize) {
    let mut overlapping = 0;
    for run in 0..8 {
        overlapping += history(run);
        if overlapping > 100 {
            return;
        }
    }
    panic!("too little concurrency in 8 runs: {overlapping} overlapping operations");
}

/// Runs the rounds on `trie` with `writes` operations in 20 being subscribes and unsubscribes
/// (the rest lookups and one snapshot), checks the history, and returns how many operations
/// overlapped the previous one. `run` varies the workers' seeds.
fn check_histories<T: Subject>(trie: Arc<T>, writes: usize, run: u64) -> usize {
    let began = Instant::now();
    let world = Arc::new(World::new());
    let clock = Arc::new(AtomicU64::new(0));
    // Workers meet every OPS_PER_ROUND operations, which bounds the checker's windows even when
    // the threads really run in parallel.
    let barrier = Arc::new(Barrier::new(THREADS));
    // A spinning start line after the barrier, so the workers begin each round together
    // rather than as the OS wakes them one by one.
    let arrived = Arc::new(AtomicU64::new(0));
    let logs: Arc<Vec<Mutex<Vec<Event>>>> =
        Arc::new((0..THREADS).map(|_| Mutex::new(Vec::new())).collect());

    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let arrived = Arc::clone(&arrived);
            let (world, trie, clock, barrier, logs) = (
                Arc::clone(&world),
                Arc::clone(&trie),
                Arc::clone(&clock),
                Arc::clone(&barrier),
                Arc::clone(&logs),
            );
            std::thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((t as u64 + 1 + 8 * run) * 0x1234_5678));
                let np = world.patterns.len();
                for round in 0..ROUNDS as u64 {
                    barrier.wait();
                    arrived.fetch_add(1, Ordering::SeqCst);
                    let mut spins = 0u32;
                    while arrived.load(Ordering::SeqCst) < (round + 1) * THREADS as u64 {
                        spins += 1;
                        if spins % 4096 == 0 {
                            std::thread::yield_now();
                        } else {
                            std::hint::spin_loop();
                        }
                    }
                    for _ in 0..OPS_PER_ROUND {
                        let roll = rng.below(20);
                        let op = if roll < writes.div_ceil(2) {
                            Op::Sub(rng.below(np), rng.below(SUBSCRIBERS as usize) as u32)
                        } else if roll < writes {
                            Op::Unsub(rng.below(np), rng.below(SUBSCRIBERS as usize) as u32)
                        } else if roll < 17 {
                            Op::Lookup(rng.below(world.topics.len()))
                        } else if roll < 19 {
                            Op::Interest(rng.below(world.topics.len()))
                        } else {
                            Op::Snapshot
                        };
                        let inv = clock.fetch_add(1, Ordering::SeqCst);
                        let ret = match op {
                            Op::Sub(p, id) => Ret::Bool(trie.subscribe(&world.patterns[p], id)),
                            Op::Unsub(p, id) => Ret::Bool(trie.unsubscribe(&world.patterns[p], id)),
                            Op::Lookup(ti) => {
                                let ids = trie.lookup_str(&world.topics[ti]).unwrap();
                                Ret::Subs(ids.iter().fold(0, |m, &id| m | 1 << id))
                            }
                            Op::Interest(ti) => {
                                Ret::Bool(trie.has_interest_str(&world.topics[ti]).unwrap())
                            }
                            Op::Snapshot => {
                                let snap = trie.snap();
                                // The snapshot is frozen: reading it after the response is fine.
                                let resp = clock.fetch_add(1, Ordering::SeqCst);
                                let state = Ret::State(world.state_of(snap.as_ref()));
                                logs[t].lock().unwrap().push(Event {
                                    thread: t,
                                    op,
                                    ret: state,
                                    inv,
                                    resp,
                                });
                                continue;
                            }
                        };
                        let resp = clock.fetch_add(1, Ordering::SeqCst);
                        logs[t].lock().unwrap().push(Event {
                            thread: t,
                            op,
                            ret,
                            inv,
                            resp,
                        });
                    }
                }
            })
        })
        .collect();

    for w in workers {
        w.join().unwrap();
    }
    let mut events: Vec<Event> = logs
        .iter()
        .flat_map(|l| std::mem::take(&mut *l.lock().unwrap()))
        .collect();
    events.sort_by_key(|e| e.inv);
    // Operations that overlapped another in real time: the test is void if there are none.
    let overlapping = events.windows(2).filter(|w| w[1].inv < w[0].resp).count();
    // Cut the history where no operation is pending, check each window from every state the
    // previous one may have ended in, and keep one witness per state to replay at the end.
    let mut candidates: HashMap<State, ()> = HashMap::from([([0; 6], ())]);
    let mut steps: Vec<(usize, Witnesses)> = Vec::new();
    let mut at = 0;
    while at < events.len() {
        let mut end = at + 1;
        let mut horizon = events[at].resp;
        while end < events.len() && events[end].inv < horizon {
            horizon = horizon.max(events[end].resp);
            end += 1;
        }
        let window = &events[at..end];
        let mut next: Witnesses = HashMap::new();
        for start in candidates.keys() {
            for (state, order) in window_ends(&world, window, *start) {
                next.entry(state).or_insert((*start, order));
            }
        }
        assert!(
            !next.is_empty(),
            "operations {at}..{end} are not linearizable from any of {} states: {window:#?}",
            candidates.len()
        );
        candidates = next.keys().map(|s| (*s, ())).collect();
        steps.push((at, next));
        at = end;
    }
    let end = world.state_of(&*trie);
    assert!(
        candidates.contains_key(&end),
        "the trie ends in a state no linearization reaches"
    );
    // Replay one witness on the oracle, last window first to find it, then in order.
    let mut orders = Vec::new();
    let mut state = end;
    for (at, step) in steps.iter().rev() {
        let (before, order) = &step[&state];
        orders.push((*at, order.clone()));
        state = *before;
    }
    let oracle = NaiveMatcher::new(D);
    for (at, order) in orders.into_iter().rev() {
        for i in order {
            let e = events[at + i];
            match e.op {
                Op::Sub(p, id) => {
                    assert_eq!(Ret::Bool(oracle.subscribe(&world.patterns[p], id)), e.ret)
                }
                Op::Unsub(p, id) => {
                    assert_eq!(Ret::Bool(oracle.unsubscribe(&world.patterns[p], id)), e.ret)
                }
                Op::Lookup(_) | Op::Interest(_) | Op::Snapshot => {}
            }
        }
    }
    assert_eq!(trie.len(), oracle.len());
    if let Err(e) = trie.validate() {
        panic!("invariant broken after the concurrent history: {e}");
    }
    let mut got = trie.subscriptions();
    let mut want = oracle.subscriptions();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    for t in &world.topics {
        let mut a = trie.lookup_str(t).unwrap();
        let mut b = oracle.lookup_str(t).unwrap();
        a.sort();
        b.sort();
        assert_eq!(a, b, "lookup {t:?}");
    }
    let total = ROUNDS * THREADS * OPS_PER_ROUND;
    eprintln!(
        "{total} operations ({overlapping} overlapping the previous one), {} windows, checked in {:?}",
        steps.len(),
        began.elapsed()
    );
    overlapping
}
