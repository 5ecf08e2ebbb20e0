//! Decode throughput of the nettrace reader.
//!
//! Four benches per input, two per API:
//!
//! * `header_only`: `TraceReader::next_event_ref` over the whole trace (block framing, header
//!   decompression, metadata and stack resolution, sequence tracking), touching each event's
//!   header, metadata, payload length and OS thread id (a thread-table look-up in V6).
//! * `full_decode`: the same plus `EventRef::for_each_field`, which decodes every payload
//!   field into a typed `ValueRef` (integers, floats and GUIDs by value, UTF-16 strings
//!   located and borrowed, not transcoded; arrays and nested objects borrowed and then
//!   iterated, every element and member decoded), folded into the tally, and a walk of
//!   `stack_ips`.
//! * `next_event`: `header_only` through `TraceReader::next_event` (a resolved `Event`).
//! * `decode_payload`: `full_decode` through `next_event` and `Event::decode_payload` (owned
//!   values: a `Vec` per event and a `String` per string field).
//!
//! Inputs: the 4.8 MB .NET Core 3.0 trace from `../shared/traces` (skipped when absent) and
//! two large traces generated in memory with the crate's own writer (V6 and V5): typed
//! metadata, stacks, several threads, 16-64 byte payloads, compressed headers, ~100 KB
//! blocks and a sequence point every few blocks.
//!
//! Criterion reports MB/s (`Throughput::BytesDecimal`); after each bench the median
//! per-iteration time over every timed batch (warm-up included) is printed as ms/pass, MB/s
//! and events/s, with the MB/s of the fastest batch: the machine's noise only ever slows a
//! batch, so the fastest is the closest to the code's own speed.
//!
//! Run with `cargo bench -p nettrace --bench decode`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, Criterion, Throughput};
use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{
    EventHeader, EventMetadata, FieldDesc, FieldType, FormatVersion, ThreadInfo, TraceInfo,
    TraceReader, Value, ValueRef,
};

const DOTNET3_TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/traces/eventpipe-dotnetcore3.0-win-x64-objver4.nettrace"
);

/// Size the generated traces grow to (they stop at the first block past it).
const GENERATED_BYTES: u64 = 64 * 1024 * 1024;
/// Event block size the generator aims for.
const BLOCK_BYTES: usize = 100 * 1024;
/// A sequence point (and a fresh stack block) after this many event blocks.
const BLOCKS_PER_SEQUENCE_POINT: usize = 4;
const THREADS: u64 = 8;
const STACKS_PER_REGION: u32 = 64;

// ---------------------------------------------------------------------------------------
// Workloads

/// What one pass over a trace saw; black-boxed so no work is optimised away.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Tally {
    events: u64,
    timestamp_sum: i64,
    per_metadata: [u64; 16],
    fields: u64,
    payload_errors: u64,
    frames: u64,
    ip_xor: u64,
}

fn header_only(data: &[u8]) -> Tally {
    let mut t = Tally::default();
    let mut r = TraceReader::from_slice(data).expect("trace header");
    while let Some(e) = r.next_event_ref().expect("event") {
        t.events += 1;
        t.timestamp_sum = t.timestamp_sum.wrapping_add(e.header().timestamp);
        // Metadata resolution: the row the reader looked up for this event.
        let md = black_box(e.metadata());
        t.per_metadata[(md.metadata_id as usize) & 15] += 1;
        t.ip_xor ^= u64::from(md.event_id) ^ e.payload().len() as u64 ^ e.thread_id();
    }
    t
}

/// Folds one decoded field into the tally, so that no decoding is optimised away.
#[inline]
fn fold_value(t: &mut Tally, v: &ValueRef<'_>) {
    t.fields += 1;
    let bits = match *v {
        ValueRef::I32(x) => x as u64,
        ValueRef::U32(x) => u64::from(x),
        ValueRef::I64(x) => x as u64,
        ValueRef::U64(x) => x,
        ValueRef::U16(x) => u64::from(x),
        ValueRef::F64(x) => x.to_bits(),
        ValueRef::Guid(g) => u64::from_le_bytes([
            g.0[0], g.0[1], g.0[2], g.0[3], g.0[4], g.0[5], g.0[6], g.0[7],
        ]),
        ValueRef::Utf16(s) => s.len_units() as u64,
        // Arrays and objects come borrowed: decode every element and member (out of line,
        // so that this function, not recursive, inlines into the plan's calls and each
        // call's `match` folds away).
        ValueRef::Array(_) | ValueRef::Object(_) => fold_compound(t, v),
        ref other => other.as_u64().unwrap_or(1),
    };
    t.ip_xor ^= bits;
}

