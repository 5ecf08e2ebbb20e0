//! A session's buffer manager: its one lock, the memory budget, and Block-mode parking.
//!
//! The lock (`BufferManager::state`) guards `Manager`: the thread table (`threads.rs`:
//! each thread's state and buffer list), the bytes and buffers drawn on the budget, and
//! `aborted`. There is no per-thread lock. A writer takes it to get a buffer; the drain
//! takes it to snapshot the thread table and again to free what it drained; stopping takes
//! it to abort. It is never held while user code runs.
//!
//! Block mode parks writers on a condition variable over that lock (`capacity`):
//!
//! - a writer that finds the budget exhausted checks `aborted` and the budget and parks in
//!   one critical section (`Condvar::wait` releases the lock atomically), and checks both
//!   again each time it wakes;
//! - the drain frees buffers and notifies every parked writer in one critical section;
//! - stopping raises `aborted` and notifies every parked writer in one critical section.
//!
//! So a writer has either seen the freed budget or `aborted` before it parks, or is parked
//! when the notification comes: no wakeup is lost. A woken writer takes budget only if its
//! buffer still fits, so the bytes allocated never exceed the budget, and once `aborted` is
//! raised every writer returns instead of parking (`NoBuffer::SessionEnded`).
//!
//! `tests/loom.rs` model-checks this through `crate::loom_model`.

use crate::buffer::Buffer;
use crate::sync::{lock, Arc, Condvar, Mutex};
use crate::threads::{ThreadProgress, ThreadSessionState, ThreadSnapshot, ThreadTable};

/// Guarded by the session's lock: the per-thread states, their buffers and the budget
/// they draw on.
#[derive(Debug, Default)]
struct Manager {
    threads: ThreadTable,
    /// Bytes of buffers currently allocated; at most the budget.
    used: usize,
    /// Buffers currently allocated.
    live_buffers: usize,
    /// Raised when the session ends: writers stop waiting for the budget.
    aborted: bool,
    /// Emptied buffers kept for the next writers that need one of their size: reusing
    /// one skips the allocator and the page faults of fresh memory (which the drain and
    /// the writers of a sustained run paid for ~8% of their time). Not counted in `used`,
    /// but `used` plus their bytes stays within the budget: a buffer joins them only as it
    /// leaves `used`, and a new allocation first frees spares as needed.
    spare: Spares,
}

/// The spare buffers and their bytes, the most recently emptied last.
#[derive(Debug, Default)]
struct Spares {
    buffers: Vec<Buffer>,
    bytes: usize,
}

impl Spares {
    /// The least recently emptied spare of exactly `size` bytes, if there is one. The
    /// drain has just read the most recent ones, so their lines sit in its core's caches,
    /// and a writer on another core would first have to take each line back from there;
    /// the older ones' lines have moved on to the shared cache, which hands them over
    /// cheaper. Measured (BENCHMARKS.md, the write path): one writer at a median 15.2 ns
    /// an event taking the oldest, 17.2 taking the newest, 12 interleaved pairs.
    fn take(&mut self, size: usize) -> Option<Buffer> {
        let i = self.buffers.iter().position(|b| b.capacity() == size)?;
        self.bytes -= size;
        Some(self.buffers.remove(i))
    }

    /// Frees the least recently emptied spare; false when there is none.
    fn free_one(&mut self) -> bool {
        if self.buffers.is_empty() {
            return false;
        }
        let b = self.buffers.remove(0);
        self.bytes -= b.capacity();
        true
    }

    fn push(&mut self, buffer: Buffer) {
        self.bytes += buffer.capacity();
        self.buffers.push(buffer);
    }

    fn len(&self) -> usize {
        self.buffers.len()
    }
}

/// Emptied buffers are kept for reuse up to this share of the budget (at least 16 of
/// them): a sustained run recycles buffers at the rate it writes, and every one handed
/// back to the allocator comes back as fresh pages to fault in.
const SPARE_SHARE_OF_BUDGET: usize = 4;
const MIN_SPARE_BUFFERS: usize = 16;

/// A grant that leaves more than this share of the budget, or more than
/// [`WAKE_AT_BYTES`], in use wakes the drain: early enough that a drain as fast as its
/// writers keeps what is in use within the spares (nothing goes back to the allocator) and
/// leaves the rest of the budget as slack for its slower moments, so Drop mode loses only
/// what the drain truly cannot keep up with.
const WAKE_SHARE_OF_BUDGET: usize = 8;
/// The in-use bytes that wake the drain whatever the budget: a writer whose drain keeps up
/// then cycles through about this much memory, the same buffers again and again, where an
/// eighth of a 64 MiB budget was 8 MiB of buffers (2,000 pages) each writer touched for
/// the first time. A first touch is a page fault, and on a VM that hands freed memory back
/// to its host a fault on the host as well (BENCHMARKS.md, the write path's slow mode);
/// a small set also stays in the caches the drain reads it from.
const WAKE_AT_BYTES: usize = 1 << 20;

