//! `eptrace analyze` on real Rust programs, as a user runs it.
//!
//! * Off-CPU time: `collect --profile off-cpu` on the demo workload, then `analyze
//!   --offcpu` (text and JSON) and `convert --samples offcpu`. The workload's diagnostics
//!   listener waits in its accept loop the whole session, and must be found there; how
//!   exactly each wait is timed is the profiler's own test (`eventpipe-profiler`'s
//!   `tests/off_cpu.rs`).
//! * Async: `collect --profile async` on `async-demo --slow-every N --stuck`, whose
//!   `blocking_lookup` spins 25 ms inside its poll and whose `wait_forever` never finishes;
//!   `analyze --async` must name both, with the CPU stack of the slow polls.

mod support;

use std::path::PathBuf;

use support::{eptrace_ok, text};

/// `async-demo`, built once.
fn async_demo() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| support::build_example("eventpipe-profiler", "async-demo"))
        .clone()
}

fn collect_off_cpu(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("eptrace-{name}-{}.nettrace", std::process::id()));
    let exe = env!("CARGO_BIN_EXE_eptrace");
    eptrace_ok(
        "collect --profile off-cpu",
        &[
            "collect",
            "--profile",
            "off-cpu",
            "--duration",
            "2s",
            "-o",
            path.to_str().unwrap(),
            "--",
            exe,
            "demo-workload",
            "--seconds",
            "30",
        ],
    );
    path
}

