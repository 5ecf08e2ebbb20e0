//! `eptrace convert`: a trace as the files profilers open — speedscope, Chrome/Perfetto
//! JSON, pprof, a flame graph SVG or collapsed stacks.
//!
//! The profile formats are built from one [`eventpipe_insight::Profile`] (one read of the
//! trace, symbolized once); the Chrome format reads the trace again, streaming. `collect
//! --format` and the demo call [`convert_file`] on the trace they just wrote.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use eventpipe_insight::flamegraph::Grouping;
use eventpipe_insight::{BuiltProfile, Profile, ProfileBuilder, SampleSelection};

use crate::input::{self, InputSpec, Opened};
use crate::numbers::plural;
use crate::progress::Progress;

/// An output format.
// The variants' docs are `--help`'s text, which shows a URL as written.
#[allow(rustdoc::bare_urls)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ConvertFormat {
    /// speedscope JSON (https://www.speedscope.app): sampled profiles per thread.
    Speedscope,
    /// Chrome Trace Event JSON (Perfetto UI, chrome://tracing, DevTools, speedscope): every
    /// event, begin/end pairs as slices. Written as `*.timeline.json`: speedscope takes a
    /// `*.chrome.json` name for a DevTools recording and fails.
    Chrome,
    /// pprof (gzipped protobuf): `go tool pprof`, Pyroscope.
    Pprof,
    /// A flame graph SVG.
    Flamegraph,
    /// Collapsed stacks (`root;caller;leaf weight`), the input of most flame graph tools.
    Collapsed,
}

impl ConvertFormat {
    /// The file name suffix that replaces `.nettrace`.
    fn suffix(self) -> &'static str {
        match self {
            ConvertFormat::Speedscope => ".speedscope.json",
            ConvertFormat::Chrome => eventpipe_insight::chrome::FILE_SUFFIX,
            ConvertFormat::Pprof => ".pb.gz",
            ConvertFormat::Flamegraph => ".svg",
            ConvertFormat::Collapsed => ".folded",
        }
    }

    fn needs_profile(self) -> bool {
        self != ConvertFormat::Chrome
    }
}

/// What `convert` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The trace to read.
    pub(crate) input: InputSpec,
    /// Whether a cut-off trace is read.
    pub(crate) cut: crate::cut::CutTraces,
    /// Formats to write, at least one.
    pub(crate) formats: Vec<ConvertFormat>,
    /// The output file (one format; `-` is standard output) or `None` for names derived
    /// from the input.
    pub(crate) output: Option<PathBuf>,
    /// Which events become samples.
    pub(crate) samples: SampleSelection,
    /// One flame graph tree per thread instead of one for all.
    pub(crate) by_thread: bool,
    /// CPU samples taken inside an instrumented future's poll show its async callstack
    /// (when the trace has async-profiler data).
    pub(crate) async_stacks: bool,
}

/// One file written.
#[derive(Debug)]
pub(crate) struct Written {
    pub(crate) path: PathBuf,
    pub(crate) summary: String,
}

/// Where a cut-off trace ended, and the events read before it.
type Cut = (nettrace::Truncation, u64);

/// Runs `eptrace convert`.
pub(crate) fn do_convert(config: &Config) -> Result<()> {
    let name = config.input.display_name();
    let opened = input::open(&config.input)?;
    let bytes: Vec<u8>;
    let data: &[u8] = match &opened {
        Opened::Mapped(_) => opened.bytes().unwrap_or(&[]),
        Opened::Stream(_) => {
            // Two formats may need two reads; a stream is read once into memory.
            let Opened::Stream(mut stream) = opened else {
                unreachable!()
            };
            let mut all = Vec::new();
            stream
                .read_to_end(&mut all)
                .with_context(|| format!("cannot read {name}"))?;
            bytes = all;
            &bytes
        }
    };
    let base = match &config.input {
        InputSpec::Path(p) => p.clone(),
        InputSpec::Stdin => PathBuf::from("stdin.nettrace"),
    };
    let targets = targets(&base, &config.formats, config.output.as_ref())?;
    let (written, truncation) = convert_bytes(data, &name, &targets, config)?;
    let mut err = std::io::stderr().lock();
    for w in &written {
        let name = if w.path.as_os_str() == "-" {
            "standard output".to_owned()
        } else {
            w.path.display().to_string()
        };
        let _ = writeln!(err, "wrote {name} ({})", w.summary);
    }
    drop(err);
    match truncation {
        Some((cut, events)) => crate::cut::verdict(&name, Some(&cut), events),
        None => Ok(()),
    }
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
            .map(|&f| (f, output_path(input, f)))
            .collect(),
    })
}

