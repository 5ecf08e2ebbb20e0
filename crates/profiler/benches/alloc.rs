//! The allocator wrapper's cost, called directly (no global allocator installed here), on
//! an allocation-heavy ring workload (10,000 allocations or reallocations and as many frees
//! per iteration, sizes 16 B–16 KiB, 256 blocks live):
//!
//! * `alloc-ring/system`: `std::alloc::System`.
//! * `alloc-ring/profiled-disabled`: `ProfiledAllocator<System>`, registered, no session
//!   enabling it: one relaxed load and a branch per call. Target ≤ 2 % over `system`.
//! * `alloc-ring/profiled-enabled-{512,64}k`: a session enables it (output to `io::sink()`)
//!   at the default 512 KiB and at 64 KiB.
//!
//! Because the machine may be shared, the bench ends with an interleaved comparison: 41
//! rounds, each timing `system` and `profiled-disabled` back to back (alternating which goes
//! first), and prints the median per-round ratio, which a neighbour's load affects far less
//! than two separate criterion runs.
//!
//! `cargo bench -p eventpipe-profiler --bench alloc`

mod common;

use std::alloc::System;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_profiler::alloc::ProfiledAllocator;

static PROFILED: ProfiledAllocator<System> = ProfiledAllocator::new(System);

const OPS: usize = 10_000;

fn session(interval: u64) -> Session {
    let spec = format!("EventPipeRs-Allocations:0:5:SampleInterval={interval}");
    Session::start(SessionConfig::new(
        vec![ProviderConfig::parse(&spec).expect("spec")],
        Output::Stream(Box::new(std::io::sink())),
    ))
    .expect("session")
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("alloc-ring");
    g.throughput(Throughput::Elements(OPS as u64));
    g.bench_function("system", |b| {
        b.iter(|| common::ring(&System, black_box(OPS)))
    });
    g.bench_function("profiled-disabled", |b| {
        b.iter(|| common::ring(&PROFILED, black_box(OPS)))
    });
    for interval in [512 * 1024u64, 64 * 1024] {
        let s = session(interval);
        assert!(eventpipe_profiler::alloc::is_enabled());
        g.bench_function(format!("profiled-enabled-{}k", interval / 1024), |b| {
            b.iter(|| common::ring(&PROFILED, black_box(OPS)))
        });
        eventpipe_profiler::alloc::flush(Duration::from_secs(5));
        s.stop().expect("stop");
    }
    g.finish();
}

fn time(f: impl Fn() -> usize) -> Duration {
    let start = Instant::now();
    black_box(f());
    start.elapsed()
}

/// Median ratio profiled-disabled / system over interleaved rounds.
fn interleaved() {
    assert!(!eventpipe_profiler::alloc::is_enabled());
    let ops = 200_000;
    let mut ratios = Vec::new();
    for round in 0..41 {
        let sys = || common::ring(&System, black_box(ops));
        let prof = || common::ring(&PROFILED, black_box(ops));
        let (s, p) = if round % 2 == 0 {
            let s = time(sys);
            (s, time(prof))
        } else {
            let p = time(prof);
            (time(sys), p)
        };
        ratios.push(p.as_secs_f64() / s.as_secs_f64());
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    println!(
        "interleaved alloc-ring, 41 rounds of {ops} ops: profiled-disabled / system median {:.4} \
         (quartiles {:.4} .. {:.4}); target <= 1.02",
        median,
        ratios[ratios.len() / 4],
        ratios[3 * ratios.len() / 4],
    );
}

fn main() {
    eventpipe_profiler::alloc::register();
    // What `criterion_group!`/`criterion_main!` expand to, minus their undocumented `pub fn`.
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    interleaved();
}
