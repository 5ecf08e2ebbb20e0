//! The stress matrix (`benches/stress`) on a small corner: every cell accounts for every
//! event, the JSON lines carry exactly the documented fields, and trace files are cleaned
//! up (or kept with `keep`).
//!
//! Each run happens on a thread of its own and is given [`TIMEOUT`]: a hang in the session
//! code fails the test instead of stalling the suite. The runs take turns (one provider,
//! one session at a time).

#[path = "../benches/stress/matrix.rs"]
mod matrix;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use matrix::{Config, Mode, OutputKind};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(120);

/// One matrix run at a time: cells of two runs would count each other's events.
static ONE_RUN: Mutex<()> = Mutex::new(());

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
    let dir = std::env::temp_dir().join(format!(
        "eventpipe-stress-test-{}-{test}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Runs `config`; returns what it printed, or panics with why it failed or after
/// [`TIMEOUT`].
fn run(config: Config) -> String {
    let _turn = ONE_RUN.lock().unwrap_or_else(|e| e.into_inner());
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let outcome = matrix::do_stress(&config, &mut out).map_err(|e| format!("{e:#}"));
        let _ = done.send((outcome, String::from_utf8_lossy(&out).into_owned()));
    });
    match result.recv_timeout(TIMEOUT) {
        Ok((Ok(()), out)) => out,
        Ok((Err(e), out)) => panic!("the stress run failed: {e}\noutput:\n{out}"),
        Err(_) => panic!("the stress run still runs after {TIMEOUT:?} (a hang?)"),
    }
}

fn config(threads: &[u32], events: &[u64], dir: &std::path::Path) -> Config {
    Config {
        threads: threads.to_vec(),
        events: events.to_vec(),
        outputs: vec![OutputKind::File, OutputKind::Listener],
        modes: vec![Mode::Drop, Mode::Block],
        budget_bytes: 4 << 20,
        payload_bytes: 16,
        format: nettrace::FormatVersion::V5,
        json: true,
        dir: Some(dir.to_owned()),
        keep: false,
    }
}

fn field(row: &Value, name: &str) -> u64 {
    row[name]
        .as_u64()
        .unwrap_or_else(|| panic!("`{name}` is not an unsigned integer in {row}"))
}

#[test]
fn small_matrix_accounts_for_every_event() {
    let dir = scratch("matrix");
    let stdout = run(config(&[1, 8], &[1, 1000], &dir));
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
    let stdout = run(Config {
        outputs: vec![OutputKind::File],
        modes: vec![Mode::Block],
        budget_bytes: 1 << 20,
        format: nettrace::FormatVersion::V6,
        json: false,
        keep: true,
        ..config(&[2], &[10], &dir)
    });
    assert!(stdout.trim_start().starts_with("threads"), "{stdout}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.trim_end().ends_with(" ok"))
            .count(),
        1,
        "{stdout}"
    );
    assert!(dir.join("stress-2t-10e-block.nettrace").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn counter_sums_match_the_formula() {
    for n in [0u64, 1, 2, 7, 1000] {
        assert_eq!(matrix::expected_counter_sum(n), (0..n).sum::<u64>());
    }
}

#[test]
fn names_parse() {
    assert_eq!("File".parse::<OutputKind>(), Ok(OutputKind::File));
    assert_eq!("block".parse::<Mode>(), Ok(Mode::Block));
    assert!("v4".parse::<Mode>().is_err());
    assert_eq!(matrix::parse_format("V6"), Ok(nettrace::FormatVersion::V6));
    assert!(matrix::parse_format("v4").is_err());
}

#[test]
fn status_memory_is_read() {
    let (peak, rss) = matrix::memory();
    assert!(peak >= rss && rss > 0, "VmHWM {peak}, VmRSS {rss}");
}
