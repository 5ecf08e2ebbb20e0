//! `eptrace diff` on two runs of `diff-demo` (the profiler's example): one with `stage_b`
//! made twice as slow, held against the CPU time the program measured in each stage itself,
//! from the traces and from their converted profiles (pprof as we and as Go write it,
//! speedscope); two runs of the unchanged program; and the numbers against `go tool pprof
//! -diff_base` on the same two traces' pprof files.

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

/// A traced run of diff-demo: the trace, and the CPU ms per second it measured per stage
/// (`truth`), and in the whole run (`truth_ms`).
struct Run {
    trace: PathBuf,
    truth: BTreeMap<String, f64>,
    truth_ms: BTreeMap<String, f64>,
}

impl Drop for Run {
    fn drop(&mut self) {
        std::fs::remove_file(&self.trace).ok();
    }
}

/// Traces a whole run of diff-demo (3 s) with the CPU sampler at 10 kHz, one run at a time:
/// the sampler's signals come on scheduler ticks, and a thread that shares its core gets
/// fewer of them, each standing for more time (which can reach across a stage's end), so
/// two runs at once on a small machine would blur each other's stages.
fn run(tag: &str, slow_b: bool) -> Run {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
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
    let stdout = String::from_utf8_lossy(&out.stdout);
    let measured = |suffix: &str| {
        stdout
            .lines()
            .filter_map(|l| {
                let (key, value) = l.split_once(' ')?;
                let stage = key.strip_suffix(suffix)?;
                Some((stage.to_owned(), value.trim().parse().ok()?))
            })
            .collect::<BTreeMap<String, f64>>()
    };
    let (truth, truth_ms) = (measured("_ms_per_s"), measured("_ms"));
    assert_eq!((truth.len(), truth_ms.len()), (3, 3), "{stdout}");
    Run {
        trace,
        truth,
        truth_ms,
    }
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
    holds_the_truth("traces, per second", &d, truth);
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

    // The converted profiles compare as the traces do: pprof per second of its duration;
    // speedscope, which keeps no duration, in raw sums.
    let (base_pb, new_pb) = (converted(&base, "pprof"), converted(&new, "pprof"));
    let d = diff_json(&base_pb, &new_pb, &[]);
    holds_the_truth("pprof files, per second", &d, truth);
    let truth_ms = (new.truth_ms["stage_b"] - base.truth_ms["stage_b"]) * 1e6;
    let (base_ss, new_ss) = (
        converted(&base, "speedscope"),
        converted(&new, "speedscope"),
    );
    let d = diff_json(&base_ss, &new_ss, &["--normalize", "raw"]);
    holds_the_truth("speedscope files, raw", &d, truth_ms);
    // Without a duration, the default compares shares, and says so.
    let out = eptrace_ok(
        "diff of speedscope files",
        &["diff", base_ss.to_str().unwrap(), new_ss.to_str().unwrap()],
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("comparing shares"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // pprof as Go writes it (`go tool pprof -proto` re-encodes ours its own way).
    if let Some(go) = converters::go("eptrace diff of pprof files Go wrote") {
        let rewrite = |pb: &Path| {
            let bytes = converters::go_pprof(&go, [Path::new("-proto"), pb]);
            let path = pb.with_extension("go.pb.gz");
            std::fs::write(&path, bytes).unwrap();
            path
        };
        let (base_go, new_go) = (rewrite(&base_pb), rewrite(&new_pb));
        let d = diff_json(&base_go, &new_go, &[]);
        holds_the_truth("pprof files Go wrote, per second", &d, truth);
        std::fs::remove_file(base_go).ok();
        std::fs::remove_file(new_go).ok();
    }
    for f in [base_pb, new_pb, base_ss, new_ss] {
        std::fs::remove_file(f).ok();
    }
}

/// `run`'s trace converted to `format`, beside it.
fn converted(run: &Run, format: &str) -> PathBuf {
    let out = run.trace.with_extension(format);
    eptrace_ok(
        "convert",
        &[
            "convert",
            "-f",
            format,
            "-o",
            out.to_str().unwrap(),
            run.trace.to_str().unwrap(),
        ],
    );
    out
}

/// `stage_b` changed by `truth` (within 10 %), beyond noise, and ranks first; the unchanged
/// stages are not beyond noise.
fn holds_the_truth(what: &str, d: &serde_json::Value, truth: f64) {
    let b = function(d, "stage_b");
    let change = b["new_total"].as_f64().unwrap() - b["base_total"].as_f64().unwrap();
    assert!(
        (change - truth).abs() <= 0.1 * truth,
        "{what}: stage_b changed by {:.1} ms in the diff, {:.1} ms by the program's own clock \
         (stage_b {:.1} -> {:.1} ms; spans {} -> {} s)",
        change / 1e6,
        truth / 1e6,
        b["base_total"].as_f64().unwrap() / 1e6,
        b["new_total"].as_f64().unwrap() / 1e6,
        d["base_seconds"],
        d["new_seconds"],
    );
    assert_eq!(b["beyond_noise"], true, "{what}");
    // First: the largest change of a function's own time (its callers' totals move with
    // it, their own time does not).
    assert!(
        d["functions"][0]["function"]
            .as_str()
            .unwrap()
            .ends_with("::stage_b"),
        "{what}: {}",
        d["functions"][0]
    );
    // The unchanged stages are not reported beyond noise.
    for stage in ["stage_a", "stage_c"] {
        assert_eq!(
            function(d, stage)["beyond_noise"],
            false,
            "{what}: {stage}: {d}"
        );
    }
}

/// `go tool pprof -top -diff_base` of the two traces' pprof files: each stage's flat
/// change equals ours (raw), and so does `-top` of our one-file difference.
fn against_go_pprof(raw: &serde_json::Value, base: &Run, new: &Run, ours: &Path) {
    let Some(go) = converters::go("eptrace diff against go tool pprof -diff_base") else {
        return;
    };
    let (base_pb, new_pb) = (converted(base, "pprof"), converted(new, "pprof"));
    let top = |args: &[&str]| -> BTreeMap<String, f64> {
        let mut all = vec!["-top", "-nodecount=1000", "-nodefraction=0", "-unit=ms"];
        all.extend_from_slice(args);
        let out = converters::go_pprof(&go, all);
        // Rows: flat flat% sum% cum cum% name.
        String::from_utf8_lossy(&out)
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
