//! What the agent does to a target: a trace streamed to a sink for a while, a heap
//! snapshot into a file, a standing counters session feeding `/metrics` and the rules.
//! All of it is blocking IPC, run on threads of its own (tokio's blocking pool for
//! requests), never on the HTTP server's workers.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use eventpipe_counters::CounterValue;

use super::processes::Process;
use super::processes::RuntimeKind;
use eventpipe_client::capture::counters::{
    run, CounterSpec, RuntimeNews, SessionConfig, SessionEnd, Sink, SinkResult,
};
use eventpipe_client::capture::{gcdump, heap, Report};
use eventpipe_client::request::{Preset, TraceRequest};
use eventpipe_client::{CollectTracing, Target, TargetSpec, STOP_GRACE};

/// How soon a running session's stopper sees a cancel.
const CANCEL_CHECK: Duration = Duration::from_millis(500);

/// What a trace asks for.
#[derive(Debug, Clone)]
pub(crate) struct TraceAsk {
    pub(crate) profile: Vec<Preset>,
    pub(crate) providers: Vec<String>,
    pub(crate) duration: Duration,
    pub(crate) buffer_mb: u32,
    pub(crate) rundown: bool,
}

/// The session request for `ask` on `process`, built as `eptrace collect` builds it.
pub(crate) fn trace_request(process: &Process, ask: &TraceAsk) -> Result<CollectTracing> {
    let is_rust = process.kind == Some(RuntimeKind::Rust);
    let request = TraceRequest {
        presets: ask.profile.clone(),
        providers: ask.providers.clone(),
        buffer_mb: ask.buffer_mb,
        rundown: ask.rundown,
        ..TraceRequest::default()
    };
    let providers = request.providers(is_rust)?;
    Ok(request.collect_tracing(is_rust, providers)?)
}

/// How a trace ended.
#[derive(Debug)]
pub(crate) struct TraceEnd {
    pub(crate) bytes: u64,
    /// The stream ended after StopTracing (or with the process): the trace is whole.
    pub(crate) whole: bool,
    /// It was stopped before its duration (cancelled, or the agent stopping).
    pub(crate) early: bool,
}

/// Runs a trace session on `process`: `started` hears whether it began; then the stream's
/// bytes go to `out` until the duration passes or `cancel` is raised (StopTracing, and
/// the stream read to its end, so the trace is whole), or `out` fails (the reader went
/// away: the session is stopped and the connection cut).
pub(crate) fn run_trace(
    process: &Process,
    request: &CollectTracing,
    duration: Duration,
    cancel: &AtomicBool,
    started: impl FnOnce(std::result::Result<(), String>),
    out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
) -> Result<TraceEnd> {
    let opened = Target::open(&TargetSpec::Pid(process.pid))
        .and_then(|mut target| Ok((target.collect(request)?, target)));
    let (mut stream, mut target) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            let message = format!(
                "starting the session in {} ({}): {}",
                process.name,
                process.pid,
                eventpipe_client::with_causes(&e)
            );
            started(Err(message.clone()));
            anyhow::bail!(message);
        }
    };
    started(Ok(()));
    let session = stream.session_id();
    let closer = stream.closer()?;
    let finished = Arc::new(AtomicBool::new(false));
    let reader_gone = Arc::new(AtomicBool::new(false));
    let early = Arc::new(AtomicBool::new(false));
    std::thread::scope(|scope| -> Result<TraceEnd> {
        // The stopper: at the deadline (or on cancel, or when the reader goes) it stops the
        // session, then gives the stream its grace before cutting the connection. It
        // sleeps parked: the reader unparks it when the stream ends (or the reader goes),
        // and a cancel is seen within a CANCEL_CHECK; a standing session costs a few
        // wakeups a second, not fifty.
        let stopper = {
            let finished = Arc::clone(&finished);
            let reader_gone = Arc::clone(&reader_gone);
            let early = Arc::clone(&early);
            let target = &mut target;
            let closer = &closer;
            scope.spawn(move || {
                let deadline = Instant::now() + duration;
                while !finished.load(Ordering::Acquire) {
                    let gone = reader_gone.load(Ordering::Acquire);
                    let cancelled = cancel.load(Ordering::Relaxed);
                    if Instant::now() >= deadline || cancelled || gone {
                        early.store(cancelled && !gone, Ordering::Relaxed);
                        let _ = target.stop(session);
                        if gone {
                            closer.close();
                            return;
                        }
                        let cut = Instant::now() + STOP_GRACE;
                        while !finished.load(Ordering::Acquire) && Instant::now() < cut {
                            std::thread::park_timeout(CANCEL_CHECK);
                        }
                        closer.close();
                        return;
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    std::thread::park_timeout(left.min(CANCEL_CHECK));
                }
            })
        };
        let mut buf = vec![0u8; 64 * 1024];
        let mut bytes = 0u64;
        let mut whole = true;
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    bytes += n as u64;
                    if out(&buf[..n]).is_err() {
                        reader_gone.store(true, Ordering::Release);
                        stopper.thread().unpark();
                        whole = false;
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    whole = false;
                    break;
                }
            }
        }
        finished.store(true, Ordering::Release);
        stopper.thread().unpark();
        let _ = stopper.join();
        Ok(TraceEnd {
            bytes,
            whole,
            early: early.load(Ordering::Relaxed),
        })
    })
}

/// Which heap snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Snapshot {
    /// A .NET GC heap dump.
    Gcdump,
    /// A Rust program's live heap.
    Heap,
}

