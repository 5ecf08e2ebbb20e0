//! The drain thread: moves events from the per-thread buffers to the output.
//!
//! Each pass:
//! 1. takes a cutoff timestamp and, under the session lock, a snapshot of every thread's
//!    buffer list, whether it exited, and its published sequence number (`threads.rs`);
//! 2. for each thread, waits for a write in flight to finish (the writer sets `in_flight`
//!    before stamping a record and clears it after committing), then reads its records with
//!    timestamps below the cutoff;
//! 3. merges the threads' runs of records by timestamp (`sort_batch`), writes new
//!    metadata, event blocks (the last event of the pass marked IsSorted) and, at the
//!    sequence-point interval, a sequence point carrying each thread's sequence lower bound;
//! 4. under the lock again, frees the buffers it emptied (signalling Block-mode writers) and
//!    removes the threads that had exited at the snapshot and that it read to the end, each
//!    one's last sequence number carried out: in V5 by this pass's sequence point (forced
//!    when such a thread lost events), in V6 by the RemoveThread block that follows.
//!
//! Why the cutoff makes IsSorted true: every record left behind has a timestamp at or after
//! the cutoff, and a record whose writer was in flight was waited for. The writer's
//! `in_flight` store is Relaxed and precedes its clock read; a store can sit in the store
//! buffer briefly after the clock is read, so the cutoff trails the drain's clock by
//! `CUTOFF_MARGIN_NANOS`, far longer than a store buffer takes to drain (a context switch drains it
//! outright). The drain never waits on anything but writers mid-record: it never blocks on
//! its own output of events.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{EventHeader, FormatVersion, Guid, Label, ThreadInfo, TraceInfo};

use crate::clock;
use crate::config::{Output, SessionConfig};
use crate::session::{SessionShared, SessionStats};
use crate::sync::{lock, Arc, AtomicU64, Ordering};
use crate::threads::{Consumed, ThreadProgress, ThreadSessionState};
use crate::writer::{FLAG_ACTIVITY, FLAG_STACK, FLAG_SUBJECT, RECORD_HEADER};
use crate::{registry, rundown, Error};

/// How far the cutoff trails the drain's clock, in nanoseconds.
const CUTOFF_MARGIN_NANOS: i64 = 50_000;
const EVENT_BLOCK_TARGET: usize = 60 << 10;
/// Thread names kept for rundown; beyond this many, later threads go unnamed in V5 (V6
/// thread blocks still name them), so thread churn cannot grow the drain without bound.
const MAX_RUNDOWN_THREAD_NAMES: usize = 4096;
/// V6 thread-table indexes of threads that samples are about but that never wrote to the
/// session: this bit plus the OS id, far from the session's own dense indexes.
const SUBJECT_THREAD_INDEX_BASE: u64 = 1 << 62;
/// Beyond this many sampled threads, further ones are attributed to the sampler in V6.
const MAX_SUBJECT_THREADS: usize = 65_536;

/// Counters the drain publishes for `Session::stats`.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    events_written: AtomicU64,
    events_dropped: AtomicU64,
    bytes_written: AtomicU64,
    threads_reclaimed: AtomicU64,
}

impl Progress {
    pub(crate) fn snapshot(&self) -> SessionStats {
        SessionStats {
            events_written: self.events_written.load(Ordering::Relaxed),
            events_dropped: self.events_dropped.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            threads_reclaimed: self.threads_reclaimed.load(Ordering::Relaxed),
            ..SessionStats::default()
        }
    }
}

/// Counts bytes on their way to the real output.
struct CountingWriter {
    inner: Box<dyn Write + Send>,
    progress: Arc<Progress>,
}

