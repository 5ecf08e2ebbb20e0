//! What off-CPU stacks (`OffCpu=1`) cost beside the CPU sampler alone: a program whose
//! threads keep waiting, the case the probes are paid for.
//!
//! The workload is a ring of `THREADS` threads passing a token: each waits for it on a
//! channel, does a unit of work (about 100 µs), and hands it on, for `HOPS` hops in all. Every
//! thread runs, then waits a short while, again and again, so at every collector visit each
//! has run since the last one and is probed anew: the most probes the collector sends (one
//! per thread per 10 ms). A thread that waits long costs one probe per wait, far less.
//!
//! Three sessions per round, in an order that rotates each round so that machine noise hits
//! them alike: one that samples nothing (every run has eventpipe's drain thread), the CPU
//! sampler at 1 kHz, and the CPU sampler at 1 kHz with off-CPU stacks. Printed: the median
//! per-round ratio of wall time and of the process's CPU time for each sampled session
//! against the unsampled one, and for off-CPU stacks against the sampler alone; and, from
//! each off-CPU trace, the off-CPU time it attributed to a stack against all the off-CPU
//! time it wrote, so that a probe that quietly stopped answering cannot pass for a cheap one.
//!
//! `cargo bench -p eventpipe-profiler --bench offcpu_overhead`

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_profiler::cpu;
use nettrace::TraceReader;

const ROUNDS: usize = 31;
/// Threads in the ring by default: several per core of the 2-core machine this was written
/// on. `OFFCPU_THREADS=N` sets another (more than the probes one visit sends, 4, shows
/// their bound at work).
const THREADS: usize = 8;

