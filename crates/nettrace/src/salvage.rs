//! Ending a stream that was cut off: a live trace whose writer died mid-block is valid up to
//! its last whole block, and becomes a complete trace once the end-of-stream marker follows.

use crate::model::FormatVersion;
use crate::source::{BlockReader, Input, SliceInput};
use crate::Result;

/// How much of a stream is whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvage {
    /// Bytes up to the end of the last whole block (or of the header, if no block is whole).
    pub valid_len: usize,
    /// Whether the stream already ends with its end-of-stream marker.
    pub complete: bool,
    /// Whole blocks found.
    pub blocks: usize,
    /// What to append after `valid_len` bytes to end the stream.
    pub end_marker: &'static [u8],
}

/// Finds the whole part of `data`. Fails only if the stream header itself is unreadable.
pub fn salvage(data: &[u8]) -> Result<Salvage> {
    salvage_input(SliceInput::new(data))
}

/// [`salvage`] over any [`Input`] (one that gives back the pages it has passed keeps a
/// large file's scan in bounded memory).
pub fn salvage_input<I: Input>(input: I) -> Result<Salvage> {
    let mut reader = BlockReader::new(input)?;
    let end_marker: &'static [u8] = if reader.trace().version == FormatVersion::V6 {
        &[0, 0, 0, 0]
    } else {
        &[1]
    };
    let mut valid_len = reader.input().offset() as usize;
    let mut blocks = 0;
    let mut complete = false;
    loop {
        match reader.next_block() {
            Ok(Some(_)) => {
                blocks += 1;
                valid_len = reader.input().offset() as usize;
            }
            Ok(None) => {
                complete = true;
                valid_len = reader.input().offset() as usize;
                break;
            }
            Err(_) => break,
        }
    }
    Ok(Salvage {
        valid_len,
        complete,
        blocks,
        end_marker,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TraceReader;

    fn demo() -> Vec<u8> {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/demo.nettrace"
        ))
        .unwrap()
    }

    #[test]
    fn every_cut_of_a_trace_salvages_to_a_readable_complete_trace() {
        let full = demo();
        let whole = salvage(&full).unwrap();
        assert!(whole.complete);
        assert_eq!(whole.valid_len, full.len());
        let mut last_blocks = 0;
        for cut in (40..full.len()).step_by(7) {
            let Ok(s) = salvage(&full[..cut]) else {
                continue; // the header itself is cut
            };
            assert!(!s.complete || cut == full.len());
            assert!(
                s.blocks >= last_blocks,
                "blocks never decrease as the cut moves on"
            );
            last_blocks = s.blocks;
            let mut repaired = full[..s.valid_len].to_vec();
            repaired.extend_from_slice(s.end_marker);
            let mut r = TraceReader::from_slice(&repaired).unwrap();
            while r
                .next_event()
                .unwrap_or_else(|e| panic!("cut {cut}: {e}"))
                .is_some()
            {}
            assert!(r.is_finished(), "cut {cut}");
        }
        assert!(last_blocks > 0);
    }
}
