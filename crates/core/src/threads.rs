//! Per-thread session state and its lifetime.
//!
//! A thread that writes to a session gets a [`ThreadSessionState`], shared with the drain,
//! and an entry in the session's [`ThreadTable`] holding that state together with the
//! thread's buffer list. The table lives under the session's one lock (`manager.rs`), so the
//! state and its buffers are created together ([`ThreadTable::add`]) and removed together
//! ([`ThreadTable::apply`]). The scheme, in the order things happen:
//!
//! - **Writer** (the owning thread, no lock): per event, [`ThreadSessionState::begin_record`],
//!   append to the current buffer, [`ThreadSessionState::commit_record`]. A new buffer is
//!   pushed onto the entry under the lock before anything goes into it, and a lost event is
//!   recorded under the lock ([`ThreadSessionState::record_loss`]); both happen in
//!   `BufferManager::acquire_buffer`. At thread exit, [`ThreadSessionState::exit`] retires the
//!   current buffer and then sets `exited` (Release): nothing of the thread's comes after it.
//! - **Drain, each pass**: [`ThreadTable::snapshot`], under the lock, copies each entry's
//!   buffer list and loads `exited`, then the published sequence number. Without the lock,
//!   [`ThreadSnapshot::read`] reads the listed buffers oldest first; a buffer seen retired
//!   and read to its end counts as emptied. [`ThreadTable::apply`], under the lock again, pops
//!   the emptied buffers and removes each entry that had exited at the snapshot and whose
//!   every buffer this pass emptied.
//!
//! **Nothing is lost.** `exited` seen under the lock means no buffer will be pushed again
//! (pushes happen under the same lock, before `exited` is set) and every record and loss of
//! the thread is visible; a pass that emptied every listed buffer has read every record. An
//! entry that exits after the snapshot waits for the next pass. Only the drain removes
//! entries, and a removed entry is gone from the table, so removal happens once.
//!
//! **The last sequence number is carried.** A pass's sequence-point bound for a thread
//! ([`ThreadProgress::bound`]) is one before the first record it left behind, or else the
//! later of the published number loaded at the snapshot and the last record read (only the
//! last record read when the snapshot lists just the oldest of the thread's buffers, as the
//! drain's do: the published number may then be a record's in an unlisted buffer). Loaded
//! under the lock, the published number covers only records in listed buffers (a later
//! buffer is pushed under the lock after the snapshot, and all in it is published after
//! that) and losses recorded before the snapshot, so a bound never overtakes a record still
//! to come. Loaded after `exited`, it is the thread's last number: the pass that removes the
//! entry has it as the thread's bound, and the drain carries it out: in V5 in that pass's
//! sequence point, written before the removal and forced when the thread lost events (else
//! the reader saw the number on the thread's last event), in V6 in the RemoveThread block
//! written with [`Removed::last_seq`].
//!
//! `tests/loom.rs` model-checks this through `crate::loom_model`.

use std::collections::{BTreeMap, VecDeque};

use crate::buffer::Buffer;
use crate::sync::{yield_now, Arc, AtomicBool, AtomicU32, AtomicU64, Ordering};

/// What one thread shares with the drain for one session.
#[derive(Debug)]
pub struct ThreadSessionState {
    /// Session-local thread index (V6 thread table index).
    pub index: u64,
    /// OS thread id.
    #[cfg_attr(eventpipe_loom, allow(dead_code))] // read only by the drain, not modelled
    pub os_tid: u64,
    /// Thread name, if it has one.
    #[cfg_attr(eventpipe_loom, allow(dead_code))] // as above
    pub name: Option<String>,
    /// What the owner writes on every event, on a cache line of its own: the fields above,
    /// which the drain reads, stay clean in its cache.
    hot: WrittenPerEvent,
    /// Set (Release) by [`ThreadSessionState::exit`] after retiring the current buffer.
    exited: AtomicBool,
    /// Events this thread dropped (written by the owner, under the manager lock; read by
    /// the drain under the same lock).
    dropped: AtomicU64,
}

