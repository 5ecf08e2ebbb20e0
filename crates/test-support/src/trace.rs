//! Small synthetic NetTrace traces, written with `nettrace::write`, for tests that need a
//! trace with exactly the events they name: metadata rows ([`md`], [`field`],
//! [`MetadataExt`]), payload pieces ([`utf16`], [`utf16z`], [`stack_bytes`]) and the
//! payloads of a few events several tests write ([`method_load`], [`async_frame`],
//! [`async_buffer`]), and [`TraceBuilder`], which lays events out as a trace.
//!
//! ```
//! use eventpipe_test_support::trace::{md, utf16, TraceBuilder};
//! use nettrace::{FieldType, FormatVersion, TraceReader};
//!
//! let bytes = TraceBuilder::new(FormatVersion::V5)
//!     .metadata(vec![md(1, "Test", "Hello", &[("Name", FieldType::Utf16String)])])
//!     .event(100, 1_000, 1, utf16("world"))
//!     .build();
//! let mut reader = TraceReader::from_slice(&bytes).unwrap();
//! let event = reader.next_event().unwrap().unwrap();
//! assert_eq!(event.metadata.event_name, "Hello");
//! ```

use std::collections::BTreeMap;

use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{
    EventHeader, EventMetadata, FieldDesc, FieldType, FormatVersion, ThreadInfo, TraceInfo,
};

/// A field of a metadata row.
pub fn field(name: &str, ty: FieldType) -> FieldDesc {
    FieldDesc {
        name: name.into(),
        ty,
    }
}

/// A metadata row: metadata id and event id `id`, `provider`'s event `name` with `fields`
/// (name, type), everything else default (no opcode, level 0, no keywords). Set the rest
/// with [`MetadataExt`].
pub fn md(id: u32, provider: &str, name: &str, fields: &[(&str, FieldType)]) -> EventMetadata {
    EventMetadata {
        metadata_id: id,
        provider: provider.into(),
        event_id: id,
        event_name: name.into(),
        fields: fields.iter().map(|(n, ty)| field(n, ty.clone())).collect(),
        ..Default::default()
    }
}

/// The rest of a metadata row [`md`] leaves default, one builder call each.
pub trait MetadataExt {
    /// The row with `opcode`.
    #[must_use]
    fn with_opcode(self, opcode: Option<u8>) -> Self;
    /// The row with `level`.
    #[must_use]
    fn with_level(self, level: u32) -> Self;
    /// The row with `display_name`.
    #[must_use]
    fn with_display_name(self, display_name: &str) -> Self;
}

impl MetadataExt for EventMetadata {
    fn with_opcode(self, opcode: Option<u8>) -> Self {
        EventMetadata { opcode, ..self }
    }
    fn with_level(self, level: u32) -> Self {
        EventMetadata { level, ..self }
    }
    fn with_display_name(self, display_name: &str) -> Self {
        EventMetadata {
            display_name: display_name.into(),
            ..self
        }
    }
}

/// `s` as a payload's UTF-16 string: little-endian code units and the terminating zero.
pub fn utf16(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * s.len() + 2);
    utf16z(&mut out, s);
    out
}

/// Appends `s` to `out` as [`utf16`] encodes it.
pub fn utf16z(out: &mut Vec<u8>, s: &str) {
    for unit in s.encode_utf16().chain([0]) {
        out.extend_from_slice(&unit.to_le_bytes());
    }
}

/// A stack block's stack: the 8-byte instruction pointers `ips`, leaf first.
pub fn stack_bytes(ips: &[u64]) -> Vec<u8> {
    ips.iter().flat_map(|ip| ip.to_le_bytes()).collect()
}

/// A .NET-style `MethodLoadVerbose` metadata row of `provider`, with the fields
/// [`method_load`] writes.
pub fn method_load_row(id: u32, provider: &str) -> EventMetadata {
    use FieldType::{UInt32, UInt64, Utf16String};
    md(
        id,
        provider,
        "MethodLoadVerbose",
        &[
            ("MethodStartAddress", UInt64),
            ("MethodSize", UInt32),
            ("MethodNamespace", Utf16String),
            ("MethodName", Utf16String),
        ],
    )
}

/// The payload of a .NET-style `MethodLoadVerbose` event as the tests declare it
/// (`MethodStartAddress: UInt64, MethodSize: UInt32, MethodNamespace, MethodName:
/// Utf16String`): the method at `start`, 0x100 bytes long.
pub fn method_load(start: u64, namespace: &str, name: &str) -> Vec<u8> {
    let mut p = start.to_le_bytes().to_vec();
    p.extend(0x100u32.to_le_bytes());
    utf16z(&mut p, namespace);
    utf16z(&mut p, name);
    p
}

