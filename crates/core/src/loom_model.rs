//! The state machines under model in `tests/loom.rs`, exposed only to it: the buffer
//! hand-off (`buffer.rs`), per-thread state reclaim (`threads.rs`) and Block-mode park/abort
//! (`manager.rs`). Each wrapper forwards to the real code under loom's tracked primitives.

use crate::sync::Arc;
use crate::threads::Consumed;

/// The real [`Buffer`](crate::buffer::Buffer), every byte a tracked cell.
#[derive(Debug, Clone)]
pub struct Buffer(Arc<crate::buffer::Buffer>);

impl Buffer {
    /// A buffer of `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Buffer(Arc::new(
            crate::buffer::Buffer::new(capacity).expect("buffer"),
        ))
    }
    /// Writer: appends and publishes one record at `at`.
    ///
    /// # Safety
    /// Single writer; `at` is the last published end; the parts fit.
    pub unsafe fn append(&self, at: usize, parts: &[&[u8]]) -> usize {
        // SAFETY: forwarded from the caller.
        unsafe { self.0.append(at, parts) }
    }
    /// Writer: no more records.
    pub fn retire(&self) {
        self.0.retire()
    }
    /// Drain: whether the writer retired the buffer.
    pub fn is_retired(&self) -> bool {
        self.0.is_retired()
    }
    /// Drain: the published bytes from `from` on.
    pub fn read(&self, from: usize) -> Vec<u8> {
        self.0.read_copy(from)
    }
    /// Its size in bytes.
    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }
}

/// The real [`BufferManager`](crate::manager::BufferManager): the session's lock, its
/// thread table, budget and Block-mode parking.
#[derive(Debug)]
pub struct BufferManager(crate::manager::BufferManager);

/// A writer's [`ThreadSessionState`](crate::threads::ThreadSessionState).
#[derive(Debug, Clone)]
pub struct Thread(Arc<crate::threads::ThreadSessionState>);

/// Why a writer got no buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoBuffer {
    /// Lost and counted (Drop mode).
    Dropped,
    /// The session ended (or let the thread go).
    SessionEnded,
}

/// What one drain pass did.
#[derive(Debug, Default)]
pub struct Pass {
    /// Records read, per thread index. In the models a record is one byte, its sequence
    /// number.
    pub read: Vec<(u64, Vec<u8>)>,
    /// Each thread's sequence-point bound.
    pub bounds: Vec<(u64, u32)>,
    /// Threads removed: index, the last sequence number carried out, events dropped.
    pub removed: Vec<(u64, u32, u64)>,
}

impl BufferManager {
    /// A manager with a budget of `budget` bytes, in Block mode or Drop mode.
    pub fn new(budget: usize, block: bool) -> Self {
        BufferManager(crate::manager::BufferManager::new(budget, block))
    }
    /// Registers a writing thread.
    pub fn add_thread(&self) -> Thread {
        Thread(self.0.add_thread(0, None))
    }
    /// Writer: a buffer of `size` bytes for the event numbered `seq` (parks in Block
    /// mode).
    pub fn acquire_buffer(
        &self,
        thread: &Thread,
        size: usize,
        seq: u32,
    ) -> Result<Buffer, NoBuffer> {
        self.0
            .acquire_buffer(&thread.0, size, seq, || {})
            .map(Buffer)
            .map_err(|e| match e {
                crate::manager::NoBuffer::Dropped => NoBuffer::Dropped,
                crate::manager::NoBuffer::SessionEnded => NoBuffer::SessionEnded,
            })
    }
    /// Drain: one pass as `drain/mod.rs` makes it, without the output: snapshot, read
    /// each thread's one-byte records, apply (free emptied buffers, remove finished
    /// threads). At most `quota` records of each thread are read, the rest left for a
    /// later pass as the drain leaves records past its cutoff; at most `max_buffers` of
    /// each thread's buffers are listed, as the drain lists only the oldest.
    pub fn drain_pass(&self, quota: usize, max_buffers: usize) -> Pass {
        let mut pass = Pass::default();
        let mut progress = Vec::new();
        for thread in self.0.snapshot(max_buffers) {
            let mut read = Vec::new();
            let p = thread.read(|bytes| {
                let n = bytes.len().min(quota - read.len());
                read.extend_from_slice(&bytes[..n]);
                Consumed {
                    bytes: n,
                    last_seq: bytes[..n].last().map(|&b| u32::from(b)),
                    left: bytes.get(n).map(|&b| u32::from(b)),
                }
            });
            pass.read.push((thread.state.index, read));
            pass.bounds.push((thread.state.index, p.bound));
            progress.push(p);
        }
        let reclaimed = self.0.apply(&progress);
        pass.removed = reclaimed
            .removed
            .iter()
            .map(|r| (r.index, r.last_seq, r.dropped))
            .collect();
        pass
    }
    /// Stop: release every parked writer.
    pub fn abort(&self) {
        self.0.abort()
    }
    /// Thread states, buffers and bytes held.
    pub fn usage(&self) -> (usize, usize, usize) {
        let u = self.0.usage();
        (u.thread_states, u.buffers, u.bytes)
    }
}

impl Thread {
    /// The thread's index in the table.
    pub fn index(&self) -> u64 {
        self.0.index
    }
    /// Writer: appends the one-byte record `seq` at `at` and publishes it, as
    /// `writer.rs` does (begin, append, commit). Returns the new end.
    ///
    /// # Safety
    /// As [`Buffer::append`]: this thread is the buffer's single writer, `at` its
    /// published end, and one more byte fits.
    pub unsafe fn write(&self, buffer: &Buffer, at: usize, seq: u8) -> usize {
        self.0.begin_record();
        // SAFETY: forwarded from the caller.
        let end = unsafe { buffer.0.append(at, &[&[seq]]) };
        self.0.commit_record(u32::from(seq));
        end
    }
    /// Writer: the thread exits, retiring `current`.
    pub fn exit(&self, current: Option<Buffer>) {
        self.0.exit(current.map(|b| b.0))
    }
}