fn threads() -> usize {
    std::env::var("OFFCPU_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n >= 1)
        .unwrap_or(THREADS)
}
/// Hand-offs per run: one thread runs at a time, about 0.4 s of work at ~100 µs a unit.
const HOPS: u64 = 4_000;

/// The ring's threads, alive across runs: a run sends the token in and waits for it to
/// come back after `HOPS` hops.
struct Ring {
    first: mpsc::Sender<u64>,
    back: mpsc::Receiver<u64>,
}

impl Ring {
    fn new() -> Ring {
        let (first, mut rx) = mpsc::channel::<u64>();
        let (back_tx, back) = mpsc::channel();
        let threads = threads();
        for i in 0..threads {
            let (tx, next_rx) = mpsc::channel::<u64>();
            let last = i + 1 == threads;
            let back_tx = back_tx.clone();
            let first = first.clone();
            let my_rx = std::mem::replace(&mut rx, next_rx);
            // Detached: they end with the process.
            std::thread::spawn(move || {
                while let Ok(token) = my_rx.recv() {
                    let hops = token >> 32;
                    let x = common::unit(token & 0xFFFF_FFFF) & 0xFFFF_FFFF;
                    let token = ((hops + 1) << 32) | x;
                    let sent = if hops + 1 >= HOPS {
                        back_tx.send(token)
                    } else if last {
                        first.send(token)
                    } else {
                        tx.send(token)
                    };
                    if sent.is_err() {
                        return;
                    }
                }
            });
        }
        Ring { first, back }
    }

    /// One run: wall time and the process's CPU time.
    fn run(&self) -> (Duration, Duration) {
        let cpu = common::process_cpu_time();
        let start = Instant::now();
        self.first.send(1).unwrap();
        std::hint::black_box(self.back.recv().unwrap());
        (start.elapsed(), common::process_cpu_time() - cpu)
    }
}

fn session(spec: &str, path: &std::path::Path) -> Session {
    Session::start(SessionConfig::new(
        vec![ProviderConfig::parse(spec).unwrap()],
        Output::File(path.to_owned()),
    ))
    .expect("start a session")
}

/// Off-CPU nanoseconds the trace at `path` wrote: (with a stack, in all).
fn off_cpu_ns(path: &std::path::Path) -> (u64, u64) {
    let bytes = std::fs::read(path).expect("read the trace");
    let mut reader = TraceReader::from_slice(&bytes).expect("a trace");
    let (mut with_stack, mut all) = (0, 0);
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
        let ns = field("Periods") * field("PeriodNs");
        let state = field("State");
        // Blocked samples with a stack are CPU time caught in a system call, not off-CPU.
        let stackless = e.stack.is_none_or(<[u8]>::is_empty);
        if state == u64::from(cpu::STATE_WAITING) {
            with_stack += ns;
            all += ns;
        } else if state == u64::from(cpu::STATE_BLOCKED) && stackless {
            all += ns;
        }
    }
    (with_stack, all)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("offcpu_overhead: bench");
        return;
    }
    cpu::register().expect("install the sampler");
    let path =
        std::env::temp_dir().join(format!("offcpu-overhead-{}.nettrace", std::process::id()));
    let specs = [
        "Bench-NoSampler:0:5".to_owned(),
        format!("{}:0:5:Rate=1000", cpu::PROVIDER_NAME),
        format!("{}:0:5:Rate=1000;OffCpu=1", cpu::PROVIDER_NAME),
    ];
    let ring = Ring::new();
    ring.run(); // warm-up
    let mut walls: [Vec<f64>; 3] = Default::default();
    let mut cpus: [Vec<f64>; 3] = Default::default();
    let (mut with_stack, mut off_all) = (0u64, 0u64);
    let mut ratios: [Vec<f64>; 6] = Default::default();
    for round in 0..ROUNDS {
        let mut runs = [(Duration::ZERO, Duration::ZERO); 3];
        for k in 0..3 {
            let which = (round + k) % 3;
            let s = session(&specs[which], &path);
            runs[which] = ring.run();
            s.stop().expect("stop the session");
            if which == 2 {
                let (stacked, all) = off_cpu_ns(&path);
                with_stack += stacked;
                off_all += all;
            }
        }
        for (which, &(wall, cpu)) in runs.iter().enumerate() {
            walls[which].push(wall.as_secs_f64());
            cpus[which].push(cpu.as_secs_f64());
        }
        let ratio = |a: usize, b: usize, cpu: bool| {
            let pick = |r: (Duration, Duration)| if cpu { r.1 } else { r.0 };
            pick(runs[a]).as_secs_f64() / pick(runs[b]).as_secs_f64()
        };
        for (i, (a, b)) in [(1, 0), (2, 0), (2, 1)].into_iter().enumerate() {
            ratios[i].push(ratio(a, b, false));
            ratios[i + 3].push(ratio(a, b, true));
        }
    }
    std::fs::remove_file(&path).ok();
    let pct = |v: &Vec<f64>| (common::median(v.clone()) - 1.0) * 100.0;
    println!(
        "offcpu_overhead: a ring of {} threads, {HOPS} hops a run, {ROUNDS} rounds; \
         median wall: unsampled {:.1} ms, CPU sampler {:.1} ms, with off-CPU stacks {:.1} ms",
        threads(),
        common::median(walls[0].clone()) * 1e3,
        common::median(walls[1].clone()) * 1e3,
        common::median(walls[2].clone()) * 1e3,
    );
    println!(
        "  median per-round overhead, wall / process CPU time: CPU sampler {:+.2}% / {:+.2}%; \
         with off-CPU stacks {:+.2}% / {:+.2}%; off-CPU stacks over the sampler alone {:+.2}% / \
         {:+.2}%",
        pct(&ratios[0]),
        pct(&ratios[3]),
        pct(&ratios[1]),
        pct(&ratios[4]),
        pct(&ratios[2]),
        pct(&ratios[5]),
    );
    println!(
        "  off-CPU time written with its stack: {:.1}% of {:.2} s per run",
        with_stack as f64 * 100.0 / off_all.max(1) as f64,
        off_all as f64 / 1e9 / ROUNDS as f64,
    );
}