#[test]
fn the_listener_is_found_waiting_in_its_accept_loop() {
    let trace = collect_off_cpu("offcpu");
    let file = trace.to_str().unwrap();
    let json: serde_json::Value = serde_json::from_slice(
        &eptrace_ok(
            "analyze --offcpu --json",
            &["analyze", "--offcpu", "--json", file],
        )
        .stdout,
    )
    .unwrap();
    let duration_ms = json["duration_ms"].as_f64().unwrap();
    let o = &json["offcpu"];
    let off_ms = o["off_cpu_ms"].as_f64().unwrap();
    let with_stack_ms = o["off_cpu_with_stack_ms"].as_f64().unwrap();
    assert!(with_stack_ms > 0.5 * off_ms, "{o}");
    // The listener thread (its name as the kernel keeps it: 15 characters).
    let listener = o["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"].as_str() == Some("eventpipe-diagn"))
        .unwrap_or_else(|| panic!("no listener thread in {o}"));
    let waited = listener["off_cpu_ms"].as_f64().unwrap();
    assert!(
        waited >= 0.8 * duration_ms,
        "the listener waited {waited} ms of {duration_ms}: {listener}"
    );
    // Where: a wait stack of that thread through the accept loop.
    let waits = o["waits"].as_array().unwrap();
    let accept = waits
        .iter()
        .find(|w| {
            w["threads"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == "eventpipe-diagn")
                && w["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f.as_str().unwrap().contains("accept::run"))
        })
        .unwrap_or_else(|| panic!("no wait in the accept loop among {waits:?}"));
    assert!(
        accept["value"].as_f64().unwrap() >= 0.5 * duration_ms,
        "{accept}"
    );
    let total: f64 = waits.iter().map(|w| w["value"].as_f64().unwrap()).sum();
    assert!(total <= with_stack_ms + 1.0, "{total} > {with_stack_ms}");

    let out = text(&eptrace_ok("analyze --offcpu", &["analyze", "--offcpu", file]).stdout);
    assert!(out.contains("\nOff-CPU time: "), "{out}");
    assert!(out.contains("Where they waited"), "{out}");
    assert!(out.contains("eventpipe::diagnostics::accept::run"), "{out}");

    // The same waits as a profile: collapsed stacks weighted in microseconds.
    let folded = text(
        &eptrace_ok(
            "convert --samples offcpu",
            &[
                "convert",
                "--samples",
                "offcpu",
                "--format",
                "collapsed",
                "-o",
                "-",
                file,
            ],
        )
        .stdout,
    );
    let in_accept: u64 = folded
        .lines()
        .filter(|l| l.contains("accept::run"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert!(in_accept > 0, "{folded}");
    std::fs::remove_file(&trace).ok();
}

#[test]
fn a_trace_without_off_cpu_stacks_says_how_to_get_them() {
    let path =
        std::env::temp_dir().join(format!("eptrace-cpu-only-{}.nettrace", std::process::id()));
    let exe = env!("CARGO_BIN_EXE_eptrace");
    eptrace_ok(
        "collect --profile cpu-sampling",
        &[
            "collect",
            "--profile",
            "cpu-sampling",
            "--duration",
            "1s",
            "-o",
            path.to_str().unwrap(),
            "--",
            exe,
            "demo-workload",
            "--seconds",
            "30",
        ],
    );
    let out = text(
        &eptrace_ok(
            "analyze --offcpu",
            &["analyze", "--offcpu", path.to_str().unwrap()],
        )
        .stdout,
    );
    assert!(out.contains("\nOff-CPU time: "), "{out}");
    assert!(
        out.contains("collect with --profile off-cpu for the stacks"),
        "{out}"
    );
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_future_that_blocks_its_thread_and_a_task_that_never_ends_are_named() {
    let path = std::env::temp_dir().join(format!("eptrace-async-{}.nettrace", std::process::id()));
    let file = path.to_str().unwrap();
    let demo = async_demo();
    eptrace_ok(
        "collect --profile async",
        &[
            "collect",
            "--profile",
            "async",
            "--duration",
            "2s",
            "-o",
            file,
            "--",
            demo.to_str().unwrap(),
            "--seconds",
            "30",
            "--slow-every",
            "20",
            "--stuck",
        ],
    );
    let a: serde_json::Value = serde_json::from_slice(
        &eptrace_ok(
            "analyze --async --json",
            &["analyze", "--async", "--json", file],
        )
        .stdout,
    )
    .unwrap();
    let rules: Vec<&str> = a["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect();
    assert_eq!(rules, ["async-long-poll"], "{a}");
    let section = &a["async"];
    let lookup = section["by_future"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["future"] == "async_demo::blocking_lookup")
        .unwrap_or_else(|| panic!("blocking_lookup is not among the slow futures: {section}"));
    // Each of its polls spins 25 ms of wall time: every one that finished is long (one
    // running when the session stopped is cut short).
    let polls = lookup["polls"].as_u64().unwrap();
    let finished = polls - lookup["unfinished_polls"].as_u64().unwrap();
    assert!(finished >= 10, "{lookup}");
    assert!(
        lookup["long_polls"].as_u64().unwrap() >= finished,
        "{lookup}"
    );
    assert!(lookup["max_poll_ms"].as_f64().unwrap() >= 25.0, "{lookup}");
    assert!(
        lookup["cpu_stack"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.as_str().unwrap().contains("spin_for")),
        "{lookup}"
    );
    // The longest polls name it inside its request.
    let longest = &section["longest"][0];
    assert_eq!(
        longest["future"], "async_demo::blocking_lookup",
        "{section}"
    );
    assert_eq!(longest["callstack"][1], "async_demo::handle_request");
    // The stuck task, alive the whole trace.
    let duration_ms = a["duration_ms"].as_f64().unwrap();
    let stuck = section["never_completed"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["future"] == "async_demo::wait_forever")
        .unwrap_or_else(|| panic!("wait_forever is not among the unfinished: {section}"));
    assert!(
        stuck["alive_ms"].as_f64().unwrap() >= 0.8 * duration_ms,
        "{stuck}"
    );
    // Each request waits 2 ms on a timer, whose wake the task's wrapper records: the wait
    // from each wake to the poll it led to.
    let woken = section["wake_to_poll"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["future"] == "async_demo::handle_request")
        .unwrap_or_else(|| panic!("no wakes of handle_request: {section}"));
    assert!(woken["wakes"].as_u64().unwrap() >= 100, "{woken}");
    let delay = &woken["delay_ms"];
    assert!(
        delay["p50"].as_f64().unwrap() <= delay["max"].as_f64().unwrap()
            && delay["max"].as_f64().unwrap() < duration_ms,
        "{woken}"
    );
    // A higher threshold leaves the 25 ms polls alone.
    let calm: serde_json::Value = serde_json::from_slice(
        &eptrace_ok(
            "analyze --async --long-poll 50",
            &["analyze", "--async", "--json", "--long-poll", "50", file],
        )
        .stdout,
    )
    .unwrap();
    assert_eq!(calm["async"]["long_polls"], 0, "{calm}");
    assert!(calm["findings"].as_array().unwrap().is_empty());
    std::fs::remove_file(&path).ok();
}
