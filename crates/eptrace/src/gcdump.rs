//! `eptrace gcdump`: a .NET heap snapshot, collected as `dotnet-gcdump` collects it, and
//! read back: the heap per type with retained bytes, the difference of two snapshots, and
//! the retention view in the profile formats.
//!
//! Collecting: a short session flushes the runtime's type table (types already logged to
//! an earlier session are otherwise not named again); then the dump session enables
//! [`GCDUMP_KEYWORDS`] at Verbose, which makes the runtime induce a full blocking GC and
//! walk its heap. The session asks for Block mode (`CollectTracing6`, .NET 11+), so a large
//! heap is not dropped; a runtime that does not know the command gets `CollectTracing2` in
//! Drop mode with a large buffer, and the user is told. Once the GC's `GC/Stop` arrives the
//! session is stopped (rundown names the modules). The snapshot file is that session's
//! nettrace, which `dotnet-gcdump convert` and PerfView also read.

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use eventpipe_insight::gcdump::{
    diff_reports, heap_report, retention_profile, GcDump, GcDumpBuilder, GcDumpError, HeapReport,
    TypeDiff, DOTNET_RUNTIME, GCDUMP_KEYWORDS,
};
use eventpipe_insight::heap::dominators;
use eventpipe_ipc::command::CollectTracing;
use eventpipe_ipc::ProviderRequest;

use crate::numbers::{signed, thousands};
use crate::stream_file::{CollectConfig, ConvertConfig, DiffConfig, ReportConfig, SessionReader};
use eventpipe_client::{Target, TraceSession};

/// How long the type-table flush may take before the dump goes ahead anyway.
const TYPE_FLUSH_WAIT: Duration = Duration::from_secs(3);
/// A runtime that has not started the GC this long after the session began has no heap
/// dump to give (`dotnet-gcdump` waits as long).
const START_WAIT: Duration = Duration::from_secs(5);

pub(crate) fn do_collect(config: &CollectConfig<CaptureOptions>) -> Result<()> {
    crate::stream_file::do_collect(
        config,
        "gcdump",
        ".gcdump.nettrace",
        capture,
        Captured::summary,
    )
}

/// How a heap dump is taken.
#[derive(Debug, Clone)]
pub(crate) struct CaptureOptions {
    pub(crate) timeout: Duration,
    pub(crate) allow_partial: bool,
    /// The Drop-mode buffer when the runtime has no Block mode.
    pub(crate) buffer_mb: u32,
}

/// A heap dump taken and checked.
#[derive(Debug)]
pub(crate) struct Captured {
    pub(crate) dump: GcDump,
    /// Block mode: nothing could be dropped.
    pub(crate) lossless: bool,
}

impl Captured {
    /// What the dump holds, in one clause.
    pub(crate) fn summary(&self) -> String {
        let dump = &self.dump;
        format!(
            "{} objects, {} bytes, {} references, {} roots{}; {} mode{}",
            dump.objects,
            dump.bytes,
            dump.references,
            dump.roots,
            if dump.unresolved_references > 0 {
                format!(
                    ", {} references to memory outside the dump",
                    dump.unresolved_references
                )
            } else {
                String::new()
            },
            if self.lossless { "Block" } else { "Drop" },
            if self.lossless {
                ", lossless"
            } else {
                ", nothing was lost"
            },
        )
    }
}

