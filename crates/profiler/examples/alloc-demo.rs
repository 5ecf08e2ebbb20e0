//! A program profiled by the allocation profiler: installs [`ProfiledAllocator`], starts the
//! diagnostics server and allocates in a recognisable pattern until killed (or for
//! `ALLOC_DEMO_SECONDS`, default 600):
//!
//! - `grow_cache`: keeps 4 KiB entries in a cache that grows to 32 MiB, then starts over —
//!   the live heap;
//! - `parse_records`: builds and drops short strings and vectors — churn;
//! - `render_frame`: a 1 MiB buffer per frame, dropped at once — large, short-lived.
//!
//! ```sh
//! cargo run --release -p eventpipe-profiler --example alloc-demo &
//! eptrace collect -n alloc-demo --providers EventPipeRs-Allocations:0:5:SampleInterval=65536 \
//!     --duration 2s -o alloc.nettrace
//! eptrace convert -f flamegraph --samples alloc alloc.nettrace
//! ```

use std::alloc::System;
use std::hint::black_box;
use std::time::{Duration, Instant};

use eventpipe_profiler::alloc::ProfiledAllocator;

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

#[inline(never)]
fn grow_cache(cache: &mut Vec<Box<[u8]>>) {
    if cache.len() * 4096 >= 32 << 20 {
        cache.clear();
    }
    for _ in 0..16 {
        cache.push(vec![7u8; 4096].into_boxed_slice());
    }
}

#[inline(never)]
fn parse_records(n: usize) -> usize {
    let mut total = 0;
    for i in 0..n {
        let line = format!("record {i}: value={}", i * 7);
        let fields: Vec<&str> = line.split([' ', '=']).collect();
        total += fields.len() + line.len();
    }
    total
}

#[inline(never)]
fn render_frame(frame: usize) -> u8 {
    let buffer = vec![(frame % 251) as u8; 1 << 20];
    black_box(&buffer)[frame % buffer.len()]
}

fn main() {
    eventpipe_profiler::alloc::register();
    match eventpipe::diagnostics::start_server() {
        Ok(server) => eprintln!(
            "alloc-demo: pid {}, diagnostics socket {}",
            std::process::id(),
            server.socket_path().display()
        ),
        Err(e) => eprintln!("alloc-demo: no diagnostics server: {e}"),
    }
    let seconds = std::env::var("ALLOC_DEMO_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut cache = Vec::new();
    let mut frame = 0;
    while Instant::now() < end {
        grow_cache(&mut cache);
        black_box(parse_records(200));
        black_box(render_frame(frame));
        frame += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
}