#[derive(Debug)]
#[repr(align(64))]
struct WrittenPerEvent {
    /// The highest sequence number whose event is committed or dropped. Written by the
    /// owning thread (Release, after the commit or, under the lock, the drop); read by the
    /// drain (Acquire) under the lock at its snapshot.
    published_seq: AtomicU32,
    /// Set by the owner between taking a timestamp and committing the record. The drain
    /// waits for it to clear before reading, so no event older than its cutoff is missed.
    in_flight: AtomicBool,
}

impl ThreadSessionState {
    /// Writer: a record is about to be stamped and appended.
    #[inline]
    pub fn begin_record(&self) {
        // Relaxed: the drain only waits for the flag to clear; a store that becomes visible
        // after the clock read is covered by the drain's cutoff margin (drain/mod.rs).
        self.hot.in_flight.store(true, Ordering::Relaxed);
    }

    /// Writer: the record numbered `seq` is appended (committed in its buffer).
    #[inline]
    pub fn commit_record(&self, seq: u32) {
        // Release: orders the buffer commit before it; pairs with the Acquire in `snapshot`.
        self.hot.published_seq.store(seq, Ordering::Release);
        // Release: pairs with the drain's Acquire in `ThreadSnapshot::read`, so a drain that
        // sees the write finished also sees its record.
        self.hot.in_flight.store(false, Ordering::Release);
    }

    /// Writer, with the session lock held: the event numbered `seq` is lost.
    pub fn record_loss(&self, seq: u32) {
        // Relaxed: only the owner writes the counter, always under the lock, and the drain
        // reads it under the lock, which orders both; a plain load and store suffice.
        let dropped = self.dropped.load(Ordering::Relaxed);
        self.dropped.store(dropped + 1, Ordering::Relaxed);
        // Release: pairs with the drain's Acquire; the gap in sequence numbers is how the
        // trace's reader counts this loss.
        self.hot.published_seq.store(seq, Ordering::Release);
    }

    /// Writer: this thread is done with the session, `current` (its buffer, if any) gets no
    /// more records. The drain removes the state once it has read the rest.
    pub fn exit(&self, current: Option<Arc<Buffer>>) {
        if let Some(buffer) = current {
            buffer.retire();
        }
        // Release: every commit, loss and retire of this thread happens-before the drain's
        // Acquire of `exited` in `snapshot`.
        self.exited.store(true, Ordering::Release);
    }
}

/// One thread's entry: its state and its buffers, which live and die together.
#[derive(Debug)]
struct ThreadEntry {
    state: Arc<ThreadSessionState>,
    /// Oldest first; the writer's `acquire_buffer` appends to the back, the drain pops
    /// from the front.
    buffers: VecDeque<Arc<Buffer>>,
    /// Drain's read position in the front buffer.
    read_pos: usize,
    /// Whether the output has described this thread yet (V6 thread block).
    announced: bool,
    /// The sequence-point bound the last pass found.
    bound: u32,
}

/// The per-thread states of a session, by thread index. Guarded by the session's lock.
#[derive(Debug, Default)]
pub(crate) struct ThreadTable {
    /// A B-tree, not a hash map: passes visit threads in index order, the same order every
    /// time (the loom models rely on that determinism).
    entries: BTreeMap<u64, ThreadEntry>,
    next_index: u64,
}

/// One thread as a drain pass sees it, copied under the lock.
#[derive(Debug)]
pub struct ThreadSnapshot {
    /// The thread.
    pub state: Arc<ThreadSessionState>,
    buffers: Vec<Arc<Buffer>>,
    read_pos: usize,
    /// The output has yet to describe this thread.
    #[cfg_attr(eventpipe_loom, allow(dead_code))] // read only by the drain's output
    pub announce: bool,
    /// `exited`, loaded under the lock.
    exited: bool,
    /// The entry has more buffers than the snapshot lists.
    truncated: bool,
    /// The bound the previous pass found.
    previous_bound: u32,
    /// The published sequence number, loaded under the lock after `exited`.
    published: u32,
    /// Events dropped so far, loaded under the lock.
    #[cfg_attr(eventpipe_loom, allow(dead_code))] // as above
    dropped: u64,
}

