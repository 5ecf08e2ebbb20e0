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
use nettrace::{EventMetadata, FormatVersion, TraceReader, Value, ValueRef};

const DOTNET3_TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/traces/eventpipe-dotnetcore3.0-win-x64-objver4.nettrace"
);

/// Size the generated traces grow to (they stop at the first block past it).
const GENERATED_BYTES: u64 = 64 * 1024 * 1024;

fn generate(version: FormatVersion) -> Vec<u8> {
    eventpipe_test_support::write_dense_trace(
        Vec::with_capacity(GENERATED_BYTES as usize + (256 << 10)),
        version,
        GENERATED_BYTES,
    )
    .expect("generating a trace in memory")
}

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

impl Tally {
    /// Counts an event at `timestamp` with metadata `md` (black-boxed: the reader's lookup
    /// of it is part of the work), and returns `md`.
    #[inline(always)]
    fn event<'m>(&mut self, timestamp: i64, md: &'m EventMetadata) -> &'m EventMetadata {
        self.events += 1;
        self.timestamp_sum = self.timestamp_sum.wrapping_add(timestamp);
        let md = black_box(md);
        self.per_metadata[(md.metadata_id as usize) & 15] += 1;
        md
    }

    /// Counts a stack's frames.
    #[inline(always)]
    fn stack(&mut self, ips: impl Iterator<Item = u64>) {
        for ip in ips {
            self.frames += 1;
            self.ip_xor ^= ip;
        }
    }
}

fn header_only(data: &[u8]) -> Tally {
    let mut t = Tally::default();
    let mut r = TraceReader::from_slice(data).expect("trace header");
    while let Some(e) = r.next_event_ref().expect("event") {
        // Metadata resolution: the row the reader looked up for this event.
        let md = t.event(e.header().timestamp, e.metadata());
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
        t.event(e.header().timestamp, e.metadata());
        if e.for_each_field(|_, v| fold_value(&mut t, &v)).is_err() {
            t.payload_errors += 1;
        }
        t.stack(e.stack_ips());
    }
    t
}

/// `header_only` through `next_event`, which resolves every reference into an `Event`.
fn next_event(data: &[u8]) -> Tally {
    let mut t = Tally::default();
    let mut r = TraceReader::from_slice(data).expect("trace header");
    while let Some(e) = r.next_event().expect("event") {
        let md = t.event(e.header.timestamp, e.metadata);
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
        t.event(e.header.timestamp, e.metadata);
        match e.decode_payload() {
            Ok(values) => {
                t.fields += values.iter().map(|(_, v)| count_values(v)).sum::<u64>();
                black_box(values);
            }
            Err(_) => t.payload_errors += 1,
        }
        t.stack(e.stack_ips());
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