/// Converts the trace just written at `path` to `formats` (after `collect -f`, `record
/// -f`), saying on stdout what each file holds.
pub(crate) fn convert_and_say(path: &Path, formats: &[ConvertFormat]) -> Result<()> {
    if formats.is_empty() {
        return Ok(());
    }
    let written = convert_file(path, formats, eventpipe_insight::SampleSelection::Auto)?;
    let mut out = std::io::stdout().lock();
    for w in written {
        let _ = writeln!(out, "Wrote {} ({})", w.path.display(), w.summary);
    }
    Ok(())
}

/// `trace.nettrace` → `trace.speedscope.json` (and so on).
pub(crate) fn output_path(trace: &Path, format: ConvertFormat) -> PathBuf {
    let file = trace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace.nettrace".into());
    let stem = file.strip_suffix(".nettrace").unwrap_or(&file);
    trace.with_file_name(format!("{stem}{}", format.suffix()))
}

/// Converts the trace file at `path` into each format, next to it.
pub(crate) fn convert_file(
    path: &Path,
    formats: &[ConvertFormat],
    samples: SampleSelection,
) -> Result<Vec<Written>> {
    let name = path.display().to_string();
    let opened = input::open(&InputSpec::Path(path.to_path_buf()))?;
    let data = opened.bytes().unwrap_or(&[]);
    let targets: Vec<_> = formats.iter().map(|&f| (f, output_path(path, f))).collect();
    let config = Config {
        input: InputSpec::Path(path.to_path_buf()),
        cut: crate::cut::CutTraces::Refuse,
        formats: formats.to_vec(),
        output: None,
        samples,
        by_thread: false,
        async_stacks: true,
    };
    Ok(convert_bytes(data, &name, &targets, &config)?.0)
}

fn convert_bytes(
    data: &[u8],
    name: &str,
    targets: &[(ConvertFormat, PathBuf)],
    config: &Config,
) -> Result<(Vec<Written>, Option<Cut>)> {
    let mut written = Vec::new();
    // Where a cut-off trace ends, as the last reader saw it.
    let mut truncation = None;
    let profile = if targets.iter().any(|(f, _)| f.needs_profile()) {
        let (built, cut) = read_profile(data, name, config)?;
        truncation = truncation.or(cut);
        if built.profile.samples.is_empty() {
            bail!("{}", nothing_to_convert(name, &config.samples, &built));
        }
        report_notes(&built);
        Some(built)
    } else {
        None
    };
    for (format, path) in targets {
        let sink: Box<dyn Write> = if path.as_os_str() == "-" {
            Box::new(std::io::stdout().lock())
        } else {
            let file =
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            if matches!(format, ConvertFormat::Chrome) {
                // Several times the trace's size: written by a thread of its own.
                Box::new(eventpipe_insight::write_behind::WriteBehind::new(file))
            } else {
                Box::new(file)
            }
        };
        let mut out = BufWriter::new(sink);
        let summary = match (format, &profile) {
            (ConvertFormat::Chrome, _) => {
                let mut reader = config.cut.apply(
                    crate::input::paged_reader(data)
                        .with_context(|| format!("cannot read {name}"))?,
                );
                // The trace is in memory: its kinds of event are read first, so begins
                // that nothing in it can end go out as instants at once.
                let rows = nettrace::scan_metadata(data);
                let s = eventpipe_insight::write_chrome_trace_knowing_rows(
                    &mut reader,
                    &mut out,
                    &rows,
                )
                .with_context(|| format!("cannot convert {name} to Chrome JSON"))?;
                let stats = reader.stats();
                truncation = truncation.or(stats.truncation.map(|t| (t, stats.events)));
                let polls = if s.poll_spans > 0 {
                    format!(", {} async polls", s.poll_spans)
                } else {
                    String::new()
                };
                format!(
                    "{} events: {} instants, {} spans{polls}",
                    s.events, s.instants, s.complete
                )
            }
            (format, Some(built)) => {
                write_profile(*format, &built.profile, config.by_thread, &mut out)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                profile_summary(built)
            }
            (_, None) => unreachable!("profile formats build the profile first"),
        };
        out.flush()
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(Written {
            path: path.clone(),
            summary,
        });
    }
    Ok((written, truncation))
}

