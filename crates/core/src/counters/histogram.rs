//! Histogram cells: a log-linear bucket layout and the per-slot shards values land in.
//!
//! Buckets: each power of two from 2^[`MIN_EXP`] to 2^[`MAX_EXP`] is split into
//! [`SUB_BUCKETS`] equal parts, read straight from the value's exponent and top mantissa
//! bits (no logarithm). Values below 2^MIN_EXP (zero and negatives included) share an
//! underflow bucket, values from 2^MAX_EXP on an overflow bucket; NaN is not recorded.
//! A percentile is reported as the middle of its bucket, clamped to the interval's min
//! and max, so it is within [`RELATIVE_ERROR`] of the true value for values inside the
//! range; a percentile that falls in the underflow (overflow) bucket is reported as the
//! interval's min (max).
//!
//! A shard is a slot's (see `cells.rs`): allocated on the slot's first record into this
//! histogram and kept for the life of the process. Its owner updates it with relaxed
//! loads and stores; the shared slot's shard with read-modify-writes. The publisher reads
//! count, sums and buckets as running totals (it keeps the previous ones and subtracts),
//! and takes min and max with a swap that resets them for the next interval.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use super::cells::{add_f64_shared, thread_slot, CELLS, OWNED_SLOTS, SHARED_SLOT};

/// Sub-buckets per power of two (4 mantissa bits).
pub const SUB_BUCKETS: usize = 16;
const SUB_BITS: u32 = 4;
/// The smallest power of two with buckets: 2^-20 ≈ 9.5e-7.
pub const MIN_EXP: i32 = -20;
/// The first power of two past the buckets: 2^44 ≈ 1.8e13.
pub const MAX_EXP: i32 = 44;
/// Buckets, underflow and overflow included.
pub(crate) const BUCKETS: usize = 2 + (MAX_EXP - MIN_EXP) as usize * SUB_BUCKETS;
/// The largest relative error of a reported percentile inside the bucket range: half a
/// bucket's width over its lower bound, 1 / (2 × SUB_BUCKETS) = 3.125 %.
pub const RELATIVE_ERROR: f64 = 1.0 / (2.0 * SUB_BUCKETS as f64);

/// The bucket of a finite, non-NaN value.
#[inline(always)]
pub(crate) fn bucket_of(v: f64) -> usize {
    let bits = v.to_bits();
    // Negative values and zero: underflow (the sign bit makes `exp` huge below, so test it).
    if bits >> 63 != 0 || v < f64::from_bits(((MIN_EXP + 1023) as u64) << 52) {
        return 0;
    }
    let exp = ((bits >> 52) & 0x7ff) as i32 - 1023;
    if exp >= MAX_EXP {
        return BUCKETS - 1;
    }
    let sub = ((bits >> (52 - SUB_BITS)) & (SUB_BUCKETS as u64 - 1)) as usize;
    1 + (exp - MIN_EXP) as usize * SUB_BUCKETS + sub
}

/// The middle of an in-range bucket (`1..BUCKETS-1`).
pub(crate) fn bucket_middle(bucket: usize) -> f64 {
    let i = bucket - 1;
    let exp = MIN_EXP + (i / SUB_BUCKETS) as i32;
    let sub = (i % SUB_BUCKETS) as f64;
    2f64.powi(exp) * (1.0 + (sub + 0.5) / SUB_BUCKETS as f64)
}

/// Maps an `f64` to a `u64` with the same order (for min/max as integer atomics).
#[inline(always)]
fn order_key(v: f64) -> u64 {
    let bits = v.to_bits();
    if bits >> 63 != 0 {
        !bits
    } else {
        bits | 1 << 63
    }
}

fn from_order_key(key: u64) -> f64 {
    if key >> 63 != 0 {
        f64::from_bits(key & !(1 << 63))
    } else {
        f64::from_bits(!key)
    }
}

/// No value yet for min (max uses 0, below every real key's).
const NO_MIN: u64 = u64::MAX;
const NO_MAX: u64 = 0;

/// One slot's share of a histogram.
#[repr(align(128))]
struct Shard {
    count: AtomicU64,
    sum: AtomicU64,
    sum_squares: AtomicU64,
    min_key: AtomicU64,
    max_key: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl Shard {
    fn new() -> Box<Shard> {
        Box::new(Shard {
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0),
            sum_squares: AtomicU64::new(0),
            min_key: AtomicU64::new(NO_MIN),
            max_key: AtomicU64::new(NO_MAX),
            buckets: [const { AtomicU64::new(0) }; BUCKETS],
        })
    }
}

