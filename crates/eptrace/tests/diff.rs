//! `eptrace diff` on two runs of `diff-demo` (the profiler's example): one with `stage_b`
//! made twice as slow, held against the CPU time the program measured in each stage itself;
//! two runs of the unchanged program; and the numbers against `go tool pprof -diff_base` on
//! the same two traces' pprof files.

mod support;

#[path = "../../insight/tests/common/mod.rs"]
mod converters;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use support::{eptrace, eptrace_ok};

fn diff_demo() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| support::build_example("eventpipe-profiler", "diff-demo"))
        .clone()
}

/// A traced run of diff-demo: the trace, and the CPU ms per second it measured per stage.
struct Run {
    trace: PathBuf,
    truth: BTreeMap<String, f64>,
}

impl Drop for Run {
    fn drop(&mut self) {
        std::fs::remove_file(&self.trace).ok();
    }
}

/// Traces a whole run of diff-demo (3 s) with the CPU sampler at 10 kHz.
fn run(tag: &str, slow_b: bool) -> Run {
    let trace = std::env::temp_dir().join(format!(
        "eptrace-diff-{}-{tag}.nettrace",
        std::process::id()
    ));
    let demo = diff_demo();
    let mut args = vec![
        "collect",
        "--providers",
        "EventPipeRs-CpuSampler:0:Informational:Rate=10000",
        "-o",
        trace.to_str().unwrap(),
        "--",
        demo.to_str().unwrap(),
        "--seconds",
        "3",
    ];
    if slow_b {
        args.push("--slow-b");
    }
    let out = eptrace_ok("collect diff-demo", &args);
    let truth = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (key, value) = l.split_once(' ')?;
            let stage = key.strip_suffix("_ms_per_s")?;
            Some((stage.to_owned(), value.trim().parse().ok()?))
        })
        .collect::<BTreeMap<String, f64>>();
    assert_eq!(truth.len(), 3, "{}", String::from_utf8_lossy(&out.stdout));
    Run { trace, truth }
}

fn diff_json(base: &Path, new: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["diff", "--json"];
    args.extend_from_slice(extra);
    args.extend([base.to_str().unwrap(), new.to_str().unwrap()]);
    serde_json::from_slice(&eptrace_ok("diff --json", &args).stdout).unwrap()
}

/// The function whose name ends in `::name`.
fn function<'j>(d: &'j serde_json::Value, name: &str) -> &'j serde_json::Value {
    let suffix = format!("::{name}");
    d["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"].as_str().unwrap().ends_with(&suffix))
        .unwrap_or_else(|| panic!("no {name} in {d}"))
}

