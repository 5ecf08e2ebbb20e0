//! Small statistics the sections share.

use serde::Serialize;

/// A distribution of durations, ms: nearest-rank percentiles (the smallest value with at
/// least p % of the values at or below it).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Distribution {
    /// How many values.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Distribution {
    /// The distribution of `values` (all zeros when there are none).
    pub fn of(mut values: Vec<f64>) -> Distribution {
        if values.is_empty() {
            return Distribution::default();
        }
        values.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let n = values.len() as f64;
            let index = ((p / 100.0 * n).ceil() as usize).clamp(1, values.len()) - 1;
            values[index]
        };
        Distribution {
            count: values.len() as u64,
            p50: rank(50.0),
            p90: rank(90.0),
            p99: rank(99.0),
            max: values[values.len() - 1],
        }
    }
}

/// `part` as a percentage of `whole`; 0 for an empty whole.
pub(crate) fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let d = Distribution::of((1..=100).rev().map(f64::from).collect());
        assert_eq!(
            (d.count, d.p50, d.p90, d.p99, d.max),
            (100, 50.0, 90.0, 99.0, 100.0)
        );
        let one = Distribution::of(vec![7.0]);
        assert_eq!((one.p50, one.p99, one.max), (7.0, 7.0, 7.0));
        assert_eq!(Distribution::of(Vec::new()), Distribution::default());
    }
}
