//! `eptrace record -- CMD` held against Linux `perf record` on the same program: a C
//! program (built here with gcc, frame pointers kept) whose two threads spend their CPU
//! time in `hot_a` (3 parts), `hot_b` (1 part) and in the kernel reading `/dev/zero` from
//! `in_kernel` (2 parts). Each function's self share (the kernel's `read_zero` among them),
//! and the share of samples in the kernel, agree with perf's within 3 percentage points; the worker thread has the name it
//! gave itself; the samples stand for the CPU time the program measured itself; the trace
//! reads back with as many samples as `record` said it wrote. Built without frame pointers,
//! its stacks still reach the thread's start (unwound from each sample's stack copy) as
//! often as `perf record --call-graph dwarf`'s do.
//!
//! perf comes from Debian's `linux-perf` (`ci/perf.sh`); without it the comparison is
//! skipped with a notice, unless `EVENTPIPE_REQUIRE_PERF=1` (set by `.ci/run`).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::{eptrace, eptrace_ok, text};

const PROGRAM: &str = r#"
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;
static char buffer[1 << 20];

/* Each spins in its own body, so that it is the sampled leaf. */
__attribute__((noinline)) void hot_a(void) {
    uint64_t x = sink | 1;
    for (int i = 0; i < 3000000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    sink = x;
}
__attribute__((noinline)) void hot_b(void) {
    uint64_t x = sink | 3;
    for (int i = 0; i < 1000000; i++) { x ^= x << 7; x ^= x >> 9; x ^= x << 8; }
    sink = x;
}
/* Time in the kernel: zeroing pages into user memory. */
__attribute__((noinline)) void in_kernel(int fd) {
    for (int i = 0; i < 60; i++) {
        if (read(fd, buffer, sizeof buffer) < 0) return;
    }
}
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
static double seconds = 1.5;
__attribute__((noinline)) void *work(void *arg) {
    int fd = open("/dev/zero", O_RDONLY);
    double end = now() + seconds;
    while (now() < end) { hot_a(); hot_b(); in_kernel(fd); }
    close(fd);
    return 0;
}
static void *worker(void *arg) {
    prctl(PR_SET_NAME, "rec-worker");
    return work(arg);
}
int main(int argc, char **argv) {
    if (argc > 1) seconds = atof(argv[1]);
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    work(0);
    pthread_join(t, 0);
    struct timespec cpu;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    printf("cpu_ms %f\n", cpu.tv_sec * 1e3 + cpu.tv_nsec / 1e6);
    return 0;
}
"#;

/// The program compiled with `flags` as `name`, in a temp dir of its own.
fn build(name: &str, flags: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("eptrace-record-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("hot.c");
    std::fs::write(&source, PROGRAM).unwrap();
    let binary = dir.join(name);
    let out = Command::new("gcc")
        .args(flags)
        .args(["-g", "-pthread", "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .expect("gcc runs");
    assert!(out.status.success(), "gcc: {}", text(&out.stderr));
    binary
}

/// `eptrace record` of `program` into `trace`.
fn record(program: &Path, trace: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["record", "-o", trace.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.extend(["--", program.to_str().unwrap()]);
    eptrace_ok("record", &args)
}

/// A run of `argv` recorded by `eptrace record` (`extra` its options) into `trace` and, where
/// perf is installed, by `perf record -p` attached to the same run as soon as `record` says
/// its pid (at eptrace record's period, `call_graph` as perf takes it), so both see the same
/// work: eptrace's output (stdout, stderr), and perf's data.
fn record_beside_perf(
    argv: &[&str],
    trace: &Path,
    extra: &[&str],
    call_graph: &str,
) -> ((String, String), Option<(PathBuf, PathBuf)>) {
    use std::io::{BufRead, Read};
    let mut args = vec!["record", "-o", trace.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(argv);
    let Some(perf) = perf() else {
        let out = eptrace_ok("record", &args);
        return ((text(&out.stdout), text(&out.stderr)), None);
    };
    // In the trace's folder: what the program leaves behind (node's logs) stays there.
    let mut child = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(&args)
        .current_dir(trace.parent().unwrap())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("eptrace record starts");
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let pid: u32 = loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "record said no pid: {said}"
        );
        said.push_str(&line);
        if let Some(pid) = line
            .split("(pid ")
            .nth(1)
            .and_then(|rest| rest.split(')').next()?.parse().ok())
        {
            break pid;
        }
    };
    let data = trace.with_extension("perf.data");
    let perf_out = Command::new(&perf)
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-c",
            "1001001",
            "--call-graph",
        ])
        .arg(call_graph)
        .args(["-p", &pid.to_string(), "-o"])
        .arg(&data)
        .output()
        .expect("perf record runs");
    stderr.read_to_string(&mut said).unwrap();
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "eptrace record: {said}");
    assert!(
        perf_out.status.success(),
        "perf record -p: {}",
        text(&perf_out.stderr)
    );
    ((stdout, said), Some((perf, data)))
}

/// The share of the samples (%) whose stack reaches the thread's start (`main` or
/// `start_thread`), and the share under `work` (anywhere on the stack).
fn whole(stacks: &[(Vec<String>, bool, f64)]) -> (f64, f64) {
    let total: f64 = stacks.iter().map(|s| s.2).sum();
    let share = |f: &dyn Fn(&[String]) -> bool| {
        stacks.iter().filter(|s| f(&s.0)).map(|s| s.2).sum::<f64>() / total * 100.0
    };
    (
        share(&|frames| frames.iter().any(|f| f == "main" || f == "start_thread")),
        share(&|frames| frames.iter().any(|f| f == "work")),
    )
}

/// Held by each test while its programs run: they are compared with perf, and two
/// CPU-bound programs at once on a small machine would change each other's shares.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Linux perf, or `None` (with a notice) where it is absent and not required.
fn perf() -> Option<PathBuf> {
    let found = Command::new("perf")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(PathBuf::from("perf"));
    }
    if std::env::var_os("EVENTPIPE_REQUIRE_PERF").is_some_and(|v| v == "1") {
        panic!("perf is not installed, and EVENTPIPE_REQUIRE_PERF=1 (run bash ci/perf.sh)");
    }
    eprintln!("skipping the comparison with perf: perf is not installed (bash ci/perf.sh)");
    None
}