/// The async profiler's three metadata rows (docs/async-profiler-format.md), provider
/// `EventPipeRs-AsyncProfiler`, with metadata ids `ids`: `AsyncProfilerMetadata`,
/// `AsyncFrame` and `AsyncBuffer`.
pub fn async_profiler_rows(ids: [u32; 3]) -> Vec<EventMetadata> {
    use FieldType::{Int64, UInt32, UInt64, Utf16String};
    const PROVIDER: &str = "EventPipeRs-AsyncProfiler";
    vec![
        md(
            ids[0],
            PROVIDER,
            "AsyncProfilerMetadata",
            &[
                ("Version", UInt32),
                ("ReferenceTimestamp", UInt64),
                ("TimestampFrequency", UInt64),
                ("ReferenceUtcUnixNanos", Int64),
            ],
        ),
        md(
            ids[1],
            PROVIDER,
            "AsyncFrame",
            &[
                ("FrameId", UInt32),
                ("Name", Utf16String),
                ("File", Utf16String),
                ("Line", UInt32),
            ],
        ),
        md(
            ids[2],
            PROVIDER,
            "AsyncBuffer",
            &[
                ("OsThreadId", UInt64),
                ("Sequence", UInt32),
                ("BufferTimestamp", UInt64),
                ("Records", FieldType::Array(Box::new(FieldType::Byte))),
            ],
        ),
    ]
}

/// The payload of the async profiler's `AsyncProfilerMetadata` event (format version 1):
/// its clock's `reference_timestamp` and `frequency`, and the UTC time of the reference in
/// ns since the Unix epoch.
pub fn async_profiler_metadata(
    reference_timestamp: u64,
    frequency: u64,
    utc_unix_nanos: i64,
) -> Vec<u8> {
    let mut p = 1u32.to_le_bytes().to_vec();
    p.extend(reference_timestamp.to_le_bytes());
    p.extend(frequency.to_le_bytes());
    p.extend(utc_unix_nanos.to_le_bytes());
    p
}

/// The payload of the async profiler's `AsyncFrame` event (`FrameId: UInt32, Name, File:
/// Utf16String, Line: UInt32`; docs/async-profiler-format.md).
pub fn async_frame(id: u32, name: &str, file: &str, line: u32) -> Vec<u8> {
    let mut p = id.to_le_bytes().to_vec();
    utf16z(&mut p, name);
    utf16z(&mut p, file);
    p.extend(line.to_le_bytes());
    p
}

/// The payload of the async profiler's `AsyncBuffer` event (`OsThreadId: UInt64, Sequence:
/// UInt32, BufferTimestamp: UInt64, Records: byte array`): `records` already encoded, from
/// `base`.
pub fn async_buffer(thread: u64, sequence: u32, base: i64, records: &[u8]) -> Vec<u8> {
    let mut p = thread.to_le_bytes().to_vec();
    p.extend(sequence.to_le_bytes());
    p.extend((base as u64).to_le_bytes());
    p.extend((records.len() as u16).to_le_bytes());
    p.extend_from_slice(records);
    p
}

/// One event of a [`TraceBuilder`].
#[derive(Debug, Clone)]
struct Event {
    thread: u64,
    timestamp: i64,
    metadata_id: u32,
    payload: Vec<u8>,
    stack: Vec<u64>,
}

/// A whole trace in memory: a metadata block, (V6) a thread block, a stack block holding
/// each distinct stack the events carry, and the events in the order given, in one event
/// block (or blocks of [`events_per_block`](TraceBuilder::events_per_block)).
///
/// Events name their thread by OS thread id. Sequence numbers count from 1 per thread. In
/// V6, the thread block has a row for every [`thread`](TraceBuilder::thread) declared
/// (indexes from 1, in declaration order, with the trace's process id) and events carry
/// those indexes; an event on a thread not declared panics. In V4 and V5 the declarations
/// are not written and events carry the OS thread id.
#[derive(Debug, Clone)]
pub struct TraceBuilder {
    info: TraceInfo,
    metadata: Vec<EventMetadata>,
    threads: Vec<(u64, Option<String>)>,
    events: Vec<Event>,
    events_per_block: usize,
}

impl TraceBuilder {
    /// An empty trace of `version` with 8-byte pointers.
    pub fn new(version: FormatVersion) -> TraceBuilder {
        TraceBuilder {
            info: TraceInfo::new(version, 8),
            metadata: Vec::new(),
            threads: Vec::new(),
            events: Vec::new(),
            events_per_block: usize::MAX,
        }
    }

    /// The trace header's process id (also that of the V6 thread rows).
    #[must_use]
    pub fn process_id(mut self, pid: u64) -> TraceBuilder {
        self.info.process_id = Some(pid);
        self
    }

