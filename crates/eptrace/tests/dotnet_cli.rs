//! The `eptrace` binary against real .NET runtimes (.NET Core 3.1 and .NET 8): `ps` finds
//! the running TestApp and names its runtime, `collect -p` records a session from it, and
//! (.NET 8) `collect -- CMD` starts it suspended and traces it from its first event. Every
//! trace file is checked as exhaustively as the library's own tests check a live stream
//! (`eventpipe_test_support::dotnet`): exact payloads of every TestApp event, GC and
//! exception events named and decoded, no loss, a clean end.
//!
//! The runtimes and the app come from `bash ci/dotnet.sh`; without them (or with
//! `EVENTPIPE_SKIP_DOTNET=1`) each test prints one line and passes.

mod support;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use eventpipe_test_support::dotnet::{
    verify_file, with_dotnet, Analysis, App, Progress, Runtime, APP_SECONDS, LIVE_SESSION,
    MAX_SESSION, RUNTIME_KEYWORDS, RUNTIME_PROVIDER, STARTUP_SESSION, TEST_PROVIDER,
};

/// `--providers`: the app's provider, every keyword; the runtime's GC and Exception
/// keywords (`EventPipeRs-Test:0xFFFFFFFFFFFFFFFF:5,Microsoft-Windows-DotNETRuntime:0x8001:5`);
/// both verbose.
fn providers() -> String {
    format!(
        "{TEST_PROVIDER}:{:#X}:5,{RUNTIME_PROVIDER}:{RUNTIME_KEYWORDS:#x}:5",
        u64::MAX
    )
}

/// How long any one `eptrace` run may take before the test gives up on it: a session may
/// wait [`MAX_SESSION`] for the app's work, and stopping takes a few seconds more.
const EPTRACE_TIMEOUT: Duration = Duration::from_secs(MAX_SESSION.as_secs() + 45);

#[test]
fn ps_and_collect_on_dotnet_core_3_1() {
    with_dotnet(|dotnet| {
        ps_and_collect(&dotnet.dotnet31, &dotnet.testapp, Runtime::Core31);
    });
}

#[test]
fn ps_and_collect_on_dotnet_8() {
    with_dotnet(|dotnet| {
        ps_and_collect(&dotnet.dotnet8, &dotnet.testapp, Runtime::Net8);
    });
}

/// `eptrace ps --json` lists the app; `eptrace collect -p` traces it for 2.5 s.
fn ps_and_collect(dotnet: &Path, testapp: &Path, runtime: Runtime) {
    let label = match runtime {
        Runtime::Core31 => "eptrace ps/collect -p, .NET Core 3.1",
        Runtime::Net8 => "eptrace ps/collect -p, .NET 8",
    };
    let t0 = Instant::now();
    let mut app = App::spawn(dotnet, testapp, &[]);
    drop(app.wait_for_socket(label));
    // Main prints its pid after the runtime's diagnostics server listens.
    let version = app.expect_runtime(label, runtime);

    // ps
    let ps = Eptrace::run(&["ps", "--json"], label);
    ps.assert_success(label);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&ps.stdout).unwrap_or_else(|e| {
        panic!("{label}: `eptrace ps --json` printed no JSON list ({e}): {ps}")
    });
    let row = rows
        .iter()
        .find(|r| r["pid"].as_u64() == Some(u64::from(app.pid)))
        .unwrap_or_else(|| {
            panic!(
                "{label}: `eptrace ps --json` does not list pid {}: {ps}",
                app.pid
            )
        });
    let ps_runtime = row["runtime"].as_str().unwrap_or_default();
    match runtime {
        Runtime::Core31 => assert_eq!(
            ps_runtime, ".NET (3.1 or older)",
            "{label}: ps's runtime for the app: {row}"
        ),
        Runtime::Net8 => assert!(
            ps_runtime.starts_with(&format!(".NET {version}")),
            "{label}: ps's runtime for the app (on {version}): {row}"
        ),
    }
    assert_eq!(
        row["name"], "dotnet",
        "{label}: ps's name for the app: {row}"
    );
    assert!(
        row["command_line"]
            .as_str()
            .is_some_and(|c| c.contains("TestApp")),
        "{label}: ps's command line for the app does not mention TestApp: {row}"
    );
    let ps_took = t0.elapsed();

    // collect -p
    let trace = TraceFile::new(match runtime {
        Runtime::Core31 => "attach-3.1",
        Runtime::Net8 => "attach-8",
    });
    let pid = app.pid.to_string();
    let providers = providers();
    let t1 = Instant::now();
    let args = [
        "collect",
        "-p",
        &pid,
        "--providers",
        &providers,
        "-o",
        trace.arg(),
    ];
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    let collect = Eptrace::start(&args, label, &app.progress).stop_after_enough_work(label);
    let collect_took = t1.elapsed();
    app.check_running(label, "while eptrace collect traced it");
    collect.assert_success(label);
    assert!(
        collect.stderr.contains(&format!(
            "Tracing dotnet (pid {pid}, {ps_runtime}) into {}",
            trace.arg()
        )),
        "{label}: collect's header line: {collect}"
    );
    let analysis = verify_file(&trace.path, label, false);
    collect.assert_summary(label, &trace, &analysis, "you asked");
    analysis.print_summary(label);
    eprintln!(
        "{label}: ps after {ps_took:?}, collect took {collect_took:?}; test took {:?}",
        t0.elapsed()
    );
}

