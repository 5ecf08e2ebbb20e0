//! The CPU sampler's overhead: the same fixed amount of work on two threads, run with a
//! session that does not sample (so both sides have eventpipe's drain thread) and with a
//! session sampling at 1 kHz, interleaved round by round (alternating which goes first) so
//! machine noise hits both alike.
//!
//! Two measures per run: wall-clock time, and the CPU time the whole process used meanwhile
//! (`getrusage(RUSAGE_SELF)`: the workers, the sampler's threads and the drain thread). The
//! machine has 2 cores and the two workers fill them, so any CPU the sampler takes shows in
//! both; but the wall clock also moves with whatever else the machine runs, which the
//! process's CPU time does not. Prints the median per-round ratio of each.
//!
//! `cargo bench -p eventpipe-profiler --bench cpu_overhead`

use std::time::{Duration, Instant};

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};

const ROUNDS: usize = 21;
const THREADS: usize = 2;
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

/// Runs the work; returns its wall-clock time and the process's CPU time meanwhile.
fn run_work() -> (Duration, Duration) {
    let cpu = process_cpu_time();
    let start = Instant::now();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut x = t as u64;
                for _ in 0..UNITS {
                    x = unit(x);
                }
                std::hint::black_box(x);
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    (start.elapsed(), process_cpu_time() - cpu)
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
    eventpipe_profiler::cpu::register().expect("install the sampler");
    let path = std::env::temp_dir().join(format!("cpu-overhead-{}.nettrace", std::process::id()));
    let (mut wall_ratios, mut cpu_ratios) = (Vec::new(), Vec::new());
    let (mut plain_wall, mut sampled_wall) = (Vec::new(), Vec::new());
    let mut samples = 0u64;
    run_work(); // warm-up
    for round in 0..ROUNDS {
        let plain = || {
            let s = session("Bench-NoSampler:0:5", &path);
            let t = run_work();
            s.stop().expect("stop the session");
            t
        };
        let mut sampled = || {
            let s = session("EventPipeRs-CpuSampler:0:5:Rate=1000", &path);
            let t = run_work();
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
        wall_ratios.push(s.0.as_secs_f64() / p.0.as_secs_f64());
        cpu_ratios.push(s.1.as_secs_f64() / p.1.as_secs_f64());
        plain_wall.push(p.0.as_secs_f64());
        sampled_wall.push(s.0.as_secs_f64());
    }
    std::fs::remove_file(&path).ok();
    let overhead = |ratio: f64| (ratio - 1.0) * 100.0;
    println!(
        "cpu_overhead: {THREADS} threads x {UNITS} units, {ROUNDS} rounds: median wall without \
         sampler {:.1} ms, with the sampler at 1 kHz {:.1} ms ({} samples per run); median \
         per-round overhead: wall {:+.2}%, process CPU time {:+.2}%",
        median(plain_wall) * 1e3,
        median(sampled_wall) * 1e3,
        samples / ROUNDS as u64,
        overhead(median(wall_ratios)),
        overhead(median(cpu_ratios)),
    );
}
