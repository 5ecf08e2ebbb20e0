//! The data a trace holds, independent of how it is encoded: trace facts, event metadata,
//! field layouts, event headers, threads and label lists.

use std::fmt;

pub use eventpipe_guid::Guid;

/// The major format version of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FormatVersion {
    /// NetTrace V4: FastSerialization objects, no metadata tags.
    V4,
    /// NetTrace V5: V4 plus optional metadata tags. Readers cannot tell V4 and V5 apart
    /// from the header; this crate reports `V5` when a metadata tag was seen.
    V5,
    /// NetTrace V6: block headers, thread and label-list tables.
    V6,
}

impl FormatVersion {
    /// Whether the stream uses FastSerialization framing (V4 and V5).
    pub fn is_fast_serialization(self) -> bool {
        matches!(self, FormatVersion::V4 | FormatVersion::V5)
    }
}

impl fmt::Display for FormatVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // V4 and V5 share a header; only V5 metadata tags tell them apart.
            FormatVersion::V4 => write!(f, "NetTrace V4/V5 (no V5 metadata tags)"),
            FormatVersion::V5 => write!(f, "NetTrace V5"),
            FormatVersion::V6 => write!(f, "NetTrace V6"),
        }
    }
}

pub use crate::time::SystemTime;

/// Facts about the whole trace, from its Trace object/block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceInfo {
    /// Format version of the stream.
    pub version: FormatVersion,
    /// Wall-clock time at `sync_time_ticks`.
    pub sync_time_utc: SystemTime,
    /// Timestamp (ticks) at which `sync_time_utc` was taken.
    pub sync_time_ticks: i64,
    /// Ticks per second.
    pub tick_frequency: i64,
    /// Size of a pointer (and of each stack IP) in bytes: 4 or 8.
    pub pointer_size: u32,
    /// Traced process id (V4/V5 field; V6 `ProcessId` key).
    pub process_id: Option<u64>,
    /// Number of processors (V4/V5 field; V6 `HardwareThreadCount` key).
    pub processor_count: Option<u32>,
    /// Expected CPU sampling rate (V4/V5 field; V6 `ExpectedCPUSamplingRate` key).
    pub expected_cpu_sampling_rate: Option<u64>,
    /// V6 key/value pairs, in stream order (empty for V4/V5).
    pub key_values: Vec<(String, String)>,
}

impl TraceInfo {
    /// Milliseconds between the sync time and `ticks`, as TraceEvent's `MSec`.
    pub fn ticks_to_msec(&self, ticks: i64) -> f64 {
        if self.tick_frequency <= 0 {
            return 0.0;
        }
        (ticks as f64 - self.sync_time_ticks as f64) * 1000.0 / self.tick_frequency as f64
    }

    /// Exact time of `ticks` as nanoseconds since the Unix epoch (UTC), or `None` when the
    /// header's calendar time is invalid or the result overflows.
    pub fn ticks_to_unix_nanos(&self, ticks: i64) -> Option<i128> {
        let base = crate::time::system_time_to_unix_nanos(&self.sync_time_utc)?;
        if self.tick_frequency <= 0 {
            return None;
        }
        let delta = i128::from(ticks) - i128::from(self.sync_time_ticks);
        // Exact integer conversion: no float rounding for long traces.
        Some(base + delta * 1_000_000_000 / i128::from(self.tick_frequency))
    }
}

/// The payload layout of one field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldDesc {
    /// Field name.
    pub name: String,
    /// How it is encoded.
    pub ty: FieldType,
}

/// How a payload field is encoded. Covers every NetTrace V5 and V6 type code and the few
/// manifest encodings native runtime events use.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // each variant's doc names its type code
pub enum FieldType {
    /// 1: the nested fields, concatenated.
    Object(Vec<FieldDesc>),
    /// 3: 4-byte boolean.
    Boolean32,
    /// 4: one UTF-16 code unit.
    Char16,
    /// 5
    SByte,
    /// 6
    Byte,
    /// 7
    Int16,
    /// 8
    UInt16,
    /// 9
    Int32,
    /// 10
    UInt32,
    /// 11
    Int64,
    /// 12
    UInt64,
    /// 13
    Single,
    /// 14
    Double,
    /// 15: System.Decimal, 16 bytes.
    Decimal,
    /// 16: .NET DateTime, 8 bytes (FILETIME-style ticks in EventSource payloads).
    DateTime,
    /// 17
    Guid,
    /// 18: NUL-terminated UTF-16.
    Utf16String,
    /// 19: u16 element count, then the elements.
    Array(Box<FieldType>),
    /// 20 (V6): zigzag LEB128.
    VarInt,
    /// 21 (V6): LEB128.
    VarUInt,
    /// 22 (V6): a fixed number of elements.
    FixedArray(Box<FieldType>, u16),
    /// 23 (V6): one UTF-8 code unit.
    Char8,
    /// 24 (V6): u32 whose high 16 bits are a byte size and low 16 bits an offset past it.
    RelLoc(Box<FieldType>),
    /// 25 (V6): like RelLoc, offset from the start of the payload.
    DataLoc(Box<FieldType>),
    /// 26 (V6): 1-byte boolean.
    Boolean8,
    /// Manifest `win:Pointer`: the trace's pointer size, unsigned.
    Pointer,
    /// Manifest `win:AnsiString`: NUL-terminated 8-bit string.
    AnsiString,
    /// Manifest `win:SYSTEMTIME`: 16 bytes.
    SystemTime,
    /// Manifest `win:FILETIME`: 8 bytes.
    FileTime,
    /// Manifest `count="Field"`: as many elements as the value of an earlier field at the
    /// same level (its index in the enclosing list).
    CountedArray(Box<FieldType>, usize),
    /// Manifest `win:Binary` whose length is an earlier field's value.
    CountedBytes(usize),
    /// Universal.System string convention: u16 byte count, then UTF-8.
    Utf8U16Len,
}

