//! Collapsed ("folded") stacks and SVG flame graphs.
//!
//! A collapsed line is one stack, root first, its frames' function names joined by `;`,
//! then a space and the summed weight of its samples: `main;run;parse 42`. Lines are sorted
//! and each stack appears once (stacks whose frames differ only in module, file or line
//! print alike and are merged). Names are made safe for the format: `;` becomes `,`, line
//! breaks and other control characters become spaces, and an empty name reads `[unknown]`;
//! a sample without frames is drawn as the single frame `[no frames]`.
//!
//! Weights are the profile's: microseconds for time profiles (CPU time, .NET thread time;
//! each line's nanoseconds rounded, at least 1), bytes for allocation profiles, events
//! otherwise. The SVG is drawn by the `inferno` crate from those lines; its title names what
//! the widths measure and how many samples (captures) the profile has, which differs from
//! the weight whenever a sample stands for more than one unit.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};

use crate::error::{Error, Result};
use crate::profile::{thousands, Profile, SampleUnit};

/// How samples of different threads are combined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Grouping {
    /// One tree for all threads.
    #[default]
    Merged,
    /// One tree per thread: each stack starts with a frame naming the thread
    /// ([`crate::Thread::label`]).
    ByThread,
}

/// `name` as a collapsed-stack frame: no `;`, no line breaks or other control characters,
/// not empty, no surrounding whitespace.
pub fn sanitize_frame_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| match c {
            ';' => ',',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    let trimmed = cleaned.trim();
    if trimmed.is_empty() {
        "[unknown]".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// The collapsed stacks of `profile`: `(frames joined by ';', summed weight)`, sorted by
/// the stack text, samples of weight 0 left out.
///
/// # Errors
/// [`Error::InvalidProfile`] for inconsistent indices.
pub fn collapsed_stacks(profile: &Profile, grouping: Grouping) -> Result<Vec<(String, u64)>> {
    profile.validate()?;
    let names: Vec<String> = profile
        .frames
        .iter()
        .map(|f| sanitize_frame_name(&f.function))
        .collect();
    let threads: Vec<String> = profile
        .threads
        .iter()
        .map(|t| sanitize_frame_name(&t.label()))
        .collect();
    // Sum per (thread, stack) first so each distinct line is formatted once.
    let mut per_stack: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    for s in profile.samples.iter().filter(|s| s.weight > 0) {
        let thread = match grouping {
            Grouping::Merged => 0,
            Grouping::ByThread => s.thread,
        };
        let total = per_stack.entry((thread, s.stack)).or_insert(0);
        *total = total.saturating_add(s.weight);
    }
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for ((thread, stack), weight) in per_stack {
        let weight = if profile.unit.is_time() {
            weight.saturating_add(500).div_euclid(1000).max(1)
        } else {
            weight
        };
        let mut line = String::new();
        if grouping == Grouping::ByThread {
            line.push_str(&threads[thread]);
        }
        let frames = &profile.stacks[stack];
        if frames.is_empty() {
            if !line.is_empty() {
                line.push(';');
            }
            line.push_str("[no frames]");
        }
        for &f in frames {
            if !line.is_empty() {
                line.push(';');
            }
            line.push_str(&names[f]);
        }
        let total = lines.entry(line).or_insert(0);
        *total = total.saturating_add(weight);
    }
    Ok(lines.into_iter().collect())
}

/// Writes the collapsed stacks of `profile`, one `frames weight` line each.
///
/// # Errors
/// [`Error::InvalidProfile`] for inconsistent indices, [`Error::Io`] when writing fails.
pub fn write_collapsed(profile: &Profile, grouping: Grouping, w: impl Write) -> Result<()> {
    let mut out = BufWriter::new(w);
    for (stack, weight) in collapsed_stacks(profile, grouping)? {
        writeln!(out, "{stack} {weight}")?;
    }
    out.flush()?;
    Ok(())
}

/// The flame graph's title: the profile's name, what the widths measure, and the number
/// of samples: `CPU samples: CPU time in µs, 1,470 samples`.
pub fn flamegraph_title(profile: &Profile) -> String {
    let measure = match profile.unit {
        SampleUnit::CpuTime
        | SampleUnit::ThreadTime
        | SampleUnit::OffCpuTime
        | SampleUnit::LockWait => {
            format!("{} in µs", profile.unit.describe())
        }
        unit => unit.describe().to_owned(),
    };
    let n = profile.samples.len();
    format!(
        "{}: {measure}, {} sample{}",
        profile.name,
        thousands(n as u64),
        if n == 1 { "" } else { "s" }
    )
}

/// Writes an SVG flame graph of `profile` (interactive: click to zoom, search).
///
/// # Errors
/// [`Error::EmptyProfile`] when no sample has a weight (nothing is written then),
/// [`Error::InvalidProfile`] for inconsistent indices, [`Error::Io`] when drawing or
/// writing fails.
pub fn write_flamegraph(profile: &Profile, grouping: Grouping, w: impl Write) -> Result<()> {
    let stacks = collapsed_stacks(profile, grouping)?;
    if stacks.is_empty() {
        return Err(Error::EmptyProfile(profile.name.clone()));
    }
    let lines: Vec<String> = stacks
        .iter()
        .map(|(stack, weight)| format!("{stack} {weight}"))
        .collect();
    let mut options = inferno::flamegraph::Options::default();
    options.title = flamegraph_title(profile);
    options.count_name = match profile.unit {
        SampleUnit::CpuTime
        | SampleUnit::ThreadTime
        | SampleUnit::OffCpuTime
        | SampleUnit::LockWait => "µs",
        SampleUnit::Bytes | SampleUnit::LiveBytes | SampleUnit::HeapBytes => "bytes",
        SampleUnit::Events => "events",
    }
    .to_owned();
    // Colours from the function names, so the same input draws the same picture.
    options.deterministic = true;
    // Already sorted by collapsed_stacks.
    options.no_sort = true;
    let mut out = BufWriter::new(w);
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut out)?;
    out.flush()?;
    Ok(())
}

/// A differential flame graph of `new` against `base`, as inferno draws one (Brendan
/// Gregg's): `new`'s stacks, each frame red where it grew and blue where it shrank, deeper
/// for larger changes; `normalize` first scales `base` to `new`'s total (runs of different
/// lengths).
pub fn write_differential_flamegraph(
    base: &Profile,
    new: &Profile,
    normalize: bool,
    w: impl Write,
) -> Result<()> {
    let folded = |p: &Profile| -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for (stack, weight) in collapsed_stacks(p, Grouping::Merged)? {
            writeln!(out, "{stack} {weight}")?;
        }
        Ok(out)
    };
    let (before, after) = (folded(base)?, folded(new)?);
    if after.is_empty() && before.is_empty() {
        return Err(Error::EmptyProfile(new.name.clone()));
    }
    let mut both = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options {
            normalize,
            ..Default::default()
        },
        before.as_slice(),
        after.as_slice(),
        &mut both,
    )?;
    let mut options = inferno::flamegraph::Options::default();
    options.title = format!("Differential: {}", flamegraph_title(new));
    options.subtitle = Some("red: grew since the base; blue: shrank".to_owned());
    options.deterministic = true;
    let mut out = BufWriter::new(w);
    inferno::flamegraph::from_reader(&mut options, both.as_slice(), &mut out)?;
    out.flush()?;
    Ok(())
}
