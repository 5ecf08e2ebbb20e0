//! The `program` workload through the default (system) global allocator: the baseline for
//! `global_profiled`.
//!
//! `cargo bench -p eventpipe-profiler --bench global_system --bench global_profiled`

mod common;

use std::hint::black_box;

use criterion::Criterion;

fn bench(c: &mut Criterion) {
    c.bench_function("global/system", |b| {
        b.iter(|| common::program(black_box(2_000)))
    });
}

fn main() {
    common::bench_and_time_program("global/system", bench);
}
