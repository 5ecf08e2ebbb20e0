//! The event reader: walks blocks, keeps the caches the format allows, resolves each
//! event's references and counts lost events.
//!
//! Memory is bounded by one block plus the caches: metadata (until a V6 flush), stacks and
//! label lists (until the next sequence point) and threads (V6, until removed or flushed).

use std::io::Read;
use std::sync::Arc;

use crate::cursor::Cursor;
use crate::error::{Error, ErrorKind, Result, StreamOffset};
use crate::header::{HeaderDecoder, BLOCK_FLAG_COMPRESSED, FAST_WINDOW};
use crate::idmap::DenseMap;
use crate::metadata;
use crate::model::{
    EventHeader, EventMetadata, FieldDesc, FormatVersion, Guid, Label, LabelList, ThreadInfo,
    TraceInfo,
};
use crate::payload::{self, Value, ValueRef};
use crate::plan::FieldPlan;
use crate::source::{BlockKind, BlockReader, Input, ReadInput, SliceInput};
use crate::stacks::StackTable;

/// Counters the reader keeps while it reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Events yielded so far.
    pub events: u64,
    /// Blocks read, of every kind.
    pub blocks: u64,
    /// Sequence points read.
    pub sequence_points: u64,
    /// Events whose stack id named no stack in the current sequence-point region.
    pub unresolved_stacks: u64,
    /// Events lost, in total.
    pub lost_events: u64,
    /// Events lost per capturing thread (OS thread id when known, else thread index),
    /// in order of first loss.
    pub lost_by_thread: Vec<(u64, u64)>,
    /// Where the input ended early, when the reader accepts a cut-off trace
    /// ([`TraceReader::accept_truncation`]) and the input was cut off.
    pub truncation: Option<Truncation>,
}

/// Where a cut-off trace ends: the input stopped inside a block, or between blocks before
/// the end-of-stream marker. Everything before it was read; the events of the cut block
/// (and whatever followed it) are missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    /// Where the incomplete block (or the missing block header) starts.
    pub offset: u64,
    /// What the reader was reading when the input ended.
    pub what: &'static str,
}

impl ReadStats {
    fn add_lost(&mut self, thread: u64, n: u64) {
        if n == 0 {
            return;
        }
        self.lost_events += n;
        match self.lost_by_thread.iter_mut().find(|(t, _)| *t == thread) {
            Some((_, total)) => *total += n,
            None => self.lost_by_thread.push((thread, n)),
        }
    }
}

/// One event, borrowed from the reader until the next call that advances it.
///
/// Every reference is resolved up front; [`TraceReader::next_event_ref`] hands out an
/// [`EventRef`] instead, which resolves threads and labels only when asked.
#[derive(Debug, Clone, Copy)]
pub struct Event<'r> {
    /// The decoded header.
    pub header: EventHeader,
    /// The event's metadata.
    pub metadata: &'r EventMetadata,
    /// Raw payload bytes.
    pub payload: &'r [u8],
    /// Raw stack bytes (pointer-sized IPs, leaf first), if the event has a stack.
    pub stack: Option<&'r [u8]>,
    /// V6: the thread the event describes.
    pub thread: Option<&'r ThreadInfo>,
    /// V6: the thread that captured the event.
    pub capture_thread: Option<&'r ThreadInfo>,
    /// V6: the event's labels.
    pub labels: Option<&'r [Label]>,
    /// Absolute stream offset of the event's header.
    pub offset: StreamOffset,
    /// The trace the event belongs to.
    pub trace: &'r TraceInfo,
}

impl<'r> Event<'r> {
    /// `Provider/EventName`, as TraceEvent names it.
    pub fn qualified_name(&self) -> String {
        self.metadata.qualified_name()
    }

    /// OS thread id the event describes (V6: from the thread table, else the index).
    pub fn thread_id(&self) -> u64 {
        os_thread_id(self.trace, self.thread, self.header.thread)
    }

    /// OS thread id that captured the event.
    pub fn capture_thread_id(&self) -> u64 {
        os_thread_id(self.trace, self.capture_thread, self.header.capture_thread)
    }

    /// OS process id (V6: from the thread table; V4/V5: the trace's process).
    pub fn process_id(&self) -> Option<u64> {
        process_id(self.trace, self.thread)
    }

    /// Thread name, when the trace states one (V6).
    pub fn thread_name(&self) -> Option<&'r str> {
        self.thread.and_then(|t| t.name.as_deref())
    }

    /// Milliseconds since the trace's sync time.
    pub fn timestamp_msec(&self) -> f64 {
        self.trace.ticks_to_msec(self.header.timestamp)
    }

    /// Activity id: from the header (V4/V5) or the label list (V6).
    pub fn activity_id(&self) -> Guid {
        activity_id(self.labels, self.header.activity_id)
    }

    /// Related activity id: from the header (V4/V5) or the label list (V6).
    pub fn related_activity_id(&self) -> Guid {
        related_activity_id(self.labels, self.header.related_activity_id)
    }

    /// The stack's instruction pointers, leaf first.
    pub fn stack_ips(&self) -> impl Iterator<Item = u64> + 'r {
        stack_ips(self.stack.unwrap_or(&[]), self.trace.pointer_size)
    }

    /// Decodes the payload into named, typed values.
    pub fn decode_payload(&self) -> Result<Vec<(&'r str, Value)>> {
        decode_payload(self.metadata, self.payload, self.trace.pointer_size)
    }

    /// Decodes the payload field by field without copying it: `visit` gets each top-level
    /// field's description and its value, with strings, byte arrays, other arrays
    /// ([`ValueRef::Array`]) and nested objects ([`ValueRef::Object`]) borrowed from the
    /// payload: nothing is allocated. Returns the number of fields decoded. The values are the ones
    /// [`Event::decode_payload`] returns ([`ValueRef::to_value`]); this is the faster way to
    /// read them.
    ///
    /// ```no_run
    /// # fn main() -> nettrace::Result<()> {
    /// # let bytes = std::fs::read("trace.nettrace").unwrap();
    /// let mut reader = nettrace::TraceReader::from_slice(&bytes)?;
    /// while let Some(event) = reader.next_event()? {
    ///     event.for_each_field(|field, value| println!("{} = {value}", field.name))?;
    /// }
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn for_each_field(&self, visit: impl FnMut(&'r FieldDesc, ValueRef<'r>)) -> Result<usize> {
        for_each_field(self.metadata, self.payload, self.trace.pointer_size, visit)
    }

    /// An owned copy, for holding past the reader's next call.
    pub fn to_owned_event(&self, metadata: Arc<EventMetadata>) -> OwnedEvent {
        OwnedEvent {
            header: self.header,
            metadata,
            payload: self.payload.to_vec(),
            stack: self.stack.map(<[u8]>::to_vec),
            thread: self.thread.cloned(),
            capture_thread: self.capture_thread.cloned(),
            labels: self.labels.map(<[Label]>::to_vec),
            offset: self.offset,
        }
    }
}

