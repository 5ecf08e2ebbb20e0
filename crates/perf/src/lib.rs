//! Linux perf events for eventpipe-rs: CPU-time samples of any program, as it is, with
//! their call chains, the program's mappings and its threads' names
//! (`perf_event_open`), written as a NetTrace V6 trace in the shape one-collect and
//! `dotnet-trace collect-linux` write ([`trace`]).
//!
//! * [`record`]: the ring buffer's records, parsed from bytes (any platform).
//! * [`Sampler`]: one inherited software `cpu-clock` event per CPU on a process, so every
//!   thread and child it starts is sampled; its rings, read without copying but for
//!   records that wrap (Linux).
//! * [`spawn_held`]: a program forked and held before its exec, so that sampling begins at
//!   its first instruction (Linux).
//! * [`PerfTrace`]: records in, a V6 trace out, in time order across CPUs.
//!
//! Call chains are the kernel's frame-pointer walk, and, where the sampler copies each
//! sample's user stack, the unwind tables' (`.eh_frame`) walk of that copy, which goes on
//! through code built without frame pointers.

pub mod clock;
pub mod record;
pub mod trace;
mod unwinding;

#[cfg(target_os = "linux")]
mod launch;
#[cfg(target_os = "linux")]
mod sampler;

#[cfg(target_os = "linux")]
pub use launch::{spawn_held, Child, HeldChild};
pub use record::{Record, RecordError, SampleLayout, UserStack, SWITCH_SAMPLE_PERIOD};
#[cfg(target_os = "linux")]
pub use sampler::{existing_process, Sampler, SamplerConfig};
pub use trace::{ForwardedEvent, PerfTrace, Summary};

/// `CLOCK_MONOTONIC`, ns: the clock the samples are timed on.
#[cfg(target_os = "linux")]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The system does not let this user sample the process.
    #[error(
        "perf events are not allowed for this user (kernel.perf_event_paranoid is {}): run as \
         root, give the program CAP_PERFMON, or allow them with `sudo sysctl \
         kernel.perf_event_paranoid=1`",
        paranoid.map_or("unknown".to_owned(), |p| p.to_string())
    )]
    Permission {
        /// `kernel.perf_event_paranoid`, when readable.
        paranoid: Option<i32>,
    },
    /// The process belongs to another user, whose processes this one may not sample.
    #[error(
        "process {pid} belongs to another user: only root (or CAP_PERFMON with the right to \
         trace it) may sample it; run eptrace as that user or as root"
    )]
    OtherUser {
        /// The process.
        pid: i32,
    },
    /// The kernel has no perf events (or no software `cpu-clock` event).
    #[error("this kernel offers no perf events ({0})")]
    Unavailable(std::io::Error),
    /// The process does not exist.
    #[error("no process {0}")]
    NoProcess(i32),
    /// Opening or mapping an event failed otherwise.
    #[error("cannot open a perf event: {0}")]
    Open(std::io::Error),
    /// The program could not be started.
    #[error("{0}")]
    Launch(String),
    /// Perf events exist only on Linux.
    #[error("perf events exist only on Linux")]
    Unsupported,
}
