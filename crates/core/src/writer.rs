//! The write path: from an enabled event to a record in the calling thread's own buffer.
//!
//! Each thread keeps, per session slot, its [`ThreadSessionState`] and its current buffer in
//! a thread-local. Writing takes no lock and performs no read-modify-write on memory another
//! thread writes: it stamps the record, appends it to the buffer (SPSC, see `buffer.rs`) and
//! publishes the sequence number. The session lock is taken only to get a new buffer.
//! The records' layout is `record.rs`'s.

use std::cell::{Cell, RefCell};
use std::ptr::NonNull;

use crate::buffer::{self, Buffer};
use crate::clock;
use crate::manager::NoBuffer;
use crate::provider::EventDescriptor;
use crate::recording::SessionShared;
use crate::registry::{self, MAX_SESSIONS};
use crate::stack::CapturedStack;
use crate::sync::{Arc, Ordering};
use crate::threads::ThreadSessionState;

use crate::record::{FLAG_ACTIVITY, FLAG_STACK, FLAG_SUBJECT, RECORD_HEADER};

struct WriterSlot {
    session: Arc<SessionShared>,
    state: Arc<ThreadSessionState>,
    buffer: Option<Arc<Buffer>>,
    /// `buffer`'s first byte, kept here so the short path reaches it without going through
    /// the `Arc` (dangling while there is no buffer, when `short_limit` is 0).
    base: NonNull<u8>,
    /// How far into `buffer` the short path may write: its capacity, or 0 when the short
    /// path must not write at all (no buffer, a session that wants stacks, which only the
    /// general path captures, or timestamps that are not the TSC, which the short path
    /// reads with no check). One comparison rules out every case it cannot take.
    short_limit: usize,
    /// Where the next record goes in `buffer` (equals its published end).
    end: usize,
    /// The last sequence number assigned (committed or dropped).
    seq: u32,
    /// Buffers this thread has obtained, which sets the size of the next one.
    buffers_acquired: u32,
}

impl WriterSlot {
    fn new(session: Arc<SessionShared>, state: Arc<ThreadSessionState>) -> WriterSlot {
        WriterSlot {
            session,
            state,
            buffer: None,
            base: NonNull::dangling(),
            short_limit: 0,
            end: 0,
            seq: 0,
            buffers_acquired: 0,
        }
    }

    /// Moves on to `fresh` (none: to no buffer), retiring the current buffer.
    fn replace_buffer(&mut self, fresh: Option<Arc<Buffer>>) {
        if let Some(full) = self.buffer.take() {
            full.retire();
        }
        self.end = 0;
        match fresh {
            Some(b) => {
                self.base = b.base();
                let short = !self.session.stacks && clock::is_tsc();
                self.short_limit = if short { b.capacity() } else { 0 };
                self.buffers_acquired += 1;
                self.buffer = Some(b);
            }
            None => {
                self.base = NonNull::dangling();
                self.short_limit = 0;
            }
        }
    }

    /// This thread is done with the session: the drain may reclaim the state once it has
    /// read the remaining records.
    fn release(&mut self) {
        self.short_limit = 0;
        self.state.exit(self.buffer.take());
    }
}

struct WriterThread {
    slots: RefCell<[Option<WriterSlot>; MAX_SESSIONS]>,
    os_tid: u64,
    name: Option<String>,
}

impl Drop for WriterThread {
    fn drop(&mut self) {
        SHORT_PATH_WRITER.set(std::ptr::null());
        for slot in self.slots.get_mut().iter_mut().flatten() {
            slot.release();
        }
    }
}

thread_local! {
    static WRITER: WriterThread = WriterThread {
        slots: RefCell::new([const { None }; MAX_SESSIONS]),
        os_tid: current_os_tid(),
        name: std::thread::current().name().map(str::to_string),
    };
}

