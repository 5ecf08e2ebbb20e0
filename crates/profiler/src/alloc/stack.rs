//! Capturing the allocating thread's stack for a sample.
//!
//! The walk goes into a scratch buffer taken from a small bounded pool: pop one, or allocate
//! one when the pool is empty; the sample gets an exact-size copy; the buffer goes back to
//! the pool, or is freed when the pool already holds [`POOL_SIZE`]. The pool is a lock-free
//! bounded queue, so two threads never share a scratch buffer and nothing try-locks and
//! silently skips a capture. Every allocation here is fallible (`try_reserve_exact`): if memory
//! is short the sample simply has no stack.
//!
//! Runs only under the thread's re-entrancy guard, so the allocations made here go straight
//! to the inner allocator and are never themselves sampled.

use std::sync::OnceLock;

use crossbeam_queue::ArrayQueue;

/// Scratch buffers kept for reuse.
pub(crate) const POOL_SIZE: usize = 8;
/// Deepest stack recorded; deeper stacks lose their root end.
pub(crate) const MAX_FRAMES: usize = 512;

static POOL: OnceLock<ArrayQueue<Vec<usize>>> = OnceLock::new();

/// The pool, once [`init`] created it. Never created from the allocator path, where
/// `ArrayQueue::new`'s infallible allocation would be out of place; without it a capture
/// allocates a scratch buffer and frees it afterwards.
fn pool() -> Option<&'static ArrayQueue<Vec<usize>>> {
    POOL.get()
}

/// Creates the pool; called by the enable callback before sampling starts.
pub(crate) fn init() {
    POOL.get_or_init(|| ArrayQueue::new(POOL_SIZE));
}

/// Buffers currently in the pool (tests).
pub(crate) fn pooled() -> usize {
    pool().map_or(0, ArrayQueue::len)
}

/// Walks the calling thread's stack and returns an exact-size copy, leaf first, starting at
/// the caller of the frame that holds `marker` (the address of a local in the allocator's
/// sampling entry point): every frame below it belongs to the profiler. `None` if memory for
/// the copy is short.
#[inline(never)]
pub(crate) fn capture(marker: usize) -> Option<Box<[usize]>> {
    let mut scratch = match pool().and_then(ArrayQueue::pop) {
        Some(v) => v,
        None => {
            let mut v = Vec::new();
            v.try_reserve_exact(MAX_FRAMES).ok()?;
            v
        }
    };
    scratch.clear();
    // Frames are reported leaf first. With libgcc's unwinder a frame's `sp` is the stack
    // pointer of the frame's function at the call it is making (the canonical frame address
    // of the frame it called), which lies below every local of that function and above
    // everything it called. So the frame holding `marker` and every frame it called, the
    // profiler's own, read at or below `marker`; the first frame above is its caller, the
    // program. (The allocator's `alloc` usually tail-calls the marker's function, so that
    // caller is often the program's own code rather than `__rust_alloc`.)
    let mut any_sp = false;
    // SAFETY: `trace_unsynchronized` only lacks the crate's global lock, which exists to
    // serialise Windows' dbghelp. On Linux it walks with libgcc's `_Unwind_Backtrace`,
    // which is thread-safe (it is what concurrent C++ exceptions use). The callback does
    // not panic (an unwind across the unwinder would abort) and does not allocate: the
    // scratch buffer has `MAX_FRAMES` capacity and the walk stops before exceeding it.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let sp = frame.sp() as usize;
            any_sp |= sp != 0;
            if sp <= marker {
                return true;
            }
            scratch.push(frame.ip() as usize);
            scratch.len() < MAX_FRAMES
        });
    }
    if !any_sp {
        // The unwinder gave no frame addresses: keep the whole walk rather than nothing.
        // SAFETY: as above.
        unsafe {
            backtrace::trace_unsynchronized(|frame| {
                scratch.push(frame.ip() as usize);
                scratch.len() < MAX_FRAMES
            });
        }
    }
    let mut exact = Vec::new();
    let copied = exact.try_reserve_exact(scratch.len()).is_ok();
    if copied {
        exact.extend_from_slice(&scratch);
    }
    // A full pool means enough spares already: this one is freed.
    match pool() {
        Some(p) => drop(p.push(scratch)),
        None => drop(scratch),
    }
    // `try_reserve_exact` on an empty Vec makes the capacity exactly the length, so this
    // does not reallocate.
    copied.then(|| exact.into_boxed_slice())
}
