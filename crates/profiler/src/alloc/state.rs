//! The sampling state the allocator, the emitter and the table read: the one word every
//! allocation loads, and the interval. Written only by `control.rs`, under its lock.

use crate::sync::{AtomicU64, Ordering};

/// The sampling mean interval used when a session names none (or an unreadable one): 512 KiB.
pub const DEFAULT_SAMPLE_INTERVAL: u64 = 512 * 1024;

/// The word every allocation reads (one `Relaxed` load and a branch while it is 0).
///
/// 0: no session enables the provider; the allocator forwards every call. Otherwise the
/// current *epoch*, a number that changes every time sampling starts or its interval
/// changes: threads redraw their distance to the next sample when they see a new epoch, and a
/// sample taken in an old epoch is neither tracked nor emitted.
///
/// Ordering: written only under the control lock (`control.rs`), after the interval, the scratch pool and the
/// emitter are ready (`Release`). The allocator's `Relaxed` load may see a change late or
/// early by a few allocations; either is harmless: a late "on" misses a sample, a late "off"
/// takes one whose insert is refused (see `table::insert`) and whose event is skipped; the
/// pool and the emitter are reached through `OnceLock`s, which synchronise themselves.
pub(crate) static STATE: AtomicU64 = AtomicU64::new(0);

/// The mean sampling interval in bytes (the smallest any enabling session asked for).
/// Written under the control lock (`control.rs`) before the epoch that uses it is published.
pub(crate) static INTERVAL: AtomicU64 = AtomicU64::new(DEFAULT_SAMPLE_INTERVAL);

/// The current epoch (0 = off).
#[inline]
pub(crate) fn epoch() -> u64 {
    STATE.load(Ordering::Relaxed)
}

/// Whether sampling is on (a session enables it, or the program tracks its heap).
pub(crate) fn enabled() -> bool {
    epoch() != 0
}
