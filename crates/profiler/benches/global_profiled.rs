//! The `program` workload with `ProfiledAllocator<System>` installed as the global allocator:
//! with no session enabling it (registered, so it would start if one did), then, interleaved
//! round by round, without and with a session sampling at the default 512 KiB interval.
//!
//! In the interleaved comparison a session recording another provider runs throughout, so
//! both sides run in a process with eventpipe's drain thread alive (glibc's allocator takes
//! a faster path while a process has a single thread; comparing a single-threaded round with
//! a multi-threaded one would measure that, not the profiler).
//!
//! `cargo bench -p eventpipe-profiler --bench global_system --bench global_profiled`

mod common;

use std::alloc::System;
use std::hint::black_box;
use std::time::Duration;

use criterion::Criterion;
use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_profiler::alloc::ProfiledAllocator;

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

fn bench(c: &mut Criterion) {
    eventpipe_profiler::alloc::register();
    c.bench_function("global/profiled-disabled", |b| {
        b.iter(|| common::program(black_box(2_000)))
    });
}

fn session(spec: &str) -> Session {
    Session::start(SessionConfig::new(
        vec![ProviderConfig::parse(spec).expect("provider spec")],
        Output::Stream(Box::new(std::io::sink())),
    ))
    .expect("session")
}

fn time_program() -> Duration {
    let start = common::thread_cpu_time();
    black_box(common::program(black_box(20_000)));
    common::thread_cpu_time() - start
}

/// 61 rounds, each timing `program(20_000)` (the main thread's CPU time) without and with a
/// session on `EventPipeRs-Allocations` (alternating which goes first): the median
/// per-round ratio and the ratio of the fastest rounds.
fn interleaved_enabled() {
    let _background = session("Bench-Background:0:5");
    let rounds = 61;
    let (mut ratios, mut off, mut on) = (Vec::new(), Vec::new(), Vec::new());
    let mut samples = 0;
    for round in 0..rounds {
        let enabled = || {
            let s = session("EventPipeRs-Allocations:0:5");
            assert!(eventpipe_profiler::alloc::is_enabled());
            // Let the session's drain thread and the profiler's emitter start and settle
            // first: their start-up is not the profiler's cost per allocation.
            std::thread::sleep(Duration::from_millis(20));
            let before = eventpipe_profiler::alloc::stats().samples;
            let t = time_program();
            let taken = eventpipe_profiler::alloc::stats().samples - before;
            eventpipe_profiler::alloc::flush(Duration::from_secs(5));
            s.stop().expect("stop");
            (t, taken)
        };
        let disabled = || {
            std::thread::sleep(Duration::from_millis(20));
            time_program()
        };
        let (d, (e, taken)) = if round % 2 == 0 {
            let d = disabled();
            (d, enabled())
        } else {
            let e = enabled();
            (disabled(), e)
        };
        samples += taken;
        ratios.push(e.as_secs_f64() / d.as_secs_f64());
        off.push(d);
        on.push(e);
    }
    ratios.sort_by(f64::total_cmp);
    let min = |v: &[Duration]| v.iter().min().copied().unwrap_or_default();
    println!(
        "interleaved program(20000), {rounds} rounds, thread CPU time: \
         profiled-enabled-512k / profiled-disabled: median ratio {:.4} (quartiles {:.4} .. {:.4}), fastest rounds {:.1} / {:.1} us = {:.4}, \
         {:.1} samples per enabled round; target <= 1.05",
        ratios[rounds / 2],
        ratios[rounds / 4],
        ratios[3 * rounds / 4],
        min(&on).as_secs_f64() * 1e6,
        min(&off).as_secs_f64() * 1e6,
        min(&on).as_secs_f64() / min(&off).as_secs_f64(),
        samples as f64 / rounds as f64,
    );
}

fn main() {
    common::bench_and_time_program("global/profiled-disabled", bench);
    interleaved_enabled();
}
