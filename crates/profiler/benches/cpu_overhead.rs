//! The CPU sampler's overhead: the same fixed amount of work on two threads, timed without
//! a session and with a session sampling at 1 kHz, interleaved round by round so machine
//! noise hits both alike; prints the median of each and the overhead.
//!
//! `cargo bench -p eventpipe-profiler --bench cpu_overhead`

use std::time::{Duration, Instant};

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};

const ROUNDS: usize = 15;
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

fn run_work() -> Duration {
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
    start.elapsed()
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("cpu_overhead: bench");
        return;
    }
    eventpipe_profiler::cpu::register().expect("install the sampler");
    let path = std::env::temp_dir().join(format!("cpu-overhead-{}.nettrace", std::process::id()));
    let (mut plain, mut sampled) = (Vec::new(), Vec::new());
    let mut samples = 0u64;
    run_work(); // warm-up
    for _ in 0..ROUNDS {
        plain.push(run_work());
        let session = Session::start(SessionConfig::new(
            vec![ProviderConfig::parse("EventPipeRs-CpuSampler:0:5:Rate=1000").unwrap()],
            Output::File(path.clone()),
        ))
        .expect("start a session");
        sampled.push(run_work());
        samples += session.stop().expect("stop the session").events_written;
    }
    std::fs::remove_file(&path).ok();
    let (p, s) = (median(&mut plain), median(&mut sampled));
    let overhead = (s.as_secs_f64() / p.as_secs_f64() - 1.0) * 100.0;
    println!(
        "cpu_overhead: {THREADS} threads x {UNITS} units, {ROUNDS} rounds: median without session {:.1} ms, \
         with the sampler at 1 kHz {:.1} ms ({} samples per run): overhead {overhead:+.2}%",
        p.as_secs_f64() * 1e3,
        s.as_secs_f64() * 1e3,
        samples / ROUNDS as u64
    );
}
