//! Runs the real `eptrace stress` on a small corner of the matrix: every cell accounts for
//! every event, the JSON lines carry exactly the documented fields, and trace files are
//! cleaned up (or kept with `--keep`).
//!
//! The child is killed after [`TIMEOUT`], so a hang in the session code fails the test with
//! the output so far instead of stalling the suite.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(120);

const FIELDS: [&str; 10] = [
    "threads",
    "events_per_thread",
    "output",
    "mode",
    "written",
    "read",
    "dropped",
    "events_per_sec",
    "peak_rss_bytes",
    "rss_bytes",
];

/// A directory of this test's own, empty.
fn scratch(test: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("eptrace-stress-test-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Runs `eptrace args…`; returns its status, stdout and stderr, or panics after [`TIMEOUT`].
fn run(args: &[&str]) -> (ExitStatus, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("eptrace runs");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for eptrace") {
            break status;
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "eptrace {args:?} still running after {TIMEOUT:?} (a hang?)\nstdout so far:\n{}\nstderr:\n{}",
                out.join().unwrap_or_default(),
                err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        status,
        out.join().expect("stdout reader"),
        err.join().expect("stderr reader"),
    )
}

fn field(row: &Value, name: &str) -> u64 {
    row[name]
        .as_u64()
        .unwrap_or_else(|| panic!("`{name}` is not an unsigned integer in {row}"))
}

#[test]
fn small_matrix_accounts_for_every_event() {
    let dir = scratch("matrix");
    let dir_arg = dir.to_str().expect("UTF-8 temp path");
    let (status, stdout, stderr) = run(&[
        "stress",
        "--threads",
        "1,8",
        "--events",
        "1,1000",
        "--output",
        "file,listener",
        "--mode",
        "drop,block",
        "--json",
        "--budget-mb",
        "4",
        "--dir",
        dir_arg,
    ]);
    assert!(
        status.success(),
        "eptrace stress failed: {status:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let rows: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(rows.len(), 16, "one line per cell:\n{stdout}");

    let expected: BTreeSet<&str> = FIELDS.into_iter().collect();
    let mut cells = BTreeSet::new();
    for row in &rows {
        let keys: BTreeSet<&str> = row
            .as_object()
            .unwrap_or_else(|| panic!("not an object: {row}"))
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, expected, "field names of {row}");

        let (threads, events) = (field(row, "threads"), field(row, "events_per_thread"));
        let (written, read, dropped) = (
            field(row, "written"),
            field(row, "read"),
            field(row, "dropped"),
        );
        field(row, "events_per_sec");
        assert!(
            field(row, "peak_rss_bytes") >= field(row, "rss_bytes"),
            "{row}"
        );
        assert_eq!(written, threads * events, "{row}");
        let output = row["output"].as_str().expect("output is a string");
        let mode = row["mode"].as_str().expect("mode is a string");
        match mode {
            "block" => {
                assert_eq!(dropped, 0, "Block mode must drop nothing: {row}");
                assert_eq!(read, written, "Block mode must deliver everything: {row}");
            }
            "drop" => assert_eq!(read + dropped, written, "Drop mode must count: {row}"),
            other => panic!("unknown mode {other:?} in {row}"),
        }
        assert!(matches!(output, "file" | "listener"), "{row}");
        assert!(
            cells.insert((threads, events, output.to_string(), mode.to_string())),
            "cell twice: {row}"
        );
    }
    assert_eq!(cells.len(), 16);

    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("scratch dir still exists")
        .collect();
    assert!(left.is_empty(), "trace files left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn keep_leaves_the_trace_and_the_table_has_a_row() {
    let dir = scratch("keep");
    let dir_arg = dir.to_str().expect("UTF-8 temp path");
    let (status, stdout, stderr) = run(&[
        "stress",
        "--threads",
        "2",
        "--events",
        "10",
        "--output",
        "file",
        "--mode",
        "block",
        "--format",
        "v6",
        "--budget-mb",
        "1",
        "--dir",
        dir_arg,
        "--keep",
    ]);
    assert!(status.success(), "{status:?}\n{stdout}\n{stderr}");
    assert!(stdout.starts_with("threads") || stdout.trim_start().starts_with("threads"));
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.trim_end().ends_with(" ok"))
            .count(),
        1,
        "{stdout}"
    );
    assert!(dir.join("stress-2t-10e-block.nettrace").is_file());
    assert!(stderr.contains("kept in"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn zero_threads_is_a_usage_error() {
    let (status, _, stderr) = run(&["stress", "--threads", "0"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
}
