//! Thread time from .NET's sample profiler, weighed as TraceEvent's
//! `SampleProfilerThreadTimeComputer` (PerfView's "Thread Time" view) weighs it.
//!
//! The runtime's sampler visits every managed thread about once a millisecond, but the
//! spacing is far from even (a suspended runtime, a loaded machine), so a sample does not
//! stand for a fixed millisecond. It stands for the time until the **next** sample of the
//! **same thread**:
//!
//! * each sample weighs `t(next sample of its thread) − t(sample)`, placed at its own time,
//!   with its own stack; a gap of any length goes to the sample before it (no cap);
//! * the last sample of a thread weighs nothing (nothing says how long it lasted), so a
//!   thread's total is the time from its first sample to its last, and a thread sampled
//!   once adds nothing;
//! * the trace's nominal sampling interval is not used;
//! * samples taken while the thread ran managed code and samples taken outside it
//!   (`Type` External: waiting, or in native code) are weighed alike; they differ only in
//!   what they are called (the builder ends the latter's stacks in
//!   [`crate::builder::EXTERNAL_CODE_FRAME`], PerfView in `UNMANAGED_CODE_TIME`).
//!
//! TraceEvent also splits a thread's intervals at some other events on it (allocation ticks,
//! TPL task events, EventSource events) when the trace has them; that moves time between
//! the thread's stacks but never changes its total. Here only the sampler's events split.

/// The weight in nanoseconds of each of `samples`, given as (thread, timestamp in ticks)
/// in any order; `ticks_per_second` converts ticks to nanoseconds (0 or less: every weight
/// is 0, for a trace that states no clock).
pub fn weights(samples: &[(u64, i64)], ticks_per_second: i64) -> Vec<u64> {
    let mut out = vec![0u64; samples.len()];
    if ticks_per_second <= 0 {
        return out;
    }
    // Each thread's samples in time order (stable: equal times keep trace order).
    let mut order: Vec<usize> = (0..samples.len()).collect();
    order.sort_by_key(|&i| (samples[i].0, samples[i].1));
    for pair in order.windows(2) {
        let (this, next) = (pair[0], pair[1]);
        if samples[this].0 != samples[next].0 {
            continue; // `this` is its thread's last sample
        }
        let ticks = samples[next].1.saturating_sub(samples[this].1);
        out[this] = ticks_to_ns(ticks, ticks_per_second);
    }
    out
}

/// `ticks` (not negative) as nanoseconds, without overflow for any 64-bit count.
fn ticks_to_ns(ticks: i64, ticks_per_second: i64) -> u64 {
    let ns = i128::from(ticks.max(0)) * 1_000_000_000 / i128::from(ticks_per_second);
    u64::try_from(ns).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TraceEvent's worked example: one thread at 10, 11, 12.5, 13 and 40 ms (ticks in
    /// microseconds); each sample weighs the time to the next, the last nothing.
    #[test]
    fn each_sample_weighs_the_time_to_its_threads_next_and_the_last_nothing() {
        let t = |ms: f64| (ms * 1000.0) as i64;
        let samples = [
            (7, t(10.0)),
            (7, t(11.0)),
            (7, t(12.5)),
            (7, t(13.0)),
            (7, t(40.0)),
        ];
        let w = weights(&samples, 1_000_000);
        assert_eq!(w, [1_000_000, 1_500_000, 500_000, 27_000_000, 0]);
        assert_eq!(
            w.iter().sum::<u64>(),
            30_000_000,
            "the thread's first to last sample"
        );
    }

    #[test]
    fn threads_are_weighed_apart_whatever_the_order_of_their_samples() {
        // Two threads interleaved, one sampled once; given out of time order.
        let samples = [(2, 300), (1, 100), (3, 150), (1, 400), (2, 200), (1, 250)];
        let w = weights(&samples, 1_000_000_000); // ticks are nanoseconds
        assert_eq!(w, [0, 150, 0, 0, 100, 150]);
    }

    #[test]
    fn a_trace_without_a_clock_weighs_nothing_and_huge_gaps_do_not_overflow() {
        assert_eq!(weights(&[(1, 0), (1, 5)], 0), [0, 0]);
        let w = weights(&[(1, i64::MIN), (1, i64::MAX)], 1);
        assert_eq!(w, [u64::MAX, 0]);
    }
}
