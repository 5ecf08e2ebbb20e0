//! The one import point for synchronisation primitives, so loom can replace them under
//! `cfg(eventpipe_loom)` for model checking (crossbeam's `primitive` module pattern).

#[cfg(eventpipe_loom)]
#[allow(unused_imports)] // the loom build compiles only the modules under model
pub use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(eventpipe_loom)]
#[allow(unused_imports)] // as above
pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(eventpipe_loom)]
pub use loom::thread::yield_now;

#[cfg(not(eventpipe_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(eventpipe_loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(eventpipe_loom))]
pub(crate) use std::thread::yield_now;

/// Locks `m`, recovering the data if a panicking thread poisoned it: every critical section
/// in this crate leaves its data consistent before anything that can panic.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
