//! From records to blocks: the drain's side of the nettrace writer.
//!
//! A pass encodes each thread's records as one run, straight from its buffers into an event
//! block ([`Encoder::run_chunk`]). A record that is its predecessor's successor (the same
//! event, the next sequence number, the same payload size, nothing but a payload) is
//! recognised by comparing its fixed header's first 16 bytes with what the previous record
//! predicts; successors have one length, so a run of them lies at a constant stride and
//! each costs the block a flags byte, a timestamp delta and its payload
//! ([`EventBlockBuilder::extend_next_strided`]); any other record is decoded and encoded in full
//! ([`Encoder::record`]). What an event refers to and the reader has not seen yet (its
//! metadata row, its stack, a V6 label list for its activity ids, a V6 thread entry for a
//! sampled thread) is collected beside the block and written just before it, so every
//! reference is defined before it is used.

use std::collections::HashMap;
use std::io::Write;

use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{EventHeader, EventMetadata, FormatVersion, Guid, Label, ThreadInfo};

use crate::{registry, rundown, Error};
use eventpipe_core::runtime::{Consumed, ThreadSessionState};
use eventpipe_core::runtime::{FLAG_ACTIVITY, FLAG_STACK, FLAG_SUBJECT, RECORD_HEADER};

/// An event block is written once it holds this many bytes.
const EVENT_BLOCK_TARGET: usize = 60 << 10;
/// V6 thread-table indexes of threads that samples are about but that never wrote to the
/// session: this bit plus the OS id, far from the session's own dense indexes.
const SUBJECT_THREAD_INDEX_BASE: u64 = 1 << 62;
/// Beyond this many sampled threads, further ones are attributed to the sampler in V6.
const MAX_SUBJECT_THREADS: usize = 65_536;

pub(super) type TraceOutput = TraceWriter<Box<dyn Write + Send>>;

/// One record as the writer laid it out (`writer.rs`), borrowed from its buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct RecordView<'s> {
    pub(super) event_index: u32,
    pub(super) seq: u32,
    pub(super) flags: u32,
    pub(super) timestamp: i64,
    /// Everything after the fixed header: activity ids, subject, stack, payload.
    pub(super) body: &'s [u8],
}

impl<'s> RecordView<'s> {
    /// The record at the front of `bytes` and the bytes after it; `None` when no whole
    /// record is there.
    #[inline]
    pub(super) fn parse(bytes: &'s [u8]) -> Option<(RecordView<'s>, &'s [u8])> {
        let (words, timestamp) = fixed_header(bytes)?;
        let len = words as u32 as usize;
        let body = bytes.get(RECORD_HEADER..len)?;
        let record = RecordView {
            event_index: (words >> 32) as u32,
            seq: (words >> 64) as u32,
            flags: (words >> 96) as u32,
            timestamp,
            body,
        };
        Some((record, &bytes[len..]))
    }
}

/// A record's fixed header at the front of `bytes`: its first 16 bytes as one little-endian
/// number (length, event index, sequence number and flags from the low word up), and its
/// timestamp.
#[inline(always)]
fn fixed_header(bytes: &[u8]) -> Option<(u128, i64)> {
    let head = bytes.first_chunk::<RECORD_HEADER>()?;
    let (words, timestamp) = head.split_at(16);
    Some((
        u128::from_le_bytes(words.try_into().ok()?),
        i64::from_le_bytes(timestamp.try_into().ok()?),
    ))
}

/// Who wrote a run, copied into the pass once: reading it from the thread's shared state per
/// record would pull in a cache line its writer keeps writing.
#[derive(Debug, Clone, Copy)]
pub(super) struct Author {
    /// The thread's session index.
    pub(super) index: u64,
    pub(super) os_tid: u64,
}

/// The value of a fixed header's first 16 bytes that no record has (its length is 0).
const NO_SUCCESSOR: u128 = 0;
/// Adds one to the sequence number of a fixed header's first 16 bytes.
const NEXT_SEQUENCE: u128 = 1 << 64;