#[inline(never)]
fn fold_compound(t: &mut Tally, v: &ValueRef<'_>) -> u64 {
    match *v {
        ValueRef::Array(a) => {
            a.iter().for_each(|item| fold_value(t, &item));
            a.len() as u64
        }
        ValueRef::Object(o) => {
            o.fields().for_each(|(_, member)| fold_value(t, &member));
            o.as_bytes().len() as u64
        }
        _ => 0,
    }
}

fn full_decode(data: &[u8]) -> Tally {
    let mut t = Tally::default();
    let mut r = TraceReader::from_slice(data).expect("trace header");
    while let Some(e) = r.next_event_ref().expect("event") {
        t.events += 1;
        t.timestamp_sum = t.timestamp_sum.wrapping_add(e.header().timestamp);
        let md = black_box(e.metadata());
        t.per_metadata[(md.metadata_id as usize) & 15] += 1;
        if e.for_each_field(|_, v| fold_value(&mut t, &v)).is_err() {
            t.payload_errors += 1;
        }
        for ip in e.stack_ips() {
            t.frames += 1;
            t.ip_xor ^= ip;
        }
    }
    t
}

/// `header_only` through `next_event`, which resolves every reference into an `Event`.
fn next_event(data: &[u8]) -> Tally {
    let mut t = Tally::default();
    let mut r = TraceReader::from_slice(data).expect("trace header");
    while let Some(e) = r.next_event().expect("event") {
        t.events += 1;
        t.timestamp_sum = t.timestamp_sum.wrapping_add(e.header.timestamp);
        let md = black_box(e.metadata);
        t.per_metadata[(md.metadata_id as usize) & 15] += 1;
        t.ip_xor ^= u64::from(md.event_id) ^ e.payload.len() as u64 ^ e.thread_id();
    }
    t
}

/// `full_decode` through `next_event` and `decode_payload`, which builds owned values
/// (a `Vec` per event and a `String` per string field).
fn decode_payload(data: &[u8]) -> Tally {
    let mut t = Tally::default();
    let mut r = TraceReader::from_slice(data).expect("trace header");
    while let Some(e) = r.next_event().expect("event") {
        t.events += 1;
        t.timestamp_sum = t.timestamp_sum.wrapping_add(e.header.timestamp);
        let md = black_box(e.metadata);
        t.per_metadata[(md.metadata_id as usize) & 15] += 1;
        match e.decode_payload() {
            Ok(values) => {
                t.fields += values.iter().map(|(_, v)| count_values(v)).sum::<u64>();
                black_box(values);
            }
            Err(_) => t.payload_errors += 1,
        }
        for ip in e.stack_ips() {
            t.frames += 1;
            t.ip_xor ^= ip;
        }
    }
    t
}

/// Values in `v`, nested ones included, as `fold_value` counts them.
fn count_values(v: &Value) -> u64 {
    1 + match v {
        Value::Array(items) => items.iter().map(count_values).sum(),
        Value::Object(members) => members.iter().map(|(_, m)| count_values(m)).sum(),
        _ => 0,
    }
}

// ---------------------------------------------------------------------------------------
// Generated trace

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn field(name: &str, ty: FieldType) -> FieldDesc {
    FieldDesc {
        name: name.into(),
        ty,
    }
}

fn bench_metadata() -> Vec<EventMetadata> {
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

fn utf16z(out: &mut Vec<u8>, s: &str) {
    for unit in s.encode_utf16() {
        out.extend_from_slice(&unit.to_le_bytes());
    }
    out.extend_from_slice(&[0, 0]);
}

/// A payload matching metadata row `id`.
fn payload(out: &mut Vec<u8>, id: u32, rng: &mut Rng) {
    out.clear();
    let r = rng.next();
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
            out.extend_from_slice(&rng.next().to_le_bytes());
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
            out.extend_from_slice(&rng.next().to_le_bytes());
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
                let ip = 0x7ffa_0000_0000u64 | (rng.next() & 0xffff_fff0);
                s.extend_from_slice(&ip.to_le_bytes());
            }
            s
        })
        .collect()
}

