//! The one import point for the profiler's atomics, so loom can replace them under
//! `cfg(eventpipe_profiler_loom)` for model checking (as `eventpipe`'s `sync` does under
//! `cfg(eventpipe_loom)`; the profiler has its own cfg so that its model build compiles
//! `eventpipe` as usual).

#[cfg(eventpipe_profiler_loom)]
#[allow(unused_imports)] // the loom build compiles only the modules under model
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(not(eventpipe_profiler_loom))]
#[allow(unused_imports)] // not every primitive is used by every build
pub(crate) use std::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
    Ordering,
};
