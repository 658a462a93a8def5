//! Nothing leaks: after concurrent writes, snapshots and lookups, dropping every trie and
//! letting crossbeam-epoch collect its garbage returns the heap to where it started. A counting
//! allocator measures it; this file holds one test so no other test allocates meanwhile.

use std::sync::Arc;

use topicmatch::{CSTrie, Dialect, Matcher};

mod counting;

use counting::{collect_garbage, live};

#[global_allocator]
static A: counting::Counting = counting::Counting;

fn workload(seed: u64) {
    let d = Dialect::Amqp;
    let trie = Arc::new(CSTrie::new(d));
    let words = ["a", "b", "#", "*", "c"];
    let threads: Vec<_> = (0..3u64)
        .map(|t| {
            let trie = Arc::clone(&trie);
            std::thread::spawn(move || {
                let mut x = seed ^ ((t + 1) * 0x9e37_79b9);
                let mut next = |n: u64| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % n
                };
                let mut snaps = Vec::new();
                for _ in 0..20_000 {
                    let len = 1 + next(4) as usize;
                    let p: Vec<&str> = (0..len).map(|_| words[next(5) as usize]).collect();
                    let p = d.parse_pattern(&p.join(".")).unwrap();
                    let id = next(4) as u32;
                    match next(10) {
                        0..=3 => {
                            trie.subscribe(&p, id);
                        }
                        4..=7 => {
                            trie.unsubscribe(&p, id);
                        }
                        8 => {
                            trie.lookup_str("a.b.c").unwrap();
                        }
                        _ => {
                            snaps.push(trie.snapshot());
                            if snaps.len() > 8 {
                                snaps.remove(0);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // A deep pattern too, so the iterative drop is exercised.
    let deep = d.parse_pattern(&vec!["w"; 50_000].join(".")).unwrap();
    trie.subscribe(&deep, 1);
    let snap = trie.snapshot();
    trie.subscribe(&deep, 2);
    drop(snap);
}

#[test]
fn dropping_every_trie_frees_every_node() {
    // Warm up thread-locals and the epoch machinery so their one-off allocations are counted
    // in the baseline.
    workload(1);
    collect_garbage();
    let before = live();
    for seed in 2..5 {
        workload(seed);
    }
    collect_garbage();
    let after = live();
    eprintln!("live bytes: {before} before, {after} after");
    // A leak of one node per retired main node would be megabytes; allow for epoch bags and
    // thread registrations that crossbeam keeps around.
    assert!(
        after - before < 256 * 1024,
        "{} bytes still live after dropping every trie",
        after - before
    );
}