impl Write for CountingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.progress
            .bytes_written
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Spawns the drain thread (and a listener thread for listener outputs).
pub(crate) fn spawn(
    shared: Arc<SessionShared>,
    config: SessionConfig,
    progress: Arc<Progress>,
) -> Result<JoinHandle<Result<SessionStats, Error>>, Error> {
    let (sink, listener): (Box<dyn Write + Send>, Option<JoinHandle<()>>) = match config.output {
        Output::File(path) => {
            let file = std::fs::File::create(&path)
                .map_err(|e| Error::Output(format!("cannot create {}: {e}", path.display())))?;
            (
                Box::new(std::io::BufWriter::with_capacity(256 << 10, file)),
                None,
            )
        }
        Output::Stream(stream) => (stream, None),
        Output::Listener(callback) => {
            let (writer, handle) = crate::listener::spawn(callback)?;
            (Box::new(writer), Some(handle))
        }
    };
    let version = config.format;
    let (utc_nanos, ticks) = clock::sync_point();
    let mut info = TraceInfo::new(version, std::mem::size_of::<usize>() as u32);
    info.sync_time_utc = system_time_from_unix_nanos(utc_nanos);
    info.sync_time_ticks = ticks;
    info.tick_frequency = clock::ticks_per_second();
    info.process_id = Some(u64::from(std::process::id()));
    info.processor_count = std::thread::available_parallelism()
        .ok()
        .map(|n| n.get() as u32);
    let counting = CountingWriter {
        inner: sink,
        progress: Arc::clone(&progress),
    };
    let writer = TraceWriter::new(Box::new(counting) as Box<dyn Write + Send>, &info)
        .map_err(|e| Error::Output(format!("cannot start the trace: {e}")))?;
    let drain = Drain {
        shared,
        writer: Some(writer),
        version,
        flush_interval: config.flush_interval,
        sequence_point_interval: config.sequence_point_interval,
        rundown: config.rundown,
        progress,
        written_metadata: Vec::new(),
        batch: Vec::new(),
        runs: Vec::new(),
        merged: Vec::new(),
        arena: Vec::new(),
        last_sequence_point: Instant::now(),
        dropped_by_reclaimed: 0,
        listener,
        region_stacks: HashMap::new(),
        next_stack_id: 1,
        next_label_id: 1,
        thread_names: HashMap::new(),
        thread_index_by_tid: HashMap::new(),
    };
    std::thread::Builder::new()
        .name(format!("eventpipe-drain-{}", drain.shared.slot()))
        .spawn(move || drain.run())
        .map_err(|e| Error::Output(format!("cannot start the drain thread: {e}")))
}

#[derive(Clone, Copy)]
struct Pending {
    timestamp: i64,
    thread_index: u64,
    os_tid: u64,
    event_index: u32,
    seq: u32,
    activity: Option<(Guid, Guid)>,
    /// The OS id of the thread the event is about, when not the writer (a sampler's
    /// sample).
    subject: Option<u64>,
    /// The stack's bytes in the arena, if the record has one.
    stack: Option<(usize, usize)>,
    payload: (usize, usize),
}

struct Drain {
    shared: Arc<SessionShared>,
    writer: Option<TraceWriter<Box<dyn Write + Send>>>,
    version: FormatVersion,
    flush_interval: Duration,
    sequence_point_interval: Duration,
    rundown: bool,
    progress: Arc<Progress>,
    /// Whether the metadata of registered event `i` (a dense registry index) was written;
    /// a bit per event, not a hash set: this is checked once per event drained.
    written_metadata: Vec<bool>,
    batch: Vec<Pending>,
    /// Each thread's records in `batch`, as (start, end): one run per thread.
    runs: Vec<(usize, usize)>,
    /// Where the merge of the runs goes; swapped with `batch`, so both keep their memory.
    merged: Vec<Pending>,
    arena: Vec<u8>,
    last_sequence_point: Instant,
    dropped_by_reclaimed: u64,
    listener: Option<JoinHandle<()>>,
    /// Stacks written since the last sequence point, and their ids.
    region_stacks: HashMap<Vec<u8>, u32>,
    next_stack_id: u32,
    next_label_id: u32,
    /// Names of the threads seen, by OS thread id, for the Thread rundown events.
    thread_names: HashMap<u64, String>,
    /// V6: the thread-table index of each OS thread a sample was about.
    thread_index_by_tid: HashMap<u64, u64>,
}

impl Drain {
    fn run(mut self) -> Result<SessionStats, Error> {
        let result = self.run_passes();
        let mut owed_callbacks = Vec::new();
        if result.is_err() {
            // The output failed: end the session for everyone, release parked writers.
            owed_callbacks = registry::remove_session(&self.shared);
            self.shared.active.store(false, Ordering::Relaxed);
        }
        self.abort_waiters();
        // Its providers are told it ended (a profiler stops), from here since the session
        // is gone before whoever started it calls `stop`.
        registry::notify(
            owed_callbacks,
            self.shared.slot(),
            registry::Notice::Disabled,
        );
        drop(self.writer.take());
        if let Some(listener) = self.listener.take() {
            let _ = listener.join();
        }
        result.map(|()| self.progress.snapshot())
    }

    fn abort_waiters(&self) {
        self.shared.manager.abort();
    }

