//! The drain thread: moves events from the per-thread buffers to the output.
//!
//! Each pass:
//! 1. takes a cutoff timestamp and, under the session lock, a snapshot of every thread's
//!    buffer list, whether it exited, and its published sequence number (`threads.rs`);
//! 2. for each thread, waits for a write in flight to finish (the writer sets `in_flight`
//!    before stamping a record and clears it after committing), then finds its records
//!    with timestamps below the cutoff (`merge::scan`), leaving them in place;
//! 3. visits those records in timestamp order straight from the buffers (`merge`) and
//!    encodes each into an event block, preceded by the metadata, stacks, V6 threads and
//!    label lists it refers to (`encode`; the last event of the pass marked IsSorted), then,
//!    at the sequence-point interval, a sequence point carrying each thread's sequence
//!    lower bound;
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
use nettrace::{EventHeader, FormatVersion, ThreadInfo, TraceInfo};

use encode::{output_error, Author, Encoder, RecordView, TraceOutput};

use crate::clock;
use crate::config::{Output, SessionConfig};
use crate::{registry, rundown, Error};
use eventpipe_core::runtime::{Consumed, ThreadProgress, ThreadSessionState, ThreadSnapshot};
use eventpipe_core::runtime::{Progress, SessionShared};
use eventpipe_core::SessionStats;
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod encode;

/// How far the cutoff trails the drain's clock, in nanoseconds.
const CUTOFF_MARGIN_NANOS: i64 = 50_000;
/// Buffers of each thread a pass reads at most (see `Drain::pass`).
const PASS_BUFFERS: usize = 8;
/// Rundown's event blocks are written once they hold this many bytes.
const EVENT_BLOCK_TARGET: usize = 60 << 10;
/// Thread names kept for rundown; beyond this many, later threads go unnamed in V5 (V6
/// thread blocks still name them), so thread churn cannot grow the drain without bound.
const MAX_RUNDOWN_THREAD_NAMES: usize = 4096;

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
        self.progress.output_writes.fetch_add(1, Ordering::Relaxed);
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
            let file = std::fs::File::create(&path).map_err(|source| Error::CreateTrace {
                path: path.clone(),
                source,
            })?;
            // Unbuffered: the trace writer hands over each block whole, in one write, so
            // a buffer would only copy it once more.
            (Box::new(file), None)
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
    info.sync_time_utc = nettrace::SystemTime::from_unix_nanos(utc_nanos);
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
        .map_err(Error::Write)?;
    let drain = Drain {
        shared,
        writer: Some(writer),
        version,
        flush_interval: config.flush_interval,
        sequence_point_interval: config.sequence_point_interval,
        rundown: config.rundown,
        progress,
        encoder: Encoder::new(version),
        last_sequence_point: Instant::now(),
        dropped_by_reclaimed: 0,
        listener,
        thread_names: HashMap::new(),
    };
    std::thread::Builder::new()
        .name(format!("eventpipe-drain-{}", drain.shared.slot()))
        .spawn(move || drain.run())
        .map_err(|e| Error::SpawnThread("drain", e))
}

struct Drain {
    shared: Arc<SessionShared>,
    writer: Option<TraceOutput>,
    version: FormatVersion,
    flush_interval: Duration,
    sequence_point_interval: Duration,
    rundown: bool,
    progress: Arc<Progress>,
    encoder: Encoder,
    last_sequence_point: Instant,
    dropped_by_reclaimed: u64,
    listener: Option<JoinHandle<()>>,
    /// Names of the threads seen, by OS thread id, for the Thread rundown events.
    thread_names: HashMap<u64, String>,
}