/// What [`encode_successors`] took and wrote.
#[derive(Debug, Clone, Copy)]
struct SuccessorRun {
    records: usize,
    bytes: usize,
    last_timestamp: i64,
    /// What the record after the last one taken must start with to succeed it.
    successor: u128,
}

/// Encodes into `room` the records at the front of `rest` (at most `max`) that succeed one
/// another from `successor` on: each the same event as the one before, numbered next, with
/// a payload as long and nothing else (no stack, activity ids or subject), stamped before
/// `cutoff` and less than 2^14 ticks after the one before (the first: after `previous`).
/// They are known by their fixed header's first 16 bytes alone, which each predicts for
/// the next, and lie at a constant stride (`successor`'s length). Each becomes what
/// [`EventBlockBuilder::commit_successors`] takes: a flags byte of 0, the timestamp's
/// delta in one or two varint bytes, the payload. One pass over the records and the room,
/// with raw pointers: this is the loop every sustained event goes through.
///
/// # Panics
/// When `max` records do not fit in `rest`, or `max` events of `3 + payload` bytes in
/// `room`: the caller sizes both.
fn encode_successors(
    rest: &[u8],
    room: &mut [u8],
    successor: u128,
    previous: i64,
    cutoff: i64,
    max: usize,
) -> SuccessorRun {
    let stride = successor as u32 as usize;
    let size = stride
        .checked_sub(RECORD_HEADER)
        .expect("a successor has at least a record header");
    assert!(
        max.checked_mul(stride).is_some_and(|n| n <= rest.len())
            && max.checked_mul(3 + size).is_some_and(|n| n <= room.len()),
        "the records and the room are sized for {max} successors"
    );
    let (src, dst) = (rest.as_ptr(), room.as_mut_ptr());
    let mut run = SuccessorRun {
        records: 0,
        bytes: 0,
        last_timestamp: previous,
        successor,
    };
    while run.records < max {
        // Record `records` lies within `rest`: records < max and max * stride <= rest.len()
        // (asserted); it holds a fixed header (stride >= RECORD_HEADER), read unaligned.
        // SAFETY: as above.
        let (words, timestamp) = unsafe {
            let record = src.add(run.records * stride);
            (
                u128::from_le(record.cast::<u128>().read_unaligned()),
                i64::from_le(record.add(16).cast::<i64>().read_unaligned()),
            )
        };
        let delta = timestamp.wrapping_sub(run.last_timestamp) as u64;
        if words != run.successor || timestamp >= cutoff || delta >= 1 << 14 {
            break;
        }
        let two = delta >= 0x80;
        let varint = if two {
            (delta & 0x7f) | 0x80 | (delta >> 7) << 8
        } else {
            delta
        } as u16;
        let at = run.bytes;
        let payload_at = at + 2 + usize::from(two);
        // This event's bytes, `at..payload_at + size`, are at most 3 + size from `at`, and
        // `at` is at most (3 + size) * records: all within `room`, which holds
        // (3 + size) * max (asserted). The payload lies within this record in `rest`.
        // The two-byte store of a one-byte delta writes a byte the payload then overwrites.
        // SAFETY: as above.
        unsafe {
            *dst.add(at) = 0;
            dst.add(at + 1)
                .cast::<u16>()
                .write_unaligned(varint.to_le());
            let payload =
                std::slice::from_raw_parts(src.add(run.records * stride + RECORD_HEADER), size);
            let out = std::slice::from_raw_parts_mut(dst.add(payload_at), size);
            eventpipe_core::runtime::copy_payload(out, payload);
        }
        run.bytes = payload_at + size;
        run.last_timestamp = timestamp;
        run.successor = successor_of(words);
        run.records += 1;
    }
    run
}

