//! The GC pause rules (TraceEvent's, see `src/gc.rs`) and every finding's rule at its
//! threshold, on synthetic traces of the runtime's own events.

mod support;

use support::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn a_blocking_gc_pauses_from_its_suspension_to_the_restart() {
    let a = analyze(&blocking_gc(1, 0, 0, 10.0, 15.0));
    let gc = a.gc.unwrap();
    assert_eq!(gc.complete, 1);
    let g = &gc.gcs[0];
    assert_eq!(
        (g.number, g.generation, g.kind, g.reason),
        (1, 0, "NonConcurrent", "AllocSmall")
    );
    assert!(close(g.pause_ms.unwrap(), 5.0), "{:?}", g.pause_ms);
    assert!(close(g.suspend_ms.unwrap(), 1.0));
    assert!(close(g.duration_ms.unwrap(), 1.0));
    assert_eq!(g.heap_after_bytes, Some(10_000));
    assert_eq!(g.promoted_bytes, Some(100));
    assert_eq!(g.generation_sizes_after, Some([1000, 2000, 3000, 4000, 0]));
}

#[test]
fn suspensions_not_for_a_gc_are_not_pauses() {
    let mut events = vec![suspend(1, 0.0, 0), suspend_stop(1, 1.0), restart(1, 3.0)];
    events.extend(blocking_gc(1, 0, 0, 10.0, 12.0));
    events.extend([suspend(1, 20.0, 5), restart(1, 40.0)]);
    let gc = analyze(&events).gc.unwrap();
    assert!(close(gc.total_pause_ms, 2.0), "{}", gc.total_pause_ms);
}

#[test]
fn a_background_gc_pauses_at_its_start_and_its_final_mark_and_foreground_gcs_pause_apart() {
    let events = vec![
        // The background gen2 GC starts: its initial pause, 100-104.
        suspend(1, 100.0, 1),
        suspend_stop(1, 101.0),
        gc_start(1, 102.0, 1, 2, 0, 1),
        restart(1, 104.0),
        // A foreground gen1 GC during it: 110-114.
        suspend(1, 110.0, 1),
        suspend_stop(1, 110.5),
        gc_start(1, 111.0, 2, 1, 0, 2),
        gc_end(1, 112.0, 2, 1),
        heap_stats(1, 113.0, [1, 2, 3, 4, 5], [0; 5]),
        restart(1, 114.0),
        // The background GC's final mark (SuspendForGCPrep): 120-123, suspended 1 ms.
        suspend(1, 120.0, 6),
        suspend_stop(1, 121.0),
        restart(1, 123.0),
        gc_end(1, 130.0, 1, 2),
        heap_stats(1, 131.0, [10, 20, 30, 40, 50], [1, 1, 1, 1, 1]),
    ];
    let gc = analyze(&events).gc.unwrap();
    assert_eq!(gc.complete, 2);
    let bgc = &gc.gcs[0];
    assert_eq!((bgc.kind, bgc.generation), ("Background", 2));
    assert!(
        close(bgc.pause_ms.unwrap(), 4.0 + 3.0),
        "{:?}",
        bgc.pause_ms
    );
    assert!(
        close(bgc.suspend_ms.unwrap(), 1.0 + 1.0),
        "{:?}",
        bgc.suspend_ms
    );
    assert!(close(bgc.duration_ms.unwrap(), 28.0));
    assert_eq!(bgc.heap_after_bytes, Some(150));
    let fgc = &gc.gcs[1];
    assert_eq!(fgc.kind, "Foreground");
    assert!(close(fgc.pause_ms.unwrap(), 4.0));
    assert!(close(gc.total_pause_ms, 11.0));
    assert_eq!(gc.blocking_gen2, 0, "a background gen2 GC is not blocking");
    // TraceEvent's share: pauses over the first complete GC's pause start (the background
    // GC's, 100) to the last GC/HeapStats (131).
    assert!(
        close(gc.paused_percent, 100.0 * 11.0 / 31.0),
        "{}",
        gc.paused_percent
    );
}

#[test]
fn a_background_gc_that_finishes_before_the_restart_pauses_until_it() {
    let events = vec![
        suspend(1, 10.0, 1),
        suspend_stop(1, 10.5),
        gc_start(1, 11.0, 1, 2, 1, 1),
        gc_end(1, 16.0, 1, 2),
        heap_stats(1, 16.5, [1, 1, 1, 1, 1], [0; 5]),
        restart(1, 17.0),
    ];
    let gc = analyze(&events).gc.unwrap();
    assert_eq!(gc.complete, 1);
    assert!(
        close(gc.gcs[0].pause_ms.unwrap(), 7.0),
        "{:?}",
        gc.gcs[0].pause_ms
    );
}

#[test]
fn a_restart_by_another_thread_ends_no_gc_suspension() {
    let events = vec![
        suspend(1, 10.0, 1),
        suspend(2, 10.2, 0),
        restart(2, 10.4),
        suspend_stop(1, 10.5),
        gc_start(1, 11.0, 1, 0, 0, 0),
        gc_end(1, 12.0, 1, 0),
        heap_stats(1, 12.5, [1, 1, 1, 1, 1], [0; 5]),
        restart(1, 13.0),
    ];
    let gc = analyze(&events).gc.unwrap();
    assert!(
        close(gc.gcs[0].pause_ms.unwrap(), 3.0),
        "{:?}",
        gc.gcs[0].pause_ms
    );
    assert!(close(gc.gcs[0].suspend_ms.unwrap(), 0.5));
}

