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

pub mod alloc;
pub mod cpu;
mod frame_walk;
pub mod futures;
mod sync;
