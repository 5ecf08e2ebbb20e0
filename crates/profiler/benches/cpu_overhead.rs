//! The CPU sampler's overhead: the same fixed amount of work on two threads (or
//! `CPU_OVERHEAD_THREADS`), run with a session that does not sample (so both sides have
//! eventpipe's drain thread) and with a session sampling at 1 kHz, interleaved round by round
//! (alternating which goes first) so machine noise hits both alike.
//!
//! Three measures per run: wall-clock time; the CPU time the whole process used meanwhile
//! (`getrusage(RUSAGE_SELF)`: the workers, the sampler's threads and the drain thread); and
//! the CPU time of the busiest worker, which includes its own signal handling and leaves out
//! the time it waited for a core. The machine has 2 cores and the two workers fill them, so
//! any CPU the sampler takes shows in the first two; but the wall clock also moves with
//! whatever else the machine runs and with how the scheduler places the workers when
//! another thread wakes, which the CPU times do not. Prints the median per-round ratio of
//! each.
//!
//! With one worker (`CPU_OVERHEAD_THREADS=1`) a core stays free for the sampler's and the
//! session's threads, as on a machine with more cores than busy threads; then the wall clock
//! shows what the sampling costs the worker itself (its signals and stack walks) without the
//! preemptions a saturated machine adds.
//!
//! Two ways the workers meet the session, each measured in its own pass:
//! * **started under the session**: each run spawns its workers right after the session
//!   starts, so thread start-up and the sampler's noticing new threads are in every run;
//! * **running before the session**: the workers live across runs, each run tells them to
//!   do the work once, as a program's threads do while `eptrace collect` attaches to it
//!   (and the demo's).
//!
//! Each sampled run's trace is read back: the running periods its `Sample` events stand for
//! are printed next to what the workers' wall time at the rate would give, so a sampler that
//! quietly stopped sampling cannot pass for a cheap one.
//!
//! `cargo bench -p eventpipe-profiler --bench cpu_overhead`

mod common;

use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_profiler::cpu;
use nettrace::TraceReader;

const ROUNDS: usize = 61;
/// Worker threads unless `CPU_OVERHEAD_THREADS` says otherwise: as many as the machine this
/// was written on has cores, so that the workers fill it.
const DEFAULT_THREADS: usize = 2;
/// Units of work per thread per run (about a quarter of a second in a release build).
const UNITS: u64 = 2_500;
const RATE_HZ: u32 = 1000;

/// One run of the work, three ways.
#[derive(Debug, Clone, Copy)]
struct Run {
    wall: Duration,
    /// The whole process's CPU time meanwhile.
    process_cpu: Duration,
    /// The CPU time of the worker that used the most: its signal handling included, the
    /// time it waited for a core left out.
    worker_cpu: Duration,
    /// All workers' CPU time: what their CPU timers count.
    workers_cpu: Duration,
}

/// One worker's share of a run: the work, and the CPU time the calling thread spent on it.
fn work(seed: u64) -> Duration {
    let before = common::thread_cpu_time();
    let mut x = seed;
    for _ in 0..UNITS {
        x = common::unit(x);
    }
    std::hint::black_box(x);
    common::thread_cpu_time() - before
}

/// Times `f`, which runs the work and returns each worker's CPU time.
fn measure(f: impl FnOnce() -> Vec<Duration>) -> Run {
    let cpu = common::process_cpu_time();
    let start = Instant::now();
    let workers = f();
    Run {
        wall: start.elapsed(),
        process_cpu: common::process_cpu_time() - cpu,
        worker_cpu: workers.iter().copied().max().unwrap_or_default(),
        workers_cpu: workers.iter().sum(),
    }
}

/// Where the workers come from.
enum Workers {
    /// Spawned for each run.
    Spawned(usize),
    /// Alive across runs: each waits at `start`, works, and sends its CPU time.
    Running {
        start: Arc<Barrier>,
        done: mpsc::Receiver<Duration>,
        count: usize,
    },
}

impl Workers {
    fn running(count: usize) -> Self {
        let start = Arc::new(Barrier::new(count + 1));
        let (tx, done) = mpsc::channel();
        for t in 0..count {
            let (start, tx) = (Arc::clone(&start), tx.clone());
            // Detached: they end with the process.
            std::thread::spawn(move || loop {
                start.wait();
                if tx.send(work(t as u64)).is_err() {
                    return;
                }
            });
        }
        Workers::Running { start, done, count }
    }

    fn run(&self) -> Run {
        match self {
            Workers::Spawned(count) => measure(|| {
                let workers: Vec<_> = (0..*count as u64)
                    .map(|t| std::thread::spawn(move || work(t)))
                    .collect();
                workers.into_iter().map(|w| w.join().unwrap()).collect()
            }),
            Workers::Running { start, done, count } => measure(|| {
                start.wait();
                (0..*count).map(|_| done.recv().unwrap()).collect()
            }),
        }
    }

