//! Atomics that loom can model: std's normally, loom's under `--cfg loom`, the way
//! crossbeam-epoch's `primitive` module swaps them (see `crossbeam-epoch/src/lib.rs`).
//! crossbeam-epoch itself switches with `--cfg crossbeam_loom`; the loom command sets both.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::fence;
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard, RwLock};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::fence;
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard, RwLock};

/// A cell for data published by a release store and read after the matching acquire load:
/// loom's `UnsafeCell` under loom, which fails a model whose read is not ordered after the
/// write; std's otherwise, with loom's `with`/`with_mut` interface.
#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

#[cfg(not(loom))]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Pins on `collector`, for the loom models: under loom the default collector is a loom
/// `lazy_static`, so each structure carries a collector made inside the model, and each loom
/// thread keeps one handle on it, as `epoch::pin` keeps one per thread on the default
/// collector (a thread that meets another collector registers with it instead).
#[cfg(loom)]
pub(crate) fn pin_on(collector: &crossbeam_epoch::Collector) -> crossbeam_epoch::Guard {
    loom::thread_local! {
        static HANDLE: std::cell::RefCell<Option<crossbeam_epoch::LocalHandle>> =
            std::cell::RefCell::new(None);
    }
    HANDLE.with(|h| {
        let mut h = h.borrow_mut();
        if !matches!(&*h, Some(h) if h.collector() == collector) {
            *h = Some(collector.register());
        }
        h.as_ref().expect("just set").pin()
    })
}
