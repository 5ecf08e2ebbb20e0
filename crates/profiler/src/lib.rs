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
#[cfg(all(not(eventpipe_profiler_loom), target_os = "linux"))]
pub mod cpu;
#[cfg(all(not(eventpipe_profiler_loom), not(target_os = "linux")))]
#[path = "cpu_unsupported.rs"]
pub mod cpu;
#[cfg(not(eventpipe_profiler_loom))]
// The frame walker serves the Linux-only paths (the CPU sampler, the allocation
// profiler's stack bound); elsewhere it is built but idle.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
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
