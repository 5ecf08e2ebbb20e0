//! Capturing the allocating thread's stack for a sample.
//!
//! The walk goes into a scratch buffer taken from a small bounded pool: pop one, or allocate
//! one when the pool is empty; the sample gets an exact-size copy; the buffer goes back to
//! the pool, or is freed when the pool already holds [`POOL_SIZE`]. The pool is a lock-free
//! bounded queue, so two threads never share a scratch buffer and nothing try-locks and
//! silently skips a capture. Every allocation here is fallible (`try_reserve_exact`): if memory
//! is short the sample simply has no stack.
//!
//! The walk follows frame pointers with the walker the CPU sampler uses (`frame_walk`; the
//! workspace builds with `-C force-frame-pointers=yes`, a program that does not gets short
//! stacks), reading its own stack with plain loads: a few loads
//! per frame, where libgcc's DWARF unwinder took 9-15 µs per sample. Elsewhere than Linux on
//! x86_64 or aarch64 it falls back to that unwinder.
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
/// `alloc_slow` or `realloc_slow`): every frame below it belongs to the profiler. `None` if memory for
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
    walk(marker, &mut scratch);
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

/// Walks the frame-pointer chain of the calling thread into `out` (leaf first), keeping only
/// the frames above `marker`: those of the program that allocated.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[inline(never)]
fn walk(marker: usize, out: &mut Vec<usize>) {
    use crate::frame_walk::{self, OwnStack, Walk, WORD};
    let Some(top) = crate::alloc::thread::stack_top() else {
        return;
    };
    // A record must end at or below the top.
    let Some(highest) = top.checked_sub(2 * WORD) else {
        return;
    };
    let here = 0u8;
    let lowest = std::hint::black_box(&here) as *const u8 as usize;
    // SAFETY: everything from this frame's locals up to the top of the stack is mapped while
    // this frame is live, and the walk only looks at the words as integers.
    let mut memory = unsafe { OwnStack::new(lowest, top) };
    let start = Walk {
        fp: frame_pointer(),
        lowest,
        highest,
        // Records at or below the marker belong to the profiler's own frames; the record of
        // the frame holding the marker is the first above it, and returns into its caller.
        skip_through: marker,
        max: MAX_FRAMES.saturating_sub(out.len()),
    };
    // `out` has `MAX_FRAMES` capacity: the pushes do not allocate.
    frame_walk::walk(start, &mut memory, |return_address| {
        out.push(return_address)
    });
}

/// This function's frame pointer: the head of the chain of frame records.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[inline(always)]
fn frame_pointer() -> usize {
    let fp: usize;
    // SAFETY: copies a register; no memory access, no side effect.
    unsafe {
        std::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack, preserves_flags))
    };
    fp
}

/// This function's frame pointer: the head of the chain of frame records.
#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
#[inline(always)]
fn frame_pointer() -> usize {
    let fp: usize;
    // SAFETY: copies a register; no memory access, no side effect.
    unsafe {
        std::arch::asm!("mov {}, x29", out(reg) fp, options(nomem, nostack, preserves_flags))
    };
    fp
}

/// Walks with libgcc's DWARF unwinder into `out` (leaf first), keeping only the frames
/// above `marker`.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
fn walk(marker: usize, out: &mut Vec<usize>) {
    // With libgcc's unwinder a frame's `sp` is the stack pointer of the frame's function at
    // the call it is making, which lies below every local of that function and above
    // everything it called: the profiler's own frames read at or below `marker`.
    // The crate's global lock exists to serialise Windows' dbghelp. The callback does not
    // panic and does not allocate (`out` has `MAX_FRAMES` capacity).
    // SAFETY: without that lock, libgcc's `_Unwind_Backtrace` is still thread-safe.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            if frame.sp() as usize > marker {
                out.push(frame.ip() as usize);
            }
            out.len() < MAX_FRAMES
        });
    }
}
