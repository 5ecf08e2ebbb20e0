//! `eptrace analyze` held against the .NET runtime's own accounting: `AnalyzeApp`
//! (tests/dotnet/AnalyzeApp.cs) induces GCs, contends a lock, throws known exceptions and
//! starves the thread pool, then prints what the runtime itself counted
//! (`GC.CollectionCount`, `GC.GetTotalPauseDuration`, `Monitor.LockContentionCount`,
//! `JitInfo.GetCompiledMethodCount`, `ThreadPool.ThreadCount`) and its own exception counts.
//! Traced from its first event (`eptrace collect -- CMD`) on .NET 8, the analysis must
//! agree: GC counts per generation and the exceptions exactly, the total pause within 2 %,
//! the contentions and the methods compiled within 5 %.
//!
//! The runtimes and the app come from `bash ci/dotnet.sh`; without them (or with
//! `EVENTPIPE_SKIP_DOTNET=1`) the test prints one line and passes.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use eventpipe_test_support::dotnet::with_dotnet;
use serde_json::Value;
use support::{eptrace_ok, text};

/// GC (0x1), JIT (0x10), Contention (0x4000), Exception (0x8000), Threading (0x10000) and
/// CompilationDiagnostic (0x2000000000, for ReadyToRun use), at Verbose (JIT's events and
/// `GC/AllocationTick` are Verbose).
const PROVIDERS: &str = "Microsoft-Windows-DotNETRuntime:0x200001C011:5";

/// The total weight of the collapsed-stack lines whose stack passes `keep`.
fn weight_where(folded: &str, keep: impl Fn(&str) -> bool) -> f64 {
    folded
        .lines()
        .filter_map(|line| line.rsplit_once(' '))
        .filter(|(stack, _)| keep(stack))
        .map(|(_, weight)| weight.parse::<f64>().unwrap())
        .sum()
}

fn within(label: &str, measured: f64, truth: f64, tolerance: f64) {
    eprintln!("{label}: analysis {measured}, runtime {truth}");
    assert!(
        (measured - truth).abs() <= tolerance * truth.abs(),
        "{label}: the analysis says {measured}, the runtime {truth} (tolerance {}%)",
        tolerance * 100.0
    );
}