/// What a reader callback of [`ThreadSnapshot::read`] did with one buffer's bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Consumed {
    /// Bytes consumed: whole records only.
    pub bytes: usize,
    /// Sequence number of the last record consumed, if any.
    pub last_seq: Option<u32>,
    /// Sequence number of a record left for a later pass (past the cutoff); the pass stops
    /// reading this thread there.
    pub left: Option<u32>,
}

/// What a pass learned about one thread, applied under the lock by [`BufferManager::apply`](crate::runtime::BufferManager::apply).
#[derive(Debug, Clone, Copy)]
pub struct ThreadProgress {
    index: u64,
    buffers_emptied: usize,
    read_pos: usize,
    /// The thread's sequence-point bound: every event numbered up to it was read or lost,
    /// none later was read.
    pub bound: u32,
    /// Times the pass yielded waiting for the thread to finish a record.
    pub in_flight_waits: u32,
    /// The thread had exited at the snapshot and this pass read all it wrote: `apply`
    /// removes its entry, and `bound` is its last sequence number.
    pub reclaims: bool,
}

/// A removed entry.
#[derive(Debug, Clone, Copy)]
pub struct Removed {
    pub index: u64,
    /// The thread's last sequence number (committed or dropped).
    pub last_seq: u32,
    /// Events it dropped.
    pub dropped: u64,
}

/// What [`ThreadTable::apply`] did.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    pub freed_bytes: usize,
    pub freed_buffers: usize,
    /// The emptied buffers themselves, for the manager to reuse.
    pub freed: Vec<Arc<Buffer>>,
    pub removed: Vec<Removed>,
    /// Events dropped by the threads still in the table.
    pub dropped_live: u64,
}

impl ThreadTable {
    /// Registers a thread.
    pub(crate) fn add(&mut self, os_tid: u64, name: Option<String>) -> Arc<ThreadSessionState> {
        let index = self.next_index;
        self.next_index += 1;
        let state = Arc::new(ThreadSessionState {
            index,
            os_tid,
            name,
            hot: WrittenPerEvent {
                published_seq: AtomicU32::new(0),
                in_flight: AtomicBool::new(false),
            },
            exited: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
        });
        self.entries.insert(
            index,
            ThreadEntry {
                state: Arc::clone(&state),
                buffers: VecDeque::new(),
                read_pos: 0,
                announced: false,
                bound: 0,
            },
        );
        state
    }

    /// Whether thread `index` is still in the table.
    pub(crate) fn contains(&self, index: u64) -> bool {
        self.entries.contains_key(&index)
    }

    /// Appends `buffer` to thread `index`'s list (the writer fills it next).
    pub(crate) fn push_buffer(&mut self, index: u64, buffer: Arc<Buffer>) {
        if let Some(entry) = self.entries.get_mut(&index) {
            entry.buffers.push_back(buffer);
        }
    }

    /// Threads in the table.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Drain: each thread as this pass will read it, listing at most `max_buffers` of its
    /// buffers (the oldest). Marks every thread announced.
    pub(crate) fn snapshot(&mut self, max_buffers: usize) -> Vec<ThreadSnapshot> {
        self.entries
            .values_mut()
            .map(|e| {
                let announce = !e.announced;
                e.announced = true;
                // Acquire: pairs with the Release in `exit`; loaded first, so that when
                // it is set the loads below see the thread's final values.
                let exited = e.state.exited.load(Ordering::Acquire);
                // Acquire: pairs with the Release in `commit_record` / `record_loss`, so
                // every record up to it is visible to the reads of this pass.
                let published = e.state.hot.published_seq.load(Ordering::Acquire);
                // Relaxed: written under the lock we hold.
                let dropped = e.state.dropped.load(Ordering::Relaxed);
                ThreadSnapshot {
                    state: Arc::clone(&e.state),
                    buffers: e.buffers.iter().take(max_buffers).cloned().collect(),
                    read_pos: e.read_pos,
                    announce,
                    exited,
                    truncated: e.buffers.len() > max_buffers,
                    previous_bound: e.bound,
                    published,
                    dropped,
                }
            })
            .collect()
    }

