//! Per-thread record buffers: written by their own thread with no lock, flushed as one
//! `AsyncBuffer` event when full, and by the background flusher when idle, when their thread
//! has exited (then reclaimed), or when a session ends.
//!
//! # Ownership of a buffer
//! A buffer's contents (`Inner`) are touched by its owner thread on every record and, rarely,
//! by another thread (the flusher, a stopping session): a [`Handoff`] decides who, and
//! documents the protocol. An outsider holds the buffer across its event write, so the
//! owner's next buffer (higher `Sequence`) cannot reach the trace first; in a Block-mode
//! session the owner then waits until the reader makes room. `tests/futures.rs` races outside
//! flushes against writers through this module; `tests/loom.rs` model-checks the hand-off.

use std::cell::{Cell, OnceCell};
use std::sync::{Arc, Mutex};

use crate::sync::{AtomicU64, Ordering};

use super::encode::{Encoder, Event, MAX_RECORD};
use super::handoff::Handoff;
use super::{config, emit_buffer};

pub(crate) struct ThreadBuffer {
    os_tid: u64,
    /// The records, with who holds them. Marked exited by the owner's thread-local
    /// destructor; the flusher then drains and drops the buffer.
    inner: Handoff<Inner>,
}

struct Inner {
    bytes: Box<[u8]>,
    enc: Encoder,
    base_ts: i64,
    /// Timestamp of the last record, for idle detection.
    last_ts: i64,
    /// Buffers of this thread emitted so far.
    sequence: u32,
    /// The configuration (see [`config`]) this buffer was started under.
    config: u64,
    /// The open polls of this thread, outermost first: (context, frame).
    poll_stack: Vec<(u64, u32)>,
}

/// Every live thread's buffer, for the flusher and for stopping sessions.
static THREADS: Mutex<Vec<Arc<ThreadBuffer>>> = Mutex::new(Vec::new());

struct Owner(Arc<ThreadBuffer>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.inner.mark_exited();
        if !config::is_recording(config::current()) {
            // No session will want what is left: reclaim now rather than at the next
            // session's first flusher visit.
            let mut threads = THREADS.lock().unwrap_or_else(|p| p.into_inner());
            threads.retain(|b| !Arc::ptr_eq(b, &self.0));
        }
    }
}

thread_local! {
    static OWNER: OnceCell<Owner> = const { OnceCell::new() };
    /// The next context id of this thread's block, and the block's end.
    static IDS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    /// The innermost recorded poll's context on this thread (0: none), for the CPU sampler's
    /// signal handler. An atomic so the handler, which interrupts this thread anywhere, reads
    /// a whole value; the owner is its only writer.
    static CURRENT_CONTEXT: AtomicU64 = const { AtomicU64::new(0) };
}

/// The context innermost in a poll on this thread, or 0. Async-signal-safe: a const
/// thread-local with no destructor and one relaxed load.
pub(crate) fn current_context() -> u64 {
    // Relaxed: a whole value is all the handler needs; it interrupts the only writer.
    CURRENT_CONTEXT
        .try_with(|c| c.load(Ordering::Relaxed))
        .unwrap_or(0)
}

/// A fresh context id, from this thread's block (one shared counter bump per 4096 ids).
pub(crate) fn next_context_id() -> u64 {
    static NEXT_BLOCK: AtomicU64 = AtomicU64::new(1);
    const BLOCK: u64 = 4096;
    IDS.try_with(|ids| {
        let (next, end) = ids.get();
        let (next, end) = if next < end {
            (next, end)
        } else {
            // Relaxed: blocks need only be distinct, which the RMW guarantees; no other
            // memory is published through the counter.
            let start = NEXT_BLOCK.fetch_add(BLOCK, Ordering::Relaxed);
            (start, start + BLOCK)
        };
        ids.set((next + 1, end));
        next
    })
    // During thread teardown: an id of its own from the shared counter.
    // Relaxed: as above.
    .unwrap_or_else(|_| NEXT_BLOCK.fetch_add(1, Ordering::Relaxed))
}

/// What a record does to the poll stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StackEffect {
    None,
    Push(u64, u32),
    Pop,
}

/// Records `event` on this thread's buffer at `ts`, applying `effect` to the poll stack
/// even when the record itself cannot be written (recording stopped between a Resume and its
/// Suspend: the stack must still unwind). Returns false when this thread has no buffer
/// (thread teardown).
pub(crate) fn record(ts: i64, event: Event, effect: StackEffect) -> bool {
    OWNER
        .try_with(|owner| {
            let owner = owner.get_or_init(register_this_thread);
            owner.0.write(ts, event, effect);
        })
        .is_ok()
}

fn register_this_thread() -> Owner {
    let os_tid = eventpipe_core::current_os_tid();
    let buffer = Arc::new(ThreadBuffer {
        os_tid,
        inner: Handoff::new(Inner {
            bytes: Box::new([]),
            enc: Encoder::default(),
            base_ts: 0,
            last_ts: 0,
            sequence: 0,
            config: 0,
            poll_stack: Vec::new(),
        }),
    });
    THREADS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Arc::clone(&buffer));
    Owner(buffer)
}

