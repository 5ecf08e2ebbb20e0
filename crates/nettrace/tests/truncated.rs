//! A trace cut off anywhere (its collector killed, its disk full, a copy interrupted) is
//! read up to its last whole block when the reader accepts truncation: every event of the
//! whole blocks before the cut, none after, and the cut named. Without that, it is an
//! error, as before. Checked at every cut point of a small trace, from a slice and from a
//! stream.

use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{EventHeader, EventMetadata, FormatVersion, TraceInfo, TraceReader};

/// A trace of `blocks` event blocks of 3 events each; returns its bytes and where each
/// event block ends.
fn trace(version: FormatVersion, blocks: u32) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::new();
    let mut ends = Vec::new();
    {
        let mut w = TraceWriter::new(&mut out, &TraceInfo::new(version, 8)).unwrap();
        let md = EventMetadata {
            metadata_id: 1,
            provider: "Cut".into(),
            event_name: "Tick".into(),
            ..Default::default()
        };
        w.write_metadata_block(&[md]).unwrap();
        let mut seq = 0;
        for _ in 0..blocks {
            let mut b = EventBlockBuilder::new(version);
            for _ in 0..3 {
                seq += 1;
                let h = EventHeader {
                    metadata_id: 1,
                    sequence_number: seq,
                    timestamp: i64::from(seq),
                    ..Default::default()
                };
                b.push(&h, &seq.to_le_bytes());
            }
            w.write_event_block(&mut b).unwrap();
            ends.push(w.bytes_written() as usize);
        }
        w.finish().unwrap();
    }
    (out, ends)
}

/// Events read from `bytes` accepting truncation, and where it says the trace was cut.
fn read_cut(bytes: &[u8], stream: bool) -> Result<(u64, Option<u64>), nettrace::Error> {
    fn drain<I: nettrace::source::Input>(
        reader: TraceReader<I>,
    ) -> Result<(u64, Option<u64>), nettrace::Error> {
        let mut reader = reader.accept_truncation(true);
        let mut n = 0;
        while let Some(e) = reader.next_event()? {
            // Each payload is the event's sequence number: the events come in order.
            assert_eq!(e.payload, (n as u32 + 1).to_le_bytes());
            n += 1;
        }
        // Asked again, an ended reader stays ended (a sorting reader asks again).
        assert!(reader.next_event()?.is_none());
        Ok((n, reader.stats().truncation.map(|t| t.offset)))
    }
    if stream {
        drain(TraceReader::from_read(bytes)?)
    } else {
        drain(TraceReader::from_slice(bytes)?)
    }
}

#[test]
fn a_cut_trace_reads_to_its_last_whole_block_at_every_cut_point() {
    for version in [FormatVersion::V5, FormatVersion::V6] {
        let (bytes, ends) = trace(version, 4);
        // The header alone is the smallest readable prefix.
        let header = (0..bytes.len())
            .find(|&n| TraceReader::from_slice(&bytes[..n]).is_ok())
            .unwrap();
        for cut in header..=bytes.len() {
            for stream in [false, true] {
                let what = format!(
                    "{version:?}, cut at {cut} of {}, stream {stream}",
                    bytes.len()
                );
                let (events, truncated_at) =
                    read_cut(&bytes[..cut], stream).unwrap_or_else(|e| panic!("{what}: {e}"));
                // Every event of each event block that ends at or before the cut.
                let whole = ends.iter().filter(|&&end| end <= cut).count() as u64 * 3;
                assert_eq!(events, whole, "{what}");
                if cut == bytes.len() {
                    assert_eq!(truncated_at, None, "{what}");
                } else {
                    let at = truncated_at.unwrap_or_else(|| panic!("{what}: the cut is not said"));
                    assert!(at as usize <= cut, "{what}: cut said at {at}");
                }
                // Without accepting truncation, a cut trace is an error.
                if cut < bytes.len() {
                    let mut strict = TraceReader::from_slice(&bytes[..cut]).unwrap();
                    let mut failed = false;
                    loop {
                        match strict.next_event() {
                            Ok(Some(_)) => {}
                            Ok(None) => break,
                            Err(e) => {
                                assert!(e.to_string().contains("unexpected end"), "{what}: {e}");
                                failed = true;
                                break;
                            }
                        }
                    }
                    assert!(failed, "{what}: the strict reader did not notice the cut");
                }
            }
        }
    }
}

#[test]
fn damage_that_is_not_a_cut_is_still_an_error() {
    let (mut bytes, ends) = trace(FormatVersion::V6, 2);
    // The second event block's header word (where the first ends): its kind byte set to
    // "trace block", which may come only once.
    bytes[ends[0] + 3] = 1;
    let mut reader = TraceReader::from_slice(&bytes)
        .unwrap()
        .accept_truncation(true);
    let err = loop {
        match reader.next_event() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("damaged bytes read as a whole trace"),
            Err(e) => break e,
        }
    };
    assert!(err.to_string().contains("malformed"), "{err}");
}