    /// Drain, after a pass: pops the buffers it emptied, keeps its read positions, and
    /// removes the entries it read to the end of their thread.
    pub(crate) fn apply(&mut self, progress: &[ThreadProgress]) -> Applied {
        let mut applied = Applied::default();
        for p in progress {
            let Some(entry) = self.entries.get_mut(&p.index) else {
                continue;
            };
            for _ in 0..p.buffers_emptied {
                if let Some(b) = entry.buffers.pop_front() {
                    applied.freed_bytes += b.capacity();
                    applied.freed_buffers += 1;
                    applied.freed.push(b);
                }
            }
            entry.read_pos = p.read_pos;
            entry.bound = p.bound;
            // An exited thread pushes no buffer, so emptying the snapshot's list emptied
            // the entry's; the check only guards that reasoning.
            if p.reclaims && entry.buffers.is_empty() {
                if let Some(gone) = self.entries.remove(&p.index) {
                    applied.removed.push(Removed {
                        index: p.index,
                        last_seq: p.bound,
                        // Relaxed: written under the lock we hold.
                        dropped: gone.state.dropped.load(Ordering::Relaxed),
                    });
                }
            }
        }
        applied.dropped_live = self
            .entries
            .values()
            // Relaxed: as above.
            .map(|e| e.state.dropped.load(Ordering::Relaxed))
            .sum();
        applied
    }
}

impl ThreadSnapshot {
    /// How many buffers the snapshot lists for the thread.
    #[cfg(not(eventpipe_loom))]
    pub fn listed_buffers(&self) -> usize {
        self.buffers.len()
    }

    /// Whether the thread had lost events by the snapshot.
    #[cfg_attr(eventpipe_loom, allow(dead_code))] // as above
    pub fn lost_events(&self) -> bool {
        self.dropped > 0
    }

    /// Drain: what the callbacks of one [`read`](Self::read) consumed, in place: given each
    /// call's [`Consumed::bytes`] in call order, the bytes of the listed buffer it was
    /// handed (from the saved read position in the first, from the start in the others),
    /// borrowed for as long as the snapshot holds the buffers. Published bytes are never
    /// written again, so they stay valid and unchanged.
    #[cfg(not(eventpipe_loom))]
    pub fn consumed_bytes<'s>(
        &'s self,
        consumed: &'s [usize],
    ) -> impl Iterator<Item = &'s [u8]> + 's {
        self.buffers
            .iter()
            .zip(consumed)
            .enumerate()
            .filter_map(move |(k, (buffer, &len))| {
                let start = if k == 0 { self.read_pos } else { 0 };
                buffer.readable(start).get(..len)
            })
    }

    /// Drain: waits out a record in flight, then reads the listed buffers oldest first
    /// from the saved position, handing each one's published bytes to `read`. Moves to the
    /// next buffer only past one that was retired and read to its end.
    pub fn read(&self, mut read: impl FnMut(&[u8]) -> Consumed) -> ThreadProgress {
        // Acquire: pairs with the Release in `commit_record`.
        let mut in_flight_waits = 0;
        while self.state.hot.in_flight.load(Ordering::Acquire) {
            in_flight_waits += 1;
            yield_now();
        }
        let mut pos = self.read_pos;
        let mut emptied = 0;
        let mut last_read = 0;
        let mut left = None;
        for buffer in &self.buffers {
            // Read `retired` (Acquire) before the bytes: once retired, all its records are
            // visible to the read below, so "read to the end" is final.
            let retired = buffer.is_retired();
            let consumed = buffer.with_readable(pos, &mut read);
            pos += consumed.bytes;
            if let Some(seq) = consumed.last_seq {
                last_read = seq;
            }
            if consumed.left.is_some() {
                left = consumed.left;
                break;
            }
            if retired && buffer.is_read_to_end(pos) {
                emptied += 1;
                pos = 0;
            } else {
                break;
            }
        }
        let bound = match left {
            Some(seq) => seq.wrapping_sub(1),
            // The published number may belong to a record in an unlisted buffer.
            None if self.truncated => last_read.max(self.previous_bound),
            None => self.published.max(last_read),
        };
        ThreadProgress {
            index: self.state.index,
            buffers_emptied: emptied,
            read_pos: pos,
            bound,
            in_flight_waits,
            reclaims: self.exited
                && !self.truncated
                && left.is_none()
                && emptied == self.buffers.len(),
        }
    }
}
