//! A record in a session buffer, as the writer lays it out and the drain reads it:
//! `len: u32, event_index: u32, seq: u32, flags: u32, timestamp: i64` (the header), then
//! 32 bytes of activity ids when `flags & FLAG_ACTIVITY`, then 8 bytes of the subject
//! thread's OS id when `flags & FLAG_SUBJECT`, then (when `flags & FLAG_STACK`) a u32 byte
//! length and the stack's pointer-sized IPs, then the payload. Integers are native-endian
//! (the buffer never leaves the process); `len` counts the whole record.

/// Bytes of a record's header.
pub const RECORD_HEADER: usize = 24;
/// Activity and related activity ids follow the header.
pub const FLAG_ACTIVITY: u32 = 1;
/// A stack follows (after the ids and subject, when present).
pub const FLAG_STACK: u32 = 2;
/// The record is about another thread (a profiler's sample of it): 8 bytes, its OS id.
pub const FLAG_SUBJECT: u32 = 4;
