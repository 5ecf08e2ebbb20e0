//! Synthetic traces of the .NET runtime's events, as the runtime writes them: metadata rows
//! with no field list (the reader takes the fields from the runtime's manifest) and
//! payloads laid out as the manifest's templates, with timestamps in milliseconds.

#![allow(dead_code)]

use eventpipe_analysis::{Analysis, Analyzer, Sections, RUNTIME_PROVIDER};
use eventpipe_test_support::trace::{md, utf16, TraceBuilder};
use nettrace::{EventMetadata, FormatVersion, SortedReader, TraceReader};

/// One runtime event: thread, ms, event id, version, payload.
pub(crate) type RuntimeEvent = (u64, f64, u32, u32, Vec<u8>);

/// The analysis of a trace of `events` (ms timestamps, microsecond precision).
pub(crate) fn analyze(events: &[RuntimeEvent]) -> Analysis {
    let mut rows: Vec<EventMetadata> = Vec::new();
    let mut builder = TraceBuilder::new(FormatVersion::V5).info(|info| {
        info.tick_frequency = 1_000_000;
        info.sync_time_ticks = 0;
    });
    let mut ids = Vec::new();
    for &(_, _, id, version, _) in events {
        if !ids.contains(&(id, version)) {
            ids.push((id, version));
            let metadata_id = ids.len() as u32;
            rows.push(EventMetadata {
                metadata_id,
                event_id: id,
                version,
                ..md(metadata_id, RUNTIME_PROVIDER, "", &[])
            });
        }
    }
    builder = builder.metadata(rows);
    for (thread, ms, id, version, payload) in events {
        let metadata_id = ids.iter().position(|k| *k == (*id, *version)).unwrap() as u32 + 1;
        builder = builder.event(
            *thread,
            (ms * 1000.0).round() as i64,
            metadata_id,
            payload.clone(),
        );
    }
    let bytes = builder.build();
    let mut reader = SortedReader::new(TraceReader::from_slice(&bytes).unwrap());
    let mut analyzer = Analyzer::new(Sections::ALL);
    while let Some(event) = reader.next_event().unwrap() {
        analyzer.observe(&event);
    }
    analyzer.finish("synthetic.nettrace")
}

