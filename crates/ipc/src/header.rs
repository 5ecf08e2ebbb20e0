//! The fixed 20-byte header every message starts with.

use crate::Error;

/// The protocol magic: `DOTNET_IPC_V1` and a NUL.
pub const MAGIC: [u8; 14] = *b"DOTNET_IPC_V1\0";
/// Bytes in a header.
pub const HEADER_LEN: usize = 20;
/// The largest message the 16-bit size field can describe.
pub const MAX_MESSAGE_LEN: usize = u16::MAX as usize;

/// Command sets (the header's `command_set` byte).
pub mod set {
    /// Core dumps (not served here).
    pub const DUMP: u8 = 0x01;
    /// EventPipe sessions.
    pub const EVENTPIPE: u8 = 0x02;
    /// Profiler attach (not served here).
    pub const PROFILER: u8 = 0x03;
    /// Process information and control.
    pub const PROCESS: u8 = 0x04;
    /// Responses.
    pub const SERVER: u8 = 0xFF;
}

/// EventPipe command ids.
pub mod eventpipe {
    /// Stop a session.
    pub const STOP_TRACING: u8 = 0x01;
    /// Start a streaming session (versions 1 to 6 follow).
    pub const COLLECT_TRACING: u8 = 0x02;
    /// ... with a rundown flag.
    pub const COLLECT_TRACING_2: u8 = 0x03;
    /// ... with a stack-walk flag.
    pub const COLLECT_TRACING_3: u8 = 0x04;
    /// ... with a rundown keyword.
    pub const COLLECT_TRACING_4: u8 = 0x05;
    /// ... with a session type and per-provider event filters.
    pub const COLLECT_TRACING_5: u8 = 0x06;
    /// ... with a buffering mode.
    pub const COLLECT_TRACING_6: u8 = 0x07;
}

/// Process command ids.
pub mod process {
    /// Process id, runtime cookie, command line, OS, architecture.
    pub const PROCESS_INFO: u8 = 0x00;
    /// Let a process suspended at startup run.
    pub const RESUME_RUNTIME: u8 = 0x01;
    /// `ProcessInfo` plus entry-point assembly and runtime version.
    pub const PROCESS_INFO_2: u8 = 0x04;
    /// Versioned `ProcessInfo2` plus a runtime identifier.
    pub const PROCESS_INFO_3: u8 = 0x08;
}

/// Response ids (command set [`set::SERVER`]).
pub mod server {
    /// Success; the payload depends on the command.
    pub const OK: u8 = 0x00;
    /// Failure; the payload is an `i32` HRESULT.
    pub const ERROR: u8 = 0xFF;
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Size of the whole message, header included.
    pub size: u16,
    /// The command set.
    pub command_set: u8,
    /// The command within its set.
    pub command_id: u8,
    /// Must be zero in V1.
    pub reserved: u16,
}

impl Header {
    /// A header for a message whose payload is `payload_len` bytes.
    pub fn new(command_set: u8, command_id: u8, payload_len: usize) -> Result<Header, Error> {
        let size = HEADER_LEN + payload_len;
        let size = u16::try_from(size).map_err(|_| {
            Error::malformed(format!(
                "a {payload_len}-byte payload does not fit a message (at most {} bytes)",
                MAX_MESSAGE_LEN - HEADER_LEN
            ))
        })?;
        Ok(Header {
            size,
            command_set,
            command_id,
            reserved: 0,
        })
    }

    /// The payload's length.
    pub fn payload_len(&self) -> usize {
        usize::from(self.size).saturating_sub(HEADER_LEN)
    }

    /// The wire bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[..14].copy_from_slice(&MAGIC);
        out[14..16].copy_from_slice(&self.size.to_le_bytes());
        out[16] = self.command_set;
        out[17] = self.command_id;
        out[18..20].copy_from_slice(&self.reserved.to_le_bytes());
        out
    }

    /// Decodes and validates a header: the magic must match and the size must cover the
    /// header itself.
    pub fn decode(bytes: &[u8; HEADER_LEN]) -> Result<Header, HeaderError> {
        if bytes[..14] != MAGIC {
            return Err(HeaderError::UnknownMagic);
        }
        let size = u16::from_le_bytes([bytes[14], bytes[15]]);
        if usize::from(size) < HEADER_LEN {
            return Err(HeaderError::BadSize(size));
        }
        Ok(Header {
            size,
            command_set: bytes[16],
            command_id: bytes[17],
            reserved: u16::from_le_bytes([bytes[18], bytes[19]]),
        })
    }

    /// One message: this header followed by `payload`.
    pub fn message(command_set: u8, command_id: u8, payload: &[u8]) -> Result<Vec<u8>, Error> {
        let header = Header::new(command_set, command_id, payload.len())?;
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        out.extend_from_slice(&header.encode());
        out.extend_from_slice(payload);
        Ok(out)
    }
}

/// Why a header was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The first 14 bytes are not `DOTNET_IPC_V1\0`.
    #[error("the message does not start with the DOTNET_IPC_V1 magic")]
    UnknownMagic,
    /// The size field is smaller than the header.
    #[error("the message size {0} is smaller than its 20-byte header")]
    BadSize(u16),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ok_message_is_twenty_bytes() {
        let m = Header::message(set::SERVER, server::OK, &[]).unwrap();
        assert_eq!(m.len(), 20);
        assert_eq!(&m[..14], b"DOTNET_IPC_V1\0");
        assert_eq!(&m[14..], &[20, 0, 0xFF, 0, 0, 0]);
    }

    #[test]
    fn decode_inverts_encode_and_rejects_bad_magic_and_size() {
        let h = Header::new(set::EVENTPIPE, eventpipe::COLLECT_TRACING_2, 60).unwrap();
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        let mut bad = h.encode();
        bad[0] = b'X';
        assert_eq!(Header::decode(&bad), Err(HeaderError::UnknownMagic));
        let mut small = h.encode();
        small[14..16].copy_from_slice(&19u16.to_le_bytes());
        assert_eq!(Header::decode(&small), Err(HeaderError::BadSize(19)));
    }

    #[test]
    fn oversized_payloads_are_refused() {
        assert!(Header::new(set::EVENTPIPE, 2, MAX_MESSAGE_LEN - HEADER_LEN).is_ok());
        assert!(Header::new(set::EVENTPIPE, 2, MAX_MESSAGE_LEN - HEADER_LEN + 1).is_err());
    }
}
