//! What the snapshot commands (`gcdump`, `heap`) share: their configs, collecting a
//! snapshot into a file with progress on stderr, reading a snapshot file back, and a
//! profile written in the formats asked for.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context, Result};
use eventpipe_client::capture::{CaptureError, Report};
use eventpipe_client::{Target, TargetSpec};
use eventpipe_insight::Profile;
use nettrace::{Event, TraceReader};

use crate::convert::ConvertFormat;

/// `eptrace gcdump collect`, `eptrace heap collect`; `O` is the command's capture options.
#[derive(Debug)]
pub(crate) struct CollectConfig<O> {
    /// The process to snapshot.
    pub(crate) target: TargetSpec,
    /// The snapshot file; `None`: `NAME_PID` and the command's suffix.
    pub(crate) output: Option<PathBuf>,
    /// How the snapshot is taken.
    pub(crate) options: O,
}

/// `eptrace gcdump report`, `eptrace heap report`.
#[derive(Debug)]
pub(crate) struct ReportConfig {
    /// The snapshot file.
    pub(crate) file: PathBuf,
    /// Print JSON instead of a table.
    pub(crate) json: bool,
    /// Rows the table shows.
    pub(crate) top: usize,
    /// Read a snapshot that lost part of the heap, marked incomplete (`gcdump --allow-partial`;
    /// a `heap` snapshot is whole or refused, so `heap` leaves this false).
    pub(crate) allow_partial: bool,
    /// `heap report --by caller`: rows by the program's own frame, not the site.
    pub(crate) by_caller: bool,
}

/// `eptrace gcdump diff`, `eptrace heap diff`.
#[derive(Debug)]
pub(crate) struct DiffConfig {
    /// The earlier snapshot file.
    pub(crate) old: PathBuf,
    /// The later snapshot file.
    pub(crate) new: PathBuf,
    /// Print JSON instead of a table.
    pub(crate) json: bool,
    /// Rows the table shows.
    pub(crate) top: usize,
    /// As [`ReportConfig::allow_partial`].
    pub(crate) allow_partial: bool,
}

/// `eptrace gcdump convert`, `eptrace heap convert`.
#[derive(Debug)]
pub(crate) struct ConvertConfig {
    /// The snapshot file.
    pub(crate) file: PathBuf,
    /// The formats to write.
    pub(crate) formats: Vec<ConvertFormat>,
    /// The output file, for a single format; else names derived from `file`.
    pub(crate) output: Option<PathBuf>,
    /// As [`ReportConfig::allow_partial`].
    pub(crate) allow_partial: bool,
}

/// What a snapshot command's `capture` is: it snapshots the target into the file (named by
/// the path in messages) with the options, telling the callback how far it is; the flag
/// ends it early.
pub(crate) type Capture<O, T> = fn(
    &mut Target,
    File,
    &Path,
    &O,
    &AtomicBool,
    &mut dyn FnMut(Report<'_>),
) -> Result<T, CaptureError>;

/// Writes a snapshot's `profile` in each format (a snapshot has no timeline), saying what
/// each file holds.
pub(crate) fn write_profiles(
    input: &Path,
    profile: &Profile,
    formats: &[ConvertFormat],
    output: Option<&PathBuf>,
    what: &str,
) -> Result<()> {
    if formats.contains(&ConvertFormat::Chrome) {
        bail!("a heap snapshot has no timeline: choose speedscope, pprof, flamegraph or collapsed");
    }
    for (format, path) in crate::convert::targets(input, formats, output)? {
        crate::convert::write_profile_file(format, profile, &path)?;
        let _ = writeln!(
            std::io::stderr().lock(),
            "wrote {} ({what}: {} samples, {})",
            path.display(),
            profile.samples.len(),
            profile.weight_text(profile.total_weight())
        );
    }
    Ok(())
}

/// `eptrace gcdump collect` and `eptrace heap collect`: opens the target, creates the
/// snapshot file (`output`, else `NAME_PID{suffix}`), runs `capture` with progress on
/// stderr, then says where the file is, what it holds (`summary`) and how to inspect it
/// (`eptrace {command} report FILE`).
pub(crate) fn do_collect<O, T>(
    config: &CollectConfig<O>,
    command: &str,
    suffix: &str,
    capture: Capture<O, T>,
    summary: impl FnOnce(&T) -> String,
) -> Result<()> {
    use std::io::IsTerminal;
    let mut target = Target::open(&config.target)?;
    let path = config
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}_{}{suffix}", target.name(), target.pid())));
    let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let interactive = std::io::stderr().is_terminal();
    let mut in_line = false;
    let captured = capture(
        &mut target,
        file,
        &path,
        &config.options,
        &AtomicBool::new(false),
        &mut |report| crate::progress::say(report, interactive, &mut in_line),
    );
    crate::progress::end_line(interactive, in_line);
    let captured = captured?;
    writeln!(
        std::io::stdout().lock(),
        "Heap snapshot written to {} ({}). Inspect it with `eptrace {command} report {}`.",
        path.display(),
        summary(&captured),
        path.display()
    )?;
    Ok(())
}

/// Reads the snapshot file at `path` to its end, calling `each` with every event; returns
/// the events the trace lost.
pub(crate) fn read_file(
    path: &Path,
    mut each: impl FnMut(&Event<'_>) -> Result<()>,
) -> Result<u64> {
    let cannot_read = || format!("cannot read {}", path.display());
    let bytes = std::fs::read(path).with_context(cannot_read)?;
    let mut reader = TraceReader::from_slice(&bytes).with_context(cannot_read)?;
    while let Some(event) = reader.next_event().with_context(cannot_read)? {
        each(&event)?;
    }
    Ok(reader.stats().lost_events)
}

/// The lines under a snapshot diff's table: how many more changed rows `--top` left out,
/// and how many rows did not change (`thing`: what a row is, singular).
pub(crate) fn write_diff_tail(
    out: &mut impl Write,
    changed: usize,
    unchanged: usize,
    top: usize,
    thing: &str,
) -> std::io::Result<()> {
    if changed > top {
        writeln!(
            out,
            "  ... and {} more changed {thing}s (--top N)",
            changed - top
        )?;
    }
    if unchanged > 0 {
        writeln!(
            out,
            "  {} unchanged, not listed",
            crate::numbers::plural(unchanged, thing)
        )?;
    }
    Ok(())
}