/// What the first 16 bytes of the fixed header of the successor of a record with nothing but
/// a payload are: the same but for the next sequence number. The mask keeps a carry out of
/// the sequence number (`u32::MAX` wraps to 0) from reaching the flags, which are 0.
#[inline(always)]
fn successor_of(words: u128) -> u128 {
    words.wrapping_add(NEXT_SEQUENCE) & ((1 << 96) - 1)
}

/// The encoding state of one session's trace.
pub(super) struct Encoder {
    v6: bool,
    block: EventBlockBuilder,
    /// The first 16 bytes of the fixed header of the record that would be the last one's
    /// successor, or `NO_SUCCESSOR` when the last record cannot be followed that way.
    successor: u128,
    /// Whether the run's next record is its first: it carries IsSorted.
    run_start: bool,
    /// Records encoded since [`take_pass_totals`](Self::take_pass_totals), and the latest
    /// timestamp among them.
    records: usize,
    latest: Option<i64>,
    /// The header of the event being encoded, kept from one to the next.
    header: EventHeader,
    /// Whether `header` holds activity ids.
    header_has_activity: bool,
    /// Whether the metadata of registered event `i` (a dense registry index) was written;
    /// a bit per event, not a hash set: this is checked once per event drained.
    written_metadata: Vec<bool>,
    new_metadata: Vec<EventMetadata>,
    /// Stacks written since the last sequence point, and their ids.
    region_stacks: HashMap<Vec<u8>, u32>,
    next_stack_id: u32,
    /// Stacks with ids from `first_new_stack` on, not yet written.
    new_stacks: Vec<Vec<u8>>,
    first_new_stack: u32,
    next_label_id: u32,
    new_labels: Vec<Vec<Label>>,
    first_new_label: u32,
    /// V6 thread entries not yet written.
    new_threads: Vec<ThreadInfo>,
    /// V6: the thread-table index of each OS thread a sample was about.
    thread_index_by_tid: HashMap<u64, u64>,
    /// Every OS thread an event was about (a sampled thread that may never write), with
    /// the kernel's name for it when it was first seen: the rundown names them all.
    subjects: HashMap<u64, Option<String>>,
}

impl Encoder {
    pub(super) fn new(version: FormatVersion) -> Encoder {
        Encoder {
            v6: version == FormatVersion::V6,
            block: EventBlockBuilder::new(version),
            successor: NO_SUCCESSOR,
            run_start: false,
            records: 0,
            latest: None,
            header: EventHeader::default(),
            header_has_activity: false,
            written_metadata: Vec::new(),
            new_metadata: Vec::new(),
            region_stacks: HashMap::new(),
            next_stack_id: 1,
            new_stacks: Vec::new(),
            first_new_stack: 1,
            next_label_id: 1,
            new_labels: Vec::new(),
            first_new_label: 1,
            new_threads: Vec::new(),
            thread_index_by_tid: HashMap::new(),
            subjects: HashMap::new(),
        }
    }

