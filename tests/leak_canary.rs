//! The leak checker's own check: with `TOPICMATCH_LEAK_CANARY=1` this test loses heap memory
//! on purpose (blocks never freed that nothing points to any more), and `make leak-check`
//! requires valgrind to fail on it before it trusts a clean run of the real tests. Without the
//! variable it frees everything as usual.

/// A pattern list as a matcher might own one: a buffer of strings, each a block of its own.
#[inline(never)]
fn patterns(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("sensors.{i}.#")).collect()
}

#[test]
fn lost_buffers_are_leaks_when_asked_for() {
    let lose = std::env::var_os("TOPICMATCH_LEAK_CANARY").is_some();
    for n in 1..=8 {
        let v = std::hint::black_box(patterns(n * 16));
        if lose {
            std::mem::forget(v);
        }
    }
}