/// A session's lock, the data it guards, and the condition Block-mode writers wait on.
#[derive(Debug)]
pub struct BufferManager {
    /// The session's one lock.
    state: Mutex<Manager>,
    /// Signalled, with the lock held, when buffers are freed or the session aborts.
    capacity: Condvar,
    /// Bytes all buffers together may take.
    budget: usize,
    /// Block mode: wait for the budget instead of dropping.
    block: bool,
}

/// Why a writer got no buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoBuffer {
    /// The budget is exhausted (Drop mode, or a record larger than the budget): the event
    /// is lost, counted, and leaves a gap in the thread's sequence numbers.
    Dropped,
    /// The session is ending (or has let this thread go): the event is not part of it.
    SessionEnded,
}

/// What the drain reclaimed after a pass.
#[derive(Debug)]
pub struct Reclaimed {
    /// Entries removed, with their last sequence numbers.
    pub removed: Vec<crate::threads::Removed>,
    /// Events dropped by the threads still held.
    #[cfg_attr(eventpipe_loom, allow(dead_code))] // read only by the drain's statistics
    pub dropped_live: u64,
}

/// What the manager holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub thread_states: usize,
    pub buffers: usize,
    pub bytes: usize,
    /// Emptied buffers kept for reuse.
    pub spare_buffers: usize,
}

impl Manager {
    fn spare_bytes(&self) -> usize {
        self.spare.bytes
    }
}

impl BufferManager {
    /// A manager handing out at most `budget` bytes of buffers; `block`: a writer that
    /// finds the budget spent waits for the drain to free a buffer (else it drops).
    pub fn new(budget: usize, block: bool) -> BufferManager {
        BufferManager {
            state: Mutex::new(Manager::default()),
            capacity: Condvar::new(),
            budget,
            block,
        }
    }

    /// Registers a writing thread.
    pub fn add_thread(&self, os_tid: u64, name: Option<String>) -> Arc<ThreadSessionState> {
        lock(&self.state).threads.add(os_tid, name)
    }

    /// Gets `thread` a buffer of `size` bytes within the budget: waits in Block mode, gives
    /// up in Drop mode or once the session aborts. `wake_drain` is called, with the lock
    /// held, before each wait and whenever a grant leaves more than an eighth of the budget,
    /// or more than `WAKE_AT_BYTES`, in use: the drain should be at work well before
    /// writers run out of buffers, and before they touch much memory for the first time.
    ///
    /// A loss (`NoBuffer::Dropped`) is recorded here, under the lock, with `seq` as the
    /// thread's published sequence number: the drain's last pass snapshots the table under
    /// the same lock after the abort, so every loss it can count is visible to it and every
    /// later attempt sees `aborted` and is refused as outside the session.
    pub fn acquire_buffer(
        &self,
        thread: &ThreadSessionState,
        size: usize,
        seq: u32,
        wake_drain: impl FnMut(),
    ) -> Result<Arc<Buffer>, NoBuffer> {
        self.acquire_buffer_at_least(thread, size, size, seq, wake_drain)
    }

