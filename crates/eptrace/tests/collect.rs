//! `eptrace ps` and `eptrace collect` against a real Rust process: the workspace's
//! `traced-app` example, attached to over its diagnostics socket or started by `collect`.

mod support;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use support::eptrace;

use nettrace::{TraceReader, Value};

/// The `traced-app` example, built (once per test run) into this test's target dir.
fn traced_app() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| support::build_example("eventpipe", "traced-app"))
        .clone()
}

/// A running traced-app, killed when dropped.
struct App {
    child: Child,
    pid: u32,
}

impl App {
    fn start(args: &[&str]) -> App {
        let mut child = Command::new(traced_app())
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("traced-app starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let pid_line = lines.next().unwrap().unwrap();
        let pid = pid_line.strip_prefix("pid ").unwrap().parse().unwrap();
        let socket_line = lines.next().unwrap().unwrap();
        assert!(socket_line.starts_with("socket "), "{socket_line}");
        App { child, pid }
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "eptrace failed: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// eptrace's stdout, once it succeeded.
fn stdout_of_success(out: &Output) -> String {
    assert_ok(out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// eptrace's stderr, once it failed with status 1.
fn stderr_of_failure(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `eptrace collect -p PID ARGS… -o PATH`.
fn collect_from(pid: u32, args: &[&str], path: &Path) -> Output {
    let pid = pid.to_string();
    let mut all = vec!["collect", "-p", &pid];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", path.to_str().unwrap()]);
    eptrace(&all)
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("eptrace-collect-{}-{name}", std::process::id()))
}

/// Demo/Tick counters per worker, and the events lost, from a trace file.
fn ticks(path: &PathBuf) -> (BTreeMap<u32, Vec<u64>>, u64) {
    let bytes = std::fs::read(path).unwrap();
    let mut r = TraceReader::from_slice(&bytes).expect("a trace");
    let mut by_worker: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    while let Some(e) = r.next_event().expect("a valid trace") {
        if e.qualified_name() != "Demo/Tick" {
            continue;
        }
        let fields = e.decode_payload().unwrap();
        let (Value::U32(worker), Value::U64(counter)) = (&fields[0].1, &fields[1].1) else {
            panic!("unexpected Tick payload {fields:?}");
        };
        by_worker.entry(*worker).or_default().push(*counter);
    }
    assert!(r.is_finished(), "the trace does not end properly");
    (by_worker, r.stats().lost_events)
}

fn assert_consecutive(by_worker: &BTreeMap<u32, Vec<u64>>) {
    assert_eq!(by_worker.len(), 2, "two workers: {:?}", by_worker.keys());
    for (w, counters) in by_worker {
        assert!(
            counters.len() > 10,
            "worker {w}: only {} events",
            counters.len()
        );
        for pair in counters.windows(2) {
            assert_eq!(pair[1], pair[0] + 1, "worker {w} skipped an event");
        }
    }
}

#[test]
fn ps_lists_a_rust_process_with_its_runtime() {
    let app = App::start(&[]);
    let out = eptrace(&["ps", "--json"]);
    assert_ok(&out);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == app.pid)
        .unwrap_or_else(|| panic!("pid {} not listed: {rows}", app.pid));
    assert_eq!(row["name"], "traced-app");
    assert!(
        row["runtime"]
            .as_str()
            .unwrap()
            .starts_with("Rust (eventpipe-rs"),
        "{row}"
    );
    assert!(row["command_line"].as_str().unwrap().contains("traced-app"));
    let text = eptrace(&["ps"]);
    assert_ok(&text);
    assert!(String::from_utf8_lossy(&text.stdout).contains(&app.pid.to_string()));
}

#[test]
fn collect_by_pid_in_both_modes_and_formats_loses_nothing() {
    let app = App::start(&["--rate", "2000"]);
    for (mode, format) in [("drop", "v5"), ("block", "v6"), ("block", "v5")] {
        let path = temp(&format!("{mode}-{format}.nettrace"));
        let out = collect_from(
            app.pid,
            &[
                "--providers",
                "Demo",
                "--duration",
                "700ms",
                "--buffering",
                mode,
                "--nettrace-version",
                format,
            ],
            &path,
        );
        let stdout = stdout_of_success(&out);
        assert!(
            stdout.contains(&format!("Trace written to {}", path.display())),
            "{stdout}"
        );
        assert!(stdout.contains("0 events lost"), "{stdout}");
        let (by_worker, lost) = ticks(&path);
        assert_consecutive(&by_worker);
        assert_eq!(lost, 0, "{mode} {format}");
        std::fs::remove_file(&path).ok();
    }
}

#[test]
fn collect_by_name_attaches_to_the_named_process() {
    let _app = App::start(&[]);
    let path = temp("by-name.nettrace");
    // Other traced-apps may run (other tests): a unique match is needed, so only check
    // the outcome when the name was unambiguous.
    let out = eptrace(&[
        "collect",
        "-n",
        "traced-app",
        "--providers",
        "Demo:0x1:4",
        "--duration",
        "500ms",
        "-o",
        path.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("attachable processes are named") {
        assert!(stderr.contains("choose one with -p"), "{stderr}");
    } else {
        assert_ok(&out);
        assert_consecutive(&ticks(&path).0);
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn collect_launching_the_program_sees_its_first_events() {
    let path = temp("launch.nettrace");
    let app = traced_app();
    let out = eptrace(&[
        "collect",
        "--providers",
        "Demo",
        "-o",
        path.to_str().unwrap(),
        "--",
        app.to_str().unwrap(),
        "--seconds",
        "0.5",
        "--rate",
        "2000",
    ]);
    let stdout = stdout_of_success(&out);
    assert!(stdout.contains("the process ended the stream"), "{stdout}");
    let (by_worker, lost) = ticks(&path);
    assert_consecutive(&by_worker);
    for (w, counters) in &by_worker {
        assert_eq!(counters[0], 0, "worker {w}'s first events were missed");
    }
    assert_eq!(lost, 0);
    std::fs::remove_file(&path).ok();
}

#[test]
fn collect_errors_name_what_is_wrong() {
    let out = eptrace(&[
        "collect",
        "-n",
        "no-such-program-xyz",
        "--providers",
        "Demo",
    ]);
    let stderr = stderr_of_failure(&out);
    assert!(
        stderr.contains("no attachable process is named `no-such-program-xyz`"),
        "{stderr}"
    );

    let out = eptrace(&["collect", "-p", "1", "--providers", "Demo"]);
    let stderr = stderr_of_failure(&out);
    assert!(
        stderr.contains("no diagnostics socket for process 1"),
        "{stderr}"
    );

    let app = App::start(&[]);
    let pid = app.pid.to_string();
    let out = eptrace(&[
        "collect",
        "-p",
        &pid,
        "--providers",
        "Demo:zz",
        "--duration",
        "1s",
    ]);
    let stderr = stderr_of_failure(&out);
    assert!(
        stderr.contains("keywords `zz` are not a hex number"),
        "{stderr}"
    );

    let out = eptrace(&["collect", "--", "/bin/true"]);
    let stderr = stderr_of_failure(&out);
    assert!(
        stderr.contains("exited") && stderr.contains("before connecting"),
        "{stderr}"
    );
}

#[test]
fn a_process_killed_mid_trace_still_leaves_a_valid_file() {
    let mut app = App::start(&["--rate", "5000"]);
    let path = temp("killed.nettrace");
    let pid = app.pid.to_string();
    let collect = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args([
            "collect",
            "-p",
            &pid,
            "--providers",
            "Demo",
            "-o",
            path.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    app.child.kill().unwrap(); // SIGKILL: no chance to end the stream
    let out = collect.wait_with_output().unwrap();
    let stdout = stdout_of_success(&out);
    assert!(stdout.contains("the process"), "{stdout}");
    assert!(
        stdout.contains("cut off") || stdout.contains("ended the stream"),
        "{stdout}"
    );
    let (by_worker, _) = ticks(&path);
    assert_consecutive(&by_worker);
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_requested_profiler_that_wrote_nothing_is_named_with_the_line_the_program_misses() {
    // traced-app declares its own providers but never registers the CPU sampler.
    let app = App::start(&[]);
    let path = temp("no-sampler.nettrace");
    let out = collect_from(
        app.pid,
        &["--profile", "cpu-sampling", "--duration", "500ms"],
        &path,
    );
    let stdout = stdout_of_success(&out);
    assert!(
        stdout.contains("EventPipeRs-CpuSampler wrote no events")
            && stdout.contains("eventpipe_profiler::cpu::register();"),
        "{stdout}"
    );
    // The providers it did name still wrote, and are not flagged.
    assert!(!stdout.contains("Demo wrote no events"), "{stdout}");
    std::fs::remove_file(&path).ok();
}

#[test]
fn gcdump_of_a_rust_process_says_what_to_use_instead() {
    let app = App::start(&[]);
    let out = eptrace(&["gcdump", "-p", &app.pid.to_string()]);
    let err = stderr_of_failure(&out);
    assert!(
        err.contains("is a Rust program") && err.contains("eptrace heap"),
        "{err}"
    );
}

#[test]
fn heap_of_a_program_without_the_profiled_allocator_names_what_it_needs() {
    let app = App::start(&[]);
    let out = eptrace(&[
        "heap",
        "-p",
        &app.pid.to_string(),
        "--timeout",
        "1s",
        "-o",
        temp("no-heap.nettrace").to_str().unwrap(),
    ]);
    let err = stderr_of_failure(&out);
    assert!(
        err.contains("sent no heap snapshot")
            && err.contains("ProfiledAllocator")
            && err.contains("EVENTPIPE_HEAP_TRACKING=1"),
        "{err}"
    );
    std::fs::remove_file(temp("no-heap.nettrace")).ok();
}
