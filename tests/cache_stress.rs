//! Writers churn while readers check a cached matcher: a lookup must see every write that
//! returned before it started, and nothing that was not yet written when it returned.
//!
//! One writer walks a known sequence: it subscribes `k.*` for ids 0, 1, ..., N - 1 (one call
//! each, or in loads of many pairs), then unsubscribes them in the same order, publishing
//! after each call how many calls have returned (a load counts its pairs). The states form a
//! chain, so a reader that read the count `before`, looked up a `k.<x>` topic, and read the
//! count `after`, must get the state after some m calls with `before <= m <= after + 1`
//! (call `after + 1` may be in flight, and a linearizable lookup may see it; with loads, any
//! pair of the load in flight): ids `0..m` on the way up, `m - N..N` on the way down. A
//! second writer churns patterns no `k.` topic matches, some of them on the topics' write
//! shards, bumping their counters all the time without changing any result. The writer
//! pauses now and then, so that entries live long enough to hit. The cache is small (eight
//! entries over sixteen topics) so that entries are evicted too.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;

use topicmatch::{CSTrie, Cached, Dialect, Matcher, Trie};

const D: Dialect = Dialect::Amqp;
/// Ids the writer subscribes, then unsubscribes.
const N: usize = 200;
/// Rounds of N subscribes and N unsubscribes.
const ROUNDS: usize = 100;
const READERS: usize = 2;
const TOPICS: usize = 16;

/// The ids after `m` calls of a round, sorted.
fn state_after(m: usize) -> Vec<u32> {
    if m <= N {
        (0..m as u32).collect()
    } else {
        ((m - N) as u32..N as u32).collect()
    }
}

/// `load`: subscribes go in loads of that many pairs (`subscribe_each_str`), and a lookup may
/// see any part of the load in flight; 1 for single subscribes.
fn churn<M: Matcher + 'static>(m: Arc<Cached<M>>, always_stores: bool, load: usize) {
    assert_eq!(N % load, 0, "loads that end on the round's turn");
    let pattern = D.parse_pattern("k.*").unwrap();
    let topics: Vec<String> = (0..TOPICS).map(|i| format!("k.{i}")).collect();
    // Calls returned in the current round, and the round; the reader needs both consistent,
    // so the writer publishes `round * 2N + calls` as one number.
    let progress = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (m, progress) = (Arc::clone(&m), Arc::clone(&progress));
        thread::spawn(move || {
            for round in 0..ROUNDS {
                for call in 0..2 * N {
                    let id = (call % N) as u32;
                    if call < N && load > 1 {
                        if call % load == 0 {
                            let pairs: Vec<(&str, u32)> =
                                (id..id + load as u32).map(|i| ("k.*", i)).collect();
                            let mut added = Vec::new();
                            m.subscribe_each_str(&pairs, &mut added).unwrap();
                            assert_eq!(added, vec![true; load]);
                            progress.store(round * 2 * N + call + load, SeqCst);
                        }
                        continue;
                    }
                    let changed = if call < N {
                        m.subscribe(&pattern, id)
                    } else {
                        m.unsubscribe(&pattern, id)
                    };
                    assert!(changed);
                    progress.store(round * 2 * N + call + 1, SeqCst);
                    if call % 16 == 0 {
                        thread::sleep(std::time::Duration::from_micros(200));
                    }
                }
            }
        })
    };
    let noise = {
        let (m, stop) = (Arc::clone(&m), Arc::clone(&stop));
        thread::spawn(move || {
            // No `k.` topic matches these, but they cover every kind of shard a write can take
            // (see `src/cache/shards.rs`): `k.<x>.y` shares the topics' leading word, `*.<x>.y`
            // may share a second word, and `#.y` invalidates every topic.
            let texts = [
                "z.1.#", "z.2.#", "k.1.y", "k.2.y", "*.1.y", "*.2.y", "#.y", "k.#.y",
            ];
            let other: Vec<_> = texts.iter().map(|t| D.parse_pattern(t).unwrap()).collect();
            let mut i = 0;
            while !stop.load(SeqCst) {
                m.subscribe(&other[i % 8], 9);
                m.unsubscribe(&other[(i + 3) % 8], 9);
                i += 1;
                thread::sleep(std::time::Duration::from_micros(50));
            }
        })
    };
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (m, progress, topics) = (Arc::clone(&m), Arc::clone(&progress), topics.clone());
            thread::spawn(move || {
                let mut checked = 0usize;
                let mut i = r;
                loop {
                    let before = progress.load(SeqCst);
                    if before == ROUNDS * 2 * N {
                        return checked;
                    }
                    let mut got = m.lookup_str(&topics[i % TOPICS]).unwrap();
                    let after = progress.load(SeqCst);
                    got.sort_unstable();
                    // Across a round's end the chain goes on: the state after a whole round is
                    // the empty state, the start of the next.
                    let ok = (before..=after + load).any(|p| got == state_after(p % (2 * N)));
                    assert!(
                        ok,
                        "lookup between {before} and {after} calls got {} ids: {got:?}",
                        got.len()
                    );
                    checked += 1;
                    i += 1;
                }
            })
        })
        .collect();
    writer.join().unwrap();
    let checked: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
    stop.store(true, SeqCst);
    noise.join().unwrap();
    let s = m.cache_stats();
    eprintln!("{checked} lookups checked; {s:?}");
    assert!(checked > 1000, "too few lookups checked: {checked}");
    if always_stores {
        assert!(s.hits > 0, "no hits: {s:?}");
        assert!(s.misses > 0 && s.evictions > 0, "{s:?}");
    }
}

#[test]
fn cached_cstrie_readers_see_every_returned_write() {
    churn(
        Arc::new(Cached::new(CSTrie::new(D), 8).without_admission()),
        true,
        1,
    );
}

#[test]
fn cached_trie_readers_see_every_returned_write() {
    churn(
        Arc::new(Cached::new(Trie::new(D), 8).without_admission()),
        true,
        1,
    );
}

#[test]
fn cached_cstrie_with_admission_readers_see_every_returned_write() {
    churn(Arc::new(Cached::new(CSTrie::new(D), 8)), false, 1);
}

/// Subscribes in loads past the cache's bulk size: each is one write on every topic around
/// the inner matcher's own (the `CSTrie` adds the pairs one by one, so a lookup may see part
/// of a load; the `Trie` under one hold of its lock).
#[test]
fn cached_cstrie_readers_see_every_returned_load() {
    churn(
        Arc::new(Cached::new(CSTrie::new(D), 8).without_admission()),
        true,
        100,
    );
}

#[test]
fn cached_trie_readers_see_every_returned_load() {
    churn(
        Arc::new(Cached::new(Trie::new(D), 8).without_admission()),
        true,
        100,
    );
}