    /// [`BufferManager::acquire_buffer`], content with a smaller buffer, down to `least`
    /// bytes (a power of two, at most `wanted`), when only that much of the budget is left:
    /// the budget is used up before a record is lost (Drop mode) or a writer waits (Block
    /// mode).
    pub fn acquire_buffer_at_least(
        &self,
        thread: &ThreadSessionState,
        wanted: usize,
        least: usize,
        seq: u32,
        mut wake_drain: impl FnMut(),
    ) -> Result<Arc<Buffer>, NoBuffer> {
        let least = least.min(wanted);
        let mut m = lock(&self.state);
        loop {
            if m.aborted || !m.threads.contains(thread.index) {
                return Err(NoBuffer::SessionEnded);
            }
            let fits_budget = least <= self.budget;
            // The largest power of two left of the budget, when the size wanted is not.
            let left = self.budget.saturating_sub(m.used);
            let size = if wanted <= left || left == 0 {
                wanted
            } else {
                wanted.min(1 << left.ilog2())
            };
            if fits_budget && size >= least && m.used + size <= self.budget {
                // A reused spare leaves in use and spare together as they were: within the
                // budget.
                let buffer = match m.spare.take(size) {
                    reused @ Some(_) => reused,
                    None => {
                        // Spares of other sizes give their memory back first, as needed to
                        // keep what is in use and spare within the budget.
                        while m.used + m.spare_bytes() + size > self.budget && m.spare.free_one() {}
                        Buffer::new(size)
                    }
                };
                let Some(buffer) = buffer.map(Arc::new) else {
                    thread.record_loss(seq);
                    return Err(NoBuffer::Dropped);
                };
                m.used += size;
                m.live_buffers += 1;
                m.threads.push_buffer(thread.index, Arc::clone(&buffer));
                if m.used > (self.budget / WAKE_SHARE_OF_BUDGET).min(WAKE_AT_BYTES) {
                    wake_drain();
                }
                return Ok(buffer);
            }
            if !self.block || !fits_budget {
                thread.record_loss(seq);
                return Err(NoBuffer::Dropped);
            }
            wake_drain();
            m = self.capacity.wait(m).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Drain: the thread table as this pass will read it, at most `max_buffers` buffers of
    /// each thread listed.
    pub fn snapshot(&self, max_buffers: usize) -> Vec<ThreadSnapshot> {
        lock(&self.state).threads.snapshot(max_buffers)
    }

    /// Drain, after a pass: frees the buffers it emptied (waking parked writers) and
    /// removes the threads it finished.
    pub fn apply(&self, progress: &[ThreadProgress]) -> Reclaimed {
        let mut m = lock(&self.state);
        let applied = m.threads.apply(progress);
        m.used -= applied.freed_bytes;
        m.live_buffers -= applied.freed_buffers;
        for buffer in applied.freed {
            // A buffer someone still holds (the drain's snapshot of this pass) is dropped
            // by its last holder instead.
            let keep = m.spare.len() < MIN_SPARE_BUFFERS
                || m.spare_bytes() + buffer.capacity() <= self.budget / SPARE_SHARE_OF_BUDGET;
            if keep {
                if let Ok(mut buffer) = Arc::try_unwrap(buffer) {
                    buffer.reset();
                    m.spare.push(buffer);
                }
            }
        }
        if applied.freed_buffers > 0 {
            self.capacity.notify_all();
        }
        Reclaimed {
            removed: applied.removed,
            dropped_live: applied.dropped_live,
        }
    }

    /// The session ends: every parked writer returns, and no writer parks again.
    pub fn abort(&self) {
        let mut m = lock(&self.state);
        m.aborted = true;
        self.capacity.notify_all();
    }

    /// What is held now.
    pub fn usage(&self) -> Usage {
        let m = lock(&self.state);
        Usage {
            thread_states: m.threads.len(),
            buffers: m.live_buffers,
            bytes: m.used,
            spare_buffers: m.spare.len(),
        }
    }
}

#[cfg(all(test, not(eventpipe_loom)))]
mod tests {
    use super::*;

    fn spare(size: usize) -> (Buffer, usize) {
        let b = Buffer::new(size).expect("allocate a buffer");
        let at = b.base().as_ptr() as usize;
        (b, at)
    }

    #[test]
    fn spares_are_reused_and_freed_oldest_first() {
        let mut spares = Spares::default();
        let (a, _) = spare(4096);
        let (b, b_at) = spare(8192);
        let (c, c_at) = spare(4096);
        let (d, d_at) = spare(4096);
        for buffer in [a, b, c, d] {
            spares.push(buffer);
        }
        assert_eq!(spares.bytes, 3 * 4096 + 8192);
        assert!(spares.free_one());
        assert_eq!(spares.len(), 3, "the oldest, `a`, is freed");
        let taken = spares.take(4096).expect("a 4 KiB spare");
        assert_eq!(
            taken.base().as_ptr() as usize,
            c_at,
            "the oldest of its size first"
        );
        let left: Vec<usize> = spares
            .buffers
            .iter()
            .map(|b| b.base().as_ptr() as usize)
            .collect();
        assert_eq!(left, vec![b_at, d_at]);
        assert_eq!(spares.bytes, 8192 + 4096);
        assert_eq!(
            spares.take(4096).map(|b| b.base().as_ptr() as usize),
            Some(d_at)
        );
        assert!(spares.take(4096).is_none());
    }

    /// The drain is woken once a grant leaves more than 1 MiB in use, however large the
    /// budget, or more than an eighth of a small one.
    #[test]
    fn grants_wake_the_drain_past_a_mebibyte_or_an_eighth_of_the_budget() {
        let granted_before_a_wake = |budget: usize, size: usize| {
            let manager = BufferManager::new(budget, false);
            let thread = manager.add_thread(1, None);
            let mut held = Vec::new();
            for grant in 1u32.. {
                let mut woken = false;
                let buffer = manager
                    .acquire_buffer(&thread, size, grant, || woken = true)
                    .expect("within the budget");
                held.push(buffer);
                if woken {
                    return grant as usize * size;
                }
            }
            unreachable!()
        };
        // In use past 1 MiB: the 17th 64 KiB buffer, of a 64 MiB budget.
        assert_eq!(
            granted_before_a_wake(64 << 20, 64 << 10),
            (1 << 20) + (64 << 10)
        );
        assert_eq!(
            granted_before_a_wake(1 << 30, 64 << 10),
            (1 << 20) + (64 << 10)
        );
        // An eighth of a 2 MiB budget is less: past 256 KiB.
        assert_eq!(
            granted_before_a_wake(2 << 20, 64 << 10),
            (256 << 10) + (64 << 10)
        );
    }
}
