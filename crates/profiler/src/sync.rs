//! The one import point for the atomics, cells and waits of the profiler's hand-offs, so
//! loom can replace them under `cfg(eventpipe_profiler_loom)` for model checking (as
//! `eventpipe`'s `sync` does under `cfg(eventpipe_loom)`; the profiler has its own cfg so
//! that its model build compiles `eventpipe` as usual). The loom build compiles only the
//! modules under model (`tests/loom.rs`).

#[cfg(eventpipe_profiler_loom)]
#[allow(unused_imports)] // the loom build compiles only the modules under model
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(eventpipe_profiler_loom)]
pub(crate) use loom::{cell::UnsafeCell, hint::spin_loop, thread::yield_now};

#[cfg(not(eventpipe_profiler_loom))]
#[allow(unused_imports)] // not every primitive is used by every build
pub(crate) use std::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
    Ordering,
};
#[cfg(not(eventpipe_profiler_loom))]
pub(crate) use std::{hint::spin_loop, thread::yield_now};

/// `std`'s `UnsafeCell` with loom's closure API, so code written against
/// `loom::cell::UnsafeCell` builds unchanged outside the model.
#[cfg(not(eventpipe_profiler_loom))]
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(eventpipe_profiler_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Calls `f` with a pointer to the contents; the caller's protocol decides when it may
    /// be dereferenced.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