    /// The threads events were about so far, each with its kernel name when it has one,
    /// for the rundown.
    pub(super) fn subject_names(&self) -> impl Iterator<Item = (u64, &str)> + '_ {
        self.subjects
            .iter()
            .filter_map(|(tid, name)| Some((*tid, name.as_deref()?)))
    }

    /// Notes a thread an event was about: its name is read once, the first time (a
    /// sampled thread may be gone by the rundown). Returns that name.
    fn note_subject(&mut self, tid: u64) -> Option<String> {
        if let Some(name) = self.subjects.get(&tid) {
            return name.clone();
        }
        if self.subjects.len() >= MAX_SUBJECT_THREADS {
            return None;
        }
        let name = rundown::kernel_thread_name(tid);
        self.subjects.insert(tid, name.clone());
        name
    }

    /// A thread that writes to the session, described before its first event (V6).
    pub(super) fn announce_thread(&mut self, state: &ThreadSessionState) {
        self.thread_index_by_tid.insert(state.os_tid, state.index);
        if self.v6 {
            self.new_threads.push(ThreadInfo {
                index: state.index,
                name: state.name.clone(),
                process_id: Some(u64::from(std::process::id())),
                thread_id: Some(state.os_tid),
                key_values: Vec::new(),
            });
        }
    }

    /// Threads removed from the session's table: a sample about one of them later gets an
    /// entry of its own.
    pub(super) fn forget_threads(&mut self, removed: impl Fn(u64) -> bool) {
        self.thread_index_by_tid.retain(|_, index| !removed(*index));
    }

    /// Starts a thread's run; `sorted` marks its first event IsSorted (no event after it in
    /// the file is older).
    pub(super) fn start_run(&mut self, sorted: bool) {
        self.successor = NO_SUCCESSOR;
        self.run_start = sorted;
    }

    /// The records encoded since the last call, and the latest timestamp among them.
    pub(super) fn take_pass_totals(&mut self) -> (usize, Option<i64>) {
        (
            std::mem::take(&mut self.records),
            std::mem::take(&mut self.latest),
        )
    }

    /// Encodes the records at the front of `bytes` (a buffer's published bytes from the
    /// read position, in the run of `author`) that are stamped before `cutoff`.
    pub(super) fn run_chunk(
        &mut self,
        out: &mut TraceOutput,
        author: Author,
        bytes: &[u8],
        cutoff: i64,
    ) -> Result<Consumed, Error> {
        let mut consumed = Consumed::default();
        let mut rest = bytes;
        let mut last_timestamp = None;
        loop {
            if self.successor != NO_SUCCESSOR {
                let stride = self.successor as u32 as usize;
                if let Some((previous, size)) = self.block.last_event() {
                    if size == stride - RECORD_HEADER {
                        // As many as fit before the block is full (each takes at least 2
                        // bytes besides its payload), 3 + size bytes each at most.
                        let fit = EVENT_BLOCK_TARGET.saturating_sub(self.block.encoded_len())
                            / (2 + size)
                            + 1;
                        let max = fit.min(rest.len() / stride);
                        let room = self.block.successor_room(max * (3 + size));
                        let run =
                            encode_successors(rest, room, self.successor, previous, cutoff, max);
                        if run.records > 0 {
                            self.block.commit_successors(
                                run.bytes,
                                run.records,
                                run.last_timestamp,
                            );
                            rest = &rest[run.records * stride..];
                            self.records += run.records;
                            consumed.last_seq =
                                Some(((run.successor >> 64) as u32).wrapping_sub(1));
                            last_timestamp = Some(run.last_timestamp);
                            self.successor = run.successor;
                        }
                    }
                }
            }
            if self.block.encoded_len() >= EVENT_BLOCK_TARGET {
                self.flush(out)?;
            }
            let Some((words, timestamp)) = fixed_header(rest) else {
                break;
            };
            let seq = (words >> 64) as u32;
            if timestamp >= cutoff {
                consumed.left = Some(seq);
                break;
            }
            let len = words as u32 as usize;
            let Some(record) = rest.get(..len).filter(|_| len >= RECORD_HEADER) else {
                break;
            };
            let view = RecordView {
                event_index: (words >> 32) as u32,
                seq,
                flags: (words >> 96) as u32,
                timestamp,
                body: &record[RECORD_HEADER..],
            };
            let sorted = std::mem::take(&mut self.run_start);
            self.record(out, author, view, sorted)?;
            // Only a record with nothing but a payload can be followed by a successor.
            self.successor = if view.flags == 0 {
                successor_of(words)
            } else {
                NO_SUCCESSOR
            };
            consumed.last_seq = Some(seq);
            last_timestamp = Some(timestamp);
            self.records += 1;
            rest = &rest[len..];
        }
        if last_timestamp > self.latest {
            self.latest = last_timestamp;
        }
        consumed.bytes = bytes.len() - rest.len();
        Ok(consumed)
    }

    /// Encodes one record of `thread` in full; `is_sorted` marks a run's first event.
    pub(super) fn record(
        &mut self,
        out: &mut TraceOutput,
        thread: Author,
        record: RecordView<'_>,
        is_sorted: bool,
    ) -> Result<(), Error> {
        let v6 = self.v6;
        self.note_metadata(record.event_index);
        let mut body = record.body;
        let mut activity = None;
        if record.flags & FLAG_ACTIVITY != 0 {
            if let Some((ids, rest)) = body.split_first_chunk::<32>() {
                let (a, r) = ids.split_at(16);
                let guid = |b: &[u8]| Guid(b.try_into().unwrap_or([0; 16]));
                activity = Some((guid(a), guid(r)));
                body = rest;
            }
        }
        let mut subject = None;
        if record.flags & FLAG_SUBJECT != 0 {
            if let Some((tid, rest)) = body.split_first_chunk::<8>() {
                subject = Some(u64::from_le_bytes(*tid));
                body = rest;
            }
        }
        let mut stack_id = 0;
        if record.flags & FLAG_STACK != 0 {
            let (stack, rest) = split_stack(body);
            if let Some(stack) = stack {
                stack_id = self.stack_id(stack);
            }
            body = rest;
        }
        let capture_thread = if v6 { thread.index } else { thread.os_tid };
        let event_thread = match subject {
            None => capture_thread,
            Some(tid) if !v6 => {
                self.note_subject(tid);
                tid
            }
            Some(tid) => self.subject_index(tid).unwrap_or(capture_thread),
        };
        // One header, updated field by field: built afresh, its zeroed ids were read back
        // as whole 16-byte words straight after their 8-byte stores, which stalls.
        let header = &mut self.header;
        header.metadata_id = record.event_index + 1;
        header.sequence_number = record.seq;
        header.thread = event_thread;
        header.capture_thread = capture_thread;
        header.timestamp = record.timestamp;
        header.stack_id = stack_id;
        header.is_sorted = is_sorted;
        header.label_list_id = 0;
        match activity {
            Some((a, r)) if v6 => {
                header.label_list_id = self.next_label_id;
                self.next_label_id += 1;
                self.new_labels
                    .push(vec![Label::ActivityId(a), Label::RelatedActivityId(r)]);
            }
            Some((a, r)) => {
                header.activity_id = a;
                header.related_activity_id = r;
                self.header_has_activity = true;
            }
            None if self.header_has_activity => {
                header.activity_id = Guid::default();
                header.related_activity_id = Guid::default();
                self.header_has_activity = false;
            }
            None => {}
        }
        self.block.push(&self.header, body);
        if self.block.encoded_len() >= EVENT_BLOCK_TARGET {
            self.flush(out)?;
        }
        Ok(())
    }

    fn note_metadata(&mut self, index: u32) {
        let at = index as usize;
        if self.written_metadata.get(at).copied().unwrap_or(false) {
            return;
        }
        if at >= self.written_metadata.len() {
            self.written_metadata.resize(at + 1, false);
        }
        self.written_metadata[at] = true;
        if let Some(event) = registry::event_at(index) {
            self.new_metadata
                .push(crate::metadata::of_event(event, index + 1));
        }
    }

    /// Stacks are interned per sequence-point region: ids stay unique until the next
    /// sequence point, after which readers forget them.
    fn stack_id(&mut self, stack: &[u8]) -> u32 {
        if let Some(&id) = self.region_stacks.get(stack) {
            return id;
        }
        let id = self.next_stack_id;
        self.next_stack_id += 1;
        self.region_stacks.insert(stack.to_vec(), id);
        self.new_stacks.push(stack.to_vec());
        id
    }

    /// V6: the thread-table index of sampled thread `tid`, given an entry of its own the
    /// first time (when it never wrote to the session).
    fn subject_index(&mut self, tid: u64) -> Option<u64> {
        if let Some(&index) = self.thread_index_by_tid.get(&tid) {
            return Some(index);
        }
        if self.thread_index_by_tid.len() >= MAX_SUBJECT_THREADS {
            return None;
        }
        let index = SUBJECT_THREAD_INDEX_BASE | tid;
        self.thread_index_by_tid.insert(tid, index);
        let name = self.note_subject(tid);
        self.new_threads.push(ThreadInfo {
            index,
            name,
            process_id: Some(u64::from(std::process::id())),
            thread_id: Some(tid),
            key_values: Vec::new(),
        });
        Some(index)
    }

    /// Writes what is pending: the definitions first, then the event block.
    pub(super) fn flush(&mut self, out: &mut TraceOutput) -> Result<(), Error> {
        if !self.new_stacks.is_empty() {
            let stacks: Vec<&[u8]> = self.new_stacks.iter().map(Vec::as_slice).collect();
            out.write_stack_block(self.first_new_stack, &stacks)
                .map_err(output_error)?;
            self.new_stacks.clear();
        }
        self.first_new_stack = self.next_stack_id;
        if !self.new_metadata.is_empty() {
            out.write_metadata_block(&self.new_metadata)
                .map_err(output_error)?;
            self.new_metadata.clear();
        }
        if !self.new_threads.is_empty() {
            out.write_thread_block(&self.new_threads)
                .map_err(output_error)?;
            self.new_threads.clear();
        }
        if !self.new_labels.is_empty() {
            out.write_label_list_block(self.first_new_label, &self.new_labels)
                .map_err(output_error)?;
            self.new_labels.clear();
        }
        self.first_new_label = self.next_label_id;
        if !self.block.is_empty() {
            out.write_event_block(&mut self.block)
                .map_err(output_error)?;
            self.block.clear();
        }
        Ok(())
    }

    /// A sequence point was written: readers forget stacks and label lists, so ids restart.
    /// Call only after [`flush`](Self::flush).
    pub(super) fn start_region(&mut self) {
        self.region_stacks.clear();
        self.next_stack_id = 1;
        self.first_new_stack = 1;
        self.next_label_id = 1;
        self.first_new_label = 1;
    }
}

