//! Event headers: the uncompressed layout and header compression, for V4/V5 and V6.
//!
//! With header compression every field of a header is either repeated from the previous
//! header in the same block or read as a delta/value, as selected by a leading flags byte.
//! [`HeaderDecoder`] carries that "previous header" state; it is reset at every block.

use crate::cursor::Cursor;
use crate::error::{Error, Result};
use crate::model::{EventHeader, Guid};

const FLAG_METADATA_ID: u8 = 1;
const FLAG_CAPTURE_THREAD_AND_SEQUENCE: u8 = 2;
const FLAG_THREAD: u8 = 4;
const FLAG_STACK: u8 = 8;
const FLAG_ACTIVITY_ID: u8 = 16; // V6: label list id
const FLAG_RELATED_ACTIVITY_ID: u8 = 32;
const FLAG_SORTED: u8 = 64;
const FLAG_PAYLOAD_SIZE: u8 = 128;

/// Bytes a compressed header must have after its start for the fast decoder: more than
/// the longest valid header (1 flags byte, eight varints of at most 10 bytes, two GUIDs)
/// plus the 8 bytes a varint load reads.
pub(crate) const FAST_WINDOW: usize = 128;

/// The varint at `pos`, which moves past it; `None` when it is malformed or above `max`.
#[inline(always)]
fn var(window: &[u8; FAST_WINDOW], pos: &mut usize, max: u64) -> Option<u64> {
    let (value, len) = match window.get(*pos) {
        Some(&b) if b < 0x80 => (u64::from(b), 1),
        _ => varint_in(window, *pos)?,
    };
    *pos += len;
    (value <= max).then_some(value)
}

/// An optional varint field at `pos`: its value when `present` (moving past it), else
/// `old`. A one-byte value costs no branch on `present`; `None` when the value is malformed
/// or above `max`.
#[inline(always)]
fn opt(
    window: &[u8; FAST_WINDOW],
    pos: &mut usize,
    present: bool,
    old: u64,
    max: u64,
) -> Option<u64> {
    let b = u64::from(*window.get(*pos)?);
    let present = u64::from(present);
    // Arithmetic rather than `present && b >= 0x80`, which compiles to a branch on
    // `present` first.
    if b & (present << 7) != 0 {
        return var(window, pos, max);
    }
    *pos += present as usize;
    let mask = 0u64.wrapping_sub(present);
    Some((b & mask) | (old & !mask))
}

/// The timestamp delta at `pos`, which moves past it. Deltas of one or two bytes (up to
/// 16383 ticks) are the common case and are decoded inline.
#[inline(always)]
fn timestamp_delta(window: &[u8; FAST_WINDOW], pos: &mut usize) -> Option<u64> {
    let &[b0, b1] = window.get(*pos..)?.first_chunk::<2>()?;
    if b0 < 0x80 {
        *pos += 1;
        return Some(u64::from(b0));
    }
    if b1 < 0x80 {
        *pos += 2;
        return Some(u64::from(b0 & 0x7f) | u64::from(b1) << 7);
    }
    var(window, pos, u64::MAX)
}

/// The varint at `pos` of `window` (at least 2 bytes long): its value and length, or
/// `None` when it is malformed.
#[inline(always)]
fn varint_in(window: &[u8; FAST_WINDOW], pos: usize) -> Option<(u64, usize)> {
    let word = window.get(pos..).and_then(<[u8]>::first_chunk::<8>)?;
    match varint8(u64::from_le_bytes(*word)) {
        (value, len) if len <= 8 => Some((value, len)),
        _ => varint_long(window.get(pos..)?),
    }
}

/// A varint of 9 or 10 bytes (or a malformed one: `None`).
#[cold]
#[inline(never)]
fn varint_long(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut c = Cursor::new(bytes, 0);
    let value = c.varu64("varint").ok()?;
    Some((value, c.position()))
}

/// The V4/V5 activity ids of a compressed header.
#[cold]
#[inline(never)]
fn guids(
    h: &mut EventHeader,
    flags: u8,
    window: &[u8; FAST_WINDOW],
    pos: &mut usize,
) -> Option<()> {
    if flags & FLAG_ACTIVITY_ID != 0 {
        h.activity_id = Guid(*window.get(*pos..)?.first_chunk::<16>()?);
        *pos += 16;
    }
    if flags & FLAG_RELATED_ACTIVITY_ID != 0 {
        h.related_activity_id = Guid(*window.get(*pos..)?.first_chunk::<16>()?);
        *pos += 16;
    }
    Some(())
}

