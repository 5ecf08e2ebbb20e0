//! The allocator wrapper's cost, called directly (no global allocator installed here), on
//! an allocation-heavy ring workload (10,000 allocations or reallocations and as many frees
//! per iteration, sizes 16 B–16 KiB, 256 blocks live):
//!
//! * `alloc-ring/system`: `std::alloc::System`.
//! * `alloc-ring/profiled-disabled`: `ProfiledAllocator<System>`, registered, no session
//!   enabling it: one relaxed load and a branch per call. Target ≤ 2 % over `system`.
//! * `alloc-ring/profiled-enabled-unsampled`: a session enables it with a 1 TiB interval, so
//!   nothing is sampled: the per-allocation and per-free bookkeeping alone.
//! * `alloc-ring/profiled-enabled-{512,64}k`: a session enables it (output to `io::sink()`)
//!   at the default 512 KiB and at 64 KiB.
//!
//! Because the machine may be shared, the bench ends with interleaved comparisons: 101
//! rounds, each timing `system` and the profiled allocator back to back (alternating which
//! goes first); it prints the median per-round ratio and the ratio of the fastest rounds,
//! which a neighbour's load affects far less than two separate criterion runs. Once on the
//! ring as above (nothing but allocator calls), once with every block filled after
//! allocation (as programs initialise what they allocate); first with the profiler disabled
//! (target ≤ 2 %), then enabled at the default 512 KiB interval (target ≤ 5 %).
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
        b.iter(|| common::ring(&System, black_box(OPS), false))
    });
    g.bench_function("profiled-disabled", |b| {
        b.iter(|| common::ring(&PROFILED, black_box(OPS), false))
    });
    for interval in [1u64 << 40, 512 * 1024, 64 * 1024] {
        let s = session(interval);
        assert!(eventpipe_profiler::alloc::is_enabled());
        let name = if interval == 1 << 40 {
            // So large that nothing is sampled: the bookkeeping every allocation and free
            // pays while a session is on.
            "profiled-enabled-unsampled".to_owned()
        } else {
            format!("profiled-enabled-{}k", interval / 1024)
        };
        g.bench_function(name, |b| {
            b.iter(|| common::ring(&PROFILED, black_box(OPS), false))
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

/// Interleaved rounds of `system` and the profiled allocator in its current state
/// (`variant` names it): the median of the per-round ratios, and the ratio of the fastest
/// rounds (what each costs when nothing interferes).
fn interleaved(fill: bool, variant: &str, target: f64) {
    let ops = 200_000;
    let rounds = 101;
    let (mut ratios, mut sys_times, mut prof_times) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let sys = || common::ring(&System, black_box(ops), fill);
        let prof = || common::ring(&PROFILED, black_box(ops), fill);
        let (s, p) = if round % 2 == 0 {
            let s = time(sys);
            (s, time(prof))
        } else {
            let p = time(prof);
            (time(sys), p)
        };
        ratios.push(p.as_secs_f64() / s.as_secs_f64());
        sys_times.push(s);
        prof_times.push(p);
    }
    ratios.sort_by(f64::total_cmp);
    let min = |v: &[Duration]| v.iter().min().copied().unwrap_or_default();
    println!(
        "interleaved {}, {rounds} rounds of {ops} ops: {variant} / system: \
         median ratio {:.4} (quartiles {:.4} .. {:.4}), fastest rounds {:.1} / {:.1} us = {:.4}; \
         target <= {target}",
        if fill {
            "alloc-ring-filled"
        } else {
            "alloc-ring"
        },
        ratios[rounds / 2],
        ratios[rounds / 4],
        ratios[3 * rounds / 4],
        min(&prof_times).as_secs_f64() * 1e6,
        min(&sys_times).as_secs_f64() * 1e6,
        min(&prof_times).as_secs_f64() / min(&sys_times).as_secs_f64(),
    );
}

fn main() {
    eventpipe_profiler::alloc::register();
    // What `criterion_group!`/`criterion_main!` expand to, minus their undocumented `pub fn`.
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    assert!(!eventpipe_profiler::alloc::is_enabled());
    interleaved(false, "profiled-disabled", 1.02);
    interleaved(true, "profiled-disabled", 1.02);
    // Enabled at the default interval: the bookkeeping on every call plus ~1 sample per
    // 512 KiB allocated (the ring allocates ~1.4 KiB per call, so ~550 per round).
    let s = session(512 * 1024);
    interleaved(false, "profiled-enabled-512k", 1.05);
    interleaved(true, "profiled-enabled-512k", 1.05);
    eventpipe_profiler::alloc::flush(Duration::from_secs(5));
    s.stop().expect("stop");
}
