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
//! `cargo bench -p eventpipe-profiler --bench cpu_overhead`

mod common;

use std::time::{Duration, Instant};

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};

const ROUNDS: usize = 61;
/// Worker threads unless `CPU_OVERHEAD_THREADS` says otherwise: as many as the machine this
/// was written on has cores, so that the workers fill it.
const DEFAULT_THREADS: usize = 2;
/// Units of work per thread per run (about a quarter of a second in a release build).
const UNITS: u64 = 2_500;

#[inline(never)]
fn unit(mut x: u64) -> u64 {
    for i in 0..20_000u64 {
        x = std::hint::black_box(x.rotate_left(5) ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    x
}

/// User plus system CPU time of the whole process so far.
fn process_cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// One run of the work, three ways.
#[derive(Debug, Clone, Copy)]
struct Run {
    wall: Duration,
    /// The whole process's CPU time meanwhile.
    process_cpu: Duration,
    /// The CPU time of the worker that used the most: its signal handling included, the
    /// time it waited for a core left out.
    worker_cpu: Duration,
}

/// Runs the work.
fn run_work(threads: usize) -> Run {
    let cpu = process_cpu_time();
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut x = t as u64;
                for _ in 0..UNITS {
                    x = unit(x);
                }
                std::hint::black_box(x);
                common::thread_cpu_time()
            })
        })
        .collect();
    let worker_cpu = workers
        .into_iter()
        .map(|w| w.join().unwrap())
        .max()
        .unwrap_or_default();
    Run {
        wall: start.elapsed(),
        process_cpu: process_cpu_time() - cpu,
        worker_cpu,
    }
}

fn session(spec: &str, path: &std::path::Path) -> Session {
    Session::start(SessionConfig::new(
        vec![ProviderConfig::parse(spec).unwrap()],
        Output::File(path.to_owned()),
    ))
    .expect("start a session")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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
    eventpipe_profiler::cpu::register().expect("install the sampler");
    let path = std::env::temp_dir().join(format!("cpu-overhead-{}.nettrace", std::process::id()));
    let (mut wall_ratios, mut cpu_ratios, mut worker_ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut plain_wall, mut sampled_wall) = (Vec::new(), Vec::new());
    let mut samples = 0u64;
    run_work(threads); // warm-up
    for round in 0..ROUNDS {
        let plain = || {
            let s = session("Bench-NoSampler:0:5", &path);
            let t = run_work(threads);
            s.stop().expect("stop the session");
            t
        };
        let mut sampled = || {
            let s = session("EventPipeRs-CpuSampler:0:5:Rate=1000", &path);
            let t = run_work(threads);
            samples += s.stop().expect("stop the session").events_written;
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
    std::fs::remove_file(&path).ok();
    let overhead = |ratio: f64| (ratio - 1.0) * 100.0;
    println!(
        "cpu_overhead: {threads} threads x {UNITS} units, {ROUNDS} rounds: median wall without \
         sampler {:.1} ms, with the sampler at 1 kHz {:.1} ms ({} samples per run); median \
         per-round overhead: wall {:+.2}%, process CPU time {:+.2}%, busiest worker's CPU \
         time {:+.2}%",
        median(plain_wall) * 1e3,
        median(sampled_wall) * 1e3,
        samples / ROUNDS as u64,
        overhead(median(wall_ratios)),
        overhead(median(cpu_ratios)),
        overhead(median(worker_ratios)),
    );
}
