//! API keys: the config holds only their SHA-256 hashes; a request carries the key as
//! `Authorization: Bearer KEY`. Keys are 32 random bytes, so a plain hash is enough (no
//! dictionary to guess from), and the comparison does not stop at the first difference.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// A key's hash as the config writes it.
pub(crate) type KeyHash = [u8; 32];

/// `sha256:<64 hex digits>` → the hash.
pub(crate) fn parse_hash(text: &str) -> Result<KeyHash> {
    let Some(hex) = text.strip_prefix("sha256:") else {
        bail!("a key hash is written `sha256:<64 hex digits>` (from `eptrace agent key`)");
    };
    if hex.len() != 64 {
        bail!("a SHA-256 hash has 64 hex digits, not {}", hex.len());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .with_context(|| format!("`{}` is not hex", &hex[2 * i..2 * i + 2]))?;
    }
    Ok(out)
}

/// The hash of `key`, as the config writes it.
pub(crate) fn hash_text(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A new key: 32 bytes from the kernel's random source, as hex.
pub(crate) fn new_key() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether the `Authorization` header's value carries one of the keys.
pub(crate) fn accepts(header: Option<&[u8]>, keys: &[KeyHash]) -> bool {
    let Some(key) = header.and_then(|h| h.strip_prefix(b"Bearer ")) else {
        return false;
    };
    let digest: KeyHash = Sha256::digest(key.trim_ascii()).into();
    // Every key is compared whole, and all of them, so the time taken says nothing.
    keys.iter().fold(false, |found, k| {
        let differences = k.iter().zip(&digest).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        found | (differences == 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_accepted_by_its_hash_and_nothing_else() {
        let key = new_key().unwrap();
        assert_eq!(key.len(), 64);
        let hash = parse_hash(&hash_text(&key)).unwrap();
        // The hash of "test", from `printf test | sha256sum`.
        assert_eq!(
            hash_text("test"),
            "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
        let keys = [hash];
        assert!(accepts(Some(format!("Bearer {key}").as_bytes()), &keys));
        assert!(!accepts(Some(format!("Bearer {key}x").as_bytes()), &keys));
        assert!(!accepts(Some(key.as_bytes()), &keys));
        assert!(!accepts(Some(b"Bearer "), &keys));
        assert!(!accepts(None, &keys));
        assert!(!accepts(Some(format!("Bearer {key}").as_bytes()), &[]));
    }
}
