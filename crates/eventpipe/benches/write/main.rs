//! Cost of eventpipe's write path, from the disabled check to sustained file output.
//!
//! * `write/disabled`: `write_event!` of an event no session enables: the relaxed load of
//!   the event's session mask and a branch. Target ≤ 1 ns.
//! * `write/enabled`: one enabled write from one thread, a 16-byte payload (`u64`, `u64`),
//!   to a Drop-mode session with a 1 GiB budget writing to `Output::Stream(io::sink())`.
//!   Target ≤ 25 ns. The drain works at its own pace meanwhile, as in a program.
//! * `write/enabled-quiet`: the same with the drain working only between samples, so the
//!   writer alone is timed.
//! * `write/floor`: what any write must do at least: a clock read
//!   (`eventpipe::clock::now()`) and a copy of the 40-byte record (24-byte header plus the
//!   16-byte payload) into a buffer. `write/clock` is the clock read alone. The enabled cost
//!   is stated as a ratio against the floor from the same run.
//! * `throughput/{1,2}`: aggregate events/s with 1 and 2 threads writing to a session like
//!   `write/enabled-quiet`'s: how the writers scale (on two cores a live drain would take
//!   one of them). The writer threads live for the whole bench and are released together
//!   for each round. Target: 2 threads ≥ 1.7 × 1 thread. The summary also gives the ratio
//!   measured in interleaved pairs of one- and two-thread runs (41 pairs of 10 rounds a
//!   side), which the machine's slow and fast phases hit alike.
//! * Sustained writing (`sustained.rs`, after criterion, labelled "Sustained"): 10 million
//!   events a writer, 1 and 2 writers, without pause, to a nettrace file in Block and Drop
//!   mode, beside the floor measured in the same run, and the highest rate Drop mode keeps
//!   up with losing nothing. The figures above are bursts; these are what a program that
//!   never stops writing sees. `SUSTAINED_PROCESSES=N` runs each sustained case as a
//!   process of its own, N repetitions interleaved, every repetition reported, with what
//!   each case's threads did (`processes.rs`, `threads.rs`).
//!
//! Between samples of `write/enabled*` and `throughput/*`, and within a sample after every
//! 100,000 writes per thread, the bench waits (untimed) for the drain to catch up, so every
//! sample starts from empty buffers and the budget never runs out (the drops each session
//! saw are printed and should be 0), and the writes go into buffers the session recycled:
//! 4 MB of records a round per thread, which stay in the last-level cache. Rounds of a
//! million writes (40 MB) run at the pace of the machine's memory instead, and from fresh
//! pages the kernel must fault in and zero once they outgrow the session's spare buffers;
//! `write_probe` takes the round size, and BENCHMARKS.md gives both.
//!
//! Besides criterion's own report, the bench prints a summary of every sample it timed
//! (warm-up included) that covers at least 100,000 operations: the median and the fastest,
//! with the ratios the targets are stated in, and the share of the machine's CPU time the
//! hypervisor took meanwhile (`/proc/stat` steal). The machine's noise only ever slows a
//! sample, so the fastest is the closest to the code's own cost and the median says how a
//! noisy machine treats it.
//!
//! Run with `cargo bench -p eventpipe --bench write`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use eventpipe::{
    define_event, write_event, BufferingMode, Level, Output, Provider, ProviderConfig, Session,
    SessionConfig, SessionStats,
};

static BENCH: Provider = Provider::new("Bench-Write");
static NOBODY: Provider = Provider::new("Bench-Nobody");

define_event! {
    /// The event every enabled bench writes: 16 bytes of payload.
    static PAIR = BENCH { id: 1, name: "Pair", level: Level::Informational, keywords: 0 }
        (a: u64, b: u64);
}
define_event! {
    /// An event of a provider no session names.
    static NEVER = NOBODY { id: 1, name: "Never", level: Level::Informational, keywords: 0 }
        (a: u64, b: u64);
}

/// The record `write/floor` copies: the writer's 24-byte header plus a 16-byte payload.
const RECORD: usize = 40;
/// The most writes a round times before letting the drain catch up: 4 MB of records.
const WRITES_PER_ROUND: u64 = 100_000;

/// The fewest operations a sample must time to count in the summary. Criterion's warm-up
/// starts from single iterations, which time the clock read around them (and for the
/// throughput benches the threads' release and join) rather than the writes.
const MIN_SAMPLE_OPS: u64 = 100_000;

