//! # eventpipe-insight
//!
//! What a person sees in a trace. The data flow:
//!
//! ```text
//! nettrace::TraceReader ─▶ ProfileBuilder (samples: .NET sample-profiler, this project's CPU
//!                          and allocation samplers, or any stack-carrying event)
//!                       ─▶ eventpipe-symbols' Symbolizer (module rundown or V6
//!                          Universal.System mappings and symbols + ELF/DWARF and debug
//!                          files for native code, method load/rundown events for .NET
//!                          JIT'd and ReadyToRun code)
//!                       ─▶ async_trace::AsyncTraceBuilder (the async profiler's poll spans;
//!                          CPU samples inside a poll get its async callstack)
//!                       ─▶ Profile (frames, root-first stacks, threads, weighted samples)
//!                       ─▶ speedscope::write_speedscope   speedscope JSON, one profile per thread
//!                        │ pprof::write_pprof             gzipped profile.proto (go tool pprof)
//!                        │ flamegraph::write_collapsed    folded stacks (`a;b;c 42`)
//!                        │ flamegraph::write_flamegraph   SVG, drawn by inferno
//! pprof, speedscope files ─▶ import::read_profile ─▶ Profile (what `eptrace diff` compares)
//! nettrace::TraceReader ─▶ chrome::write_chrome_trace     Chrome Trace Event JSON, streamed:
//!                          every event an instant, Start/Stop pairs and async polls
//!                          durations, thread and process names as metadata (Perfetto UI,
//!                          chrome://tracing)
//! ```
//!
//! Symbolization is its own crate, `eventpipe-symbols` (re-exported as [`symbolize`]);
//! counters (`eventpipe-counters`, as [`counters`]) and heap snapshots (`eventpipe-heap`,
//! as [`heap`], [`gcdump`] and [`live_heap`]) too, so a program that needs only them builds
//! none of the converters. [`retention`] is the one view of a heap snapshot made here: a
//! heap as a [`Profile`], so every profile converter draws it.
//!
//! [`report::FileOrderPass`] (with [`nettrace::check_sorted_order`] on a second reader) is
//! what a trace holds in one read: events per provider, name and thread, losses, stacks,
//! time order, the profile's hot spots and the async profiler's futures, as a
//! [`report::TraceReport`].
//!
//! The profile converters read only [`Profile`]; the Chrome converter reads the trace itself,
//! holding nothing but the intervals and polls still open. Every converter writes to any
//! `io::Write` and reports failures as [`Error`].
#![forbid(unsafe_code)]

mod async_analysis;
mod async_stacks;
pub mod async_trace;
pub mod builder;
pub mod chrome;
pub mod diff;
mod error;
pub mod flamegraph;
mod hash;
pub mod import;
pub mod intervals;
pub mod json;
pub mod lines;
pub mod pprof;
pub mod profile;
pub mod report;
pub mod retention;
mod runtime_samples;
pub mod speedscope;
pub mod thread_stacks;
pub mod thread_time;
pub mod write_behind;

pub use eventpipe_counters as counters;
pub use eventpipe_heap as heap;
pub use eventpipe_heap::{gcdump, live_heap};
pub use eventpipe_symbols as symbolize;

pub use async_analysis::async_section;
pub use async_trace::{read_async_trace, AsyncTrace, AsyncTraceBuilder};
pub use builder::{
    build_profile, BuiltProfile, ProfileBuilder, SampleSelection, EXTERNAL_CODE_FRAME,
};
pub use chrome::{write_chrome_trace, write_chrome_trace_knowing_rows, ChromeSummary};
pub use error::{Error, Result};
pub use eventpipe_symbols::{BinaryCache, Module, Symbolizer};
pub use flamegraph::{
    collapsed_stacks, write_collapsed, write_differential_flamegraph, write_flamegraph, Grouping,
};
pub use pprof::{
    build_pprof, build_pprof_diff, write_pprof, write_pprof_diff, write_pprof_with, PprofOptions,
    ThreadLabels,
};
pub use profile::{
    thousands, Frame, FrameId, FrameKind, LinesId, Profile, Sample, SampleUnit, StackId, Thread,
};
pub use speedscope::write_speedscope;
pub use thread_stacks::{thread_stacks, PendingTasks, ThreadStack, ThreadStacks};