    /// Changes the trace header in place (sync time, clock, ...).
    #[must_use]
    pub fn info(mut self, change: impl FnOnce(&mut TraceInfo)) -> TraceBuilder {
        change(&mut self.info);
        self
    }

    /// Adds metadata rows.
    #[must_use]
    pub fn metadata(mut self, rows: Vec<EventMetadata>) -> TraceBuilder {
        self.metadata.extend(rows);
        self
    }

    /// Declares the OS thread `thread`, named `name` in its V6 row.
    #[must_use]
    pub fn thread(mut self, thread: u64, name: Option<&str>) -> TraceBuilder {
        self.threads.push((thread, name.map(str::to_owned)));
        self
    }

    /// Adds an event on OS thread `thread` at `timestamp` (ticks), of metadata row
    /// `metadata_id`, without a stack.
    #[must_use]
    pub fn event(
        self,
        thread: u64,
        timestamp: i64,
        metadata_id: u32,
        payload: Vec<u8>,
    ) -> TraceBuilder {
        self.event_with_stack(thread, timestamp, metadata_id, payload, &[])
    }

    /// Adds events without stacks: (OS thread, timestamp, metadata id, payload) each.
    #[must_use]
    pub fn events(
        mut self,
        events: impl IntoIterator<Item = (u64, i64, u32, Vec<u8>)>,
    ) -> TraceBuilder {
        for (thread, timestamp, metadata_id, payload) in events {
            self = self.event(thread, timestamp, metadata_id, payload);
        }
        self
    }

    /// Writes the events in blocks of at most `n` (by default, all in one block).
    #[must_use]
    pub fn events_per_block(mut self, n: usize) -> TraceBuilder {
        assert!(n > 0, "a block holds at least one event");
        self.events_per_block = n;
        self
    }

    /// [`event`](TraceBuilder::event) with a stack, instruction pointers leaf first (none:
    /// no stack).
    #[must_use]
    pub fn event_with_stack(
        mut self,
        thread: u64,
        timestamp: i64,
        metadata_id: u32,
        payload: Vec<u8>,
        stack: &[u64],
    ) -> TraceBuilder {
        self.events.push(Event {
            thread,
            timestamp,
            metadata_id,
            payload,
            stack: stack.to_vec(),
        });
        self
    }

    /// The trace's bytes.
    pub fn build(self) -> Vec<u8> {
        let version = self.info.version;
        let v6 = version == FormatVersion::V6;
        let mut w = TraceWriter::new(Vec::new(), &self.info).expect("writing to memory");
        w.write_metadata_block(&self.metadata)
            .expect("writing to memory");
        let mut index = BTreeMap::new();
        if v6 && !self.threads.is_empty() {
            let rows: Vec<ThreadInfo> = self
                .threads
                .iter()
                .enumerate()
                .map(|(i, (thread, name))| {
                    index.insert(*thread, i as u64 + 1);
                    ThreadInfo {
                        index: i as u64 + 1,
                        name: name.clone(),
                        process_id: self.info.process_id,
                        thread_id: Some(*thread),
                        key_values: Vec::new(),
                    }
                })
                .collect();
            w.write_thread_block(&rows).expect("writing to memory");
        }
        // One id per distinct stack, in order of first use.
        let mut stack_ids: BTreeMap<&[u64], u32> = BTreeMap::new();
        let mut stacks: Vec<Vec<u8>> = Vec::new();
        for e in self.events.iter().filter(|e| !e.stack.is_empty()) {
            stack_ids.entry(&e.stack).or_insert_with(|| {
                stacks.push(stack_bytes(&e.stack));
                stacks.len() as u32
            });
        }
        if !stacks.is_empty() {
            let refs: Vec<&[u8]> = stacks.iter().map(Vec::as_slice).collect();
            w.write_stack_block(1, &refs).expect("writing to memory");
        }
        let mut block = EventBlockBuilder::new(version);
        let mut sequence: BTreeMap<u64, u32> = BTreeMap::new();
        for e in &self.events {
            if block.len() == self.events_per_block {
                w.write_event_block(&mut block).expect("writing to memory");
                block.clear();
            }
            let seq = sequence.entry(e.thread).or_insert(0);
            *seq += 1;
            let thread = if v6 {
                *index.get(&e.thread).unwrap_or_else(|| {
                    panic!("thread {} is not declared (TraceBuilder::thread)", e.thread)
                })
            } else {
                e.thread
            };
            let header = EventHeader {
                metadata_id: e.metadata_id,
                sequence_number: *seq,
                thread,
                capture_thread: thread,
                stack_id: stack_ids.get(e.stack.as_slice()).copied().unwrap_or(0),
                timestamp: e.timestamp,
                ..Default::default()
            };
            block.push(&header, &e.payload);
        }
        w.write_event_block(&mut block).expect("writing to memory");
        w.finish().expect("writing to memory")
    }
}