thread_local! {
    /// This thread's `WRITER` from its first write until its destructor starts, null
    /// otherwise: the short path's way to it. A constant-initialised pointer with no
    /// destructor is one `%fs`-relative load; `WRITER` itself, having a destructor, also
    /// checks its state and may call out to register it, and a call would cost the short
    /// path its leaf-function shape (no stack frame, no saved registers).
    static SHORT_PATH_WRITER: Cell<*const WriterThread> = const { Cell::new(std::ptr::null()) };
}

/// The calling thread's OS thread id (`gettid` on Linux, `pthread_threadid_np` on macOS,
/// `GetCurrentThreadId` on Windows).
pub fn current_os_tid() -> u64 {
    crate::platform::current_os_tid()
}

/// A stack the caller captured for its event (a profiler's sample), encoded as the trace
/// stores IPs, and the thread the event is about when not the writer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GivenStack<'a> {
    pub stack: &'a [u8],
    pub subject: Option<u64>,
}

/// Writes one event to every session in `mask`: with the caller's stack when `given`,
/// else with a stack captured here for the sessions that ask for stacks.
pub(crate) fn write_event(
    event: &'static EventDescriptor,
    mask: u64,
    payload: &[u8],
    activity: Option<(crate::Guid, crate::Guid)>,
    given: Option<GivenStack<'_>>,
) {
    let Some(index) = event.index() else { return };
    // A write from a thread-local destructor after ours is gone, or a write from inside a
    // write (an allocator hook, say), is dropped rather than recursing or panicking.
    let _ = WRITER.try_with(|w| {
        SHORT_PATH_WRITER.set(w);
        let Ok(mut slots) = w.slots.try_borrow_mut() else {
            return;
        };
        // Captured at most once per event, the first time a session wants it.
        let mut captured: Option<CapturedStack> = None;
        let mut bits = mask;
        while bits != 0 {
            let slot = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let Some(entry) = slots.get_mut(slot) else {
                continue;
            };
            if given.is_none() && activity.is_none() {
                if let Some(s) = entry {
                    if append_plain(s, index, payload) {
                        continue;
                    }
                }
            }
            let (stack, subject) = match given {
                Some(g) => (Some(g.stack), g.subject),
                None => {
                    let wants_stack = match entry {
                        Some(s) => s.session.stacks,
                        None => registry::session_in(slot).is_some_and(|s| s.stacks),
                    };
                    if wants_stack && captured.is_none() {
                        captured = Some(CapturedStack::capture());
                    }
                    let stack = captured.as_ref().filter(|_| wants_stack);
                    (stack.map(CapturedStack::as_bytes), None)
                }
            };
            let record = Record {
                payload,
                activity,
                subject,
                stack,
            };
            write_to_slot(entry, slot, w, index, record);
        }
    });
}

/// [`write_event`] of a payload alone (no activity ids, no given stack), with the common
/// case (one session, a plain record with room in the buffer) in a short function of its
/// own, which the general one's argument handling and stack frame would otherwise slow.
#[inline]
pub(crate) fn write_plain_event(event: &'static EventDescriptor, mask: u64, payload: &[u8]) {
    if !on_short_path(event, mask, |s, index| append_plain(s, index, payload)) {
        write_event(event, mask, payload, None, None);
    }
}

/// The short path of a `write_event!` whose fields all have a fixed size: `encode` writes
/// the `size` bytes of payload straight into the buffer, with no staging copy. Returns
/// whether the event is dealt with; if not, the caller takes [`write_fixed_general`],
/// which it keeps in a cold function of its own with its staging buffer and stack frame.
#[inline(always)]
pub(crate) fn write_fixed_short(
    event: &'static EventDescriptor,
    mask: u64,
    size: usize,
    encode: impl FnOnce(&mut [u8]),
) -> bool {
    on_short_path(event, mask, |s, index| append_short(s, index, size, encode))
}

/// What [`write_fixed_short`] left: the payload staged on the stack, then the general
/// path (which still appends straight to a session's buffer where it can). The short path
/// is not tried again: it has just declined this event.
#[inline(always)]
pub(crate) fn write_fixed_general(
    event: &'static EventDescriptor,
    mask: u64,
    size: usize,
    encode: impl FnOnce(&mut [u8]),
) {
    let mut staged = [0u8; MAX_FIXED_PAYLOAD];
    let payload = &mut staged[..size.min(MAX_FIXED_PAYLOAD)];
    encode(payload);
    write_event(event, mask, payload, None, None);
}

