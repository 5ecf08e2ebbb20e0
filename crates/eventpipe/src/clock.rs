//! Event timestamps: nanoseconds of the monotonic clock, as a 1 GHz tick.
//!
//! `clock_gettime(CLOCK_MONOTONIC)` through the vDSO costs ~20 ns and needs no calibration;
//! the trace header records the tick rate (1e9) and a UTC/tick pair so readers convert.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use std::sync::OnceLock;

struct Base {
    instant: Instant,
    unix_nanos: i128,
}

fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| Base {
        instant: Instant::now(),
        unix_nanos: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0),
    })
}

/// Ticks per second of [`now`].
pub const TICKS_PER_SECOND: i64 = 1_000_000_000;

/// The current timestamp in ticks (nanoseconds since the process's first call).
#[inline]
pub fn now() -> i64 {
    base().instant.elapsed().as_nanos() as i64
}

/// A (UTC nanoseconds since the Unix epoch, ticks) pair taken together, for trace headers.
pub(crate) fn sync_point() -> (i128, i64) {
    let b = base();
    let ticks = now();
    (b.unix_nanos + i128::from(ticks), ticks)
}
