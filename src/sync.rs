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
pub(crate) use std::sync::{Mutex, RwLock};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::fence;
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, RwLock};