/// A trace of about [`GENERATED_BYTES`], written with the crate's writer.
fn generate(version: FormatVersion) -> Vec<u8> {
    let v6 = version == FormatVersion::V6;
    let mut info = TraceInfo::new(version, 8);
    info.process_id = Some(4242);
    info.processor_count = Some(2);
    let mut w = TraceWriter::new(
        Vec::with_capacity(GENERATED_BYTES as usize + 2 * BLOCK_BYTES),
        &info,
    )
    .expect("writer");
    w.write_metadata_block(&bench_metadata()).expect("metadata");
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
        w.write_thread_block(&threads).expect("threads");
    }

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seq = [0u32; THREADS as usize];
    let mut timestamp = 1_000_000i64;
    let mut thread = 0u64;
    let mut block = EventBlockBuilder::new(version);
    let mut body = Vec::with_capacity(64);
    let mut blocks = 0usize;
    while w.bytes_written() < GENERATED_BYTES {
        if blocks % BLOCKS_PER_SEQUENCE_POINT == 0 {
            if blocks > 0 {
                let bounds: Vec<(u64, u32)> = (0..THREADS)
                    .filter(|&i| seq[i as usize] > 0)
                    .map(|i| (thread_key(i), seq[i as usize]))
                    .collect();
                w.write_sequence_point(timestamp, 0, &bounds)
                    .expect("sequence point");
            }
            // Stacks do not survive a sequence point: each region gets its own.
            let stacks = region_stacks(&mut rng);
            let refs: Vec<&[u8]> = stacks.iter().map(Vec::as_slice).collect();
            w.write_stack_block(1, &refs).expect("stacks");
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
        w.write_event_block(&block).expect("event block");
        blocks += 1;
    }
    w.finish().expect("finish")
}

// ---------------------------------------------------------------------------------------
// Harness

/// Times `f` per batch and keeps each batch's per-iteration time, for events/s.
fn timed_bench(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    data: &[u8],
    f: fn(&[u8]) -> Tally,
) -> Option<(Duration, Duration)> {
    let mut per_iter: Vec<Duration> = Vec::new();
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                black_box(f(black_box(data)));
            }
            let elapsed = start.elapsed();
            per_iter.push(elapsed / iters.max(1) as u32);
            elapsed
        })
    });
    per_iter.sort_unstable();
    let median = *per_iter.get(per_iter.len() / 2)?;
    Some((median, per_iter[0]))
}

fn bench_input(c: &mut Criterion, label: &str, data: &[u8]) {
    // One untimed pass of each kind: the event count, and a check that everything decodes.
    let headers = header_only(data);
    let full = full_decode(data);
    assert_eq!(headers.events, full.events);
    // The fast and the owned APIs see the same events, fields and stacks.
    let (owned_headers, owned_full) = (next_event(data), decode_payload(data));
    assert_eq!(headers, owned_headers);
    assert_eq!(
        (full.events, full.fields, full.payload_errors, full.frames),
        (
            owned_full.events,
            owned_full.fields,
            owned_full.payload_errors,
            owned_full.frames
        )
    );
    println!(
        "{label}: {} bytes, {} events, {} payload fields, {} payload decode errors, {} stack frames",
        data.len(),
        full.events,
        full.fields,
        full.payload_errors,
        full.frames
    );

    let mut group = c.benchmark_group(label);
    group.throughput(Throughput::BytesDecimal(data.len() as u64));
    for (name, f) in [
        ("header_only", header_only as fn(&[u8]) -> Tally),
        ("full_decode", full_decode),
        ("next_event", next_event),
        ("decode_payload", decode_payload),
    ] {
        let Some((median, fastest)) = timed_bench(&mut group, name, data, f) else {
            continue;
        };
        let mb_per_s = |t: Duration| data.len() as f64 / t.as_secs_f64().max(1e-12) / 1e6;
        println!(
            "{label}/{name}: median {:.3} ms/pass, {:.1} MB/s, {:.2} M events/s; fastest batch {:.1} MB/s",
            median.as_secs_f64() * 1e3,
            mb_per_s(median),
            full.events as f64 / median.as_secs_f64().max(1e-12) / 1e6,
            mb_per_s(fastest)
        );
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    match std::fs::read(DOTNET3_TRACE) {
        Ok(data) => bench_input(c, "dotnetcore3.0-objver4", &data),
        Err(_) => println!("skipping dotnetcore3.0-objver4: ../shared/traces is absent"),
    }
    for (label, version) in [
        ("generated-v6", FormatVersion::V6),
        ("generated-v5", FormatVersion::V5),
    ] {
        let start = Instant::now();
        let data = generate(version);
        println!(
            "{label}: generated {} bytes in {:.2} s",
            data.len(),
            start.elapsed().as_secs_f64()
        );
        bench_input(c, label, &data);
    }
}

fn main() {
    // What `criterion_group!`/`criterion_main!` expand to, minus their undocumented `pub fn`.
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    benches(&mut c);
    c.final_summary();
}
