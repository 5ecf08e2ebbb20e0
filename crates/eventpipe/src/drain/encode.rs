//! From records to blocks: the drain's side of the nettrace writer.
//!
//! Records arrive in order ([`super::merge`]) and go straight into an event block. What an
//! event refers to and the reader has not seen yet (its metadata row, its stack, a V6 label
//! list for its activity ids, a V6 thread entry for a sampled thread) is collected beside the
//! block and written just before it, so every reference is defined before it is used.

use std::collections::HashMap;
use std::io::Write;

use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{EventHeader, EventMetadata, FormatVersion, Guid, Label, ThreadInfo};

use super::merge::{Author, RecordView};
use crate::threads::ThreadSessionState;
use crate::{registry, rundown, Error};
use eventpipe_core::record::{FLAG_ACTIVITY, FLAG_STACK, FLAG_SUBJECT};

/// An event block is written once it holds this many bytes.
const EVENT_BLOCK_TARGET: usize = 60 << 10;
/// V6 thread-table indexes of threads that samples are about but that never wrote to the
/// session: this bit plus the OS id, far from the session's own dense indexes.
const SUBJECT_THREAD_INDEX_BASE: u64 = 1 << 62;
/// Beyond this many sampled threads, further ones are attributed to the sampler in V6.
const MAX_SUBJECT_THREADS: usize = 65_536;

pub(super) type TraceOutput = TraceWriter<Box<dyn Write + Send>>;

/// The encoding state of one session's trace.
pub(super) struct Encoder {
    v6: bool,
    block: EventBlockBuilder,
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
}

impl Encoder {
    pub(super) fn new(version: FormatVersion) -> Encoder {
        Encoder {
            v6: version == FormatVersion::V6,
            block: EventBlockBuilder::new(version),
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
        }
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

    /// Encodes one record of `thread`; `is_sorted` marks the pass's last event.
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
            Some(tid) if !v6 => tid,
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
        self.new_threads.push(ThreadInfo {
            index,
            name: rundown::kernel_thread_name(tid),
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
            out.write_event_block(&self.block).map_err(output_error)?;
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
    Error::Output(e.to_string())
}
