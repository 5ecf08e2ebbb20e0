//! A service-shaped program profiled continuously: it registers the CPU sampler and the
//! allocation profiler, runs the diagnostics server, and works without pause in two known
//! places, for `eptrace agent --pyroscope` and its tests and benchmark.
//!
//! `--workers N` threads (default 1) each loop: `burn_cpu` (about three quarters of the
//! time, pure arithmetic) then `allocate_records` (a vector of 64 boxed records, freed).
//! Stdout: `pid N`, then `ready`. Stdin, one command a line: `rate` answers `rate N`, the
//! loop iterations per second since the last `rate` (for the overhead benchmark); `quit`.
//! It ends at `quit` or when stdin closes; with `--seconds S` it reads no stdin and ends
//! after S seconds, for use without a terminal:
//!
//! ```sh
//! eptrace collect --profile cpu-sampling --duration 2s -- profiled-service --seconds 5
//! ```

use std::alloc::System;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use eventpipe_profiler::alloc::ProfiledAllocator;

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

#[inline(never)]
fn burn_cpu(seed: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..30_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

#[inline(never)]
fn allocate_records(seed: u64) -> u64 {
    let records: Vec<Box<[u64; 16]>> = (0..64).map(|i| Box::new([seed ^ i; 16])).collect();
    std::hint::black_box(&records)
        .iter()
        .fold(0u64, |sum, r| sum.wrapping_add(r[3]))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let workers = args
        .iter()
        .position(|a| a == "--workers")
        .and_then(|i| args.get(i + 1)?.parse::<usize>().ok())
        .unwrap_or(1);
    let seconds = args
        .iter()
        .position(|a| a == "--seconds")
        .and_then(|i| args.get(i + 1)?.parse::<f64>().ok());
    eventpipe_profiler::cpu::register().expect("the CPU sampler registers");
    eventpipe_profiler::alloc::register();
    eventpipe::diagnostics::start_server().expect("the diagnostics server starts");
    let done = Arc::new(AtomicU64::new(0));
    for w in 0..workers {
        let done = Arc::clone(&done);
        std::thread::Builder::new()
            .name(format!("worker-{w}"))
            .spawn(move || {
                let mut seed = w as u64 + 1;
                loop {
                    seed = burn_cpu(seed);
                    seed = seed.wrapping_add(allocate_records(seed));
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
            .expect("a worker starts");
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "pid {}", std::process::id()).unwrap();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    if let Some(seconds) = seconds {
        std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
        return;
    }
    let (mut since, mut counted) = (Instant::now(), done.load(Ordering::Relaxed));
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "rate" => {
                let now = done.load(Ordering::Relaxed);
                let rate = (now - counted) as f64 / since.elapsed().as_secs_f64();
                (since, counted) = (Instant::now(), now);
                writeln!(out, "rate {rate:.1}").unwrap();
            }
            "quit" => break,
            other => writeln!(out, "? {other}").unwrap(),
        }
        out.flush().unwrap();
    }
}
