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
//! installed. Linux reads `/proc/self`; elsewhere the process counters are not registered.

use std::sync::Mutex;
use std::time::Instant;

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
        .description("File descriptors the process has open"),
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
        if cfg!(target_os = "linux") {
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

/// The process's CPU time (user + system) in clock ticks, from `/proc/self/stat`.
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields count from the
    // last ')'. utime and stime are fields 14 and 15, the 12th and 13th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// CPU usage since the previous call (the first call: since the process started), in
/// percent of all cores' time.
fn cpu_usage() -> f64 {
    static PREVIOUS: Mutex<Option<(Instant, u64)>> = Mutex::new(None);
    let Some(ticks) = cpu_ticks() else {
        return 0.0;
    };
    let now = Instant::now();
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let mut previous = crate::sync::lock(&PREVIOUS);
    let usage = match *previous {
        Some((then, before)) => {
            let wall = now.duration_since(then).as_secs_f64();
            let cpu = ticks.saturating_sub(before) as f64 / hz;
            if wall > 0.0 {
                100.0 * cpu / wall / cores
            } else {
                0.0
            }
        }
        None => 0.0,
    };
    *previous = Some((now, ticks));
    usage.clamp(0.0, 100.0)
}

/// Resident set size in 10^6 bytes, from `/proc/self/statm` (its second field, in pages).
fn working_set_mb() -> f64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0.0;
    };
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = if page > 0 { page as u64 } else { 4096 };
    (pages * page) as f64 / 1e6
}

fn count_entries(dir: &str) -> Option<usize> {
    Some(std::fs::read_dir(dir).ok()?.count())
}

fn thread_count() -> f64 {
    count_entries("/proc/self/task").unwrap_or(0) as f64
}

/// Open descriptors, not counting the one reading the directory.
fn open_fds() -> f64 {
    count_entries("/proc/self/fd").map_or(0.0, |n| n.saturating_sub(1) as f64)
}
