//! The sampling arithmetic: a per-thread byte counter, exponential thresholds drawn from a
//! tiny PRNG, and the weight each sample carries. Pure functions on plain values, so they are
//! tested without an allocator installed.
//!
//! Sampling is a Poisson process over the bytes a thread allocates: the distance to the next
//! sampled byte is exponential with mean `interval`. A thread keeps `remaining`, the whole
//! bytes before the next sampled byte (the floor of an exponential draw). An allocation of
//! `size` bytes contains the sampled byte exactly when `size > remaining`; then it is sampled
//! and a fresh distance is drawn, otherwise `remaining -= size`. Because the exponential
//! distribution is memoryless, this samples every allocation independently with probability
//! `p(size) = 1 - exp(-size / interval)`, so weighting each sample by `size / p(size)` gives an
//! unbiased estimate of the bytes allocated (the Horvitz-Thompson estimator).

/// A xorshift64* generator: 8 bytes of state, no allocation, good enough for sampling
/// distances (not for anything secret).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator seeded from `seed` (any value; it is scrambled first).
    pub(crate) fn new(seed: u64) -> Rng {
        let s = splitmix64(seed);
        Rng(if s == 0 { 0x9E37_79B9_7F4A_7C15 } else { s })
    }

    /// The raw state, for keeping in a `Cell<u64>` (never 0).
    pub(crate) fn state(self) -> u64 {
        self.0
    }

    /// Resumes from a saved state; 0 means "never seeded".
    pub(crate) fn from_state(state: u64) -> Option<Rng> {
        (state != 0).then_some(Rng(state))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in (0, 1]: never 0, so its logarithm is finite.
    pub(crate) fn next_open01(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// SplitMix64's finaliser: spreads any seed over all 64 bits.
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Whole bytes until the next sampled byte: the floor of an exponential draw with mean
/// `interval`. At most about 37 × `interval` (the smallest uniform is 2⁻⁵³).
pub(crate) fn next_distance(rng: &mut Rng, interval: u64) -> u64 {
    let u = rng.next_open01();
    let d = -u.ln() * interval as f64;
    // `as` saturates; d is finite and non-negative.
    d as u64
}

/// The probability that an allocation of `size` bytes is sampled.
pub(crate) fn sample_probability(size: u64, interval: u64) -> f64 {
    // 1 - exp(-x), computed without cancellation for small x.
    -(-(size as f64) / interval.max(1) as f64).exp_m1()
}

/// The bytes one sample of `size` bytes stands for: `size / (1 - exp(-size / interval))`,
/// rounded. Never less than `size`; about `interval + size / 2` for small sizes.
pub fn sample_weight(size: u64, interval: u64) -> u64 {
    let p = sample_probability(size, interval);
    if p <= 0.0 || !p.is_finite() {
        return size;
    }
    let w = (size as f64 / p).round();
    if w >= u64::MAX as f64 {
        u64::MAX
    } else {
        (w as u64).max(size)
    }
}

/// One thread's counter as a value (the allocator keeps the same fields in `Cell`s).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counter {
    /// Whole bytes before the next sampled byte.
    pub(crate) remaining: u64,
}

impl Counter {
    /// Accounts one allocation; returns whether it is sampled (and if so draws the next
    /// distance).
    #[inline]
    pub(crate) fn account(&mut self, size: u64, rng: &mut Rng, interval: u64) -> bool {
        if size <= self.remaining {
            self.remaining -= size;
            false
        } else {
            self.remaining = next_distance(rng, interval);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_follow_the_estimator() {
        // Tiny allocations stand for about one interval; huge ones for themselves.
        // 1 / (1 - e^-x) = 1/x + 1/2 + x/12 + ...: 524_288.5, rounded up.
        assert_eq!(sample_weight(1, 524_288), 524_289);
        let w = sample_weight(4096, 65_536);
        let exact = 4096.0 / (1.0 - (-4096.0f64 / 65_536.0).exp());
        assert!((w as f64 - exact).abs() <= 1.0, "{w} vs {exact}");
        assert_eq!(sample_weight(64 << 20, 65_536), 64 << 20);
        assert_eq!(sample_weight(0, 65_536), 0);
        assert!(sample_weight(100, 1) >= 100);
    }

    #[test]
    fn distances_are_exponential_with_the_configured_mean() {
        let mut rng = Rng::new(42);
        let n = 200_000;
        let interval = 65_536u64;
        let sum: f64 = (0..n)
            .map(|_| next_distance(&mut rng, interval) as f64 + 0.5)
            .sum();
        let mean = sum / n as f64;
        // Standard error of the mean is interval / sqrt(n) ≈ 0.22 %.
        assert!(
            (mean / interval as f64 - 1.0).abs() < 0.015,
            "mean distance {mean}"
        );
        // P(d >= interval) = e^-1 for an exponential.
        let mut rng = Rng::new(7);
        let above = (0..n)
            .filter(|_| next_distance(&mut rng, interval) >= interval)
            .count();
        let frac = above as f64 / n as f64;
        assert!((frac - (-1.0f64).exp()).abs() < 0.01, "{frac}");
    }

    /// The estimator is unbiased for every size class, including sizes far below and far
    /// above the interval: summed weights of the sampled allocations ≈ bytes allocated.
    #[test]
    fn summed_weights_estimate_the_bytes_allocated() {
        let interval = 65_536u64;
        for &size in &[16u64, 1000, 32_768, 65_536, 300_000, 5 << 20] {
            let mut rng = Rng::new(size);
            let mut counter = Counter {
                remaining: next_distance(&mut rng, interval),
            };
            let total: u64 = 2 << 30;
            let n = total / size;
            let mut estimate = 0u64;
            for _ in 0..n {
                if counter.account(size, &mut rng, interval) {
                    estimate += sample_weight(size, interval);
                }
            }
            let actual = n * size;
            let err = estimate as f64 / actual as f64 - 1.0;
            // Relative standard error ≤ sqrt(interval / total) ≈ 0.55 %.
            assert!(err.abs() < 0.03, "size {size}: estimate off by {err}");
        }
    }

    #[test]
    fn rng_never_sticks_at_zero() {
        let mut r = Rng::new(0);
        assert_ne!(r.state(), 0);
        for _ in 0..1000 {
            let u = r.next_open01();
            assert!(u > 0.0 && u <= 1.0);
        }
        assert!(Rng::from_state(0).is_none());
    }
}