/// Splits `len: u32, stack bytes` off the front of a record body.
fn split_stack(body: &[u8]) -> (Option<&[u8]>, &[u8]) {
    let Some((len, rest)) = body.split_first_chunk::<4>() else {
        return (None, body);
    };
    let len = u32::from_le_bytes(*len) as usize;
    match rest.get(..len) {
        Some(stack) => (Some(stack), &rest[len..]),
        None => (None, body),
    }
}

pub(super) fn output_error(e: nettrace::Error) -> Error {
    Error::Write(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nettrace::write::TraceWriter;
    use nettrace::{EventMetadata, TraceInfo, TraceReader};
    use std::sync::{Arc, Mutex};

    /// An event index no test registers: the encoder writes no metadata for it, the test
    /// does.
    const INDEX: u32 = 900_000;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A record as the writer lays it out.
    fn record(seq: u32, flags: u32, timestamp: i64, body: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&((RECORD_HEADER + body.len()) as u32).to_le_bytes());
        r.extend_from_slice(&INDEX.to_le_bytes());
        r.extend_from_slice(&seq.to_le_bytes());
        r.extend_from_slice(&flags.to_le_bytes());
        r.extend_from_slice(&timestamp.to_le_bytes());
        r.extend_from_slice(body);
        r
    }

    /// An event read back: sequence number, timestamp, payload, has a stack, IsSorted.
    type ReadBack = (u32, i64, Vec<u8>, bool, bool);

    /// Encodes `bytes` as one run below `cutoff`, returns what the chunk consumed and the
    /// events read back.
    fn encode(version: FormatVersion, bytes: &[u8], cutoff: i64) -> (Consumed, Vec<ReadBack>) {
        let sink = Shared::default();
        let mut out: TraceOutput =
            TraceWriter::new(Box::new(sink.clone()) as _, &TraceInfo::new(version, 8)).unwrap();
        let metadata = EventMetadata {
            metadata_id: INDEX + 1,
            provider: "Test".into(),
            event_id: 1,
            ..EventMetadata::default()
        };
        out.write_metadata_block(&[metadata]).unwrap();
        if version == FormatVersion::V6 {
            let thread = ThreadInfo {
                index: 3,
                ..ThreadInfo::default()
            };
            out.write_thread_block(&[thread]).unwrap();
        }
        let mut encoder = Encoder::new(version);
        encoder.start_run(true);
        let author = Author {
            index: 3,
            os_tid: 3,
        };
        let consumed = encoder.run_chunk(&mut out, author, bytes, cutoff).unwrap();
        encoder.flush(&mut out).unwrap();
        out.finish().unwrap();
        let trace = sink.0.lock().unwrap().clone();
        let mut reader = TraceReader::from_slice(&trace).unwrap();
        let mut events = Vec::new();
        while let Some(e) = reader.next_event().unwrap() {
            let h = e.header;
            events.push((
                h.sequence_number,
                h.timestamp,
                e.payload.to_vec(),
                e.stack.is_some(),
                h.is_sorted,
            ));
        }
        (consumed, events)
    }

    #[test]
    fn a_run_stops_at_the_cutoff_and_reads_back_whole() {
        for version in [FormatVersion::V5, FormatVersion::V6] {
            let mut bytes = Vec::new();
            let mut want = Vec::new();
            for seq in 1..=40u32 {
                let ts = 1_000 + i64::from(seq) * 37;
                let payload = u64::from(seq).to_le_bytes().repeat(2);
                let (flags, body) = match seq {
                    // A stack (a u32 length, then the frames) breaks the successors.
                    10 => {
                        let mut body = 8u32.to_le_bytes().to_vec();
                        body.extend_from_slice(&0x1234u64.to_le_bytes());
                        body.extend_from_slice(&payload);
                        (FLAG_STACK, body)
                    }
                    // So does a payload of another size.
                    20 => (0, payload[..5].to_vec()),
                    _ => (0, payload.clone()),
                };
                bytes.extend(record(seq, flags, ts, &body));
                let payload = if seq == 20 {
                    payload[..5].to_vec()
                } else {
                    payload
                };
                want.push((seq, ts, payload, seq == 10, seq == 1));
            }
            // Records 31.. are at or past the cutoff.
            let cutoff = 1_000 + 31 * 37;
            let cut = bytes.len() - 10 * (RECORD_HEADER + 16);
            let (consumed, events) = encode(version, &bytes, cutoff);
            assert_eq!(consumed.bytes, cut, "{version:?}");
            assert_eq!(consumed.last_seq, Some(30));
            assert_eq!(consumed.left, Some(31));
            want.truncate(30);
            assert_eq!(events, want, "{version:?}");
        }
    }

    #[test]
    fn successors_wrap_their_sequence_numbers() {
        let seqs = [u32::MAX - 2, u32::MAX - 1, u32::MAX, 0, 1, 2];
        let bytes: Vec<u8> = seqs
            .iter()
            .enumerate()
            .flat_map(|(i, &seq)| record(seq, 0, 10 + i as i64, &[i as u8; 16]))
            .collect();
        for version in [FormatVersion::V5, FormatVersion::V6] {
            let (consumed, events) = encode(version, &bytes, i64::MAX);
            assert_eq!(consumed.bytes, bytes.len());
            assert_eq!(consumed.last_seq, Some(2));
            let got: Vec<u32> = events.iter().map(|e| e.0).collect();
            assert_eq!(got, seqs, "{version:?}");
        }
    }
}
