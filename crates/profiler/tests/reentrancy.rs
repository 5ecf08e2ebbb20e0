//! The profiler's own allocations are never profiled. With `SampleInterval=1` every
//! allocation of the program is sampled, so if the profiler's internal allocations (scratch
//! buffers, stack copies, table growth, the emitter's event buffers) went through sampling
//! they would show up as samples. They do not:
//!
//! - the profiler did allocate for itself (`internal_allocations` grew), so the check is not
//!   vacuous;
//! - no sample's stack passes through the profiler's sampling code or its emitter thread, and
//!   no sample names the emitter's thread as the allocating one;
//! - the workload's 1000 boxes give exactly 1000 samples whose stack holds the workload's
//!   function: one per allocation, none twice, none missing;
//! - no allocation or free happened while a table lock was held.

mod common;

use std::alloc::System;
use std::time::Duration;

use eventpipe_profiler::alloc::{register, stats, ProfiledAllocator};

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

const BOXES: usize = 1000;

#[test]
fn the_profilers_own_allocations_are_never_sampled() {
    common::with_watchdog(Duration::from_secs(300), "re-entrancy", run);
}

#[inline(never)]
fn reentrancy_workload() -> usize {
    let mut sum = 0;
    for i in 0..BOXES {
        let b = std::hint::black_box(Box::new([i as u8; 100]));
        sum += b[0] as usize;
    }
    sum
}

fn run() {
    register();
    let before = stats();
    let (session, path) = common::start("reentrancy", "SampleInterval=1");
    assert_eq!(stats().sample_interval, 1);
    std::hint::black_box(reentrancy_workload());
    let events = common::stop_and_read(session, path);
    let after = stats();
    assert!(
        after.internal_allocations > before.internal_allocations + BOXES as u64,
        "the profiler allocated for itself ({} times), unsampled",
        after.internal_allocations - before.internal_allocations
    );
    assert_eq!(after.allocations_under_lock, 0);
    assert_eq!(after.events_dropped, before.events_dropped);

    let samples: Vec<_> = events
        .iter()
        .filter(|e| e.name == "AllocationSample")
        .collect();
    assert!(samples.len() >= BOXES);
    let emitter = samples[0].capture;
    for s in &samples {
        assert_eq!(s.capture, emitter, "samples are written by the emitter");
        assert_ne!(
            s.thread, emitter,
            "the emitter's allocations are not sampled"
        );
    }
    let internal = [
        "eventpipe_profiler::alloc::sample",
        "eventpipe_profiler::alloc::stack::",
        "eventpipe_profiler::alloc::table::",
        "eventpipe_profiler::alloc::emitter::",
        "eventpipe_profiler::alloc::control::",
    ];
    // (eventpipe's own threads, such as the session's drain, are the program's as far as the
    // profiler is concerned: their allocations may be sampled. What eventpipe does on the
    // emitter's behalf shows the emitter's frames.)
    let mut workload = 0;
    for s in &samples {
        let names: Vec<String> = s.stack.iter().flat_map(|&ip| common::names(ip)).collect();
        for n in &names {
            assert!(
                !internal.iter().any(|i| n.contains(i)),
                "a sample taken inside the profiler: {n} in {names:#?}"
            );
        }
        if names.iter().any(|n| n.contains("reentrancy_workload")) {
            workload += 1;
        }
    }
    assert_eq!(workload, BOXES, "one sample per box of the workload");
}