fn le(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

const CLR: [u8; 2] = 3u16.to_le_bytes();

/// `GC/SuspendEEStart` (id 9, V1) with `reason` (1: for a GC, 6: for a background GC's
/// final mark, 0: other).
pub(crate) fn suspend(thread: u64, ms: f64, reason: u32) -> RuntimeEvent {
    let p = le(&[&reason.to_le_bytes(), &1u32.to_le_bytes(), &CLR]);
    (thread, ms, 9, 1, p)
}

/// `GC/SuspendEEStop` (id 8, V1).
pub(crate) fn suspend_stop(thread: u64, ms: f64) -> RuntimeEvent {
    (thread, ms, 8, 1, CLR.to_vec())
}

/// `GC/RestartEEStop` (id 3, V1).
pub(crate) fn restart(thread: u64, ms: f64) -> RuntimeEvent {
    (thread, ms, 3, 1, CLR.to_vec())
}

/// `GC/Start` (id 1, V2): GC `number` of generation `depth`, `reason`, `kind` (0 blocking,
/// 1 background, 2 foreground).
pub(crate) fn gc_start(
    thread: u64,
    ms: f64,
    number: u32,
    depth: u32,
    reason: u32,
    kind: u32,
) -> RuntimeEvent {
    let p = le(&[
        &number.to_le_bytes(),
        &depth.to_le_bytes(),
        &reason.to_le_bytes(),
        &kind.to_le_bytes(),
        &CLR,
        &0u64.to_le_bytes(),
    ]);
    (thread, ms, 1, 2, p)
}

/// `GC/Stop` (id 2, V1).
pub(crate) fn gc_end(thread: u64, ms: f64, number: u32, depth: u32) -> RuntimeEvent {
    let p = le(&[&number.to_le_bytes(), &depth.to_le_bytes(), &CLR]);
    (thread, ms, 2, 1, p)
}

/// `GC/HeapStats` (id 4, V2): generation sizes gen0, gen1, gen2, LOH, POH and the bytes
/// promoted from each.
pub(crate) fn heap_stats(
    thread: u64,
    ms: f64,
    sizes: [u64; 5],
    promoted: [u64; 5],
) -> RuntimeEvent {
    let mut p = Vec::new();
    for g in 0..4 {
        p.extend(sizes[g].to_le_bytes());
        p.extend(promoted[g].to_le_bytes());
    }
    p.extend(0u64.to_le_bytes()); // FinalizationPromotedSize
    p.extend(0u64.to_le_bytes()); // FinalizationPromotedCount
    p.extend(0u32.to_le_bytes()); // PinnedObjectCount
    p.extend(0u32.to_le_bytes()); // SinkBlockCount
    p.extend(0u32.to_le_bytes()); // GCHandleCount
    p.extend(CLR);
    p.extend(sizes[4].to_le_bytes());
    p.extend(promoted[4].to_le_bytes());
    (thread, ms, 4, 2, p)
}

/// A whole blocking GC: suspended at `from`, started 0.1 ms later, ended, sizes, and the
/// program restarted at `to`.
pub(crate) fn blocking_gc(
    number: u32,
    depth: u32,
    reason: u32,
    from: f64,
    to: f64,
) -> Vec<RuntimeEvent> {
    let step = (to - from) / 5.0;
    vec![
        suspend(1, from, 1),
        suspend_stop(1, from + step),
        gc_start(1, from + 2.0 * step, number, depth, reason, 0),
        gc_end(1, from + 3.0 * step, number, depth),
        heap_stats(
            1,
            from + 4.0 * step,
            [1000, 2000, 3000, 4000, 0],
            [10, 20, 30, 40, 0],
        ),
        restart(1, to),
    ]
}

/// `ThreadPoolWorkerThreadAdjustment/Adjustment` (id 55): to `workers`, for `reason`.
pub(crate) fn adjustment(ms: f64, workers: u32, reason: u32) -> RuntimeEvent {
    let p = le(&[
        &1.5f64.to_le_bytes(),
        &workers.to_le_bytes(),
        &reason.to_le_bytes(),
        &CLR,
    ]);
    (7, ms, 55, 0, p)
}

/// `Contention/Start` (id 81, V1) on `thread`.
pub(crate) fn contention_start(thread: u64, ms: f64) -> RuntimeEvent {
    (thread, ms, 81, 1, le(&[&[0u8], &CLR]))
}

/// `Contention/Stop` (id 91, V1) on `thread`, with the runtime's own `DurationNs`.
pub(crate) fn contention_stop(thread: u64, ms: f64, duration_ns: f64) -> RuntimeEvent {
    (
        thread,
        ms,
        91,
        1,
        le(&[&[0u8], &CLR, &duration_ns.to_le_bytes()]),
    )
}

/// `Exception/Start` (`ExceptionThrown_V1`, id 80) of `type_name` with `message`.
pub(crate) fn thrown(ms: f64, type_name: &str, message: &str) -> RuntimeEvent {
    let mut p = utf16(type_name);
    p.extend(utf16(message));
    p.extend(0x1234u64.to_le_bytes()); // ExceptionEIP
    p.extend(0x8000_0000u32.to_le_bytes()); // ExceptionHRESULT
    p.extend(0u16.to_le_bytes()); // ExceptionFlags
    p.extend(CLR);
    (5, ms, 80, 1, p)
}

/// Any event at `ms` that no section reads (a `GC/RestartEEStart`, id 7), to set where the
/// trace ends.
pub(crate) fn marker(ms: f64) -> RuntimeEvent {
    (9, ms, 7, 1, CLR.to_vec())
}
