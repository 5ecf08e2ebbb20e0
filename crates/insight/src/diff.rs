//! Two profiles of one kind compared, function by function: what grew and what shrank,
//! and whether each change is larger than the sampling noise that two runs of the same
//! program show.
//!
//! A function's **self** is the weight of the samples whose leaf it is, its **total** the
//! weight of the samples with it anywhere on the stack (once per sample, however often it
//! recurs), as `go tool pprof -top` has them (`flat`, `cum`). The two profiles are compared
//! as they are ([`Normalize::Raw`]: what `pprof -diff_base` subtracts), per second of each
//! profile's duration ([`Normalize::PerSecond`], the default: runs of different lengths),
//! or as shares of each profile's total ([`Normalize::Share`]).
//!
//! **Noise.** A sampled profile's weight for a function is a sum of independently sampled
//! weights, so its variance is estimated by the sum of their squares (for equal weights,
//! n × w², Poisson's); the change's variance is the sum of the two sides' (scaled as the
//! values are). A change is beyond noise when it is more than [`NOISE_SIGMAS`] of its
//! standard errors: with hundreds of functions compared, a smaller bar would flag some by
//! chance in every comparison of two runs of one program.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::profile::{FrameId, Profile, SampleUnit};

/// Standard errors a change must exceed to be beyond sampling noise.
pub const NOISE_SIGMAS: f64 = 4.0;

/// How the two sides are made comparable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Normalize {
    /// As they are (the unit's own: ns, bytes, samples).
    Raw,
    /// Per second of each profile's duration (the time its samples span).
    PerSecond,
    /// As a share of each profile's total (0 to 1).
    Share,
}

/// One function in both profiles.
#[derive(Debug, Clone, Serialize)]
pub struct FunctionChange {
    /// Its name.
    pub function: String,
    /// The module it is in, when known.
    pub module: Option<String>,
    /// Self, in the base and the new profile (normalized).
    pub base_self: f64,
    /// See `base_self`.
    pub new_self: f64,
    /// Total, in the base and the new profile (normalized).
    pub base_total: f64,
    /// See `base_total`.
    pub new_total: f64,
    /// The standard error of the self change.
    pub self_error: f64,
    /// The standard error of the total change.
    pub total_error: f64,
    /// The self or the total change is beyond noise.
    pub beyond_noise: bool,
}

impl FunctionChange {
    /// `new_self - base_self`.
    pub fn self_change(&self) -> f64 {
        self.new_self - self.base_self
    }

    /// `new_total - base_total`.
    pub fn total_change(&self) -> f64 {
        self.new_total - self.base_total
    }

    /// The total's change relative to the base (`None` when the base has none).
    pub fn total_change_ratio(&self) -> Option<f64> {
        (self.base_total > 0.0).then(|| self.total_change() / self.base_total)
    }
}

/// Two profiles compared.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileDiff {
    /// What the weights measure.
    #[serde(skip)]
    pub unit: SampleUnit,
    /// The same, in words (`CPU time`, `bytes allocated`).
    pub measure: &'static str,
    /// How the values were made comparable.
    pub normalize: Normalize,
    /// Each profile's duration, seconds.
    pub base_seconds: f64,
    /// See `base_seconds`.
    pub new_seconds: f64,
    /// Each profile's whole weight (normalized) and the change's standard error.
    pub base_total: f64,
    /// See `base_total`.
    pub new_total: f64,
    /// See `base_total`.
    pub total_error: f64,
    /// Every function of either profile, the largest self change first (then the largest
    /// total change).
    pub functions: Vec<FunctionChange>,
}

impl ProfileDiff {
    /// Whether the whole profile's change is beyond noise.
    pub fn total_beyond_noise(&self) -> bool {
        (self.new_total - self.base_total).abs() > NOISE_SIGMAS * self.total_error
    }
}

/// Why two profiles cannot be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiffError {
    /// They measure different things.
    #[error(
        "the base profile measures {base} and the new one {new}: compare profiles of one kind"
    )]
    Units {
        /// The base's unit, in words.
        base: &'static str,
        /// The new one's.
        new: &'static str,
    },
    /// Per second needs a duration.
    #[error("the {0} profile spans no time: compare it with --normalize raw or share")]
    NoDuration(&'static str),
}

/// Per function of one profile: (self, self's sum of squared weights, total, total's).
#[derive(Debug, Default, Clone, Copy)]
struct Sums {
    self_weight: f64,
    self_squares: f64,
    total_weight: f64,
    total_squares: f64,
}

type Key = (String, Option<String>);

