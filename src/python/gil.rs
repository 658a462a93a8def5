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
//! A batch releases when the work left is at least [`MIN_RELEASE`], or [`MIN_PARALLEL`] when
//! another thread has called this module within [`ACTIVE_WINDOW`] ([`Callers`]), or when the
//! work left is at least the expected wait:
//!
//! - Beside other threads that use the module, a batch releases from [`MIN_PARALLEL`] of work,
//!   so that the lookups run in parallel while the GIL is held only to convert results. The
//!   other threads' waits are short as long as every thread releases; were each thread to
//!   judge by its waits alone, one that kept the GIL would make the others' waits long, and
//!   all would end up keeping it (measured: four threads on two cores fell to one thread's
//!   rate). "Beside" is a recent call, not a call in flight: a thread that keeps the GIL
//!   never sees the other thread in flight, because that thread waits for the GIL outside
//!   any call, and only the interpreter's switch interval (5 ms) would hand it over.
//! - Alone in this module, the caller competes only with other Python code, and releases when
//!   the work left repays the expected wait, and always from [`SWITCH_INTERVAL`] of work left:
//!   held work in Rust never yields to the interpreter's switch requests, so keeping the GIL
//!   longer would stop every other thread (a signal sender, for one) for the whole call. Beside a busy Python thread the caller then keeps
//!   at least half its rate, which is what it gets by keeping the GIL (the interpreter shares
//!   the GIL between the two by switch intervals), and the busy thread runs meanwhile. While
//!   the expected wait forbids releasing, one release per [`PROBE_EVERY`] still goes ahead, so
//!   the average follows when the busy thread goes away. Only these releases feed the average.
//!
//! Writes (`subscribe`, `unsubscribe`) release around the core's write only beside other
//! threads of this module, and only while those threads hand the GIL back within
//! [`WRITE_WAIT_MAX`] ([`write`]): alone, the release would cost more than the write, and
//! beside threads that keep the GIL it would cost a switch interval.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The shortest work worth releasing for, even when the GIL comes back at once: below it,
/// the release and the result conversion cost as much as the parallel work gains.
pub(crate) const MIN_RELEASE: Duration = Duration::from_micros(100);

/// The shortest work worth releasing for when other threads use the module. Each release
/// then hands the GIL to a sleeping thread and takes it back from one: two wake-ups, which
/// cost tens of microseconds on a virtual machine. Measured here with two threads on cached
/// lookups (BENCHMARKS.md, "Python threads"): batches with 18 µs of work left ran 0.72x one
/// thread when they released and 0.84x when they kept the GIL; with 37 µs left, 1.47x
/// released against 0.92x kept.
pub(crate) const MIN_PARALLEL: Duration = Duration::from_micros(25);

/// How recent another thread's call must be for the module to count as shared: two switch
/// intervals, so a thread that waits out one for the GIL still counts.
const ACTIVE_WINDOW: Duration = Duration::from_millis(10);

/// How long a batch beside other threads runs with the GIL held before it estimates the rest.
const PROBE_PARALLEL: Duration = Duration::from_micros(1);

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

/// The longest expected wait to take the GIL back for which a single write still releases it.
/// Beside threads that release for their lookups the wait is tens of microseconds; beside
/// threads that keep the GIL it is a switch interval.
const WRITE_WAIT_MAX: Duration = Duration::from_micros(2500);

/// How often a write releases although its expected wait says not to, so that the average
/// follows when the threads beside it change: at most a tenth of a writer's time (one switch
/// interval) spent on probes.
const WRITE_PROBE_EVERY: Duration = Duration::from_millis(50);

/// What the process has learned about taking the GIL back.
pub(crate) struct Policy {
    /// Moving average of the wait to take the GIL back, in nanoseconds (each new wait
    /// weighs one half).
    wait_ns: AtomicU64,
    /// When a release was last tried against the average, in nanoseconds since `epoch`.
    last_probe_ns: AtomicU64,
    /// The threads that called this module last.
    callers: Callers,
    released: AtomicU64,
    kept: AtomicU64,
    /// Moving average of the wait to take the GIL back after a single write released it, in
    /// nanoseconds (each new wait weighs one quarter).
    write_wait_ns: AtomicU64,
    /// When a write last released against its average, as `last_probe_ns`.
    last_write_probe_ns: AtomicU64,
}

