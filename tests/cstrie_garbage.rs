//! A writer's retired nodes are freed within a few dozen of its writes, not hundreds: the
//! `CSTrie` flushes each thread's retired nodes every few writes, so the garbage a stream of
//! writes holds at any time stays small (and, in a wide level, still cached when it is freed).
//! A counting allocator and the node pool's count measure it after each write; this file holds
//! one test so no other test allocates meanwhile.

use topicmatch::{CSTrie, Dialect, Matcher};

mod counting;

use counting::{collect_garbage, live};

#[global_allocator]
static A: counting::Counting = counting::Counting;

#[test]
fn a_stream_of_writes_holds_little_garbage() {
    let d = Dialect::Amqp;
    let trie = CSTrie::new(d);
    // A level of 100,000 words: each write replaces a path of four map nodes.
    for i in 0..100_000 {
        trie.subscribe(&d.parse_pattern(&format!("users.{i}")).unwrap(), 1);
    }
    let fresh: Vec<_> = (0..4096)
        .map(|i| d.parse_pattern(&format!("users.new{i}")).unwrap())
        .collect();
    // One round first, so that the thread's epoch handle and the collector's queue exist.
    for p in &fresh {
        trie.subscribe(p, 2);
        trie.unsubscribe(p, 2);
    }
    collect_garbage();
    // Sampled after each write: the garbage is map nodes, which live in topicmatch's own pool
    // (which the heap's peak does not see), and C-nodes and words, which live in the heap.
    let base = live();
    let mut peak = base;
    let mut writes = 0;
    for _ in 0..3 {
        for p in &fresh {
            assert!(trie.subscribe(p, 2));
            peak = peak.max(live());
            assert!(trie.unsubscribe(p, 2));
            peak = peak.max(live());
            writes += 2;
        }
    }
    let held = peak - base;
    // What one write retires here: its replaced main node, C-node and map path.
    let per_write = {
        collect_garbage();
        let before = live();
        trie.subscribe(&fresh[0], 2);
        let grown = live() - before;
        trie.unsubscribe(&fresh[0], 2);
        grown.max(1)
    };
    eprintln!(
        "{writes} writes held at most {held} bytes of garbage, {} writes' worth \
         (a write allocates {per_write} bytes)",
        held / per_write
    );
    // Freed after at most three flushes of 16 writes each, with room to spare; crossbeam's own
    // schedule alone holds some 300 writes' worth.
    assert!(
        held < 100 * per_write,
        "{held} bytes of garbage held, {} writes' worth",
        held / per_write
    );
}
