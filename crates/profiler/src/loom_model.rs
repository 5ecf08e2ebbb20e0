//! The hand-off under model in `tests/loom.rs`, exposed only to it: the real
//! [`Handoff`](crate::futures::handoff::Handoff) of the async profiler's per-thread buffers,
//! built on loom's atomics, fences and tracked cell (`crate::sync`).

/// The real per-thread buffer hand-off, holding a `T` in a loom-tracked cell (a data race
/// on it is loom's causality report).
#[derive(Debug)]
pub struct Handoff<T>(crate::futures::handoff::Handoff<T>);

impl<T> Handoff<T> {
    /// A hand-off holding `value`, owned by the thread that will call [`as_owner`].
    ///
    /// [`as_owner`]: Self::as_owner
    pub fn new(value: T) -> Self {
        Handoff(crate::futures::handoff::Handoff::new(value))
    }

    /// The owner's access (a record).
    ///
    /// # Safety
    /// Only one thread ever calls this on a given hand-off, and not from within `f`.
    pub unsafe fn as_owner<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: forwarded from the caller.
        unsafe { self.0.as_owner(f) }
    }

    /// An outsider's access (a flush); `None` when it did not `wait` and the owner was
    /// writing.
    pub fn as_outsider<R>(&self, wait: bool, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        self.0.as_outsider(wait, f)
    }

    /// The owner's goodbye, after its last access.
    pub fn mark_exited(&self) {
        self.0.mark_exited();
    }

    /// Whether the owner said goodbye.
    pub fn has_exited(&self) -> bool {
        self.0.has_exited()
    }
}