/// `eptrace collect -- dotnet TestApp.exe` starts the app with the runtime suspended on
/// eptrace's reverse port: the trace holds every event from iteration 0. The session starts
/// before the runtime has loaded and compiled anything; it runs at least 4 s (where the
/// machine is not loaded, past the app's 1,000th iteration, its first induced GC) and until
/// the app has done enough work.
#[test]
fn collect_launches_dotnet_8_suspended() {
    with_dotnet(|dotnet| {
        let label = "eptrace collect -- CMD, .NET 8";
        let t0 = Instant::now();
        let trace = TraceFile::new("launch-8");
        let providers = providers();
        // The app shares eptrace's stderr, so its progress lines come with eptrace's.
        let progress = Progress::new();
        let collect = Eptrace::start(
            &[
                "collect".as_ref(),
                "--providers".as_ref(),
                providers.as_ref(),
                "-o".as_ref(),
                trace.path.as_os_str(),
                "--".as_ref(),
                dotnet.dotnet8.as_os_str(),
                dotnet.testapp.as_os_str(),
                APP_SECONDS.as_ref(),
            ],
            label,
            &progress,
        )
        .with_minimum(STARTUP_SESSION)
        .stop_after_enough_work(label);
        let took = t0.elapsed();
        collect.assert_success(label);
        // The app shares eptrace's stdout.
        let app_pid = collect
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("pid "))
            .unwrap_or_else(|| panic!("{label}: the app printed no pid: {collect}"))
            .trim()
            .to_string();
        assert!(
            collect
                .stdout
                .lines()
                .any(|l| l.starts_with("runtime 8.0.")),
            "{label}: the app did not run on .NET 8: {collect}"
        );
        assert!(
            collect
                .stderr
                .contains(&format!("Tracing dotnet (pid {app_pid}, .NET 8.0.")),
            "{label}: collect's header line does not name the app's pid {app_pid} and .NET 8: \
             {collect}"
        );
        assert!(
            !Path::new(&format!("/proc/{app_pid}")).exists(),
            "{label}: the launched app (pid {app_pid}) outlived eptrace"
        );
        let analysis = verify_file(&trace.path, label, true);
        collect.assert_summary(label, &trace, &analysis, "you asked");
        analysis.print_summary(label);
        eprintln!(
            "{label}: collect took {took:?}; test took {:?}",
            t0.elapsed()
        );
    });
}

