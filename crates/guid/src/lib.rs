//! # eventpipe-guid
//!
//! The one GUID type of eventpipe-rs: a provider's id, an activity id, a GUID payload
//! field. The format (`nettrace`) reads and writes it; the instrumentation core
//! (`eventpipe-core`) declares and writes it; both re-export this type, so they are the same
//! and need no conversion. No dependencies, so neither layer pays for the other's.
#![forbid(unsafe_code)]

use std::fmt;

/// A GUID as its 16 bytes in the trace's (Windows, mixed-endian) order; it prints and
/// parses in the usual text form (`3ac73b97-af73-50e9-0822-5da4367920d0`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Guid(pub [u8; 16]);

impl Guid {
    /// The all-zero GUID.
    pub const ZERO: Guid = Guid([0; 16]);

    /// Whether all bytes are zero.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// Parses `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, with or without braces.
    pub fn parse(s: &str) -> Option<Guid> {
        let s = s.trim().trim_start_matches('{').trim_end_matches('}');
        let hex: String = s.chars().filter(|c| *c != '-').collect();
        if hex.len() != 32 || s.len() != 36 {
            return None;
        }
        let mut raw = [0u8; 16];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        // Text order is big-endian for the first three groups; storage is little-endian.
        let mut out = raw;
        out[0..4].copy_from_slice(&[raw[3], raw[2], raw[1], raw[0]]);
        out[4..6].copy_from_slice(&[raw[5], raw[4]]);
        out[6..8].copy_from_slice(&[raw[7], raw[6]]);
        Some(Guid(out))
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            u16::from_le_bytes([b[4], b[5]]),
            u16::from_le_bytes([b[6], b[7]]),
            b[8],
            b[9],
            b[10],
            b[11],
            b[12],
            b[13],
            b[14],
            b[15]
        )
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Guid({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::Guid;

    #[test]
    fn text_round_trips_through_the_mixed_endian_bytes() {
        let text = "3ac73b97-af73-50e9-0822-5da4367920d0";
        let g = Guid::parse(text).unwrap();
        assert_eq!(g.0[..4], [0x97, 0x3b, 0xc7, 0x3a]);
        assert_eq!(g.0[8..], [0x08, 0x22, 0x5d, 0xa4, 0x36, 0x79, 0x20, 0xd0]);
        assert_eq!(g.to_string(), text);
        assert_eq!(Guid::parse(&format!("{{{text}}}")), Some(g));
        assert_eq!(Guid::parse("3ac73b97-af73-50e9-0822"), None);
        assert!(Guid::ZERO.is_zero() && !g.is_zero());
    }
}
