//! Per-thread state of the allocation profiler.
//!
//! One `const`-initialised thread-local of `Cell`s and no destructor: accessing it never
//! allocates, never registers a destructor and never fails, even from another thread-local's
//! destructor or while the thread is exiting (we still go through `try_with`, which cannot
//! fail for such a key, rather than `with`, which would panic if it could).

use std::cell::Cell;

/// What one thread keeps.
#[derive(Debug)]
pub(crate) struct ThreadState {
    /// Set while the profiler itself runs on this thread (sampling, its callbacks, its
    /// emitter thread for good): allocations then go straight to the inner allocator and are
    /// neither counted nor sampled.
    pub(crate) guard: Cell<bool>,
    /// Set while this thread holds a tracking-table lock. An allocation or free seen with it
    /// set would be a broken invariant (counted in `allocations_under_lock`).
    pub(crate) holding_lock: Cell<bool>,
    /// The sampling epoch `remaining` was drawn for; a new epoch redraws it.
    pub(crate) epoch: Cell<u64>,
    /// Whole bytes before the next sampled byte.
    pub(crate) remaining: Cell<u64>,
    /// PRNG state (0 = not seeded yet).
    pub(crate) rng: Cell<u64>,
    /// The OS thread id (0 = not asked yet).
    pub(crate) tid: Cell<u64>,
    /// The highest address of this thread's stack (0 = not asked yet, 1 = unknown).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) stack_top: Cell<usize>,
}

thread_local! {
    pub(crate) static THREAD: ThreadState = const {
        ThreadState {
            guard: Cell::new(false),
            holding_lock: Cell::new(false),
            epoch: Cell::new(0),
            remaining: Cell::new(0),
            rng: Cell::new(0),
            tid: Cell::new(0),
            stack_top: Cell::new(0),
        }
    };
}

/// Runs `f` with the re-entrancy guard raised on this thread, restoring the previous value
/// afterwards (calls nest).
pub(crate) fn with_guard<R>(f: impl FnOnce() -> R) -> R {
    let previous = THREAD.try_with(|t| t.guard.replace(true)).ok();
    let result = f();
    if let Some(previous) = previous {
        let _ = THREAD.try_with(|t| t.guard.set(previous));
    }
    result
}

/// Raises the guard for the rest of this thread's life (the emitter thread).
pub(crate) fn guard_forever() {
    let _ = THREAD.try_with(|t| t.guard.set(true));
}

/// Whether this thread currently holds a tracking-table lock.
pub(crate) fn holding_lock() -> bool {
    THREAD.try_with(|t| t.holding_lock.get()).unwrap_or(false)
}

pub(crate) fn set_holding_lock(held: bool) {
    let _ = THREAD.try_with(|t| t.holding_lock.set(held));
}

/// This thread's OS id, as the trace names threads.
pub(crate) fn os_tid(t: &ThreadState) -> u64 {
    let tid = t.tid.get();
    if tid != 0 {
        return tid;
    }
    let tid = eventpipe_core::current_os_tid();
    t.tid.set(tid);
    tid
}

/// The highest address of the calling thread's stack, asked of the C library once per
/// thread (for the main thread glibc reads `/proc/self/maps`, allocating: call this only
/// under the re-entrancy guard).
#[cfg(target_os = "linux")]
pub(crate) fn stack_top() -> Option<usize> {
    let known = THREAD.try_with(|t| t.stack_top.get()).ok()?;
    let top = if known == 0 {
        let top = ask_stack_top().unwrap_or(1);
        let _ = THREAD.try_with(|t| t.stack_top.set(top));
        top
    } else {
        known
    };
    (top > 1).then_some(top)
}

#[cfg(target_os = "linux")]
fn ask_stack_top() -> Option<usize> {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    // SAFETY: `attr` is written by pthread_getattr_np before it is read, and destroyed
    // exactly once after a successful call; the out-pointers are valid locals.
    unsafe {
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return None;
        }
        let mut base: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let found = libc::pthread_attr_getstack(attr.as_ptr(), &mut base, &mut size) == 0;
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        found.then(|| (base as usize).saturating_add(size))
    }
}
