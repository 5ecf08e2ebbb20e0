//! What the snapshot commands (`gcdump`, `heap`) share: their configs, collecting a
//! snapshot into a file (the session's stream written while its events are read), reading
//! a snapshot file back, and a profile written in the formats asked for.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use eventpipe_insight::Profile;
use nettrace::{Event, TraceReader};

use crate::convert::ConvertFormat;
use crate::progress::Report;
use eventpipe_client::{Target, TargetSpec, TraceSession, STOP_GRACE};

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
pub(crate) type Capture<O, T> =
    fn(&mut Target, File, &Path, &O, &AtomicBool, &mut dyn FnMut(Report<'_>)) -> Result<T>;

/// A snapshot session's stream, read into the snapshot file on a thread of its own that
/// tells the capture loop how far it is through `shared`.
#[derive(Debug)]
pub(crate) struct SessionReader<S, T> {
    session: TraceSession<Result<T>>,
    /// What the reading thread shares with the capture loop.
    pub(crate) shared: Arc<S>,
}

impl<S: Default + Send + Sync + 'static, T: Send + 'static> SessionReader<S, T> {
    /// Starts reading `stream` into `file` with `read` on a thread named `name`.
    pub(crate) fn start(
        stream: eventpipe_ipc::TraceStream,
        file: File,
        name: &str,
        read: fn(eventpipe_ipc::TraceStream, File, &S) -> Result<T>,
    ) -> Result<Self> {
        let shared = Arc::new(S::default());
        let session = {
            let shared = Arc::clone(&shared);
            TraceSession::spawn(stream, name, move |stream| read(stream, file, &shared))?
        };
        Ok(SessionReader { session, shared })
    }

    /// Whether the reading thread has ended.
    pub(crate) fn is_finished(&self) -> bool {
        self.session.is_finished()
    }

    /// Cuts the stream of a session stopped at `stopped` once [`STOP_GRACE`] has passed
    /// without its end: a process that never ends it cannot hold the command.
    pub(crate) fn cut_after_grace(&self, stopped: Instant) {
        if stopped.elapsed() > STOP_GRACE {
            self.session.cancel();
        }
    }

    /// Stops the session once the snapshot is whole (its rundown follows); when
    /// `StopTracing` fails, the stream is cut instead.
    pub(crate) fn stop_whole(&self, target: &mut Target, report: &mut dyn FnMut(Report<'_>)) {
        if let Err(e) = self.session.stop(target) {
            report(Report::Note(&format!(
                "note: StopTracing failed ({:#}); the stream was cut",
                anyhow::Error::new(e)
            )));
        }
    }

    /// Stops a session that will not finish on its own, and gives its stream
    /// [`STOP_GRACE`] to end before cutting it.
    pub(crate) fn give_up(&self, target: &mut Target, report: &mut dyn FnMut(Report<'_>)) {
        if let Err(e) = self.session.stop(target) {
            report(Report::Note(&format!(
                "note: StopTracing failed ({:#})",
                anyhow::Error::new(e)
            )));
        }
        self.session.wait_within(STOP_GRACE);
    }

    /// What the reading thread made of the stream.
    pub(crate) fn join(self) -> Result<T> {
        self.session.join()?
    }
}

/// Copies what it reads into the file; a write error is kept for the end, so the reading
/// (and the session) goes on.
struct Tee<'a, R> {
    inner: R,
    file: &'a mut BufWriter<File>,
    error: Option<std::io::Error>,
}

impl<R: Read> Read for Tee<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if self.error.is_none() {
            if let Err(e) = self.file.write_all(&buf[..n]) {
                self.error = Some(e);
            }
        }
        Ok(n)
    }
}

/// Reads `stream` to its end into `file`, calling `each` with every event; returns the
/// events the trace lost. `what` names the stream in errors.
pub(crate) fn read_into_file(
    stream: impl Read,
    file: File,
    what: &str,
    mut each: impl FnMut(&Event<'_>) -> Result<()>,
) -> Result<u64> {
    let mut file = BufWriter::with_capacity(1 << 20, file);
    let mut tee = Tee {
        inner: stream,
        file: &mut file,
        error: None,
    };
    let mut reader = TraceReader::from_read(&mut tee).with_context(|| format!("reading {what}"))?;
    while let Some(event) = reader
        .next_event()
        .with_context(|| format!("reading {what}"))?
    {
        each(&event)?;
    }
    let lost = reader.stats().lost_events;
    drop(reader);
    let _ = std::io::copy(&mut tee, &mut std::io::sink());
    if let Some(e) = tee.error.take() {
        return Err(anyhow::Error::new(e).context("writing the snapshot file"));
    }
    file.flush().context("writing the snapshot file")?;
    Ok(lost)
}

/// The files `formats` go to: `output` for a single format, else names derived from
/// `input` (`x.nettrace` → `x.speedscope.json`).
pub(crate) fn targets(
    input: &Path,
    formats: &[ConvertFormat],
    output: Option<&PathBuf>,
) -> Result<Vec<(ConvertFormat, PathBuf)>> {
    Ok(match (output, formats) {
        (Some(out), [format]) => vec![(*format, out.clone())],
        (Some(_), _) => bail!(
            "-o names one file; it cannot take {} formats",
            formats.len()
        ),
        (None, formats) => formats
            .iter()
            .map(|&f| (f, crate::convert::output_path(input, f)))
            .collect(),
    })
}

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
    for (format, path) in targets(input, formats, output)? {
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
