//! Writing NetTrace V5 and V6, block by block.
//!
//! [`TraceWriter`] writes the stream header and trace object when created, then one block
//! per call, straight to its `Write`: a runtime streams a session through it without
//! holding more than the block it is building. Events are collected into an
//! [`EventBlockBuilder`], which applies header compression as it goes.
//!
//! ```
//! use nettrace::write::{EventBlockBuilder, TraceWriter};
//! use nettrace::{EventHeader, EventMetadata, FieldDesc, FieldType, FormatVersion, TraceInfo, TraceReader};
//!
//! let info = TraceInfo::new(FormatVersion::V6, 8);
//! let mut w = TraceWriter::new(Vec::new(), &info)?;
//! let md = EventMetadata {
//!     metadata_id: 1,
//!     provider: "Demo".into(),
//!     event_id: 1,
//!     event_name: "Tick".into(),
//!     fields: vec![FieldDesc { name: "Count".into(), ty: FieldType::UInt32 }],
//!     ..Default::default()
//! };
//! w.write_metadata_block(&[md])?;
//! let mut block = EventBlockBuilder::new(FormatVersion::V6);
//! let header = EventHeader { metadata_id: 1, sequence_number: 1, timestamp: 10, ..Default::default() };
//! block.push(&header, &7u32.to_le_bytes());
//! w.write_event_block(&mut block)?;
//! let bytes = w.finish()?;
//!
//! let mut r = TraceReader::from_slice(&bytes)?;
//! let e = r.next_event()?.unwrap();
//! assert_eq!(e.qualified_name(), "Demo/Tick");
//! # Ok::<(), nettrace::Error>(())
//! ```

use std::io::Write;

use crate::cursor::zigzag_encode;
use crate::error::{Error, Result};
use crate::model::{
    EventHeader, EventMetadata, FieldDesc, FieldType, FormatVersion, Guid, Label, SystemTime,
    ThreadInfo, TraceInfo,
};

/// Largest V6 block payload: the block header's size field has 24 bits.
pub const MAX_V6_BLOCK: usize = 0x00ff_ffff;