/// One event as the reader holds it: the header is borrowed from the header decoder,
/// metadata, payload and stack are resolved, and V6 threads and labels are looked up only
/// when asked. Borrowed from the reader until the next call that advances it.
///
/// This is what [`TraceReader::next_event_ref`] yields; it is cheaper to produce than an
/// [`Event`] (a few words instead of ~200 bytes, and no thread or label look-ups unless
/// used). [`EventRef::to_event`] gives the [`Event`].
#[derive(Debug, Clone, Copy)]
pub struct EventRef<'r> {
    header: &'r EventHeader,
    metadata: &'r EventMetadata,
    plan: &'r FieldPlan,
    payload: &'r [u8],
    /// Empty when the event has no stack (or an empty one, which reads the same).
    stack: &'r [u8],
    offset: StreamOffset,
    tables: &'r Tables,
    trace: &'r TraceInfo,
}

impl<'r> EventRef<'r> {
    /// The decoded header.
    #[inline]
    pub fn header(&self) -> &'r EventHeader {
        self.header
    }

    /// The event's metadata.
    #[inline]
    pub fn metadata(&self) -> &'r EventMetadata {
        self.metadata
    }

    /// Raw payload bytes.
    #[inline]
    pub fn payload(&self) -> &'r [u8] {
        self.payload
    }

    /// Raw stack bytes (pointer-sized IPs, leaf first), if the event has a stack.
    #[inline]
    pub fn stack(&self) -> Option<&'r [u8]> {
        (!self.stack.is_empty()).then_some(self.stack)
    }

    /// Absolute stream offset of the event's header.
    #[inline]
    pub fn offset(&self) -> StreamOffset {
        self.offset
    }

    /// The trace the event belongs to.
    #[inline]
    pub fn trace(&self) -> &'r TraceInfo {
        self.trace
    }

    /// V6: the thread the event describes.
    #[inline]
    pub fn thread(&self) -> Option<&'r ThreadInfo> {
        self.tables.thread(self.trace, self.header.thread)
    }

    /// V6: the thread that captured the event.
    #[inline]
    pub fn capture_thread(&self) -> Option<&'r ThreadInfo> {
        self.tables.thread(self.trace, self.header.capture_thread)
    }

    /// V6: the event's labels.
    #[inline]
    pub fn labels(&self) -> Option<&'r [Label]> {
        self.tables.labels(self.trace, self.header.label_list_id)
    }

    /// `Provider/EventName`, as TraceEvent names it.
    pub fn qualified_name(&self) -> String {
        self.metadata.qualified_name()
    }

    /// OS thread id the event describes (V6: from the thread table, else the index).
    #[inline]
    pub fn thread_id(&self) -> u64 {
        os_thread_id(self.trace, self.thread(), self.header.thread)
    }

    /// OS thread id that captured the event.
    #[inline]
    pub fn capture_thread_id(&self) -> u64 {
        os_thread_id(
            self.trace,
            self.capture_thread(),
            self.header.capture_thread,
        )
    }

    /// OS process id (V6: from the thread table; V4/V5: the trace's process).
    pub fn process_id(&self) -> Option<u64> {
        process_id(self.trace, self.thread())
    }

    /// Thread name, when the trace states one (V6).
    pub fn thread_name(&self) -> Option<&'r str> {
        self.thread().and_then(|t| t.name.as_deref())
    }

    /// Milliseconds since the trace's sync time.
    pub fn timestamp_msec(&self) -> f64 {
        self.trace.ticks_to_msec(self.header.timestamp)
    }

    /// Activity id: from the header (V4/V5) or the label list (V6).
    pub fn activity_id(&self) -> Guid {
        activity_id(self.labels(), self.header.activity_id)
    }

    /// Related activity id: from the header (V4/V5) or the label list (V6).
    pub fn related_activity_id(&self) -> Guid {
        related_activity_id(self.labels(), self.header.related_activity_id)
    }

    /// The stack's instruction pointers, leaf first.
    #[inline]
    pub fn stack_ips(&self) -> impl Iterator<Item = u64> + 'r {
        stack_ips(self.stack, self.trace.pointer_size)
    }

    /// Decodes the payload into named, typed values.
    pub fn decode_payload(&self) -> Result<Vec<(&'r str, Value)>> {
        decode_payload(self.metadata, self.payload, self.trace.pointer_size)
    }

    /// Decodes the payload field by field without copying it; see
    /// [`Event::for_each_field`]. This one runs the metadata row's precompiled field plan.
    #[inline]
    pub fn for_each_field(&self, visit: impl FnMut(&'r FieldDesc, ValueRef<'r>)) -> Result<usize> {
        let metadata = self.metadata;
        self.plan
            .for_each_field(
                &metadata.fields,
                self.payload,
                self.trace.pointer_size,
                visit,
            )
            .map_err(|e| payload_error(metadata, e))
    }

    /// The event with every reference resolved.
    #[inline]
    pub fn to_event(&self) -> Event<'r> {
        Event {
            header: *self.header,
            metadata: self.metadata,
            payload: self.payload,
            stack: self.stack(),
            thread: self.thread(),
            capture_thread: self.capture_thread(),
            labels: self.labels(),
            offset: self.offset,
            trace: self.trace,
        }
    }
}