/// Shares of the samples: each leaf function's, and `kernel` (leaf in the kernel).
fn shares(stacks: &[(Vec<String>, bool, f64)]) -> BTreeMap<String, f64> {
    let total: f64 = stacks.iter().map(|s| s.2).sum();
    let mut out = BTreeMap::new();
    for (frames, kernel_leaf, weight) in stacks {
        let share = weight / total * 100.0;
        if let Some(leaf) = frames.first() {
            *out.entry(leaf.clone()).or_insert(0.0) += share;
        }
        if *kernel_leaf {
            *out.entry("kernel".to_owned()).or_insert(0.0) += share;
        }
    }
    out
}

/// Our trace's stacks, leaf first, from its collapsed stacks and its kernel frames' module.
fn our_stacks(trace: &Path) -> Vec<(Vec<String>, bool, f64)> {
    let folded = trace.with_extension("folded");
    eptrace_ok(
        "convert -f collapsed",
        &[
            "convert",
            "-f",
            "collapsed",
            "-o",
            folded.to_str().unwrap(),
            trace.to_str().unwrap(),
        ],
    );
    let kernel = kernel_functions(trace);
    let stacks = std::fs::read_to_string(&folded)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (stack, weight) = l.rsplit_once(' ')?;
            let frames: Vec<String> = stack.split(';').rev().map(str::to_owned).collect();
            let kernel_leaf = kernel.contains(frames.first()?);
            Some((frames, kernel_leaf, weight.parse().ok()?))
        })
        .collect();
    std::fs::remove_file(folded).ok();
    stacks
}

