//! An async service for the async profiler: a tokio runtime with two worker threads serves
//! requests in batches of 8, each one `handle_request`, which awaits `parse` (CPU), `query`
//! (waits 2 ms on a timer) and `render` (CPU, about three times `parse`). Every async fn is
//! `#[profiled]`; the CPU sampler and the async profiler are registered and the diagnostics
//! server runs, so `--profile async` shows CPU samples under their async callstacks.
//!
//! Two faults to find, off by default: `--slow-every N` makes every Nth request also await
//! `blocking_lookup`, which spins for 25 ms inside its poll (blocking its worker thread, the
//! classic async bug), and `--stuck` spawns one task, `wait_forever`, that never finishes.
//!
//! Stdout: `pid N`, then `ready`. It ends after `--seconds S` (default 600).
//!
//! ```sh
//! eptrace collect --profile async --duration 2s -o async.nettrace -- async-demo --seconds 5
//! eptrace report async.nettrace
//! ```

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use eventpipe_profiler::futures::profiled;

#[inline(never)]
fn spin(rounds: u32, seed: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    std::hint::black_box(x)
}

#[profiled]
async fn parse(id: u64) -> u64 {
    spin(100_000, id)
}

#[profiled]
async fn query(key: u64) -> u64 {
    tokio::time::sleep(Duration::from_millis(2)).await;
    key.rotate_left(7)
}

#[profiled]
async fn render(rows: u64) -> u64 {
    spin(300_000, rows)
}

/// Every how many requests one awaits `blocking_lookup` (0: none).
static SLOW_EVERY: AtomicU64 = AtomicU64::new(0);

/// How long `blocking_lookup` keeps its thread.
const BLOCKING: Duration = Duration::from_millis(25);

/// Spins for `how_long` of wall time: CPU work that never yields.
#[inline(never)]
fn spin_for(how_long: Duration, seed: u64) -> u64 {
    let start = Instant::now();
    let mut x = seed;
    while start.elapsed() < how_long {
        x = spin(1_000, x);
    }
    x
}

#[profiled]
async fn blocking_lookup(id: u64) -> u64 {
    spin_for(BLOCKING, id)
}

#[profiled]
async fn wait_forever() {
    std::future::pending::<()>().await;
}

#[profiled]
async fn handle_request(id: u64) -> u64 {
    let key = parse(id).await;
    let slow_every = SLOW_EVERY.load(Ordering::Relaxed);
    let key = if slow_every > 0 && id % slow_every == 0 {
        blocking_lookup(key).await
    } else {
        key
    };
    let rows = query(key).await;
    render(rows).await
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds = args
        .iter()
        .position(|a| a == "--seconds")
        .and_then(|i| args.get(i + 1)?.parse::<f64>().ok())
        .unwrap_or(600.0);
    let slow_every = args
        .iter()
        .position(|a| a == "--slow-every")
        .and_then(|i| args.get(i + 1)?.parse::<u64>().ok())
        .unwrap_or(0);
    SLOW_EVERY.store(slow_every, Ordering::Relaxed);
    let stuck = args.iter().any(|a| a == "--stuck");
    eventpipe_profiler::cpu::register().expect("the CPU sampler registers");
    eventpipe_profiler::futures::register();
    eventpipe::diagnostics::start_server().expect("the diagnostics server starts");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("async-demo-worker")
        .enable_time()
        .build()
        .expect("the tokio runtime starts");
    let mut out = std::io::stdout().lock();
    writeln!(out, "pid {}", std::process::id()).unwrap();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    runtime.block_on(async {
        if stuck {
            tokio::spawn(wait_forever());
        }
        let mut id = 0u64;
        while Instant::now() < deadline {
            let batch: Vec<_> = (0..8)
                .map(|_| {
                    id += 1;
                    tokio::spawn(handle_request(id))
                })
                .collect();
            for request in batch {
                std::hint::black_box(request.await.expect("a request completes"));
            }
        }
    });
}
