//! A program to compare two builds of: two worker threads each run three stages, `stage_a`,
//! `stage_b` and `stage_c`, on a fixed schedule of 10 rounds a second (each round's stages,
//! then a sleep to the next tick), so each stage's CPU time per second is set by its own
//! work alone. Each stage runs several milliseconds (about 10, 20 and 10 in a debug
//! build), longer than a scheduler tick: a CPU-time sampler's signals arrive on ticks.
//! Each round starts at a random offset (up to 10 ms, a tick at the slowest kernel clock)
//! past its tick of the schedule: the schedule's 100 ms is a whole number of scheduler
//! ticks, so without the offset every round would meet the ticks at the same point, and a
//! sample that falls just past a stage's end, carrying the CPU time back to the tick
//! before, would move the same slice of one stage into the next in every round (a bias of
//! up to 20 % of a stage, fixed for the whole run, instead of an error that averages out).
//! `--slow-b` doubles `stage_b`'s work, as a change that made it twice as slow would; the
//! other stages are unchanged.
//!
//! It measures itself: at the end it prints, per stage, the CPU time its threads spent in
//! it (`CLOCK_THREAD_CPUTIME_ID` around each call) per second of its work (from the first
//! stage's start to the last one's end, as a profile's duration runs from its first sample
//! to its last), the truth that `eptrace diff` of two runs is held against.
//!
//! Stdout: `pid N`, `ready`, and at the end `stage_a_ms_per_s X` and `stage_a_ms X` (the
//! whole run's), and b's and c's.
//!
//! ```sh
//! eptrace collect --profile cpu-sampling -o base.nettrace -- diff-demo --seconds 3
//! eptrace collect --profile cpu-sampling -o new.nettrace -- diff-demo --seconds 3 --slow-b
//! eptrace diff base.nettrace new.nettrace
//! ```

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The schedule: a round every 100 ms.
const TICK: Duration = Duration::from_millis(100);
/// A stage's unit of work (xorshift rounds).
const WORK: u32 = 5_000_000;

/// CPU ns spent in each stage, by all workers.
static SPENT: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

// Each stage spins in its own body, so that its samples' leaf is the stage itself (a
// shared helper called last would be a tail call, and the stage's frame would vanish).

#[inline(never)]
fn stage_a(seed: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..WORK {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    std::hint::black_box(x)
}

#[inline(never)]
fn stage_b(seed: u64, units: u32) -> u64 {
    let mut x = seed | 1;
    for _ in 0..2 * WORK * units {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    std::hint::black_box(x)
}

#[inline(never)]
fn stage_c(seed: u64) -> u64 {
    // Other shifts than stage_a's: two functions of the same code can be merged into one.
    let mut x = seed | 3;
    for _ in 0..WORK {
        x ^= x << 7;
        x ^= x >> 9;
        x ^= x << 8;
    }
    std::hint::black_box(x)
}

/// Runs `stage` and counts its CPU time under `index`.
fn timed(index: usize, stage: impl FnOnce() -> u64) -> u64 {
    let start = thread_cpu_ns();
    let x = stage();
    SPENT[index].fetch_add(thread_cpu_ns() - start, Ordering::Relaxed);
    x
}

/// The most a round starts past its tick of the schedule.
const MAX_OFFSET_US: u64 = 10_000;

/// Runs rounds until `until`; returns when its first stage began and its last ended.
fn worker(until: Instant, b_units: u32, seed: u64) -> (Instant, Instant) {
    let mut x = 1u64;
    let mut random = seed | 1;
    let first = Instant::now();
    let mut last = first;
    let mut tick = first;
    while tick < until {
        x = timed(0, || stage_a(x));
        x = timed(1, || stage_b(x, b_units));
        x = timed(2, || stage_c(x));
        last = Instant::now();
        tick += TICK;
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        let start = tick + Duration::from_micros(random % MAX_OFFSET_US);
        if let Some(wait) = start.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    std::hint::black_box(x);
    (first, last)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds = args
        .iter()
        .position(|a| a == "--seconds")
        .and_then(|i| args.get(i + 1)?.parse::<f64>().ok())
        .unwrap_or(3.0);
    let b_units = if args.iter().any(|a| a == "--slow-b") {
        2
    } else {
        1
    };
    eventpipe_profiler::cpu::register().expect("the CPU sampler registers");
    eventpipe::diagnostics::start_server().expect("the diagnostics server starts");
    let mut out = std::io::stdout().lock();
    writeln!(out, "pid {}", std::process::id()).unwrap();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let workers: Vec<_> = (0..2)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("diff-worker-{i}"))
                .spawn(move || worker(until, b_units, seed + i))
                .expect("a worker starts")
        })
        .collect();
    let spans: Vec<_> = workers
        .into_iter()
        .map(|w| w.join().expect("a worker ends"))
        .collect();
    let began = spans.iter().map(|s| s.0).min().expect("two workers");
    let ended = spans.iter().map(|s| s.1).max().expect("two workers");
    let elapsed = (ended - began).as_secs_f64();
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let ms = SPENT[i].load(Ordering::Relaxed) as f64 / 1e6;
        writeln!(out, "stage_{name}_ms_per_s {}", ms / elapsed).unwrap();
        writeln!(out, "stage_{name}_ms {ms}").unwrap();
    }
    out.flush().unwrap();
}
