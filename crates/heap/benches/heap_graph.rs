//! Heap graph build and dominators on a generated heap: `HeapGraphBuilder::finish` (ids
//! checked, edges laid out as CSR) plus `heap::dominators` (immediate dominators and
//! retained sizes), timed together on one thread.
//!
//! The generated heap: 10 M objects and 30 M references by default, deterministic (a fixed
//! seed). Object `i` is referenced by a random earlier object (a random recursive tree from
//! the root, so almost everything is reachable), and 20 M more references join random
//! objects. The last 1 % of the objects form an island that refers to the rest but that
//! nothing reachable refers to, so they are unreachable. Sizes are 16 to 1024 bytes in steps
//! of 8, types one of 1000. With `HEAP_GRAPH_ORDER=walk` (the default) the references reach
//! the builder grouped by their source, as a heap walk delivers them (`GC/BulkNode` gives
//! each object's count, its edges follow), so `finish` keeps them as they come; with
//! `generated` they come in generation order and `finish` sorts them.
//!
//! Generating the builder's input is not timed. Criterion reports the time per
//! build-plus-dominators and objects/s; after it the bench prints every run's time
//! (min/median/max), the two phases' medians, objects/s at the median and the fastest run,
//! the thread's CPU time over the same span (what a run costs without the time other
//! processes held the core), and the process's peak RSS (`VmHWM` of `/proc/self/status`), which covers the largest
//! builder, graph and dominators the runs held.
//!
//! `HEAP_GRAPH_SHAPE=local` makes the heap look like one a program allocated: an object's
//! referrer is, 15 times in 16, one of the 256 objects allocated just before it, and an extra
//! reference, 7 times in 8, joins objects allocated within 256 of each other (containers
//! and their elements are allocated together); the rest stay uniform. The default, `random`,
//! is the worst case for memory locality.
//!
//! `cargo bench -p eventpipe-heap --bench heap_graph`; `HEAP_GRAPH_NODES` (default
//! 10000000) and `HEAP_GRAPH_EDGES` (default 3 × nodes) set the size, e.g.
//! `HEAP_GRAPH_NODES=100000` for a smoke run.

use std::cell::RefCell;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use eventpipe_heap::{dominators, HeapGraphBuilder, TypeId};

const TYPES: u32 = 1000;
const SEED: u64 = 0x5e_ed0f_4ea9;

/// splitmix64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`hi > lo`), by multiply-shift.
    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (((self.next() >> 32) * u64::from(hi - lo)) >> 32) as u32
    }
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| {
        v.replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}: a count, not {v:?}"))
    })
}

/// How far apart allocation puts the objects a `local` heap's references join.
const WINDOW: u32 = 256;

/// The builder of the generated heap: `nodes` objects besides the root, `edges` references;
/// `local`: references mostly join objects allocated close together.
///
/// `walk`: the references reach the builder grouped by their source, as a heap walk gives
/// them (each object with its references); otherwise in generation order.
fn generate(nodes: u32, edges: u64, local: bool, walk: bool) -> HeapGraphBuilder {
    let mut rng = Rng(SEED);
    let mut b = HeapGraphBuilder::new();
    let mut walked: Vec<(u32, u32)> = Vec::new();
    if walk {
        walked.reserve(edges as usize);
    }
    let mut add_edge = |b: &mut HeapGraphBuilder, from: u32, to: u32| {
        if walk {
            walked.push((from, to));
        } else {
            b.add_edge(from, to);
        }
    };
    b.reserve(nodes as usize, edges as usize);
    let types: Vec<TypeId> = (0..TYPES)
        .map(|t| b.add_type(&format!("Type{t}")))
        .collect();
    let count = nodes + 1; // with the root
    let island = count - nodes / 100;
    // References beyond the spanning ones, spread evenly over the objects.
    let extra = edges.saturating_sub(u64::from(nodes));
    let mut extra_added = 0u64;
    for i in 1..count {
        let ty = types[rng.range(0, TYPES) as usize];
        let n = b.add_node(16 + 8 * u64::from(rng.range(0, 127)), ty);
        debug_assert_eq!(n, i);
        if i < island {
            let near = local && i > WINDOW && rng.range(0, 16) != 0;
            let from = if near {
                rng.range(i - WINDOW, i)
            } else {
                rng.range(0, i)
            };
            add_edge(&mut b, from, i);
        } else if i > island {
            add_edge(&mut b, rng.range(island, i), i);
        } else {
            add_edge(&mut b, rng.range(island, count), i); // the island's first object
        }
        let due = extra * u64::from(i) / u64::from(nodes);
        while extra_added < due {
            let from = rng.range(1, count);
            // Only the island may refer into the island.
            let (lo, hi) = if from < island {
                (1, island)
            } else {
                (1, count)
            };
            let to = if local && rng.range(0, 8) != 0 {
                rng.range(from.saturating_sub(WINDOW).max(lo), (from + WINDOW).min(hi))
            } else {
                rng.range(lo, hi)
            };
            add_edge(&mut b, from, to);
            extra_added += 1;
        }
    }
    // Not timed: the order a heap walk would have delivered them in.
    walked.sort_unstable_by_key(|&(from, _)| from);
    for (from, to) in walked {
        b.add_edge(from, to);
    }
    b
}