/// Offers the event to `append` with this thread's slot for the one session in `mask`;
/// returns whether the event is dealt with (appended, or dropped as a write from inside a
/// write or from a dying thread would be). False: the general path must take it.
#[inline(always)]
fn on_short_path(
    event: &'static EventDescriptor,
    mask: u64,
    append: impl FnOnce(&mut WriterSlot, u32) -> bool,
) -> bool {
    if !mask.is_power_of_two() {
        return false;
    }
    let writer = SHORT_PATH_WRITER.get();
    if writer.is_null() {
        return false;
    }
    // A non-null `SHORT_PATH_WRITER` is set by `write_event` from inside `WRITER.try_with`
    // (initialised, at the address it keeps until the thread ends) and cleared first thing
    // in its destructor. Only this thread reads it; `WriterThread` is used through `&` only.
    // SAFETY: so it points to this thread's live `WRITER`.
    let w = unsafe { &*writer };
    let Some(index) = event.index() else {
        return true;
    };
    let Ok(mut slots) = w.slots.try_borrow_mut() else {
        // A write from inside a write: dropped, as `write_event` would.
        return true;
    };
    match slots.get_mut(mask.trailing_zeros() as usize) {
        Some(Some(s)) => append(s, index),
        _ => false,
    }
}

/// The largest payload [`write_fixed_general`] stages.
pub(crate) const MAX_FIXED_PAYLOAD: usize = 256;

/// The common case, kept short: a record with nothing but a payload, into a buffer with
/// room, for a session that wants no stacks. Returns false, having done nothing, when the
/// general path must handle the record.
#[inline(always)]
fn append_plain(s: &mut WriterSlot, index: u32, payload: &[u8]) -> bool {
    append_short(s, index, payload.len(), |dst| {
        buffer::copy_payload(dst, payload)
    })
}

/// The short path's checks and bookkeeping around a record of a header and `payload_len`
/// bytes of payload, which `write_payload` writes in place.
#[inline(always)]
fn append_short(
    s: &mut WriterSlot,
    index: u32,
    payload_len: usize,
    write_payload: impl FnOnce(&mut [u8]),
) -> bool {
    let len = RECORD_HEADER + payload_len;
    let at = s.end;
    if at + len > s.short_limit || !s.session.active.load(Ordering::Relaxed) {
        return false;
    }
    let Some(buffer) = s.buffer.as_deref() else {
        return false;
    };
    // The payload goes first, before the write counts as begun: its sources are then dead
    // by the clock read (`rdtsc` takes two registers), and the drain has nothing to wait
    // for while it is encoded.
    // `s.base` is kept with `s.buffer` by `replace_buffer`; a non-zero `short_limit` is
    // the buffer's capacity, so the record fits.
    // SAFETY: this thread is the buffer's only writer, `s.base` its base, `at` its end.
    let end = unsafe { buffer::write_payload(s.base, at, payload_len, write_payload) };
    let seq = s.seq.wrapping_add(1);
    s.seq = seq;
    s.state.begin_record();
    // A non-zero `short_limit` also means the timestamps are the TSC.
    let header = record_head(len, index, seq, 0, clock::now_tsc());
    // SAFETY: as for the payload, the header of the same record.
    unsafe { buffer::write_header(s.base, at, header) };
    // SAFETY: as above; every byte below `end` is written.
    unsafe { buffer.publish(end) };
    s.end = end;
    s.state.commit_record(seq);
    true
}

/// The fixed head of every record (see the module docs) as three little-endian words,
/// which the short path stores straight from registers.
#[inline(always)]
fn record_head(len: usize, index: u32, seq: u32, flags: u32, timestamp: i64) -> [u64; 3] {
    [
        len as u64 | u64::from(index) << 32,
        u64::from(seq) | u64::from(flags) << 32,
        timestamp as u64,
    ]
}

