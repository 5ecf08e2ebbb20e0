//! What the workspace's tests and benches share (not published).
//!
//! * [`write_dense_trace`]: an event-dense NetTrace trace of any size, streamed to any
//!   `io::Write`, for the reader's decode bench and the CLI's reading benches.
//! * [`Rng`]: the deterministic generator tests draw random inputs from.
//! * [`dotnet`]: the harness of the tests against real .NET runtimes (locating them,
//!   running TestApp, checking its traces).
//! * [`http`]: a scripted loopback HTTP backend that keeps what it receives, for the tests
//!   of what pushes to one (export's delivery, the agent's OTLP and Pyroscope exports).
//! * `otlp` (feature `otlp`): reading decoded OTLP requests (attributes by key).
//! * [`trace`]: small synthetic traces with exactly the events a test names (metadata
//!   rows, payload pieces, [`trace::TraceBuilder`]).
#![forbid(unsafe_code)]

pub mod dotnet;
pub mod http;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod trace;

use std::io::Write;

use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{
    EventHeader, EventMetadata, FieldDesc, FieldType, FormatVersion, ThreadInfo, TraceInfo,
};

use trace::{field, utf16z};

/// Event block size the generator aims for.
const BLOCK_BYTES: usize = 100 * 1024;
/// A sequence point (and a fresh stack block) after this many event blocks.
const BLOCKS_PER_SEQUENCE_POINT: usize = 4;
const THREADS: u64 = 8;
const STACKS_PER_REGION: u32 = 64;