/// `eptrace collect --profile cpu-sampling -- dotnet TestApp.exe` on .NET 8: the sample
/// profiler's stacks are named from the runtime's method load and rundown events, so the
/// report's hottest functions include the app's own managed code.
#[test]
fn cpu_samples_of_dotnet_8_name_managed_methods() {
    with_dotnet(|dotnet| {
        let label = "eptrace collect --profile cpu-sampling, .NET 8";
        let trace = TraceFile::new("cpu-8");
        let collect = Eptrace::run_os(
            &[
                "collect".as_ref(),
                "--profile".as_ref(),
                "cpu-sampling".as_ref(),
                "--duration".as_ref(),
                "2s".as_ref(),
                "-o".as_ref(),
                trace.path.as_os_str(),
                "--".as_ref(),
                dotnet.dotnet8.as_os_str(),
                dotnet.testapp.as_os_str(),
                "5".as_ref(),
            ],
            label,
        );
        collect.assert_success(label);
        let report = Eptrace::run(&["report", "--json", trace.path.to_str().unwrap()], label);
        report.assert_success(label);
        let json: serde_json::Value = serde_json::from_str(&report.stdout).unwrap();
        // .NET's sampler measures thread time, and the report says so.
        let hot = support::thread_time_profile(&json, label);
        assert!(hot["samples"].as_u64().unwrap() > 100, "{label}: {hot}");
        let functions = hot["functions"].as_array().unwrap();
        let main = functions
            .iter()
            .find(|f| f["function"] == "Program.Main")
            .unwrap_or_else(|| panic!("{label}: Program.Main not among {functions:#?}"));
        assert_eq!(main["module"], "TestApp.exe", "{label}: {main}");
        // Main is on every sample of the main thread, which it keeps busy all session: its
        // thread time is the main thread's first to last sample, most of the trace and never
        // more.
        let main_ms = main["total_weight"].as_u64().unwrap() as f64 / 1e6;
        let trace_ms = json["duration_ms"].as_f64().unwrap();
        assert!(
            main_ms > 0.5 * trace_ms && main_ms <= trace_ms,
            "{label}: Main {main_ms:.1} ms of thread time in a {trace_ms:.1} ms trace"
        );
        // Runtime methods (JIT'd or ReadyToRun) are named too, by namespace and type.
        assert!(
            functions
                .iter()
                .any(|f| f["function"].as_str().unwrap().starts_with("System.")),
            "{label}: no System.* method among {functions:#?}"
        );
    });
}

// ---------------------------------------------------------------------------------------
// Running eptrace

/// A finished `eptrace` run.
struct Eptrace {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// An `eptrace` process, killed if the test gives up on it.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl Eptrace {
    fn run(args: &[&str], label: &str) -> Eptrace {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        Eptrace::run_os(&args, label)
    }

    /// Runs eptrace with no stdin, within [`EPTRACE_TIMEOUT`].
    fn run_os(args: &[&std::ffi::OsStr], label: &str) -> Eptrace {
        Eptrace::start(args, label, &Progress::new()).finish(label)
    }

    /// Starts eptrace with no stdin. Its stderr is read as it comes: `progress` takes in the
    /// app's progress lines (a launched app shares eptrace's stderr) and notes where the app
    /// was when eptrace printed its `Tracing ...` header, which it does once the session
    /// has started and Ctrl-C stops it.
    fn start(args: &[&std::ffi::OsStr], label: &str, progress: &Progress) -> Started {
        let mut child = Command::new(env!("CARGO_BIN_EXE_eptrace"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{label}: starting eptrace: {e}"));
        let mut out = child.stdout.take().expect("piped");
        let stdout = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = out.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        });
        let err = BufReader::new(child.stderr.take().expect("piped"));
        let (tracing_tx, tracing) = mpsc::channel();
        let seen = progress.clone();
        let stderr = std::thread::spawn(move || {
            let mut kept = String::new();
            for line in err.lines() {
                let Ok(line) = line else { break };
                if seen.take_line(&line) {
                    continue;
                }
                if line.starts_with("Tracing ") {
                    let _ = tracing_tx.send((seen.latest(), Instant::now()));
                }
                kept.push_str(&line);
                kept.push('\n');
            }
            kept
        });
        Started {
            running: Running(child),
            args: args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            stdout,
            stderr,
            tracing,
            progress: progress.clone(),
            minimum: LIVE_SESSION,
        }
    }
}

