//! The allocation profiler's cost per allocation, for an instruction counter: runs the
//! benches' `program` workload (strings, a growing vector, a map) ten times through
//! `ProfiledAllocator<System>`, with a session sampling at the default interval (`on`) or a
//! session on another provider (`off`, so that the process has the same threads). With
//! `ring` as a second argument it runs the `alloc` bench's pure ring instead (a million
//! allocator calls, nothing else). Compare the main thread's instructions (add
//! `--cache-sim=yes` for first-level cache misses):
//!
//! ```sh
//! cargo build --release -p eventpipe-profiler --example alloc_cost
//! for w in off on; do valgrind --tool=callgrind --separate-threads=yes \
//!     --callgrind-out-file=/tmp/cg-$w.out target/release/examples/alloc_cost $w; done
//! callgrind_annotate /tmp/cg-off.out-01 | grep TOTALS; callgrind_annotate /tmp/cg-on.out-01 | grep TOTALS
//! ```

#[path = "../benches/common/mod.rs"]
mod common;

use std::alloc::System;
use std::hint::black_box;

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_profiler::alloc::ProfiledAllocator;

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

fn main() {
    eventpipe_profiler::alloc::register();
    let on = match std::env::args().nth(1).as_deref() {
        Some("on") => true,
        Some("off") => false,
        _ => {
            eprintln!("usage: alloc_cost on|off [program|ring]");
            std::process::exit(2);
        }
    };
    let spec = if on {
        "EventPipeRs-Allocations:0:5"
    } else {
        "Bench-Background:0:5"
    };
    let session = Session::start(SessionConfig::new(
        vec![ProviderConfig::parse(spec).expect("provider spec")],
        Output::Stream(Box::new(std::io::sink())),
    ))
    .expect("session");
    let ring = std::env::args().nth(2).as_deref() == Some("ring");
    let start = std::time::Instant::now();
    for _ in 0..10 {
        if ring {
            // The `alloc` bench's pure ring, through the profiled allocator directly.
            black_box(common::ring(&ALLOC, black_box(100_000), false));
        } else {
            black_box(common::program(black_box(20_000)));
        }
    }
    println!(
        "profiler {}: {:?}, {} samples",
        if on { "on" } else { "off" },
        start.elapsed(),
        eventpipe_profiler::alloc::stats().samples
    );
    session.stop().expect("stop");
}