/// Per-sample figures (ns per operation, or events/s) by bench name, for the summary.
#[derive(Debug, Default)]
struct Samples(RefCell<BTreeMap<&'static str, Vec<f64>>>);

impl Samples {
    /// Records `value`, a figure over `ops` operations, unless they are too few to time.
    fn push(&self, name: &'static str, value: f64, ops: u64) {
        if ops >= MIN_SAMPLE_OPS {
            self.0.borrow_mut().entry(name).or_default().push(value);
        }
    }

    fn sorted(&self, name: &str) -> Option<Vec<f64>> {
        let mut v = self.0.borrow().get(name)?.clone();
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then_some(v)
    }

    fn median(&self, name: &str) -> f64 {
        self.sorted(name).map_or(f64::NAN, |v| v[v.len() / 2])
    }

    /// The fastest sample: the least time per write, or the most events/s. The machine's
    /// noise only ever slows a sample down, so this is the closest to the code's own cost.
    fn best(&self, name: &str) -> f64 {
        self.sorted(name).map_or(f64::NAN, |v| {
            if name.starts_with("write/") {
                v[0]
            } else {
                v[v.len() - 1]
            }
        })
    }
}

/// Times `iters` calls of `f`, records ns per call under `name`.
fn timed<R>(
    samples: &Samples,
    name: &'static str,
    iters: u64,
    mut f: impl FnMut() -> R,
) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        black_box(f());
    }
    let elapsed = start.elapsed();
    samples.push(name, elapsed.as_nanos() as f64 / iters.max(1) as f64, iters);
    elapsed
}

/// Whether the drain works while a sample is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drain {
    /// At its default pace (every 100 ms, or sooner once an eighth of the budget is used): on two
    /// cores it takes one while the writer runs, as in a real program.
    Live,
    /// Only between samples (`catch_up` wakes it): the writers alone are timed.
    BetweenSamples,
}

/// A Drop-mode session on `BENCH` with a 1 GiB budget, writing to `io::sink()`.
fn sink_session(drain: Drain) -> Session {
    let mut config = SessionConfig::new(
        vec![ProviderConfig::new(BENCH.name())],
        Output::Stream(Box::new(std::io::sink())),
    )
    .mode(BufferingMode::Drop)
    .buffer_budget(1 << 30);
    if drain == Drain::BetweenSamples {
        config = config.flush_interval(Duration::from_secs(3600));
    }
    Session::start(config).expect("start the sink session")
}

/// Waits (untimed) until the drain has written or dropped `issued` events.
fn catch_up(session: &Session, issued: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = session.stats();
        if s.events_written + s.events_dropped >= issued {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the drain did not catch up in 60 s: {issued} issued, {s:?}"
        );
        session.flush();
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn report_session(name: &str, stats: &SessionStats) {
    let total = stats.events_written + stats.events_dropped;
    println!(
        "{name}: session wrote {} events, dropped {} ({:.3} %)",
        stats.events_written,
        stats.events_dropped,
        100.0 * stats.events_dropped as f64 / total.max(1) as f64
    );
}

/// (a) to (c): single-thread costs.
fn bench_single(c: &mut Criterion, samples: &Samples) {
    let mut group = c.benchmark_group("write");
    group.throughput(Throughput::Elements(1));

    // The first write registers the event (cold path); after that the mask reads 0.
    write_event!(NEVER, 0u64, 0u64);
    assert!(!NEVER.is_enabled());
    group.bench_function("disabled", |b| {
        b.iter_custom(|iters| {
            timed(samples, "write/disabled", iters, || {
                write_event!(NEVER, black_box(1u64), black_box(2u64));
            })
        })
    });

    for (drain, name, label) in [
        (Drain::Live, "enabled", "write/enabled"),
        (
            Drain::BetweenSamples,
            "enabled-quiet",
            "write/enabled-quiet",
        ),
    ] {
        let session = sink_session(drain);
        let mut issued = 0u64;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                // In rounds, the drain catching up (untimed) after each: the writes land in
                // recycled, cache-resident buffers, as in a program whose drain keeps up
                // (see the module docs).
                let mut elapsed = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let round = left.min(WRITES_PER_ROUND);
                    elapsed += timed(samples, label, round, || {
                        write_event!(PAIR, black_box(1u64), black_box(2u64));
                    });
                    issued += round;
                    catch_up(&session, issued);
                    left -= round;
                }
                elapsed
            })
        });
        let stats = session.stop().expect("stop the sink session");
        report_session(label, &stats);
    }

    let mut buf = vec![0u8; 64 << 10];
    let mut at = 0usize;
    group.bench_function("floor", |b| {
        b.iter_custom(|iters| {
            timed(samples, "write/floor", iters, || {
                let mut record = [0u8; RECORD];
                record[16..24].copy_from_slice(&eventpipe::clock::now().to_le_bytes());
                record[24..32].copy_from_slice(&black_box(1u64).to_le_bytes());
                record[32..40].copy_from_slice(&black_box(2u64).to_le_bytes());
                black_box(&mut buf[at..at + RECORD]).copy_from_slice(&record);
                at = if at + 2 * RECORD > buf.len() {
                    0
                } else {
                    at + RECORD
                };
            })
        })
    });
    group.bench_function("clock", |b| {
        b.iter_custom(|iters| timed(samples, "write/clock", iters, eventpipe::clock::now))
    });
    group.finish();
}

