//! An async service for the async profiler: a tokio runtime with two worker threads serves
//! requests in batches of 8, each one `handle_request`, which awaits `parse` (CPU), `query`
//! (waits 2 ms on a timer) and `render` (CPU, about three times `parse`). Every async fn is
//! `#[profiled]`; the CPU sampler and the async profiler are registered and the diagnostics
//! server runs, so `--profile async` shows CPU samples under their async callstacks.
//!
//! Stdout: `pid N`, then `ready`. It ends after `--seconds S` (default 600).
//!
//! ```sh
//! eptrace collect --profile async --duration 2s -o async.nettrace -- async-demo --seconds 5
//! eptrace report async.nettrace
//! ```

use std::io::Write;
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

#[profiled]
async fn handle_request(id: u64) -> u64 {
    let key = parse(id).await;
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
