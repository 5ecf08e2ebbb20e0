//! What the snapshot commands (`gcdump`, `heap`) share: a session's stream written to its
//! file while its events are read, and a profile written in the formats asked for.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use eventpipe_insight::Profile;
use nettrace::{Event, TraceReader};

use crate::convert::ConvertFormat;

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

/// The part of `gcdump` and `heap` collection that is the same: opens the target, creates
/// the snapshot file (`output`, else `NAME_PID{suffix}`), runs `capture` with progress on
/// stderr, and returns where the file is with what `capture` made of it.
pub(crate) fn collect_snapshot<T>(
    target: &crate::collect::TargetSpec,
    output: Option<&PathBuf>,
    suffix: &str,
    capture: impl FnOnce(
        &mut crate::collect::Target,
        File,
        &Path,
        &mut dyn FnMut(crate::progress::Report<'_>),
    ) -> Result<T>,
) -> Result<(PathBuf, T)> {
    use std::io::IsTerminal;
    let mut target = crate::collect::Target::open(target)?;
    let path = output
        .cloned()
        .unwrap_or_else(|| PathBuf::from(format!("{}_{}{suffix}", target.name(), target.pid())));
    let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let interactive = std::io::stderr().is_terminal();
    let mut in_line = false;
    let captured = capture(&mut target, file, &path, &mut |report| {
        crate::progress::say(report, interactive, &mut in_line)
    });
    crate::progress::end_line(interactive, in_line);
    Ok((path, captured?))
}