static POLICY: Policy = Policy {
    wait_ns: AtomicU64::new(0),
    last_probe_ns: AtomicU64::new(0),
    callers: Callers::new(),
    released: AtomicU64::new(0),
    kept: AtomicU64::new(0),
    write_wait_ns: AtomicU64::new(0),
    last_write_probe_ns: AtomicU64::new(0),
};

/// The last two distinct threads that called this module, each with the time of its latest
/// call: enough to tell a thread whether another uses the module now. Each word packs a
/// thread's token (high 16 bits) and a time in microseconds since [`since_start`]'s start.
///
/// The updates are plain loads and stores, not a compare-and-swap loop: two threads updating
/// at once may lose one stamp, which the next call puts back, and a wrong answer costs one
/// release too many or too few, never a wrong result.
struct Callers {
    latest: AtomicU64,
    other: AtomicU64,
}

const TOKEN_SHIFT: u32 = 48;
const TIME_MASK: u64 = (1 << TOKEN_SHIFT) - 1;

/// A thread refreshes its own stamp at most this often (microseconds), so a thread alone
/// writes the shared word once a millisecond, not once a call.
const RESTAMP_US: u64 = 1000;

impl Callers {
    const fn new() -> Self {
        Callers {
            latest: AtomicU64::new(0),
            other: AtomicU64::new(0),
        }
    }

    /// Records a call of this thread, and says whether another thread called within
    /// [`ACTIVE_WINDOW`].
    fn stamp(&self) -> bool {
        let me = thread_token();
        let now = (since_start() / 1000) & TIME_MASK;
        let recent = |word: u64| {
            word >> TOKEN_SHIFT != me
                && word != 0
                && now.saturating_sub(word & TIME_MASK) < nanos(ACTIVE_WINDOW) / 1000
        };
        let latest = self.latest.load(Relaxed);
        let other = self.other.load(Relaxed);
        let shared = recent(latest) || recent(other);
        let stamp = me << TOKEN_SHIFT | now;
        if latest >> TOKEN_SHIFT != me {
            self.other.store(latest, Relaxed);
            self.latest.store(stamp, Relaxed);
        } else if now.saturating_sub(latest & TIME_MASK) >= RESTAMP_US {
            self.latest.store(stamp, Relaxed);
        }
        shared
    }
}

/// This thread's token for [`Callers`]: a small number taken once per thread (tokens wrap
/// after 65,535 threads; two threads sharing one only look alone to each other).
fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: u64 = NEXT.fetch_add(1, Relaxed) % (1 << 16);
    }
    TOKEN.with(|t| *t)
}

/// Records a call of this thread; true if another thread uses the module now.
pub(crate) fn shared() -> bool {
    POLICY.callers.stamp()
}

/// A decision to release the GIL, and whether its wait should feed the average.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Decision {
    Keep,
    Release { learn: bool },
}

/// True when `period` has passed since the time in `last` (nanoseconds since
/// [`since_start`]'s start), and this caller is the one that moves it to now.
fn due(last: &AtomicU64, period: Duration) -> bool {
    let now = since_start();
    let then = last.load(Relaxed);
    now.saturating_sub(then) >= nanos(period)
        && last.compare_exchange(then, now, Relaxed, Relaxed).is_ok()
}