    fn writer(&mut self) -> Result<&mut TraceWriter<Box<dyn Write + Send>>, Error> {
        self.writer
            .as_mut()
            .ok_or_else(|| Error::Output("the trace was already finished".into()))
    }

    fn run_passes(&mut self) -> Result<(), Error> {
        loop {
            {
                let mut woken = lock(&self.shared.wake);
                if !*woken && !self.shared.stop_requested.load(Ordering::Acquire) {
                    woken = self
                        .shared
                        .wake_signal
                        .wait_timeout(woken, self.flush_interval)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
                *woken = false;
            }
            if self.shared.stop_requested.load(Ordering::Acquire) {
                // Parked writers give up now; then everything committed is written.
                self.abort_waiters();
                self.pass(true)?;
                if self.rundown {
                    self.write_rundown()?;
                }
                let writer = self
                    .writer
                    .take()
                    .ok_or_else(|| Error::Output("the trace was already finished".into()))?;
                let mut out = writer.finish().map_err(output_error)?;
                out.flush().map_err(|e| Error::Output(e.to_string()))?;
                return Ok(());
            }
            self.pass(false)?;
        }
    }

    fn pass(&mut self, last: bool) -> Result<(), Error> {
        let cutoff = if last {
            i64::MAX
        } else {
            clock::now() - clock::ticks_from_nanos(CUTOFF_MARGIN_NANOS)
        };
        let snapshot = self.shared.manager.snapshot();
        self.batch.clear();
        self.runs.clear();
        self.arena.clear();
        let v5 = self.version != FormatVersion::V6;
        let mut updates = Vec::with_capacity(snapshot.len());
        let mut bounds = Vec::with_capacity(snapshot.len());
        let mut announce = Vec::new();
        let mut force_sequence_point = false;
        for thread in &snapshot {
            let state = &thread.state;
            if thread.announce {
                self.remember_thread_name(state);
                self.thread_index_by_tid.insert(state.os_tid, state.index);
                announce.push(ThreadInfo {
                    index: state.index,
                    name: state.name.clone(),
                    process_id: Some(u64::from(std::process::id())),
                    thread_id: Some(state.os_tid),
                    key_values: Vec::new(),
                });
            }
            let start = self.batch.len();
            let progress = thread.read(|bytes| self.read_records(state, bytes, cutoff));
            if self.batch.len() > start {
                self.runs.push((start, self.batch.len()));
            }
            // A thread leaving the table carries its last sequence number out first. V6
            // has RemoveThread for it; V5 only a sequence point, needed when the thread
            // lost events (otherwise the reader saw that number on its last event).
            force_sequence_point |= v5 && progress.reclaims && thread.lost_events();
            bounds.push((state.index, state.os_tid, progress.bound));
            updates.push(progress);
        }
        self.emit(&announce, cutoff, last, force_sequence_point, &bounds)?;
        // The snapshot's references to the buffers go first, so the manager gets the emptied
        // ones back whole, for reuse.
        drop(snapshot);
        self.apply(&updates)
    }

    /// Orders the batch by (timestamp, thread, sequence number). Each thread's records form
    /// one run, already in that order (one writer, a monotonic clock), so a k-way merge of
    /// the runs does it in O(n log k) into a vector kept from pass to pass. The stable sort
    /// it replaces allocated scratch space of half the batch every pass, fresh memory whose
    /// page faults were a tenth of the drain's time. A run out of order (a clock that went
    /// back) falls back to that sort.
    fn sort_batch(&mut self) {
        fn key(p: &Pending) -> (i64, u64, u32) {
            (p.timestamp, p.thread_index, p.seq)
        }
        let batch = &self.batch;
        let runs_ordered = self
            .runs
            .iter()
            .all(|&(a, b)| batch[a..b].windows(2).all(|w| key(&w[0]) <= key(&w[1])));
        if !runs_ordered {
            self.batch.sort_by_key(key);
            return;
        }
        if self.runs.len() <= 1 {
            return;
        }
        let mut heap = std::collections::BinaryHeap::with_capacity(self.runs.len());
        for (run, &(start, _)) in self.runs.iter().enumerate() {
            heap.push(std::cmp::Reverse((key(&batch[start]), run, start)));
        }
        self.merged.clear();
        self.merged.reserve(batch.len());
        while let Some(std::cmp::Reverse((_, run, mut at))) = heap.pop() {
            // Take from this run while it stays ahead of every other (no heap operation per
            // record then), and put it back once it does not.
            let end = self.runs[run].1;
            let rival = heap.peek().map(|std::cmp::Reverse((k, _, _))| *k);
            loop {
                self.merged.push(batch[at]);
                at += 1;
                if at == end {
                    break;
                }
                let next = key(&batch[at]);
                if rival.is_some_and(|r| next > r) {
                    heap.push(std::cmp::Reverse((next, run, at)));
                    break;
                }
            }
        }
        std::mem::swap(&mut self.batch, &mut self.merged);
    }

    /// Records the name of a newly seen thread for rundown.
    fn remember_thread_name(&mut self, state: &ThreadSessionState) {
        if !self.rundown || self.thread_names.len() >= MAX_RUNDOWN_THREAD_NAMES {
            return;
        }
        // Only names the program gave: an unnamed thread's kernel name is its creator's, and
        // reading it would cost the drain a file read per new thread under churn.
        if let Some(name) = &state.name {
            self.thread_names.insert(state.os_tid, name.clone());
        }
    }

    /// Reads one thread's records below `cutoff` from `data` (a buffer's published bytes
    /// from the read position) into the batch.
    fn read_records(&mut self, state: &ThreadSessionState, data: &[u8], cutoff: i64) -> Consumed {
        let mut consumed = Consumed::default();
        let mut off = 0;
        while let Some(record) = data.get(off..) {
            let Some(h) = record.get(..RECORD_HEADER) else {
                break;
            };
            let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
            let len = word(0) as usize;
            let seq = word(8);
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&h[16..24]);
            let timestamp = i64::from_le_bytes(ts);
            if timestamp >= cutoff {
                consumed.left = Some(seq);
                break;
            }
            let Some(body) = record.get(RECORD_HEADER..len) else {
                break;
            };
            let (activity, payload) = if word(12) & FLAG_ACTIVITY != 0 && body.len() >= 32 {
                let mut a = [0u8; 16];
                let mut r = [0u8; 16];
                a.copy_from_slice(&body[..16]);
                r.copy_from_slice(&body[16..32]);
                (Some((Guid(a), Guid(r))), &body[32..])
            } else {
                (None, body)
            };
            let (subject, payload) = match payload.get(..8) {
                Some(b) if word(12) & FLAG_SUBJECT != 0 => {
                    let mut t = [0u8; 8];
                    t.copy_from_slice(b);
                    (Some(u64::from_le_bytes(t)), &payload[8..])
                }
                _ => (None, payload),
            };
            let (stack, payload) = if word(12) & FLAG_STACK != 0 {
                split_stack(payload)
            } else {
                (None, payload)
            };
            let stack = stack.map(|bytes| {
                let start = self.arena.len();
                self.arena.extend_from_slice(bytes);
                (start, self.arena.len())
            });
            let start = self.arena.len();
            self.arena.extend_from_slice(payload);
            self.batch.push(Pending {
                timestamp,
                thread_index: state.index,
                os_tid: state.os_tid,
                event_index: word(4),
                seq,
                activity,
                subject,
                stack,
                payload: (start, self.arena.len()),
            });
            consumed.last_seq = Some(seq);
            off += len.max(RECORD_HEADER);
        }
        consumed.bytes = off;
        consumed
    }

