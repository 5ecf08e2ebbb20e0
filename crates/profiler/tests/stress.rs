//! Stopping and starting the profiler while other threads sample is safe: 6 threads (fresh
//! ones every round, so thread exit races sampling too) allocate, reallocate and free
//! concurrently while sessions on the provider start and stop 30 times with small sampling
//! intervals (some rounds also emit a heap profile, one overlaps a second session). No crash,
//! no deadlock (a watchdog aborts after 240 s), every trace reads back, the tracking table is
//! empty after every stop, and no allocation ever happened under a table lock.

mod common;

use std::alloc::System;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_profiler::alloc::{emit_heap_profile, register, stats, ProfiledAllocator};

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

#[test]
fn start_stop_while_threads_allocate() {
    common::with_watchdog(Duration::from_secs(240), "stress", run);
}

fn worker(stop: Arc<AtomicBool>, seed: u64) {
    let mut x = seed | 1;
    let mut live: Vec<Vec<u8>> = Vec::with_capacity(512);
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let size = [8usize, 40, 100, 1000, 4096, 70_000][(x % 6) as usize];
        let slot = (x >> 8) as usize % 512;
        if slot < live.len() {
            if x & 0x100 != 0 {
                // Grow in place or move: a realloc.
                live[slot].reserve(size);
            } else {
                live[slot] = vec![0u8; size];
            }
        } else {
            live.push(vec![0u8; size]);
        }
    }
}

fn run() {
    register();
    let dir = std::env::temp_dir();
    for round in 0..30u32 {
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..6)
            .map(|i| {
                let stop = stop.clone();
                std::thread::spawn(move || worker(stop, u64::from(round) * 31 + i))
            })
            .collect();
        let interval = [512u32, 4096, 65_536][round as usize % 3];
        let path = dir.join(format!(
            "ep-prof-stress-{}-{round}.nettrace",
            std::process::id()
        ));
        let spec = format!("EventPipeRs-Allocations:0:5:SampleInterval={interval}");
        let session = Session::start(
            SessionConfig::new(
                vec![ProviderConfig::parse(&spec).unwrap()],
                Output::File(path.clone()),
            )
            .rundown(false),
        )
        .unwrap();
        let second = (round % 7 == 3).then(|| {
            Session::start(SessionConfig::new(
                vec![ProviderConfig::parse(&spec).unwrap()],
                Output::Stream(Box::new(std::io::sink())),
            ))
            .unwrap()
        });
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(60) {
            if round % 4 == 1 {
                emit_heap_profile();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if round % 2 == 0 {
            // Stop while the workers are still going.
            drop(second);
            session.stop().unwrap();
            assert_eq!(stats().tracked, 0, "round {round}: table empty after stop");
            stop.store(true, Ordering::Relaxed);
        } else {
            stop.store(true, Ordering::Relaxed);
            drop(second);
            session.stop().unwrap();
            assert_eq!(stats().tracked, 0, "round {round}: table empty after stop");
        }
        for w in workers {
            w.join().unwrap();
        }
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        let events = common::read(&bytes);
        assert!(
            events.iter().any(|e| e.name == "AllocationSample"),
            "round {round}: sampled"
        );
        assert!(!stats().enabled);
    }
    let s = stats();
    assert_eq!(s.tracked, 0);
    assert_eq!(s.allocations_under_lock, 0);
    assert!(s.pooled_scratch_buffers <= 8);
    eprintln!("{s:?}");
}
