//! Counter updates: one thread adding to a counter, and two threads adding to the same
//! counter at once, against the same on one shared `AtomicU64` (`fetch_add`, Relaxed),
//! whose cache line moves between the two cores on every add.
//!
//! `cargo bench -p eventpipe --bench counters`. The two-thread figures are ns per add per
//! thread, over 20 million adds each (sustained); the ratio line compares the counter's
//! with the shared atomic's.

#![allow(missing_docs)] // criterion_group! makes an undocumented function

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use eventpipe::{Counter, CounterInfo, Histogram, Provider, UpDownCounter};

static BENCH: Provider = Provider::new("Bench-Counters");
static ADDS: Counter = Counter::new(&BENCH, CounterInfo::new("adds"));
static SHARED_ADDS: Counter = Counter::new(&BENCH, CounterInfo::new("shared-adds"));
static LEVEL: UpDownCounter = UpDownCounter::new(&BENCH, CounterInfo::new("level"));
static LATENCY: Histogram = Histogram::new(&BENCH, CounterInfo::new("latency"));
static PLAIN: AtomicU64 = AtomicU64::new(0);

fn single_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("counters/one-thread");
    g.bench_function("Counter::add", |b| b.iter(|| ADDS.add(black_box(1))));
    g.bench_function("UpDownCounter::add", |b| {
        b.iter(|| LEVEL.add(black_box(-1)))
    });
    g.bench_function("Histogram::record", |b| {
        let mut v = 1.0f64;
        b.iter(|| {
            v = if v > 1e6 { 1.0 } else { v * 1.37 };
            LATENCY.record(black_box(v))
        })
    });
    g.bench_function("AtomicU64::fetch_add", |b| {
        b.iter(|| PLAIN.fetch_add(black_box(1), Ordering::Relaxed))
    });
    g.finish();
}

/// ns per add per thread, `threads` threads doing `adds` each at once.
fn contended<F: Fn(u64) + Copy + Send + 'static>(threads: usize, adds: u64, add: F) -> f64 {
    let barrier = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                add(0); // claim the thread's slot outside the timing
                barrier.wait();
                let start = Instant::now();
                for i in 0..adds {
                    add(black_box(i & 1));
                }
                start.elapsed()
            })
        })
        .collect();
    let total: Duration = workers.into_iter().map(|w| w.join().unwrap()).sum();
    total.as_nanos() as f64 / (threads as u64 * adds) as f64
}

fn two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("counters/two-threads");
    g.sample_size(10);
    const ADDS_EACH: u64 = 20_000_000;
    let counter = |n: u64| SHARED_ADDS.add(n);
    let atomic = |n: u64| {
        PLAIN.fetch_add(n, Ordering::Relaxed);
    };
    let mut ratios = Vec::new();
    g.bench_function("Counter::add, same counter", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let ns = contended(2, ADDS_EACH, counter);
                let shared = contended(2, ADDS_EACH, atomic);
                ratios.push(shared / ns);
                // Reported per add: criterion divides by iters.
                total += Duration::from_secs_f64(ns * 1e-9);
            }
            total
        })
    });
    g.bench_function("AtomicU64::fetch_add, one shared atomic", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                total += Duration::from_secs_f64(contended(2, ADDS_EACH, atomic) * 1e-9);
            }
            total
        })
    });
    g.finish();
    ratios.sort_by(f64::total_cmp);
    if let (Some(lo), Some(hi)) = (ratios.first(), ratios.last()) {
        println!(
            "two threads: the shared atomic takes {:.1}x the counter's time per add (median; {lo:.1}-{hi:.1}x over {} runs)",
            ratios[ratios.len() / 2],
            ratios.len()
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = single_thread, two_threads
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
