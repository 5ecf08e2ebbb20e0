//! The sampled weights are an unbiased estimate of the bytes allocated: 128 MiB in each of
//! four size classes (777 B, 3001 B and 24577 B, below the 64 KiB interval, and 200003 B,
//! above it), each block freed at once. Per class, the summed `Weight` of its
//! `AllocationSample`s is within ±10 % of 128 MiB (standard error ≤ 2.3 %), and every sampled
//! block has its `FreeSample`.

mod common;

use std::alloc::{alloc, dealloc, Layout, System};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use eventpipe_profiler::alloc::{register, stats, ProfiledAllocator};

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

const PER_CLASS: usize = 128 << 20;
const SIZES: [usize; 4] = [777, 3001, 24_577, 200_003];

#[test]
fn sampled_weights_estimate_the_bytes_allocated_without_bias() {
    common::with_watchdog(Duration::from_secs(300), "unbiased", run);
}

#[inline(never)]
fn churn(size: usize, count: usize) {
    let layout = Layout::from_size_align(size, 8).unwrap();
    for i in 0..count {
        // SAFETY: non-zero size; freed at once with its layout.
        unsafe {
            let p = alloc(layout);
            assert!(!p.is_null());
            p.write_volatile(1);
            dealloc(p, layout);
        }
        if i % 20_000 == 19_999 {
            eventpipe_profiler::alloc::flush(Duration::from_secs(10));
        }
    }
}

fn run() {
    register();
    let before = stats();
    let (session, path) = common::start("unbiased", "SampleInterval=64KiB");
    assert_eq!(stats().sample_interval, 65_536);
    let mut counts = HashMap::new();
    for &size in &SIZES {
        let count = PER_CLASS / size;
        counts.insert(size as u64, count);
        churn(size, count);
    }
    let events = common::stop_and_read(session, path);
    let after = stats();
    assert_eq!(
        after.events_dropped, before.events_dropped,
        "no sample lost"
    );
    assert_eq!(after.untracked_samples, before.untracked_samples);

    let me = common::tid();
    let samples: Vec<_> = events
        .iter()
        .filter(|e| e.name == "AllocationSample" && e.thread == me)
        .filter(|e| counts.contains_key(&e.get("Size")))
        .collect();
    for &size in &SIZES {
        let mine: Vec<_> = samples
            .iter()
            .filter(|e| e.get("Size") == size as u64)
            .collect();
        let actual = (counts[&(size as u64)] * size) as f64;
        let estimate: u64 = mine.iter().map(|e| e.get("Weight")).sum();
        let error = estimate as f64 / actual - 1.0;
        eprintln!(
            "size {size:>6}: {:>5} samples of {:>6} allocations, estimate {:+.2} %",
            mine.len(),
            counts[&(size as u64)],
            error * 100.0
        );
        assert!(error.abs() <= 0.10, "size {size}: estimate off by {error}");
    }
    // Each sampled block was freed at once: its FreeSample follows its AllocationSample
    // before any later sample of the same address.
    let mut open: HashSet<u64> = HashSet::new();
    for e in &events {
        match e.name.as_str() {
            "AllocationSample" => {
                open.insert(e.get("Address"));
            }
            "FreeSample" => {
                assert!(
                    open.remove(&e.get("Address")),
                    "a free of an unsampled address"
                );
            }
            _ => {}
        }
    }
    let ours: HashSet<u64> = samples.iter().map(|e| e.get("Address")).collect();
    assert!(
        open.is_disjoint(&ours),
        "every sampled block of the workload has its FreeSample"
    );
}