impl Snapshot {
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Snapshot::Gcdump => "gcdump",
            Snapshot::Heap => "heap",
        }
    }

    pub(crate) fn extension(self) -> &'static str {
        match self {
            Snapshot::Gcdump => ".gcdump.nettrace",
            Snapshot::Heap => ".heap.nettrace",
        }
    }

    /// Why `process` cannot give this snapshot, if it cannot.
    pub(crate) fn unfit(self, process: &Process) -> Option<String> {
        match (self, process.kind) {
            (Snapshot::Gcdump, Some(RuntimeKind::Rust)) => Some(format!(
                "{} ({}) is a Rust program: a gcdump walks a .NET runtime's GC heap; ask /heap",
                process.name, process.pid
            )),
            (Snapshot::Heap, Some(RuntimeKind::Dotnet)) => Some(format!(
                "{} ({}) is a .NET process: /heap reads a Rust program's allocation profiler; \
                 ask /gcdump",
                process.name, process.pid
            )),
            _ => None,
        }
    }
}

/// Takes `which` snapshot of `process` into `file`; returns what it holds, in one clause.
pub(crate) fn take_snapshot(
    which: Snapshot,
    process: &Process,
    file: File,
    path: &Path,
    cancel: &AtomicBool,
    note: &mut dyn FnMut(&str),
) -> Result<String> {
    let mut target = Target::open(&TargetSpec::Pid(process.pid))?;
    let mut report = |r: Report<'_>| {
        if let Report::Note(text) = r {
            note(text);
        }
    };
    match which {
        Snapshot::Gcdump => {
            let options = gcdump::CaptureOptions {
                timeout: Duration::from_secs(120),
                allow_partial: false,
                buffer_mb: 1024,
            };
            let captured = gcdump::capture(&mut target, file, path, &options, cancel, &mut report)?;
            Ok(captured.summary())
        }
        Snapshot::Heap => {
            let options = heap::CaptureOptions {
                timeout: Duration::from_secs(60),
                buffer_mb: 64,
            };
            let heap = heap::capture(&mut target, file, path, &options, cancel, &mut report)?;
            Ok(heap::summary(&heap))
        }
    }
}

/// A moment's samples of every thread of `process` (what `eptrace stack` reads). A process
/// that stops answering blocks this until the protocol's timeouts: callers that must
/// answer sooner wait on it with their own.
pub(crate) fn sample_threads(
    process: &Process,
) -> Result<eventpipe_client::capture::stacks::Sampled> {
    use eventpipe_client::capture::stacks::{sample, WINDOW};
    sample(&TargetSpec::Pid(process.pid), WINDOW)
        .map_err(|e| anyhow::anyhow!(eventpipe_client::with_causes(&e)))
}

/// Each thread's latest stack in `sampled` (symbolized here: this side's work, not the
/// process's).
pub(crate) fn thread_stacks(
    sampled: eventpipe_client::capture::stacks::Sampled,
) -> Result<eventpipe_insight::ThreadStacks> {
    Ok(eventpipe_insight::ThreadStacks::read(
        sampled.pid,
        sampled.name,
        sampled.runtime.to_string(),
        sampled.runtime.is_rust(),
        &sampled.trace,
        Some(sampled.asked_to_stop),
    )?)
}

/// What a standing counters session does with what it hears.
pub(crate) trait CounterListener: Send {
    /// The session runs.
    fn started(&mut self) {}
    fn value(&mut self, value: CounterValue, at: SystemTime);
    /// A .NET target's runtime news (with `runtime_events`).
    fn runtime(&mut self, news: RuntimeNews, at: SystemTime);
    fn problem(&mut self, problem: &str);
}

struct ListenerSink<'a> {
    listener: &'a mut dyn CounterListener,
    stop: &'a AtomicBool,
}

impl Sink for ListenerSink<'_> {
    fn started(&mut self) -> SinkResult<()> {
        self.listener.started();
        Ok(())
    }
    fn value(&mut self, value: CounterValue, at: SystemTime) -> SinkResult<()> {
        self.listener.value(value, at);
        Ok(())
    }
    fn runtime(&mut self, news: RuntimeNews, at: SystemTime) -> SinkResult<()> {
        self.listener.runtime(news, at);
        Ok(())
    }
    fn problem(&mut self, problem: String) -> SinkResult<()> {
        self.listener.problem(&problem);
        Ok(())
    }
    fn tick(&mut self) -> SinkResult<bool> {
        Ok(!self.stop.load(Ordering::Relaxed))
    }
    fn tick_interval(&self) -> Duration {
        CANCEL_CHECK
    }
    fn ended(&mut self, why: &SessionEnd) -> SinkResult<()> {
        // An exited target is the scanner's news ("process N is gone"), not a problem.
        if !matches!(why, SessionEnd::Exited { .. }) {
            self.listener.problem(&why.to_string());
        }
        Ok(())
    }
}

/// Watches `process`'s counters (`specs`, every `interval`; a .NET runtime's events too
/// with `runtime_events`) until `stop` is raised or the process ends its session.
pub(crate) fn watch_counters(
    process: &Process,
    specs: Vec<CounterSpec>,
    interval: f64,
    runtime_events: bool,
    stop: &AtomicBool,
    listener: &mut dyn CounterListener,
) -> Result<()> {
    let config = SessionConfig {
        target: TargetSpec::Pid(process.pid),
        counters: Some(specs),
        refresh_sec: interval,
        duration: None,
        max_time_series: 1000,
        max_histograms: 20,
        runtime_events,
    };
    let mut sink = ListenerSink { listener, stop };
    run(&config, &mut sink, stop)
        .with_context(|| format!("counters of {} ({})", process.name, process.pid))
}
