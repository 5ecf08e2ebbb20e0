//! End-to-end tests against real .NET runtimes (.NET Core 3.1 and .NET 8), through this
//! crate's client API: a live EventPipe session over a process's diagnostics socket, and
//! (.NET 8) startup tracing through a reverse diagnostic port with the runtime suspended.
//!
//! The traced process is `tests/dotnet/TestApp.cs`; its header documents every value its
//! events carry at iteration `i`, and the trace (read with `nettrace`) is checked against
//! those formulas exactly: every field value, and the raw payload bytes.
//!
//! The runtimes and the app come from `bash ci/dotnet.sh`, which writes
//! `target/dotnet/env` (`$EVENTPIPE_DOTNET_ROOT/env` when that is set). Without that file,
//! or with `EVENTPIPE_SKIP_DOTNET=1`, each test prints one line and passes.
//!
//! What the tests share with `eptrace`'s (locating the runtimes, the app, the trace check)
//! is in `eventpipe_test_support::dotnet`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::{Duration, Instant};

use eventpipe_ipc::command::{DEFAULT_RUNDOWN_KEYWORD, FORMAT_NETTRACE};
use eventpipe_ipc::{
    Client, CollectTracing, Error, ProviderRequest, ReversePort, ServerError, TraceStream,
};
use eventpipe_test_support::dotnet::{
    analyse, with_dotnet, Analysis, App, Runtime, LIVE_SESSION, RUNTIME_KEYWORDS, RUNTIME_PROVIDER,
    STARTUP_SESSION, TEST_PROVIDER,
};

/// How long the stream may take to end after StopTracing was answered.
const END_TIMEOUT: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------------------
// Tests

#[test]
fn live_session_on_dotnet_core_3_1() {
    with_dotnet(|dotnet| {
        live_session(&dotnet.dotnet31, &dotnet.testapp, Runtime::Core31);
    });
}

#[test]
fn live_session_on_dotnet_8() {
    with_dotnet(|dotnet| {
        live_session(&dotnet.dotnet8, &dotnet.testapp, Runtime::Net8);
    });
}