impl FieldType {
    /// Whether every value of this type has the same encoded size.
    pub fn is_fixed_size(&self) -> bool {
        match self {
            FieldType::Object(fields) => fields.iter().all(|f| f.ty.is_fixed_size()),
            FieldType::FixedArray(inner, _) => inner.is_fixed_size(),
            FieldType::Array(_)
            | FieldType::Utf16String
            | FieldType::VarInt
            | FieldType::VarUInt
            | FieldType::AnsiString
            | FieldType::CountedArray(..)
            | FieldType::CountedBytes(_)
            | FieldType::Utf8U16Len => false,
            _ => true,
        }
    }
}

/// Describes one kind of event: who emits it, what it is called, and its payload layout.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EventMetadata {
    /// Id events use to refer to this row.
    pub metadata_id: u32,
    /// Provider name.
    pub provider: String,
    /// Provider GUID, when the trace states one.
    pub provider_guid: Option<Guid>,
    /// Event id within the provider.
    pub event_id: u32,
    /// Event name as the trace states it (often empty for native runtime events).
    pub event_name: String,
    /// Keyword mask.
    pub keywords: u64,
    /// Event version.
    pub version: u32,
    /// Level (1 critical .. 5 verbose, 0 always).
    pub level: u32,
    /// Opcode, when stated.
    pub opcode: Option<u8>,
    /// Payload fields.
    pub fields: Vec<FieldDesc>,
    /// V6 optional message template.
    pub message_template: Option<String>,
    /// V6 optional description.
    pub description: Option<String>,
    /// V6 optional key/value pairs.
    pub key_values: Vec<(String, String)>,
    /// Name as TraceEvent prints it (`Task/Opcode` or the event name); filled by the reader.
    pub display_name: String,
    /// Whether the field list came from the runtime manifest rather than the trace.
    pub fields_from_manifest: bool,
}

impl EventMetadata {
    /// `Provider/EventName`, the key the TraceEvent baselines use.
    pub fn qualified_name(&self) -> String {
        format!("{}/{}", self.provider, self.display_name)
    }
}

/// An event's header, decoded and with delta encoding undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventHeader {
    /// Metadata row id.
    pub metadata_id: u32,
    /// Per-capture-thread sequence number.
    pub sequence_number: u32,
    /// V4/V5: OS thread id the event describes. V6: index into the thread table.
    pub thread: u64,
    /// V4/V5: OS thread id that captured the event. V6: thread table index.
    pub capture_thread: u64,
    /// Processor the capturing thread ran on.
    pub processor: u32,
    /// Stack id (0 = none).
    pub stack_id: u32,
    /// Timestamp in ticks.
    pub timestamp: i64,
    /// Activity id (V4/V5 header; V6 label list).
    pub activity_id: Guid,
    /// Related activity id (V4/V5 header; V6 label list).
    pub related_activity_id: Guid,
    /// V6 label list id (0 = none).
    pub label_list_id: u32,
    /// No later event in the stream has an earlier timestamp.
    pub is_sorted: bool,
    /// Payload size in bytes.
    pub payload_size: u32,
}

/// A V6 thread table row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ThreadInfo {
    /// Thread index used by events.
    pub index: u64,
    /// Thread name.
    pub name: Option<String>,
    /// OS process id.
    pub process_id: Option<u64>,
    /// OS thread id.
    pub thread_id: Option<u64>,
    /// Other key/value pairs.
    pub key_values: Vec<(String, String)>,
}

/// One label of a V6 label list.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // variants are the spec's label kinds
pub enum Label {
    ActivityId(Guid),
    RelatedActivityId(Guid),
    TraceId([u8; 16]),
    SpanId(u64),
    String { key: String, value: String },
    Int { key: String, value: i64 },
    OpCode(u8),
    Keywords(u64),
    Level(u8),
    Version(u8),
}

/// A V6 label list.
pub type LabelList = Vec<Label>;