/// The functions our trace names in the kernel (module `vmlinux`), from its speedscope file.
fn kernel_functions(trace: &Path) -> std::collections::BTreeSet<String> {
    support::speedscope_frames(trace)
        .into_iter()
        .filter(|(_, module)| module.contains("vmlinux"))
        .map(|(name, _)| name)
        .collect()
}

/// perf's stacks, leaf first, from `perf script` of its recording.
fn perf_stacks(perf: &Path, data: &Path, pid: Option<u32>) -> Vec<(Vec<String>, bool, f64)> {
    let out = Command::new(perf)
        .args(["script", "-F", "pid,period,ip,sym,dso", "-i"])
        .arg(data)
        .output()
        .expect("perf script runs");
    assert!(out.status.success(), "perf script: {}", text(&out.stderr));
    let mut stacks = Vec::new();
    for block in text(&out.stdout).split("\n\n") {
        let mut lines = block.lines().filter(|l| !l.trim().is_empty());
        // "PID PERIOD", then the stack.
        let Some((sample_pid, period)) = lines.next().and_then(|l| {
            let mut cols = l.split_whitespace();
            Some((
                cols.next()?.parse::<u32>().ok()?,
                cols.next()?.parse::<f64>().ok()?,
            ))
        }) else {
            continue;
        };
        if pid.is_some_and(|p| p != sample_pid) {
            continue;
        }
        let mut kernel_leaf = false;
        let frames: Vec<String> = lines
            .enumerate()
            .map(|(i, l)| {
                // "    addr sym+0x12 (dso)"
                let mut cols = l.split_whitespace().skip(1);
                let sym = cols.next().unwrap_or("?");
                let dso = cols.last().unwrap_or("");
                if i == 0 {
                    kernel_leaf = dso.contains("kernel.kallsyms") || dso.contains("vmlinux");
                }
                sym.split("+0x").next().unwrap_or(sym).to_owned()
            })
            .collect();
        if !frames.is_empty() {
            stacks.push((frames, kernel_leaf, period));
        }
    }
    stacks
}