#[test]
fn a_gc_the_trace_has_no_suspension_for_is_listed_but_counts_in_no_total() {
    let mut events = vec![
        gc_start(1, 1.0, 7, 0, 0, 0),
        gc_end(1, 2.0, 7, 0),
        heap_stats(1, 3.0, [1, 1, 1, 1, 1], [0; 5]),
        restart(1, 4.0),
    ];
    events.extend(blocking_gc(8, 1, 1, 10.0, 12.0));
    let gc = analyze(&events).gc.unwrap();
    assert_eq!(gc.gcs.len(), 2);
    assert_eq!(gc.complete, 1);
    assert_eq!(gc.gcs[0].pause_ms, None);
    assert_eq!(gc.generations[0].count, 0);
    assert_eq!(gc.generations[1].count, 1);
    assert_eq!(gc.induced, 1);
}

fn rules(events: &[support::RuntimeEvent]) -> Vec<&'static str> {
    analyze(events).findings.iter().map(|f| f.rule).collect()
}

/// Two blocking gen0 GCs paused 1 ms and `second` ms in a trace 20 ms long: the share
/// paused is (1 + second) / 20.
fn two_gcs(second: f64) -> Vec<support::RuntimeEvent> {
    let mut events = blocking_gc(1, 0, 0, 0.0, 1.0);
    events.extend([
        suspend(1, 20.0 - second, 1),
        suspend_stop(1, 19.95),
        gc_start(1, 19.96, 2, 0, 0, 0),
        gc_end(1, 19.97, 2, 0),
        heap_stats(1, 20.0, [1, 1, 1, 1, 1], [0; 5]),
        restart(1, 20.0),
    ]);
    events
}

#[test]
fn gc_pause_time_fires_at_ten_percent_of_the_trace() {
    assert_eq!(rules(&two_gcs(1.0)), ["gc-pause-time"]);
    assert_eq!(rules(&two_gcs(0.99)), Vec::<&str>::new());
}

/// One short blocking GC in a trace a second long.
fn one_gc(depth: u32, reason: u32) -> Vec<&'static str> {
    let mut events = blocking_gc(1, depth, reason, 0.0, 0.01);
    events.push(marker(1000.0));
    rules(&events)
}

#[test]
fn a_blocking_gen2_gc_and_an_induced_gc_each_fire() {
    assert_eq!(one_gc(1, 0), Vec::<&str>::new());
    assert_eq!(one_gc(2, 0), ["gc-blocking-gen2"]);
    assert_eq!(one_gc(0, 1), ["gc-induced"]);
    // A GC induced without forcing (reason 7) counts; a compacting one (10) does not.
    assert_eq!(one_gc(0, 7), ["gc-induced"]);
    assert_eq!(one_gc(0, 10), Vec::<&str>::new());
}

#[test]
fn one_starvation_adjustment_fires() {
    assert_eq!(rules(&[adjustment(5.0, 9, 6)]), ["threadpool-starvation"]);
    assert_eq!(rules(&[adjustment(5.0, 9, 3)]), Vec::<&str>::new());
    let pool = analyze(&[
        adjustment(5.0, 9, 6),
        adjustment(800.0, 10, 6),
        adjustment(5000.0, 11, 6),
    ])
    .threadpool
    .unwrap();
    assert_eq!(pool.starvation_spans, [(5.0, 800.0), (5000.0, 5000.0)]);
}

/// A trace 100 ms long in which thread 4 waits `ms` on a lock (as the runtime measured it).
fn contended(ms: f64) -> Vec<support::RuntimeEvent> {
    vec![
        contention_start(4, 0.0),
        contention_stop(4, 50.0, ms * 1e6),
        marker(100.0),
    ]
}

#[test]
fn lock_contention_fires_at_five_percent_of_a_threads_time() {
    assert_eq!(rules(&contended(5.0)), ["lock-contention"]);
    assert_eq!(rules(&contended(4.99)), Vec::<&str>::new());
    let c = analyze(&contended(5.0)).contention.unwrap();
    assert_eq!((c.count, c.measured), (1, 1));
    assert!(
        close(c.total_wait_ms, 5.0),
        "DurationNs wins over the timestamps"
    );
}

/// `n` exceptions in a trace exactly one second long.
fn throwing(n: usize) -> Vec<support::RuntimeEvent> {
    let mut events: Vec<_> = (0..n)
        .map(|i| thrown(i as f64, "System.InvalidOperationException", "no"))
        .collect();
    events.push(marker(1000.0));
    events
}

#[test]
fn exception_rate_fires_at_a_hundred_a_second() {
    assert_eq!(rules(&throwing(100)), ["exception-rate"]);
    assert_eq!(rules(&throwing(99)), Vec::<&str>::new());
    let e = analyze(&throwing(3)).exceptions.unwrap();
    assert_eq!(
        e.by_type[0].exception_type,
        "System.InvalidOperationException"
    );
    assert_eq!(
        (e.by_type[0].message.as_str(), e.by_type[0].count),
        ("no", 3)
    );
}

#[test]
fn a_healthy_trace_has_no_findings_and_says_what_to_collect_for_the_rest() {
    let a = analyze(
        &blocking_gc(1, 0, 0, 0.0, 0.5)
            .into_iter()
            .chain([marker(1000.0)])
            .collect::<Vec<_>>(),
    );
    assert!(a.findings.is_empty(), "{:?}", a.findings);
    let missing: Vec<&str> = a.missing.iter().map(|m| m.section).collect();
    assert_eq!(
        missing,
        [
            "allocations",
            "jit",
            "contention",
            "exceptions",
            "threadpool",
            "offcpu",
            "async"
        ]
    );
}