/// One run's timings of the two phases, and the CPU time this thread had in both.
#[derive(Clone, Copy)]
struct Run {
    finish: Duration,
    dominators: Duration,
    cpu: Option<Duration>,
}

/// The time this thread has spent on a CPU (the first field of
/// `/proc/thread-self/schedstat`, in ns): unlike wall time, it leaves out the time other
/// processes held the core, though not what they cost its caches.
fn thread_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(
        stat.split_whitespace().next()?.parse().ok()?,
    ))
}

impl Run {
    fn total(&self) -> Duration {
        self.finish + self.dominators
    }
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let nodes = env_count("HEAP_GRAPH_NODES", 10_000_000);
    let nodes = u32::try_from(nodes).expect("HEAP_GRAPH_NODES fits 32 bits");
    let edges = env_count("HEAP_GRAPH_EDGES", 3 * nodes as usize) as u64;
    assert!(nodes >= 100, "HEAP_GRAPH_NODES: at least 100");
    let shape = std::env::var("HEAP_GRAPH_SHAPE").unwrap_or_else(|_| "random".into());
    let order = std::env::var("HEAP_GRAPH_ORDER").unwrap_or_else(|_| "walk".into());
    let walk = match order.as_str() {
        "walk" => true,
        "generated" => false,
        other => panic!("HEAP_GRAPH_ORDER: walk or generated, not {other:?}"),
    };
    let local = match shape.as_str() {
        "random" => false,
        "local" => true,
        other => panic!("HEAP_GRAPH_SHAPE: random or local, not {other:?}"),
    };

    let runs: RefCell<Vec<Run>> = RefCell::new(Vec::new());
    let mut reachable = 0;
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();
    {
        let mut group = criterion.benchmark_group("heap_graph");
        // Every sample one run: a run takes seconds.
        group.sampling_mode(SamplingMode::Flat);
        group.throughput(Throughput::Elements(u64::from(nodes) + 1));
        group.bench_function(
            format!("finish+dominators/{shape}/{order}/{nodes}n/{edges}e"),
            |bencher| {
                bencher.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let builder = generate(nodes, edges, local, walk);
                        let cpu_start = thread_cpu_time();
                        let start = Instant::now();
                        let graph = builder.finish().expect("a valid graph");
                        let built = Instant::now();
                        let doms = dominators(&graph);
                        let done = Instant::now();
                        let cpu_done = thread_cpu_time();
                        reachable = black_box(doms.reachable_count());
                        black_box(doms.retained(graph.root()));
                        let run = Run {
                            finish: built - start,
                            dominators: done - built,
                            cpu: cpu_start.zip(cpu_done).map(|(a, b)| b.saturating_sub(a)),
                        };
                        total += run.total();
                        runs.borrow_mut().push(run);
                        // Both dropped here, before the next run's builder is generated.
                        drop(doms);
                        drop(graph);
                    }
                    total
                });
            },
        );
        group.finish();
    }

    let runs = runs.into_inner();
    if runs.is_empty() {
        return; // filtered out
    }
    let totals: Vec<Duration> = runs.iter().map(Run::total).collect();
    let min = *totals.iter().min().unwrap();
    let max = *totals.iter().max().unwrap();
    let med = median(totals);
    let objects = f64::from(nodes) + 1.0;
    println!(
        "heap_graph ({shape}, {order} order): {} objects ({} reachable), {} references; {} runs (warm-up included)",
        nodes + 1,
        reachable,
        edges,
        runs.len()
    );
    println!(
        "  finish+dominators: min {:.3} s, median {:.3} s, max {:.3} s",
        min.as_secs_f64(),
        med.as_secs_f64(),
        max.as_secs_f64()
    );
    println!(
        "  median phases: finish {:.3} s, dominators {:.3} s",
        median(runs.iter().map(|r| r.finish).collect()).as_secs_f64(),
        median(runs.iter().map(|r| r.dominators).collect()).as_secs_f64()
    );
    println!(
        "  objects/s: {:.2} M at the median, {:.2} M at the fastest run",
        objects / med.as_secs_f64() / 1e6,
        objects / min.as_secs_f64() / 1e6
    );
    let cpu: Option<Vec<Duration>> = runs.iter().map(|r| r.cpu).collect();
    if let Some(cpu) = cpu {
        let fastest = *cpu.iter().min().unwrap();
        let med = median(cpu);
        println!(
            "  thread CPU time: median {:.3} s ({:.2} M objects/s), min {:.3} s ({:.2} M objects/s)",
            med.as_secs_f64(),
            objects / med.as_secs_f64() / 1e6,
            fastest.as_secs_f64(),
            objects / fastest.as_secs_f64() / 1e6
        );
    }
    match peak_rss_kib() {
        Some(kib) => println!(
            "  peak RSS (VmHWM, whole process): {:.0} MiB",
            kib as f64 / 1024.0
        ),
        None => println!("  peak RSS: /proc/self/status has no VmHWM"),
    }
}