/// Decodes the LEB128 value at the start of `word` without branches: its value and length
/// in bytes. A value longer than 8 bytes reports a length of 9.
#[inline(always)]
fn varint8(word: u64) -> (u64, usize) {
    // The first byte without a continuation bit ends the value.
    let stops = !word & 0x8080_8080_8080_8080;
    let last_bit = stops.trailing_zeros(); // 64 when there is none
    let len = (last_bit / 8 + 1) as usize;
    let keep = 2u64.wrapping_shl(last_bit).wrapping_sub(1);
    // Squeeze out the continuation bits: 7-bit groups to 14, 28, then 56 bits.
    let x = word & keep & 0x7f7f_7f7f_7f7f_7f7f;
    let x = ((x & 0x7f00_7f00_7f00_7f00) >> 1) | (x & 0x007f_007f_007f_007f);
    let x = ((x & 0x3fff_0000_3fff_0000) >> 2) | (x & 0x0000_3fff_0000_3fff);
    let x = ((x & 0x0fff_ffff_0000_0000) >> 4) | (x & 0x0000_0000_0fff_ffff);
    (x, len)
}

/// Flag in a block header: events use header compression.
pub(crate) const BLOCK_FLAG_COMPRESSED: u16 = 1;

/// Decodes the event headers of one block.
#[derive(Debug, Clone)]
pub(crate) struct HeaderDecoder {
    previous: EventHeader,
    /// Block-relative end of the current uncompressed event, from its size field.
    uncompressed_end: usize,
    compressed: bool,
    v6: bool,
}

impl HeaderDecoder {
    pub(crate) fn new(compressed: bool, v6: bool) -> Self {
        HeaderDecoder {
            previous: EventHeader::default(),
            uncompressed_end: 0,
            compressed,
            v6,
        }
    }

    /// Decodes the next header in place; the cursor is left at the payload. Decoding in
    /// place matters: a header is ~100 bytes, and copying it per event costs more than
    /// decoding it.
    #[inline]
    pub(crate) fn decode(&mut self, c: &mut Cursor<'_>) -> Result<&EventHeader> {
        if self.compressed {
            let fast = c
                .rest()
                .first_chunk::<FAST_WINDOW>()
                .and_then(|window| self.decode_compressed_fast(window));
            match fast {
                Some(used) => c.skip(used, "event header")?,
                // Not enough bytes left for the fast decoder, or a malformed header.
                None => self.decode_compressed(c)?,
            }
        } else {
            self.previous = self.decode_uncompressed(c)?;
        }
        Ok(&self.previous)
    }

    /// The header decoded last.
    #[inline]
    pub(crate) fn header(&self) -> &EventHeader {
        &self.previous
    }

    /// Decodes the next header from `window`, the bytes from its start on, when the block
    /// is compressed; returns the header's length. `None` leaves the header to
    /// [`HeaderDecoder::decode`] on the same bytes: for an uncompressed block (untouched),
    /// or for a malformed header (see [`HeaderDecoder::decode_compressed_fast`]).
    #[inline(always)]
    pub(crate) fn decode_window(&mut self, window: &[u8; FAST_WINDOW]) -> Option<usize> {
        if self.compressed {
            self.decode_compressed_fast(window)
        } else {
            None
        }
    }

