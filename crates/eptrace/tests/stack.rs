//! `eptrace stack` on `stack-demo` (the profiler's example), whose threads are parked in
//! known functions: each thread's innermost function of the program is the known one, its
//! name and state are given; a stopped process (SIGSTOP) is an error within the timeout and
//! is left as it was. Its async tasks, not running, are each found where they are suspended:
//! three in `wait_for_payment` under `handle_order`, one in `idle_task`.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use support::{eptrace, eptrace_ok};

/// One demo at a time: each keeps a core busy.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn stack_demo() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| support::build_example("eventpipe-profiler", "stack-demo"))
        .clone()
}

fn stacks(pid: u32) -> serde_json::Value {
    serde_json::from_slice(
        &eptrace_ok("stack --json", &["stack", "-p", &pid.to_string(), "--json"]).stdout,
    )
    .unwrap()
}

#[test]
fn each_thread_is_found_in_the_function_it_is_parked_in() {
    let _one = serial();
    let demo = support::Program::start(Command::new(stack_demo()), "stack-demo");
    let s = stacks(demo.pid);
    assert_eq!(s["pid"], demo.pid);
    assert_eq!(s["process"], "stack-demo");
    let threads = s["threads"].as_array().unwrap();
    for (name, function, state) in [
        ("mutex-holder", "stack_demo::hold_mutex", "sleeping"),
        (
            "mutex-waiter",
            "stack_demo::wait_on_mutex",
            "blocked in futex",
        ),
        (
            "chan-waiter",
            "stack_demo::wait_on_channel",
            "blocked in futex",
        ),
        ("sleeper", "stack_demo::sleep_long", "sleeping"),
        ("spinner", "stack_demo::spin_forever", "running"),
    ] {
        let t = threads
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no thread {name}: {s}"));
        let innermost = t["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .find(|f| f.starts_with("stack_demo::"))
            .unwrap_or_else(|| panic!("{name} has no frame of the program: {t}"));
        assert_eq!(innermost, function, "{t}");
        assert_eq!(t["state"], state, "{t}");
    }
    // The async tasks, not running: where each is suspended, innermost first.
    let pending = s["pending_tasks"].as_array().expect("pending tasks");
    let chain = |p: &serde_json::Value| -> Vec<String> {
        p["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(pending.len(), 2, "{pending:?}");
    assert_eq!(pending[0]["tasks"], 3, "{pending:?}");
    assert_eq!(
        chain(&pending[0]),
        ["stack_demo::wait_for_payment", "stack_demo::handle_order"],
        "{pending:?}"
    );
    assert_eq!(pending[1]["tasks"], 1, "{pending:?}");
    assert_eq!(chain(&pending[1]), ["stack_demo::idle_task"], "{pending:?}");
    // Merged: one group per distinct stack, each naming its threads.
    let out = eptrace_ok(
        "stack --merge",
        &["stack", "-p", &demo.pid.to_string(), "--merge"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("stack-demo ({}), Rust", demo.pid)),
        "{text}"
    );
    assert!(text.contains("1 thread (running): spinner ("), "{text}");
    assert!(
        text.contains("pending tasks: 4")
            && text.contains(
                "3 tasks:\n    stack_demo::wait_for_payment\n    stack_demo::handle_order"
            ),
        "{text}"
    );
}

#[test]
fn a_stopped_process_is_an_error_within_the_timeout_and_left_as_it_was() {
    let _one = serial();
    let demo = support::Program::start(Command::new(stack_demo()), "stack-demo");
    let pid = demo.pid.to_string();
    let signal = |name: &str| {
        let status = Command::new("kill").args([name, &pid]).status().unwrap();
        assert!(status.success());
    };
    signal("-STOP");
    let started = Instant::now();
    let out = eptrace(&["stack", "-p", &pid, "--timeout", "1s"]);
    let took = started.elapsed();
    signal("-CONT");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("did not answer within 1.0 s"), "{err}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    // Running again, it answers as before.
    let s = stacks(demo.pid);
    assert!(s["threads"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "spinner"));
    // One that exits while it is sampled: an error, at once.
    let mut leaving = support::Program::start(Command::new(stack_demo()), "stack-demo");
    let leaving_pid = leaving.pid;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        let _ = leaving.child.kill();
        let _ = leaving.child.wait();
        drop(leaving);
    });
    let started = Instant::now();
    let out = eptrace(&["stack", "-p", &leaving_pid.to_string()]);
    killer.join().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("exited"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // No such process: said at once.
    let out = eptrace(&["stack", "-p", "999999999"]);
    assert_eq!(out.status.code(), Some(1));
}

/// .NET 8: AnalyzeApp `--park` (tests/dotnet/AnalyzeApp.cs) parks threads in known methods;
/// each is found with that method as its innermost of the app's.
#[test]
fn dotnet_threads_are_found_in_the_methods_they_wait_in() {
    let _one = serial();
    eventpipe_test_support::dotnet::with_dotnet(|d| {
        let mut command = Command::new(&d.dotnet8);
        command.arg(&d.analyzeapp).arg("--park");
        let app = support::Program::start(command, "AnalyzeApp --park");
        let s = stacks(app.pid);
        assert!(
            s["runtime"].as_str().unwrap().contains(".NET"),
            "{}",
            s["runtime"]
        );
        let innermost: Vec<(String, String)> = s["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| {
                let frame = t["frames"]
                    .as_array()?
                    .iter()
                    .filter_map(|f| f.as_str())
                    .find(|f| f.starts_with("AnalyzeApp."))?;
                Some((frame.to_owned(), t["state"].as_str()?.to_owned()))
            })
            .collect();
        for method in ["HoldMonitor", "WaitOnMonitor", "SleepLong", "WaitOnTask"] {
            let found = innermost
                .iter()
                .find(|(f, _)| f.starts_with(&format!("AnalyzeApp.{method}")))
                .unwrap_or_else(|| panic!("no thread waiting in {method}: {innermost:?}"));
            // Each waits outside managed code (in the runtime's wait).
            assert_eq!(found.1, "outside managed code", "{found:?}");
        }
    });
}

/// .NET 8: AnalyzeApp `--gc-storm` is suspended for a blocking gen2 GC most of the time;
/// a snapshot taken during one names the GC, the thread running it (in `CollectForever`) is
/// `in a GC`, and the thread that was running managed code (in `SpinManaged`) is
/// `suspended for a GC`. (The runtime's events name no threads: they are found by their
/// frames.)
#[test]
fn a_dotnet_program_caught_in_a_gc_says_so() {
    let _one = serial();
    eventpipe_test_support::dotnet::with_dotnet(|d| {
        let mut command = Command::new(&d.dotnet8);
        command.arg(&d.analyzeapp).arg("--gc-storm");
        let app = support::Program::start(command, "AnalyzeApp --gc-storm");
        // Most snapshots are taken inside a GC; a few fall between two.
        let snapshots: Vec<serde_json::Value> = (0..10).map(|_| stacks(app.pid)).collect();
        let in_gc: Vec<&serde_json::Value> =
            snapshots.iter().filter(|s| s.get("gc").is_some()).collect();
        assert!(
            in_gc.len() >= 3,
            "{} of 10 snapshots inside a GC",
            in_gc.len()
        );
        let in_method = |s: &'_ serde_json::Value, method: &str| -> Option<serde_json::Value> {
            s["threads"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| {
                    t["frames"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|f| f.as_str().unwrap().starts_with(method))
                })
                .cloned()
        };
        for s in &in_gc {
            let gc = &s["gc"];
            assert_eq!(gc["generation"], 2, "{gc}");
            assert_eq!(gc["reason"], "Induced", "{gc}");
            assert_eq!(gc["kind"], "NonConcurrent", "{gc}");
            let collector = in_method(s, "AnalyzeApp.CollectForever")
                .unwrap_or_else(|| panic!("no thread in CollectForever: {s}"));
            assert_eq!(collector["thread_id"], gc["thread_id"], "{s}");
            assert_eq!(collector["state"], "in a GC", "{collector}");
            // No thread runs managed code during it.
            assert!(
                s["threads"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|t| t["state"] != "managed code"),
                "{s}"
            );
        }
        // The spinner, last seen in its own code (not in the runtime's, where a sample can
        // also catch it), is suspended for the GC.
        assert!(
            in_gc.iter().any(|s| in_method(s, "AnalyzeApp.SpinManaged")
                .is_some_and(|t| t["state"] == "suspended for a GC")),
            "the spinner is never suspended for a GC: {in_gc:?}"
        );
        // The text's header names the GC (in one of a few snapshots, as above).
        let texts: Vec<String> = (0..8)
            .map(|_| {
                let out = eptrace_ok("stack", &["stack", "-p", &app.pid.to_string()]);
                String::from_utf8_lossy(&out.stdout).into_owned()
            })
            .take_while(|t| !t.contains("suspended for GC #"))
            .collect();
        assert!(texts.len() < 8, "no header named the GC: {texts:?}");
    });
}