/// A histogram's cells: one lazily allocated shard per slot.
#[derive(Debug)]
pub(crate) struct HistogramCells {
    shards: [AtomicPtr<Shard>; CELLS],
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

/// Running totals and the interval's extremes, as the publisher reads them.
#[derive(Debug, Clone, Default)]
pub(crate) struct HistogramTotals {
    pub(crate) count: u64,
    pub(crate) sum: f64,
    pub(crate) sum_squares: f64,
    pub(crate) buckets: Vec<u64>,
}

/// One interval of a histogram.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IntervalStats {
    pub(crate) count: u64,
    pub(crate) sum: f64,
    pub(crate) sum_squares: f64,
    /// Min and max of the interval (`None` without values).
    pub(crate) min_max: Option<(f64, f64)>,
    pub(crate) buckets: Vec<u64>,
}

impl HistogramCells {
    pub(crate) const fn new() -> Self {
        HistogramCells {
            shards: [const { AtomicPtr::new(std::ptr::null_mut()) }; CELLS],
        }
    }

    /// Records `v` in the calling thread's shard (NaN is ignored).
    #[inline]
    pub(crate) fn record(&self, v: f64) {
        if v.is_nan() {
            return;
        }
        let slot = thread_slot().min(SHARED_SLOT);
        let shard = self.shard(slot);
        let bucket = &shard.buckets[bucket_of(v)];
        let key = order_key(v);
        if slot < OWNED_SLOTS {
            // Relaxed loads and stores: the shard has one writer, its slot's owner (see
            // `cells.rs`). Min and max are reset by the publisher's swap; a store racing
            // it moves one boundary value between two intervals' extremes.
            shard
                .count
                .store(shard.count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            bucket.store(bucket.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            let sum = f64::from_bits(shard.sum.load(Ordering::Relaxed)) + v;
            shard.sum.store(sum.to_bits(), Ordering::Relaxed);
            let squares = f64::from_bits(shard.sum_squares.load(Ordering::Relaxed)) + v * v;
            shard
                .sum_squares
                .store(squares.to_bits(), Ordering::Relaxed);
            if key < shard.min_key.load(Ordering::Relaxed) {
                shard.min_key.store(key, Ordering::Relaxed);
            }
            if key > shard.max_key.load(Ordering::Relaxed) {
                shard.max_key.store(key, Ordering::Relaxed);
            }
        } else {
            shard.count.fetch_add(1, Ordering::Relaxed);
            bucket.fetch_add(1, Ordering::Relaxed);
            add_f64_shared(&shard.sum, v);
            add_f64_shared(&shard.sum_squares, v * v);
            shard.min_key.fetch_min(key, Ordering::Relaxed);
            shard.max_key.fetch_max(key, Ordering::Relaxed);
        }
    }

    #[inline(always)]
    fn shard(&self, slot: usize) -> &Shard {
        // Acquire: pairs with the Release of the CAS that installed the shard, so its
        // initialised contents are visible.
        let p = self.shards[slot].load(Ordering::Acquire);
        if !p.is_null() {
            // Shards live as long as the histogram, which is 'static or leaked.
            // SAFETY: a non-null pointer came from `Box::into_raw`, never freed or replaced.
            return unsafe { &*p };
        }
        self.install_shard(slot)
    }

    #[cold]
    fn install_shard(&self, slot: usize) -> &Shard {
        let fresh = Box::into_raw(Shard::new());
        match self.shards[slot].compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: just installed; never freed (see `shard`).
            Ok(_) => unsafe { &*fresh },
            Err(existing) => {
                // Another thread of the shared slot won the race: free ours, use theirs.
                // SAFETY: `fresh` came from `Box::into_raw` above and was never shared.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: installed by the winner; never freed (see `shard`).
                unsafe { &*existing }
            }
        }
    }

    fn shards(&self) -> impl Iterator<Item = &Shard> {
        self.shards.iter().filter_map(|p| {
            // SAFETY: as in `shard`: installed once from a Box, never freed.
            unsafe { p.load(Ordering::Acquire).as_ref() }
        })
    }

    /// Running totals over every shard.
    pub(crate) fn totals(&self) -> HistogramTotals {
        let mut t = HistogramTotals {
            buckets: vec![0; BUCKETS],
            ..HistogramTotals::default()
        };
        for shard in self.shards() {
            t.count += shard.count.load(Ordering::Relaxed);
            t.sum += f64::from_bits(shard.sum.load(Ordering::Relaxed));
            t.sum_squares += f64::from_bits(shard.sum_squares.load(Ordering::Relaxed));
            for (total, b) in t.buckets.iter_mut().zip(&shard.buckets) {
                *total += b.load(Ordering::Relaxed);
            }
        }
        t
    }

    /// Min and max since the last call, resetting them.
    pub(crate) fn take_extremes(&self) -> Option<(f64, f64)> {
        let (mut min, mut max) = (NO_MIN, NO_MAX);
        for shard in self.shards() {
            // Swap (a read-modify-write): a concurrent `fetch_min` of the shared shard
            // lands wholly before or after it, never lost.
            min = min.min(shard.min_key.swap(NO_MIN, Ordering::Relaxed));
            max = max.max(shard.max_key.swap(NO_MAX, Ordering::Relaxed));
        }
        (min != NO_MIN).then(|| (from_order_key(min), from_order_key(max)))
    }

    /// The interval since `previous` (the totals the last call returned), and the new
    /// totals to pass next time.
    pub(crate) fn interval(&self, previous: &HistogramTotals) -> (IntervalStats, HistogramTotals) {
        let now = self.totals();
        let min_max = self.take_extremes();
        let buckets = if previous.buckets.len() == BUCKETS {
            now.buckets
                .iter()
                .zip(&previous.buckets)
                .map(|(n, p)| n.wrapping_sub(*p))
                .collect()
        } else {
            now.buckets.clone()
        };
        let stats = IntervalStats {
            count: now.count.wrapping_sub(previous.count),
            sum: now.sum - previous.sum,
            sum_squares: now.sum_squares - previous.sum_squares,
            min_max,
            buckets,
        };
        (stats, now)
    }
}

impl IntervalStats {
    /// The `q`-quantile (0 < q ≤ 1) by rank, from the buckets: see the module docs.
    pub(crate) fn percentile(&self, q: f64) -> Option<f64> {
        let (min, max) = self.min_max?;
        let n: u64 = self.buckets.iter().sum();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let v = match i {
                    0 => min,
                    i if i == BUCKETS - 1 => max,
                    i => bucket_middle(i),
                };
                return Some(v.clamp(min, max));
            }
        }
        Some(max)
    }

    /// Mean and population standard deviation (0 and 0 without values).
    pub(crate) fn mean_and_deviation(&self) -> (f64, f64) {
        if self.count == 0 {
            return (0.0, 0.0);
        }
        let n = self.count as f64;
        let mean = self.sum / n;
        let variance = (self.sum_squares / n - mean * mean).max(0.0);
        (mean, variance.sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_keys_sort_like_the_floats() {
        let values = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -0.0,
            0.0,
            1e-300,
            1.0,
            3.5,
            f64::INFINITY,
        ];
        for w in values.windows(2) {
            assert!(order_key(w[0]) <= order_key(w[1]), "{w:?}");
        }
        for v in values {
            assert_eq!(from_order_key(order_key(v)).to_bits(), v.to_bits());
        }
    }

    #[test]
    fn every_in_range_value_is_within_the_stated_error_of_its_bucket_middle() {
        let mut v = 2f64.powi(MIN_EXP);
        while v < 2f64.powi(MAX_EXP) {
            let b = bucket_of(v);
            assert!(b > 0 && b < BUCKETS - 1, "{v}");
            let middle = bucket_middle(b);
            assert!(
                (middle - v).abs() / v <= RELATIVE_ERROR + 1e-12,
                "{v} → {middle}"
            );
            v *= 1.0137;
        }
        assert_eq!(bucket_of(0.0), 0);
        assert_eq!(bucket_of(-5.0), 0);
        assert_eq!(bucket_of(1e-9), 0);
        assert_eq!(bucket_of(1e14), BUCKETS - 1);
        assert_eq!(bucket_of(f64::INFINITY), BUCKETS - 1);
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let cells = HistogramCells::new();
        for i in 1..=1000 {
            cells.record(f64::from(i));
        }
        cells.record(f64::NAN);
        let (stats, totals) = cells.interval(&HistogramTotals::default());
        assert_eq!(stats.count, 1000);
        assert_eq!(stats.min_max, Some((1.0, 1000.0)));
        for (q, exact) in [(0.5, 500.0), (0.95, 950.0), (0.99, 990.0)] {
            let p = stats.percentile(q).unwrap();
            assert!((p - exact).abs() / exact <= RELATIVE_ERROR, "p{q}: {p}");
        }
        let (mean, sd) = stats.mean_and_deviation();
        assert_eq!(mean, 500.5);
        assert!((sd - 288.6749).abs() < 1e-3, "{sd}");
        // The next interval starts empty.
        cells.record(7.0);
        let (next, _) = cells.interval(&totals);
        assert_eq!(next.count, 1);
        assert_eq!(next.min_max, Some((7.0, 7.0)));
        assert_eq!(next.percentile(0.99), Some(7.0));
    }
}