    /// [`HeaderDecoder::decode_compressed`] for a header with at least [`FAST_WINDOW`]
    /// bytes after it (all but the last few of a block): no bounds check per byte, short
    /// varints inline and longer ones decoded from one 8-byte load. Returns the header's
    /// length, or `None` when a field is malformed, for the checked decoder to report.
    ///
    /// Which optional fields are present varies from event to event (often at random: an
    /// event has a stack or not, a payload size like the previous one or not), so the
    /// one-byte values of the metadata id, thread, stack id and payload size are selected
    /// and skipped without a branch on their flag; only a longer value branches.
    ///
    /// Like the checked decoder it updates the header in place, so after `None` the header
    /// is as undefined as after an error (the checked decoder fails on the same bytes: it
    /// rejects exactly the values this one does, and the window holds every byte a valid
    /// header can use).
    #[inline(always)]
    fn decode_compressed_fast(&mut self, window: &[u8; FAST_WINDOW]) -> Option<usize> {
        let v6 = self.v6;
        let h = &mut self.previous;
        let flags = window[0];
        let mut pos = 1usize;
        let u32_max = u64::from(u32::MAX);
        let has = |flag: u8| flags & flag != 0;
        let md = opt(
            window,
            &mut pos,
            has(FLAG_METADATA_ID),
            h.metadata_id.into(),
            u32_max,
        )?;
        h.metadata_id = md as u32;
        // A branch: this group comes with a change of thread, which is bursty, and its
        // sequence number delta is rarely one byte (it is relative to the previous event,
        // which came from another thread).
        if has(FLAG_CAPTURE_THREAD_AND_SEQUENCE) {
            let delta = var(window, &mut pos, u32_max)? as u32;
            h.sequence_number = h.sequence_number.wrapping_add(delta);
            h.capture_thread = var(window, &mut pos, u64::MAX)?;
            h.processor = var(window, &mut pos, u32_max)? as u32;
        }
        // V4/V5 count only real events (metadata rows have id 0); V6 counts every row.
        h.sequence_number = h
            .sequence_number
            .wrapping_add(u32::from(v6 || h.metadata_id != 0));
        h.thread = opt(window, &mut pos, has(FLAG_THREAD), h.thread, u64::MAX)?;
        let stack = opt(
            window,
            &mut pos,
            has(FLAG_STACK),
            h.stack_id.into(),
            u32_max,
        )?;
        h.stack_id = stack as u32;
        h.timestamp = h
            .timestamp
            .wrapping_add(timestamp_delta(window, &mut pos)? as i64);
        if v6 {
            if has(FLAG_ACTIVITY_ID) {
                h.label_list_id = var(window, &mut pos, u32_max)? as u32;
            }
        } else if flags & (FLAG_ACTIVITY_ID | FLAG_RELATED_ACTIVITY_ID) != 0 {
            guids(h, flags, window, &mut pos)?;
        }
        h.is_sorted = has(FLAG_SORTED);
        h.payload_size = opt(
            window,
            &mut pos,
            has(FLAG_PAYLOAD_SIZE),
            h.payload_size.into(),
            u32_max,
        )? as u32;
        Some(pos)
    }

    #[inline]
    fn decode_compressed(&mut self, c: &mut Cursor<'_>) -> Result<()> {
        let v6 = self.v6;
        let h = &mut self.previous;
        let flags = c.u8("header flags")?;
        if flags & FLAG_METADATA_ID != 0 {
            h.metadata_id = c.varu32("metadata id")?;
        }
        if flags & FLAG_CAPTURE_THREAD_AND_SEQUENCE != 0 {
            h.sequence_number = h
                .sequence_number
                .wrapping_add(c.varu32("sequence number delta")?);
            h.capture_thread = c.varu64("capture thread")?;
            h.processor = c.varu32("processor number")?;
        }
        // V4/V5 count only real events (metadata rows have id 0); V6 counts every row.
        if v6 || h.metadata_id != 0 {
            h.sequence_number = h.sequence_number.wrapping_add(1);
        }
        if flags & FLAG_THREAD != 0 {
            h.thread = c.varu64("thread")?;
        }
        if flags & FLAG_STACK != 0 {
            h.stack_id = c.varu32("stack id")?;
        }
        let delta = c.varu64("timestamp delta")?;
        h.timestamp = h.timestamp.wrapping_add(delta as i64);
        if v6 {
            if flags & FLAG_ACTIVITY_ID != 0 {
                h.label_list_id = c.varu32("label list id")?;
            }
        } else {
            if flags & FLAG_ACTIVITY_ID != 0 {
                h.activity_id = c.guid("activity id")?;
            }
            if flags & FLAG_RELATED_ACTIVITY_ID != 0 {
                h.related_activity_id = c.guid("related activity id")?;
            }
        }
        h.is_sorted = flags & FLAG_SORTED != 0;
        if flags & FLAG_PAYLOAD_SIZE != 0 {
            h.payload_size = c.varu32("payload size")?;
        }
        Ok(())
    }