fn beyond_noise(d: &serde_json::Value) -> Vec<String> {
    d["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["beyond_noise"] == true)
        .map(|f| f["function"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_function_made_twice_as_slow_ranks_first_with_its_true_change() {
    let base = run("base", false);
    let new = run("slow", true);
    let d = diff_json(&base.trace, &new.trace, &[]);
    // Its change per second, against what the program measured in it.
    let truth = (new.truth["stage_b"] - base.truth["stage_b"]) * 1e6;
    let b = function(&d, "stage_b");
    let change = b["new_total"].as_f64().unwrap() - b["base_total"].as_f64().unwrap();
    assert!(
        (change - truth).abs() <= 0.1 * truth,
        "stage_b changed by {:.1} ms/s in the diff, {:.1} ms/s by the program's own clock",
        change / 1e6,
        truth / 1e6
    );
    assert_eq!(b["beyond_noise"], true);
    // First: the largest change of a function's own time (its callers' totals move with
    // it, their own time does not).
    assert!(
        d["functions"][0]["function"]
            .as_str()
            .unwrap()
            .ends_with("::stage_b"),
        "{}",
        d["functions"][0]
    );
    // The unchanged stages are not reported beyond noise.
    for stage in ["stage_a", "stage_c"] {
        assert_eq!(function(&d, stage)["beyond_noise"], false, "{stage}: {d}");
    }
    // --fail-if: stage_b grew past +50 %, beyond noise (status 4); not past +150 %.
    let out = eptrace(&[
        "diff",
        "--fail-if",
        "stage_b > +50%",
        base.trace.to_str().unwrap(),
        new.trace.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("stage_b > +50%"));
    let out = eptrace(&[
        "diff",
        "--fail-if",
        "stage_b > +150%",
        "--fail-if",
        "stage_a > +10%",
        base.trace.to_str().unwrap(),
        new.trace.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("diff_demo::stage_b"), "{text}");

    // The differential flame graph, and the pprof of the difference against go's own
    // -diff_base of the two traces' pprof files.
    let dir = std::env::temp_dir();
    let svg = dir.join(format!("eptrace-diff-{}.svg", std::process::id()));
    let pprof = dir.join(format!("eptrace-diff-{}.pb.gz", std::process::id()));
    eptrace_ok(
        "diff --flamegraph --pprof",
        &[
            "diff",
            "--normalize",
            "raw",
            "--flamegraph",
            svg.to_str().unwrap(),
            "--pprof",
            pprof.to_str().unwrap(),
            base.trace.to_str().unwrap(),
            new.trace.to_str().unwrap(),
        ],
    );
    let drawn = std::fs::read_to_string(&svg).unwrap();
    std::fs::remove_file(&svg).ok();
    assert!(
        drawn.contains("stage_b") && drawn.contains("<svg"),
        "{drawn:.200}"
    );
    let raw = diff_json(&base.trace, &new.trace, &["--normalize", "raw"]);
    against_go_pprof(&raw, &base, &new, &pprof);
    std::fs::remove_file(&pprof).ok();
}

/// `go tool pprof -top -diff_base` of the two traces' pprof files: each stage's flat
/// change equals ours (raw), and so does `-top` of our one-file difference.
fn against_go_pprof(raw: &serde_json::Value, base: &Run, new: &Run, ours: &Path) {
    let Some(go) = converters::go("eptrace diff against go tool pprof -diff_base") else {
        return;
    };
    let pb = |run: &Run| {
        let out = run.trace.with_extension("pb.gz");
        eptrace_ok(
            "convert -f pprof",
            &[
                "convert",
                "-f",
                "pprof",
                "-o",
                out.to_str().unwrap(),
                run.trace.to_str().unwrap(),
            ],
        );
        out
    };
    let (base_pb, new_pb) = (pb(base), pb(new));
    let top = |args: &[&str]| -> BTreeMap<String, f64> {
        let out = std::process::Command::new(&go)
            .args([
                "tool",
                "pprof",
                "-top",
                "-nodecount=1000",
                "-nodefraction=0",
                "-unit=ms",
            ])
            .args(args)
            .env("PPROF_TMPDIR", std::env::temp_dir())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Rows: flat flat% sum% cum cum% name.
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                let flat = cols.first()?.strip_suffix("ms")?.parse().ok()?;
                Some((cols.get(5..)?.join(" "), flat))
            })
            .collect()
    };
    let go_diff = top(&[
        "-diff_base",
        base_pb.to_str().unwrap(),
        new_pb.to_str().unwrap(),
    ]);
    let go_ours = top(&[ours.to_str().unwrap()]);
    std::fs::remove_file(&base_pb).ok();
    std::fs::remove_file(&new_pb).ok();
    for stage in ["stage_a", "stage_b", "stage_c"] {
        let name = format!("diff_demo::{stage}");
        let f = function(raw, stage);
        let ours_ms = (f["new_self"].as_f64().unwrap() - f["base_self"].as_f64().unwrap()) / 1e6;
        let go_ms = go_diff.get(&name).copied().unwrap_or(0.0);
        assert!(
            (ours_ms - go_ms).abs() <= 0.01 + 1e-3 * go_ms.abs(),
            "{stage}: {ours_ms} ms by eptrace diff, {go_ms} ms by go tool pprof -diff_base"
        );
        let one_file = go_ours.get(&name).copied().unwrap_or(0.0);
        assert!(
            (one_file - go_ms).abs() <= 0.01 + 1e-3 * go_ms.abs(),
            "{stage}: {one_file} ms in our difference, {go_ms} ms by -diff_base"
        );
    }
}

#[test]
fn two_runs_of_one_program_differ_by_nothing_beyond_noise() {
    let first = run("first", false);
    let second = run("second", false);
    let d = diff_json(&first.trace, &second.trace, &["--normalize", "share"]);
    assert!(beyond_noise(&d).is_empty(), "{:?}", beyond_noise(&d));
    let out = eptrace_ok(
        "diff",
        &[
            "diff",
            "--normalize",
            "share",
            first.trace.to_str().unwrap(),
            second.trace.to_str().unwrap(),
        ],
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("No function changed beyond noise"));
}

#[test]
fn profiles_of_different_kinds_and_bad_thresholds_are_named() {
    let out = eptrace(&["diff", "--fail-if", "total 10%", "a.nettrace", "b.nettrace"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected `NAME > +10%`"));
    let out = eptrace(&["diff", "--normalize", "per-minute", "a", "b"]);
    assert_eq!(out.status.code(), Some(2));
}