impl Drain {
    fn run(mut self) -> Result<SessionStats, Error> {
        let result = self.run_passes();
        let mut owed_callbacks = Vec::new();
        if result.is_err() {
            // The output failed: end the session for everyone, release parked writers.
            owed_callbacks = registry::remove_session(&self.shared);
            self.shared.deactivate();
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
        self.shared.manager().abort();
    }

    fn writer(&mut self) -> Result<&mut TraceWriter<Box<dyn Write + Send>>, Error> {
        self.writer.as_mut().ok_or(Error::Finished)
    }

    fn run_passes(&mut self) -> Result<(), Error> {
        let mut backlog = false;
        loop {
            self.shared.wait_for_work(self.flush_interval, backlog);
            if self.shared.stop_requested() {
                // Parked writers give up now; then everything committed is written.
                self.abort_waiters();
                while self.pass(true)? {}
                if self.rundown {
                    self.write_rundown()?;
                }
                let writer = self.writer.take().ok_or(Error::Finished)?;
                let mut out = writer.finish().map_err(output_error)?;
                out.flush().map_err(Error::Flush)?;
                return Ok(());
            }
            backlog = self.pass(false)?;
        }
    }

    /// One pass; returns whether it left a backlog for the next one to take at once.
    fn pass(&mut self, last: bool) -> Result<bool, Error> {
        let full_cutoff = if last {
            i64::MAX
        } else {
            clock::now() - clock::ticks_from_nanos(CUTOFF_MARGIN_NANOS)
        };
        let mut cutoff = full_cutoff;
        // Listing a thread's whole backlog would cost every pass a reference count per
        // buffer; it reads `PASS_BUFFERS` and looks at one more.
        let snapshot = self.shared.manager().snapshot(PASS_BUFFERS + 1);
        // A pass takes at most `PASS_BUFFERS` of each thread's buffers, so a backlog is
        // drained in several passes and buffers go back to the writers (parked, in Block
        // mode) after each, not only at the end. A thread's first record beyond its share
        // lowers the cutoff, so no thread leaves a record below it behind.
        let mut backlog = false;
        for thread in &snapshot {
            if thread.listed_buffers() > PASS_BUFFERS {
                if let Some(limit) = first_timestamp_past(thread, PASS_BUFFERS) {
                    if limit < cutoff {
                        cutoff = limit;
                        backlog = true;
                    }
                }
            }
        }
        // Each thread's records go out as one run, the runs in the order of their first
        // records, so each run's first event can carry IsSorted: nothing after it in the
        // file is older (its own run follows it in order; later runs start later; later
        // passes are at or past the cutoff). Within a sequence-point region the format asks
        // no more order than that of each thread's own events.
        let mut runs: Vec<(i64, usize)> = snapshot
            .iter()
            .enumerate()
            .filter_map(|(at, thread)| first_timestamp_past(thread, 0).map(|ts| (ts, at)))
            .collect();
        if backlog && !runs.iter().any(|&(ts, _)| ts < cutoff) {
            // Every record below the lowered cutoff shares its timestamp: take the lot
            // rather than make no progress.
            cutoff = full_cutoff;
            backlog = false;
        }
        runs.sort_unstable();
        let v5 = self.version != FormatVersion::V6;
        for thread in &snapshot {
            if thread.announce {
                let state = &thread.state;
                self.remember_thread_name(state);
                self.encoder.announce_thread(state);
            }
        }
        let writer = self.writer.as_mut().ok_or(Error::Finished)?;
        let encoder = &mut self.encoder;
        // Threads with no record at the look are read last, their first event unmarked: a
        // record may have landed since.
        let peeked: Vec<bool> = {
            let mut seen = vec![false; snapshot.len()];
            runs.iter().for_each(|&(_, at)| seen[at] = true);
            seen
        };
        let order = runs.iter().map(|&(_, at)| (at, true)).chain(
            (0..snapshot.len())
                .filter(|&at| !peeked[at])
                .map(|at| (at, false)),
        );
        let mut updates: Vec<Option<ThreadProgress>> = vec![None; snapshot.len()];
        for (at, sorted) in order {
            let thread = &snapshot[at];
            let author = Author {
                index: thread.state.index,
                os_tid: thread.state.os_tid,
            };
            encoder.start_run(sorted);
            let mut failure = None;
            let progress = thread.read(|bytes| {
                if failure.is_some() {
                    return Consumed {
                        left: Some(0),
                        ..Consumed::default()
                    };
                }
                encoder
                    .run_chunk(writer, author, bytes, cutoff)
                    .unwrap_or_else(|e| {
                        failure = Some(e);
                        Consumed {
                            left: Some(0),
                            ..Consumed::default()
                        }
                    })
            });
            if let Some(e) = failure {
                return Err(e);
            }
            updates[at] = Some(progress);
        }
        let updates: Vec<ThreadProgress> = updates.into_iter().flatten().collect();
        encoder.flush(writer)?;
        let (records, latest) = encoder.take_pass_totals();
        let mut bounds = Vec::with_capacity(snapshot.len());
        let mut force_sequence_point = false;
        for (thread, progress) in snapshot.iter().zip(&updates) {
            let state = &thread.state;
            // A thread leaving the table carries its last sequence number out first. V6
            // has RemoveThread for it; V5 only a sequence point, needed when the thread
            // lost events (otherwise the reader saw that number on its last event).
            force_sequence_point |= v5 && progress.reclaims && thread.lost_events();
            bounds.push((state.index, state.os_tid, progress.bound));
        }
        self.progress
            .events_written
            .fetch_add(records as u64, Ordering::Relaxed);
        self.progress.drain_passes.fetch_add(1, Ordering::Relaxed);
        let waits: u64 = updates.iter().map(|u| u64::from(u.in_flight_waits)).sum();
        self.progress
            .in_flight_waits
            .fetch_add(waits, Ordering::Relaxed);
        let due = last
            || force_sequence_point
            || self.last_sequence_point.elapsed() >= self.sequence_point_interval;
        if due {
            let sp_time = if last {
                latest.unwrap_or_else(clock::now)
            } else {
                cutoff
            };
            let threads: Vec<(u64, u32)> = bounds
                .iter()
                .map(|&(index, os_tid, seq)| (if v5 { os_tid } else { index }, seq))
                .collect();
            writer
                .write_sequence_point(sp_time, 0, &threads)
                .map_err(output_error)?;
            self.last_sequence_point = Instant::now();
            self.encoder.start_region();
        }
        // The snapshot's references to the buffers go first, so the manager gets the emptied
        // ones back whole, for reuse.
        drop(snapshot);
        self.apply(&updates)?;
        Ok(backlog)
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

    fn apply(&mut self, updates: &[ThreadProgress]) -> Result<(), Error> {
        let reclaimed = self.shared.manager().apply(updates);
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
            self.encoder.forget_threads(|index| gone.contains(&index));
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
        let tid = eventpipe_core::current_os_tid();
        let version = self.version;
        let v6 = version == FormatVersion::V6;
        let mut thread_names = std::mem::take(&mut self.thread_names);
        // The threads events were about (sampled threads that may never have written) by
        // the kernel's name; a name the program gave a writing thread comes first.
        for (tid, name) in self.encoder.subject_names() {
            if thread_names.len() >= MAX_RUNDOWN_THREAD_NAMES {
                break;
            }
            thread_names.entry(tid).or_insert_with(|| name.to_owned());
        }
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
                writer.write_event_block(&mut block).map_err(output_error)?;
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
        writer.write_event_block(&mut block).map_err(output_error)
    }
}

/// The timestamp of `thread`'s first record after its first `skip` listed buffers, once
/// any record in flight has landed; `None` when it has none there yet.
fn first_timestamp_past(thread: &ThreadSnapshot, skip: usize) -> Option<i64> {
    let mut seen = 0;
    let mut first = None;
    thread.read(|bytes| {
        seen += 1;
        if seen <= skip {
            // Published bytes end at a record boundary: take them all to move on.
            return Consumed {
                bytes: bytes.len(),
                ..Consumed::default()
            };
        }
        first = RecordView::parse(bytes).map(|(record, _)| record.timestamp);
        if first.is_none() {
            // Read to the end: the first record, if any, is in the next buffer.
            return Consumed {
                bytes: bytes.len(),
                ..Consumed::default()
            };
        }
        Consumed {
            left: Some(0),
            ..Consumed::default()
        }
    });
    first
}
