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
    // What `criterion_group!`/`criterion_main!` expand to, minus their undocumented `pub fn`.
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    let (fastest, median) = common::program_times_us();
    println!(
        "global/system program(20000): fastest and median of 41 runs {:.1} us {:.1} us",
        fastest, median
    );
}
