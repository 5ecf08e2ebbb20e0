//! Provider GUIDs derived from names the way .NET's EventSource does: SHA-1 over a fixed
//! namespace and the upper-cased name in big-endian UTF-16, truncated to 16 bytes, with the
//! version nibble set to 5 (RFC 4122 name-based).

pub use eventpipe_guid::Guid;

const NAMESPACE: [u8; 16] = [
    0x48, 0x2C, 0x2D, 0xB2, 0xC3, 0x90, 0x47, 0xC8, 0x87, 0xF8, 0x1A, 0x15, 0xBF, 0xC1, 0x30, 0xFB,
];

/// The GUID EventSource would give a provider called `name`.
pub fn event_source_guid(name: &str) -> Guid {
    let mut input = NAMESPACE.to_vec();
    for unit in name.to_uppercase().encode_utf16() {
        input.extend_from_slice(&unit.to_be_bytes());
    }
    let digest = sha1_smol::Sha1::from(&input).digest().bytes();
    let mut g = [0u8; 16];
    g.copy_from_slice(&digest[..16]);
    g[7] = (g[7] & 0x0F) | 0x50;
    Guid(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_dotnet_event_source_guids() {
        // GUIDs .NET documents for its own EventSources.
        assert_eq!(
            event_source_guid("Microsoft-Extensions-Logging").to_string(),
            "3ac73b97-af73-50e9-0822-5da4367920d0"
        );
        assert_eq!(
            event_source_guid("System.Runtime").to_string(),
            "49592c0f-5a05-516d-aa4b-a64e02026c89"
        );
    }
}
