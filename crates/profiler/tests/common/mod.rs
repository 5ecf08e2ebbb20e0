//! What the profiler's integration tests share: a session on the allocation provider, and
//! the trace read back as plain values.
#![allow(dead_code)] // each test binary uses part of it

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use eventpipe::{BufferingMode, Output, ProviderConfig, Session, SessionConfig};
use eventpipe_insight::async_trace::{read_async_trace, AsyncTrace, Context};
use nettrace::TraceReader;

/// One event of the profiler's provider, read back.
#[derive(Debug, Clone)]
pub(crate) struct Read {
    pub(crate) name: String,
    pub(crate) fields: HashMap<String, u64>,
    pub(crate) stack: Vec<u64>,
    /// The thread the event is about (the allocating thread, for samples).
    pub(crate) thread: u64,
    /// The thread that wrote the event (the emitter, for samples).
    pub(crate) capture: u64,
}

impl Read {
    pub(crate) fn get(&self, field: &str) -> u64 {
        self.fields[field]
    }
}

/// A file session on `EventPipeRs-Allocations` with `filter` as its filter arguments, Block
/// mode (no event lost for want of buffers).
pub(crate) fn start(tag: &str, filter: &str) -> (Session, PathBuf) {
    let path = std::env::temp_dir().join(format!(
        "eventpipe-profiler-{tag}-{}.nettrace",
        std::process::id()
    ));
    let spec = format!("EventPipeRs-Allocations:0:5:{filter}");
    let session = Session::start(
        SessionConfig::new(
            vec![ProviderConfig::parse(&spec).unwrap()],
            Output::File(path.clone()),
        )
        .mode(BufferingMode::Block)
        .buffer_budget(256 << 20)
        .rundown(false),
    )
    .unwrap();
    (session, path)
}

/// Flushes the profiler, stops the session and reads its events back (the file is removed).
pub(crate) fn stop_and_read(session: Session, path: PathBuf) -> Vec<Read> {
    assert!(eventpipe_profiler::alloc::flush(Duration::from_secs(30)));
    let stats = session.stop().unwrap();
    assert_eq!(stats.events_dropped, 0);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    read(&bytes)
}

pub(crate) fn read(bytes: &[u8]) -> Vec<Read> {
    let mut reader = TraceReader::from_slice(bytes).unwrap();
    let mut out = Vec::new();
    while let Some(e) = reader.next_event().unwrap() {
        if e.metadata.provider != "EventPipeRs-Allocations" {
            continue;
        }
        let fields = e
            .decode_payload()
            .unwrap()
            .into_iter()
            .map(|(n, v)| (n.to_owned(), v.as_u64().unwrap()))
            .collect();
        out.push(Read {
            name: e.metadata.event_name.clone(),
            fields,
            stack: e.stack_ips().collect(),
            thread: e.thread_id(),
            capture: e.capture_thread_id(),
        });
    }
    out
}

/// The calling thread's OS id.
pub(crate) fn tid() -> u64 {
    // SAFETY: gettid has no preconditions.
    (unsafe { libc::gettid() }) as u64
}

/// The function names at `ip` (inlined frames included), resolved in this process.
pub(crate) fn names(ip: u64) -> Vec<String> {
    let mut out = Vec::new();
    backtrace::resolve(
        (ip.saturating_sub(1)) as usize as *mut std::ffi::c_void,
        |s| {
            if let Some(n) = s.name() {
                out.push(n.to_string());
            }
        },
    );
    out
}

/// Whether some frame of `stack` resolves to a function whose name contains `needle`.
pub(crate) fn stack_mentions(stack: &[u64], needle: &str) -> bool {
    stack
        .iter()
        .any(|&ip| names(ip).iter().any(|n| n.contains(needle)))
}

/// Aborts the process if `f` has not returned within `limit` (a deadlock would otherwise
/// hang the test run).
pub(crate) fn with_watchdog<R>(limit: Duration, what: &str, f: impl FnOnce() -> R) -> R {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    let what = what.to_owned();
    std::thread::spawn(move || {
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            if flag.load(std::sync::atomic::Ordering::Acquire) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("watchdog: {what} did not finish within {limit:?} (deadlock?)");
        std::process::abort();
    });
    let r = f();
    done.store(true, std::sync::atomic::Ordering::Release);
    r
}

/// The async-profiler records of the trace file at `path` (the file is removed).
pub(crate) fn read_async_file(path: &Path) -> AsyncTrace {
    let bytes = std::fs::read(path).unwrap();
    std::fs::remove_file(path).ok();
    read_async_trace(&mut TraceReader::from_slice(&bytes).unwrap())
        .unwrap()
        .expect("async-profiler events in the trace")
}

/// `read_async_file`, which must find nothing amiss.
pub(crate) fn read_clean_async_file(path: &Path) -> AsyncTrace {
    let trace = read_async_file(path);
    assert!(trace.diagnostics.is_clean(), "{:?}", trace.diagnostics);
    trace
}

/// `trace`'s contexts whose future's name ends with `suffix`.
pub(crate) fn contexts_named<'a>(trace: &'a AsyncTrace, suffix: &str) -> Vec<&'a Context> {
    trace
        .contexts
        .values()
        .filter(|c| {
            c.frame
                .is_some_and(|f| trace.frame_name(f).ends_with(suffix))
        })
        .collect()
}

/// Polling futures by hand, for the async profiler's tests: a known number of polls, on this
/// thread, with no runtime in between.
pub(crate) mod poll {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    /// Pending once, then ready: one suspension.
    pub(crate) struct YieldOnce(bool);

    impl Future for YieldOnce {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            if std::mem::replace(&mut self.0, true) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    pub(crate) fn yield_once() -> YieldOnce {
        YieldOnce(false)
    }

    /// Polls `f` to completion on this thread; returns the output and the number of polls.
    pub(crate) fn block_on<F: Future>(f: F) -> (F::Output, u32) {
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        let mut polls = 0;
        loop {
            polls += 1;
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return (v, polls);
            }
        }
    }
}