/// Writer threads kept for a whole bench: every round releases them together, and between
/// rounds they stay attached to the session, as a program's threads do. (Spawning fresh
/// threads every round timed each one's first write, which attaches it to the session, and
/// the spawns' skew, not the writes.)
struct WriterPool {
    threads: u64,
    release: Arc<Barrier>,
    finished: Arc<Barrier>,
    /// Writes per thread in the next round; 0 tells the threads to exit. Set before
    /// `release.wait()`, whose lock orders it before the writers read it.
    per_thread: Arc<AtomicU64>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl WriterPool {
    fn new(threads: u64) -> Self {
        let release = Arc::new(Barrier::new(threads as usize + 1));
        let finished = Arc::new(Barrier::new(threads as usize + 1));
        let per_thread = Arc::new(AtomicU64::new(0));
        let handles = (0..threads)
            .map(|t| {
                let (release, finished) = (Arc::clone(&release), Arc::clone(&finished));
                let per_thread = Arc::clone(&per_thread);
                std::thread::spawn(move || loop {
                    release.wait();
                    let n = per_thread.load(Ordering::Relaxed);
                    if n == 0 {
                        return;
                    }
                    for i in 0..n {
                        write_event!(PAIR, t, black_box(i));
                    }
                    finished.wait();
                })
            })
            .collect();
        WriterPool {
            threads,
            release,
            finished,
            per_thread,
            handles,
        }
    }

    /// One round of `per_thread` (not 0) writes on every thread: the time from their
    /// release until the last one finished. The clock starts before the release: a round
    /// too short for this thread to get past the barrier before the writers finish would
    /// otherwise time next to nothing.
    fn round(&self, per_thread: u64) -> Duration {
        self.per_thread.store(per_thread, Ordering::Relaxed);
        let start = Instant::now();
        self.release.wait();
        self.finished.wait();
        start.elapsed()
    }

    /// [`Self::round`], then waits (untimed) until `session`'s drain has caught up with
    /// everything issued so far, which `issued` counts.
    fn round_then_catch_up(
        &self,
        per_thread: u64,
        session: &Session,
        issued: &mut u64,
    ) -> Duration {
        let elapsed = self.round(per_thread);
        *issued += self.threads * per_thread;
        catch_up(session, *issued);
        elapsed
    }
}

impl Drop for WriterPool {
    fn drop(&mut self) {
        self.per_thread.store(0, Ordering::Relaxed);
        self.release.wait();
        for h in self.handles.drain(..) {
            h.join().expect("writer thread");
        }
    }
}

/// (d): aggregate throughput, 1 vs 2 threads.
fn bench_throughput(c: &mut Criterion, samples: &Samples) {
    let mut group = c.benchmark_group("throughput");
    group.sampling_mode(SamplingMode::Flat);
    for (threads, name) in [(1u64, "throughput/1"), (2, "throughput/2")] {
        // How the writers scale: on two cores a live drain would take one of them.
        let session = sink_session(Drain::BetweenSamples);
        let pool = WriterPool::new(threads);
        let mut issued = 0u64;
        group.throughput(Throughput::Elements(threads));
        group.bench_function(threads.to_string(), |b| {
            b.iter_custom(|iters| {
                // In rounds, as for `write/enabled*`, of up to WRITES_PER_ROUND writes per
                // thread: each thread is woken once a round, whatever the thread count.
                let mut elapsed = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let round = left.min(WRITES_PER_ROUND);
                    elapsed += pool.round_then_catch_up(round, &session, &mut issued);
                    left -= round;
                }
                let events = threads * iters;
                samples.push(name, events as f64 / elapsed.as_secs_f64(), events);
                elapsed
            })
        });
        drop(pool);
        let stats = session.stop().expect("stop the sink session");
        report_session(name, &stats);
    }
    group.finish();
}

/// Pairs of the interleaved scaling measurement, and rounds per side of a pair.
const SCALING_PAIRS: usize = 41;
const SCALING_ROUNDS: u64 = 10;