fn os_thread_id(trace: &TraceInfo, thread: Option<&ThreadInfo>, header_thread: u64) -> u64 {
    match trace.version {
        FormatVersion::V6 => thread.and_then(|t| t.thread_id).unwrap_or(header_thread),
        _ => header_thread,
    }
}

fn process_id(trace: &TraceInfo, thread: Option<&ThreadInfo>) -> Option<u64> {
    match trace.version {
        FormatVersion::V6 => thread.and_then(|t| t.process_id),
        _ => trace.process_id,
    }
}

fn activity_id(labels: Option<&[Label]>, header: Guid) -> Guid {
    labels
        .and_then(|l| {
            l.iter().find_map(|l| match l {
                Label::ActivityId(g) => Some(*g),
                _ => None,
            })
        })
        .unwrap_or(header)
}

fn related_activity_id(labels: Option<&[Label]>, header: Guid) -> Guid {
    labels
        .and_then(|l| {
            l.iter().find_map(|l| match l {
                Label::RelatedActivityId(g) => Some(*g),
                _ => None,
            })
        })
        .unwrap_or(header)
}

#[inline]
fn stack_ips(stack: &[u8], pointer_size: u32) -> impl Iterator<Item = u64> + '_ {
    let mut rest = stack;
    // The pointer size is 4 or 8 (checked when the trace is opened). Constant-size chunks
    // keep a division by the pointer size out of the walk; a partial trailing IP is ignored.
    let wide = pointer_size != 4;
    std::iter::from_fn(move || {
        if wide {
            let (ip, tail) = rest.split_first_chunk::<8>()?;
            rest = tail;
            Some(u64::from_le_bytes(*ip))
        } else {
            let (ip, tail) = rest.split_first_chunk::<4>()?;
            rest = tail;
            Some(u64::from(u32::from_le_bytes(*ip)))
        }
    })
}

fn decode_payload<'r>(
    metadata: &'r EventMetadata,
    bytes: &[u8],
    pointer_size: u32,
) -> Result<Vec<(&'r str, Value)>> {
    payload::decode(&metadata.fields, bytes, pointer_size).map_err(|e| payload_error(metadata, e))
}

#[inline]
fn for_each_field<'r>(
    metadata: &'r EventMetadata,
    bytes: &'r [u8],
    pointer_size: u32,
    visit: impl FnMut(&'r FieldDesc, ValueRef<'r>),
) -> Result<usize> {
    payload::for_each_field(&metadata.fields, bytes, pointer_size, visit)
        .map_err(|e| payload_error(metadata, e))
}

#[cold]
fn payload_error(metadata: &EventMetadata, e: payload::DecodeError) -> Error {
    Error::from(ErrorKind::Payload {
        event: metadata.qualified_name(),
        field: e.field,
        detail: e.detail,
    })
}

/// An event that owns its data.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedEvent {
    /// The decoded header.
    pub header: EventHeader,
    /// The event's metadata.
    pub metadata: Arc<EventMetadata>,
    /// Raw payload bytes.
    pub payload: Vec<u8>,
    /// Raw stack bytes.
    pub stack: Option<Vec<u8>>,
    /// V6: the thread the event describes.
    pub thread: Option<ThreadInfo>,
    /// V6: the thread that captured it.
    pub capture_thread: Option<ThreadInfo>,
    /// V6: labels.
    pub labels: Option<LabelList>,
    /// Stream offset of the header.
    pub offset: StreamOffset,
}

impl OwnedEvent {
    /// A borrowed view.
    pub fn as_event<'a>(&'a self, trace: &'a TraceInfo) -> Event<'a> {
        Event {
            header: self.header,
            metadata: &self.metadata,
            payload: &self.payload,
            stack: self.stack.as_deref(),
            thread: self.thread.as_ref(),
            capture_thread: self.capture_thread.as_ref(),
            labels: self.labels.as_deref(),
            offset: self.offset,
            trace,
        }
    }
}

/// The rows events refer to, each cached as long as the format allows (see the module doc).
/// Ids are dense in practice, so each table is a [`DenseMap`].
#[derive(Debug, Default)]
pub(crate) struct Tables {
    metadata: DenseMap<MetadataRow>,
    /// The stacks of the current sequence-point region.
    stacks: StackTable,
    threads: DenseMap<ThreadInfo>,
    label_lists: DenseMap<LabelList>,
}

/// A metadata row and its payload decoder.
#[derive(Debug)]
struct MetadataRow {
    metadata: Arc<EventMetadata>,
    plan: FieldPlan,
}

impl Tables {
    /// V6 thread row `index`.
    #[inline]
    fn thread(&self, trace: &TraceInfo, index: u64) -> Option<&ThreadInfo> {
        if trace.version == FormatVersion::V6 {
            self.threads.get(index)
        } else {
            None
        }
    }

    /// V6 label list `id`.
    #[inline]
    fn labels(&self, trace: &TraceInfo, id: u32) -> Option<&[Label]> {
        if trace.version == FormatVersion::V6 && id != 0 {
            self.label_lists.get(u64::from(id)).map(Vec::as_slice)
        } else {
            None
        }
    }
}

/// Where the next event of the current event block starts.
#[derive(Debug)]
struct EventBlockState {
    /// Block-relative position of the next event.
    pos: usize,
    /// Absolute stream offset of the block's first byte.
    base: u64,
    decoder: HeaderDecoder,
}

/// What one step of the reader produced.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step {
    Event(EventLoc),
    SequencePoint,
    End,
}

