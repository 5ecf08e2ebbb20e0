//! speedscope's JSON file format into a [`Profile`]: the inverse of [`crate::speedscope`],
//! and a reader of other tools' files (<https://www.speedscope.app/file-format-schema.json>).
//!
//! * Each of the file's profiles is a thread: its name is this crate's thread label
//!   (`name (tid)`, `Thread tid`) before the `: what the weights measure` this crate adds;
//!   another tool's profile is a thread numbered by its place in the file.
//! * What the weights measure: the measure this crate names after the colon, else by the
//!   unit alone (a time is read as CPU time, bytes as bytes allocated, `none` as events).
//! * A `sampled` profile's samples are read as they are; an `evented` profile's open and
//!   close events become one sample per interval between two events, weighing the
//!   interval, on the frames open through it.

use serde::Deserialize;

use super::{unit_of, ImportError};
use crate::profile::{Frame, FrameId, FrameKind, Profile, Sample, SampleUnit};

#[derive(Deserialize)]
struct File {
    shared: Shared,
    profiles: Vec<Part>,
}

#[derive(Deserialize)]
struct Shared {
    frames: Vec<FrameJson>,
}

#[derive(Deserialize)]
struct FrameJson {
    name: String,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    line: Option<u32>,
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Part {
    #[serde(rename = "sampled")]
    Sampled {
        #[serde(default)]
        name: String,
        unit: String,
        samples: Vec<Vec<usize>>,
        weights: Vec<f64>,
    },
    #[serde(rename = "evented")]
    Evented {
        #[serde(default)]
        name: String,
        unit: String,
        events: Vec<Event>,
    },
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    frame: usize,
    at: f64,
}

pub(super) fn read(bytes: &[u8]) -> Result<Profile, ImportError> {
    let file: File = serde_json::from_slice(bytes).map_err(ImportError::Json)?;
    let Some(first) = file.profiles.first() else {
        return Err(ImportError::Invalid("the file has no profiles".into()));
    };
    let (first_name, first_unit) = first.name_and_unit();
    let (unit, scale) = measure(first_name, first_unit)?;
    let mut profile = Profile::new("speedscope samples", unit);
    let frames: Vec<FrameId> = file
        .shared
        .frames
        .iter()
        .map(|f| {
            let kind = if f.name.starts_with("async ") {
                FrameKind::Async
            } else if f.name.starts_with('[') && f.name.ends_with(']') {
                FrameKind::ThreadState
            } else {
                FrameKind::Native
            };
            profile.intern_frame(Frame {
                file: f.file.clone(),
                line: f.line,
                ..Frame::named(f.name.clone(), kind)
            })
        })
        .collect();
    let frame = |index: usize, what: &dyn Fn() -> String| -> Result<FrameId, ImportError> {
        frames.get(index).copied().ok_or_else(|| {
            ImportError::Invalid(format!(
                "{} names frame {index}, past shared.frames' {}",
                what(),
                frames.len()
            ))
        })
    };
    for (p, part) in file.profiles.iter().enumerate() {
        let (name, unit_name) = part.name_and_unit();
        let (this_unit, this_scale) = measure(name, unit_name)?;
        if (this_unit, this_scale) != (unit, scale) {
            return Err(ImportError::Unsupported(format!(
                "profiles[{p}] measures {} in {unit_name}, profiles[0] {} in {first_unit}: \
                 one file, one measure",
                this_unit.describe(),
                unit.describe()
            )));
        }
        let thread = thread_of(name, p, &mut profile);
        let weight = |w: f64, what: &dyn Fn() -> String| -> Result<u64, ImportError> {
            let scaled = w * scale as f64;
            if !(0.0..1.8e19).contains(&scaled) {
                return Err(ImportError::Invalid(format!("{} weighs {w}", what())));
            }
            Ok(scaled.round() as u64)
        };
        match part {
            Part::Sampled {
                samples, weights, ..
            } => {
                if samples.len() != weights.len() {
                    return Err(ImportError::Invalid(format!(
                        "profiles[{p}] has {} samples and {} weights",
                        samples.len(),
                        weights.len()
                    )));
                }
                for (i, (stack, &w)) in samples.iter().zip(weights).enumerate() {
                    let what = || format!("profiles[{p}].samples[{i}]");
                    let stack = stack
                        .iter()
                        .map(|&f| frame(f, &what))
                        .collect::<Result<Vec<_>, _>>()?;
                    let weight = weight(w, &what)?;
                    push(&mut profile, thread, stack, weight);
                }
            }
            Part::Evented { events, .. } => {
                let mut open: Vec<FrameId> = Vec::new();
                let mut last_at = None;
                for (i, e) in events.iter().enumerate() {
                    let what = || format!("profiles[{p}].events[{i}]");
                    if let Some(before) = last_at {
                        if e.at < before {
                            return Err(ImportError::Invalid(format!(
                                "{} is at {}, before the event ahead of it",
                                what(),
                                e.at
                            )));
                        }
                        if !open.is_empty() && e.at > before {
                            let w = weight(e.at - before, &what)?;
                            push(&mut profile, thread, open.clone(), w);
                        }
                    }
                    last_at = Some(e.at);
                    let f = frame(e.frame, &what)?;
                    match e.kind.as_str() {
                        "O" => open.push(f),
                        "C" if open.last() == Some(&f) => {
                            open.pop();
                        }
                        "C" => {
                            return Err(ImportError::Invalid(format!(
                                "{} closes frame {} that is not the innermost open one",
                                what(),
                                e.frame
                            )))
                        }
                        other => {
                            return Err(ImportError::Invalid(format!(
                                "{} has type {other:?}, not \"O\" or \"C\"",
                                what()
                            )))
                        }
                    }
                }
            }
        }
    }
    Ok(profile)
}

impl Part {
    fn name_and_unit(&self) -> (&str, &str) {
        match self {
            Part::Sampled { name, unit, .. } | Part::Evented { name, unit, .. } => (name, unit),
        }
    }
}

/// What a profile named `name` with weights in `unit` measures, and the factor to its
/// unit's nanoseconds or bytes.
fn measure(name: &str, unit: &str) -> Result<(SampleUnit, u64), ImportError> {
    let kind = match unit {
        "bytes" | "kilobytes" | "megabytes" => "alloc_space",
        "none" => "events",
        _ => "cpu",
    };
    let (by_unit, scale) = unit_of(kind, unit).ok_or_else(|| {
        ImportError::Unsupported(format!(
            "speedscope unit {unit:?} is not one this tool reads"
        ))
    })?;
    // This crate's writer names what the weights measure after the thread's label; it
    // is taken when it agrees with the unit.
    let family = |u: SampleUnit| match u {
        u if u.is_time() => 0,
        SampleUnit::Events => 2,
        _ => 1,
    };
    let said = name
        .rsplit_once(": ")
        .and_then(|(_, m)| SampleUnit::ALL.into_iter().find(|u| u.describe() == m))
        .filter(|&u| family(u) == family(by_unit));
    Ok((said.unwrap_or(by_unit), scale))
}

/// The thread of profile `index`, named `name`: `name (tid)` or `Thread tid` before the
/// measure, as this crate writes them; else a thread numbered `index` with that name.
fn thread_of(name: &str, index: usize, profile: &mut Profile) -> usize {
    let label = name.rsplit_once(": ").map_or(name, |(label, _)| label);
    if let Some(tid) = label.strip_prefix("Thread ").and_then(|t| t.parse().ok()) {
        return profile.intern_thread(tid, None, None);
    }
    if let Some((thread_name, rest)) = label.rsplit_once(" (") {
        if let Some(tid) = rest.strip_suffix(')').and_then(|t| t.parse().ok()) {
            return profile.intern_thread(tid, Some(thread_name), None);
        }
    }
    let name = (!name.is_empty()).then_some(name);
    profile.intern_thread(index as u64, name, None)
}

fn push(profile: &mut Profile, thread: usize, stack: Vec<FrameId>, weight: u64) {
    let stack = profile.intern_stack(stack);
    profile.push_sample(Sample {
        thread,
        time_ms: 0.0,
        weight,
        stack,
        lines: None,
    });
}
