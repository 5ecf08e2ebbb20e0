//! Platforms without a port: a thread id of the process's own numbering, the monotonic
//! clock, and no process facts (their counters are not registered).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A process-unique id for the calling thread, numbered in order of first use.
pub(crate) fn current_os_tid() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static ID: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    ID.with(|id| *id)
}

pub(crate) fn invariant_tsc() -> bool {
    false
}

pub(crate) fn cpu_time() -> Option<Duration> {
    None
}

pub(crate) fn resident_bytes() -> Option<u64> {
    None
}

pub(crate) fn thread_count() -> Option<u64> {
    None
}

pub(crate) fn open_descriptors() -> Option<u64> {
    None
}

/// Where the monotonic clock's ticks count from: the first reading (its origin is
/// `Instant`'s own here, which no other process states).
pub(crate) fn monotonic_origin_ns() -> i64 {
    0
}
