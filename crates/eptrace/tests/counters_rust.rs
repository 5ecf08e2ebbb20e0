//! `eptrace counters` against a Rust program: the metrics crate's `counters-demo` example
//! publishes counters with known values through the runtime's API and through the
//! `metrics` bridge, parks a known number of threads and allocates at a known rate; what
//! `collect` writes must hold those values, and the built-in `EventPipeRs-Runtime`
//! counters must track the thread count and the allocation rate within 10 %.

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// Bytes the demo allocates per second (512 KiB every 10 ms, on a fixed schedule).
const ALLOC_RATE: f64 = 512.0 * 1024.0 * 100.0;

fn demo_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| support::build_example("eventpipe-metrics", "counters-demo"))
        .clone()
}

/// The demo, started and ready.
fn start_demo() -> support::Program {
    support::Program::start(Command::new(demo_path()), "counters-demo")
}

#[test]
fn a_rust_programs_counters_arrive_exact_and_its_runtime_counters_track_it() {
    let mut demo = start_demo();
    let path =
        std::env::temp_dir().join(format!("eptrace-counters-rust-{}.csv", std::process::id()));
    let collector = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args([
            "counters",
            "collect",
            "-p",
            &demo.pid.to_string(),
            "--counters",
            "Demo,Metrics,EventPipeRs-Runtime",
            "--duration",
            "5s",
            "-o",
            path.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Threads while the session runs (its own included), and 100 jobs during it.
    std::thread::sleep(Duration::from_millis(2000));
    let threads_seen = std::fs::read_dir(format!("/proc/{}/task", demo.pid))
        .unwrap()
        .count() as f64;
    demo.send("jobs 100");
    assert_eq!(demo.line("jobs "), "100");
    let out = collector.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let csv = std::fs::read_to_string(&path).unwrap();
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let of = |provider: &str, name: &str| -> Vec<f64> {
        rows.iter()
            .filter(|r| r[1] == provider && r[2] == name)
            .map(|r| r[4].parse().unwrap())
            .collect()
    };
    let exact = |provider: &str, name: &str, want: f64| {
        let vs = of(provider, name);
        assert!(vs.len() >= 3, "{provider}/{name}: {csv}");
        assert!(vs.iter().all(|&v| v == want), "{provider}/{name} = {vs:?}");
    };
    // The direct API.
    exact("Demo", "fixed-gauge (MB)", 42.5);
    exact("Demo", "fixed-total (Count / 1 sec)", 7.0);
    for p in ["50", "95", "99"] {
        exact("Demo", &format!("latency (ms)[Percentile={p}]"), 10.0);
    }
    // The metrics bridge: a gauge, and a labelled counter whose increments add up to what
    // was counted.
    exact("Metrics", "queue_depth", 12.0);
    let jobs = of("Metrics", "jobs (Count / 1 sec)[kind=batch]");
    assert_eq!(jobs.iter().sum::<f64>(), 100.0, "{jobs:?}");

    // Built in: the thread count and the allocation rate, within 10 %.
    let threads = of("EventPipeRs-Runtime", "Thread Count");
    assert!(!threads.is_empty(), "{csv}");
    for t in &threads {
        assert!(
            (t - threads_seen).abs() <= 0.1 * threads_seen,
            "{t} threads, /proc says {threads_seen}"
        );
    }
    let rates = of("EventPipeRs-Runtime", "Allocation Rate (B / 1 sec)");
    assert!(rates.len() >= 3, "{csv}");
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    assert!(
        (mean - ALLOC_RATE).abs() <= 0.1 * ALLOC_RATE,
        "allocation rate {mean:.0} B/s, truly {ALLOC_RATE:.0}: {rates:?}"
    );
    std::fs::remove_file(&path).ok();
}

#[test]
fn counters_of_a_program_started_by_eptrace_and_named_by_name() {
    let path = std::env::temp_dir().join(format!(
        "eptrace-counters-launch-{}.json",
        std::process::id()
    ));
    let demo = demo_path();
    let out = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args([
            "counters",
            "collect",
            "--counters",
            "Demo",
            "--format",
            "json",
        ])
        .args(["--duration", "3s", "-o", path.to_str().unwrap(), "--"])
        .arg(&demo)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).ok();
    let gauges: Vec<f64> = doc["Events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "fixed-gauge (MB)")
        .map(|e| e["value"].as_f64().unwrap())
        .collect();
    assert!(
        !gauges.is_empty() && gauges.iter().all(|&g| g == 42.5),
        "{doc}"
    );

    // By name: the demo running, attached to as `counters-demo`.
    let running = start_demo();
    let out = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args([
            "counters",
            "monitor",
            "-n",
            "counters-demo",
            "--counters",
            "Demo",
        ])
        .args(["--duration", "2500ms"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Another counters-demo (a parallel test) makes the name ambiguous: then it says so.
    if stderr.contains("choose one with -p") {
        return;
    }
    assert!(out.status.success(), "{stderr}");
    assert!(
        shown.contains("fixed-gauge (MB)") && shown.contains("42.5"),
        "{shown}"
    );
    drop(running);
    std::fs::remove_file(&path).ok();
}

#[test]
fn monitor_on_a_terminal_without_a_size_prints_lines() {
    if Command::new("script").arg("--version").output().is_err() {
        println!("skipping: util-linux `script` is not installed");
        return;
    }
    let demo = start_demo();
    let command = format!(
        "stty cols 0 rows 0; exec {} counters monitor -p {} --counters Demo --duration 2500ms",
        env!("CARGO_BIN_EXE_eptrace"),
        demo.pid
    );
    let out = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env("TERM", "xterm-256color")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(!shown.contains("columns wide"), "{shown}");
    assert!(
        shown.contains("fixed-gauge (MB)") && shown.contains("42.5"),
        "the values, as lines: {shown}"
    );
}
