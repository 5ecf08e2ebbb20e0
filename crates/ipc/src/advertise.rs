//! The greeting a process sends when it connects out to a reverse ("connect") diagnostic
//! port: `ADVR_V1\0`, its runtime cookie, its process id and two reserved bytes.

use crate::Error;

/// The advertisement's magic.
pub const ADVERTISE_MAGIC: [u8; 8] = *b"ADVR_V1\0";
/// Bytes in an advertisement.
pub const ADVERTISE_LEN: usize = 34;

/// A decoded advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advertise {
    /// The runtime instance cookie (also in `ProcessInfo`).
    pub runtime_cookie: [u8; 16],
    /// The connecting process.
    pub process_id: u64,
}

impl Advertise {
    /// The wire bytes.
    pub fn encode(&self) -> [u8; ADVERTISE_LEN] {
        let mut out = [0u8; ADVERTISE_LEN];
        out[..8].copy_from_slice(&ADVERTISE_MAGIC);
        out[8..24].copy_from_slice(&self.runtime_cookie);
        out[24..32].copy_from_slice(&self.process_id.to_le_bytes());
        out
    }

    /// Decodes an advertisement, checking its magic.
    pub fn decode(bytes: &[u8; ADVERTISE_LEN]) -> Result<Advertise, Error> {
        if bytes[..8] != ADVERTISE_MAGIC {
            return Err(Error::malformed(
                "the reverse connection did not start with the ADVR_V1 advertisement",
            ));
        }
        let mut runtime_cookie = [0u8; 16];
        runtime_cookie.copy_from_slice(&bytes[8..24]);
        let mut pid = [0u8; 8];
        pid.copy_from_slice(&bytes[24..32]);
        Ok(Advertise {
            runtime_cookie,
            process_id: u64::from_le_bytes(pid),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_checks_the_magic() {
        let a = Advertise {
            runtime_cookie: [7; 16],
            process_id: 4242,
        };
        let bytes = a.encode();
        assert_eq!(&bytes[..8], b"ADVR_V1\0");
        assert_eq!(Advertise::decode(&bytes).unwrap(), a);
        let mut bad = bytes;
        bad[3] = b'X';
        assert!(Advertise::decode(&bad).is_err());
    }
}
