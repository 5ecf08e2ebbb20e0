//! `scan_metadata` lists every metadata row a trace defines, whichever block defines it,
//! without reading its events, and names them as the reader does; a trace cut off gives
//! the rows before the cut. Checked against what a `TraceReader` sees reading it whole.

use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{scan_metadata, EventHeader, EventMetadata, FormatVersion, TraceInfo, TraceReader};

fn row(id: u32, name: &str, opcode: Option<u8>) -> EventMetadata {
    EventMetadata {
        metadata_id: id,
        provider: "Scan".into(),
        event_id: id,
        event_name: name.into(),
        opcode,
        ..Default::default()
    }
}

/// Three metadata blocks, each followed by an event of its rows; the offset at which the
/// second metadata block starts.
fn trace(version: FormatVersion) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut second = 0;
    {
        let mut w = TraceWriter::new(&mut out, &TraceInfo::new(version, 8)).unwrap();
        let blocks = [
            vec![row(1, "Tick", None), row(2, "RequestStart", None)],
            vec![row(3, "RequestStop", None)],
            vec![row(4, "Work", Some(1)), row(5, "Work", Some(2))],
        ];
        for (i, rows) in blocks.iter().enumerate() {
            if i == 1 {
                second = w.bytes_written() as usize;
            }
            w.write_metadata_block(rows).unwrap();
            let mut b = EventBlockBuilder::new(version);
            b.push(
                &EventHeader {
                    metadata_id: rows[0].metadata_id,
                    sequence_number: i as u32 + 1,
                    thread: 1,
                    capture_thread: 1,
                    timestamp: i as i64,
                    ..EventHeader::default()
                },
                &[],
            );
            w.write_event_block(&mut b).unwrap();
        }
        w.finish().unwrap();
    }
    (out, second)
}

#[test]
fn every_row_of_every_block_named_as_the_reader_names_it() {
    for version in [FormatVersion::V5, FormatVersion::V6] {
        let (bytes, second) = trace(version);
        let scanned = scan_metadata(&bytes);
        let names: Vec<(u32, String, Option<u8>)> = scanned
            .iter()
            .map(|m| (m.metadata_id, m.display_name.clone(), m.opcode))
            .collect();
        // What the reader resolves, reading every event.
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        while reader.next_event().unwrap().is_some() {}
        let mut read: Vec<(u32, String, Option<u8>)> = reader
            .metadata()
            .map(|m| (m.metadata_id, m.display_name.clone(), m.opcode))
            .collect();
        read.sort();
        assert_eq!(names, read, "{version:?}");
        assert_eq!(names.len(), 5);
        assert!(
            names.contains(&(3, "Request/Stop".into(), None)),
            "{names:?}"
        );

        // Cut inside the second metadata block: the first block's rows only.
        let cut = scan_metadata(&bytes[..second + 6]);
        let ids: Vec<u32> = cut.iter().map(|m| m.metadata_id).collect();
        assert_eq!(ids, [1, 2], "{version:?}");
        assert!(scan_metadata(b"not a trace").is_empty());
    }
}
