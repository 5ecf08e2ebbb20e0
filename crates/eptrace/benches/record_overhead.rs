//! `eptrace record`'s overhead on the program it profiles, beside `perf record`'s at the
//! same rate and stack copy, in the same run.
//!
//! The program (C, built here with gcc, frame pointers omitted as in most release builds):
//! two threads, each a fixed number of rounds of two hot functions and a read of
//! `/dev/zero` (time in the kernel), print how long they took (wall, and the process's CPU
//! time). Each repetition runs it three ways, in rotating order: alone (the floor), under
//! `perf record -F 999 --call-graph dwarf,16384 -e cpu-clock` and under
//! `eptrace record --rate 999` (DWARF, 16 KiB stack copies: its default). The overhead is
//! the program's own wall time over the floor's, less 1; the CPU time beside it includes
//! the kernel's copying of each sample's stack, charged to the program. The recorders'
//! own CPU time counts in the wall time only as far as it competes with the program for
//! the machine's two cores, as it would on a busy host.
//!
//! Prints every repetition, then the medians, and the samples each recorder lost.
//!
//! `cargo bench -p eptrace --bench record_overhead` (`RECORD_OVERHEAD_REPS`, default 9;
//! `RECORD_OVERHEAD_ROUNDS` of work per thread, default 300: about 1.5 s here). Needs
//! `perf` (`bash ci/perf.sh`) and the rights to use perf events.

use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAM: &str = r#"
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;
static char buffer[1 << 18];
static int rounds = 300;

__attribute__((noinline)) void hot_a(void) {
    uint64_t x = sink | 1;
    for (int i = 0; i < 1500000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    sink = x;
}
__attribute__((noinline)) void hot_b(void) {
    uint64_t x = sink | 3;
    for (int i = 0; i < 500000; i++) { x ^= x << 7; x ^= x >> 9; x ^= x << 8; }
    sink = x;
}
__attribute__((noinline)) void in_kernel(int fd) {
    for (int i = 0; i < 4; i++) { if (read(fd, buffer, sizeof buffer) < 0) return; }
}
static double now(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
static void *work(void *arg) {
    int fd = open("/dev/zero", O_RDONLY);
    for (int r = 0; r < rounds; r++) { hot_a(); hot_b(); in_kernel(fd); }
    close(fd);
    return 0;
}
int main(int argc, char **argv) {
    if (argc > 1) rounds = atoi(argv[1]);
    double wall = now(CLOCK_MONOTONIC);
    pthread_t t;
    pthread_create(&t, 0, work, 0);
    work(0);
    pthread_join(t, 0);
    printf("wall_ms %f cpu_ms %f\n", now(CLOCK_MONOTONIC) - wall, now(CLOCK_PROCESS_CPUTIME_ID));
    return 0;
}
"#;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}: a whole number, not {v:?}"))
    })
}

fn build(dir: &Path) -> PathBuf {
    let source = dir.join("work.c");
    std::fs::write(&source, PROGRAM).unwrap();
    let binary = dir.join("work");
    let out = Command::new("gcc")
        .args(["-O2", "-fomit-frame-pointer", "-g", "-pthread", "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .expect("gcc runs");
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    binary
}

/// Runs `argv`; the program's (wall ms, CPU ms) from its stdout, and the run's stderr.
fn run(argv: &[&str]) -> ((f64, f64), String) {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", argv[0]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{argv:?}: {stderr}");
    let numbers: Vec<f64> = stdout
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(numbers.len(), 2, "{argv:?} printed {stdout}");
    ((numbers[0], numbers[1]), stderr)
}

/// The number before `label` in `text`, 0 when absent.
fn count_before(text: &str, label: &str) -> u64 {
    text.find(label)
        .and_then(|at| text[..at].split_whitespace().last()?.parse().ok())
        .unwrap_or(0)
}

/// The samples perf's ring lost in `data` (`perf report --stats`: its LOST events).
fn perf_lost_samples(data: &str) -> u64 {
    let out = Command::new("perf")
        .args(["report", "--stats", "-i", data])
        .output()
        .expect("perf report runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("LOST") && !l.contains("LOST_SAMPLES"))
        .filter_map(|l| {
            l.split(':')
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let reps = env_number("RECORD_OVERHEAD_REPS", 9);
    let rounds = env_number("RECORD_OVERHEAD_ROUNDS", 300).to_string();
    let dir = std::env::temp_dir().join(format!("eptrace-record-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let program = build(&dir);
    let program = program.to_str().unwrap();
    let eptrace = env!("CARGO_BIN_EXE_eptrace");
    let trace = dir.join("work.nettrace");
    let data = dir.join("perf.data");
    let (trace, data) = (trace.to_str().unwrap(), data.to_str().unwrap());
    let perf = [
        "perf",
        "record",
        "-q",
        "-e",
        "cpu-clock",
        "-F",
        "999",
        "--call-graph",
        "dwarf,16384",
        "-o",
        data,
        "--",
        program,
        &rounds,
    ];
    let ours = [
        "record", "--rate", "999", "-o", trace, "--", program, &rounds,
    ];
    let mut ours_argv = vec![eptrace];
    ours_argv.extend(ours);
    let floor_argv = [program, rounds.as_str()];
    // Warm the file cache and the CPU's clocks.
    run(&floor_argv);

    println!(
        "rep  alone wall/cpu ms      perf wall/cpu (vs alone)          eptrace wall/cpu (vs alone)   lost perf/eptrace"
    );
    let (mut perf_wall, mut perf_cpu, mut our_wall, mut our_cpu) = (vec![], vec![], vec![], vec![]);
    let (mut perf_lost, mut our_lost) = (0u64, 0u64);
    for rep in 0..reps {
        let mut results = [(0.0, 0.0); 3];
        for k in 0..3 {
            let which = (rep + k) % 3;
            let (times, stderr) = match which {
                0 => run(&floor_argv),
                1 => run(&perf),
                _ => run(&ours_argv),
            };
            match which {
                1 => perf_lost += perf_lost_samples(data),
                2 => our_lost += count_before(&stderr, "lost"),
                _ => {}
            }
            results[which] = times;
        }
        let [alone, p, o] = results;
        let ratio = |x: f64, floor: f64| (x / floor - 1.0) * 100.0;
        perf_wall.push(ratio(p.0, alone.0));
        perf_cpu.push(ratio(p.1, alone.1));
        our_wall.push(ratio(o.0, alone.0));
        our_cpu.push(ratio(o.1, alone.1));
        println!(
            "{rep:>3}  {:>7.1} / {:>7.1}    {:>7.1} / {:>7.1} ({:+5.1} / {:+5.1} %)    {:>7.1} / {:>7.1} ({:+5.1} / {:+5.1} %)",
            alone.0, alone.1, p.0, p.1, perf_wall[rep], perf_cpu[rep], o.0, o.1, our_wall[rep], our_cpu[rep]
        );
    }
    println!(
        "median overhead: perf record {:+.2} % wall, {:+.2} % CPU; eptrace record {:+.2} % wall, {:+.2} % CPU; samples lost: perf {perf_lost}, eptrace {our_lost}",
        median(perf_wall),
        median(perf_cpu),
        median(our_wall),
        median(our_cpu)
    );
    std::fs::remove_dir_all(&dir).ok();
}
