//! Event timestamps.
//!
//! On x86_64 with an invariant TSC (`constant_tsc` and `nonstop_tsc`: it ticks at one rate
//! on every core, through frequency changes and idle states), a timestamp is the TSC itself:
//! one `rdtsc`, a few nanoseconds, where `clock_gettime` through the vDSO plus the
//! conversion to nanoseconds cost ~35 ns on the benchmark machine (BENCHMARKS.md). The TSC
//! rate is measured against the monotonic clock when a trace header first needs it, and
//! each trace header records it with a UTC/tick pair, so readers convert exactly as they do
//! for .NET's QueryPerformanceCounter ticks.
//!
//! Elsewhere (or with `EVENTPIPE_CLOCK=monotonic`), a timestamp is nanoseconds of the
//! monotonic clock, a 1 GHz tick: `Instant`, which is the platform's own
//! (`clock_gettime(CLOCK_MONOTONIC)` on Linux, `mach_absolute_time` on macOS,
//! `QueryPerformanceCounter` on Windows). On Linux the ticks are `CLOCK_MONOTONIC`'s own
//! readings, as .NET's are there; elsewhere they count from the first call.
//!
//! Ordering: `rdtsc` is not serializing, so it may execute before an earlier store is
//! visible to other cores. The drain's cutoff trails its clock by a margin
//! ([`ticks_from_nanos`] of 50 µs) far longer than that window; see `drain/mod.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Ticks per second of the monotonic fallback.
const NANOS_PER_SECOND: i64 = 1_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Tsc,
    Monotonic,
}

struct Base {
    source: Source,
    instant: Instant,
    /// The tick at `instant`.
    ticks: i64,
    unix_nanos: i128,
}

fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let source = choose_source();
        let instant = Instant::now();
        Base {
            source,
            ticks: if source == Source::Tsc {
                read_tsc()
            } else {
                crate::platform::monotonic_origin_ns()
            },
            instant,
            unix_nanos: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as i128)
                .unwrap_or(0),
        }
    })
}

fn choose_source() -> Source {
    if std::env::var("EVENTPIPE_CLOCK").is_ok_and(|v| v.eq_ignore_ascii_case("monotonic")) {
        return Source::Monotonic;
    }
    if cfg!(target_arch = "x86_64") && invariant_tsc() {
        Source::Tsc
    } else {
        Source::Monotonic
    }
}

/// Whether every CPU reports an invariant TSC (only Linux is asked).
fn invariant_tsc() -> bool {
    crate::platform::invariant_tsc()
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn read_tsc() -> i64 {
    // SAFETY: `rdtsc` exists on every x86_64 CPU and has no memory effects; it is only
    // used when the kernel reports an invariant TSC.
    (unsafe { core::arch::x86_64::_rdtsc() }) as i64
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn read_tsc() -> i64 {
    0
}

/// Set once the base is taken and the source is the TSC: then [`now`] is this load and
/// one `rdtsc`, small enough to inline into the write path. Relaxed: the flag guards no
/// other data (the TSC needs no base to be read).
static TSC_READY: AtomicBool = AtomicBool::new(false);

/// The current timestamp in ticks (see [`ticks_per_second`]).
#[inline(always)]
pub fn now() -> i64 {
    if TSC_READY.load(Ordering::Relaxed) {
        return read_tsc();
    }
    now_from_base()
}

#[cold]
#[inline(never)]
fn now_from_base() -> i64 {
    let b = base();
    match b.source {
        Source::Tsc => {
            TSC_READY.store(true, Ordering::Relaxed);
            read_tsc()
        }
        Source::Monotonic => b.ticks + b.instant.elapsed().as_nanos() as i64,
    }
}

/// Whether timestamps are the TSC, so that [`now_tsc`] may stand in for [`now`]. The short
/// write path runs only then: with the clock read a single instruction it calls nothing,
/// and so needs no stack frame.
pub fn is_tsc() -> bool {
    base().source == Source::Tsc
}

/// [`now`] when [`is_tsc`]: the TSC, with no check.
#[inline(always)]
pub fn now_tsc() -> i64 {
    read_tsc()
}

/// Ticks per second of [`now`]: the measured TSC rate, or 1e9.
pub fn ticks_per_second() -> i64 {
    static RATE: OnceLock<i64> = OnceLock::new();
    *RATE.get_or_init(|| match base().source {
        Source::Tsc => measure_tsc_rate(),
        Source::Monotonic => NANOS_PER_SECOND,
    })
}

/// The TSC rate, from the ticks and nanoseconds elapsed since the base was taken, after
/// waiting until at least 20 ms have passed (so clock-read jitter of tens of nanoseconds is
/// below 5 ppm).
fn measure_tsc_rate() -> i64 {
    let b = base();
    let floor = Duration::from_millis(20);
    let elapsed = b.instant.elapsed();
    if elapsed < floor {
        std::thread::sleep(floor - elapsed);
    }
    let ticks = read_tsc() - b.ticks;
    let nanos = b.instant.elapsed().as_nanos() as i128;
    let rate = (i128::from(ticks) * i128::from(NANOS_PER_SECOND)) / nanos.max(1);
    i64::try_from(rate).unwrap_or(NANOS_PER_SECOND).max(1)
}

/// `nanos` nanoseconds in ticks.
pub fn ticks_from_nanos(nanos: i64) -> i64 {
    let rate = ticks_per_second();
    (i128::from(nanos) * i128::from(rate) / i128::from(NANOS_PER_SECOND)) as i64
}

/// A (UTC nanoseconds since the Unix epoch, ticks) pair taken together, for trace headers.
pub fn sync_point() -> (i128, i64) {
    let b = base();
    let rate = ticks_per_second();
    let ticks = now();
    // Monotonic ticks count from the base's reading at 1 GHz: the same formula.
    let since_base = i128::from(ticks - b.ticks) * i128::from(NANOS_PER_SECOND) / i128::from(rate);
    (b.unix_nanos + since_base, ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_advance_at_the_stated_rate() {
        let rate = ticks_per_second();
        let (t0, i0) = (now(), Instant::now());
        std::thread::sleep(Duration::from_millis(50));
        let (t1, i1) = (now(), Instant::now());
        let measured = (t1 - t0) as f64 / (i1 - i0).as_secs_f64();
        let error = (measured / rate as f64 - 1.0).abs();
        assert!(error < 0.01, "rate {rate}, measured {measured:.0}");
    }

    #[test]
    fn sync_points_agree_with_the_wall_clock() {
        let (utc, _) = sync_point();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i128;
        assert!((wall - utc).abs() < 50_000_000, "off by {} ns", wall - utc);
    }

    #[test]
    fn nanoseconds_convert_to_ticks() {
        let rate = ticks_per_second();
        assert_eq!(ticks_from_nanos(NANOS_PER_SECOND), rate);
        assert_eq!(ticks_from_nanos(0), 0);
    }
}
