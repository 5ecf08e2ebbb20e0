//! The `program` workload with `ProfiledAllocator<System>` installed as the global allocator
//! and no session enabling it (registered, so it would start if one did).
//!
//! `cargo bench -p eventpipe-profiler --bench global_system --bench global_profiled`

mod common;

use std::alloc::System;
use std::hint::black_box;

use criterion::Criterion;
use eventpipe_profiler::alloc::ProfiledAllocator;

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

fn bench(c: &mut Criterion) {
    eventpipe_profiler::alloc::register();
    c.bench_function("global/profiled-disabled", |b| {
        b.iter(|| common::program(black_box(2_000)))
    });
}

fn main() {
    // What `criterion_group!`/`criterion_main!` expand to, minus their undocumented `pub fn`.
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    let (fastest, median) = common::program_times_us();
    println!(
        "global/profiled-disabled program(20000): fastest and median of 41 runs {:.1} us {:.1} us",
        fastest, median
    );
}
