//! A short session that samples every thread of a process once, for "what is each thread
//! doing now" (`eptrace stack`, the agent's `/stacks`): a Rust program's CPU sampler with
//! off-CPU stacks (a running thread's stack from its CPU samples, a waiting thread's from
//! the probe the collector sends it), or a .NET runtime's sample profiler (every managed
//! thread, as `dotnet-stack` reads it), with the rundown that names the frames. What it
//! brings back is the session's trace; `eventpipe_insight::thread_stacks` reads each
//! thread's latest stack from it.

use std::io::Read;
use std::time::Duration;

use super::CaptureError;
use crate::request::{Preset, TraceRequest};
use crate::{Runtime, Target, TargetSpec, TraceSession, STOP_GRACE};

/// How long a process is sampled: long enough for the collector to probe every waiting
/// thread (two a visit, a visit every 10 ms, for dozens of threads) and for the .NET sample
/// profiler's walks.
pub const WINDOW: Duration = Duration::from_millis(400);

/// The async profiler, asked to wake every pending task once as the session starts.
const WAKE_PENDING_TASKS: &str = "EventPipeRs-AsyncProfiler:0:Informational:WakePending=1";

/// A sampling session's trace, and whose it is.
#[derive(Debug)]
pub struct Sampled {
    /// The process.
    pub pid: u32,
    /// Its name.
    pub name: String,
    /// Its runtime.
    pub runtime: Runtime,
    /// The session's trace.
    pub trace: Vec<u8>,
    /// When the session was asked to stop: the moment the picture is of. (A .NET runtime
    /// ends a session only once a GC in progress is over, so the trace runs on past it.)
    pub asked_to_stop: std::time::SystemTime,
}

/// Samples the process for `window`.
///
/// # Errors
/// The process cannot be opened, refuses the session, or exits before it ends. A process that stops answering
/// blocks this call until the protocol's own timeouts: callers that must answer sooner run
/// it on a thread of their own.
pub fn sample(spec: &TargetSpec, window: Duration) -> Result<Sampled, CaptureError> {
    let mut target = Target::open(spec)?;
    let runtime = Runtime::of(&target.process_info());
    let is_rust = runtime.is_rust();
    let request = TraceRequest {
        presets: vec![if is_rust {
            Preset::OffCpu
        } else {
            Preset::CpuSampling
        }],
        providers: if is_rust {
            vec![WAKE_PENDING_TASKS.to_owned()]
        } else {
            Vec::new()
        },
        rundown: true,
        buffer_mb: 64,
        ..TraceRequest::default()
    };
    let providers = request.providers(is_rust)?;
    let tracing = request.collect_tracing(is_rust, providers)?;
    let stream = target
        .collect(&tracing)
        .map_err(|source| CaptureError::Start {
            what: "stack sampling",
            source,
        })?;
    let session = TraceSession::spawn(stream, "eventpipe-stacks-reader", |mut stream| {
        let mut bytes = Vec::new();
        // A stream cut short still holds the samples it brought.
        let _ = stream.read_to_end(&mut bytes);
        bytes
    })?;
    std::thread::sleep(window);
    let asked_to_stop = std::time::SystemTime::now();
    let _ = session.stop(&mut target);
    session.wait_within(STOP_GRACE);
    let trace = session.join()?;
    if target.exited() {
        // What it wrote before it went is no picture of its threads now.
        return Err(CaptureError::Exited { pid: target.pid() });
    }
    Ok(Sampled {
        pid: target.pid(),
        name: target.name(),
        runtime,
        trace,
        asked_to_stop,
    })
}