/// xorshift64*: deterministic (a failure reproduces), dependency-free. The seed is the
/// state; it must not be 0.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A value below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// An index below `n`.
    pub fn index(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// The generated trace's metadata: four events of `Bench-Provider` (`Allocation`,
/// `Request`, `Counter`, `Exception`) with integer, float, GUID and UTF-16 string fields.
pub fn metadata() -> Vec<EventMetadata> {
    let row = |id: u32, name: &str, opcode: u8, fields: Vec<FieldDesc>| EventMetadata {
        metadata_id: id,
        provider: "Bench-Provider".into(),
        event_id: id,
        event_name: name.into(),
        keywords: 0x1 << id,
        version: 1,
        level: 4,
        opcode: Some(opcode),
        fields,
        ..Default::default()
    };
    vec![
        // 32 bytes.
        row(
            1,
            "Allocation",
            10,
            vec![
                field("Amount", FieldType::Int32),
                field("Kind", FieldType::UInt32),
                field("Address", FieldType::UInt64),
                field("Size", FieldType::Int64),
                field("Ratio", FieldType::Double),
            ],
        ),
        // 16 + 10..26 + 4 = 30..46 bytes.
        row(
            2,
            "Request",
            1,
            vec![
                field("RequestId", FieldType::Guid),
                field("Path", FieldType::Utf16String),
                field("Status", FieldType::UInt32),
            ],
        ),
        // 18 bytes.
        row(
            3,
            "Counter",
            0,
            vec![
                field("Value", FieldType::Double),
                field("Count", FieldType::Int64),
                field("Cpu", FieldType::UInt16),
            ],
        ),
        // 4 + 22..36 + 16 = 42..56 bytes.
        row(
            4,
            "Exception",
            1,
            vec![
                field("HResult", FieldType::Int32),
                field("Message", FieldType::Utf16String),
                field("ActivityId", FieldType::Guid),
            ],
        ),
    ]
}

const PATHS: [&str; 4] = ["/api", "/api/users", "/health/ready", "/v2/orders/42"];
const MESSAGES: [&str; 3] = [
    "Value was null.",
    "Index out of range",
    "The operation timed out.",
];

/// A payload matching metadata row `id`.
fn payload(out: &mut Vec<u8>, id: u32, rng: &mut Rng) {
    out.clear();
    let r = rng.next_u64();
    match id {
        1 => {
            out.extend_from_slice(&((r & 0xffff) as i32).to_le_bytes());
            out.extend_from_slice(&((r >> 16) as u32 & 1).to_le_bytes());
            out.extend_from_slice(&(0x7ff0_0000_0000 | (r & 0xff_fff8)).to_le_bytes());
            out.extend_from_slice(&((r >> 24) as i64 & 0xfffff).to_le_bytes());
            out.extend_from_slice(&((r & 0x3ff) as f64 / 1024.0).to_le_bytes());
        }
        2 => {
            out.extend_from_slice(&r.to_le_bytes());
            out.extend_from_slice(&rng.next_u64().to_le_bytes());
            utf16z(out, PATHS[(r % PATHS.len() as u64) as usize]);
            out.extend_from_slice(&[200u32, 404, 500][(r >> 8) as usize % 3].to_le_bytes());
        }
        3 => {
            out.extend_from_slice(&((r & 0xfffff) as f64 * 0.5).to_le_bytes());
            out.extend_from_slice(&((r >> 20) as i64 & 0xffff).to_le_bytes());
            out.extend_from_slice(&((r >> 40) as u16 & 1).to_le_bytes());
        }
        _ => {
            out.extend_from_slice(&(0x8000_4005u32 as i32).to_le_bytes());
            utf16z(out, MESSAGES[(r % MESSAGES.len() as u64) as usize]);
            out.extend_from_slice(&r.to_le_bytes());
            out.extend_from_slice(&rng.next_u64().to_le_bytes());
        }
    }
}

/// Stacks of 4..32 pointer-sized frames for one sequence-point region.
fn region_stacks(rng: &mut Rng) -> Vec<Vec<u8>> {
    (0..STACKS_PER_REGION)
        .map(|_| {
            let depth = 4 + rng.below(29);
            let mut s = Vec::with_capacity(depth as usize * 8);
            for _ in 0..depth {
                let ip = 0x7ffa_0000_0000u64 | (rng.next_u64() & 0xffff_fff0);
                s.extend_from_slice(&ip.to_le_bytes());
            }
            s
        })
        .collect()
}

/// Writes an event-dense trace of about `bytes` (it stops at the first block past them)
/// to `out`: [`metadata`]'s four events with payloads of 18-56 bytes that match their
/// fields, 8 threads emitting in bursts, 60 % of events with a stack of 4-32 frames (a
/// fresh stack block after every sequence point), ~100 KB blocks, a sequence point every
/// 4 blocks. Deterministic: the same `version` and `bytes` give the same trace.
///
/// # Errors
/// Writing to `out` fails.
pub fn write_dense_trace<W: Write>(
    out: W,
    version: FormatVersion,
    bytes: u64,
) -> nettrace::Result<W> {
    let v6 = version == FormatVersion::V6;
    let mut info = TraceInfo::new(version, 8);
    info.process_id = Some(4242);
    info.processor_count = Some(2);
    let mut w = TraceWriter::new(out, &info)?;
    w.write_metadata_block(&metadata())?;
    // V6 headers carry thread-table indexes; V4/V5 carry OS thread ids.
    let thread_key = |i: u64| if v6 { i + 1 } else { 0x1000 + 4 * i };
    if v6 {
        let threads: Vec<ThreadInfo> = (0..THREADS)
            .map(|i| ThreadInfo {
                index: thread_key(i),
                name: Some(format!("worker-{i}")),
                process_id: Some(4242),
                thread_id: Some(0x1000 + 4 * i),
                key_values: Vec::new(),
            })
            .collect();
        w.write_thread_block(&threads)?;
    }

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seq = [0u32; THREADS as usize];
    let mut timestamp = 1_000_000i64;
    let mut thread = 0u64;
    let mut block = EventBlockBuilder::new(version);
    let mut body = Vec::with_capacity(64);
    let mut blocks = 0usize;
    while w.bytes_written() < bytes {
        if blocks % BLOCKS_PER_SEQUENCE_POINT == 0 {
            if blocks > 0 {
                let bounds: Vec<(u64, u32)> = (0..THREADS)
                    .filter(|&i| seq[i as usize] > 0)
                    .map(|i| (thread_key(i), seq[i as usize]))
                    .collect();
                w.write_sequence_point(timestamp, 0, &bounds)?;
            }
            // Stacks do not survive a sequence point: each region gets its own.
            let stacks = region_stacks(&mut rng);
            let refs: Vec<&[u8]> = stacks.iter().map(Vec::as_slice).collect();
            w.write_stack_block(1, &refs)?;
        }
        block.clear();
        while block.encoded_len() < BLOCK_BYTES {
            // Threads emit in bursts, like a real process.
            if rng.below(10) >= 7 {
                thread = rng.below(THREADS);
            }
            let metadata_id = match rng.below(20) {
                0..=7 => 1,
                8..=12 => 2,
                13..=17 => 3,
                _ => 4,
            };
            let stack_id = if rng.below(10) < 6 {
                1 + rng.below(u64::from(STACKS_PER_REGION)) as u32
            } else {
                0
            };
            timestamp += 50 + rng.below(2000) as i64;
            seq[thread as usize] += 1;
            payload(&mut body, metadata_id, &mut rng);
            let header = EventHeader {
                metadata_id,
                sequence_number: seq[thread as usize],
                thread: thread_key(thread),
                capture_thread: thread_key(thread),
                processor: (thread % 2) as u32,
                stack_id,
                timestamp,
                ..Default::default()
            };
            block.push(&header, &body);
        }
        w.write_event_block(&mut block)?;
        blocks += 1;
    }
    w.finish()
}
