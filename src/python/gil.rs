//! When a call releases the GIL: decided by measured time, not by a count of items.
//!
//! Releasing the GIL (`Python::detach`) lets other threads run Python meanwhile, and lets
//! lookups from several Python threads run in parallel. Its price is taking the GIL back. Next
//! to a thread that runs pure Python, CPython makes the returning thread wait out that thread's
//! switch interval (5 ms by default) however short the released work was: 64 cached lookups,
//! about 15 µs of work, then cost the caller 99 % of its rate (BENCHMARKS.md, "The GIL rule").
//! Next to threads that release too (parallel lookups), the wait is microseconds.
//!
//! Neither cost is known in advance, so both are measured:
//!
//! - the work a batch has left, estimated from its first items, timed with the GIL held
//!   (or, for a scan matcher, from its number of patterns);
//! - the wait to take the GIL back, timed on every release and kept as a moving average for
//!   the process ([`Policy`]).
//!
//! A batch releases when the work left is at least [`MIN_RELEASE`] and either another call of
//! this module is in flight on another thread, or the work left is at least the expected wait:
//!
//! - Beside other lookups, every batch worth [`MIN_RELEASE`] releases, so that they run in
//!   parallel. Their waits are short as long as they all release; were each thread to judge
//!   by its waits alone, one that kept the GIL would make the others' waits long, and all
//!   would end up keeping it (measured: four threads on two cores fell to one thread's rate).
//! - Alone in this module, the caller competes only with other Python code, and releases when
//!   the work left repays the expected wait, and always from [`SWITCH_INTERVAL`] of work left:
//!   held work in Rust never yields to the interpreter's switch requests, so keeping the GIL
//!   longer would stop every other thread (a signal sender, for one) for the whole call. Beside a busy Python thread the caller then keeps
//!   at least half its rate, which is what it gets by keeping the GIL (the interpreter shares
//!   the GIL between the two by switch intervals), and the busy thread runs meanwhile. While
//!   the expected wait forbids releasing, one release per [`PROBE_EVERY`] still goes ahead, so
//!   the average follows when the busy thread goes away. Only these releases feed the average.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The shortest work worth releasing for, even when the GIL comes back at once: below it,
/// the release and the result conversion cost as much as the parallel work gains.
pub(crate) const MIN_RELEASE: Duration = Duration::from_micros(100);

/// CPython's default switch interval (`sys.getswitchinterval()`): the longest a thread that
/// wants the GIL waits before the interpreter makes the holder give it up. Held work in Rust
/// never gives it up, so work longer than this always releases, whatever the expected wait.
const SWITCH_INTERVAL: Duration = Duration::from_millis(5);

/// How long a batch runs with the GIL held before it estimates the rest.
const PROBE: Duration = Duration::from_micros(10);

/// The longest run with the GIL released before the batch takes it back to convert its
/// results and answer Ctrl-C.
const SLICE: Duration = Duration::from_millis(10);

/// The most items run with the GIL held between two checks for Ctrl-C.
pub(crate) const HELD_ITEMS: usize = 4096;

/// Items between two reads of the clock (a read costs about 20 ns, a cached lookup 200 ns).
const CLOCK_EVERY: usize = 8;

/// How often a release is tried although the expected wait says it does not pay.
const PROBE_EVERY: Duration = Duration::from_millis(100);

/// What the process has learned about taking the GIL back.
pub(crate) struct Policy {
    /// Moving average of the wait to take the GIL back, in nanoseconds (each new wait
    /// weighs one half).
    wait_ns: AtomicU64,
    /// When a release was last tried against the average, in nanoseconds since `epoch`.
    last_probe_ns: AtomicU64,
    /// Calls of this module running now, on any thread.
    in_flight: AtomicUsize,
    released: AtomicU64,
    kept: AtomicU64,
}

static POLICY: Policy = Policy {
    wait_ns: AtomicU64::new(0),
    last_probe_ns: AtomicU64::new(0),
    in_flight: AtomicUsize::new(0),
    released: AtomicU64::new(0),
    kept: AtomicU64::new(0),
};

/// Counts a call as in flight for as long as it lives.
struct InFlight;

impl InFlight {
    fn enter() -> Self {
        POLICY.in_flight.fetch_add(1, Relaxed);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        POLICY.in_flight.fetch_sub(1, Relaxed);
    }
}

/// A decision to release the GIL, and whether its wait should feed the average.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Decision {
    Keep,
    Release { learn: bool },
}