fn sums(profile: &Profile) -> (HashMap<Key, Sums>, f64, f64) {
    let key = |f: FrameId| {
        let frame = &profile.frames[f];
        (frame.function.clone(), frame.module.clone())
    };
    let mut by_frame: HashMap<FrameId, Sums> = HashMap::new();
    let (mut all, mut all_squares) = (0.0, 0.0);
    let mut seen: HashSet<FrameId> = HashSet::new();
    for sample in &profile.samples {
        let w = sample.weight as f64;
        all += w;
        all_squares += w * w;
        let stack = &profile.stacks[sample.stack];
        if let Some(&leaf) = stack.last() {
            let s = by_frame.entry(leaf).or_default();
            s.self_weight += w;
            s.self_squares += w * w;
        }
        seen.clear();
        for &frame in stack {
            if seen.insert(frame) {
                let s = by_frame.entry(frame).or_default();
                s.total_weight += w;
                s.total_squares += w * w;
            }
        }
    }
    // Frames that name one function (several lines, or kinds) are one function here.
    let mut by_function: HashMap<Key, Sums> = HashMap::new();
    for (frame, s) in by_frame {
        let f = by_function.entry(key(frame)).or_default();
        f.self_weight += s.self_weight;
        f.self_squares += s.self_squares;
        f.total_weight += s.total_weight;
        f.total_squares += s.total_squares;
    }
    (by_function, all, all_squares)
}

/// The profile's duration, seconds: the time its samples span
/// ([`Profile::sample_span_ms`]), 0 when they span none.
pub fn span_seconds(profile: &Profile) -> f64 {
    profile
        .sample_span_ms()
        .map_or(0.0, |(first, last)| (last - first) / 1e3)
}

/// Compares `new` with `base`.
///
/// # Errors
/// The profiles measure different things, or per second is asked of one that spans no time.
pub fn diff(base: &Profile, new: &Profile, normalize: Normalize) -> Result<ProfileDiff, DiffError> {
    if base.unit != new.unit {
        return Err(DiffError::Units {
            base: base.unit.describe(),
            new: new.unit.describe(),
        });
    }
    let (base_sums, base_all, base_all_sq) = sums(base);
    let (new_sums, new_all, new_all_sq) = sums(new);
    let (base_seconds, new_seconds) = (span_seconds(base), span_seconds(new));
    let scale = |all: f64, secs: f64, which: &'static str| -> Result<f64, DiffError> {
        Ok(match normalize {
            Normalize::Raw => 1.0,
            Normalize::PerSecond if secs > 0.0 => 1.0 / secs,
            Normalize::PerSecond => return Err(DiffError::NoDuration(which)),
            Normalize::Share if all > 0.0 => 1.0 / all,
            Normalize::Share => 0.0,
        })
    };
    let kb = scale(base_all, base_seconds, "base")?;
    let kn = scale(new_all, new_seconds, "new")?;
    let error = |base_sq: f64, new_sq: f64| (base_sq * kb * kb + new_sq * kn * kn).sqrt();
    let keys: HashSet<&Key> = base_sums.keys().chain(new_sums.keys()).collect();
    let mut functions: Vec<FunctionChange> = keys
        .into_iter()
        .map(|key| {
            let b = base_sums.get(key).copied().unwrap_or_default();
            let n = new_sums.get(key).copied().unwrap_or_default();
            let mut change = FunctionChange {
                function: key.0.clone(),
                module: key.1.clone(),
                base_self: b.self_weight * kb,
                new_self: n.self_weight * kn,
                base_total: b.total_weight * kb,
                new_total: n.total_weight * kn,
                self_error: error(b.self_squares, n.self_squares),
                total_error: error(b.total_squares, n.total_squares),
                beyond_noise: false,
            };
            change.beyond_noise = change.self_change().abs() > NOISE_SIGMAS * change.self_error
                || change.total_change().abs() > NOISE_SIGMAS * change.total_error;
            change
        })
        .collect();
    // By self change, as `pprof -top` sorts by flat: the function whose own code changed
    // first, ahead of its callers, whose totals all move with it.
    functions.sort_by(|a, b| {
        b.self_change()
            .abs()
            .total_cmp(&a.self_change().abs())
            .then_with(|| b.total_change().abs().total_cmp(&a.total_change().abs()))
            .then_with(|| a.function.cmp(&b.function))
    });
    Ok(ProfileDiff {
        unit: base.unit,
        measure: base.unit.describe(),
        normalize,
        base_seconds,
        new_seconds,
        base_total: base_all * kb,
        new_total: new_all * kn,
        total_error: error(base_all_sq, new_all_sq),
        functions,
    })
}
