//! A program whose counters are known, for `eptrace counters`:
//!
//! * provider `Demo` (the direct API): `fixed-gauge` (a gauge set to 42.5, unit `MB`),
//!   `fixed-total` (an observed counter that grows by 7 each time it is read, so every
//!   interval's increment is 7), `latency` (a histogram recording 10.0 ms every 10 ms);
//! * provider `Metrics` (the `metrics` crate through `eventpipe_metrics::install()`):
//!   `queue_depth` (a gauge at 12) and `jobs` (a counter, label `kind=batch`, that grows by
//!   N when stdin says `jobs N`);
//! * `EventPipeRs-Runtime` (built in): 8 more threads than the program's own, parked, and
//!   an allocation rate of 512 KiB allocated and freed every 10 ms (52,428,800 B/s, kept on a
//!   fixed schedule), seen by the allocation profiler, which tracks the heap.
//!
//! Stdout: `pid N`, then `ready`; `jobs N` on stdin answers `jobs TOTAL`; `spin` starts a
//! thread that keeps one core busy (for CPU-usage triggers) and answers `spinning`. It runs
//! until killed.

use std::alloc::System;
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use eventpipe::{CounterInfo, Gauge, Histogram, ObservedCounter, Provider};
use eventpipe_profiler::alloc::ProfiledAllocator;

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

static DEMO: Provider = Provider::new("Demo");
static FIXED_GAUGE: Gauge = Gauge::new(&DEMO, CounterInfo::new("fixed-gauge").unit("MB"));
static LATENCY: Histogram = Histogram::new(&DEMO, CounterInfo::new("latency").unit("ms"));
static TOTAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn grow_by_seven() -> u64 {
    TOTAL.fetch_add(7, std::sync::atomic::Ordering::Relaxed) + 7
}

static FIXED_TOTAL: ObservedCounter =
    ObservedCounter::new(&DEMO, CounterInfo::new("fixed-total"), grow_by_seven);

/// Bytes allocated (and freed) per tick, and the tick.
const CHUNK: usize = 512 * 1024;
const TICK: Duration = Duration::from_millis(10);

fn main() {
    eventpipe_profiler::alloc::register();
    eventpipe_profiler::alloc::track_heap(64 * 1024);
    eventpipe_metrics::install().expect("the metrics recorder installs");
    eventpipe::diagnostics::start_server().expect("the diagnostics server starts");
    FIXED_GAUGE.set(42.5);
    FIXED_TOTAL.register();
    LATENCY.register();
    metrics::gauge!("queue_depth").set(12.0);
    let jobs = metrics::counter!("jobs", "kind" => "batch");
    jobs.absolute(0);

    let _parked: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(std::thread::park))
        .collect();
    std::thread::spawn(|| {
        let mut next = Instant::now();
        loop {
            let block = std::hint::black_box(vec![1u8; CHUNK]);
            drop(block);
            LATENCY.record(10.0);
            next += TICK;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
    });

    let mut out = std::io::stdout().lock();
    writeln!(out, "pid {}", std::process::id()).unwrap();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    let mut total = 0u64;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if let Some(n) = line
            .strip_prefix("jobs ")
            .and_then(|n| n.trim().parse::<u64>().ok())
        {
            jobs.increment(n);
            total += n;
            writeln!(out, "jobs {total}").unwrap();
            out.flush().unwrap();
        } else if line.trim() == "spin" {
            std::thread::spawn(|| {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            });
            writeln!(out, "spinning").unwrap();
            out.flush().unwrap();
        }
    }
    // Without more input (stdin closed, or none), run on until stopped.
    loop {
        std::thread::park();
    }
}