#[test]
fn a_program_recorded_as_it_is_agrees_with_perf() {
    let _alone = alone();
    let program = build("hot", &["-O1", "-fno-omit-frame-pointer"]);
    let dir = program.parent().unwrap().to_path_buf();
    let trace = dir.join("hot.nettrace");
    let ((out_stdout, out_stderr), perf_run) = record_beside_perf(
        &[program.to_str().unwrap()],
        &trace,
        &["--call-graph", "fp", "-f", "speedscope"],
        "fp",
    );
    let stderr = out_stderr.clone();
    // Converted once recorded, as asked.
    let wrote = out_stdout.clone();
    let speedscope = wrote
        .lines()
        .find_map(|l| l.strip_prefix("Wrote ")?.split(" (").next())
        .unwrap_or_else(|| panic!("no conversion said: {wrote}"));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(speedscope).unwrap()).unwrap();
    assert!(
        doc["profiles"].as_array().is_some_and(|p| !p.is_empty()),
        "{wrote}"
    );
    // What it says it wrote is what the trace holds.
    let written: u64 = stderr
        .split(": ")
        .find_map(|part| {
            part.strip_suffix(" CPU samples")
                .or_else(|| part.split_once(" CPU samples").map(|(n, _)| n))
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample count in: {stderr}"));
    let report = eptrace_ok("report", &["report", trace.to_str().unwrap()]);
    let report = text(&report.stdout);
    assert!(
        report.contains(&format!("{written}  Universal.Events/cpu")),
        "{written} samples said, report: {report}"
    );
    // The worker's own name, and the samples worth the CPU time the program measured.
    assert!(report.contains("rec-worker"), "{report}");
    let cpu_ms: f64 = out_stdout
        .clone()
        .lines()
        .find_map(|l| l.strip_prefix("cpu_ms ")?.trim().parse().ok())
        .expect("the program prints its CPU time");
    let sampled_ms = written as f64 * (1e3 / 999.0);
    assert!(
        (sampled_ms - cpu_ms).abs() <= 0.05 * cpu_ms,
        "{written} samples stand for {sampled_ms:.0} ms; the program used {cpu_ms:.0} ms"
    );

    let ours = shares(&our_stacks(&trace));
    let Some((perf, data)) = perf_run else {
        return;
    };
    let theirs = shares(&perf_stacks(&perf, &data, None));
    eprintln!("eptrace record: {ours:?}\nperf: {theirs:?}");
    for key in ["hot_a", "hot_b", "kernel", "read_zero"] {
        let (a, b) = (
            ours.get(key).copied().unwrap_or(0.0),
            theirs.get(key).copied().unwrap_or(0.0),
        );
        assert!(
            (a - b).abs() <= 3.0,
            "{key}: {a:.1} % of eptrace record's samples, {b:.1} % of perf's\nours: {ours:?}\nperf: {theirs:?}"
        );
    }
    // The workload's parts are all there: 3 : 1 : 2 in time, roughly.
    assert!(
        theirs.get("hot_a").copied().unwrap_or(0.0) > 20.0,
        "{theirs:?}"
    );
    assert!(
        ours.get("kernel").copied().unwrap_or(0.0) > 10.0,
        "{ours:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn stacks_through_code_without_frame_pointers_reach_the_thread_start() {
    let _alone = alone();
    let program = build("hot-nofp", &["-O2", "-fomit-frame-pointer"]);
    let dir = program.parent().unwrap().to_path_buf();
    let trace = dir.join("nofp.nettrace");
    let ((_, out_stderr), perf_run) =
        record_beside_perf(&[program.to_str().unwrap()], &trace, &[], "dwarf");
    assert!(
        out_stderr
            .clone()
            .contains("unwound from their stack copies"),
        "{}",
        out_stderr.clone()
    );
    let (reached, under_work) = whole(&our_stacks(&trace));
    assert!(
        reached >= 90.0,
        "{reached:.1} % of the samples reach main or start_thread"
    );
    // The frame-pointer walk alone loses most callers here: what the unwinding adds.
    record(&program, &trace, &["--call-graph", "fp"]);
    let (fp_reached, _) = whole(&our_stacks(&trace));
    assert!(
        fp_reached + 30.0 < reached,
        "frame pointers alone: {fp_reached:.1} % reach the start, unwound: {reached:.1} %"
    );
    let Some((perf, data)) = perf_run else {
        return;
    };
    let (perf_reached, perf_under_work) = whole(&perf_stacks(&perf, &data, None));
    assert!(
        (reached - perf_reached).abs() <= 3.0 && (under_work - perf_under_work).abs() <= 3.0,
        "reaching the start: {reached:.1} % (perf --call-graph dwarf: {perf_reached:.1} %); \
         under work: {under_work:.1} % (perf: {perf_under_work:.1} %)"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_running_process_recorded_by_pid_agrees_with_perf_and_goes_on() {
    let _alone = alone();
    let program = build("hot-attach", &["-O2"]);
    let dir = program.parent().unwrap().to_path_buf();
    let trace = dir.join("attach.nettrace");
    let mut running = Command::new(&program)
        .arg("8")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = running.id().to_string();
    // Its worker thread names itself first thing.
    std::thread::sleep(std::time::Duration::from_millis(300));
    // perf attached over the same second, so both see the same work.
    let perf_run = perf().map(|perf| {
        let data = dir.join("perf.data");
        let child = Command::new(&perf)
            .args([
                "record",
                "-q",
                "-e",
                "cpu-clock",
                "-c",
                "1001001",
                "-g",
                "-p",
                &pid,
                "-o",
            ])
            .arg(&data)
            .args(["--", "sleep", "1"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("perf record starts");
        (perf, data, child)
    });
    let out = eptrace_ok(
        "record -p",
        &[
            "record",
            "-p",
            &pid,
            "--duration",
            "1s",
            "-o",
            trace.to_str().unwrap(),
        ],
    );
    assert!(
        text(&out.stderr).contains("goes on"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        running.try_wait().unwrap().is_none(),
        "the process still runs"
    );
    let perf_data = perf_run.map(|(perf, data, child)| {
        let recorded = child.wait_with_output().expect("perf record runs");
        assert!(
            recorded.status.success(),
            "perf record -p: {}",
            text(&recorded.stderr)
        );
        (perf, data)
    });
    // Detached, it ends as it would have.
    let status = running.wait().unwrap();
    assert!(status.success(), "{status}");
    let report = text(&eptrace_ok("report", &["report", trace.to_str().unwrap()]).stdout);
    assert!(report.contains("rec-worker"), "{report}");
    let ours = shares(&our_stacks(&trace));
    if let Some((perf, data)) = perf_data {
        let theirs = shares(&perf_stacks(&perf, &data, None));
        for key in ["hot_a", "hot_b", "kernel"] {
            let (a, b) = (
                ours.get(key).copied().unwrap_or(0.0),
                theirs.get(key).copied().unwrap_or(0.0),
            );
            assert!(
                (a - b).abs() <= 3.0,
                "{key}: {a:.1} % of eptrace record -p's samples, {b:.1} % of perf -p's\nours: \
                 {ours:?}\nperf: {theirs:?}"
            );
        }
    }
    // A name two processes have: an error naming both.
    let twins: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&program)
                .arg("2")
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let out = eptrace(&["record", "-n", "hot-attach", "--duration", "1s"]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    for twin in &twins {
        assert!(said.contains(&twin.id().to_string()), "{said}");
    }
    for mut twin in twins {
        twin.wait().unwrap();
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Waits of known lengths, measured by the program itself: `nap` sleeps 5 × 200 ms, and
/// `take_lock` waits for a mutex the main thread holds 100 ms at a time, 5 times.
const WAITER: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int held;
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
__attribute__((noinline)) double nap(void) {
    double start = now();
    struct timespec d = {0, 200000000};
    nanosleep(&d, 0);
    return now() - start;
}
__attribute__((noinline)) double take_lock(void) {
    double start = now();
    pthread_mutex_lock(&lock);
    double waited = now() - start;
    pthread_mutex_unlock(&lock);
    return waited;
}
static double napped, locked;
static void *sleeper(void *arg) { for (int i = 0; i < 5; i++) napped += nap(); return 0; }
static void *waiter(void *arg) {
    for (int i = 0; i < 5; i++) {
        while (!held) usleep(100);
        locked += take_lock();
        while (held) usleep(100);
    }
    return 0;
}
int main(void) {
    pthread_t a, b;
    pthread_create(&a, 0, sleeper, 0);
    pthread_create(&b, 0, waiter, 0);
    for (int i = 0; i < 5; i++) {
        pthread_mutex_lock(&lock);
        held = 1;
        usleep(100000);
        held = 0;
        pthread_mutex_unlock(&lock);
        usleep(20000);
    }
    pthread_join(a, 0);
    pthread_join(b, 0);
    printf("nap_ms %f\nlock_ms %f\n", napped, locked);
    return 0;
}
"#;

#[test]
fn waits_off_cpu_are_recorded_with_their_stacks_and_lengths() {
    let _alone = alone();
    let dir = std::env::temp_dir().join(format!("eptrace-record-{}-waits", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("waits.c");
    std::fs::write(&source, WAITER).unwrap();
    let program = dir.join("waits");
    let out = Command::new("gcc")
        .args(["-O1", "-g", "-pthread", "-o"])
        .arg(&program)
        .arg(&source)
        .output()
        .expect("gcc runs");
    assert!(out.status.success(), "gcc: {}", text(&out.stderr));
    let trace = dir.join("waits.nettrace");
    let out = record(&program, &trace, &["--off-cpu"]);
    let measured = |key: &str| -> f64 {
        text(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {}", text(&out.stdout)))
    };
    let (nap_ms, lock_ms) = (measured("nap_ms "), measured("lock_ms "));
    let folded = dir.join("waits.folded");
    eptrace_ok(
        "convert --samples offcpu",
        &[
            "convert",
            "--samples",
            "offcpu",
            "-f",
            "collapsed",
            "-o",
            folded.to_str().unwrap(),
            trace.to_str().unwrap(),
        ],
    );
    // Collapsed weights are µs.
    let under = |function: &str| -> f64 {
        std::fs::read_to_string(&folded)
            .unwrap()
            .lines()
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(stack, _)| stack.split(';').any(|f| f == function))
            .filter_map(|(_, w)| w.parse::<f64>().ok())
            .sum::<f64>()
            / 1e3
    };
    for (function, truth) in [("nap", nap_ms), ("take_lock", lock_ms)] {
        let got = under(function);
        assert!(
            (got - truth).abs() <= 0.1 * truth,
            "{function}: {got:.1} ms off CPU in the trace, {truth:.1} ms by the program's clock"
        );
    }
    // The waits end in the kernel's scheduler, where the threads left their CPUs.
    let stacks = std::fs::read_to_string(&folded).unwrap();
    assert!(stacks.contains("schedule"), "{stacks:.500}");
    // `analyze --offcpu`: the sleeper's wait, with its stack, first among the waits.
    let analysis = eptrace_ok(
        "analyze --offcpu",
        &["analyze", "--offcpu", "--json", trace.to_str().unwrap()],
    );
    let analysis: serde_json::Value = serde_json::from_slice(&analysis.stdout).unwrap();
    let offcpu = &analysis["offcpu"];
    let first = &offcpu["waits"][0];
    let first_ms = first["value"].as_f64().unwrap();
    assert!(
        (first_ms - nap_ms).abs() <= 0.1 * nap_ms
            && first["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f == "nap"),
        "{first}"
    );
    let with_stack = offcpu["off_cpu_with_stack_ms"].as_f64().unwrap();
    assert!(with_stack >= 0.9 * (nap_ms + lock_ms), "{offcpu}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A JIT's code named from its perf map: Node's, hot in `hotLoop` (3 parts) and `coldLoop`
/// (1 part), with `--perf-basic-prof`; perf names the same code from the same map.
const NODE_PROGRAM: &str = r#"
function hotLoop(n) { let x = 1; for (let i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; } return x; }
function coldLoop(n) { let x = 1; for (let i = 0; i < n; i++) { x = (x * 69069 + 1) % 4294967296; } return x; }
const end = Date.now() + 1500; let s = 0;
while (Date.now() < end) { s += hotLoop(3000000); s += coldLoop(1000000); }
console.log(s > 0 ? "ok" : "?");
"#;

#[test]
fn jit_code_is_named_from_the_programs_perf_map() {
    let _alone = alone();
    if Command::new("node").arg("--version").output().is_err() {
        eprintln!("skipping the JIT test: node is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("eptrace-record-{}-jit", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("hot.js");
    std::fs::write(&script, NODE_PROGRAM).unwrap();
    let trace = dir.join("node.nettrace");
    let ((_, out_stderr), perf_run) = record_beside_perf(
        &["node", "--perf-basic-prof", script.to_str().unwrap()],
        &trace,
        &[],
        "fp",
    );
    assert!(
        out_stderr
            .clone()
            .contains("JIT functions named from the program's perf map"),
        "{}",
        out_stderr.clone()
    );
    // Node's JIT tiers name one function several ways (`JS:~f`, `JS:^f`, `JS:*f`, then
    // its file and line): all of them.
    let by_function = |shares: &BTreeMap<String, f64>, name: &str| -> f64 {
        shares
            .iter()
            .filter(|(f, _)| {
                f.split_whitespace()
                    .next()
                    .is_some_and(|t| t.ends_with(name))
            })
            .map(|(_, s)| s)
            .sum()
    };
    let ours = shares(&our_stacks(&trace));
    let (hot, cold) = (
        by_function(&ours, "hotLoop"),
        by_function(&ours, "coldLoop"),
    );
    assert!(
        hot > 40.0 && cold > 10.0,
        "hotLoop {hot:.1} %, coldLoop {cold:.1} %: {ours:?}"
    );
    if let Some((perf, data)) = perf_run {
        // Node's start-up (tens of ms of CPU: its snapshot, OpenSSL) runs before perf,
        // attached once `record` names the pid, is up; `record` sees it from the exec. So the
        // two are held to the same JIT code: each function's share of the JS samples.
        let theirs = shares(&perf_stacks(&perf, &data, None));
        let js = |shares: &BTreeMap<String, f64>, name: &str| {
            let all = by_function(shares, "hotLoop") + by_function(shares, "coldLoop");
            by_function(shares, name) / all * 100.0
        };
        for name in ["hotLoop", "coldLoop"] {
            let (a, b) = (js(&ours, name), js(&theirs, name));
            assert!(
                (a - b).abs() <= 3.0,
                "{name}: {a:.1} % of eptrace record's JS samples, {b:.1} % of perf's\nours: {ours:?}\nperf: {theirs:?}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_program_that_cannot_run_is_an_error_and_leaves_no_trace() {
    let trace = std::env::temp_dir().join(format!(
        "eptrace-record-missing-{}.nettrace",
        std::process::id()
    ));
    let out = eptrace(&[
        "record",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "/nonexistent/program",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cannot run /nonexistent/program"),
        "{}",
        text(&out.stderr)
    );
    assert!(!trace.exists());
    let out = eptrace(&["record", "--", "no-such-program-anywhere"]);
    assert!(
        text(&out.stderr).contains("no-such-program-anywhere: not found"),
        "{}",
        text(&out.stderr)
    );
    // Without a program: a usage error.
    assert_eq!(eptrace(&["record"]).status.code(), Some(2));
}

/// As a user without privileges (`nobody`, through `setpriv`; run where the tests run as
/// root): the program is still recorded, with its user frames, and `record` says why there
/// are no kernel frames and why its rings are small, naming the settings; a process of
/// another user is an error that says so, and leaves no trace.
#[test]
fn an_unprivileged_user_records_user_frames_and_is_told_which_settings_limit_it() {
    let _alone = alone();
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| text(&o.stdout).trim() == "0");
    let setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if !root || !setpriv {
        eprintln!("skipping: needs root and setpriv to run eptrace as another user");
        return;
    }
    let program = build("hot-nobody", &[]);
    let dir = program.parent().unwrap().to_path_buf();
    let out_dir = dir.join("nobody");
    std::fs::create_dir_all(&out_dir).unwrap();
    std::process::Command::new("chmod")
        .args(["0777", out_dir.to_str().unwrap()])
        .status()
        .unwrap();
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_eptrace"))
            .args(args)
            .output()
            .expect("setpriv runs")
    };
    let trace = out_dir.join("hot.nettrace");
    let out = as_nobody(&[
        "record",
        "-o",
        trace.to_str().unwrap(),
        "--",
        program.to_str().unwrap(),
        "0.5",
    ]);
    let said = text(&out.stderr);
    assert!(out.status.success(), "{said}");
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if paranoid >= 2 {
        assert!(
            said.contains(&format!("kernel.perf_event_paranoid is {paranoid}"))
                && said.contains("recording user frames only"),
            "{said}"
        );
    }
    assert!(said.contains("kernel.perf_event_mlock_kb"), "{said}");
    let samples: u64 = said
        .split("Wrote ")
        .nth(1)
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(samples > 100, "{said}");
    let stacks = our_stacks(&trace);
    let named: f64 = stacks
        .iter()
        .filter(|(frames, _, _)| frames.first().is_some_and(|f| f.starts_with("hot_")))
        .map(|s| s.2)
        .sum::<f64>()
        / stacks.iter().map(|s| s.2).sum::<f64>();
    assert!(
        named > 0.3,
        "{:.0} % of the samples in hot_a/hot_b",
        named * 100.0
    );

    let refused = out_dir.join("init.nettrace");
    let out = as_nobody(&["record", "-p", "1", "-o", refused.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("process 1 belongs to another user"),
        "{}",
        text(&out.stderr)
    );
    assert!(!refused.exists());
    std::fs::remove_dir_all(&dir).ok();
}

/// `record` killed outright (SIGKILL: no chance to finish the file) leaves a trace that
/// reads up to its last whole block: the samples of the passes written before, which is
/// all but the last pass's, its kernel frames named (each pass names the kernel functions
/// it hit), and `report` says where it was cut.
#[test]
fn a_recording_killed_outright_keeps_what_it_had_written() {
    use std::io::BufRead;
    let _alone = alone();
    let program = build("hot-killed", &[]);
    let dir = program.parent().unwrap().to_path_buf();
    let trace = dir.join("killed.nettrace");
    let mut child = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(["record", "-o", trace.to_str().unwrap(), "--"])
        .arg(&program)
        .arg("4")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    said.read_line(&mut line).unwrap();
    let pid: i32 = line
        .split("(pid ")
        .nth(1)
        .and_then(|s| s.split(')').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    std::thread::sleep(std::time::Duration::from_millis(2000));
    child.kill().unwrap();
    child.wait().unwrap();
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let bytes = std::fs::read(&trace).unwrap();
    let mut reader = nettrace::TraceReader::from_slice(&bytes)
        .unwrap()
        .accept_truncation(true);
    let (mut samples, mut first, mut last) = (0u64, i64::MAX, 0i64);
    while let Some(event) = reader.next_event().expect("what was written reads") {
        if event.qualified_name() == "Universal.Events/cpu" {
            samples += 1;
            first = first.min(event.header.timestamp);
            last = last.max(event.header.timestamp);
        }
    }
    assert!(reader.stats().truncation.is_some(), "the cut is noticed");
    // Two busy threads for about 2 s, less the pass (100 ms) not yet written.
    let span_ms = (last - first) as f64 / 1e6;
    assert!(
        samples > 2000 && span_ms > 1500.0,
        "{samples} samples over {span_ms:.0} ms"
    );
    // Exit status 3: read, with a warning that the trace is incomplete.
    let report = eptrace(&["report", trace.to_str().unwrap()]);
    assert_eq!(report.status.code(), Some(3), "{}", text(&report.stderr));
    // Hot kernel functions by name ("  1.2%  1.2%  clear_user_erms  [vmlinux]").
    assert!(
        text(&report.stdout).lines().any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() == 4 && cols[3] == "[vmlinux]" && !cols[2].starts_with("0x")
        }),
        "{}",
        text(&report.stdout)
    );
    assert!(
        text(&report.stdout).contains("CUT OFF") && text(&report.stdout).contains("hot_a"),
        "{}",
        text(&report.stdout)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `--rate 250`: a sample per 4 ms of a thread's CPU time, so the samples stand for the CPU
/// time the program measured itself (within 5 %), and the trace states the period.
#[test]
fn the_rate_sets_how_much_cpu_time_a_sample_stands_for() {
    let _alone = alone();
    let program = build("hot-rate", &[]);
    let dir = program.parent().unwrap().to_path_buf();
    let trace = dir.join("rate.nettrace");
    let out = record(&program, &trace, &["--rate", "250", "--call-graph", "fp"]);
    let stderr = text(&out.stderr);
    let samples = stderr
        .split("Wrote ")
        .nth(1)
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{stderr}"));
    let cpu_ms: f64 = text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("cpu_ms ")?.trim().parse().ok())
        .expect("the program prints its CPU time");
    let sampled_ms = samples * 4.0;
    assert!(
        (sampled_ms - cpu_ms).abs() <= 0.05 * cpu_ms,
        "{samples} samples at 250 Hz stand for {sampled_ms:.0} ms; the program used {cpu_ms:.0} ms"
    );
    let bytes = std::fs::read(&trace).unwrap();
    let reader = nettrace::TraceReader::from_slice(&bytes).unwrap();
    assert_eq!(reader.trace().expected_cpu_sampling_rate, Some(4_000_000));
    std::fs::remove_dir_all(&dir).ok();
}
