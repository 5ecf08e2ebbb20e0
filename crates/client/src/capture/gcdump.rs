//! A .NET heap dump, taken as `dotnet-gcdump collect` takes it.
//!
//! A short session first flushes the runtime's type table (types already logged to an
//! earlier session are otherwise not named again); then the dump session enables
//! [`GCDUMP_KEYWORDS`] at Verbose, which makes the runtime induce a full blocking GC and
//! walk its heap. The session asks for Block mode (`CollectTracing6`, .NET 11+), so a large
//! heap is not dropped; a runtime that does not know the command gets `CollectTracing2` in
//! Drop mode with a large buffer, and the caller is told. Once the GC's `GC/Stop` arrives
//! the session is stopped (rundown names the modules). The snapshot file is that session's
//! nettrace.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use eventpipe_heap::gcdump::{GcDump, GcDumpBuilder, GcDumpError, DOTNET_RUNTIME, GCDUMP_KEYWORDS};
use eventpipe_ipc::command::CollectTracing;
use eventpipe_ipc::ProviderRequest;

use super::{read_into_file, CaptureError, Report, SessionReader};
use crate::{Target, TraceSession};

/// How long the type-table flush may take before the dump goes ahead anyway.
const TYPE_FLUSH_WAIT: Duration = Duration::from_secs(3);
/// A runtime that has not started the GC this long after the session began has no heap
/// dump to give (`dotnet-gcdump` waits as long).
const START_WAIT: Duration = Duration::from_secs(5);

/// How a heap dump is taken.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// How long the dump may take, from the session's start to the GC's end.
    pub timeout: Duration,
    /// Hand back a dump that misses part of the heap (each problem reported first), marked
    /// incomplete, instead of failing.
    pub allow_partial: bool,
    /// The Drop-mode buffer when the runtime has no Block mode.
    pub buffer_mb: u32,
}

impl Default for CaptureOptions {
    /// 30 s (`dotnet-gcdump`'s), whole dumps only, a 1 GB Drop-mode buffer.
    fn default() -> Self {
        CaptureOptions {
            timeout: Duration::from_secs(30),
            allow_partial: false,
            buffer_mb: 1024,
        }
    }
}

/// A heap dump taken and checked.
#[derive(Debug)]
pub struct Captured {
    /// The heap graph.
    pub dump: GcDump,
    /// Block mode: nothing could be dropped.
    pub lossless: bool,
}

impl Captured {
    /// What the dump holds, in one clause.
    pub fn summary(&self) -> String {
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
///
/// # Errors
/// The target is not .NET, a session could not start, the dump did not begin or finish in
/// time, or it is incomplete (and `options.allow_partial` is off).
pub fn capture(
    target: &mut Target,
    file: File,
    path: &Path,
    options: &CaptureOptions,
    cancel: &AtomicBool,
    report: &mut dyn FnMut(Report<'_>),
) -> Result<Captured, CaptureError> {
    let began = Instant::now();
    let runtime = crate::Runtime::of(&target.process_info());
    if runtime.is_rust() {
        return Err(CaptureError::WrongRuntime {
            pid: target.pid(),
            what: "is a Rust program: gcdump walks a .NET runtime's GC heap; for a Rust \
                   program's live allocations use `eptrace heap`",
        });
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
            let stream = target
                .collect(&drop)
                .map_err(|source| CaptureError::Start {
                    what: "heap dump",
                    source,
                })?;
            (stream, false)
        }
        Err(source) => {
            return Err(CaptureError::Start {
                what: "heap dump",
                source,
            })
        }
    };
    let reader = SessionReader::start(stream, file, "gcdump-reader", read_dump)?;
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
        (Err(e), Some(why)) => {
            return Err(CaptureError::GaveUp {
                why,
                source: Box::new(e),
            })
        }
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
fn read_dump(
    stream: eventpipe_ipc::TraceStream,
    file: File,
    shared: &Shared,
) -> Result<ReadDump, CaptureError> {
    let mut builder = GcDumpBuilder::new();
    let mut seen = 0u64;
    let lost = read_into_file(stream, file, "the heap dump stream", |event| {
        builder.observe(event).map_err(CaptureError::Dump)?;
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
fn flush_type_table(target: &mut Target) -> Result<(), CaptureError> {
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
        .map_err(|source| CaptureError::Start {
            what: "type-table flush",
            source,
        })?;
    // The first bytes say the session runs; then stop it and read to its end.
    let (started, running) = std::sync::mpsc::channel();
    let flush = TraceSession::spawn(stream, "type-table-flush", move |mut stream| {
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

/// A dump, or why it is not whole: an incomplete dump is an error unless the caller allows
/// a partial one, and then every problem is reported first. `path` names the snapshot.
///
/// # Errors
/// [`CaptureError::IncompleteDump`] when part of the heap is missing and a partial dump is
/// not allowed; [`CaptureError::Dump`] when the dump's events were malformed.
pub fn accept(
    dump: std::result::Result<GcDump, GcDumpError>,
    allow_partial: bool,
    path: &Path,
    report: &mut dyn FnMut(Report<'_>),
) -> Result<GcDump, CaptureError> {
    match dump {
        Ok(dump) => Ok(dump),
        Err(GcDumpError::Incomplete { problems, partial }) if allow_partial => {
            report(Report::Note(&format!(
                "warning: {} is an INCOMPLETE heap dump; what follows is part of the heap, \
                 not a smaller heap:\n  - {}",
                path.display(),
                problems.join("\n  - ")
            )));
            Ok(*partial)
        }
        Err(GcDumpError::Incomplete { problems, .. }) => Err(CaptureError::IncompleteDump {
            path: path.to_owned(),
            problems,
        }),
        Err(source) => Err(CaptureError::Unreadable {
            path: path.to_owned(),
            source,
        }),
    }
}
