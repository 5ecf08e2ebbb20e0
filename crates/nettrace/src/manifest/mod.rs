//! Names and payload layouts of the .NET runtime's native events.
//!
//! Native runtime events (GC, JIT, loader, ...) are written into nettrace files with metadata
//! that carries only the provider name, event id and version: no event name and no field list.
//! TraceEvent names and decodes them from the runtime's event manifest (`ClrEtwAll.man`); this
//! module does the same from a table generated out of that manifest by
//! `tools/gen_manifest.py` (see ARCHITECTURE.md for how to regenerate it).
//!
//! The table is plain `static` data: looking an event up costs a binary search and no
//! allocation, and nothing here runs at start-up.

mod generated;

/// One event of a known provider, as the manifest declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownEvent {
    /// Provider name, e.g. `Microsoft-Windows-DotNETRuntime`.
    pub provider: &'static str,
    /// Event id within the provider.
    pub event_id: u16,
    /// Event version this layout describes.
    pub version: u8,
    /// Task name as TraceEvent prints it, e.g. `GC`.
    pub task: &'static str,
    /// Opcode name as TraceEvent prints it, e.g. `Start`; empty for `win:Info`.
    pub opcode: &'static str,
    /// Full event name as TraceEvent prints it, e.g. `GC/Start`.
    pub name: &'static str,
    /// Opcode value.
    pub opcode_value: u8,
    /// Keyword mask.
    pub keywords: u64,
    /// Level (1 critical .. 5 verbose).
    pub level: u8,
    /// Payload fields in order.
    pub fields: &'static [KnownField],
}

/// One payload field of a [`KnownEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownField {
    /// Field name, e.g. `ClrInstanceID`.
    pub name: &'static str,
    /// Encoding of one element.
    pub ty: KnownType,
    /// How many elements follow.
    pub count: KnownCount,
}

/// How many elements a [`KnownField`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnownCount {
    /// A single value.
    One,
    /// A fixed number of elements (`count="16"` in the manifest).
    Fixed(u16),
    /// As many elements as the value of an earlier field at the same nesting level, given by
    /// its index in the enclosing field list (`count="Count"` in the manifest).
    Field(u16),
}

/// Encoding of one element of a [`KnownField`] (the manifest's `inType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnownType {
    /// `win:Int8`
    Int8,
    /// `win:UInt8`
    UInt8,
    /// `win:Int16`
    Int16,
    /// `win:UInt16`
    UInt16,
    /// `win:Int32`
    Int32,
    /// `win:UInt32`
    UInt32,
    /// `win:Int64`
    Int64,
    /// `win:UInt64`
    UInt64,
    /// `win:Float`
    Float,
    /// `win:Double`
    Double,
    /// `win:Boolean` (4 bytes)
    Boolean,
    /// `win:GUID`
    Guid,
    /// `win:Pointer`: the trace's pointer size.
    Pointer,
    /// `win:UnicodeString`: NUL-terminated UTF-16.
    UnicodeString,
    /// `win:AnsiString`: NUL-terminated 8-bit.
    AnsiString,
    /// `win:FILETIME`: 8 bytes.
    FileTime,
    /// `win:SYSTEMTIME`: 16 bytes.
    SystemTime,
    /// `win:Binary`: raw bytes; the byte length is the field's [`KnownCount`].
    Binary,
    /// A `<struct>`: its fields, decoded once per element.
    Struct(&'static [KnownField]),
}

/// All known events, sorted by (provider, event id, version).
pub fn known_events() -> &'static [KnownEvent] {
    generated::KNOWN_EVENTS
}

/// Looks up the layout of `provider`/`event_id` at `version`.
///
/// An exact version match wins; otherwise the highest known version below `version` is used,
/// because runtimes only ever append fields when they bump an event's version.
pub fn lookup(provider: &str, event_id: u16, version: u8) -> Option<&'static KnownEvent> {
    let table = known_events();
    let start = table.partition_point(|e| (e.provider, e.event_id) < (provider, event_id));
    let candidates = table[start..]
        .iter()
        .take_while(|e| e.provider == provider && e.event_id == event_id);
    let mut best: Option<&'static KnownEvent> = None;
    for candidate in candidates {
        if candidate.version == version {
            return Some(candidate);
        }
        if candidate.version < version && best.is_none_or(|b| b.version < candidate.version) {
            best = Some(candidate);
        }
        if best.is_none() && candidate.version > version {
            best = Some(candidate);
        }
    }
    best
}

/// Whether `provider` is one whose events this table describes.
pub fn is_known_provider(provider: &str) -> bool {
    let table = known_events();
    let start = table.partition_point(|e| e.provider < provider);
    table.get(start).is_some_and(|e| e.provider == provider)
}
#[cfg(test)]
mod tests;