/// Why a profile came out empty, and what the trace has instead.
fn nothing_to_convert(name: &str, asked: &SampleSelection, built: &BuiltProfile) -> String {
    let what = match asked {
        SampleSelection::Auto | SampleSelection::EventsWithStacks => {
            "no event carries a stack".to_owned()
        }
        other => format!("it has no {}", other.describe()),
    };
    let instead: Vec<String> = built
        .available
        .iter()
        .map(|(selection, count)| {
            format!(
                "{count} {} (--samples {})",
                selection.describe(),
                selection.keyword()
            )
        })
        .collect();
    let hint = if instead.is_empty() {
        "; collect with --stacks or a sampling profile".to_owned()
    } else {
        format!("; it has {}", instead.join(", "))
    };
    format!("nothing to convert in {name}: {what}{hint}; no file was written")
}

/// Reads the trace into a symbolized profile, with a progress bar on long reads.
pub(crate) fn read_profile(
    data: &[u8],
    name: &str,
    config: &Config,
) -> Result<(BuiltProfile, Option<Cut>)> {
    let mut progress = Progress::new(Some(data.len() as u64));
    let mut reader = config
        .cut
        .apply(crate::input::paged_reader(data).with_context(|| format!("cannot read {name}"))?);
    let mut builder = ProfileBuilder::new(config.samples.clone()).async_stacks(config.async_stacks);
    let mut seen = 0u64;
    // `EventRef`s, made into `Event`s in place: the reader's `Event` is large, and moving
    // it out through the `Result` cost as much as making it.
    while let Some(event) = reader
        .next_event_ref()
        .with_context(|| format!("cannot read {name}"))?
    {
        builder.observe(&event.to_event());
        seen += 1;
        if seen % 4096 == 0 {
            progress.set(event.offset().0);
        }
    }
    progress.finish();
    let stats = reader.stats();
    Ok((
        builder.finish(),
        stats.truncation.map(|t| (t, stats.events)),
    ))
}

/// Writes `profile` in `format` to the file at `path` (`-`: standard output).
pub(crate) fn write_profile_file(
    format: ConvertFormat,
    profile: &Profile,
    path: &Path,
) -> Result<()> {
    let sink: Box<dyn Write> = if path.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(File::create(path).with_context(|| format!("cannot create {}", path.display()))?)
    };
    let mut out = BufWriter::new(sink);
    write_profile(format, profile, false, &mut out)
        .with_context(|| format!("cannot write {}", path.display()))?;
    out.flush()
        .with_context(|| format!("cannot write {}", path.display()))
}

fn write_profile(
    format: ConvertFormat,
    p: &Profile,
    by_thread: bool,
    out: &mut impl Write,
) -> eventpipe_insight::Result<()> {
    let grouping = if by_thread {
        Grouping::ByThread
    } else {
        Grouping::Merged
    };
    match format {
        ConvertFormat::Speedscope => eventpipe_insight::write_speedscope(p, out),
        ConvertFormat::Pprof => eventpipe_insight::write_pprof(p, out),
        ConvertFormat::Flamegraph => eventpipe_insight::write_flamegraph(p, grouping, out),
        ConvertFormat::Collapsed => eventpipe_insight::write_collapsed(p, grouping, out),
        ConvertFormat::Chrome => unreachable!("Chrome JSON is not a profile format"),
    }
}

fn profile_summary(built: &BuiltProfile) -> String {
    let p = &built.profile;
    format!(
        "{}: {} standing for {}, {}, {}",
        p.name,
        plural(p.samples.len(), "sample"),
        p.weight_text(p.total_weight()),
        plural(p.stacks.len(), "distinct stack"),
        plural(p.threads.len(), "thread")
    )
}

/// Prints why some frames could not be named, once per module.
fn report_notes(built: &BuiltProfile) {
    let mut err = std::io::stderr().lock();
    for note in &built.notes {
        let _ = writeln!(err, "note: {note}");
    }
}
