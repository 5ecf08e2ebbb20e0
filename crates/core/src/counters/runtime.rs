//! The built-in counters of every program that runs the diagnostics server, under the
//! provider [`PROVIDER_NAME`] (`EventPipeRs-Runtime`; as every `EventPipeRs-` provider, a
//! session gets it only by naming it, not through `*`):
//!
//! | name | type | unit | what |
//! |---|---|---|---|
//! | `cpu-usage` | Mean | `%` | process CPU time (user + system) over the interval, in % of all cores' time, as .NET's `cpu-usage` |
//! | `working-set` | Mean | `MB` | resident set size, in 10^6 bytes (as .NET's) |
//! | `thread-count` | Mean | | threads of the process |
//! | `open-fds` | Mean | | open file descriptors |
//! | `session-count` | Mean | | running eventpipe sessions |
//! | `session-events-written` | Sum | | events the running sessions moved to their outputs |
//! | `session-events-dropped` | Sum | | events the running sessions dropped (Drop mode, budget exhausted) |
//! | `session-buffer-bytes` | Mean | `B` | bytes of buffers the running sessions hold |
//!
//! The session counters add up every running session (a stopping session's totals leave
//! the sum, which the `Sum` counters report as no increase). The allocation profiler
//! (`eventpipe-profiler`) adds `alloc-rate` and `live-bytes` to this provider when it is
//! installed. The process counters read each platform's own source (`platform`: `/proc/self`
//! on Linux, `proc_pidinfo` on macOS, the process APIs on Windows, where `open-fds` counts
//! handles); a platform without a port does not register them.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::platform;

use super::{CounterInfo, Gauge, ObservedCounter};
use crate::Provider;

/// The built-in counters' provider name.
pub const PROVIDER_NAME: &str = "EventPipeRs-Runtime";

/// The built-in counters' provider; the profiler registers its counters on it too.
pub static PROVIDER: Provider = Provider::new(PROVIDER_NAME);

static CPU_USAGE: Gauge = Gauge::observed(
    &PROVIDER,
    CounterInfo::new("cpu-usage")
        .display_name("CPU Usage")
        .unit("%")
        .description("Process CPU time over the interval, in percent of all cores"),
    cpu_usage,
);
static WORKING_SET: Gauge = Gauge::observed(
    &PROVIDER,
    CounterInfo::new("working-set")
        .display_name("Working Set")
        .unit("MB")
        .description("Resident set size"),
    working_set_mb,
);
static THREAD_COUNT: Gauge = Gauge::observed(
    &PROVIDER,
    CounterInfo::new("thread-count")
        .display_name("Thread Count")
        .description("Threads of the process"),
    thread_count,
);
static OPEN_FDS: Gauge = Gauge::observed(
    &PROVIDER,
    CounterInfo::new("open-fds")
        .display_name("Open File Descriptors")
        .description("File descriptors the process has open (handles on Windows)"),
    open_fds,
);
static SESSION_COUNT: Gauge = Gauge::observed(
    &PROVIDER,
    CounterInfo::new("session-count")
        .display_name("EventPipe Sessions")
        .description("Running eventpipe sessions"),
    || crate::registry::running_session_stats().len() as f64,
);
static SESSION_EVENTS_WRITTEN: ObservedCounter = ObservedCounter::new(
    &PROVIDER,
    CounterInfo::new("session-events-written")
        .display_name("EventPipe Events Written")
        .description("Events the running sessions moved to their outputs"),
    || sessions_sum(|s| s.events_written),
);
static SESSION_EVENTS_DROPPED: ObservedCounter = ObservedCounter::new(
    &PROVIDER,
    CounterInfo::new("session-events-dropped")
        .display_name("EventPipe Events Dropped")
        .description("Events the running sessions dropped for lack of buffer space"),
    || sessions_sum(|s| s.events_dropped),
);
static SESSION_BUFFER_BYTES: Gauge = Gauge::observed(
    &PROVIDER,
    CounterInfo::new("session-buffer-bytes")
        .display_name("EventPipe Buffer Bytes")
        .unit("B")
        .description("Bytes of buffers the running sessions hold"),
    || sessions_sum(|s| s.buffer_bytes as u64) as f64,
);

fn sessions_sum(field: impl Fn(&crate::SessionStats) -> u64) -> u64 {
    crate::registry::running_session_stats()
        .iter()
        .map(|(_, s)| field(s))
        .sum()
}

/// Registers the built-in counters (once; later calls do nothing). The diagnostics server
/// calls it when it starts; a program without a server may call it to have them anyway.
pub fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let quiet = super::publish::register;
        use super::Instrument as I;
        if platform::PROCESS_FACTS {
            for g in [&CPU_USAGE, &WORKING_SET, &THREAD_COUNT, &OPEN_FDS] {
                quiet(I::Gauge(g));
                g.registration
                    .done
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        for g in [&SESSION_COUNT, &SESSION_BUFFER_BYTES] {
            quiet(I::Gauge(g));
            g.registration
                .done
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        for c in [&SESSION_EVENTS_WRITTEN, &SESSION_EVENTS_DROPPED] {
            quiet(I::Observed(c));
            c.registration
                .done
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
}

/// CPU usage since the previous call (the first call: since the process started), in
/// percent of all cores' time.
fn cpu_usage() -> f64 {
    static PREVIOUS: Mutex<Option<(Instant, Duration)>> = Mutex::new(None);
    let Some(cpu) = platform::cpu_time() else {
        return 0.0;
    };
    let now = Instant::now();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let mut previous = crate::sync::lock(&PREVIOUS);
    let usage = match *previous {
        Some((then, before)) => {
            let wall = now.duration_since(then).as_secs_f64();
            let used = cpu.saturating_sub(before).as_secs_f64();
            if wall > 0.0 {
                100.0 * used / wall / cores
            } else {
                0.0
            }
        }
        None => 0.0,
    };
    *previous = Some((now, cpu));
    usage.clamp(0.0, 100.0)
}

/// The resident set (working set) in 10^6 bytes.
fn working_set_mb() -> f64 {
    platform::resident_bytes().map_or(0.0, |b| b as f64 / 1e6)
}

fn thread_count() -> f64 {
    platform::thread_count().map_or(0.0, |n| n as f64)
}

fn open_fds() -> f64 {
    platform::open_descriptors().map_or(0.0, |n| n as f64)
}