fn since_start() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    nanos(START.get_or_init(Instant::now).elapsed())
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Policy {
    /// Whether work of about `left` pays for a release, for a call counted in `in_flight`.
    /// Counts the decision.
    fn decide(&self, left: Duration) -> Decision {
        let decision = if left < MIN_RELEASE {
            Decision::Keep
        } else if self.in_flight.load(Relaxed) > 1 {
            Decision::Release { learn: false }
        } else if left >= SWITCH_INTERVAL
            || nanos(left) >= self.wait_ns.load(Relaxed)
            || self.probe_due()
        {
            Decision::Release { learn: true }
        } else {
            Decision::Keep
        };
        let counter = match decision {
            Decision::Keep => &self.kept,
            Decision::Release { .. } => &self.released,
        };
        counter.fetch_add(1, Relaxed);
        decision
    }

    /// True once per `PROBE_EVERY` across the process.
    fn probe_due(&self) -> bool {
        let now = since_start();
        let last = self.last_probe_ns.load(Relaxed);
        now.saturating_sub(last) >= nanos(PROBE_EVERY)
            && self
                .last_probe_ns
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
    }

    /// Folds one measured wait into the average. Two threads storing at once may lose one
    /// sample, which an average can afford.
    fn record_wait(&self, wait: Duration) {
        let old = self.wait_ns.load(Relaxed);
        self.wait_ns.store(old / 2 + nanos(wait) / 2, Relaxed);
    }
}

/// Runs `f` with the GIL released: for calls that always release (bulk writes, full
/// listings), whose length is not known in advance but is rarely short.
pub(crate) fn detach<T, F>(py: Python<'_>, f: F) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let _call = InFlight::enter();
    detach_timed(py, f, false)
}

/// Runs `f` with the GIL released; with `learn`, the wait to take it back feeds the average.
fn detach_timed<T, F>(py: Python<'_>, f: F, learn: bool) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let (value, done) = py.detach(|| {
        let value = f();
        (value, Instant::now())
    });
    if learn {
        POLICY.record_wait(done.elapsed());
    }
    value
}

/// Runs a call whose work is estimated up front (a scan of many patterns), releasing the GIL
/// when `estimate` pays for it.
pub(crate) fn run_estimated<T, F>(py: Python<'_>, estimate: Duration, f: F) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    if estimate < MIN_RELEASE {
        // A single index lookup: no decision to make or count.
        return f();
    }
    let _call = InFlight::enter();
    match POLICY.decide(estimate) {
        Decision::Release { learn } => detach_timed(py, f, learn),
        Decision::Keep => f(),
    }
}

/// Runs `step` on the items `0..n` of a batch and hands the results to `sink` a slice at a
/// time, with the GIL held (to convert them and to answer Ctrl-C between slices). Each slice
/// starts with the GIL held; once it has measured what the rest of the batch will cost, it
/// releases the GIL for up to [`SLICE`] if that pays, and otherwise keeps it for up to
/// [`HELD_ITEMS`] items. `per_item` is an estimate of one item's cost made before running
/// (zero for none: the first items are then timed).
pub(crate) fn run_batch<T, S, K>(
    py: Python<'_>,
    n: usize,
    per_item: Duration,
    step: S,
    mut sink: K,
) -> PyResult<()>
where
    T: Send,
    S: Fn(usize) -> PyResult<T> + Sync,
    K: FnMut(Vec<T>) -> PyResult<()>,
{
    let _call = InFlight::enter();
    let mut next = 0;
    while next < n {
        // Pinned from the core's read to the conversion: see `Registry`.
        let guard = crossbeam_epoch::pin();
        let first = next;
        let held_end = (first + HELD_ITEMS).min(n);
        let mut out = Vec::new();
        let release = if per_item.is_zero() {
            let start = Instant::now();
            while next < held_end {
                out.push(step(next)?);
                next += 1;
                if (next - first) % CLOCK_EVERY == 0 && start.elapsed() >= PROBE {
                    break;
                }
            }
            let each = start.elapsed() / u32::try_from(next - first).unwrap_or(u32::MAX);
            if next < n {
                POLICY.decide(each.saturating_mul(count(n - next)))
            } else {
                Decision::Keep
            }
        } else {
            POLICY.decide(per_item.saturating_mul(count(n - next)))
        };
        if let Decision::Release { learn } = release {
            let work = || {
                let start = Instant::now();
                let mut rest = Vec::new();
                let mut i = next;
                while i < n {
                    match step(i) {
                        Ok(t) => rest.push(t),
                        Err(e) => return (Err(e), i),
                    }
                    i += 1;
                    if (i - next) % CLOCK_EVERY == 0 && start.elapsed() >= SLICE {
                        break;
                    }
                }
                (Ok(rest), i)
            };
            let (rest, after) = detach_timed(py, work, learn);
            // A Ctrl-C that came during the released work is answered before any Python
            // object is made: making them can run finalizers, and a signal handled inside one
            // raises there and is lost.
            py.check_signals()?;
            out.extend(rest?);
            next = after;
        } else {
            while next < held_end {
                out.push(step(next)?);
                next += 1;
            }
        }
        sink(out)?;
        drop(guard);
        // A long batch answers Ctrl-C between slices; nothing it did needs undoing.
        py.check_signals()?;
    }
    Ok(())
}

fn count(items: usize) -> u32 {
    u32::try_from(items).unwrap_or(u32::MAX)
}

/// `topicmatch._core._gil_stats()`: the policy's counters, for the benchmarks.
#[pyfunction]
pub(crate) fn _gil_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let stats = PyDict::new(py);
    stats.set_item("released", POLICY.released.load(Relaxed))?;
    stats.set_item("kept", POLICY.kept.load(Relaxed))?;
    stats.set_item("wait_ns", POLICY.wait_ns.load(Relaxed))?;
    Ok(stats)
}