/// An `eptrace` run under way.
struct Started {
    running: Running,
    args: Vec<String>,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
    /// Where the app was, and when, as eptrace said its session had started.
    tracing: Receiver<(i64, Instant)>,
    progress: Progress,
    /// The shortest session [`Started::stop_after_enough_work`] allows.
    minimum: Duration,
}

impl Started {
    fn with_minimum(mut self, minimum: Duration) -> Started {
        self.minimum = minimum;
        self
    }

    /// Once the session has run its minimum and the app has done enough work in it, stops
    /// eptrace as Ctrl-C would, and waits for it to finish.
    fn stop_after_enough_work(mut self, label: &str) -> Eptrace {
        let (from, started) = match self.tracing.recv_timeout(EPTRACE_TIMEOUT) {
            Ok(at) => at,
            Err(_) => {
                let _ = self.running.0.kill();
                let eptrace = self.finish(label);
                panic!("{label}: eptrace never said `Tracing ...`: {eptrace}");
            }
        };
        self.progress
            .wait_for_enough(label, from, started, self.minimum);
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe { libc::kill(self.running.0.id() as i32, libc::SIGINT) };
        self.finish(label)
    }

    /// Waits (within [`EPTRACE_TIMEOUT`]) for eptrace to exit.
    fn finish(mut self, label: &str) -> Eptrace {
        let deadline = Instant::now() + EPTRACE_TIMEOUT;
        let status = loop {
            match self.running.0.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(None) => {
                    drop(self.running);
                    panic!(
                        "{label}: eptrace {:?} did not finish within {EPTRACE_TIMEOUT:?}",
                        self.args
                    );
                }
                Err(e) => panic!("{label}: waiting for eptrace: {e}"),
            }
        };
        Eptrace {
            status,
            stdout: self.stdout.join().unwrap_or_default(),
            stderr: self.stderr.join().unwrap_or_default(),
        }
    }
}

impl Eptrace {
    fn assert_success(&self, label: &str) {
        assert!(self.status.success(), "{label}: eptrace failed: {self}");
    }

    /// `collect`'s summary: the file, the event count the file holds, no loss, the reason.
    fn assert_summary(&self, label: &str, trace: &TraceFile, analysis: &Analysis, why: &str) {
        let mut lines = self.stdout.lines();
        assert!(
            lines.any(|l| l == format!("Trace written to {}", trace.arg())),
            "{label}: no `Trace written to {}` line: {self}",
            trace.arg()
        );
        let summary = lines.next().unwrap_or_default();
        let want = format!("Collected {} events (", analysis.events);
        assert!(
            summary.starts_with(&want),
            "{label}: the summary does not count the file's {} events: {self}",
            analysis.events
        );
        assert!(
            summary.contains("; 0 events lost.") && analysis.lost_events == 0,
            "{label}: events were lost: {self}"
        );
        assert!(
            summary.contains(&format!("Stopped because {why}.")),
            "{label}: the summary does not say `Stopped because {why}.`: {self}"
        );
    }
}

impl std::fmt::Display for Eptrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\n--- stdout\n{}--- stderr\n{}---",
            self.status, self.stdout, self.stderr
        )
    }
}

/// A trace file in the temporary directory, removed unless the test fails.
struct TraceFile {
    path: PathBuf,
}

impl TraceFile {
    fn new(what: &str) -> TraceFile {
        let path = std::env::temp_dir().join(format!(
            "eptrace-dotnet-{}-{what}.nettrace",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        TraceFile { path }
    }

    fn arg(&self) -> &str {
        self.path
            .to_str()
            .expect("the temporary directory's path is UTF-8")
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the trace is kept in {}", self.path.display());
        } else {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