    fn describe(&self) -> &'static str {
        match self {
            Workers::Spawned(_) => "started under the session",
            Workers::Running { .. } => "running before the session",
        }
    }
}

fn session(spec: &str, path: &std::path::Path) -> Session {
    Session::start(SessionConfig::new(
        vec![ProviderConfig::parse(spec).unwrap()],
        Output::File(path.to_owned()),
    ))
    .expect("start a session")
}

/// The running periods (1/rate of CPU time) the trace's `Sample` events stand for.
fn running_periods(path: &std::path::Path) -> u64 {
    let bytes = std::fs::read(path).expect("read the trace");
    let mut reader = TraceReader::from_slice(&bytes).expect("a trace");
    let mut periods = 0;
    while let Some(e) = reader.next_event().expect("a well-formed trace") {
        if e.metadata.provider != cpu::PROVIDER_NAME {
            continue;
        }
        let fields = e.decode_payload().expect("a Sample payload");
        let field = |name: &str| {
            fields
                .iter()
                .find(|(n, _)| *n == name)
                .and_then(|(_, v)| v.as_u64())
                .unwrap_or_else(|| panic!("Sample without {name}"))
        };
        if field("State") == u64::from(cpu::STATE_RUNNING) {
            periods += field("Periods");
        }
    }
    periods
}

/// Runs the rounds with `workers` and prints the medians.
fn bench(workers: &Workers, threads: usize, path: &std::path::Path) {
    let (mut wall_ratios, mut cpu_ratios, mut worker_ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut plain_wall, mut sampled_wall) = (Vec::new(), Vec::new());
    let (mut events, mut periods, mut workers_cpu) = (0u64, 0u64, Duration::ZERO);
    workers.run(); // warm-up
    for round in 0..ROUNDS {
        let plain = || {
            let s = session("Bench-NoSampler:0:5", path);
            let t = workers.run();
            s.stop().expect("stop the session");
            t
        };
        let mut sampled = || {
            let s = session(&format!("{}:0:5:Rate={RATE_HZ}", cpu::PROVIDER_NAME), path);
            let t = workers.run();
            events += s.stop().expect("stop the session").events_written;
            periods += running_periods(path);
            workers_cpu += t.workers_cpu;
            t
        };
        let (p, s) = if round % 2 == 0 {
            let p = plain();
            (p, sampled())
        } else {
            let s = sampled();
            (plain(), s)
        };
        let ratio = |f: fn(&Run) -> Duration| f(&s).as_secs_f64() / f(&p).as_secs_f64();
        wall_ratios.push(ratio(|r| r.wall));
        cpu_ratios.push(ratio(|r| r.process_cpu));
        worker_ratios.push(ratio(|r| r.worker_cpu));
        plain_wall.push(p.wall.as_secs_f64());
        sampled_wall.push(s.wall.as_secs_f64());
    }
    let overhead = |ratio: f64| (ratio - 1.0) * 100.0;
    let rounds = ROUNDS as u64;
    // What the workers' timers count; a little of each spawned worker's start comes before
    // the collector arms its timer.
    let expected = workers_cpu.as_secs_f64() * f64::from(RATE_HZ) / ROUNDS as f64;
    println!(
        "cpu_overhead, workers {}: {threads} threads x {UNITS} units, {ROUNDS} rounds: median \
         wall without sampler {:.1} ms, with the sampler at {RATE_HZ} Hz {:.1} ms; per sampled \
         run {} events, {} running periods (the workers' CPU time x rate: {expected:.0}); median \
         per-round overhead: wall {:+.2}%, process CPU time {:+.2}%, busiest worker's CPU \
         time {:+.2}%",
        workers.describe(),
        common::median(plain_wall) * 1e3,
        common::median(sampled_wall) * 1e3,
        events / rounds,
        periods / rounds,
        overhead(common::median(wall_ratios)),
        overhead(common::median(cpu_ratios)),
        overhead(common::median(worker_ratios)),
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("cpu_overhead: bench");
        return;
    }
    let threads = match std::env::var("CPU_OVERHEAD_THREADS") {
        Ok(v) => v
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .expect("CPU_OVERHEAD_THREADS: a number of threads, at least 1"),
        Err(_) => DEFAULT_THREADS,
    };
    cpu::register().expect("install the sampler");
    let path = std::env::temp_dir().join(format!("cpu-overhead-{}.nettrace", std::process::id()));
    bench(&Workers::Spawned(threads), threads, &path);
    bench(&Workers::running(threads), threads, &path);
    std::fs::remove_file(&path).ok();
}
