//! Event headers: the uncompressed layout and header compression, for V4/V5 and V6.
//!
//! With header compression every field of a header is either repeated from the previous
//! header in the same block or read as a delta/value, as selected by a leading flags byte.
//! [`HeaderDecoder`] carries that "previous header" state; it is reset at every block.

use crate::cursor::Cursor;
use crate::error::{Error, Result};
use crate::model::EventHeader;

const FLAG_METADATA_ID: u8 = 1;
const FLAG_CAPTURE_THREAD_AND_SEQUENCE: u8 = 2;
const FLAG_THREAD: u8 = 4;
const FLAG_STACK: u8 = 8;
const FLAG_ACTIVITY_ID: u8 = 16; // V6: label list id
const FLAG_RELATED_ACTIVITY_ID: u8 = 32;
const FLAG_SORTED: u8 = 64;
const FLAG_PAYLOAD_SIZE: u8 = 128;

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
            self.decode_compressed(c)?;
        } else {
            self.previous = self.decode_uncompressed(c)?;
        }
        Ok(&self.previous)
    }

    /// The header decoded last.
    pub(crate) fn header(&self) -> &EventHeader {
        &self.previous
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
    pub(crate) fn finish_event(&self, c: &mut Cursor<'_>) -> Result<()> {
        if !self.compressed {
            let extra = self.uncompressed_end.saturating_sub(c.position());
            c.skip(extra, "event trailer")?;
        }
        Ok(())
    }
}