impl ThreadBuffer {
    /// The owner's write: claim, check the configuration, append, release.
    fn write(&self, ts: i64, event: Event, effect: StackEffect) {
        let os_tid = self.os_tid;
        let write = |inner: &mut Inner| {
            let current = config::current();
            if inner.config != current {
                inner.reconfigure(os_tid, current);
            }
            if config::is_recording(current) {
                inner.append(os_tid, ts, event);
            }
            match effect {
                StackEffect::None => {}
                StackEffect::Push(ctx, frame) => inner.poll_stack.push((ctx, frame)),
                StackEffect::Pop => {
                    inner.poll_stack.pop();
                }
            }
            let innermost = inner.poll_stack.last().map_or(0, |&(ctx, _)| ctx);
            // Relaxed: the owner is the only writer; the signal handler that reads it runs on
            // this thread.
            let _ = CURRENT_CONTEXT.try_with(|c| c.store(innermost, Ordering::Relaxed));
        };
        // SAFETY: called only through `OWNER`, this thread's thread-local: its one owner;
        // `write` records nothing of this profiler (it emits an eventpipe event), so no re-entry.
        unsafe { self.inner.as_owner(write) }
    }

    /// Emits the buffer's records from another thread (attributed to the owner), holding
    /// the buffer meanwhile so the owner's next buffer cannot reach the trace before this one.
    /// `wait`: wait for a record in progress (a stopping session); otherwise a buffer being
    /// written is skipped. `only_idle_since`: only if its last record is older than that.
    fn flush_from_outside(&self, wait: bool, only_idle_since: Option<i64>) {
        self.inner.as_outsider(wait, |inner| {
            let idle = only_idle_since.is_none_or(|since| inner.last_ts <= since);
            if idle && inner.enc.len > 0 && config::is_recording(inner.config) {
                inner.emit(Some(self.os_tid), self.os_tid);
            }
        });
    }
}

impl Inner {
    /// A configuration change reached this writer: the records so far go out (they belong
    /// to the sessions that were recording, if any), and the buffer takes the new size.
    #[cold]
    fn reconfigure(&mut self, os_tid: u64, new: u64) {
        if config::is_recording(self.config) && self.enc.len > 0 {
            self.emit(None, os_tid);
        }
        self.enc.reset(0);
        // Not recording: give the memory back until a session starts.
        let size = if config::is_recording(new) {
            config::buffer_size(new)
        } else {
            0
        };
        if self.bytes.len() != size {
            self.bytes = vec![0u8; size].into_boxed_slice();
        }
        self.config = new;
    }

    #[inline]
    fn append(&mut self, os_tid: u64, ts: i64, event: Event) {
        if self.enc.len == 0 {
            self.start(ts);
        } else if !self.enc.fits(&self.bytes, MAX_RECORD) {
            self.emit(None, os_tid);
            self.start(ts);
        }
        if self.enc.fits(&self.bytes, MAX_RECORD) {
            self.enc.record(&mut self.bytes, ts, event);
            self.last_ts = ts;
        }
    }

    /// Begins a buffer at `ts`, with the open polls first so it decodes on its own: as many
    /// of the outermost as fit beside one record (all of them, up to 64, in any buffer of
    /// 2 KiB or more).
    fn start(&mut self, ts: i64) {
        self.enc.reset(ts);
        self.base_ts = ts;
        if !self.poll_stack.is_empty() {
            let room = self.bytes.len().saturating_sub(MAX_RECORD);
            let fit = room.saturating_sub(Encoder::stack_bytes(0)) / Encoder::STACK_ENTRY_BYTES;
            let entries = self.poll_stack.len().min(fit);
            self.enc
                .stack(&mut self.bytes, ts, &self.poll_stack[..entries]);
        }
    }

    /// Emits the records and starts over: from the owner's thread (`about: None`) or from
    /// another, attributed to the owner.
    fn emit(&mut self, about: Option<u64>, os_tid: u64) {
        let records = &self.bytes[..self.enc.len];
        emit_buffer(about, os_tid, self.sequence, self.base_ts, records);
        self.sequence = self.sequence.wrapping_add(1);
        self.enc.reset(0);
    }
}

/// Emits every buffer that has records (a session is ending: it must get them all), waiting
/// for records in progress.
pub(crate) fn flush_all() {
    for buffer in snapshot() {
        buffer.flush_from_outside(true, None);
    }
}

/// The flusher's visit: emits buffers idle since `idle_since`, and drains and forgets the
/// buffers of exited threads. Returns how many buffers remain registered.
pub(crate) fn flush_idle_and_reclaim(idle_since: i64) -> usize {
    let mut drained_exited: Vec<*const ThreadBuffer> = Vec::new();
    for buffer in snapshot() {
        if buffer.inner.has_exited() {
            // The owner is gone, so nothing writes: waiting cannot block.
            buffer.flush_from_outside(true, None);
            drained_exited.push(Arc::as_ptr(&buffer));
        } else {
            buffer.flush_from_outside(false, Some(idle_since));
        }
    }
    let mut threads = THREADS.lock().unwrap_or_else(|p| p.into_inner());
    threads.retain(|b| !drained_exited.contains(&Arc::as_ptr(b)));
    threads.len()
}

/// The registered buffers, copied out so that flushing (which may wait for a writer, or in
/// a Block-mode session for the reader) holds no registry lock a new thread would need.
fn snapshot() -> Vec<Arc<ThreadBuffer>> {
    THREADS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// How many thread buffers are registered (for tests of reclamation).
pub(crate) fn registered_threads() -> usize {
    THREADS.lock().unwrap_or_else(|p| p.into_inner()).len()
}