/// An event located in the current block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventLoc {
    payload: (usize, usize),
    offset: u64,
}

/// Reads events from a nettrace stream of any supported version.
///
/// ```no_run
/// # fn main() -> nettrace::Result<()> {
/// let bytes = std::fs::read("trace.nettrace").unwrap();
/// let mut reader = nettrace::TraceReader::from_slice(&bytes)?;
/// while let Some(event) = reader.next_event()? {
///     println!("{} at {:.3} ms", event.qualified_name(), event.timestamp_msec());
/// }
/// println!("{} events lost", reader.stats().lost_events);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TraceReader<I: Input> {
    blocks: BlockReader<I>,
    tables: Tables,
    /// Last sequence number per capture thread.
    last_sequence: DenseMap<u32>,
    /// The capture thread of the previous event and its last sequence number, kept out of
    /// `last_sequence` while consecutive events come from the same thread (the common case).
    sequence_cache: Option<(u64, u32)>,
    current: Option<EventBlockState>,
    /// Whether the stream is V6 (fixed by the stream header).
    v6: bool,
    stats: ReadStats,
    /// Counted where stacks are resolved, which borrows the reader immutably.
    unresolved_stacks: std::cell::Cell<u64>,
    /// Whether input that ends early ends the stream (recorded in the stats) instead of
    /// being an error.
    accept_truncation: bool,
}

impl<'a> TraceReader<SliceInput<'a>> {
    /// Reads a trace held in memory (a file's bytes or an mmap) without copying blocks.
    pub fn from_slice(data: &'a [u8]) -> Result<Self> {
        Self::new(SliceInput::new(data))
    }
}

impl<R: Read> TraceReader<ReadInput<R>> {
    /// Reads a trace from a stream (file, socket, pipe), one block at a time.
    pub fn from_read(reader: R) -> Result<Self> {
        Self::new(ReadInput::new(reader))
    }
}

impl<I: Input> TraceReader<I> {
    /// Reads the stream header from `input`.
    pub fn new(input: I) -> Result<Self> {
        let blocks = BlockReader::new(input)?;
        let v6 = blocks.trace().version == FormatVersion::V6;
        Ok(TraceReader {
            blocks,
            tables: Tables::default(),
            last_sequence: DenseMap::default(),
            sequence_cache: None,
            current: None,
            v6,
            stats: ReadStats::default(),
            unresolved_stacks: std::cell::Cell::new(0),
            accept_truncation: false,
        })
    }

    /// Reads a trace that was cut off (its collector killed, its disk full, a copy
    /// interrupted) up to its last whole block: where the input ends early, the stream
    /// ends, and [`ReadStats::truncation`] says where and in what. Only the input running
    /// out is accepted; bytes that break the format are still an error.
    pub fn accept_truncation(mut self, accept: bool) -> Self {
        self.accept_truncation = accept;
        self
    }

    /// Facts from the trace header.
    pub fn trace(&self) -> &TraceInfo {
        self.blocks.trace()
    }

    /// Counters so far, including lost events.
    pub fn stats(&self) -> ReadStats {
        ReadStats {
            unresolved_stacks: self.unresolved_stacks.get(),
            ..self.stats.clone()
        }
    }

    /// Metadata rows currently known.
    pub fn metadata(&self) -> impl Iterator<Item = &Arc<EventMetadata>> {
        self.tables.metadata.values().map(|row| &row.metadata)
    }

    /// Metadata row `id`, shared.
    pub fn metadata_by_id(&self, id: u32) -> Option<&Arc<EventMetadata>> {
        self.tables
            .metadata
            .get(u64::from(id))
            .map(|row| &row.metadata)
    }

    /// Whether the end-of-stream marker has been read.
    pub fn is_finished(&self) -> bool {
        self.blocks.is_finished()
    }

