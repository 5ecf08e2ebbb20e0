//! # eventpipe-profiler
//!
//! Sampling profilers that write through eventpipe, so a Rust program is profiled the way a
//! .NET one is traced: a session (in-process, or `eptrace collect` over the diagnostics IPC)
//! enables a provider, and the profiler behind it starts; the trace converts to flame graphs,
//! speedscope or pprof with `eptrace convert`.
//!
//! - [`alloc`]: the allocation and live-heap profiler, a [`GlobalAlloc`](std::alloc::GlobalAlloc)
//!   wrapper behind the provider `EventPipeRs-Allocations`.
//! - [`cpu`]: the CPU sampler, per-thread CPU-time timers whose signal handler captures the
//!   thread's stack, behind the provider `EventPipeRs-CpuSampler`.

// The loom build (`cfg(eventpipe_profiler_loom)`, `tests/loom.rs`) compiles only the
// modules under model.
#[cfg(not(eventpipe_profiler_loom))]
pub mod alloc;
#[cfg(not(eventpipe_profiler_loom))]
pub mod cpu;
#[cfg(not(eventpipe_profiler_loom))]
mod frame_walk;
#[cfg(not(eventpipe_profiler_loom))]
pub mod futures;
mod sync;

#[cfg(eventpipe_profiler_loom)]
mod futures {
    mod barrier;
    pub(crate) mod handoff;
}

#[cfg(eventpipe_profiler_loom)]
#[doc(hidden)]
pub mod loom_model;
