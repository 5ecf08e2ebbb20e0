//! # nettrace
//!
//! A streaming reader and a writer for NetTrace, the trace format of .NET's EventPipe,
//! versions 4, 5 and 6.
//!
//! ## Data flow
//!
//! ```text
//! bytes ─▶ Input (SliceInput: borrowed, zero-copy │ ReadInput: any io::Read, one block held)
//!       ─▶ BlockReader (FastSerialization objects or V6 block headers → typed blocks)
//!       ─▶ TraceReader (metadata/stack/thread/label caches, header decompression,
//!                       lost-event accounting) ─▶ EventRef<'_> (next_event_ref: the fast
//!                       way) or Event<'_> (next_event: every reference resolved)
//!       ─▶ SortedReader (optional: timestamp order within sequence-point regions)
//! for_each_field ─▶ (field, ValueRef) per field, strings, bytes, arrays and objects
//!                   borrowed (fast, no allocation)
//! decode_payload ─▶ Vec<(name, Value)>, owned
//!                   (fields from the metadata, or for native runtime events from the
//!                   manifest table in [`manifest`])
//! ```
//!
//! The writer ([`write::TraceWriter`]) is the reverse: it is driven block by block so a
//! runtime can stream through it.
//!
//! ## Design constraints
//!
//! * Hostile input never panics, never loops without consuming input and never allocates
//!   more than the remaining input justifies: every error is a typed [`Error`] with the
//!   absolute byte offset.
//! * Iteration is lazy: payloads are decoded only on request.
//! * Memory is bounded by one block plus the caches the format allows.
#![forbid(unsafe_code)]

mod cursor;
mod error;
mod header;
mod idmap;
pub mod manifest;
mod metadata;
mod model;
mod payload;
mod plan;
mod reader;
pub mod salvage;
mod sorted;
pub mod source;
mod stacks;
#[cfg(test)]
mod test_rng;
mod time;
pub mod write;

pub use error::{Error, ErrorKind, Result, StreamOffset};
pub use model::{
    EventHeader, EventMetadata, FieldDesc, FieldType, FormatVersion, Guid, Label, LabelList,
    SystemTime, ThreadInfo, TraceInfo,
};
pub use payload::{ArrayIter, ArrayRef, ObjectFields, ObjectRef, Utf16Str, Value, ValueRef};
pub use reader::{scan_metadata, Event, EventRef, OwnedEvent, ReadStats, TraceReader, Truncation};
pub use sorted::{check_sorted_order, OrderCheck, SortFilter, SortedReader, TimeOrder};
pub use time::format_unix_nanos;
