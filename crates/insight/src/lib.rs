//! # eventpipe-insight
//!
//! What a person sees in a trace. The data flow:
//!
//! ```text
//! nettrace::TraceReader ─▶ ProfileBuilder (samples: .NET sample-profiler, this project's CPU
//!                          and allocation samplers, or any stack-carrying event)
//!                       ─▶ Symbolizer (module rundown + ELF/DWARF for native code, method
//!                          load/rundown events for .NET JIT'd and ReadyToRun code)
//!                       ─▶ Profile (frames, root-first stacks, threads, weighted samples)
//!                       ─▶ speedscope │ pprof │ flame graph SVG
//! nettrace::TraceReader ─▶ Chrome Trace Event JSON (instants, start/stop durations, threads)
//! ```

pub mod profile;

pub use profile::{Frame, FrameId, FrameKind, Profile, Sample, SampleUnit, StackId, Thread};
