//! Payload primitives: little-endian integers, bools, GUIDs and length-prefixed UTF-16
//! strings (`u32` count of UTF-16 units including a final NUL, or 0 for none).
//!
//! [`PayloadReader`] checks every length against the bytes actually present before it
//! allocates, so the largest allocation a peer can cause is bounded by the message it sent.

use crate::Error;

/// Reads a payload front to back; every error names the field and its offset.
#[derive(Debug)]
pub struct PayloadReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> PayloadReader<'a> {
    /// Reads `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        PayloadReader { bytes, pos: 0 }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Error> {
        if self.remaining() < n {
            return Err(Error::malformed(format!(
                "{what} at payload offset {} needs {n} bytes, {} remain",
                self.pos,
                self.remaining()
            )));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], Error> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    /// One byte.
    pub fn u8(&mut self, what: &str) -> Result<u8, Error> {
        Ok(self.take(1, what)?[0])
    }

    /// A one-byte bool; any non-zero value is true, as the runtime reads it.
    pub fn bool(&mut self, what: &str) -> Result<bool, Error> {
        Ok(self.u8(what)? != 0)
    }

    /// A `u32`.
    pub fn u32(&mut self, what: &str) -> Result<u32, Error> {
        self.array(what).map(u32::from_le_bytes)
    }

    /// An `i32`.
    pub fn i32(&mut self, what: &str) -> Result<i32, Error> {
        self.array(what).map(i32::from_le_bytes)
    }

    /// A `u64`.
    pub fn u64(&mut self, what: &str) -> Result<u64, Error> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A GUID's 16 bytes as they appear on the wire.
    pub fn guid(&mut self, what: &str) -> Result<[u8; 16], Error> {
        self.array(what)
    }

    /// An array length whose elements take at least `min_element_len` bytes each: a count
    /// that the remaining bytes cannot hold is an error before anything is allocated.
    pub fn count(&mut self, what: &str, min_element_len: usize) -> Result<usize, Error> {
        let at = self.pos;
        let n = self.u32(what)? as usize;
        if n.saturating_mul(min_element_len.max(1)) > self.remaining() {
            return Err(Error::malformed(format!(
                "{what} at payload offset {at} claims {n} elements but only {} bytes follow",
                self.remaining()
            )));
        }
        Ok(n)
    }

    /// A string: `u32` UTF-16 unit count including the terminating NUL, then the units.
    /// A count of 0 is the empty string.
    pub fn string(&mut self, what: &str) -> Result<String, Error> {
        let at = self.pos;
        let units = self.count(what, 2)?;
        if units == 0 {
            return Ok(String::new());
        }
        let raw = self.take(units * 2, what)?;
        let mut chars: Vec<u16> = raw
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        if chars.pop() != Some(0) {
            return Err(Error::malformed(format!(
                "{what} at payload offset {at} is not NUL-terminated"
            )));
        }
        String::from_utf16(&chars).map_err(|_| {
            Error::malformed(format!("{what} at payload offset {at} is not valid UTF-16"))
        })
    }
}

/// Builds a payload.
#[derive(Debug, Default)]
pub struct PayloadWriter {
    bytes: Vec<u8>,
}

impl PayloadWriter {
    /// An empty payload.
    pub fn new() -> Self {
        Self::default()
    }

    /// The bytes written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Appends one byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes.push(v);
        self
    }

    /// Appends a bool as one byte.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }

    /// Appends a `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends an `i32`.
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends GUID bytes.
    pub fn guid(&mut self, v: &[u8; 16]) -> &mut Self {
        self.bytes.extend_from_slice(v);
        self
    }

    /// Appends a string; the empty string is written as a zero count, as the runtime does.
    pub fn string(&mut self, s: &str) -> &mut Self {
        if s.is_empty() {
            return self.u32(0);
        }
        let units: Vec<u16> = s.encode_utf16().chain(std::iter::once(0)).collect();
        self.u32(units.len() as u32);
        for u in units {
            self.bytes.extend_from_slice(&u.to_le_bytes());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_round_trip_and_the_empty_string_is_a_zero_count() {
        let mut w = PayloadWriter::new();
        w.string("Microsoft-Windows-DotNETRuntime")
            .string("")
            .string("é世");
        let bytes = w.into_bytes();
        let mut r = PayloadReader::new(&bytes);
        assert_eq!(r.string("a").unwrap(), "Microsoft-Windows-DotNETRuntime");
        assert_eq!(r.string("b").unwrap(), "");
        assert_eq!(r.string("c").unwrap(), "é世");
        assert_eq!(r.remaining(), 0);
        assert_eq!(&bytes[68..72], &0u32.to_le_bytes());
    }

    #[test]
    fn hostile_strings_are_errors_naming_the_field() {
        // Unterminated.
        let mut w = PayloadWriter::new();
        w.u32(2).u8(b'a').u8(0).u8(b'b').u8(0);
        let e = PayloadReader::new(&w.into_bytes()).string("provider name");
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("provider name at payload offset 0 is not NUL-terminated"));
        // A count far beyond the bytes present: refused before allocating.
        let mut w = PayloadWriter::new();
        w.u32(u32::MAX).u32(0);
        let e = PayloadReader::new(&w.into_bytes())
            .string("arguments")
            .unwrap_err();
        assert!(e.to_string().contains("claims 4294967295 elements"), "{e}");
        // Lone surrogate.
        let mut w = PayloadWriter::new();
        w.u32(2).u8(0x00).u8(0xD8).u8(0).u8(0);
        assert!(PayloadReader::new(&w.into_bytes()).string("s").is_err());
    }

    #[test]
    fn truncated_integers_are_errors() {
        let e = PayloadReader::new(&[1, 2, 3])
            .u32("circularBufferMB")
            .unwrap_err();
        assert!(e
            .to_string()
            .contains("circularBufferMB at payload offset 0 needs 4 bytes, 3 remain"));
    }
}