pub(crate) fn varu64(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn utf16z(out: &mut Vec<u8>, s: &str) {
    for unit in s.encode_utf16() {
        out.extend_from_slice(&unit.to_le_bytes());
    }
    out.extend_from_slice(&[0, 0]);
}

fn utf8_varlen(out: &mut Vec<u8>, s: &str) {
    varu64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn system_time(out: &mut Vec<u8>, t: &SystemTime) {
    for v in [
        t.year,
        t.month,
        t.day_of_week,
        t.day,
        t.hour,
        t.minute,
        t.second,
        t.millisecond,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

impl TraceInfo {
    /// Trace facts for a new trace: sync time zero at tick 0, a 1 GHz tick (nanoseconds).
    pub fn new(version: FormatVersion, pointer_size: u32) -> Self {
        TraceInfo {
            version,
            sync_time_utc: SystemTime {
                year: 1970,
                month: 1,
                day_of_week: 4,
                day: 1,
                ..Default::default()
            },
            sync_time_ticks: 0,
            tick_frequency: 1_000_000_000,
            pointer_size,
            process_id: None,
            processor_count: None,
            expected_cpu_sampling_rate: None,
            key_values: Vec::new(),
        }
    }
}

/// Collects events for one event block, compressing headers against the previous event.
///
/// The events sit behind `HEADROOM` bytes kept free for the block's framing and header,
/// which [`TraceWriter::write_event_block`] fills in once the block is complete, so the
/// whole block reaches the output in one write without being copied.
#[derive(Debug, Clone)]
pub struct EventBlockBuilder {
    v6: bool,
    /// `HEADROOM` bytes, the events up to `end`, then initialised spare room: an event is
    /// written straight into the room with plain stores, and the vector only grows.
    buf: Vec<u8>,
    end: usize,
    previous: EventHeader,
    min_timestamp: i64,
    max_timestamp: i64,
    events: usize,
}

/// Bytes of an event block's header: size, flags, min and max timestamp.
const EVENT_BLOCK_HEADER: usize = 20;
/// Room before the events for the longest framing (V5: the object tag, the `EventBlock`
/// type object, the length and up to 3 bytes of alignment; V6: one word) and the header.
const HEADROOM: usize = 64;

impl EventBlockBuilder {
    /// An empty block for `version`.
    pub fn new(version: FormatVersion) -> Self {
        EventBlockBuilder {
            v6: version == FormatVersion::V6,
            buf: vec![0; HEADROOM],
            end: HEADROOM,
            previous: EventHeader::default(),
            min_timestamp: i64::MAX,
            max_timestamp: i64::MIN,
            events: 0,
        }
    }

    /// The `need` bytes after the events, grown into when short.
    #[inline]
    fn room(&mut self, need: usize) -> &mut [u8] {
        let end = self.end;
        if end + need > self.buf.len() {
            let len = (end + need).max(2 * self.buf.len()).max(4096);
            self.buf.resize(len, 0);
        }
        &mut self.buf[end..end + need]
    }

    /// Appends an event. `header.payload_size` is ignored; the payload's length is used.
    pub fn push(&mut self, header: &EventHeader, payload: &[u8]) {
        let payload_size = payload.len() as u32;
        let (previous, v6) = (self.previous, self.v6);
        let out = self.room(MAX_EVENT_HEADER + payload.len());
        let n = encode_header_into(out, &previous, header, payload_size, v6);
        out[n..n + payload.len()].copy_from_slice(payload);
        self.end += n + payload.len();
        self.previous = *header;
        self.previous.payload_size = payload_size;
        self.note_timestamp(header.timestamp);
        self.events += 1;
    }

    /// Room after the events, at least `bytes` long, for a caller that encodes successor
    /// events itself (see [`commit_successors`](Self::commit_successors)).
    pub fn successor_room(&mut self, bytes: usize) -> &mut [u8] {
        if self.end + bytes > self.buf.len() {
            grow(&mut self.buf, self.end + bytes);
        }
        &mut self.buf[self.end..]
    }

    /// Takes `count` events that the caller wrote, `bytes` long, at the front of
    /// [`successor_room`](Self::successor_room): each the successor of the event before it
    /// (the first, of the last event pushed): the same header but for the next sequence
    /// number and its timestamp, IsSorted unset. Such an event is encoded as a flags byte
    /// of 0, the timestamp's delta as a varint, then a payload as long as the last event's:
    /// a writer whose events repeat one kind writes all but the first of a block so. The last is stamped
    /// `last_timestamp`, and none is earlier than the one before it. For a producer whose
    /// records already hold what a successor is made of, encoding them in one pass over
    /// its own memory. Nothing is taken into a block that is empty, where there is no
    /// event to follow, or beyond the room.
    pub fn commit_successors(&mut self, bytes: usize, count: usize, last_timestamp: i64) {
        if self.events == 0 || count == 0 || self.end + bytes > self.buf.len() {
            return;
        }
        let previous = &mut self.previous;
        let counted = self.v6 || previous.metadata_id != 0;
        previous.sequence_number = previous
            .sequence_number
            .wrapping_add((count as u32).wrapping_mul(u32::from(counted)));
        previous.timestamp = last_timestamp;
        previous.is_sorted = false;
        self.max_timestamp = self.max_timestamp.max(last_timestamp);
        self.end += bytes;
        self.events += count;
    }

    /// The timestamp and payload size of the last event pushed, which a successor's delta
    /// is from and its payload's size must equal for
    /// [`commit_successors`](Self::commit_successors); `None` when the block is empty.
    pub fn last_event(&self) -> Option<(i64, usize)> {
        (self.events > 0).then_some((self.previous.timestamp, self.previous.payload_size as usize))
    }

    #[inline]
    fn note_timestamp(&mut self, timestamp: i64) {
        self.min_timestamp = self.min_timestamp.min(timestamp);
        self.max_timestamp = self.max_timestamp.max(timestamp);
    }

    /// Encoded size so far, without the block header.
    pub fn encoded_len(&self) -> usize {
        self.end - HEADROOM
    }

    /// Number of events pushed.
    pub fn len(&self) -> usize {
        self.events
    }

    /// Whether no event was pushed.
    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// Empties the builder for the next block, keeping its allocation.
    pub fn clear(&mut self) {
        self.end = HEADROOM;
        self.previous = EventHeader::default();
        self.min_timestamp = i64::MAX;
        self.max_timestamp = i64::MIN;
        self.events = 0;
    }
}

/// Grows `buf` to at least `len` bytes, at least doubling it: out of the loops that write
/// events, which it would otherwise crowd.
#[cold]
#[inline(never)]
fn grow(buf: &mut Vec<u8>, len: usize) {
    buf.resize(len.max(2 * buf.len()).max(4096), 0);
}

/// Writes `v` as a varint into `out` at `at`; returns the end.
#[inline(always)]
fn put_varint(out: &mut [u8], mut at: usize, mut v: u64) -> usize {
    while v >= 0x80 {
        out[at] = v as u8 | 0x80;
        v >>= 7;
        at += 1;
    }
    out[at] = v as u8;
    at + 1
}

fn block_header(out: &mut Vec<u8>, min: i64, max: i64, events: usize) {
    out.extend_from_slice(&20u16.to_le_bytes());
    out.extend_from_slice(&crate::header::BLOCK_FLAG_COMPRESSED.to_le_bytes());
    let (min, max) = if events == 0 { (0, 0) } else { (min, max) };
    out.extend_from_slice(&min.to_le_bytes());
    out.extend_from_slice(&max.to_le_bytes());
}

/// The longest compressed event header: flags, seven varints of at most 10 bytes and two
/// GUIDs.
const MAX_EVENT_HEADER: usize = 103;

/// Header bytes written into a slice of at least `MAX_EVENT_HEADER` bytes.
struct HeaderBytes<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl HeaderBytes<'_> {
    #[inline]
    fn var(&mut self, v: u64) {
        self.at = put_varint(self.out, self.at, v);
    }

    fn guid(&mut self, g: &Guid) {
        self.out[self.at..self.at + 16].copy_from_slice(&g.0);
        self.at += 16;
    }
}

/// Appends the compressed header of `h` to `out` (see [`encode_header_into`]).
fn encode_header(
    out: &mut Vec<u8>,
    prev: &EventHeader,
    h: &EventHeader,
    payload_size: u32,
    v6: bool,
) {
    let start = out.len();
    out.resize(start + MAX_EVENT_HEADER, 0);
    let n = encode_header_into(&mut out[start..], prev, h, payload_size, v6);
    out.truncate(start + n);
}

/// The inverse of the reader's header decompression: emit only what differs. Writes into
/// `out` (at least `MAX_EVENT_HEADER` bytes) and returns the bytes written.
#[inline]
fn encode_header_into(
    out: &mut [u8],
    prev: &EventHeader,
    h: &EventHeader,
    payload_size: u32,
    v6: bool,
) -> usize {
    let mut e = HeaderBytes { out, at: 1 };
    let mut flags = 0u8;
    if h.metadata_id != prev.metadata_id {
        flags |= 1;
        e.var(u64::from(h.metadata_id));
    }
    let counted = v6 || h.metadata_id != 0;
    let implied = if counted {
        prev.sequence_number.wrapping_add(1)
    } else {
        prev.sequence_number
    };
    if h.sequence_number != implied
        || h.capture_thread != prev.capture_thread
        || h.processor != prev.processor
    {
        flags |= 2;
        let delta = h
            .sequence_number
            .wrapping_sub(prev.sequence_number)
            .wrapping_sub(u32::from(counted));
        e.var(u64::from(delta));
        e.var(h.capture_thread);
        e.var(u64::from(h.processor));
    }
    if h.thread != prev.thread {
        flags |= 4;
        e.var(h.thread);
    }
    if h.stack_id != prev.stack_id {
        flags |= 8;
        e.var(u64::from(h.stack_id));
    }
    e.var(h.timestamp.wrapping_sub(prev.timestamp) as u64);
    if v6 {
        if h.label_list_id != prev.label_list_id {
            flags |= 16;
            e.var(u64::from(h.label_list_id));
        }
    } else {
        if h.activity_id != prev.activity_id {
            flags |= 16;
            e.guid(&h.activity_id);
        }
        if h.related_activity_id != prev.related_activity_id {
            flags |= 32;
            e.guid(&h.related_activity_id);
        }
    }
    if h.is_sorted {
        flags |= 64;
    }
    if payload_size != prev.payload_size {
        flags |= 128;
        e.var(u64::from(payload_size));
    }
    e.out[0] = flags;
    e.at
}

/// Writes a trace block by block.
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: W,
    version: FormatVersion,
    offset: u64,
    scratch: Vec<u8>,
    /// A block's bytes, head to tail, so each block reaches the output in one
    /// `write_all`: an output that must cut the stream short knows the rest of its
    /// current write is the rest of a block (the IPC server's stalled-reader abort).
    frame: Vec<u8>,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the stream header and trace object for `info` (its `version` picks V5 or V6;
    /// V4 is written as V5, which every V4 reader accepts).
    pub fn new(out: W, info: &TraceInfo) -> Result<Self> {
        if info.pointer_size != 4 && info.pointer_size != 8 {
            return Err(Error::invalid_input(format!(
                "pointer size {} is not 4 or 8",
                info.pointer_size
            )));
        }
        let version = if info.version == FormatVersion::V6 {
            FormatVersion::V6
        } else {
            FormatVersion::V5
        };
        let mut w = TraceWriter {
            out,
            version,
            offset: 0,
            scratch: Vec::new(),
            frame: Vec::new(),
        };
        let mut head = Vec::new();
        head.extend_from_slice(b"Nettrace");
        if version == FormatVersion::V6 {
            for v in [0u32, 6, 0] {
                head.extend_from_slice(&v.to_le_bytes());
            }
            w.emit(&head)?;
            let mut body = Vec::new();
            system_time(&mut body, &info.sync_time_utc);
            body.extend_from_slice(&info.sync_time_ticks.to_le_bytes());
            body.extend_from_slice(&info.tick_frequency.to_le_bytes());
            body.extend_from_slice(&(info.pointer_size as i32).to_le_bytes());
            let mut kvs = info.key_values.clone();
            let mut add = |k: &str, v: Option<u64>| {
                if let Some(v) = v {
                    if !kvs.iter().any(|(key, _)| key == k) {
                        kvs.push((k.to_string(), v.to_string()));
                    }
                }
            };
            add("ProcessId", info.process_id);
            add("HardwareThreadCount", info.processor_count.map(u64::from));
            add("ExpectedCPUSamplingRate", info.expected_cpu_sampling_rate);
            body.extend_from_slice(&(kvs.len() as u32).to_le_bytes());
            for (k, v) in &kvs {
                utf8_varlen(&mut body, k);
                utf8_varlen(&mut body, v);
            }
            w.v6_block(1, &body)?;
        } else {
            head.extend_from_slice(&20i32.to_le_bytes());
            head.extend_from_slice(b"!FastSerialization.1");
            head.push(5);
            type_object(&mut head, "Trace", 4);
            system_time(&mut head, &info.sync_time_utc);
            head.extend_from_slice(&info.sync_time_ticks.to_le_bytes());
            head.extend_from_slice(&info.tick_frequency.to_le_bytes());
            head.extend_from_slice(&(info.pointer_size as i32).to_le_bytes());
            head.extend_from_slice(&(info.process_id.unwrap_or(0) as i32).to_le_bytes());
            head.extend_from_slice(&(info.processor_count.unwrap_or(0) as i32).to_le_bytes());
            head.extend_from_slice(
                &(info.expected_cpu_sampling_rate.unwrap_or(0) as i32).to_le_bytes(),
            );
            head.push(6);
            w.emit(&head)?;
        }
        Ok(w)
    }

    /// A writer of blocks only, continuing a stream of `version` that is already `offset`
    /// bytes long (its header, and blocks up to there, written by someone else): each
    /// block is aligned as it would be at that offset. For a producer that must append to
    /// a stream it did not start (the IPC server ending an aborted session's stream).
    pub fn continuing(out: W, version: FormatVersion, offset: u64) -> Self {
        TraceWriter {
            out,
            version: if version == FormatVersion::V6 {
                FormatVersion::V6
            } else {
                FormatVersion::V5
            },
            offset,
            scratch: Vec::new(),
            frame: Vec::new(),
        }
    }

    /// The version being written.
    pub fn version(&self) -> FormatVersion {
        self.version
    }

    /// Flushes the output: every block written so far reaches it, so a reader of the file
    /// (or one that finds it cut) sees them.
    ///
    /// # Errors
    /// Flushing fails.
    pub fn flush(&mut self) -> Result<()> {
        self.out
            .flush()
            .map_err(|source| Error::io(self.offset, source))
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.offset
    }

    fn emit(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|source| Error::io(self.offset, source))?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    fn v6_block(&mut self, kind: u8, body: &[u8]) -> Result<()> {
        if body.len() > MAX_V6_BLOCK {
            return Err(Error::invalid_input(format!(
                "a V6 block holds at most {MAX_V6_BLOCK} bytes; this one has {}",
                body.len()
            )));
        }
        let word = (body.len() as u32) | (u32::from(kind) << 24);
        let mut frame = std::mem::take(&mut self.frame);
        frame.clear();
        frame.extend_from_slice(&word.to_le_bytes());
        frame.extend_from_slice(body);
        let written = self.emit(&frame);
        self.frame = frame;
        written
    }

    fn fast_serialization_block(&mut self, name: &str, body: &[u8]) -> Result<()> {
        let len = i32::try_from(body.len())
            .map_err(|_| Error::invalid_input("block larger than 2 GiB"))?;
        let mut frame = std::mem::take(&mut self.frame);
        frame.clear();
        fast_serialization_head(&mut frame, name, len, self.offset);
        frame.extend_from_slice(body);
        frame.push(6);
        let written = self.emit(&frame);
        self.frame = frame;
        written
    }

    fn block(&mut self, v6_kind: u8, v5_name: &str, body: &[u8]) -> Result<()> {
        match self.version {
            FormatVersion::V6 => self.v6_block(v6_kind, body),
            _ => self.fast_serialization_block(v5_name, body),
        }
    }

    /// Writes metadata rows.
    pub fn write_metadata_block(&mut self, rows: &[EventMetadata]) -> Result<()> {
        let mut body = std::mem::take(&mut self.scratch);
        body.clear();
        let result = if self.version == FormatVersion::V6 {
            body.extend_from_slice(&0u16.to_le_bytes());
            rows.iter()
                .try_for_each(|md| metadata_row_v6(&mut body, md))
        } else {
            block_header(&mut body, 0, 0, 0);
            let mut prev = EventHeader::default();
            rows.iter().try_for_each(|md| {
                let mut payload = Vec::new();
                metadata_payload_v5(&mut payload, md)?;
                let h = EventHeader {
                    payload_size: payload.len() as u32,
                    ..Default::default()
                };
                encode_header(&mut body, &prev, &h, h.payload_size, false);
                body.extend_from_slice(&payload);
                prev = h;
                Ok(())
            })
        };
        let written = result.and_then(|()| self.block(3, "MetadataBlock", &body));
        self.scratch = body;
        written
    }

    /// Writes an event block. Its framing and header go into the room the builder keeps
    /// before its events, so the block is written whole without a copy; the builder's
    /// events are unchanged.
    pub fn write_event_block(&mut self, events: &mut EventBlockBuilder) -> Result<()> {
        if events.v6 != (self.version == FormatVersion::V6) {
            return Err(Error::invalid_input(
                "event block built for another format version",
            ));
        }
        let body_len = EVENT_BLOCK_HEADER + events.encoded_len();
        let mut head = std::mem::take(&mut self.frame);
        head.clear();
        if self.version == FormatVersion::V6 {
            if body_len > MAX_V6_BLOCK {
                self.frame = head;
                return Err(Error::invalid_input(format!(
                    "a V6 block holds at most {MAX_V6_BLOCK} bytes; this one has {body_len}"
                )));
            }
            head.extend_from_slice(&((body_len as u32) | (2 << 24)).to_le_bytes());
        } else {
            let Ok(len) = i32::try_from(body_len) else {
                self.frame = head;
                return Err(Error::invalid_input("block larger than 2 GiB"));
            };
            fast_serialization_head(&mut head, "EventBlock", len, self.offset);
        }
        block_header(
            &mut head,
            events.min_timestamp,
            events.max_timestamp,
            events.events,
        );
        let start = HEADROOM - head.len();
        events.buf[start..HEADROOM].copy_from_slice(&head);
        self.frame = head;
        let mut end = events.end;
        if self.version != FormatVersion::V6 {
            events.room(1)[0] = 6;
            end += 1;
        }
        self.emit(&events.buf[start..end])
    }

    /// Writes stacks with consecutive ids from `first_id`; each is raw pointer-sized IPs.
    pub fn write_stack_block(&mut self, first_id: u32, stacks: &[&[u8]]) -> Result<()> {
        let mut body = Vec::new();
        body.extend_from_slice(&first_id.to_le_bytes());
        body.extend_from_slice(&(stacks.len() as u32).to_le_bytes());
        for s in stacks {
            body.extend_from_slice(&(s.len() as u32).to_le_bytes());
            body.extend_from_slice(s);
        }
        self.block(5, "StackBlock", &body)
    }

    /// Writes a sequence point: per-thread sequence lower bounds (V4/V5: OS thread ids; V6:
    /// thread indexes) and, in V6, flags (1 = flush threads, 2 = flush metadata).
    pub fn write_sequence_point(
        &mut self,
        timestamp: i64,
        flags: u32,
        threads: &[(u64, u32)],
    ) -> Result<()> {
        let mut body = Vec::new();
        body.extend_from_slice(&timestamp.to_le_bytes());
        if self.version == FormatVersion::V6 {
            body.extend_from_slice(&flags.to_le_bytes());
        }
        body.extend_from_slice(&(threads.len() as u32).to_le_bytes());
        for &(thread, seq) in threads {
            if self.version == FormatVersion::V6 {
                varu64(&mut body, thread);
                varu64(&mut body, u64::from(seq));
            } else {
                body.extend_from_slice(&thread.to_le_bytes());
                body.extend_from_slice(&seq.to_le_bytes());
            }
        }
        self.block(4, "SPBlock", &body)
    }

    fn require_v6(&self, what: &str) -> Result<()> {
        if self.version == FormatVersion::V6 {
            Ok(())
        } else {
            Err(Error::invalid_input(format!(
                "{what} blocks exist only in NetTrace V6"
            )))
        }
    }

    /// V6: writes thread rows.
    pub fn write_thread_block(&mut self, threads: &[ThreadInfo]) -> Result<()> {
        self.require_v6("thread")?;
        let mut body = Vec::new();
        for t in threads {
            let mut row = Vec::new();
            varu64(&mut row, t.index);
            if let Some(name) = &t.name {
                row.push(1);
                utf8_varlen(&mut row, name);
            }
            if let Some(pid) = t.process_id {
                row.push(2);
                varu64(&mut row, pid);
            }
            if let Some(tid) = t.thread_id {
                row.push(3);
                varu64(&mut row, tid);
            }
            for (k, v) in &t.key_values {
                row.push(4);
                utf8_varlen(&mut row, k);
                utf8_varlen(&mut row, v);
            }
            let size = u16::try_from(row.len())
                .map_err(|_| Error::invalid_input("thread row over 64 KiB"))?;
            body.extend_from_slice(&size.to_le_bytes());
            body.extend_from_slice(&row);
        }
        self.v6_block(6, &body)
    }

    /// V6: removes threads, stating each one's final sequence number.
    pub fn write_remove_thread_block(&mut self, threads: &[(u64, u32)]) -> Result<()> {
        self.require_v6("remove-thread")?;
        let mut body = Vec::new();
        for &(index, seq) in threads {
            varu64(&mut body, index);
            varu64(&mut body, u64::from(seq));
        }
        self.v6_block(7, &body)
    }

    /// V6: writes label lists with consecutive indexes from `first_index` (at least 1).
    pub fn write_label_list_block(&mut self, first_index: u32, lists: &[Vec<Label>]) -> Result<()> {
        self.require_v6("label list")?;
        if first_index == 0 {
            return Err(Error::invalid_input(
                "label list index 0 is reserved for the empty list",
            ));
        }
        let mut body = Vec::new();
        body.extend_from_slice(&first_index.to_le_bytes());
        body.extend_from_slice(&(lists.len() as u32).to_le_bytes());
        for list in lists {
            if list.is_empty() {
                return Err(Error::invalid_input(
                    "an empty label list cannot be encoded",
                ));
            }
            for (i, label) in list.iter().enumerate() {
                let last = if i + 1 == list.len() { 0x80 } else { 0 };
                encode_label(&mut body, label, last);
            }
        }
        self.v6_block(8, &body)
    }

    /// Ends the stream and returns the output.
    pub fn finish(mut self) -> Result<W> {
        if self.version == FormatVersion::V6 {
            self.emit(&0u32.to_le_bytes())?;
        } else {
            self.emit(&[1])?;
        }
        self.out
            .flush()
            .map_err(|source| Error::io(self.offset, source))?;
        Ok(self.out)
    }
}

/// A FastSerialization block's head, written at stream offset `offset`: the object tag,
/// the type object, the body's length and the padding that aligns the body to 4 bytes.
fn fast_serialization_head(out: &mut Vec<u8>, name: &str, body_len: i32, offset: u64) {
    let start = out.len();
    out.push(5u8);
    type_object(out, name, 2);
    out.extend_from_slice(&body_len.to_le_bytes());
    let after = offset + (out.len() - start) as u64;
    out.resize(out.len() + ((4 - after % 4) % 4) as usize, 0);
}

fn type_object(out: &mut Vec<u8>, name: &str, version: i32) {
    out.push(5);
    out.push(1);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(name.len() as i32).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.push(6);
}

fn encode_label(out: &mut Vec<u8>, label: &Label, last: u8) {
    match label {
        Label::ActivityId(g) => {
            out.push(1 | last);
            out.extend_from_slice(&g.0);
        }
        Label::RelatedActivityId(g) => {
            out.push(2 | last);
            out.extend_from_slice(&g.0);
        }
        Label::TraceId(b) => {
            out.push(3 | last);
            out.extend_from_slice(b);
        }
        Label::SpanId(v) => {
            out.push(4 | last);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Label::String { key, value } => {
            out.push(5 | last);
            utf8_varlen(out, key);
            utf8_varlen(out, value);
        }
        Label::Int { key, value } => {
            out.push(6 | last);
            utf8_varlen(out, key);
            varu64(out, zigzag_encode(*value));
        }
        Label::OpCode(v) => out.extend_from_slice(&[7 | last, *v]),
        Label::Keywords(v) => {
            out.push(8 | last);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Label::Level(v) => out.extend_from_slice(&[9 | last, *v]),
        Label::Version(v) => out.extend_from_slice(&[10 | last, *v]),
    }
}

fn unsupported(ty: &FieldType, version: &str) -> Error {
    Error::invalid_input(format!(
        "field type {ty:?} cannot be written in NetTrace {version}"
    ))
}

/// The System.TypeCode / V6 code of a scalar type shared by both versions.
fn scalar_code(ty: &FieldType) -> Option<u8> {
    Some(match ty {
        FieldType::Boolean32 => 3,
        FieldType::Char16 => 4,
        FieldType::SByte => 5,
        FieldType::Byte => 6,
        FieldType::Int16 => 7,
        FieldType::UInt16 => 8,
        FieldType::Int32 => 9,
        FieldType::UInt32 => 10,
        FieldType::Int64 => 11,
        FieldType::UInt64 => 12,
        FieldType::Single => 13,
        FieldType::Double => 14,
        FieldType::Decimal => 15,
        FieldType::DateTime => 16,
        FieldType::Guid => 17,
        FieldType::Utf16String => 18,
        _ => return None,
    })
}

fn needs_v2(fields: &[FieldDesc]) -> bool {
    fields.iter().any(|f| match &f.ty {
        FieldType::Array(_) => true,
        FieldType::Object(inner) => needs_v2(inner),
        _ => false,
    })
}

fn metadata_payload_v5(out: &mut Vec<u8>, md: &EventMetadata) -> Result<()> {
    let id = i32::try_from(md.metadata_id)
        .map_err(|_| Error::invalid_input("metadata id above 2^31"))?;
    out.extend_from_slice(&id.to_le_bytes());
    utf16z(out, &md.provider);
    out.extend_from_slice(&(md.event_id as i32).to_le_bytes());
    utf16z(out, &md.event_name);
    out.extend_from_slice(&md.keywords.to_le_bytes());
    out.extend_from_slice(&(md.version as i32).to_le_bytes());
    out.extend_from_slice(&(md.level as i32).to_le_bytes());
    if needs_v2(&md.fields) {
        out.extend_from_slice(&0i32.to_le_bytes());
    } else {
        v1_fields(out, &md.fields)?;
    }
    if let Some(op) = md.opcode {
        out.extend_from_slice(&1i32.to_le_bytes());
        out.push(1);
        out.push(op);
    }
    if needs_v2(&md.fields) {
        let mut tag = Vec::new();
        v2_fields(&mut tag, &md.fields)?;
        out.extend_from_slice(&(tag.len() as i32).to_le_bytes());
        out.push(2);
        out.extend_from_slice(&tag);
    }
    Ok(())
}

fn v1_fields(out: &mut Vec<u8>, fields: &[FieldDesc]) -> Result<()> {
    out.extend_from_slice(&(fields.len() as i32).to_le_bytes());
    for f in fields {
        match &f.ty {
            FieldType::Object(inner) => {
                out.extend_from_slice(&1i32.to_le_bytes());
                v1_fields(out, inner)?;
            }
            ty => {
                let code = scalar_code(ty).ok_or_else(|| unsupported(ty, "V5"))?;
                out.extend_from_slice(&i32::from(code).to_le_bytes());
            }
        }
        utf16z(out, &f.name);
    }
    Ok(())
}

fn v2_fields(out: &mut Vec<u8>, fields: &[FieldDesc]) -> Result<()> {
    out.extend_from_slice(&(fields.len() as i32).to_le_bytes());
    for f in fields {
        let mut body = Vec::new();
        utf16z(&mut body, &f.name);
        v2_type(&mut body, &f.ty)?;
        out.extend_from_slice(&(body.len() as i32 + 4).to_le_bytes());
        out.extend_from_slice(&body);
    }
    Ok(())
}

fn v2_type(out: &mut Vec<u8>, ty: &FieldType) -> Result<()> {
    match ty {
        FieldType::Object(inner) => {
            out.extend_from_slice(&1i32.to_le_bytes());
            v2_fields(out, inner)
        }
        FieldType::Array(elem) => {
            out.extend_from_slice(&19i32.to_le_bytes());
            v2_type(out, elem)
        }
        ty => {
            let code = scalar_code(ty).ok_or_else(|| unsupported(ty, "V5"))?;
            out.extend_from_slice(&i32::from(code).to_le_bytes());
            Ok(())
        }
    }
}

fn metadata_row_v6(out: &mut Vec<u8>, md: &EventMetadata) -> Result<()> {
    let mut row = Vec::new();
    varu64(&mut row, u64::from(md.metadata_id));
    utf8_varlen(&mut row, &md.provider);
    varu64(&mut row, u64::from(md.event_id));
    utf8_varlen(&mut row, &md.event_name);
    v6_fields(&mut row, &md.fields)?;
    let mut opt = Vec::new();
    if let Some(op) = md.opcode {
        opt.extend_from_slice(&[1, op]);
    }
    if md.keywords != 0 {
        opt.push(3);
        opt.extend_from_slice(&md.keywords.to_le_bytes());
    }
    if let Some(t) = &md.message_template {
        opt.push(4);
        utf8_varlen(&mut opt, t);
    }
    if let Some(d) = &md.description {
        opt.push(5);
        utf8_varlen(&mut opt, d);
    }
    for (k, v) in &md.key_values {
        opt.push(6);
        utf8_varlen(&mut opt, k);
        utf8_varlen(&mut opt, v);
    }
    if let Some(g) = md.provider_guid {
        opt.push(7);
        opt.extend_from_slice(&g.0);
    }
    let small = |v: u32, what: &str| {
        u8::try_from(v)
            .map_err(|_| Error::invalid_input(format!("{what} {v} does not fit the V6 byte")))
    };
    if md.level != 0 {
        opt.extend_from_slice(&[8, small(md.level, "level")?]);
    }
    if md.version != 0 {
        opt.extend_from_slice(&[9, small(md.version, "version")?]);
    }
    let opt_len = u16::try_from(opt.len())
        .map_err(|_| Error::invalid_input("optional metadata over 64 KiB"))?;
    row.extend_from_slice(&opt_len.to_le_bytes());
    row.extend_from_slice(&opt);
    let size =
        u16::try_from(row.len()).map_err(|_| Error::invalid_input("metadata row over 64 KiB"))?;
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&row);
    Ok(())
}

fn v6_fields(out: &mut Vec<u8>, fields: &[FieldDesc]) -> Result<()> {
    let count =
        u16::try_from(fields.len()).map_err(|_| Error::invalid_input("more than 65535 fields"))?;
    out.extend_from_slice(&count.to_le_bytes());
    for f in fields {
        let mut body = Vec::new();
        utf8_varlen(&mut body, &f.name);
        v6_type(&mut body, &f.ty)?;
        let size = u16::try_from(body.len())
            .map_err(|_| Error::invalid_input("field description over 64 KiB"))?;
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&body);
    }
    Ok(())
}

fn v6_type(out: &mut Vec<u8>, ty: &FieldType) -> Result<()> {
    match ty {
        FieldType::Object(inner) => {
            out.push(1);
            v6_fields(out, inner)
        }
        FieldType::Array(elem) => {
            out.push(19);
            v6_type(out, elem)
        }
        FieldType::FixedArray(elem, n) => {
            out.push(22);
            v6_type(out, elem)?;
            out.extend_from_slice(&n.to_le_bytes());
            Ok(())
        }
        FieldType::RelLoc(elem) | FieldType::DataLoc(elem) => {
            if !elem.is_fixed_size() {
                return Err(Error::invalid_input(
                    "RelLoc/DataLoc need a fixed-size element type",
                ));
            }
            out.push(if matches!(ty, FieldType::RelLoc(_)) {
                24
            } else {
                25
            });
            v6_type(out, elem)
        }
        FieldType::VarInt => {
            out.push(20);
            Ok(())
        }
        FieldType::VarUInt => {
            out.push(21);
            Ok(())
        }
        FieldType::Char8 => {
            out.push(23);
            Ok(())
        }
        FieldType::Boolean8 => {
            out.push(26);
            Ok(())
        }
        ty => {
            out.push(scalar_code(ty).ok_or_else(|| unsupported(ty, "V6"))?);
            Ok(())
        }
    }
}