/// (d) again, measured so that the machine's slow and fast phases, which last minutes, hit
/// both sides alike: pairs of one-thread and two-thread runs back to back (alternating which
/// goes first), each of [`SCALING_ROUNDS`] rounds of [`WRITES_PER_ROUND`] events per thread;
/// records each pair's ratio of two-thread to one-thread events/s.
fn bench_interleaved_scaling(samples: &Samples) {
    let session = sink_session(Drain::BetweenSamples);
    let pools = [WriterPool::new(1), WriterPool::new(2)];
    let mut issued = 0u64;
    for pair in 0..SCALING_PAIRS {
        let mut rate = [0.0f64; 2];
        let order = if pair % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let pool = &pools[side];
            let elapsed: Duration = (0..SCALING_ROUNDS)
                .map(|_| pool.round_then_catch_up(WRITES_PER_ROUND, &session, &mut issued))
                .sum();
            let events = SCALING_ROUNDS * WRITES_PER_ROUND * pool.threads;
            rate[side] = events as f64 / elapsed.as_secs_f64();
        }
        samples.push(
            "scaling/interleaved",
            rate[1] / rate[0],
            SCALING_ROUNDS * WRITES_PER_ROUND * 2,
        );
    }
    drop(pools);
    let stats = session.stop().expect("stop the sink session");
    report_session("scaling/interleaved", &stats);
}

fn summary(samples: &Samples) {
    let row = |label: &str, name: &str, scale: f64, unit: &str, note: &str| {
        println!(
            "  {label:<22}{:9.3} {:9.3} {unit:<11}{note}",
            samples.median(name) / scale,
            samples.best(name) / scale
        );
    };
    let ratio = |label: &str, over: &str, under: &str, note: &str| {
        println!(
            "  {label:<22}{:9.2} {:9.2} x          {note}",
            samples.median(over) / samples.median(under),
            samples.best(over) / samples.best(under)
        );
    };
    println!(
        "\nsummary over every timed sample of at least {MIN_SAMPLE_OPS} operations, warm-up \
         included: median, then fastest"
    );
    row(
        "write/disabled",
        "write/disabled",
        1.0,
        "ns",
        "target <= 1 ns",
    );
    row(
        "write/enabled",
        "write/enabled",
        1.0,
        "ns",
        "target <= 25 ns",
    );
    row(
        "write/enabled-quiet",
        "write/enabled-quiet",
        1.0,
        "ns",
        "(the drain idle while timed)",
    );
    row(
        "write/floor",
        "write/floor",
        1.0,
        "ns",
        "(a clock read + a 40-byte copy)",
    );
    row(
        "write/clock",
        "write/clock",
        1.0,
        "ns",
        "(the clock read alone)",
    );
    ratio("enabled / floor", "write/enabled", "write/floor", "");
    ratio(
        "enabled-quiet / floor",
        "write/enabled-quiet",
        "write/floor",
        "",
    );
    row("throughput/1", "throughput/1", 1e6, "M events/s", "");
    row("throughput/2", "throughput/2", 1e6, "M events/s", "");
    ratio(
        "2 threads / 1 thread",
        "throughput/2",
        "throughput/1",
        "target >= 1.7 x",
    );
    if let Some(r) = samples.sorted("scaling/interleaved") {
        println!(
            "  {:<22}{:9.2} x (quartiles {:.2} .. {:.2}, {} pairs) target >= 1.7 x",
            "2 thr / 1, interleaved",
            r[r.len() / 2],
            r[r.len() / 4],
            r[3 * r.len() / 4],
            r.len()
        );
    }
}

/// The machine's CPU time so far, all of it and the part the hypervisor stole, in clock
/// ticks (`/proc/stat`); `None` where there is no such file.
fn cpu_and_steal_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    Some((fields.iter().sum(), *fields.get(7)?))
}

mod processes;
mod sustained;
mod threads;

fn main() {
    if let Some(repetitions) = std::env::var("SUSTAINED_PROCESSES")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        processes::bench(repetitions);
        return;
    }
    if std::env::var_os("SUSTAINED_CASE").is_some() || std::env::var_os("SUSTAINED_ONLY").is_some()
    {
        sustained::bench();
        return;
    }
    // What `criterion_group!`/`criterion_main!` expand to, minus their undocumented `pub fn`.
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let samples = Samples::default();
    let ticks_before = cpu_and_steal_ticks();
    bench_single(&mut c, &samples);
    bench_throughput(&mut c, &samples);
    bench_interleaved_scaling(&samples);
    c.final_summary();
    println!("\nBursts (rounds of {WRITES_PER_ROUND} writes a thread, the drain catching up untimed between):");
    summary(&samples);
    // `cargo bench` passes --bench; `cargo test --benches` does not, and criterion then
    // runs each bench once: the sustained runs are left out of that smoke test.
    if std::env::args().any(|a| a == "--bench") {
        sustained::bench();
    }
    // A VM's host may run something else on this machine's cores meanwhile: every figure
    // above then moves with it, the floor and the disabled check included.
    if let (Some((all0, stolen0)), Some((all1, stolen1))) = (ticks_before, cpu_and_steal_ticks()) {
        let stolen = stolen1.saturating_sub(stolen0);
        let all = all1.saturating_sub(all0).max(1);
        println!(
            "  the hypervisor took {:.1} % of this machine's CPU time during the bench (steal)",
            100.0 * stolen as f64 / all as f64
        );
    }
}