    fn decode_uncompressed(&mut self, c: &mut Cursor<'_>) -> Result<EventHeader> {
        let at = c.offset();
        let size = c.len_u32("event size")?;
        let start = c.position();
        let raw_id = c.u32("metadata id")?;
        let mut h = EventHeader {
            metadata_id: raw_id & 0x7fff_ffff,
            is_sorted: raw_id & 0x8000_0000 != 0,
            sequence_number: c.u32("sequence number")?,
            thread: c.u64("thread")?,
            capture_thread: c.u64("capture thread")?,
            processor: c.u32("processor number")?,
            stack_id: c.u32("stack id")?,
            timestamp: c.i64("timestamp")?,
            ..EventHeader::default()
        };
        if self.v6 {
            h.label_list_id = c.u32("label list id")?;
        } else {
            h.activity_id = c.guid("activity id")?;
            h.related_activity_id = c.guid("related activity id")?;
        }
        h.payload_size = c.u32("payload size")?;
        let header_len = c.position() - start;
        if header_len + h.payload_size as usize > size {
            return Err(Error::malformed(
                at,
                "event size",
                format!(
                    "size {size} is smaller than header plus payload {}",
                    header_len + h.payload_size as usize
                ),
            ));
        }
        self.uncompressed_end = start + size;
        Ok(h)
    }

    /// Moves past the rest of an uncompressed event: any bytes its size field covers beyond
    /// the payload. Like TraceEvent, no alignment padding is assumed between events.
    #[inline]
    pub(crate) fn finish_event(&self, c: &mut Cursor<'_>) -> Result<()> {
        if !self.compressed {
            let extra = self.uncompressed_end.saturating_sub(c.position());
            c.skip(extra, "event trailer")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_rng::next as rng;

    #[test]
    fn varint8_agrees_with_the_cursor() {
        let mut x = 0x1234_5678_9abc_def1u64;
        for i in 0..20_000 {
            let v = match i % 4 {
                0 => rng(&mut x) >> (rng(&mut x) % 64),
                1 => i,
                _ => rng(&mut x),
            };
            let mut buf = Vec::new();
            crate::write::varu64(&mut buf, v);
            buf.resize(16, 0xff);
            let word = u64::from_le_bytes(buf[..8].try_into().unwrap());
            let (fast, len) = varint8(word);
            let mut c = Cursor::new(&buf, 0);
            assert_eq!(c.varu64("v").unwrap(), v);
            if c.position() <= 8 {
                assert_eq!((fast, len), (v, c.position()), "{v}");
            } else {
                assert_eq!(len, 9, "{v}");
            }
        }
    }

    /// The fast decoder and the checked one agree on every header, valid or not: the fast
    /// one either matches the checked one or declines.
    #[test]
    fn fast_header_decoder_agrees_with_the_checked_one() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut compared = 0;
        for round in 0..20_000 {
            let v6 = round % 2 == 0;
            let mut bytes = Vec::with_capacity(2 * FAST_WINDOW);
            for _ in 0..2 * FAST_WINDOW {
                let r = rng(&mut x);
                // Mostly short varints, with some long and invalid ones.
                bytes.push(match r % 16 {
                    0..=9 => (r >> 8) as u8 & 0x7f,
                    10..=13 => 0x80 | (r >> 8) as u8,
                    _ => 0xff,
                });
            }
            bytes[0] = rng(&mut x) as u8;
            let mut fast = HeaderDecoder::new(true, v6);
            fast.previous.metadata_id = (round % 3) as u32;
            fast.previous.timestamp = rng(&mut x) as i64;
            let mut checked = fast.clone();
            let window = bytes.first_chunk::<FAST_WINDOW>().unwrap();
            let mut c = Cursor::new(&bytes, 0);
            let slow = checked.decode_compressed(&mut c).map(|()| c.position());
            match fast.decode_compressed_fast(window) {
                Some(used) => {
                    assert_eq!(slow.ok(), Some(used), "round {round}");
                    assert_eq!(fast.previous, checked.previous, "round {round}");
                    compared += 1;
                }
                None => assert!(slow.is_err(), "round {round}: only the fast decoder failed"),
            }
        }
        assert!(
            compared > 5_000,
            "only {compared} headers took the fast path"
        );
    }
}