    /// The next event, or `None` at the end of the stream.
    pub fn next_event(&mut self) -> Result<Option<Event<'_>>> {
        Ok(self.next_event_ref()?.map(|e| e.to_event()))
    }

    /// The next event as an [`EventRef`], or `None` at the end of the stream: the fastest
    /// way to iterate. It reads the same events as [`TraceReader::next_event`] and keeps
    /// the same counters, but hands out the header by reference and looks up V6 threads and
    /// labels only when asked.
    ///
    /// ```no_run
    /// # fn main() -> nettrace::Result<()> {
    /// let bytes = std::fs::read("trace.nettrace").unwrap();
    /// let mut reader = nettrace::TraceReader::from_slice(&bytes)?;
    /// let mut ticks = 0i64;
    /// while let Some(event) = reader.next_event_ref()? {
    ///     ticks = ticks.wrapping_add(event.header().timestamp);
    /// }
    /// # Ok(()) }
    /// ```
    #[inline(always)]
    pub fn next_event_ref(&mut self) -> Result<Option<EventRef<'_>>> {
        match self.next_in_block_fast() {
            Some(Ok(loc)) => self.event_ref(loc).map(Some),
            Some(Err(e)) => Err(e),
            None => self.next_event_ref_slow(),
        }
    }

    /// [`TraceReader::next_event_ref`] for what the fast path leaves: block boundaries, the
    /// last few events of a block, uncompressed headers and malformed input.
    #[inline(never)]
    fn next_event_ref_slow(&mut self) -> Result<Option<EventRef<'_>>> {
        loop {
            match self.step()? {
                Step::Event(loc) => return self.event_ref(loc).map(Some),
                Step::SequencePoint => continue,
                Step::End => return Ok(None),
            }
        }
    }

    /// The next event of the current block, when it lies in the bulk of a block with
    /// compressed headers: at least [`FAST_WINDOW`] bytes remain, so the header decodes
    /// from a fixed window. `None` hands everything else to [`TraceReader::step`], which
    /// starts from the same position.
    ///
    /// This is [`TraceReader::next_in_block`] without its checked cursor; the errors it
    /// reports are the same.
    #[inline(always)]
    fn next_in_block_fast(&mut self) -> Option<Result<EventLoc>> {
        let state = self.current.as_mut()?;
        let data = self.blocks.input().block();
        let window = data.get(state.pos..)?.first_chunk::<FAST_WINDOW>()?;
        let used = state.decoder.decode_window(window)?;
        let header = state.decoder.header();
        let offset = state.base + state.pos as u64;
        let start = state.pos + used;
        // Cannot overflow: `start` is within the block and the size is a u32.
        let end = start + header.payload_size as usize;
        if end > data.len() {
            return Some(Err(Error::eof(state.base + start as u64, "event payload")));
        }
        state.pos = end;
        let (metadata_id, capture_thread, sequence_number) = (
            header.metadata_id,
            header.capture_thread,
            header.sequence_number,
        );
        if metadata_id == 0 {
            return Some(Err(metadata_id_zero(offset)));
        }
        self.track_sequence(capture_thread, sequence_number);
        self.stats.events += 1;
        Some(Ok(EventLoc {
            payload: (start, end),
            offset,
        }))
    }

    pub(crate) fn event_ref_at(&self, loc: EventLoc) -> Result<EventRef<'_>> {
        self.event_ref(loc)
    }

    pub(crate) fn event_at(&self, loc: EventLoc) -> Result<Event<'_>> {
        self.event_ref(loc).map(|e| e.to_event())
    }

    #[inline(always)]
    fn event_ref(&self, loc: EventLoc) -> Result<EventRef<'_>> {
        let Some(state) = &self.current else {
            return Err(Error::malformed(
                loc.offset,
                "event",
                "no current event block",
            ));
        };
        let header = state.decoder.header();
        let Some(row) = self.tables.metadata.get(u64::from(header.metadata_id)) else {
            return Err(Error::undefined(
                StreamOffset(loc.offset),
                "metadata",
                u64::from(header.metadata_id),
            ));
        };
        let block = self.blocks.input().block();
        let payload = block.get(loc.payload.0..loc.payload.1).unwrap_or(&[]);
        // Branch-free: whether an event has a stack is close to random (see `stacks`).
        let (stack, resolved) = self.tables.stacks.get(header.stack_id);
        self.unresolved_stacks
            .set(self.unresolved_stacks.get() + u64::from(!resolved));
        Ok(EventRef {
            header,
            metadata: &row.metadata,
            plan: &row.plan,
            payload,
            stack,
            offset: StreamOffset(loc.offset),
            tables: &self.tables,
            trace: self.blocks.trace(),
        })
    }

    /// Advances to the next event or sequence point.
    #[inline]
    pub(crate) fn step(&mut self) -> Result<Step> {
        if let Some(loc) = self.next_in_block()? {
            return Ok(Step::Event(loc));
        }
        self.step_blocks()
    }

    /// Reads blocks until one yields an event or a sequence point.
    fn step_blocks(&mut self) -> Result<Step> {
        loop {
            if let Some(loc) = self.next_in_block()? {
                return Ok(Step::Event(loc));
            }
            // A cut input has ended: the reader stays at its end (the input's position is
            // inside the cut block, where nothing more can be read).
            let next = if self.stats.truncation.is_some() {
                None
            } else {
                match self.blocks.next_block() {
                    Err(e) if self.accept_truncation => match e.kind() {
                        crate::ErrorKind::UnexpectedEof { offset, what } => {
                            self.stats.truncation = Some(Truncation {
                                offset: offset.0,
                                what,
                            });
                            None
                        }
                        _ => return Err(e),
                    },
                    other => other?,
                }
            };
            let Some(info) = next else {
                self.current = None;
                return Ok(Step::End);
            };
            self.stats.blocks += 1;
            let data = self.blocks.input().block();
            let mut c = Cursor::new(data, info.offset);
            match info.kind {
                BlockKind::Event => {
                    let (compressed, pos) = read_block_header(&mut c)?;
                    self.current = Some(EventBlockState {
                        pos,
                        base: info.offset,
                        decoder: HeaderDecoder::new(compressed, self.v6),
                    });
                }
                BlockKind::Metadata => self.read_metadata_block(info.offset)?,
                BlockKind::Stack => self.read_stack_block(info.offset)?,
                BlockKind::SequencePoint => {
                    self.read_sequence_point(info.offset)?;
                    return Ok(Step::SequencePoint);
                }
                BlockKind::Thread => self.read_thread_block(info.offset)?,
                BlockKind::RemoveThread => self.read_remove_thread_block(info.offset)?,
                BlockKind::LabelList => self.read_label_list_block(info.offset)?,
                BlockKind::Unknown => {}
            }
        }
    }

    /// Decodes the next event header of the current event block, if any remain.
    #[inline]
    fn next_in_block(&mut self) -> Result<Option<EventLoc>> {
        let Some(state) = self.current.as_mut() else {
            return Ok(None);
        };
        let data = self.blocks.input().block();
        if state.pos >= data.len() {
            self.current = None;
            return Ok(None);
        }
        // Positions are block-relative, so alignment padding can be computed from them.
        let mut c = Cursor::at(data, state.base, state.pos);
        let offset = c.offset();
        let header = state.decoder.decode(&mut c)?;
        let (metadata_id, capture_thread, sequence_number, payload_size) = (
            header.metadata_id,
            header.capture_thread,
            header.sequence_number,
            header.payload_size,
        );
        let start = c.position();
        c.skip(payload_size as usize, "event payload")?;
        let end = c.position();
        state.decoder.finish_event(&mut c)?;
        state.pos = c.position();
        if metadata_id == 0 {
            return Err(metadata_id_zero(offset));
        }
        // Metadata and stack ids are resolved once, in `event_ref`.
        self.track_sequence(capture_thread, sequence_number);
        self.stats.events += 1;
        Ok(Some(EventLoc {
            payload: (start, end),
            offset,
        }))
    }

    /// The thread key losses are reported under: the OS thread id when known.
    fn loss_key(&self, capture_thread: u64) -> u64 {
        if self.v6 {
            self.tables
                .threads
                .get(capture_thread)
                .and_then(|t| t.thread_id)
                .unwrap_or(capture_thread)
        } else {
            capture_thread
        }
    }

    /// Counts the events lost before this one of `capture_thread`, numbered `seq`.
    ///
    /// Threads whose ids are dense (V6 thread indexes) are looked up in place; the others
    /// (V4/V5 OS thread ids) go through a one-entry cache in front of the map, which holds
    /// the current thread while consecutive events come from it. The cache only ever holds
    /// a thread that has no dense slot, and it is written back before anything else is
    /// inserted, so the two never disagree.
    #[inline]
    fn track_sequence(&mut self, capture_thread: u64, seq: u32) {
        if let Some(last) = self.last_sequence.get_dense_mut(capture_thread) {
            let prev = std::mem::replace(last, seq);
            if seq != prev.wrapping_add(1) {
                self.count_lost(capture_thread, Some(prev), seq);
            }
            return;
        }
        self.track_sequence_sparse(capture_thread, seq);
    }

    #[inline(never)]
    fn track_sequence_sparse(&mut self, capture_thread: u64, seq: u32) {
        if let Some((thread, prev)) = self.sequence_cache {
            if thread == capture_thread && seq == prev.wrapping_add(1) {
                self.sequence_cache = Some((thread, seq));
                return;
            }
        }
        self.flush_sequence_cache();
        let previous = self.last_sequence.get(capture_thread).copied();
        if self.last_sequence.has_dense_slot(capture_thread) {
            self.last_sequence.insert(capture_thread, seq);
        } else {
            // The cache holds `seq` now; it goes back to the map when another thread comes.
            self.sequence_cache = Some((capture_thread, seq));
        }
        self.count_lost(capture_thread, previous, seq);
    }

    /// Counts the events lost between `previous` (if the thread was seen) and `seq`.
    #[cold]
    fn count_lost(&mut self, capture_thread: u64, previous: Option<u32>, seq: u32) {
        let lost = match previous {
            Some(prev) => {
                let gap = seq.wrapping_sub(prev.wrapping_add(1));
                // A restart at 1 is a new thread that reused the id; a backwards jump is
                // reordering, not loss.
                if seq == 1 || gap >= 0x8000_0000 {
                    0
                } else {
                    u64::from(gap)
                }
            }
            // Sequence numbers start at 1 per thread and session, so a first event numbered
            // s means s - 1 were attempted and never arrived.
            None => u64::from(seq.saturating_sub(1)),
        };
        if lost > 0 {
            let key = self.loss_key(capture_thread);
            self.stats.add_lost(key, lost);
        }
    }

    /// Writes the cached thread's sequence number back to `last_sequence`.
    fn flush_sequence_cache(&mut self) {
        if let Some((thread, seq)) = self.sequence_cache.take() {
            self.last_sequence.insert(thread, seq);
        }
    }

    /// Applies a lower bound from a sequence point or thread removal.
    fn check_sequence_bound(&mut self, capture_thread: u64, seq: u32) {
        self.flush_sequence_cache();
        // A thread never seen before has delivered nothing: all `seq` attempts were lost.
        // (This is how a thread that drops every event shows up at all.)
        let prev = self.last_sequence.get(capture_thread).copied().unwrap_or(0);
        let gap = seq.wrapping_sub(prev);
        if gap != 0 && gap < 0x8000_0000 {
            let key = self.loss_key(capture_thread);
            self.stats.add_lost(key, u64::from(gap));
            self.last_sequence.insert(capture_thread, seq);
        }
    }

    fn block_cursor(&self, offset: u64) -> Cursor<'_> {
        Cursor::new(self.blocks.input().block(), offset)
    }

    fn read_metadata_block(&mut self, offset: u64) -> Result<()> {
        let (rows, saw_tags) =
            parse_metadata_block(self.blocks.input().block(), offset, self.trace().version)?;
        if saw_tags && self.trace().version == FormatVersion::V4 {
            self.blocks.trace_mut().version = FormatVersion::V5;
        }
        let pointer_size = self.trace().pointer_size;
        for mut md in rows {
            metadata::resolve_names(&mut md);
            let row = MetadataRow {
                plan: FieldPlan::new(&md.fields, pointer_size),
                metadata: Arc::new(md),
            };
            self.tables
                .metadata
                .insert(u64::from(row.metadata.metadata_id), row);
        }
        Ok(())
    }

    fn read_stack_block(&mut self, offset: u64) -> Result<()> {
        let mut c = Cursor::new(self.blocks.input().block(), offset);
        let first = c.u32("first stack id")?;
        let count_at = c.offset();
        let count = c.u32("stack count")?;
        if count as usize > c.remaining() / 4 {
            return Err(Error::malformed(
                count_at,
                "stack count",
                format!("{count} stacks cannot fit"),
            ));
        }
        for i in 0..count {
            let len = c.len_u32("stack size")?;
            let bytes = c.bytes(len, "stack")?;
            self.tables.stacks.insert(first.wrapping_add(i), bytes);
        }
        Ok(())
    }

    fn read_sequence_point(&mut self, offset: u64) -> Result<()> {
        self.stats.sequence_points += 1;
        let v6 = self.trace().version == FormatVersion::V6;
        let mut bounds = Vec::new();
        let mut flags = 0;
        {
            let mut c = self.block_cursor(offset);
            let _timestamp = c.i64("sequence point timestamp")?;
            if v6 {
                flags = c.u32("sequence point flags")?;
            }
            let count_at = c.offset();
            let count = c.u32("sequence point thread count")?;
            let least = if v6 { 2 } else { 12 };
            if count as usize > c.remaining() / least {
                return Err(Error::malformed(
                    count_at,
                    "sequence point thread count",
                    format!("{count} threads cannot fit"),
                ));
            }
            for _ in 0..count {
                if v6 {
                    bounds.push((c.varu64("thread index")?, c.varu32("sequence number")?));
                } else {
                    bounds.push((c.u64("thread id")?, c.u32("sequence number")?));
                }
            }
        }
        for (thread, seq) in bounds {
            self.check_sequence_bound(thread, seq);
        }
        self.tables.stacks.clear();
        self.tables.label_lists.clear();
        if flags & 1 != 0 {
            self.flush_sequence_cache();
            self.tables.threads.clear();
            self.last_sequence.clear();
        }
        if flags & 2 != 0 {
            self.tables.metadata.clear();
        }
        Ok(())
    }

    fn read_thread_block(&mut self, offset: u64) -> Result<()> {
        let mut c = self.block_cursor(offset);
        let mut rows = Vec::new();
        while !c.is_empty() {
            let size = usize::from(c.u16("thread row size")?);
            let mut row = c.sub(size, "thread row")?;
            let mut t = ThreadInfo {
                index: row.varu64("thread index")?,
                ..Default::default()
            };
            while !row.is_empty() {
                let at = row.offset();
                match row.u8("thread info kind")? {
                    1 => t.name = Some(row.utf8_varlen("thread name")?),
                    2 => t.process_id = Some(row.varu64("process id")?),
                    3 => t.thread_id = Some(row.varu64("thread id")?),
                    4 => {
                        let k = row.utf8_varlen("thread key")?;
                        let v = row.utf8_varlen("thread value")?;
                        t.key_values.push((k, v));
                    }
                    other => {
                        return Err(Error::malformed(
                            at,
                            "thread info kind",
                            format!("unknown kind {other}"),
                        ));
                    }
                }
            }
            rows.push(t);
        }
        for t in rows {
            self.tables.threads.insert(t.index, t);
        }
        Ok(())
    }

    fn read_remove_thread_block(&mut self, offset: u64) -> Result<()> {
        let mut c = self.block_cursor(offset);
        let mut removed = Vec::new();
        while !c.is_empty() {
            removed.push((c.varu64("thread index")?, c.varu32("sequence number")?));
        }
        self.flush_sequence_cache();
        for (index, seq) in removed {
            self.check_sequence_bound(index, seq);
            self.tables.threads.remove(index);
            self.last_sequence.remove(index);
        }
        Ok(())
    }

    fn read_label_list_block(&mut self, offset: u64) -> Result<()> {
        let mut c = self.block_cursor(offset);
        let first = c.u32("first label list index")?;
        let count_at = c.offset();
        let count = c.u32("label list count")?;
        if count as usize > c.remaining() {
            return Err(Error::malformed(
                count_at,
                "label list count",
                format!("{count} lists cannot fit"),
            ));
        }
        let mut lists = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let mut list = Vec::new();
            loop {
                let at = c.offset();
                let kind = c.u8("label kind")?;
                let label = match kind & 0x7f {
                    1 => Label::ActivityId(c.guid("activity id")?),
                    2 => Label::RelatedActivityId(c.guid("related activity id")?),
                    3 => Label::TraceId(c.guid("trace id")?.0),
                    4 => Label::SpanId(c.u64("span id")?),
                    5 => Label::String {
                        key: c.utf8_varlen("label key")?,
                        value: c.utf8_varlen("label value")?,
                    },
                    6 => Label::Int {
                        key: c.utf8_varlen("label key")?,
                        value: c.vari64("label value")?,
                    },
                    7 => Label::OpCode(c.u8("opcode label")?),
                    8 => Label::Keywords(c.u64("keywords label")?),
                    9 => Label::Level(c.u8("level label")?),
                    10 => Label::Version(c.u8("version label")?),
                    other => {
                        return Err(Error::malformed(
                            at,
                            "label kind",
                            format!("unknown kind {other}"),
                        ))
                    }
                };
                list.push(label);
                if kind & 0x80 != 0 {
                    break;
                }
            }
            lists.push(list);
        }
        for (i, list) in lists.into_iter().enumerate() {
            self.tables
                .label_lists
                .insert(u64::from(first.wrapping_add(i as u32)), list);
        }
        Ok(())
    }
}

