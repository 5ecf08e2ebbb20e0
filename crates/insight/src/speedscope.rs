//! speedscope's JSON file format (<https://www.speedscope.app/file-format-schema.json>).
//!
//! The file holds every frame of the profile once, in `shared.frames` (index = [`FrameId`]:
//! a function, with its file and the lowest line sampled in it), and one `sampled` profile
//! per thread that has samples, in the order of [`Profile::threads`]. A sampled profile
//! lists each sample's stack as frame indices, root first, and its weight beside it, exact:
//!
//! | [`SampleUnit`] | `unit` | weight of a sample |
//! |---|---|---|
//! | `CpuTime`, `ThreadTime` | `nanoseconds` | the time it stands for |
//! | `Bytes`, `LiveBytes` | `bytes` | its bytes |
//! | `Events` | `none` | weight |
//!
//! The file's `name` is the profile's with what the weights measure (`CPU samples (CPU
//! time)`), and each thread's profile is named `thread label: what the weights measure`, so
//! the view never calls thread time CPU time. `startValue` is 0 and `endValue` the thread's
//! total weight in the same unit, as speedscope's own exporter writes them; the file opens
//! on the heaviest thread (`activeProfileIndex`).
//!
//! [`FrameId`]: crate::FrameId

use std::io::{BufWriter, Write};

use serde::Serialize;

use crate::error::Result;
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
    name: String,
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
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: Vec<&'a [FrameId]>,
    weights: Vec<u64>,
}

/// speedscope's name of `unit`.
fn unit_name(unit: SampleUnit) -> &'static str {
    match unit {
        SampleUnit::CpuTime
        | SampleUnit::ThreadTime
        | SampleUnit::OffCpuTime
        | SampleUnit::LockWait => "nanoseconds",
        SampleUnit::Bytes | SampleUnit::LiveBytes | SampleUnit::HeapBytes => "bytes",
        SampleUnit::Events => "none",
    }
}

/// speedscope's name of the unit `unit` is written in: `nanoseconds`, `bytes` or `none`.
pub fn speedscope_unit(unit: SampleUnit) -> &'static str {
    unit_name(unit)
}

/// Writes `profile` as a speedscope file to `w`.
///
/// # Errors
/// [`Error::InvalidProfile`](crate::Error::InvalidProfile) when the profile's indices are inconsistent (nothing is
/// written then), [`Error::Json`](crate::Error::Json) / [`Error::Io`](crate::Error::Io) when writing fails.
pub fn write_speedscope(profile: &Profile, w: impl Write) -> Result<()> {
    profile.validate()?;
    let unit = unit_name(profile.unit);
    let measure = profile.unit.describe();

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
    let mut heaviest: Option<(usize, u64)> = None;
    for (thread, samples) in profile.threads.iter().zip(&by_thread) {
        if samples.is_empty() {
            continue;
        }
        let total: u64 = samples
            .iter()
            .map(|&i| profile.samples[i].weight)
            .fold(0u64, u64::saturating_add);
        if heaviest.is_none_or(|(_, w)| total > w) {
            heaviest = Some((profiles.len(), total));
        }
        profiles.push(Sampled {
            kind: "sampled",
            name: format!("{}: {measure}", thread.label()),
            unit,
            start_value: 0,
            end_value: total,
            samples: samples
                .iter()
                .map(|&i| profile.stacks[profile.samples[i].stack].as_slice())
                .collect(),
            weights: samples.iter().map(|&i| profile.samples[i].weight).collect(),
        });
    }

    let file = File {
        schema: SPEEDSCOPE_SCHEMA_URL,
        shared: Shared { frames },
        profiles,
        name: format!("{} ({measure})", profile.name),
        active_profile_index: heaviest.map(|(i, _)| i),
        exporter: SPEEDSCOPE_EXPORTER,
    };
    let mut out = BufWriter::new(w);
    serde_json::to_writer(&mut out, &file)?;
    out.flush()?;
    Ok(())
}
