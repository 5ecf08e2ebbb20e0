//! Writes `demo.nettrace`, the project's own small fixture: a NetTrace V5 trace of a
//! made-up service with two providers, three threads, stacks and a few lost events.
//!
//! `cargo run -p nettrace --example demo_trace -- crates/nettrace/tests/fixtures/demo.nettrace`
//! regenerates the committed copy; a test checks that the two stay identical.

use eventpipe_test_support::trace::{field, utf16};
use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{EventHeader, EventMetadata, FieldType, FormatVersion, SystemTime, TraceInfo};

const TICKS_PER_MS: i64 = 1_000_000;

/// Builds the demo trace deterministically.
pub(crate) fn build() -> Vec<u8> {
    let mut info = TraceInfo::new(FormatVersion::V5, 8);
    info.sync_time_utc = SystemTime {
        year: 2026,
        month: 11,
        day_of_week: 0,
        day: 22,
        hour: 9,
        minute: 30,
        second: 0,
        millisecond: 0,
    };
    info.sync_time_ticks = 1_000 * TICKS_PER_MS;
    info.process_id = Some(4242);
    info.processor_count = Some(2);
    let mut w = TraceWriter::new(Vec::new(), &info).expect("writer");
    let metadata = vec![
        EventMetadata {
            metadata_id: 1,
            provider: "Demo.Http".into(),
            event_id: 1,
            event_name: "RequestStart".into(),
            level: 4,
            keywords: 1,
            fields: vec![
                field("RequestId", FieldType::UInt64),
                field("Path", FieldType::Utf16String),
            ],
            ..Default::default()
        },
        EventMetadata {
            metadata_id: 2,
            provider: "Demo.Http".into(),
            event_id: 2,
            event_name: "RequestStop".into(),
            level: 4,
            keywords: 1,
            fields: vec![
                field("RequestId", FieldType::UInt64),
                field("Status", FieldType::Int32),
                field("DurationMs", FieldType::Double),
            ],
            ..Default::default()
        },
        EventMetadata {
            metadata_id: 3,
            provider: "Demo.Cache".into(),
            event_id: 7,
            event_name: "Miss".into(),
            level: 5,
            opcode: Some(24),
            fields: vec![
                field("Key", FieldType::Utf16String),
                field("Shards", FieldType::Array(Box::new(FieldType::Int32))),
            ],
            ..Default::default()
        },
    ];
    w.write_metadata_block(&metadata).expect("metadata");
    let stacks: Vec<Vec<u8>> = [
        vec![0x5555_0000_1010u64, 0x5555_0000_2020, 0x5555_0000_3030],
        vec![0x5555_0000_1111, 0x5555_0000_2020, 0x5555_0000_3030],
    ]
    .iter()
    .map(|s| s.iter().flat_map(|ip| ip.to_le_bytes()).collect())
    .collect();
    let threads = [4243u64, 4244, 4245];
    let mut sequence = [0u32; 3];
    let mut block = EventBlockBuilder::new(FormatVersion::V5);
    let paths = ["/", "/orders", "/orders/7", "/health"];
    for round in 0..2 {
        let refs: Vec<&[u8]> = stacks.iter().map(Vec::as_slice).collect();
        w.write_stack_block(1, &refs).expect("stacks");
        for i in 0..40u64 {
            let t = (i % 3) as usize;
            let ts = info.sync_time_ticks + (round * 50 + i as i64) * TICKS_PER_MS + t as i64 * 7;
            let request = round as u64 * 1000 + i;
            // Thread 4245 drops two events in the first round: its sequence skips ahead.
            sequence[t] += if round == 0 && t == 2 && i == 20 {
                3
            } else {
                1
            };
            let (metadata_id, payload, stack_id) = match i % 4 {
                0 | 1 => {
                    let mut p = request.to_le_bytes().to_vec();
                    p.extend(utf16(paths[(i / 4) as usize % paths.len()]));
                    (1, p, 1)
                }
                2 => {
                    let mut p = request.to_le_bytes().to_vec();
                    p.extend_from_slice(&(if i % 8 == 2 { 200i32 } else { 404 }).to_le_bytes());
                    p.extend_from_slice(&(1.5 * i as f64).to_le_bytes());
                    (2, p, 2)
                }
                _ => {
                    let mut p = utf16(&format!("user:{request}"));
                    let shards = [1i32, 3, 5];
                    p.extend_from_slice(&(shards.len() as u16).to_le_bytes());
                    shards
                        .iter()
                        .for_each(|s| p.extend_from_slice(&s.to_le_bytes()));
                    (3, p, 0)
                }
            };
            let header = EventHeader {
                metadata_id,
                sequence_number: sequence[t],
                thread: threads[t],
                capture_thread: threads[t],
                processor: t as u32 % 2,
                stack_id,
                timestamp: ts,
                is_sorted: i % 10 == 9,
                ..Default::default()
            };
            block.push(&header, &payload);
        }
        w.write_event_block(&mut block).expect("events");
        block.clear();
        let bounds: Vec<(u64, u32)> = threads.iter().copied().zip(sequence).collect();
        w.write_sequence_point(
            info.sync_time_ticks + (round * 50 + 45) * TICKS_PER_MS,
            0,
            &bounds,
        )
        .expect("sequence point");
    }
    w.finish().expect("finish")
}

#[allow(dead_code)] // also compiled into the fixture test, which only calls `build`
fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "demo.nettrace".into());
    let bytes = build();
    std::fs::write(&path, &bytes).unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
    println!("wrote {path} ({} bytes)", bytes.len());
}
