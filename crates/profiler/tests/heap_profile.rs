//! The live-heap profile matches a known live set within sampling error: 64 MiB kept live in
//! blocks of known sizes (1, 3, 12 and 48 KiB) while as much again is allocated and freed,
//! sampled every 64 KiB on average. The summed `Weight` of the `LiveAllocation` events at
//! those blocks' addresses must be within ±15 % of 64 MiB (the standard error is about
//! 2.7 %), and the freed blocks must not be listed.

mod common;

use std::alloc::{alloc, dealloc, Layout, System};
use std::collections::HashSet;
use std::time::Duration;

use eventpipe_profiler::alloc::{emit_heap_profile, register, stats, ProfiledAllocator};

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

const LIVE: usize = 64 << 20;
const SIZES: [usize; 4] = [1 << 10, 3 << 10, 12 << 10, 48 << 10];

#[test]
fn the_live_heap_profile_matches_the_known_live_set() {
    common::with_watchdog(Duration::from_secs(300), "heap profile", run);
}

fn run() {
    register();
    let (session, path) = common::start("heap", "SampleInterval=65536");
    assert!(eventpipe_profiler::alloc::is_enabled());
    let cycles = LIVE / SIZES.iter().sum::<usize>();
    // Reserved up front: the workload's only allocations are the blocks themselves.
    let mut kept: Vec<(usize, usize)> = Vec::with_capacity(cycles * SIZES.len());
    let mut freed: Vec<usize> = Vec::with_capacity(cycles * SIZES.len());
    for cycle in 0..cycles {
        for &size in &SIZES {
            let layout = Layout::from_size_align(size, 16).unwrap();
            // SAFETY: non-zero size; each block is freed once with its layout.
            unsafe {
                let keep = alloc(layout);
                let drop_me = alloc(layout);
                assert!(!keep.is_null() && !drop_me.is_null());
                kept.push((keep as usize, size));
                freed.push(drop_me as usize);
                dealloc(drop_me, layout);
            }
        }
        if cycle % 256 == 255 {
            // Keep the emitter's queue short on a busy machine.
            eventpipe_profiler::alloc::flush(Duration::from_secs(10));
        }
    }
    assert_eq!(kept.iter().map(|k| k.1).sum::<usize>(), LIVE);
    let listed = emit_heap_profile();
    assert!(listed > 0);
    let events = common::stop_and_read(session, path);
    let after = stats();
    assert!(!after.enabled);
    assert_eq!(after.tracked, 0, "stopping clears the tracking table");
    assert_eq!(after.allocations_under_lock, 0);

    let kept_addrs: HashSet<u64> = kept.iter().map(|k| k.0 as u64).collect();
    let all_live: Vec<_> = events
        .iter()
        .filter(|e| e.name == "LiveAllocation")
        .collect();
    // Two snapshots: the one asked for, and the one the profiler writes as the session
    // ends (its disable callback runs while the session still records); nothing was
    // allocated or freed between them, so they list the same blocks.
    let first = all_live.iter().map(|e| e.get("Snapshot")).min().unwrap();
    let last = all_live.iter().map(|e| e.get("Snapshot")).max().unwrap();
    assert_ne!(first, last, "no heap profile at the end of the session");
    let live: Vec<_> = all_live
        .iter()
        .copied()
        .filter(|e| e.get("Snapshot") == first)
        .collect();
    assert_eq!(live.len(), listed);
    assert_eq!(
        all_live
            .iter()
            .filter(|e| e.get("Snapshot") == last)
            .count(),
        listed
    );
    let ours: Vec<_> = live
        .iter()
        .filter(|e| kept_addrs.contains(&e.get("Address")))
        .collect();
    let estimate: u64 = ours.iter().map(|e| e.get("Weight")).sum();
    let error = estimate as f64 / LIVE as f64 - 1.0;
    eprintln!(
        "{} of {} kept blocks sampled; estimated live {estimate} bytes of {LIVE} ({:+.2} %)",
        ours.len(),
        kept.len(),
        error * 100.0
    );
    assert!(error.abs() <= 0.15, "live heap estimate off by {error}");
    for e in &ours {
        assert!(SIZES.contains(&(e.get("Size") as usize)));
        assert_eq!(
            e.thread,
            common::tid(),
            "attributed to the allocating thread"
        );
        assert!(!e.stack.is_empty());
    }
    // The frame-pointer walk reaches the allocating function from every sample, and the
    // profiler's own frames (below the sampling entry point) are cut off.
    for e in &ours {
        assert!(
            common::stack_mentions(&e.stack, "heap_profile::run"),
            "a stack does not lead back to the allocating function"
        );
        assert!(
            !common::stack_mentions(&e.stack, "eventpipe_profiler::alloc::sample")
                && !common::stack_mentions(&e.stack, "eventpipe_profiler::alloc::after_alloc"),
            "a stack holds the profiler's own frames"
        );
    }
    // A freed block is listed only if its address was handed out again to a kept block.
    let freed_only: HashSet<u64> = freed
        .iter()
        .map(|&a| a as u64)
        .filter(|a| !kept_addrs.contains(a))
        .collect();
    let listed_freed = live
        .iter()
        .filter(|e| freed_only.contains(&e.get("Address")))
        .count();
    assert_eq!(listed_freed, 0, "freed blocks are not in the heap profile");

    for (p, size) in kept {
        // SAFETY: allocated above with this layout, freed once.
        unsafe { dealloc(p as *mut u8, Layout::from_size_align(size, 16).unwrap()) };
    }
}
