//! `SUSTAINED_PROCESSES=N`: the sustained cases, each run as a process of its own, N
//! repetitions, the cases interleaved within each; every repetition is reported, not only a
//! median. A case in a fresh process starts from nothing the previous case left (its
//! buffers, its page cache pages, its threads' placement), and the neighbours in one
//! repetition saw the same machine: a case that swings while its neighbours hold steady
//! swings for a reason of its own.
//!
//! The cases, 1 writer unless noted:
//! * `floor/1`, `floor/2`: a clock read and a 40-byte copy into the thread's own memory,
//!   by one thread or by two at once (a machine that slows two busy threads, as a host
//!   sharing a core does, shows in `floor/2`, which shares nothing between them);
//! * `own/1`, `own/2`: each writer fills its own 64 KiB buffers (40 bytes an event) and
//!   writes each full one to the file itself (`write(2)`, no drain thread): the simplest
//!   design, the bar the session's aggregate is held to;
//! * `handoff/1`, `handoff/2`: writers hand their full 64 KiB buffers to one reading thread
//!   and get them back (`sustained.rs`): the cost of moving records between cores, which
//!   the session's drain pays too, with nothing encoded or written;
//! * `block/1`, `block/2`, `drop/1`: the session (Block mode, Drop mode) to a nettrace file.
//!
//! Each case's process prints its own evidence (`sustained.rs`): the writers' and the
//! drain's CPU time and context switches, and how often the drain ran on a writer's CPU.
//! With `SUSTAINED_PERF=1` each process also runs under `perf stat` (software counters:
//! task-clock, context switches, migrations, page faults), whose counts are printed beside
//! the repetition. They count the whole process: a Block-mode case's read-back of its file
//! (untimed, `std::fs::read` of ~90 MB) is most of its page faults.
//!
//! ```sh
//! SUSTAINED_PROCESSES=5 SUSTAINED_PER_WRITER=5000000 cargo bench -p eventpipe --bench write
//! ```

use std::process::Command;

/// The cases, in the order each repetition runs them.
const CASES: [&str; 9] = [
    "floor/1",
    "floor/2",
    "handoff/1",
    "handoff/2",
    "own/1",
    "own/2",
    "block/1",
    "block/2",
    "drop/1",
];

/// The software counters `perf stat` is asked for.
const PERF_EVENTS: &str = "task-clock,context-switches,cpu-migrations,page-faults";

/// One case's process: its ns per event and what it printed besides.
struct CaseRun {
    ns_per_event: f64,
    evidence: String,
}

fn run_case(case: &str, perf: bool) -> CaseRun {
    let exe = std::env::current_exe().expect("the bench's own path");
    let mut command = if perf {
        let mut c = Command::new("perf");
        c.args(["stat", "-x", ",", "-e", PERF_EVENTS, "--"])
            .arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    let out = command
        .arg("--bench")
        .env("SUSTAINED_CASE", case)
        .env_remove("SUSTAINED_PROCESSES")
        .output()
        .expect("start a case's process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "case {case} failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    let prefix = format!("sustained {case}: ");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("case {case} printed no figure:\n{stdout}"));
    let ns_per_event = line
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("case {case}: no ns/event in {line:?}"));
    let mut evidence: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("  evidence: "))
        .map(str::to_owned)
        .collect();
    if perf {
        // perf's CSV: value,unit,event,...
        let counts: Vec<String> = stderr
            .lines()
            .filter_map(|l| {
                let cols: Vec<&str> = l.split(',').collect();
                let value: f64 = cols.first()?.parse().ok()?;
                Some(format!("{} {value:.0}", cols.get(2)?))
            })
            .collect();
        evidence.push(format!("perf: {}", counts.join(", ")));
    }
    CaseRun {
        ns_per_event,
        evidence: evidence.join("; "),
    }
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `repetitions` repetitions of every case and prints each, then the table.
pub(crate) fn bench(repetitions: u64) {
    let perf = std::env::var_os("SUSTAINED_PERF").is_some();
    // ns[case][repetition]
    let mut ns = vec![Vec::new(); CASES.len()];
    for r in 1..=repetitions {
        for (c, case) in CASES.iter().enumerate() {
            let run = run_case(case, perf);
            println!(
                "repetition {r} {case}: {:.2} ns/event; {}",
                run.ns_per_event, run.evidence
            );
            ns[c].push(run.ns_per_event);
        }
    }
    println!("\nEach case a process of its own, {repetitions} repetitions interleaved: ns per event (aggregate over the writers)");
    let header: Vec<String> = (1..=repetitions).map(|r| format!("r{r}")).collect();
    println!(
        "| case | {} | median | ×floor (median of each repetition's) | max/min |",
        header.join(" | ")
    );
    println!("|---|{}---|---|---|", "---|".repeat(repetitions as usize));
    for (c, case) in CASES.iter().enumerate() {
        let cells: Vec<String> = ns[c].iter().map(|v| format!("{v:.1}")).collect();
        let ratios: Vec<f64> = ns[c].iter().zip(&ns[0]).map(|(v, f)| v / f).collect();
        let (lo, hi) = ns[c].iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
        println!(
            "| {case} | {} | {:.1} | {:.2} | {:.2} |",
            cells.join(" | "),
            median(&ns[c]),
            median(&ratios),
            hi / lo
        );
    }
}