#[cold]
#[inline(never)]
fn metadata_id_zero(offset: u64) -> Error {
    Error::malformed(offset, "event", "event refers to metadata id 0")
}

/// Reads an event or metadata block header; returns whether events are compressed and the
/// block-relative position of the first event.
/// The rows of the metadata block at `offset` of `data`, and whether a V5 metadata tag was
/// seen (which makes a trace that says V4 a V5 one).
fn parse_metadata_block(
    data: &[u8],
    offset: u64,
    version: FormatVersion,
) -> Result<(Vec<EventMetadata>, bool)> {
    let mut c = Cursor::new(data, offset);
    let mut rows = Vec::new();
    let mut saw_tags = false;
    if version == FormatVersion::V6 {
        let header = usize::from(c.u16("metadata block header size")?);
        c.skip(header, "metadata block header")?;
        while !c.is_empty() {
            let size = usize::from(c.u16("metadata row size")?);
            let mut row = c.sub(size, "metadata row")?;
            rows.push(metadata::parse_v6(&mut row)?);
        }
    } else {
        let (compressed, pos) = read_block_header(&mut c)?;
        let mut decoder = HeaderDecoder::new(compressed, false);
        let mut c = Cursor::new(data, offset);
        c.skip(pos, "metadata block header")?;
        while !c.is_empty() {
            let payload_size = decoder.decode(&mut c)?.payload_size;
            let mut body = c.sub(payload_size as usize, "metadata payload")?;
            decoder.finish_event(&mut c)?;
            let (md, tags) = metadata::parse_v5(&mut body)?;
            saw_tags |= tags;
            rows.push(md);
        }
    }
    Ok((rows, saw_tags))
}

