//! Captures that run a session to an end of their own and hand back what it meant: a .NET
//! heap dump ([`gcdump`]), a Rust program's live heap ([`heap`]), a counters session
//! ([`counters`]) and a moment's samples of every thread ([`stacks`]). Each is what `dotnet-gcdump` or `dotnet-counters` does, as a function a
//! program calls; `eptrace` and the agent are two such programs.
//!
//! A snapshot capture writes the session's stream into a file as it reads it (the file is
//! the snapshot: `eptrace`, `dotnet-gcdump convert` and PerfView read it back), reports how
//! far it is through a callback ([`Report`]), and can be cancelled through a flag.

pub mod counters;
pub mod gcdump;
pub mod heap;
pub mod stacks;

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use eventpipe_ipc::TraceStream;
use nettrace::{Event, TraceReader};

use crate::{with_causes, Target, TraceSession, STOP_GRACE};

/// What a long capture tells its watcher.
#[derive(Debug, Clone, Copy)]
pub enum Report<'a> {
    /// Something the user should know (a fallback, a warning).
    Note(&'a str),
    /// A status line, replaced by the next one.
    Progress(&'a str),
}

/// Why a capture gave nothing usable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaptureError {
    /// The target is not the kind of process the capture reads (a heap dump of a Rust
    /// program, a live heap of a .NET one); the message says what to use instead.
    #[error("process {pid} {what}")]
    WrongRuntime {
        /// The target.
        pid: u32,
        /// What it is, and what to use instead.
        what: &'static str,
    },
    /// Opening the target, or talking to it.
    #[error(transparent)]
    Client(#[from] crate::Error),
    /// The process exited while the capture ran.
    #[error("process {pid} exited while it was sampled")]
    Exited {
        /// The process.
        pid: u32,
    },
    /// The session asked for does not fit the runtime.
    #[error(transparent)]
    Request(#[from] crate::request::RequestError),
    /// The capture's session could not start.
    #[error("starting the {what} session")]
    Start {
        /// The session.
        what: &'static str,
        /// Why.
        #[source]
        source: crate::Error,
    },
    /// The session's stream is not a valid trace.
    #[error("reading {what}")]
    Read {
        /// The stream.
        what: &'static str,
        /// Why.
        #[source]
        source: nettrace::Error,
    },
    /// The snapshot file could not be written.
    #[error("writing the snapshot file")]
    Write(#[source] std::io::Error),
    /// A heap-dump event did not decode.
    #[error("reading the heap dump")]
    Dump(#[source] eventpipe_heap::gcdump::GcDumpError),
    /// The heap dump's events do not make a heap.
    #[error("reading {}", path.display())]
    Unreadable {
        /// The snapshot file.
        path: PathBuf,
        /// Why.
        #[source]
        source: eventpipe_heap::gcdump::GcDumpError,
    },
    /// The heap dump misses part of the heap.
    #[error(
        "{} is an incomplete heap dump:\n  - {}\n(--allow-partial shows what it has, marked \
         incomplete)",
        path.display(),
        problems.join("\n  - ")
    )]
    IncompleteDump {
        /// The snapshot file.
        path: PathBuf,
        /// What is missing.
        problems: Vec<String>,
    },
    /// The program tracks no heap.
    #[error("the program in {} tracks no heap, so its snapshot is empty; {}", path.display(), heap::WHAT_IT_NEEDS)]
    NoHeapTracked {
        /// The snapshot file.
        path: PathBuf,
    },
    /// The live-heap snapshot is not whole.
    #[error(
        "{} holds an incomplete heap snapshot ({samples} live allocations read{}{}); it is not \
         a smaller heap",
        path.display(),
        if *marker_missing { ", the end marker missing or its count different" } else { "" },
        if *lost > 0 { format!(", {lost} events lost") } else { String::new() }
    )]
    IncompleteHeap {
        /// The snapshot file.
        path: PathBuf,
        /// The live allocations read.
        samples: u64,
        /// The end marker is missing or disagrees with what arrived.
        marker_missing: bool,
        /// Events the trace lost.
        lost: u64,
    },
    /// The program sent no live-heap snapshot in time.
    #[error(
        "process {pid} sent no heap snapshot within {seconds:.0} s; {}",
        heap::WHAT_IT_NEEDS
    )]
    NoHeapSnapshot {
        /// The target.
        pid: u32,
        /// How long it had.
        seconds: f64,
    },
    /// The capture was cancelled before its snapshot was whole.
    #[error("cancelled before the snapshot was complete")]
    Cancelled,
    /// The capture was given up (cancelled, timed out) and what arrived is no snapshot.
    #[error("{why}")]
    GaveUp {
        /// Why it was given up.
        why: String,
        /// What was wrong with what arrived.
        #[source]
        source: Box<CaptureError>,
    },
    /// A counters sink failed (its own error, passed through).
    #[error(transparent)]
    Sink(Box<dyn std::error::Error + Send + Sync>),
}

/// A snapshot session's stream, read into the snapshot file on a thread of its own that
/// tells the capture loop how far it is through `shared`.
#[derive(Debug)]
pub(crate) struct SessionReader<S, T> {
    session: TraceSession<Result<T, CaptureError>>,
    /// What the reading thread shares with the capture loop.
    pub(crate) shared: Arc<S>,
}

/// How a snapshot session's stream is read into its file.
type ReadStream<S, T> = fn(TraceStream, File, &S) -> Result<T, CaptureError>;

impl<S: Default + Send + Sync + 'static, T: Send + 'static> SessionReader<S, T> {
    /// Starts reading `stream` into `file` with `read` on a thread named `name`.
    pub(crate) fn start(
        stream: TraceStream,
        file: File,
        name: &str,
        read: ReadStream<S, T>,
    ) -> Result<Self, CaptureError> {
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
    /// without its end: a process that never ends it cannot hold the capture.
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
                "note: StopTracing failed ({}); the stream was cut",
                with_causes(&e)
            )));
        }
    }

    /// Stops a session that will not finish on its own, and gives its stream
    /// [`STOP_GRACE`] to end before cutting it.
    pub(crate) fn give_up(&self, target: &mut Target, report: &mut dyn FnMut(Report<'_>)) {
        if let Err(e) = self.session.stop(target) {
            report(Report::Note(&format!(
                "note: StopTracing failed ({})",
                with_causes(&e)
            )));
        }
        self.session.wait_within(STOP_GRACE);
    }

    /// What the reading thread made of the stream.
    pub(crate) fn join(self) -> Result<T, CaptureError> {
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
    what: &'static str,
    mut each: impl FnMut(&Event<'_>) -> Result<(), CaptureError>,
) -> Result<u64, CaptureError> {
    let mut file = BufWriter::with_capacity(1 << 20, file);
    let mut tee = Tee {
        inner: stream,
        file: &mut file,
        error: None,
    };
    let unreadable = |source| CaptureError::Read { what, source };
    let mut reader = TraceReader::from_read(&mut tee).map_err(unreadable)?;
    while let Some(event) = reader.next_event().map_err(unreadable)? {
        each(&event)?;
    }
    let lost = reader.stats().lost_events;
    drop(reader);
    let _ = std::io::copy(&mut tee, &mut std::io::sink());
    if let Some(e) = tee.error.take() {
        return Err(CaptureError::Write(e));
    }
    file.flush().map_err(CaptureError::Write)?;
    Ok(lost)
}