/// Takes a heap dump of `target` into `file` (named `path` in messages), telling `report`
/// what happens; `cancel` ends it early (an error: a dump cut short is no dump).
pub(crate) fn capture(
    target: &mut Target,
    file: File,
    path: &Path,
    options: &CaptureOptions,
    cancel: &AtomicBool,
    report: &mut dyn FnMut(crate::progress::Report<'_>),
) -> Result<Captured> {
    use crate::progress::Report;
    let began = Instant::now();
    let runtime = eventpipe_client::Runtime::of(&target.process_info());
    if runtime.is_rust() {
        bail!(
            "process {} is a Rust program: gcdump walks a .NET runtime's GC heap; for a Rust \
             program's live allocations use `eptrace heap`",
            target.pid()
        );
    }
    report(Report::Note("Flushing the runtime's type table..."));
    flush_type_table(target)?;

    let provider = ProviderRequest {
        keywords: GCDUMP_KEYWORDS,
        level: 5,
        name: DOTNET_RUNTIME.to_owned(),
        arguments: String::new(),
        filter: None,
    };
    let block = CollectTracing {
        buffering_mode: 1,
        stackwalk: false,
        ..CollectTracing::new(6, vec![provider.clone()])
    };
    let (stream, lossless) = match target.collect(&block) {
        Ok(stream) => (stream, true),
        Err(e) if e.refusal() == Some(eventpipe_ipc::ServerError::UNKNOWN_COMMAND) => {
            report(Report::Note(&format!(
                "note: this runtime has no Block mode (CollectTracing6, .NET 11+): the dump \
                 goes through a {} MB Drop-mode buffer, and is reported incomplete if the \
                 runtime drops any of it",
                options.buffer_mb
            )));
            let drop = CollectTracing {
                circular_buffer_mb: options.buffer_mb,
                ..CollectTracing::new(2, vec![provider])
            };
            (
                target
                    .collect(&drop)
                    .context("starting the heap dump session")?,
                false,
            )
        }
        Err(e) => return Err(anyhow::Error::new(e).context("starting the heap dump session")),
    };
    let reader = SessionReader::start(stream, file, "eptrace-gcdump", read_dump)?;
    let shared = &reader.shared;
    let mut stopped: Option<Instant> = None;
    let mut last_line = Instant::now() - Duration::from_secs(1);
    let outcome = loop {
        if reader.is_finished() {
            break None;
        }
        if cancel.load(Ordering::Relaxed) {
            break Some("cancelled".to_owned());
        }
        match stopped {
            Some(at) => reader.cut_after_grace(at),
            None if shared.finished.load(Ordering::Acquire) => {
                stopped = Some(Instant::now());
                reader.stop_whole(target, report);
            }
            None => {}
        }
        let waited = began.elapsed();
        if stopped.is_none()
            && !shared.started.load(Ordering::Acquire)
            && waited > START_WAIT + TYPE_FLUSH_WAIT
        {
            break Some(format!(
                "no heap dump began within {} s",
                (START_WAIT + TYPE_FLUSH_WAIT).as_secs()
            ));
        }
        if stopped.is_none() && waited > options.timeout {
            break Some(format!(
                "the heap dump did not finish within {:.0} s (--timeout)",
                options.timeout.as_secs_f64()
            ));
        }
        if last_line.elapsed() >= Duration::from_millis(250) {
            last_line = Instant::now();
            report(Report::Progress(&format!(
                "{:5.1}s  {} objects, {} references, {} types, {:.1} MB received",
                waited.as_secs_f64(),
                shared.objects.load(Ordering::Relaxed),
                shared.references.load(Ordering::Relaxed),
                shared.types.load(Ordering::Relaxed),
                shared.bytes.load(Ordering::Relaxed) as f64 / 1e6
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if let Some(why) = &outcome {
        report(Report::Note(&format!("{why}: stopping the session")));
        reader.give_up(target, report);
    }
    let read = reader.join()?;
    let dump = match (
        accept(
            read.builder.finish(read.lost),
            options.allow_partial,
            path,
            report,
        ),
        outcome,
    ) {
        (Err(e), Some(why)) => return Err(e.context(why)),
        (dump, _) => dump?,
    };
    Ok(Captured { dump, lossless })
}

/// What the reader thread shares with the progress line.
#[derive(Debug, Default)]
struct Shared {
    started: AtomicBool,
    /// Release: set after the builder saw the dump's `GC/Stop`.
    finished: AtomicBool,
    objects: AtomicU64,
    references: AtomicU64,
    types: AtomicU64,
    bytes: AtomicU64,
}

struct ReadDump {
    builder: GcDumpBuilder,
    lost: u64,
}

/// Tees the stream into the file and the dump builder until the stream ends.
fn read_dump(stream: eventpipe_ipc::TraceStream, file: File, shared: &Shared) -> Result<ReadDump> {
    let mut builder = GcDumpBuilder::new();
    let mut seen = 0u64;
    let lost = crate::stream_file::read_into_file(stream, file, "the heap dump stream", |event| {
        builder.observe(event).context("reading the heap dump")?;
        seen += 1;
        if seen % 64 == 0 || builder.is_finished() {
            let p = builder.progress();
            shared.started.store(p.started, Ordering::Release);
            shared.objects.store(p.objects, Ordering::Relaxed);
            shared.references.store(p.references, Ordering::Relaxed);
            shared.types.store(p.types, Ordering::Relaxed);
            shared.bytes.store(p.bytes, Ordering::Relaxed);
            shared.finished.store(p.finished, Ordering::Release);
        }
        Ok(())
    })?;
    Ok(ReadDump { builder, lost })
}

/// A short session of the sample profiler: starting and stopping a session makes the
/// runtime forget which types it has logged, so the dump names them all.
fn flush_type_table(target: &mut Target) -> Result<()> {
    let request = CollectTracing {
        rundown_keyword: 0,
        ..CollectTracing::new(
            2,
            vec![ProviderRequest {
                keywords: 0,
                level: 4,
                name: "Microsoft-DotNETCore-SampleProfiler".to_owned(),
                arguments: String::new(),
                filter: None,
            }],
        )
    };
    let stream = target
        .collect(&request)
        .context("starting the type-table flush session")?;
    // The first bytes say the session runs; then stop it and read to its end.
    let (started, running) = std::sync::mpsc::channel();
    let flush = TraceSession::spawn(stream, "eptrace-type-flush", move |mut stream| {
        let mut first = [0u8; 1];
        let _ = stream.read(&mut first);
        let _ = started.send(());
        let _ = std::io::copy(&mut stream, &mut std::io::sink());
    })?;
    let _ = running.recv_timeout(TYPE_FLUSH_WAIT);
    let _ = flush.stop(target);
    flush.wait_within(TYPE_FLUSH_WAIT);
    let _ = flush.join();
    Ok(())
}

/// A dump, or why it is not whole: an incomplete dump is an error unless the user allowed
/// a partial one, and then every problem is reported first.
fn accept(
    dump: std::result::Result<GcDump, GcDumpError>,
    allow_partial: bool,
    path: &Path,
    report: &mut dyn FnMut(crate::progress::Report<'_>),
) -> Result<GcDump> {
    match dump {
        Ok(dump) => Ok(dump),
        Err(GcDumpError::Incomplete { problems, partial }) if allow_partial => {
            report(crate::progress::Report::Note(&format!(
                "warning: {} is an INCOMPLETE heap dump; what follows is part of the heap, \
                 not a smaller heap:\n  - {}",
                path.display(),
                problems.join("\n  - ")
            )));
            Ok(*partial)
        }
        Err(GcDumpError::Incomplete { problems, .. }) => bail!(
            "{} is an incomplete heap dump:\n  - {}\n(--allow-partial shows what it has, marked \
             incomplete)",
            path.display(),
            problems.join("\n  - ")
        ),
        Err(e) => Err(anyhow::Error::new(e).context(format!("reading {}", path.display()))),
    }
}

/// Reads a snapshot file into a dump.
fn load(path: &Path, allow_partial: bool) -> Result<GcDump> {
    let mut builder = GcDumpBuilder::new();
    let lost = crate::stream_file::read_file(path, |event| {
        builder
            .observe(event)
            .with_context(|| format!("reading the heap dump in {}", path.display()))?;
        Ok(())
    })?;
    let interactive = std::io::stderr().is_terminal();
    accept(builder.finish(lost), allow_partial, path, &mut |report| {
        crate::progress::say(report, interactive, &mut false)
    })
}

fn report_of(dump: &GcDump) -> HeapReport {
    let doms = dominators(&dump.graph);
    heap_report(&dump.graph, &doms, dump.first_object, dump.references)
}

pub(crate) fn do_report(config: &ReportConfig) -> Result<()> {
    let dump = load(&config.file, config.allow_partial)?;
    let report = report_of(&dump);
    if config.json {
        return crate::print_json(&report);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{:>15}  GC Heap bytes", thousands(report.bytes))?;
    writeln!(out, "{:>15}  GC Heap objects", thousands(report.objects))?;
    writeln!(
        out,
        "{:>15}  Total references",
        thousands(report.references)
    )?;
    if report.unreachable > 0 {
        writeln!(
            out,
            "{:>15}  Objects no root reaches",
            thousands(report.unreachable)
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:>15}  {:>8}  {:>15}  Type",
        "Object Bytes", "Count", "Retained Bytes"
    )?;
    for row in report.types.iter().take(config.top) {
        writeln!(
            out,
            "{:>15}  {:>8}  {:>15}  {}",
            thousands(row.bytes),
            thousands(row.count),
            thousands(row.retained),
            row.name
        )?;
    }
    if report.types.len() > config.top {
        writeln!(
            out,
            "  ... and {} more types (--top N)",
            report.types.len() - config.top
        )?;
    }
    Ok(())
}

pub(crate) fn do_diff(config: &DiffConfig) -> Result<()> {
    let old = report_of(&load(&config.old, config.allow_partial)?);
    let new = report_of(&load(&config.new, config.allow_partial)?);
    let rows = diff_reports(&old, &new);
    if config.json {
        return crate::print_json(&rows);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "GC heap: {} -> {} bytes ({}), {} -> {} objects",
        thousands(old.bytes),
        thousands(new.bytes),
        signed(i128::from(new.bytes) - i128::from(old.bytes)),
        thousands(old.objects),
        thousands(new.objects)
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:>15}  {:>15}  {:>10}  Type (largest growth in retained bytes first)",
        "Retained Δ", "Bytes Δ", "Count Δ"
    )?;
    // A diff lists what changed; the JSON keeps every type of either heap.
    let (changed, unchanged): (Vec<&TypeDiff>, Vec<&TypeDiff>) =
        rows.iter().partition(|row| !row.is_unchanged());
    for row in changed.iter().take(config.top) {
        writeln!(
            out,
            "{:>15}  {:>15}  {:>10}  {}",
            signed(row.retained_delta()),
            signed(row.bytes_delta()),
            signed(row.count_delta()),
            row.name
        )?;
    }
    crate::stream_file::write_diff_tail(
        &mut out,
        changed.len(),
        unchanged.len(),
        config.top,
        "type",
    )?;
    Ok(())
}

pub(crate) fn do_convert(config: &ConvertConfig) -> Result<()> {
    let dump = load(&config.file, config.allow_partial)?;
    let doms = dominators(&dump.graph);
    let profile = retention_profile(&dump.graph, &doms, dump.first_object);
    crate::stream_file::write_profiles(
        &config.file,
        &profile,
        &config.formats,
        config.output.as_ref(),
        "retention view",
    )
}
