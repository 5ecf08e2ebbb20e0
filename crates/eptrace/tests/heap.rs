//! `eptrace heap` against a real Rust process: the profiler crate's `heap-leak` example
//! keeps a known live set (100,000 blocks of 256 bytes and their vector, allocated in
//! `keep_live_set`) and leaks 16 KiB blocks in `leak_more` on command. Snapshots go through a 1 MB budget in
//! Block mode, smaller than the snapshot itself, and must lose nothing; the report must
//! find the live set within its stated error, and the diff must rank the leak first.

mod support;
use support::{eptrace, text};

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The `heap-leak` example, built once into this test's target dir.
fn heap_leak() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| support::build_example("eventpipe-profiler", "heap-leak"))
        .clone()
}

/// Starts heap-leak, tracking its heap every `interval` bytes.
fn start_app(interval: u64) -> support::Program {
    let mut command = Command::new(heap_leak());
    command.args(["--interval", &interval.to_string()]).args([
        "--blocks",
        &BLOCKS.to_string(),
        "--block-size",
        &BLOCK.to_string(),
    ]);
    support::Program::start(command, "heap-leak")
}

fn snapshot(pid: u32, name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "eptrace-heap-{}-{name}.heap.nettrace",
        std::process::id()
    ));
    let pid = pid.to_string();
    let out = support::eptrace_ok(
        "eptrace heap",
        &[
            "heap",
            "-p",
            &pid,
            "--buffersize",
            "1",
            "-o",
            path.to_str().unwrap(),
        ],
    );
    assert!(
        text(&out.stdout).contains("nothing lost"),
        "{}",
        text(&out.stdout)
    );
    path
}

const BLOCKS: u64 = 100_000;
const BLOCK: u64 = 256;
/// The blocks and the vector holding them (16-byte boxed-slice pointers).
const LIVE_BYTES: f64 = (BLOCKS * BLOCK + BLOCKS * 16) as f64;
const LEAK_BLOCK: f64 = 16.0 * 1024.0;

/// An estimate within its stated 95 % half-width times 2.5 (about 5 standard errors: a
/// sampling error this test should never see).
fn assert_estimate(what: &str, got: f64, error: f64, truth: f64) {
    assert!(
        (got - truth).abs() <= 2.5 * error.max(1.0),
        "{what}: estimated {got:.0} ± {error:.0}, truly {truth:.0}"
    );
}