fn since_start() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    nanos(START.get_or_init(Instant::now).elapsed())
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Policy {
    /// Whether work of about `left` pays for a release, for a call that found the module
    /// `shared` with other threads. Counts the decision.
    fn decide(&self, left: Duration, shared: bool) -> Decision {
        let decision = if shared {
            if left >= MIN_PARALLEL {
                Decision::Release { learn: false }
            } else {
                Decision::Keep
            }
        } else if left < MIN_RELEASE {
            Decision::Keep
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
        due(&self.last_probe_ns, PROBE_EVERY)
    }

    /// Whether a single write beside other threads releases the GIL: when they have been
    /// handing it back promptly, and once per [`WRITE_PROBE_EVERY`] otherwise. Counts a kept
    /// write.
    fn write_may_release(&self) -> bool {
        let release = self.write_wait_ns.load(Relaxed) < nanos(WRITE_WAIT_MAX)
            || due(&self.last_write_probe_ns, WRITE_PROBE_EVERY);
        if !release {
            self.kept.fetch_add(1, Relaxed);
        }
        release
    }

    /// Folds the wait after one released write into its average with a weight of a quarter:
    /// one wait of a switch interval among short ones (a reader converting a long answer)
    /// leaves the average under [`WRITE_WAIT_MAX`], three in a row take it over.
    fn record_write_wait(&self, wait: Duration) {
        let old = self.write_wait_ns.load(Relaxed);
        self.write_wait_ns
            .store(old - old / 4 + nanos(wait) / 4, Relaxed);
    }

    /// Folds one measured wait into the average. Two threads storing at once may lose one
    /// sample, which an average can afford.
    fn record_wait(&self, wait: Duration) {
        let old = self.wait_ns.load(Relaxed);
        self.wait_ns.store(old / 2 + nanos(wait) / 2, Relaxed);
    }
}

/// Runs a write `f`, with the GIL released if other threads use this module now and hand the
/// GIL back promptly ([`Policy::write_may_release`]): alone, the release would cost more than
/// a write of a microsecond; beside threads that release the GIL for their lookups, keeping it
/// through the write (and through a wait for the `Trie`'s lock) would stall their
/// conversions; beside threads that keep it (single `lookup` calls in a loop), each release
/// cost the writer a whole switch interval: 150 to 380 writes a second.
pub(crate) fn write<T, F>(py: Python<'_>, f: F) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    if !shared() || !POLICY.write_may_release() {
        return f();
    }
    POLICY.released.fetch_add(1, Relaxed);
    let (value, wait) = detach_waiting(py, f);
    POLICY.record_write_wait(wait);
    value
}

/// Runs `f` with the GIL released: for calls that always release (bulk writes, full
/// listings), whose length is not known in advance but is rarely short.
pub(crate) fn detach<T, F>(py: Python<'_>, f: F) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    shared();
    detach_timed(py, f, false)
}

/// Runs `f` with the GIL released; with `learn`, the wait to take it back feeds the average.
fn detach_timed<T, F>(py: Python<'_>, f: F, learn: bool) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let (value, wait) = detach_waiting(py, f);
    if learn {
        POLICY.record_wait(wait);
    }
    value
}

/// Runs `f` with the GIL released; returns its value and how long taking the GIL back took.
fn detach_waiting<T, F>(py: Python<'_>, f: F) -> (T, Duration)
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let (value, done) = py.detach(|| {
        let value = f();
        (value, Instant::now())
    });
    (value, done.elapsed())
}

/// The estimated work of `n` items of `each` (saturating), for [`run_estimated`] and the
/// batches' own estimates.
pub(crate) fn work_of(each: Duration, n: usize) -> Duration {
    each.saturating_mul(count(n))
}

/// Runs a call whose work is estimated up front (a scan of many patterns), releasing the GIL
/// when `estimate` pays for it.
pub(crate) fn run_estimated<T, F>(py: Python<'_>, estimate: Duration, f: F) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let shared = shared();
    if estimate < MIN_RELEASE {
        // A single index lookup: no decision to make or count. Its stamp still tells batch
        // threads beside it to release, or it would wait out their switch intervals.
        return f();
    }
    match POLICY.decide(estimate, shared) {
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
    let mut next = 0;
    while next < n {
        let shared = shared();
        let probe = if shared { PROBE_PARALLEL } else { PROBE };
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
                if (next - first) % CLOCK_EVERY == 0 && start.elapsed() >= probe {
                    break;
                }
            }
            let each = start.elapsed() / count(next - first);
            if next < n {
                POLICY.decide(work_of(each, n - next), shared)
            } else {
                Decision::Keep
            }
        } else {
            POLICY.decide(work_of(per_item, n - next), shared)
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
    stats.set_item("write_wait_ns", POLICY.write_wait_ns.load(Relaxed))?;
    Ok(stats)
}