    fn emit(
        &mut self,
        announce: &[ThreadInfo],
        cutoff: i64,
        last: bool,
        force_sequence_point: bool,
        bounds: &[(u64, u64, u32)],
    ) -> Result<(), Error> {
        let v6 = self.version == FormatVersion::V6;
        self.sort_batch();
        let mut new_metadata = Vec::new();
        for p in &self.batch {
            let index = p.event_index as usize;
            if self.written_metadata.get(index).copied().unwrap_or(false) {
                continue;
            }
            if index >= self.written_metadata.len() {
                self.written_metadata.resize(index + 1, false);
            }
            self.written_metadata[index] = true;
            if let Some(event) = registry::event_at(p.event_index) {
                new_metadata.push(event.metadata(p.event_index + 1));
            }
        }
        let batch = std::mem::take(&mut self.batch);
        let arena = std::mem::take(&mut self.arena);
        // Stacks are interned per sequence-point region: ids stay unique until the next
        // sequence point, after which readers forget them.
        let first_new_stack = self.next_stack_id;
        let mut new_stacks: Vec<&[u8]> = Vec::new();
        let mut stack_ids = Vec::with_capacity(batch.len());
        for p in &batch {
            let id = match p.stack.and_then(|(s, e)| arena.get(s..e)) {
                None => 0,
                Some(bytes) => match self.region_stacks.get(bytes) {
                    Some(&id) => id,
                    None => {
                        let id = self.next_stack_id;
                        self.next_stack_id += 1;
                        self.region_stacks.insert(bytes.to_vec(), id);
                        new_stacks.push(bytes);
                        id
                    }
                },
            };
            stack_ids.push(id);
        }
        let first_label = self.next_label_id;
        let version = self.version;
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| Error::Output("the trace was already finished".into()))?;
        if !new_stacks.is_empty() {
            writer
                .write_stack_block(first_new_stack, &new_stacks)
                .map_err(output_error)?;
        }
        if !new_metadata.is_empty() {
            writer
                .write_metadata_block(&new_metadata)
                .map_err(output_error)?;
        }
        // V6 names threads by index: a sampled thread that never wrote to the session
        // gets an entry of its own, once.
        let mut announce = announce.to_vec();
        if v6 {
            for p in &batch {
                if let Some(tid) = p.subject {
                    if !self.thread_index_by_tid.contains_key(&tid)
                        && self.thread_index_by_tid.len() < MAX_SUBJECT_THREADS
                    {
                        let index = SUBJECT_THREAD_INDEX_BASE | tid;
                        self.thread_index_by_tid.insert(tid, index);
                        announce.push(ThreadInfo {
                            index,
                            name: rundown::kernel_thread_name(tid),
                            process_id: Some(u64::from(std::process::id())),
                            thread_id: Some(tid),
                            key_values: Vec::new(),
                        });
                    }
                }
            }
        }
        if v6 && !announce.is_empty() {
            writer.write_thread_block(&announce).map_err(output_error)?;
        }
        let mut labels: Vec<Vec<Label>> = Vec::new();
        if v6 {
            for p in &batch {
                if let Some((a, r)) = p.activity {
                    labels.push(vec![Label::ActivityId(a), Label::RelatedActivityId(r)]);
                }
            }
            if !labels.is_empty() {
                writer
                    .write_label_list_block(first_label, &labels)
                    .map_err(output_error)?;
            }
        }
        let mut block = EventBlockBuilder::new(version);
        let mut label_id = first_label - 1;
        for (i, p) in batch.iter().enumerate() {
            let capture_thread = if v6 { p.thread_index } else { p.os_tid };
            let thread = match p.subject {
                None => capture_thread,
                Some(tid) if !v6 => tid,
                Some(tid) => self
                    .thread_index_by_tid
                    .get(&tid)
                    .copied()
                    .unwrap_or(capture_thread),
            };
            let mut header = EventHeader {
                metadata_id: p.event_index + 1,
                sequence_number: p.seq,
                thread,
                capture_thread,
                timestamp: p.timestamp,
                stack_id: stack_ids.get(i).copied().unwrap_or(0),
                is_sorted: i + 1 == batch.len(),
                ..EventHeader::default()
            };
            if let Some((a, r)) = p.activity {
                if v6 {
                    label_id += 1;
                    header.label_list_id = label_id;
                } else {
                    header.activity_id = a;
                    header.related_activity_id = r;
                }
            }
            block.push(&header, arena.get(p.payload.0..p.payload.1).unwrap_or(&[]));
            if block.encoded_len() >= EVENT_BLOCK_TARGET {
                writer.write_event_block(&block).map_err(output_error)?;
                block.clear();
            }
        }
        if !block.is_empty() {
            writer.write_event_block(&block).map_err(output_error)?;
        }
        self.next_label_id = label_id + 1;
        let due = last
            || force_sequence_point
            || self.last_sequence_point.elapsed() >= self.sequence_point_interval;
        if due {
            let sp_time = if last {
                batch.last().map_or_else(clock::now, |p| p.timestamp)
            } else {
                cutoff
            };
            let threads: Vec<(u64, u32)> = bounds
                .iter()
                .map(|&(index, os_tid, seq)| (if v6 { index } else { os_tid }, seq))
                .collect();
            self.writer()?
                .write_sequence_point(sp_time, 0, &threads)
                .map_err(output_error)?;
            self.last_sequence_point = Instant::now();
            // Readers forget stacks and label lists at a sequence point; so do we.
            self.region_stacks.clear();
            self.next_stack_id = 1;
            self.next_label_id = 1;
        }
        self.progress
            .events_written
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.batch = batch;
        self.arena = arena;
        Ok(())
    }

    fn apply(&mut self, updates: &[ThreadProgress]) -> Result<(), Error> {
        let reclaimed = self.shared.manager.apply(updates);
        let removed = reclaimed.removed;
        let dropped_live = reclaimed.dropped_live;
        self.dropped_by_reclaimed += removed.iter().map(|r| r.dropped).sum::<u64>();
        self.progress
            .events_dropped
            .store(self.dropped_by_reclaimed + dropped_live, Ordering::Relaxed);
        self.progress
            .threads_reclaimed
            .fetch_add(removed.len() as u64, Ordering::Relaxed);
        if !removed.is_empty() {
            let gone: HashSet<u64> = removed.iter().map(|r| r.index).collect();
            self.thread_index_by_tid
                .retain(|_, index| !gone.contains(index));
        }
        if self.version == FormatVersion::V6 && !removed.is_empty() {
            let entries: Vec<(u64, u32)> = removed.iter().map(|r| (r.index, r.last_seq)).collect();
            self.writer()?
                .write_remove_thread_block(&entries)
                .map_err(output_error)?;
        }
        Ok(())
    }

    /// Rundown (see [`crate::rundown`]): process info, loaded modules, thread names.
    fn write_rundown(&mut self) -> Result<(), Error> {
        let tid = crate::writer::current_os_tid();
        let version = self.version;
        let v6 = version == FormatVersion::V6;
        let thread_names = std::mem::take(&mut self.thread_names);
        let writer = self.writer()?;
        writer
            .write_metadata_block(&rundown::all_metadata())
            .map_err(output_error)?;
        if v6 {
            let rundown_thread = ThreadInfo {
                index: u64::MAX >> 1,
                name: Some("eventpipe-drain".into()),
                process_id: Some(u64::from(std::process::id())),
                thread_id: Some(tid),
                key_values: Vec::new(),
            };
            writer
                .write_thread_block(&[rundown_thread])
                .map_err(output_error)?;
        }
        let thread = if v6 { u64::MAX >> 1 } else { tid };
        let mut events: Vec<(u32, Vec<u8>)> = vec![(
            rundown::PROCESS_INFO_METADATA_ID,
            rundown::process_info_payload(),
        )];
        events.extend(
            rundown::loaded_modules()
                .iter()
                .map(|m| (rundown::MODULE_METADATA_ID, m.payload())),
        );
        let mut names: Vec<_> = thread_names.into_iter().collect();
        names.sort();
        events.extend(names.iter().map(|(tid, name)| {
            (
                rundown::THREAD_METADATA_ID,
                rundown::thread_payload(*tid, name),
            )
        }));
        let timestamp = clock::now();
        let mut block = EventBlockBuilder::new(version);
        for (i, (metadata_id, payload)) in events.iter().enumerate() {
            if block.encoded_len() >= EVENT_BLOCK_TARGET {
                writer.write_event_block(&block).map_err(output_error)?;
                block = EventBlockBuilder::new(version);
            }
            let header = EventHeader {
                metadata_id: *metadata_id,
                sequence_number: i as u32 + 1,
                thread,
                capture_thread: thread,
                timestamp,
                is_sorted: true,
                ..EventHeader::default()
            };
            block.push(&header, payload);
        }
        writer.write_event_block(&block).map_err(output_error)
    }
}

/// Splits `len: u32, stack bytes` off the front of a record body.
fn split_stack(body: &[u8]) -> (Option<&[u8]>, &[u8]) {
    let Some(len) = body.get(..4) else {
        return (None, body);
    };
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    match body.get(4..4 + len) {
        Some(stack) => (Some(stack), &body[4 + len..]),
        None => (None, body),
    }
}

fn output_error(e: nettrace::Error) -> Error {
    Error::Output(e.to_string())
}

fn system_time_from_unix_nanos(nanos: i128) -> nettrace::SystemTime {
    let text = nettrace::format_unix_nanos(nanos);
    // "YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ"
    let num = |a: usize, b: usize| {
        text.get(a..b)
            .and_then(|s| s.parse::<i16>().ok())
            .unwrap_or(0)
    };
    let days = nanos.div_euclid(86_400_000_000_000) as i64;
    nettrace::SystemTime {
        year: num(0, 4),
        month: num(5, 7),
        day_of_week: ((days + 4).rem_euclid(7)) as i16,
        day: num(8, 10),
        hour: num(11, 13),
        minute: num(14, 16),
        second: num(17, 19),
        millisecond: num(20, 23),
    }
}