#[test]
fn analyze_agrees_with_the_runtimes_own_accounting_on_dotnet_8() {
    with_dotnet(|dotnet| {
        let run = traced_app(&dotnet.dotnet8, &dotnet.analyzeapp, "8");
        let (dir, trace) = (&run.dir, &run.trace);
        let t = |k: &str| run.truth(k);
        let a = run.analysis();
        run.assert_gc_counts(&a);
        assert_eq!(
            a["gc"]["complete"].as_f64().unwrap(),
            t("gc0"),
            "every GC complete"
        );
        assert_eq!(
            a["gc"]["induced"].as_f64().unwrap(),
            10.0,
            "the app's induced GCs"
        );
        // The app's GC.Collect(2, Forced, blocking: true) calls (the runtime may run the
        // gen2 GCs it escalates to in the background).
        assert!(a["gc"]["blocking_gen2"].as_f64().unwrap() >= 2.0);
        // The runtime counts a pause from the suspension's start to the GC's end, before
        // it restarts the program's threads (gc.cpp `do_post_gc`, `total_suspended_time`):
        // the analysis's pause less its restarts. The restarts are where a loaded machine
        // preempts the GC thread (the threads it wakes take its CPU), which only the
        // analysis's pause (PerfView's, to `RestartEEStop`) sees.
        let pause = a["gc"]["total_pause_ms"].as_f64().unwrap();
        let restarting = a["gc"]["total_restart_ms"].as_f64().unwrap();
        assert!(
            restarting > 0.0 && restarting < pause,
            "{restarting} of {pause}"
        );
        within(
            "total GC pause before the restarts, ms",
            pause - restarting,
            t("pause_ms"),
            0.02,
        );

        // Contention: every start the runtime counted.
        within(
            "contentions",
            a["contention"]["count"].as_f64().unwrap(),
            t("contentions"),
            0.05,
        );
        assert!(a["contention"]["count"].as_f64().unwrap() >= 20.0);

        // Exceptions: the app's own, exactly.
        let thrown = |ty: &str, message: &str| {
            a["exceptions"]["by_type"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["exception_type"] == ty && r["message"] == message)
                .map_or(0.0, |r| r["count"].as_f64().unwrap())
        };
        assert_eq!(
            thrown("ScenarioException", "scenario one"),
            t("thrown_scenario_one")
        );
        assert_eq!(
            thrown("System.InvalidOperationException", "scenario two"),
            t("thrown_scenario_two")
        );

        // JIT: the methods the runtime says it compiled.
        within(
            "methods compiled",
            a["jit"]["methods_jitted"].as_f64().unwrap(),
            t("jit_methods"),
            0.05,
        );
        // The framework's own code is precompiled: its methods run as ReadyToRun.
        assert!(a["jit"]["ready_to_run_methods"].as_u64().unwrap() > 0);

        // The thread pool grew for starvation, to the workers the runtime reports.
        assert!(a["threadpool"]["starvation_adjustments"].as_u64().unwrap() >= 1);
        let rules: Vec<&str> = a["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["rule"].as_str().unwrap())
            .collect();
        for rule in ["gc-induced", "gc-blocking-gen2", "threadpool-starvation"] {
            assert!(rules.contains(&rule), "no {rule} finding: {rules:?}");
        }

        // The sections' stacks: the throw stack of each exception type with its count, and
        // the lock waits in the method that waited.
        let top_stacks = |section: &str| a[section]["stacks"].as_array().unwrap().clone();
        let thrown_at = |leaf: &str| {
            top_stacks("exceptions")
                .iter()
                .filter(|s| s["frames"][0] == leaf)
                .map(|s| s["value"].as_f64().unwrap())
                .sum::<f64>()
        };
        assert_eq!(
            thrown_at("Throw ScenarioException"),
            t("thrown_scenario_one")
        );
        assert_eq!(
            thrown_at("Throw System.InvalidOperationException"),
            t("thrown_scenario_two")
        );
        let waited_in_gate: f64 = top_stacks("contention")
            .iter()
            .filter(|s| {
                s["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f.as_str().unwrap().contains("AnalyzeApp.WaitForGate"))
            })
            .map(|s| s["value"].as_f64().unwrap())
            .sum();
        within(
            "contention stacks in WaitForGate, ms",
            waited_in_gate,
            t("contention_wait_ms"),
            0.10,
        );
        assert!(!top_stacks("allocations").is_empty());

        // The same events as profiles, on the stacks the runtime recorded with them.
        let trace_path = trace.to_str().unwrap();
        let folded = |samples: &str| {
            let out = eptrace_ok(
                &format!("convert --samples {samples}"),
                &[
                    "convert",
                    "--samples",
                    samples,
                    "-f",
                    "collapsed",
                    "-o",
                    "-",
                    trace_path,
                ],
            );
            text(&out.stdout)
        };
        // Each exception at its throw stack, ending in the type thrown: the app's counts.
        let exceptions = folded("exceptions");
        assert_eq!(
            weight_where(&exceptions, |stack| stack
                .ends_with(";Throw ScenarioException")),
            t("thrown_scenario_one"),
            "{exceptions}"
        );
        assert_eq!(
            weight_where(&exceptions, |stack| {
                stack.ends_with(";Throw System.InvalidOperationException")
            }),
            t("thrown_scenario_two"),
            "{exceptions}"
        );
        // Lock waits by time (collapsed weights are µs), in the method that waited: what
        // it timed itself.
        let contention = folded("contention");
        within(
            "WaitForGate's lock waits, ms",
            weight_where(&contention, |stack| {
                stack.contains("AnalyzeApp.WaitForGate")
            }) / 1000.0,
            t("contention_wait_ms"),
            0.10,
        );
        // Allocations by the bytes each tick stands for (~100 KB: the error of one tick on
        // 12 MB), ending in the type: what the runtime counted for the method.
        let alloc = folded("alloc");
        within(
            "LargeAllocations' byte[] bytes",
            weight_where(&alloc, |stack| {
                stack.contains("AnalyzeApp.LargeAllocations")
                    && stack.ends_with(";Type System.Byte[]")
            }),
            t("large_bytes"),
            0.05,
        );
        let _ = std::fs::remove_dir_all(dir);
    });
}

/// AnalyzeApp traced from its first event by `dotnet` (a .NET host), and what it printed.
struct TracedApp {
    dir: PathBuf,
    trace: PathBuf,
    stdout: String,
    truth: BTreeMap<String, f64>,
}

impl TracedApp {
    /// `analyze --json` of its trace.
    fn analysis(&self) -> Value {
        let out = eptrace_ok(
            "analyze --json",
            &["analyze", "--json", self.trace.to_str().unwrap()],
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The analysis's GCs per generation against the runtime's, exactly:
    /// `CollectionCount(g)` counts the GCs of g and older.
    fn assert_gc_counts(&self, a: &Value) {
        let gcs = a["gc"]["gcs"].as_array().unwrap();
        let of = |g: u64| gcs.iter().filter(|r| r["generation"] == g).count() as f64;
        let t = |k: &str| self.truth(k);
        assert_eq!(of(2), t("gc2"), "gen2 GCs");
        assert_eq!(of(1), t("gc1") - t("gc2"), "gen1 GCs");
        assert_eq!(of(0), t("gc0") - t("gc1"), "gen0 GCs");
    }

    /// The runtime's own number `key`, which the app must have printed.
    fn truth(&self, key: &str) -> f64 {
        *self
            .truth
            .get(key)
            .unwrap_or_else(|| panic!("the app printed no {key}: {}", self.stdout))
    }
}

/// AnalyzeApp started waiting (`--wait`), traced by `collect -p PID` from before it starts
/// its scenarios until it exits: for runtimes without a diagnostic port (.NET Core 3.1).
fn attached_app(dotnet: &Path, app: &Path, label: &str) -> TracedApp {
    let dir = scratch(label);
    let trace = dir.join("analyze-app.nettrace");
    let mut command = std::process::Command::new(dotnet);
    command.arg(app).arg("--wait");
    let mut program = support::Program::start(command, "AnalyzeApp --wait");
    let mut collect = std::process::Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args([
            "collect",
            "-p",
            &program.pid.to_string(),
            "--providers",
            PROVIDERS,
            "-o",
        ])
        .arg(&trace)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // `collect` says where it traces (on stderr, off a terminal) once the session runs.
    let mut said = std::io::BufReader::new(collect.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("Tracing") {
        line.clear();
        let n = std::io::BufRead::read_line(&mut said, &mut line).unwrap();
        assert!(n > 0, "collect ended before tracing");
    }
    // The rest of what it says, read so that it never waits on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut said, &mut std::io::sink()));
    program.send("go");
    let mut stdout = String::new();
    loop {
        let line = program.line("");
        stdout.push_str(&line);
        stdout.push('\n');
        if line.starts_with("done") {
            break;
        }
    }
    let status = collect.wait().unwrap();
    assert!(status.success(), "collect -p failed: {status}");
    TracedApp {
        dir,
        trace,
        truth: truth_of(&stdout),
        stdout,
    }
}

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("eptrace-analyze-{label}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The app's "key value" lines.
fn truth_of(stdout: &str) -> BTreeMap<String, f64> {
    stdout
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_owned(), v.trim().parse().ok()?))
        })
        .collect()
}

fn traced_app(dotnet: &Path, app: &Path, label: &str) -> TracedApp {
    let dir = scratch(label);
    let trace = dir.join("analyze-app.nettrace");
    let out = eptrace_ok(
        "collect -- AnalyzeApp",
        &[
            "collect",
            "--providers",
            PROVIDERS,
            "-o",
            trace.to_str().unwrap(),
            "--",
            dotnet.to_str().unwrap(),
            app.to_str().unwrap(),
        ],
    );
    // The app shares eptrace's stdout: its "key value" lines.
    let stdout = text(&out.stdout);
    let truth = truth_of(&stdout);
    assert!(
        stdout.contains("done ok"),
        "the app did not finish: {stdout}"
    );
    TracedApp {
        dir,
        trace,
        stdout,
        truth,
    }
}

/// .NET Core 3.1 writes the same GC, contention and exception events, but has no
/// `GC.GetTotalPauseDuration` or `JitInfo` to check the pause and the JIT against, and no
/// diagnostic port to start the app suspended (the app waits while `collect -p` attaches):
/// the parts it has are held as on .NET 8.
#[test]
fn analyze_agrees_with_the_runtimes_own_accounting_on_dotnet_core_3_1() {
    with_dotnet(|dotnet| {
        let run = attached_app(&dotnet.dotnet31, &dotnet.analyzeapp, "31");
        let t = |k: &str| run.truth(k);
        assert!(!run.truth.contains_key("pause_ms") && !run.truth.contains_key("jit_methods"));
        let a = run.analysis();
        run.assert_gc_counts(&a);
        assert_eq!(a["gc"]["induced"].as_f64().unwrap(), 10.0);
        within(
            "contentions",
            a["contention"]["count"].as_f64().unwrap(),
            t("contentions"),
            0.05,
        );
        let thrown = |ty: &str| {
            a["exceptions"]["by_type"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["exception_type"] == ty)
                .map(|r| r["count"].as_f64().unwrap())
                .sum::<f64>()
        };
        assert_eq!(thrown("ScenarioException"), t("thrown_scenario_one"));
        assert_eq!(
            thrown("System.InvalidOperationException"),
            t("thrown_scenario_two")
        );
        assert!(a["jit"]["methods_jitted"].as_f64().unwrap() > 0.0);
        assert!(a["threadpool"]["starvation_adjustments"].as_u64().unwrap() >= 1);
        let waited: f64 = a["contention"]["total_wait_ms"].as_f64().unwrap();
        assert!(
            waited >= 0.9 * t("contention_wait_ms"),
            "{waited} ms of lock waits against the app's own {}",
            t("contention_wait_ms")
        );
        let _ = std::fs::remove_dir_all(&run.dir);
    });
}
