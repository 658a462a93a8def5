//! Writes into one wide level race each other, lookups and snapshots: the word map of that
//! level is deep enough (thousands of words) that writes copy paths of several nodes by moving
//! their slots (`hamt.rs`, "Moving instead of counting"), lose GCASes to each other and retry,
//! and meet maps shared with snapshots, which force counted copies. Each writer owns its own
//! words, so the end state is known; snapshots are walked while writes go on, reading old
//! nodes whose slots have moved. A counting allocator checks that, once every trie is dropped
//! and the garbage collected, nothing is left: a slot dropped by both its old and its new node
//! would free twice (or crash), one dropped by neither would leak. A narrow level races too:
//! there a write often replaces the only slot of a map node, so its copy owns every slot at
//! once and another writer may move from it before the first has handed its moves over. This
//! file holds one test so no other test allocates meanwhile.

use std::collections::BTreeSet;
use std::sync::Arc;

use topicmatch::cstrie::Quiescence;
use topicmatch::{CSTrie, Dialect, Matcher};

mod counting;

use counting::{collect_garbage, live};

#[global_allocator]
static A: counting::Counting = counting::Counting;

const D: Dialect = Dialect::Amqp;
const WRITERS: u32 = 2;
const WORDS: u32 = 3000;
const OPS: usize = 30_000;

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// One run: the words each writer leaves subscribed must be exactly the trie's content.
fn workload(seed: u64) {
    let trie = Arc::new(CSTrie::new(D));
    // A wide level to start from, with a subscriber no writer touches.
    for i in 0..WORDS {
        trie.subscribe(&D.parse_pattern(&format!("users.{i}")).unwrap(), 100);
    }
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let trie = Arc::clone(&trie);
            std::thread::spawn(move || {
                let mut x = seed ^ (u64::from(t) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let mut mine = BTreeSet::new();
                for _ in 0..OPS {
                    let r = xorshift(&mut x);
                    // Writer t owns the words i with i % WRITERS == t, some of them new.
                    let i = (r >> 8) as u32 % (2 * WORDS / WRITERS) * WRITERS + t;
                    let p = D.parse_pattern(&format!("users.{i}")).unwrap();
                    if r % 3 == 0 {
                        assert_eq!(trie.unsubscribe(&p, t), mine.remove(&i));
                    } else {
                        assert_eq!(trie.subscribe(&p, t), mine.insert(i));
                    }
                }
                mine
            })
        })
        .collect();
    let reader = {
        let trie = Arc::clone(&trie);
        std::thread::spawn(move || {
            let mut x = seed.rotate_left(17) | 1;
            let mut snaps: Vec<CSTrie> = Vec::new();
            for k in 0..OPS / 4 {
                let i = xorshift(&mut x) as u32 % (2 * WORDS);
                let got = trie.lookup_str(&format!("users.{i}")).unwrap();
                let owner = i % WRITERS;
                assert!(
                    got.iter().all(|&s| s == owner || (s == 100 && i < WORDS)),
                    "users.{i}: {got:?}"
                );
                if i < WORDS {
                    assert!(got.contains(&100), "users.{i} lost its first subscriber");
                }
                if k % 500 == 0 {
                    snaps.push(trie.snapshot());
                    if snaps.len() > 3 {
                        snaps.remove(0);
                    }
                }
                if k % 700 == 0 {
                    if let Some(s) = snaps.first() {
                        // Walk a snapshot while writers move slots out of the maps it shares.
                        let n = s.subscriptions().len();
                        assert!(n >= WORDS as usize, "{n}");
                    }
                }
            }
        })
    };
    let mut want: BTreeSet<(String, u32)> =
        (0..WORDS).map(|i| (format!("users.{i}"), 100)).collect();
    for (t, w) in writers.into_iter().enumerate() {
        for i in w.join().unwrap() {
            want.insert((format!("users.{i}"), t as u32));
        }
    }
    reader.join().unwrap();
    trie.validate(Quiescence::AfterConcurrentWrites).unwrap();
    let got: BTreeSet<(String, u32)> = trie.subscriptions().into_iter().collect();
    assert_eq!(got, want);
    assert_eq!(trie.len(), want.len());
}

/// A level of a few words: one writer changes the subscribers of `w0` (replacing the leaf of
/// the only word its map node holds), the other adds and removes words beside it, while a
/// reader looks up and snapshots. The end state is known, and `w0` never loses subscriber 100.
fn narrow_workload(seed: u64, others: u32) {
    const OPS: usize = 20_000;
    let trie = Arc::new(CSTrie::new(D));
    let w0 = D.parse_pattern("w0").unwrap();
    trie.subscribe(&w0, 100);
    let writers: Vec<_> = (0..2u32)
        .map(|t| {
            let trie = Arc::clone(&trie);
            std::thread::spawn(move || {
                let mut x = seed ^ (u64::from(t) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let mut mine = BTreeSet::new();
                for _ in 0..OPS {
                    let r = xorshift(&mut x);
                    let (w, id) = match t {
                        0 => (0, (r >> 20) as u32 % 4),
                        _ => (1 + (r >> 8) as u32 % others, 7),
                    };
                    let p = D.parse_pattern(&format!("w{w}")).unwrap();
                    if r % 2 == 0 {
                        assert_eq!(trie.unsubscribe(&p, id), mine.remove(&(w, id)));
                    } else {
                        assert_eq!(trie.subscribe(&p, id), mine.insert((w, id)));
                    }
                }
                mine
            })
        })
        .collect();
    let reader = {
        let trie = Arc::clone(&trie);
        std::thread::spawn(move || {
            let mut snaps: Vec<CSTrie> = Vec::new();
            for k in 0..OPS / 8 {
                let got = trie.lookup_str("w0").unwrap();
                assert!(got.contains(&100), "w0 lost subscriber 100: {got:?}");
                if k % 50 == 0 {
                    snaps.push(trie.snapshot());
                    if snaps.len() > 2 {
                        let old = snaps.remove(0);
                        assert!(old.subscriptions().contains(&("w0".into(), 100)));
                    }
                }
            }
        })
    };
    let mut want = BTreeSet::from([("w0".to_string(), 100)]);
    for w in writers {
        for (w, id) in w.join().unwrap() {
            want.insert((format!("w{w}"), id));
        }
    }
    reader.join().unwrap();
    trie.validate(Quiescence::AfterConcurrentWrites).unwrap();
    let got: BTreeSet<(String, u32)> = trie.subscriptions().into_iter().collect();
    assert_eq!(got, want);
}

#[test]
fn racing_writes_into_a_wide_level_free_every_slot_once() {
    // Warm up thread-locals and the epoch machinery so their one-off allocations are counted
    // in the baseline.
    workload(1);
    collect_garbage();
    let before = live();
    for seed in 2..5 {
        workload(seed);
    }
    for seed in 0..8 {
        narrow_workload(seed, 1 + seed as u32 % 3);
    }
    collect_garbage();
    let after = live();
    eprintln!("live bytes: {before} before, {after} after");
    // Each run allocates megabytes of words and nodes; allow for epoch bags and thread
    // registrations that crossbeam keeps around.
    assert!(
        after - before < 256 * 1024,
        "{} bytes still live after dropping every trie",
        after - before
    );
}