/// What one event record holds besides its header.
#[derive(Clone, Copy)]
struct Record<'a> {
    payload: &'a [u8],
    activity: Option<(crate::Guid, crate::Guid)>,
    /// The OS id of the thread the event is about, when not this one.
    subject: Option<u64>,
    /// The encoded stack, when the record carries one.
    stack: Option<&'a [u8]>,
}

#[inline]
fn write_to_slot(
    entry: &mut Option<WriterSlot>,
    slot: usize,
    thread: &WriterThread,
    index: u32,
    record: Record<'_>,
) {
    let Record {
        payload,
        activity,
        subject,
        stack,
    } = record;
    if !entry
        .as_ref()
        .is_some_and(|s| s.session.active.load(Ordering::Relaxed))
    {
        attach(entry, slot, thread);
    }
    let Some(s) = entry.as_mut() else { return };
    let activity_bytes: [u8; 32];
    let activity_part: &[u8] = match activity {
        Some((a, r)) => {
            let mut b = [0u8; 32];
            b[..16].copy_from_slice(&a.0);
            b[16..].copy_from_slice(&r.0);
            activity_bytes = b;
            &activity_bytes
        }
        None => &[],
    };
    let subject_bytes = subject.unwrap_or(0).to_le_bytes();
    let subject_part: &[u8] = if subject.is_some() {
        &subject_bytes
    } else {
        &[]
    };
    let stack_part = stack.unwrap_or(&[]);
    let stack_len = (stack_part.len() as u32).to_le_bytes();
    let stack_len_part: &[u8] = if stack.is_some() { &stack_len } else { &[] };
    let len = RECORD_HEADER
        + activity_part.len()
        + subject_part.len()
        + stack_len_part.len()
        + stack_part.len()
        + payload.len();
    s.seq = s.seq.wrapping_add(1);
    let seq = s.seq;
    let fits = s
        .buffer
        .as_ref()
        .is_some_and(|b| s.end + len <= b.capacity());
    if !fits {
        s.replace_buffer(None);
        match s
            .session
            .acquire_buffer(&s.state, len, s.buffers_acquired, seq)
        {
            Ok(fresh) => s.replace_buffer(Some(fresh)),
            // Counted and published by `acquire_buffer`.
            Err(NoBuffer::Dropped) => return,
            Err(NoBuffer::SessionEnded) => {
                // Not part of the session: leave no gap in the sequence numbers.
                s.seq = seq.wrapping_sub(1);
                return;
            }
        }
    }
    let Some(buffer) = s.buffer.as_ref() else {
        return;
    };
    let mut flags = if activity.is_some() { FLAG_ACTIVITY } else { 0 };
    if stack.is_some() {
        flags |= FLAG_STACK;
    }
    if subject.is_some() {
        flags |= FLAG_SUBJECT;
    }
    s.state.begin_record();
    let mut header = [0u8; RECORD_HEADER];
    let head = record_head(len, index, seq, flags, clock::now());
    for (bytes, word) in header.chunks_exact_mut(8).zip(head) {
        bytes.copy_from_slice(&word.to_le_bytes());
    }
    // SAFETY: this thread is the buffer's only writer, `s.end` is its published end, and
    // the record fits (checked above or the buffer was sized for it).
    s.end = unsafe {
        buffer.append(
            s.end,
            &[
                &header,
                activity_part,
                subject_part,
                stack_len_part,
                stack_part,
                payload,
            ],
        )
    };
    s.state.commit_record(seq);
}

/// Attaches this thread to the session now in `slot`, releasing any stale one.
#[cold]
#[inline(never)]
fn attach(entry: &mut Option<WriterSlot>, slot: usize, thread: &WriterThread) {
    if let Some(mut stale) = entry.take() {
        stale.release();
    }
    let Some(session) = registry::session_in(slot) else {
        return;
    };
    if !session.active.load(Ordering::Relaxed) {
        return;
    }
    let state = session.add_thread(thread.os_tid, thread.name.clone());
    *entry = Some(WriterSlot::new(session, state));
}