#[test]
fn snapshots_through_a_small_budget_lose_nothing_and_the_diff_finds_the_leak() {
    // One sample per 256 bytes on average: the live set gives about 63,000 samples, a
    // snapshot larger than the 1 MB budget it goes through.
    let mut app = start_app(256);
    let before = snapshot(app.pid, "before");
    let size = std::fs::metadata(&before).unwrap().len();
    assert!(
        size > 1 << 20,
        "the snapshot ({size} bytes) is larger than the budget"
    );
    app.send("leak 2000");
    let leaked: f64 = app.line("leaked ").parse().unwrap();
    assert_eq!(leaked, 2000.0 * LEAK_BLOCK);
    let after = snapshot(app.pid, "after");

    let report = eptrace(&["heap", "report", "--json", before.to_str().unwrap()]);
    assert!(report.status.success(), "{}", text(&report.stderr));
    let json: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(json["complete"], true);
    let site = |json: &serde_json::Value, name: &str| {
        json["sites"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["site"]["function"].as_str().unwrap().contains(name))
            .fold((0.0, 0.0f64, 0.0), |(b, e, c), s| {
                let err = s["bytes_error"].as_f64().unwrap();
                (
                    b + s["bytes"].as_f64().unwrap(),
                    (e * e + err * err).sqrt(),
                    c + s["count"].as_f64().unwrap(),
                )
            })
    };
    let (bytes, error, count) = site(&json, "keep_live_set");
    assert_estimate("keep_live_set's live bytes", bytes, error, LIVE_BYTES);
    // Allocations: the blocks and the vector (whose one sample stands for itself).
    assert_estimate(
        "keep_live_set's allocations",
        count,
        error / BLOCK as f64,
        (BLOCKS + 1) as f64,
    );
    assert!(
        json["samples"].as_u64().unwrap() > 40_000,
        "{} samples",
        json["samples"]
    );
    let (leak_before, _, _) = site(&json, "leak_more");
    assert_eq!(leak_before, 0.0, "nothing leaked yet");

    // The diff ranks the leak first, grown by what was leaked.
    let diff = eptrace(&[
        "heap",
        "diff",
        "--json",
        before.to_str().unwrap(),
        after.to_str().unwrap(),
    ]);
    assert!(diff.status.success(), "{}", text(&diff.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&diff.stdout).unwrap();
    let first = &rows[0];
    assert!(
        first["site"]["function"]
            .as_str()
            .unwrap()
            .contains("leak_more"),
        "{rows:#}"
    );
    let grown = first["bytes"][1].as_f64().unwrap() - first["bytes"][0].as_f64().unwrap();
    assert_estimate(
        "leak_more's growth",
        grown,
        first["error"].as_f64().unwrap(),
        leaked,
    );
    let text_diff = text(
        &eptrace(&[
            "heap",
            "diff",
            before.to_str().unwrap(),
            after.to_str().unwrap(),
        ])
        .stdout,
    );
    assert!(text_diff.contains("leak_more"), "{text_diff}");

    // The same snapshot as a profile: its total is the report's.
    let folded = eptrace(&[
        "heap",
        "convert",
        "-f",
        "collapsed",
        "-o",
        "-",
        after.to_str().unwrap(),
    ]);
    assert!(folded.status.success(), "{}", text(&folded.stderr));
    let total: u64 = text(&folded.stdout)
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    let after_json: serde_json::Value = serde_json::from_slice(
        &eptrace(&["heap", "report", "--json", after.to_str().unwrap()]).stdout,
    )
    .unwrap();
    assert_eq!(Some(total), after_json["bytes"].as_u64());
    std::fs::remove_file(&before).ok();
    std::fs::remove_file(&after).ok();
}

#[test]
fn a_librarys_site_names_the_programs_caller_and_rows_sum_by_it() {
    let mut app = start_app(256);
    let path = snapshot(app.pid, "callers");
    app.send("quit");
    let report = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["heap", "report", "--json"];
        all.extend_from_slice(args);
        all.push(path.to_str().unwrap());
        let out = eptrace(&all);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let by_site = report(&[]);
    let rows = by_site["sites"].as_array().unwrap();
    // The backtrace crate allocated the frames; the program asked in keep_backtraces.
    let library: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|r| {
            r["site"]["function"]
                .as_str()
                .unwrap()
                .starts_with("backtrace::")
        })
        .collect();
    assert!(
        !library.is_empty(),
        "no site in the backtrace crate: {by_site:#}"
    );
    let library_bytes: f64 = library.iter().map(|r| r["bytes"].as_f64().unwrap()).sum();
    for row in &library {
        let caller = row["caller"]["function"].as_str().unwrap_or_default();
        assert!(caller.contains("keep_backtraces"), "{row:#}");
    }
    // The program's own sites have no caller of their own.
    let own = rows
        .iter()
        .find(|r| {
            r["site"]["function"]
                .as_str()
                .unwrap()
                .ends_with("keep_live_set")
        })
        .unwrap();
    assert!(own.get("caller").is_none(), "{own:#}");

    // By caller: the library's rows are summed under the program's function.
    let by_caller = report(&["--by", "caller"]);
    let rows = by_caller["sites"].as_array().unwrap();
    let keep = rows
        .iter()
        .find(|r| {
            r["site"]["function"]
                .as_str()
                .unwrap()
                .contains("keep_backtraces")
        })
        .unwrap_or_else(|| panic!("no keep_backtraces row: {by_caller:#}"));
    assert!(keep["bytes"].as_f64().unwrap() >= library_bytes, "{keep:#}");
    assert!(!rows.iter().any(|r| r["site"]["function"]
        .as_str()
        .unwrap()
        .starts_with("backtrace::")));
    assert_eq!(
        by_caller["bytes"], by_site["bytes"],
        "the same heap, summed otherwise"
    );
    // The table shows the caller beside the site.
    let table = text(&eptrace(&["heap", "report", path.to_str().unwrap()]).stdout);
    assert!(
        table.lines().any(|l| l.contains("backtrace::")
            && l.contains("<- ")
            && l.contains("keep_backtraces")),
        "{table}"
    );
    std::fs::remove_file(&path).ok();
}
