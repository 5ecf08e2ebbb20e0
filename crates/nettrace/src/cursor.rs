//! A bounds-checked little-endian cursor over borrowed bytes.
//!
//! Every read is checked and reports the absolute stream offset on failure; nothing here
//! indexes unchecked or trusts a length from the input before comparing it with what remains.

use crate::error::{Error, Result};
use crate::model::Guid;

/// Reads primitives from a byte slice that starts at absolute stream offset `base`.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8], base: u64) -> Self {
        Cursor { data, pos: 0, base }
    }

    /// A cursor at position `pos` of `data` (clamped to its end).
    #[inline]
    pub(crate) fn at(data: &'a [u8], base: u64, pos: usize) -> Self {
        Cursor {
            data,
            pos: pos.min(data.len()),
            base,
        }
    }

    /// Absolute stream offset of the next byte.
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    #[inline]
    pub(crate) fn rest(&self) -> &'a [u8] {
        &self.data[self.pos..]
    }

    #[inline]
    pub(crate) fn bytes(&mut self, len: usize, what: &'static str) -> Result<&'a [u8]> {
        if len > self.remaining() {
            return Err(Error::eof(self.offset(), what));
        }
        let out = &self.data[self.pos..self.pos + len];
        self.pos += len;
        Ok(out)
    }

    #[inline]
    pub(crate) fn skip(&mut self, len: usize, what: &'static str) -> Result<()> {
        self.bytes(len, what).map(|_| ())
    }

    /// A sub-cursor over the next `len` bytes, which this cursor then skips.
    pub(crate) fn sub(&mut self, len: usize, what: &'static str) -> Result<Cursor<'a>> {
        let base = self.offset();
        let data = self.bytes(len, what)?;
        Ok(Cursor::new(data, base))
    }

    #[inline]
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let b = self.bytes(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    #[inline]
    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    #[inline]
    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    #[inline]
    pub(crate) fn i16(&mut self, what: &'static str) -> Result<i16> {
        Ok(i16::from_le_bytes(self.array(what)?))
    }
    #[inline]
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    #[inline]
    pub(crate) fn i32(&mut self, what: &'static str) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }
    #[inline]
    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    #[inline]
    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }
    #[inline]
    pub(crate) fn guid(&mut self, what: &'static str) -> Result<Guid> {
        Ok(Guid(self.array(what)?))
    }

    /// A length that the input declares, checked against what remains before anyone
    /// allocates or loops on it.
    pub(crate) fn len_u32(&mut self, what: &'static str) -> Result<usize> {
        let at = self.offset();
        let n = self.u32(what)? as usize;
        if n > self.remaining() {
            return Err(Error::malformed(
                at,
                what,
                format!(
                    "length {n} exceeds the {} bytes that remain",
                    self.remaining()
                ),
            ));
        }
        Ok(n)
    }

    /// LEB128 unsigned integer of at most 64 bits.
    #[inline]
    pub(crate) fn varu64(&mut self, what: &'static str) -> Result<u64> {
        // Most header fields are deltas below 128: one byte, no loop.
        if let Some(&b) = self.data.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.varu64_multi(what)
    }

    fn varu64_multi(&mut self, what: &'static str) -> Result<u64> {
        // With 8 bytes at hand, decode without per-byte bounds checks.
        if let Some(chunk) = self.data.get(self.pos..self.pos + 8) {
            let word = u64::from_le_bytes([
                chunk[0], chunk[1], chunk[2], chunk[3], chunk[4], chunk[5], chunk[6], chunk[7],
            ]);
            // Continuation bits are the high bit of each byte; the first clear one ends it.
            let stops = !word & 0x8080_8080_8080_8080;
            if stops != 0 {
                let len = (stops.trailing_zeros() / 8 + 1) as usize;
                let mut value = 0u64;
                for i in 0..len {
                    value |= ((word >> (8 * i)) & 0x7f) << (7 * i);
                }
                self.pos += len;
                return Ok(value);
            }
        }
        self.varu64_slow(what)
    }

    fn varu64_slow(&mut self, what: &'static str) -> Result<u64> {
        let at = self.offset();
        let mut value: u64 = 0;
        for i in 0..10 {
            let b = self.u8(what)?;
            let part = u64::from(b & 0x7f);
            if i == 9 && part > 1 {
                return Err(Error::malformed(at, what, "varint overflows 64 bits"));
            }
            value |= part << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::malformed(at, what, "varint longer than 10 bytes"))
    }

    #[inline]
    pub(crate) fn varu32(&mut self, what: &'static str) -> Result<u32> {
        let at = self.offset();
        let v = self.varu64(what)?;
        u32::try_from(v)
            .map_err(|_| Error::malformed(at, what, format!("{v} does not fit 32 bits")))
    }

    /// Zigzag-encoded signed LEB128.
    pub(crate) fn vari64(&mut self, what: &'static str) -> Result<i64> {
        let v = self.varu64(what)?;
        Ok(zigzag_decode(v))
    }

    /// NUL-terminated UTF-16LE string; the terminator is consumed.
    pub(crate) fn utf16z(&mut self, what: &'static str) -> Result<String> {
        let at = self.offset();
        let rest = self.rest();
        let mut units = Vec::new();
        let mut i = 0;
        loop {
            let Some(pair) = rest.get(i..i + 2) else {
                return Err(Error::malformed(
                    at,
                    what,
                    "UTF-16 string has no terminator",
                ));
            };
            i += 2;
            let unit = u16::from_le_bytes([pair[0], pair[1]]);
            if unit == 0 {
                break;
            }
            units.push(unit);
        }
        self.pos += i;
        Ok(String::from_utf16_lossy(&units))
    }

    /// V6 string: varuint32 byte length, then UTF-8.
    pub(crate) fn utf8_varlen(&mut self, what: &'static str) -> Result<String> {
        let at = self.offset();
        let len = self.varu32(what)? as usize;
        if len > self.remaining() {
            return Err(Error::malformed(
                at,
                what,
                format!("string length {len} exceeds input"),
            ));
        }
        let b = self.bytes(len, what)?;
        Ok(String::from_utf8_lossy(b).into_owned())
    }
}

pub(crate) fn zigzag_decode(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

pub(crate) fn zigzag_encode(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_extremes() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut buf = Vec::new();
            crate::write::varu64(&mut buf, v);
            let mut c = Cursor::new(&buf, 0);
            assert_eq!(c.varu64("v").unwrap(), v);
            assert!(c.is_empty());
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(zigzag_decode(zigzag_encode(v)), v);
        }
    }

    #[test]
    fn overlong_varint_is_an_error_not_a_panic() {
        let buf = [0xffu8; 11];
        let mut c = Cursor::new(&buf, 100);
        let err = c.varu64("x").unwrap_err();
        assert_eq!(err.offset().unwrap().0, 100);
    }

    #[test]
    fn unterminated_utf16_is_an_error() {
        let buf = [0x41u8, 0, 0x42];
        assert!(Cursor::new(&buf, 0).utf16z("s").is_err());
    }
}
