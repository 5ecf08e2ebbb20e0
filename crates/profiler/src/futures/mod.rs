//! The async profiler, behind the provider `EventPipeRs-AsyncProfiler`: which futures a
//! program is running, suspended in and waiting on, cheaply enough to leave on.
//!
//! Instrument futures with [`FutureExt::profiled`], the [`profiled`] attribute on an async
//! fn, or (with `--cfg tokio_unstable` and the `tokio` feature) tokio's task hooks (the
//! `tokio_hooks` module, built only then). While a session enables the provider, each
//! instrumented future's creation, polls (resume, then suspend, complete or unwind) and
//! cancellation become records of a few bytes in its thread's buffer (`thread_buffer`,
//! encoded as `encode` says); a full buffer is one `AsyncBuffer` event. The poll stack of a
//! thread — polls nest — is the async callstack of its innermost future, so records need not
//! repeat it. The format is specified in `docs/async-profiler-format.md`; `eptrace report`
//! and `convert` read it.
//!
//! A background flusher emits the buffers of idle threads and reclaims those of exited
//! ones; a stopping session collects every buffer first. The session's filter argument
//! `BufferSize=N` (bytes, 1 KiB to 60 KiB; default 16 KiB) sizes the buffers; a change
//! reaches each writer at its next record. `WakePending=1` wakes every pending task once
//! as the session starts (`pending`), so each records where it is suspended.
//!
//! The CPU sampler tags each sample with the innermost context polled on the sampled thread
//! ([`current_context`]), so samples join their async callstacks.

mod barrier;
mod encode;
mod handoff;
mod pending;
mod profiled;
mod site;
mod thread_buffer;
#[cfg(all(feature = "tokio", tokio_unstable))]
pub mod tokio_hooks;

use std::sync::Mutex;
use std::time::Duration;

use crate::sync::{AtomicU64, Ordering};
use eventpipe_core::{define_event, EnableChange, Level, Provider};

pub use eventpipe_profiler_macros::profiled;
pub use profiled::{FutureExt, Profiled};
pub use site::Site;

/// The provider's name.
pub const PROVIDER_NAME: &str = "EventPipeRs-AsyncProfiler";
/// Buffer size when the session does not say (`BufferSize=N`).
pub const DEFAULT_BUFFER_SIZE: usize = 16 << 10;
/// Smallest buffer size accepted.
pub const MIN_BUFFER_SIZE: usize = 1 << 10;
/// Largest buffer size accepted (a payload's byte array is u16-counted).
pub const MAX_BUFFER_SIZE: usize = 60 << 10;
/// The format version in `AsyncProfilerMetadata`.
pub const FORMAT_VERSION: u32 = 2;

/// The async profiler's provider.
pub static PROVIDER: Provider = Provider::with_callback(PROVIDER_NAME, on_enable_change);

define_event! {
    /// The clock reference that converts buffered timestamps to wall-clock time.
    pub static METADATA = PROVIDER { id: 1, name: "AsyncProfilerMetadata", level: Level::Critical, keywords: 0 }
        (Version: u32, ReferenceTimestamp: u64, TimestampFrequency: u64, ReferenceUtcUnixNanos: i64);
}

define_event! {
    /// The name and source location of one frame (instrumented site).
    pub static FRAME = PROVIDER { id: 2, name: "AsyncFrame", level: Level::Critical, keywords: 0 }
        (FrameId: u32, Name: &str, File: &str, Line: u32);
}

define_event! {
    /// One thread's buffer of records.
    pub static BUFFER = PROVIDER { id: 3, name: "AsyncBuffer", level: Level::Critical, keywords: 0 }
        (OsThreadId: u64, Sequence: u32, BufferTimestamp: u64, Records: &[u8]);
}

/// Declares the provider, so a session naming it (now or later) starts recording. Call once
/// at startup; instrumented futures work without it, but record only once some session has
/// enabled the provider after its events registered.
pub fn register() {
    eventpipe_core::server::warn_if_unserved("eventpipe-profiler's async profiler");
    METADATA.register();
    FRAME.register();
    BUFFER.register();
}

/// The context being polled innermost on this thread, or 0; async-signal-safe.
pub fn current_context() -> u64 {
    thread_buffer::current_context()
}

#[inline]
pub(crate) fn now() -> i64 {
    eventpipe_core::clock::now()
}

/// The recording switch, buffer size and a change counter in one word, so a writer needs one
/// relaxed load per record to notice any change (`epoch << 16 | size_kib << 1 | recording`).
pub(crate) mod config {
    use super::*;

    static CONFIG: AtomicU64 = AtomicU64::new(0);

