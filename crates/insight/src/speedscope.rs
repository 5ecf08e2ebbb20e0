//! speedscope's JSON file format (<https://www.speedscope.app/file-format-schema.json>).
//!
//! The file holds every frame of the profile once, in `shared.frames` (index = [`FrameId`]),
//! and one `sampled` profile per thread that has samples, in the order of
//! [`Profile::threads`]. A sampled profile lists each sample's stack as frame indices, root
//! first, and its weight beside it:
//!
//! | [`SampleUnit`] | `unit` | weight of a sample |
//! |---|---|---|
//! | `CpuSamples { interval_ns }` | `milliseconds` | weight × interval, in ms |
//! | `Bytes` | `bytes` | weight |
//! | `Events` | `none` | weight |
//!
//! `startValue` is 0 and `endValue` the thread's total weight in the same unit, as
//! speedscope's own exporter writes them; the file opens on the heaviest thread
//! (`activeProfileIndex`).
//!
//! [`FrameId`]: crate::FrameId

use std::io::{BufWriter, Write};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::profile::{FrameId, Profile, SampleUnit};

/// The `$schema` value that identifies a speedscope file.
pub const SPEEDSCOPE_SCHEMA_URL: &str = "https://www.speedscope.app/file-format-schema.json";

/// The `exporter` value of the files this module writes.
pub const SPEEDSCOPE_EXPORTER: &str = "eventpipe-rs";

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared<'a>,
    profiles: Vec<Sampled<'a>>,
    name: &'a str,
    #[serde(rename = "activeProfileIndex", skip_serializing_if = "Option::is_none")]
    active_profile_index: Option<usize>,
    exporter: &'static str,
}

#[derive(Serialize)]
struct Shared<'a> {
    frames: Vec<FrameJson<'a>>,
}

#[derive(Serialize)]
struct FrameJson<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

#[derive(Serialize)]
struct Sampled<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: Weight,
    #[serde(rename = "endValue")]
    end_value: Weight,
    samples: Vec<&'a [FrameId]>,
    weights: Vec<Weight>,
}

/// A weight: an exact integer where the unit allows, milliseconds otherwise.
#[derive(Serialize, Clone, Copy)]
#[serde(untagged)]
enum Weight {
    Count(u64),
    Millis(f64),
}

/// How one sample's weight is written, and the unit's name.
#[derive(Clone, Copy)]
struct Scale {
    unit: &'static str,
    /// CPU: nanoseconds per unit of weight.
    interval_ns: Option<u64>,
}

impl Scale {
    fn of(unit: SampleUnit) -> Scale {
        match unit {
            SampleUnit::CpuSamples { interval_ns } => Scale {
                unit: "milliseconds",
                interval_ns: Some(interval_ns),
            },
            SampleUnit::Bytes | SampleUnit::LiveBytes => Scale {
                unit: "bytes",
                interval_ns: None,
            },
            SampleUnit::Events => Scale {
                unit: "none",
                interval_ns: None,
            },
        }
    }

    /// `total` units of weight in the file's unit (CPU: exact nanoseconds, then ms).
    fn weight(self, total: u128) -> Weight {
        match self.interval_ns {
            Some(ns) => Weight::Millis(total.saturating_mul(u128::from(ns)) as f64 / 1e6),
            None => Weight::Count(u64::try_from(total).unwrap_or(u64::MAX)),
        }
    }
}

/// speedscope's name of the unit `unit` is written in: `milliseconds`, `bytes` or `none`.
pub fn speedscope_unit(unit: SampleUnit) -> &'static str {
    Scale::of(unit).unit
}

/// Writes `profile` as a speedscope file to `w`.
///
/// # Errors
/// [`Error::InvalidProfile`] when the profile's indices are inconsistent (nothing is
/// written then), [`Error::Json`] / [`Error::Io`] when writing fails.
pub fn write_speedscope(profile: &Profile, w: impl Write) -> Result<()> {
    profile.check().map_err(Error::InvalidProfile)?;
    let scale = Scale::of(profile.unit);

    let frames = profile
        .frames
        .iter()
        .map(|f| {
            // The source file when debug info has it, else the module it lives in.
            let (file, line) = match &f.file {
                Some(file) => (Some(file.as_str()), f.line),
                None => (f.module.as_deref(), None),
            };
            FrameJson {
                name: &f.function,
                file,
                line,
            }
        })
        .collect();

    let mut by_thread: Vec<Vec<usize>> = vec![Vec::new(); profile.threads.len()];
    for (i, s) in profile.samples.iter().enumerate() {
        by_thread[s.thread].push(i);
    }
    let mut profiles = Vec::new();
    let mut heaviest: Option<(usize, u128)> = None;
    for (thread, samples) in profile.threads.iter().zip(&by_thread) {
        if samples.is_empty() {
            continue;
        }
        let total: u128 = samples
            .iter()
            .map(|&i| u128::from(profile.samples[i].weight))
            .sum();
        if heaviest.is_none_or(|(_, w)| total > w) {
            heaviest = Some((profiles.len(), total));
        }
        profiles.push(Sampled {
            kind: "sampled",
            name: thread.label(),
            unit: scale.unit,
            start_value: scale.weight(0),
            end_value: scale.weight(total),
            samples: samples
                .iter()
                .map(|&i| profile.stacks[profile.samples[i].stack].as_slice())
                .collect(),
            weights: samples
                .iter()
                .map(|&i| scale.weight(u128::from(profile.samples[i].weight)))
                .collect(),
        });
    }

    let file = File {
        schema: SPEEDSCOPE_SCHEMA_URL,
        shared: Shared { frames },
        profiles,
        name: &profile.name,
        active_profile_index: heaviest.map(|(i, _)| i),
        exporter: SPEEDSCOPE_EXPORTER,
    };
    let mut out = BufWriter::new(w);
    serde_json::to_writer(&mut out, &file)?;
    out.flush()?;
    Ok(())
}
