//! An asymmetric fence for the buffer hand-off: the owner of a buffer, which claims it on
//! every record, pays only a compiler fence; the rare thread that flushes someone else's
//! buffer pays a `membarrier(2)` system call, which makes every thread of the process execute
//! a full memory barrier. Together they order the owner's "I am writing" store before its
//! "is someone flushing?" load exactly as a full fence on both sides would (the
//! store-buffering pattern), at a tenth of the owner's cost of a locked instruction.
//!
//! Where the kernel lacks `MEMBARRIER_CMD_PRIVATE_EXPEDITED` (before Linux 4.14, or filtered
//! by seccomp), both sides fall back to full fences. The choice is made once, before either
//! side relies on it, and never changes. Under Miri, which runs no `membarrier`, both sides
//! use full fences; under the loom model (`cfg(eventpipe_profiler_loom)`) both are loom's
//! SeqCst fence, the fallback's semantics, which loom checks.

#[cfg(eventpipe_profiler_loom)]
use crate::sync::{fence, Ordering};

/// The frequent side's fence (the loom model's: a SeqCst fence).
#[cfg(eventpipe_profiler_loom)]
pub(crate) fn light() {
    fence(Ordering::SeqCst);
}

/// The rare side's fence (the loom model's: a SeqCst fence).
#[cfg(eventpipe_profiler_loom)]
pub(crate) fn heavy() {
    fence(Ordering::SeqCst);
}

#[cfg(not(eventpipe_profiler_loom))]
pub(crate) use real::{heavy, light};

#[cfg(not(eventpipe_profiler_loom))]
mod real {
    use crate::sync::{compiler_fence, fence, AtomicU8, Ordering};

    const UNKNOWN: u8 = 0;
    const EXPEDITED: u8 = 1;
    const FENCES: u8 = 2;

    #[cfg_attr(miri, allow(dead_code))] // Miri decides without asking
    const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
    const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    #[cfg_attr(miri, allow(dead_code))] // as above
    const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn membarrier(cmd: libc::c_long) -> libc::c_long {
        // SAFETY: membarrier takes two integers and touches no memory of ours.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_long) }
    }

    /// Only Linux has `membarrier`: elsewhere both sides use full fences.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn membarrier(_cmd: libc::c_long) -> libc::c_long {
        -1
    }

    /// Miri runs no `membarrier`: full fences on both sides, which Miri does model.
    #[cfg(miri)]
    #[cold]
    fn decide() -> u8 {
        // Relaxed: as below.
        MODE.store(FENCES, Ordering::Relaxed);
        FENCES
    }

    #[cfg(not(miri))]
    #[cold]
    fn decide() -> u8 {
        let supported = membarrier(MEMBARRIER_CMD_QUERY);
        let mode = if supported >= 0
            && supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED != 0
            && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0
        {
            EXPEDITED
        } else {
            FENCES
        };
        // Racing deciders reach the same answer (registration is idempotent), so whichever
        // store lands is right; Relaxed suffices because the mode is a pure function of the
        // kernel and every reader that sees UNKNOWN decides for itself.
        MODE.store(mode, Ordering::Relaxed);
        mode
    }

    #[inline]
    fn mode() -> u8 {
        match MODE.load(Ordering::Relaxed) {
            UNKNOWN => decide(),
            m => m,
        }
    }

    /// The frequent side's fence.
    #[inline]
    pub(crate) fn light() {
        if mode() == EXPEDITED {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// The rare side's fence: after it returns, every other thread has passed a full barrier
    /// (or, without membarrier, this is a full fence matching theirs).
    pub(crate) fn heavy() {
        if mode() == EXPEDITED && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0 {
            return;
        }
        // Unreachable in practice (a registered process's expedited barrier does not fail);
        // a full fence is what the fallback mode pairs with.
        fence(Ordering::SeqCst);
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_mode_is_decided_once_and_both_sides_run() {
            light();
            let decided = MODE.load(Ordering::Relaxed);
            assert_ne!(decided, UNKNOWN);
            heavy();
            light();
            assert_eq!(MODE.load(Ordering::Relaxed), decided);
        }
    }
}