    #[inline]
    pub(crate) fn current() -> u64 {
        // Relaxed: a writer that sees a change a few records late puts them in the buffer of
        // the configuration before; a stopping session's flush takes that buffer under the
        // buffer's own claim, which orders the records themselves.
        CONFIG.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn is_recording(config: u64) -> bool {
        config & 1 != 0
    }

    /// Bumped at every change of the sessions or their buffer size.
    #[inline]
    pub(crate) fn epoch(config: u64) -> u64 {
        config >> 16
    }

    pub(crate) fn buffer_size(config: u64) -> usize {
        (((config >> 1) & 0x7fff) as usize) << 10
    }

    /// Publishes a new configuration with a fresh epoch.
    pub(crate) fn set(recording: bool, buffer_size: usize) {
        let kib = (buffer_size.clamp(MIN_BUFFER_SIZE, MAX_BUFFER_SIZE) >> 10) as u64;
        let mut old = CONFIG.load(Ordering::Relaxed);
        loop {
            let epoch = (old >> 16) + 1;
            let new = (epoch << 16) | (kib << 1) | u64::from(recording);
            match CONFIG.compare_exchange(old, new, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => return,
                Err(seen) => old = seen,
            }
        }
    }
}

/// Writes one buffer: from its own thread (`about: None`) or, for the flusher, attributed to
/// thread `about`.
pub(crate) fn emit_buffer(
    about: Option<u64>,
    os_tid: u64,
    sequence: u32,
    base_ts: i64,
    records: &[u8],
) {
    let values = (os_tid, sequence, base_ts as u64, records);
    match about {
        None => BUFFER.write(values),
        Some(tid) => BUFFER.write_about_thread(tid, &[], values),
    }
}

/// Tells the recording sessions a frame's name (a site just got its id).
pub(crate) fn announce_frame(id: u32, site: &Site) {
    FRAME.write((id, site.name(), site.file(), site.line()));
}

/// The sessions enabling the provider (slot, buffer size asked for).
static SESSIONS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
/// Bumped when the set of sessions changes; a flusher runs while its generation is current.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// How often the flusher wakes, and how long a buffer must have had no record to be emitted
/// by it.
const FLUSH_PERIOD: Duration = Duration::from_millis(100);
const IDLE_AFTER: Duration = Duration::from_millis(200);

fn on_enable_change(change: &EnableChange<'_>) {
    let mut sessions = SESSIONS.lock().unwrap_or_else(|p| p.into_inner());
    sessions.retain(|&(slot, _)| slot != change.session_slot);
    if change.enabled {
        sessions.push((change.session_slot, parse_buffer_size(change.filter_args)));
    }
    let recording = !sessions.is_empty();
    let size = sessions
        .iter()
        .map(|&(_, size)| size)
        .max()
        .unwrap_or(DEFAULT_BUFFER_SIZE);
    config::set(recording, size);
    if change.ending {
        // The session still records: it gets every record made so far. Writers that see the
        // new configuration after this start new buffers.
        drop(sessions);
        thread_buffer::flush_all();
        return;
    }
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed) + 1;
    drop(sessions);
    if change.enabled {
        write_metadata();
        site::for_each_known(announce_frame_of);
        if flag(change.filter_args, "wakepending") {
            pending::wake_all();
        }
        let _ = std::thread::Builder::new()
            .name("eventpipe-async-flusher".into())
            .spawn(move || run_flusher(generation));
    } else if recording {
        let _ = std::thread::Builder::new()
            .name("eventpipe-async-flusher".into())
            .spawn(move || run_flusher(generation));
    }
}

fn announce_frame_of(id: u32, site: &'static Site) {
    announce_frame(id, site);
}

fn write_metadata() {
    let ts = now();
    let utc = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let ticks_per_second = eventpipe_core::clock::ticks_per_second() as u64;
    METADATA.write((FORMAT_VERSION, ts as u64, ticks_per_second, utc));
}

fn run_flusher(generation: u64) {
    let idle_ticks = eventpipe_core::clock::ticks_from_nanos(IDLE_AFTER.as_nanos() as i64);
    while GENERATION.load(Ordering::Relaxed) == generation {
        std::thread::sleep(FLUSH_PERIOD);
        thread_buffer::flush_idle_and_reclaim(now() - idle_ticks);
    }
}

/// Whether the filter arguments set `name` (any case) to 1 or true.
fn flag(filter_args: Option<&str>, name: &str) -> bool {
    filter_args
        .into_iter()
        .flat_map(|a| a.split([';', ',']))
        .filter_map(|kv| kv.split_once('='))
        .any(|(k, v)| {
            k.trim().eq_ignore_ascii_case(name)
                && matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true")
        })
}

/// `BufferSize=N` (bytes) from the filter arguments, clamped; the default otherwise.
pub fn parse_buffer_size(filter_args: Option<&str>) -> usize {
    filter_args
        .into_iter()
        .flat_map(|a| a.split([';', ',']))
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("buffersize"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .map_or(DEFAULT_BUFFER_SIZE, |n| {
            n.clamp(MIN_BUFFER_SIZE, MAX_BUFFER_SIZE)
        })
}

/// Buffers registered (threads that recorded and whose buffers are not yet reclaimed).
#[doc(hidden)]
pub fn registered_thread_buffers() -> usize {
    thread_buffer::registered_threads()
}

/// Runs one flusher visit now (tests: reclaim without waiting for the timer).
#[doc(hidden)]
pub fn flush_idle_now() -> usize {
    thread_buffer::flush_idle_and_reclaim(now())
}