/// Every metadata row the trace in `data` defines, in file order, named as the reader names
/// them, read block by block without decoding a single event: for a consumer that must know
/// the whole trace's kinds of event before its first one (which begins can ever end). A
/// trace that stops being readable gives the rows before that point.
pub fn scan_metadata(data: &[u8]) -> Vec<EventMetadata> {
    let mut rows = Vec::new();
    let Ok(mut blocks) = BlockReader::new(SliceInput::new(data)) else {
        return rows;
    };
    let version = blocks.trace().version;
    while let Ok(Some(block)) = blocks.next_block() {
        if block.kind != BlockKind::Metadata {
            continue;
        }
        match parse_metadata_block(blocks.input().block(), block.offset, version) {
            Ok((found, _)) => rows.extend(found.into_iter().map(|mut md| {
                metadata::resolve_names(&mut md);
                md
            })),
            Err(_) => break,
        }
    }
    rows
}

fn read_block_header(c: &mut Cursor<'_>) -> Result<(bool, usize)> {
    let at = c.offset();
    let header_size = usize::from(c.u16("block header size")?);
    let flags = c.u16("block flags")?;
    if header_size < 20 {
        return Err(Error::malformed(
            at,
            "block header size",
            format!("{header_size} is smaller than 20"),
        ));
    }
    c.skip(header_size - 4, "block header")?;
    Ok((flags & BLOCK_FLAG_COMPRESSED != 0, c.position()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FieldType;
    use crate::write::{EventBlockBuilder, TraceWriter};

    use crate::test_rng::next as rng;

    /// A small trace whose headers vary every optional field: metadata id, thread, stack
    /// (present, absent, unknown), payload size, long and short varints.
    fn trace(version: FormatVersion) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let info = TraceInfo::new(version, 8);
        let mut w = TraceWriter::new(Vec::new(), &info).unwrap();
        let rows: Vec<EventMetadata> = (1..=3)
            .map(|id| EventMetadata {
                metadata_id: id,
                provider: "P".into(),
                event_id: id,
                fields: vec![FieldDesc {
                    name: "A".into(),
                    ty: FieldType::UInt32,
                }],
                ..Default::default()
            })
            .collect();
        w.write_metadata_block(&rows).unwrap();
        let mut seq = [0u32; 4];
        let mut timestamp = 1000i64;
        for block in 0..6 {
            if block % 2 == 0 {
                let stacks: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 8 * usize::from(i)]).collect();
                let refs: Vec<&[u8]> = stacks.iter().map(Vec::as_slice).collect();
                w.write_stack_block(1, &refs).unwrap();
            }
            let mut b = EventBlockBuilder::new(version);
            for _ in 0..60 {
                let r = rng(&mut x);
                let thread = (r % 4) as usize;
                seq[thread] += 1 + u32::from(r % 29 == 0);
                timestamp += (r >> 8) as i64 % 40_000;
                let payload = vec![7u8; (r >> 20) as usize % 300];
                let header = EventHeader {
                    metadata_id: 1 + (r >> 30) as u32 % 3,
                    sequence_number: seq[thread],
                    thread: 0x1000 + thread as u64 * 0x1234,
                    capture_thread: 0x1000 + thread as u64 * 0x1234,
                    processor: thread as u32,
                    stack_id: (r >> 40) as u32 % 10,
                    timestamp,
                    ..Default::default()
                };
                b.push(&header, &payload);
            }
            w.write_event_block(&mut b).unwrap();
            if block % 2 == 1 {
                w.write_sequence_point(timestamp, 0, &[]).unwrap();
            }
        }
        w.finish().unwrap()
    }

    /// What a pass saw, event by event, and how it ended.
    fn summary(
        r: &mut TraceReader<SliceInput<'_>>,
        mut next: impl FnMut(&mut TraceReader<SliceInput<'_>>) -> Result<Option<String>>,
    ) -> (Vec<String>, String, ReadStats) {
        let mut seen = Vec::new();
        let end = loop {
            match next(r) {
                Ok(Some(e)) => seen.push(e),
                Ok(None) => break "end".to_string(),
                Err(e) => break e.to_string(),
            }
        };
        (seen, end, r.stats())
    }

    fn describe(e: &Event<'_>) -> String {
        format!(
            "{:?} {:?} {} {:?} {:?}",
            e.offset, e.header, e.metadata.metadata_id, e.payload, e.stack
        )
    }

    /// `next_event_ref` (whose fast path decodes most events) and `step` + `event_at`
    /// (the checked path `SortedReader` uses) read the same events, stop with the same
    /// error and keep the same counters, on a valid trace and on corrupted copies.
    #[test]
    fn fast_path_reads_what_the_checked_path_reads() {
        let mut x = 0x1234_5678_9abc_def1u64;
        for version in [FormatVersion::V5, FormatVersion::V6] {
            let bytes = trace(version);
            for round in 0..300 {
                let mut b = bytes.clone();
                if round > 0 {
                    let at = (rng(&mut x) % b.len() as u64) as usize;
                    b[at] ^= 1 << (rng(&mut x) % 8);
                }
                let (Ok(mut fast), Ok(mut checked)) =
                    (TraceReader::from_slice(&b), TraceReader::from_slice(&b))
                else {
                    continue;
                };
                let fast = summary(&mut fast, |r| {
                    Ok(r.next_event_ref()?.map(|e| describe(&e.to_event())))
                });
                let checked = summary(&mut checked, |r| loop {
                    match r.step()? {
                        Step::Event(loc) => return Ok(Some(describe(&r.event_at(loc)?))),
                        Step::SequencePoint => continue,
                        Step::End => return Ok(None),
                    }
                });
                assert_eq!(fast, checked, "{version:?} round {round}");
                if round == 0 {
                    assert_eq!(fast.0.len(), 360);
                    assert_eq!(fast.1, "end");
                    assert!(fast.2.unresolved_stacks > 0 && fast.2.lost_events > 0);
                }
            }
        }
    }
}
