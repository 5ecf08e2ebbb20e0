//! The analysis of real .NET traces (`../shared/traces`) against counts made apart from it:
//! TraceEvent's own event counts for the trace (its `.baseline.txt`), and every `GC/Start`
//! decoded here through the reader's owned-value path, not the analysis's borrowed one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use eventpipe_analysis::{Analyzer, Sections};
use nettrace::{SortedReader, TraceReader, Value};

const OBJVER4: &str = "eventpipe-dotnetcore3.0-win-x64-objver4.nettrace";

fn shared(name: &str) -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces")
        .join(name);
    if path.exists() {
        Some(path)
    } else {
        println!(
            "skipping: {} is absent (the shared folder is not here)",
            path.display()
        );
        None
    }
}

/// TraceEvent's count of each `Provider/Event` in the trace (the baseline's second column).
fn baseline_counts(trace: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(trace.with_extension("nettrace.baseline.txt")).unwrap();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ", ");
            let name = parts.next()?;
            let count = parts.next()?.parse().ok()?;
            Some((name.to_owned(), count))
        })
        .collect()
}

#[test]
fn gc_rows_and_section_counts_agree_with_the_events_and_traceevents_counts() {
    let Some(path) = shared(OBJVER4) else { return };
    let bytes = std::fs::read(&path).unwrap();
    let counts = baseline_counts(&path);
    let runtime = |event: &str| counts[&format!("Microsoft-Windows-DotNETRuntime/{event}")];

    let mut reader = SortedReader::new(TraceReader::from_slice(&bytes).unwrap());
    let mut analyzer = Analyzer::new(Sections::ALL);
    // Every GC/Start as (number, generation, reason number), decoded apart.
    let mut starts: Vec<(u64, u64, u64)> = Vec::new();
    while let Some(event) = reader.next_event().unwrap() {
        analyzer.observe(&event);
        if event.metadata.provider == "Microsoft-Windows-DotNETRuntime"
            && event.metadata.event_id == 1
        {
            let fields: BTreeMap<&str, Value> =
                event.decode_payload().unwrap().into_iter().collect();
            let get = |n: &str| fields[n].as_u64().unwrap();
            starts.push((get("Count"), get("Depth"), get("Reason")));
        }
    }
    let a = analyzer.finish(OBJVER4);

    let gc = a.gc.as_ref().unwrap();
    assert_eq!(gc.gcs.len() as u64, runtime("GC/Start"));
    assert_eq!(starts.len(), gc.gcs.len());
    for (row, &(number, depth, reason)) in gc.gcs.iter().zip(&starts) {
        assert_eq!((row.number, u64::from(row.generation)), (number, depth));
        let reason_name =
            ["AllocSmall", "Induced", "LowMemory", "Empty", "AllocLarge"][reason as usize];
        assert_eq!(row.reason, reason_name, "GC {number}");
    }
    // Per generation, as many as the events say (each GC here has its suspension, sizes
    // and restart, so all are complete).
    assert_eq!(gc.complete, runtime("GC/HeapStats"));
    for generation in 0..=2u64 {
        let expected = starts.iter().filter(|s| s.1 == generation).count() as u64;
        assert_eq!(
            gc.generations[generation as usize].count, expected,
            "gen{generation}"
        );
    }
    assert!(gc
        .gcs
        .iter()
        .all(|g| g.pause_ms.unwrap() > 0.0 && g.heap_after_bytes.is_some()));

    let alloc = a.allocations.as_ref().unwrap();
    assert_eq!(alloc.ticks, runtime("GC/AllocationTick"));
    assert_eq!(
        alloc.by_type.iter().map(|r| r.ticks).sum::<u64>(),
        alloc.ticks
    );
    assert_eq!(alloc.by_type[0].type_name, "System.Char[]");

    let jit = a.jit.as_ref().unwrap();
    assert_eq!(jit.methods_jitted, runtime("Method/LoadVerbose"));
    assert_eq!(jit.ready_to_run_methods, runtime("Method/R2RGetEntryPoint"));

    let contention = a.contention.as_ref().unwrap();
    assert_eq!(contention.count, runtime("Contention/Start"));
    assert_eq!(contention.measured, runtime("Contention/Stop"));

    let pool = a.threadpool.as_ref().unwrap();
    assert_eq!(
        pool.adjustments.len() as u64,
        runtime("ThreadPoolWorkerThreadAdjustment/Adjustment")
    );
    assert!(a.findings.iter().any(|f| f.rule == "threadpool-starvation"));
    assert!(a.missing.iter().any(|m| m.section == "exceptions"));
}

#[test]
fn a_live_watch_reports_each_gc_and_starvation_as_the_whole_trace_analysis_has_them() {
    use eventpipe_analysis::live::{RuntimeNews, RuntimeWatch};
    let Some(path) = shared(OBJVER4) else { return };
    let bytes = std::fs::read(&path).unwrap();
    let mut reader = SortedReader::new(TraceReader::from_slice(&bytes).unwrap());
    let mut analyzer = Analyzer::new(Sections::ALL);
    let mut watch = RuntimeWatch::new();
    let mut news = Vec::new();
    let mut most_held = 0;
    while let Some(event) = reader.next_event().unwrap() {
        analyzer.observe(&event);
        watch.observe(&event, &mut news);
        most_held = most_held.max(watch.held());
    }
    let a = analyzer.finish(OBJVER4);
    // The whole-trace rows (held against the events and TraceEvent's counts above): every
    // complete one is reported once, with the same generation and pause.
    let gc = a.gc.as_ref().unwrap();
    let mut reported: Vec<(u64, u32, Option<f64>)> = news
        .iter()
        .filter_map(|n| match n {
            RuntimeNews::Gc(g) => Some((g.number, g.generation, g.pause_ms)),
            _ => None,
        })
        .collect();
    reported.sort_by_key(|r| r.0);
    assert_eq!(reported.len() as u64, gc.complete);
    let expected: Vec<(u64, u32, Option<f64>)> = gc
        .gcs
        .iter()
        .map(|g| (g.number, g.generation, g.pause_ms))
        .collect();
    assert_eq!(reported, expected);
    // 478 GCs, and never more than a few rows held at once.
    assert!(most_held <= 3, "{most_held} rows held");
    let starved = news
        .iter()
        .filter(|n| matches!(n, RuntimeNews::Starvation { .. }))
        .count() as u64;
    assert_eq!(
        starved,
        a.threadpool.as_ref().unwrap().starvation_adjustments
    );
    assert!(starved > 0);
}