#[test]
fn startup_tracing_through_a_reverse_port_on_dotnet_8() {
    with_dotnet(|dotnet| {
        let label = "startup tracing, .NET 8";
        let t0 = Instant::now();
        static UNIQUE: AtomicU32 = AtomicU32::new(0);
        let path = PathBuf::from(format!(
            "/tmp/eprs-{}-{}.sock",
            std::process::id(),
            UNIQUE.fetch_add(1, Ordering::Relaxed)
        ));
        let port = ReversePort::bind(&path).unwrap_or_else(|e| {
            panic!("{label}: binding the reverse port {}: {e}", path.display())
        });
        let ports = format!("{},suspend", path.display());
        let mut app = App::spawn(
            &dotnet.dotnet8,
            &dotnet.testapp,
            &[("DOTNET_DiagnosticPorts", ports.as_str())],
        );

        // Connection 1: the session, started while the runtime is suspended.
        let (advertise, conn) = port.accept(Duration::from_secs(10)).unwrap_or_else(|e| {
            panic!("{label}: the suspended runtime did not connect to {ports}: {e}")
        });
        assert_eq!(
            advertise.process_id,
            u64::from(app.pid),
            "{label}: the advertisement names another process"
        );
        assert_ne!(
            advertise.runtime_cookie, [0; 16],
            "{label}: the advertisement has a zero runtime cookie"
        );
        let stream = conn
            .collect_tracing(&session_request())
            .unwrap_or_else(|e| panic!("{label}: CollectTracing2 on the reverse connection: {e}"));
        let session = stream.session_id();
        let finished = read_in_background(stream);

        // Main must not run before ResumeRuntime: it would print "pid N" at once.
        std::thread::sleep(Duration::from_millis(300));
        match app.stdout.try_recv() {
            Err(TryRecvError::Empty) => {}
            Ok(line) => panic!("{label}: the app ran before ResumeRuntime (it printed {line:?})"),
            Err(TryRecvError::Disconnected) => panic!(
                "{label}: the app closed its stdout while suspended (exit status {:?})",
                app.child.try_wait()
            ),
        }

        // Connection 2: ResumeRuntime.
        let (advertise2, conn) = port
            .accept(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{label}: no second reverse connection: {e}"));
        assert_eq!(
            advertise2, advertise,
            "{label}: the second advertisement differs"
        );
        conn.resume_runtime()
            .unwrap_or_else(|e| panic!("{label}: ResumeRuntime: {e}"));
        let resumed = Instant::now();
        let pid = app.line("pid ", Duration::from_secs(10));
        assert_eq!(
            pid,
            app.pid.to_string(),
            "{label}: the app reports another pid"
        );

        // Connection 3: ProcessInfo2 agrees with the advertisement.
        let (_, conn) = port
            .accept(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{label}: no third reverse connection: {e}"));
        let info = conn
            .process_info(2)
            .unwrap_or_else(|e| panic!("{label}: ProcessInfo2 on a reverse connection: {e}"));
        assert_eq!(info.process_id, u64::from(app.pid), "{label}: {info:?}");
        assert_eq!(
            info.runtime_cookie, advertise.runtime_cookie,
            "{label}: ProcessInfo2's runtime cookie differs from the advertisement's"
        );

        // Connection 4: StopTracing.
        app.progress
            .wait_for_enough(label, -1, resumed, STARTUP_SESSION);
        let (_, conn) = port
            .accept(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{label}: no fourth reverse connection: {e}"));
        stop_and_check(&finished, &mut app, label, true, t0, || {
            conn.stop_tracing(session)
                .unwrap_or_else(|e| panic!("{label}: StopTracing on a reverse connection: {e}"));
        });
    });
}

// ---------------------------------------------------------------------------------------
// The live-session test, per runtime

fn live_session(dotnet: &Path, testapp: &Path, runtime: Runtime) {
    let label = match runtime {
        Runtime::Core31 => "live session, .NET Core 3.1",
        Runtime::Net8 => "live session, .NET 8",
    };
    let t0 = Instant::now();
    let mut app = App::spawn(dotnet, testapp, &[]);
    let client = app.wait_for_socket(label);
    let stream = start_session(&client, label);
    let session = stream.session_id();
    let started = Instant::now();
    let from = app.progress.latest();
    let finished = read_in_background(stream);

    app.expect_runtime(label, runtime);

    match runtime {
        Runtime::Net8 => {
            let info = client
                .process_info()
                .unwrap_or_else(|e| panic!("{label}: ProcessInfo: {e}"));
            assert_eq!(
                info.process_id,
                u64::from(app.pid),
                "{label}: ProcessInfo names another process: {info:?}"
            );
            assert!(
                info.command_line.contains("TestApp"),
                "{label}: ProcessInfo's command line does not mention TestApp: {info:?}"
            );
            assert_eq!(info.os, "Linux", "{label}: {info:?}");
            if cfg!(target_arch = "x86_64") {
                assert_eq!(info.arch, "x64", "{label}: {info:?}");
            }
            assert_ne!(info.runtime_cookie, [0; 16], "{label}: {info:?}");
            assert_eq!(
                info.entrypoint_assembly.as_deref(),
                Some("TestApp"),
                "{label}: ProcessInfo2's entry-point assembly (rerun bash ci/dotnet.sh if it \
                 is TestApp.tmp): {info:?}"
            );
            assert!(
                info.runtime_version
                    .as_deref()
                    .is_some_and(|v| v.starts_with("8.0.")),
                "{label}: ProcessInfo2's runtime version: {info:?}"
            );
        }
        Runtime::Core31 => match client.process_info() {
            Err(Error::Refused(ServerError::UNKNOWN_COMMAND)) => {}
            other => panic!(
                "{label}: .NET Core 3.1 has no ProcessInfo command and must refuse it as \
                 unknown, got {other:?}"
            ),
        },
    }

    app.progress
        .wait_for_enough(label, from, started, LIVE_SESSION);
    app.check_running(label, "before StopTracing");
    stop_and_check(&finished, &mut app, label, false, t0, || {
        client
            .stop_tracing(session)
            .unwrap_or_else(|e| panic!("{label}: StopTracing: {e}"));
    });
}

/// Stops the session (`stop` sends StopTracing and takes its answer), waits for the
/// stream to end, checks the trace in full and says how long each step took (the test
/// started at `t0`).
fn stop_and_check(
    finished: &Receiver<Finished>,
    app: &mut App,
    label: &str,
    from_startup: bool,
    t0: Instant,
    stop: impl FnOnce(),
) {
    let stop_sent = Instant::now();
    stop();
    let stop_answered = Instant::now();
    let (analysis, ended) = wait_for_end(finished, label);
    app.check_running(label, "during the session");

    analysis.verify(label, from_startup);
    analysis.print_summary(label);
    eprintln!(
        "{label}: StopTracing answered in {:?}, stream ended {:?} after sending it; test took {:?}",
        stop_answered - stop_sent,
        ended.saturating_duration_since(stop_sent),
        t0.elapsed()
    );
}

/// CollectTracing2 (the newest version both runtimes know): 64 MB, NetTrace, rundown on.
fn session_request() -> CollectTracing {
    let mut request = CollectTracing::new(
        2,
        vec![
            ProviderRequest {
                keywords: u64::MAX,
                level: 5,
                name: TEST_PROVIDER.into(),
                arguments: String::new(),
                filter: None,
            },
            ProviderRequest {
                keywords: RUNTIME_KEYWORDS,
                level: 5,
                name: RUNTIME_PROVIDER.into(),
                arguments: String::new(),
                filter: None,
            },
        ],
    );
    request.circular_buffer_mb = 64;
    request.format = FORMAT_NETTRACE;
    request.rundown_keyword = DEFAULT_RUNDOWN_KEYWORD;
    request
}

/// Starts the session; the socket file may appear a moment before the runtime listens.
fn start_session(client: &Client, label: &str) -> TraceStream {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match client.collect_tracing(&session_request()) {
            Ok(stream) => return stream,
            Err(Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::ConnectionRefused
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{label}: CollectTracing2: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Reading the trace

struct Finished {
    result: Result<Analysis, String>,
    at: Instant,
}

/// Reads and checks the trace on a thread, to the end of the stream.
fn read_in_background(mut stream: TraceStream) -> Receiver<Finished> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let result = analyse(&mut stream);
        if result.is_err() {
            // Keep draining, or the runtime never answers StopTracing.
            let _ = std::io::copy(&mut stream, &mut std::io::sink());
        }
        let _ = tx.send(Finished {
            result,
            at: Instant::now(),
        });
    });
    rx
}

fn wait_for_end(finished: &Receiver<Finished>, label: &str) -> (Analysis, Instant) {
    match finished.recv_timeout(END_TIMEOUT) {
        Ok(Finished { result: Ok(a), at }) => (a, at),
        Ok(Finished { result: Err(e), .. }) => panic!("{label}: {e}"),
        Err(_) => panic!(
            "{label}: the trace stream did not end within {END_TIMEOUT:?} of StopTracing's answer"
        ),
    }
}
