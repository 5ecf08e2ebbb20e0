//! What the tests against real .NET runtimes share: locating the runtimes `ci/dotnet.sh`
//! installs (or skipping, with a one-line notice), running one such test at a time
//! ([`with_dotnet`]), the running TestApp (killed and cleaned up when dropped, its
//! diagnostics socket waited for), and the full check of a trace against what
//! `tests/dotnet/TestApp.cs` writes: every field value and payload byte of its events, the
//! GC and exception events of the runtime provider named and decoded, no loss, and the
//! end-of-stream marker. The trace is checked from any `Read`: a live stream or a file.
//!
//! Used by `crates/ipc/tests/dotnet.rs` (sessions through the library), by `eptrace`'s
//! tests against real runtimes (`dotnet_cli`, `gcdump`, `counters`, `agent`) and by
//! `eventpipe`'s `diagnostics` test.
//!
//! The runtimes and the app come from `bash ci/dotnet.sh`, which writes `target/dotnet/env`
//! (`$EVENTPIPE_DOTNET_ROOT/env` when that is set). Without that file, or with
//! `EVENTPIPE_SKIP_DOTNET=1`, [`Dotnet::locate`] says so in one line and gives `None`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use eventpipe_ipc::{transport, Client, Error};
use nettrace::{Event, TraceReader, Value};

use crate::trace::utf16z;

/// The app's own provider.
pub const TEST_PROVIDER: &str = "EventPipeRs-Test";
/// The CLR's native provider (GC and exception events).
pub const RUNTIME_PROVIDER: &str = "Microsoft-Windows-DotNETRuntime";
/// GC (0x1) | Exception (0x8000).
pub const RUNTIME_KEYWORDS: u64 = 0x8001;
/// What the app is told to run for: longer than any session may take ([`MAX_SESSION`]);
/// it is killed (or stopped by `eptrace`) long before.
pub const APP_SECONDS: &str = "120";
/// Fewer iterations than this in a session means the session did not cover the work it
/// waited for ([`Progress::wait_for_enough`]). Losses are caught separately (iterations
/// must be consecutive).
const MIN_ITERATIONS: usize = 300;
/// Iterations past the one the app had reported when the session started that a session
/// waits for: with progress reported every 100 iterations, at least 500 iterations fall
/// inside the session: enough for LOH allocations, exceptions and at least one GC (the
/// runtimes here collect gen0 every 200-250 iterations) to happen in it.
const SESSION_ITERATIONS: i64 = 600;
/// The longest a session waits for the app's work. The app does ~800 iterations a second
/// here; a session that sees fewer than `SESSION_ITERATIONS` in this long means the app
/// was all but stopped.
pub const MAX_SESSION: Duration = Duration::from_secs(45);
/// The shortest session on an app already running (attach): sessions run on until the app
/// has done enough work ([`Progress::wait_for_enough`]).
pub const LIVE_SESSION: Duration = Duration::from_millis(2500);
/// The shortest session that starts before the runtime does (startup suspend): where the
/// machine is not loaded, long enough for the app to pass its 1,000th iteration (its first
/// induced GC) after the runtime has loaded and compiled it.
pub const STARTUP_SESSION: Duration = Duration::from_secs(4);
/// EventSource's session bits, in the keywords of every event's metadata.
const SESSION_KEYWORD_BITS: u64 = 0xF000_0000_0000;

/// id, name, keyword, level of the app's events (TestApp.cs).
const TEST_EVENTS: [(u32, &str, u64, u32); 9] = [
    (1, "Ints", 0x1, 4),
    (2, "Longs", 0x1, 4),
    (3, "Doubles", 0x1, 5),
    (4, "Text", 0x2, 4),
    (5, "Blob", 0x4, 4),
    (6, "Ident", 0x8, 4),
    (7, "Choice", 0x8, 3),
    (8, "Mixed", 0x8, 4),
    (9, "Heartbeat", 0x8, 4),
];

// ---------------------------------------------------------------------------------------
// Locating the runtimes

/// The runtimes the tests run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// .NET Core 3.1 ([`Dotnet::dotnet31`]).
    Core31,
    /// .NET 8 ([`Dotnet::dotnet8`]).
    Net8,
}

impl Runtime {
    /// How the version the app reports (`runtime V`) starts.
    pub fn version_prefix(self) -> &'static str {
        match self {
            Runtime::Core31 => "3.1.",
            Runtime::Net8 => "8.0.",
        }
    }
}

/// The installed runtimes' `dotnet` hosts and the compiled TestApp.
#[derive(Debug, Clone)]
pub struct Dotnet {
    /// The .NET Core 3.1 host.
    pub dotnet31: PathBuf,
    /// The .NET 8 host.
    pub dotnet8: PathBuf,
    /// `TestApp.exe` (runs on both).
    pub testapp: PathBuf,
    /// `AnalyzeApp.exe` (tests/dotnet/AnalyzeApp.cs: scenarios whose truth the runtime
    /// reports about itself).
    pub analyzeapp: PathBuf,
}

/// The .NET tests of one test binary run one at a time: several runtimes starting and
/// compiling at once on a 2-core machine starve the app under test (four at once once left
/// 94 iterations in a 2 s session). Held for as long as the guard lives.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `test` with the runtimes, one .NET test at a time ([`one_at_a_time`]); without
/// them ([`Dotnet::locate`]) says so in one line and returns.
pub fn with_dotnet(test: impl FnOnce(&Dotnet)) {
    let _serial = one_at_a_time();
    if let Some(dotnet) = Dotnet::locate() {
        test(&dotnet);
    }
}

impl Dotnet {
    /// The paths from the env file `ci/dotnet.sh` writes, or `None` (after saying so) when
    /// the runtimes are not installed or are to be skipped.
    pub fn locate() -> Option<Dotnet> {
        let skip = || println!("skipping: .NET runtimes not installed (run bash ci/dotnet.sh)");
        if !cfg!(target_os = "linux") {
            println!("skipping: the .NET runtimes ci/dotnet.sh installs run on Linux only");
            return None;
        }
        if std::env::var_os("EVENTPIPE_SKIP_DOTNET").is_some_and(|v| v == "1") {
            skip();
            return None;
        }
        let root = match std::env::var_os("EVENTPIPE_DOTNET_ROOT") {
            Some(root) if !root.is_empty() => PathBuf::from(root),
            _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/dotnet"),
        };
        let file = root.join("env");
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                skip();
                return None;
            }
            Err(e) => panic!("reading {}: {e}", file.display()),
        };
        let get = |key: &str| {
            let value = text
                .lines()
                .find_map(|line| line.trim().strip_prefix(key)?.strip_prefix('='))
                .map(|v| PathBuf::from(v.trim().trim_matches(|c| c == '"' || c == '\'')))
                .unwrap_or_else(|| {
                    panic!(
                        "{} has no {key}= line (rerun bash ci/dotnet.sh)",
                        file.display()
                    )
                });
            assert!(
                value.is_file(),
                "{key}={} from {} does not exist (rerun bash ci/dotnet.sh)",
                value.display(),
                file.display()
            );
            value
        };
        Some(Dotnet {
            dotnet31: get("DOTNET31"),
            dotnet8: get("DOTNET8"),
            testapp: get("TESTAPP"),
            analyzeapp: get("ANALYZEAPP"),
        })
    }
}

// ---------------------------------------------------------------------------------------
// The traced process

/// How far the app has got: the newest `progress I` line on its stderr (TestApp.cs).
#[derive(Debug, Clone)]
pub struct Progress(Arc<AtomicI64>);

impl Default for Progress {
    fn default() -> Progress {
        Progress::new()
    }
}

impl Progress {
    /// No progress reported yet.
    pub fn new() -> Progress {
        Progress(Arc::new(AtomicI64::new(-1)))
    }

    /// Takes in one line of the app's stderr; says whether it was a progress line.
    pub fn take_line(&self, line: &str) -> bool {
        match line
            .strip_prefix("progress ")
            .and_then(|i| i.trim().parse::<i64>().ok())
        {
            Some(i) => {
                // Relaxed: a lone counter; the waiter needs no other memory with it.
                self.0.fetch_max(i, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// The newest iteration the app reported, or -1 before its first report.
    pub fn latest(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Waits until a session started at `started`, when the app had reported iteration
    /// `from`, has lasted `at_least` and the app has done `SESSION_ITERATIONS` more: the
    /// session covers a fixed amount of the app's work however slowly a loaded machine runs
    /// it, and at least `at_least` of time where it runs fast. Panics when that takes
    /// [`MAX_SESSION`].
    pub fn wait_for_enough(&self, label: &str, from: i64, started: Instant, at_least: Duration) {
        let target = from.max(0) + SESSION_ITERATIONS;
        loop {
            let (now, elapsed) = (self.latest(), started.elapsed());
            if now >= target && elapsed >= at_least {
                if elapsed > at_least + Duration::from_millis(250) {
                    eprintln!(
                        "{label}: the app was slow (from iteration {from} to {now}); the \
                         session ran {elapsed:?} instead of {at_least:?}"
                    );
                }
                return;
            }
            assert!(
                elapsed < MAX_SESSION,
                "{label}: in {MAX_SESSION:?} of session the app got from iteration {from} only \
                 to {now} (the session waits for {target}): something all but stopped it"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The running TestApp; killed (and its diagnostics files removed) when dropped, also when
/// the test panics.
#[derive(Debug)]
pub struct App {
    /// The `dotnet` process.
    pub child: Child,
    /// Its process id.
    pub pid: u32,
    /// Its stdout, line by line.
    pub stdout: Receiver<String>,
    /// Its progress, from its stderr (the other stderr lines are passed on to ours).
    pub progress: Progress,
}

impl App {
    /// Starts `dotnet testapp APP_SECONDS` with `env` (and no inherited diagnostics
    /// settings).
    pub fn spawn(dotnet: &Path, testapp: &Path, env: &[(&str, &str)]) -> App {
        App::spawn_with(dotnet, testapp, &[APP_SECONDS], env)
    }

    /// Starts `dotnet testapp ARGS..` with `env` (and no inherited diagnostics settings).
    pub fn spawn_with(dotnet: &Path, testapp: &Path, args: &[&str], env: &[(&str, &str)]) -> App {
        let mut command = Command::new(dotnet);
        command
            .arg(testapp)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for var in [
            "DOTNET_DiagnosticPorts",
            "COMPlus_DiagnosticPorts",
            "DOTNET_EnableDiagnostics",
            "COMPlus_EnableDiagnostics",
            "DOTNET_EnableEventPipe",
            "COMPlus_EnableEventPipe",
        ] {
            command.env_remove(var);
        }
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {} {}: {e}", dotnet.display(), testapp.display()));
        let pid = child.id();
        let out = child.stdout.take().expect("stdout is piped");
        let (tx, stdout) = mpsc::channel();
        // Drains stdout for as long as the app runs, so it never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let err = child.stderr.take().expect("stderr is piped");
        let progress = Progress::new();
        let seen = progress.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if !seen.take_line(&line) {
                    eprintln!("TestApp: {line}");
                }
            }
        });
        App {
            child,
            pid,
            stdout,
            progress,
        }
    }

    /// The rest of the first stdout line starting with `prefix`.
    pub fn line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            match self
                .stdout
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_string();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("the app printed no `{prefix}...` line within {timeout:?}")
                }
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "the app closed its stdout before printing `{prefix}...` (exit status {:?})",
                    self.child.try_wait()
                ),
            }
        }
    }

    /// Reads the app's `pid P` and `runtime V` lines (within 10 s each), checks that P is
    /// its pid and V a version of `runtime`, and gives V.
    pub fn expect_runtime(&mut self, label: &str, runtime: Runtime) -> String {
        let pid = self.line("pid ", Duration::from_secs(10));
        assert_eq!(
            pid,
            self.pid.to_string(),
            "{label}: the app reports another pid"
        );
        let version = self.line("runtime ", Duration::from_secs(10));
        assert!(
            version.starts_with(runtime.version_prefix()),
            "{label}: the app runs on runtime {version}"
        );
        version
    }

    /// Panics (naming `label` and `when`) if the app has exited.
    pub fn check_running(&mut self, label: &str, when: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{label}: the app exited {when}: {status}");
        }
    }

    /// A client for the app's diagnostics socket, once that exists (within 10 s).
    pub fn wait_for_socket(&mut self, label: &str) -> Client {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match Client::for_pid(self.pid) {
                Ok(client) => return client,
                Err(Error::NoSocket { .. }) if Instant::now() < deadline => {
                    self.check_running(label, "before its diagnostics socket appeared");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!(
                    "{label}: no diagnostics socket for pid {} within 10 s: {e} (a long TMPDIR \
                     truncates the socket's name: Unix socket paths have at most 107 bytes)",
                    self.pid
                ),
            }
        }
    }
}

impl Drop for App {
    fn drop(&mut self) {
        // Read while the process (or its zombie) still exists.
        let key = transport::start_time(self.pid);
        let _ = self.child.kill();
        let _ = self.child.wait();
        // SIGKILL leaves the runtime's socket and debugger pipes behind.
        if let Some(key) = key {
            let dir = transport::socket_dir();
            let _ = std::fs::remove_file(transport::socket_path(&dir, self.pid, key));
            for end in ["in", "out"] {
                let _ = std::fs::remove_file(
                    dir.join(format!("clr-debug-pipe-{}-{key}-{end}", self.pid)),
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Reading the trace

/// Reads a whole trace (a live stream or a file) and gathers what [`Analysis::verify`]
/// checks. An error if the trace does not parse or lacks its end-of-stream marker.
pub fn analyse<R: Read>(trace: R) -> Result<Analysis, String> {
    let mut reader =
        TraceReader::from_read(trace).map_err(|e| format!("reading the trace's header: {e}"))?;
    let mut analysis = Analysis::default();
    loop {
        match reader.next_event() {
            Ok(Some(event)) => analysis.add(&event),
            Ok(None) => break,
            Err(e) => {
                return Err(format!(
                    "the trace failed after {} events: {e}",
                    analysis.events
                ))
            }
        }
    }
    if !reader.is_finished() {
        return Err(format!(
            "the stream ended after {} events without its end-of-stream marker",
            analysis.events
        ));
    }
    analysis.lost_events = reader.stats().lost_events;
    Ok(analysis)
}

/// Reads the trace file at `path` and checks it all ([`Analysis::verify`]); panics with
/// every problem found.
pub fn verify_file(path: &Path, label: &str, from_startup: bool) -> Analysis {
    let file = std::fs::File::open(path)
        .unwrap_or_else(|e| panic!("{label}: opening the trace {}: {e}", path.display()));
    let analysis = analyse(BufReader::with_capacity(1 << 20, file))
        .unwrap_or_else(|e| panic!("{label}: the trace {}: {e}", path.display()));
    analysis.verify(label, from_startup);
    analysis
}

/// What the checks need from a trace, gathered event by event.
#[derive(Debug, Default)]
pub struct Analysis {
    /// Events read.
    pub events: u64,
    /// Events the reader counted lost.
    pub lost_events: u64,
    /// Every mismatch found (the first few), and how many there were.
    errors: Vec<String>,
    error_count: usize,
    events_by_provider: BTreeMap<String, u64>,
    /// Per test event id (1..=8): the iterations, in stream order.
    iterations: BTreeMap<u32, Vec<i64>>,
    /// The previous EventPipeRs-Test event: (id, iteration).
    previous: Option<(u32, i64)>,
    /// Mixed iterations (i % 100 == 0) directly followed by a Heartbeat.
    heartbeats_after: Vec<i64>,
    /// Heartbeats not directly after such a Mixed: what came before them.
    stray_heartbeats: Vec<Option<(u32, i64)>>,
    /// Runtime events by manifest name.
    runtime_names: BTreeMap<String, u64>,
    /// GC/Start: (Count, Depth, Reason).
    gc_starts: Vec<(u64, u64, u64)>,
    /// The `i` of every "TestApp exception i" seen in Exception/Start.
    exception_iterations: Vec<i64>,
    other_exceptions: u64,
    /// `CommandLine` of Microsoft-DotNETCore-EventPipe/ProcessInfo.
    process_info_command_line: Option<String>,
}

impl Analysis {
    fn fail(&mut self, message: String) {
        self.error_count += 1;
        if self.errors.len() < 20 {
            self.errors.push(message);
        }
    }

    fn add(&mut self, event: &Event<'_>) {
        self.events += 1;
        let md = event.metadata;
        match self.events_by_provider.get_mut(&md.provider) {
            Some(n) => *n += 1,
            None => {
                self.events_by_provider.insert(md.provider.clone(), 1);
            }
        }
        let decoded = match event.decode_payload() {
            Ok(decoded) => decoded,
            Err(e) => {
                let message = format!(
                    "{} (id {}, version {}) does not decode: {e}; payload {:02x?}",
                    event.qualified_name(),
                    md.event_id,
                    md.version,
                    event.payload
                );
                return self.fail(message);
            }
        };
        match md.provider.as_str() {
            TEST_PROVIDER => self.test_event(event, &decoded),
            RUNTIME_PROVIDER => self.runtime_event(event, &decoded),
            "Microsoft-DotNETCore-EventPipe" if md.display_name == "ProcessInfo" => {
                self.process_info_command_line = field(&decoded, "CommandLine")
                    .and_then(Value::as_str)
                    .map(str::to_string);
            }
            _ => {}
        }
    }

    fn test_event(&mut self, event: &Event<'_>, decoded: &[(&str, Value)]) {
        let md = event.metadata;
        let id = md.event_id;
        let Some(&(_, name, keyword, level)) = TEST_EVENTS.iter().find(|e| e.0 == id) else {
            return self.fail(format!(
                "{TEST_PROVIDER} wrote an unexpected event id {id} ({:?}): {decoded:?}",
                md.event_name
            ));
        };
        if md.event_name != name
            || md.level != level
            || md.keywords != SESSION_KEYWORD_BITS | keyword
        {
            return self.fail(format!(
                "event {id}'s metadata: name {:?} level {} keywords {:#x}, expected {name:?} \
                 level {level} keywords {:#x}",
                md.event_name,
                md.level,
                md.keywords,
                SESSION_KEYWORD_BITS | keyword
            ));
        }
        let payload = event.payload;

        if id == 9 {
            if !payload.is_empty() || !decoded.is_empty() {
                self.fail(format!(
                    "Heartbeat carries a payload: {payload:02x?} {decoded:?}"
                ));
            }
            match self.previous {
                Some((8, i)) if i % 100 == 0 => self.heartbeats_after.push(i),
                other => self.stray_heartbeats.push(other),
            }
            self.previous = Some((9, self.previous.map_or(-1, |p| p.1)));
            return;
        }

        // The iteration, from the first field.
        let i = match id {
            2 | 5 => payload
                .get(..8)
                .map(|b| i64::from_le_bytes(b.try_into().unwrap_or_default())),
            _ => payload
                .get(..4)
                .map(|b| i64::from(i32::from_le_bytes(b.try_into().unwrap_or_default()))),
        };
        let Some(i) = i else {
            return self.fail(format!("{name} has a {}-byte payload", payload.len()));
        };
        self.iterations.entry(id).or_default().push(i);
        self.previous = Some((id, i));

        if id == 5 {
            // byte[] events are described with no fields: check the raw payload, and the
            // decoded fields in case the metadata ever describes them.
            let data = blob_data(i);
            let mut want = i.to_le_bytes().to_vec();
            want.extend_from_slice(&(data.len() as u32).to_le_bytes());
            want.extend_from_slice(&data);
            if payload != want.as_slice() {
                self.fail(format!(
                    "Blob at iteration {i}: payload {payload:02x?}, expected {want:02x?}"
                ));
            }
            let described = [("Iter", Value::I64(i)), ("Data", Value::Bytes(data))];
            if !decoded.is_empty() && !same_fields(decoded, &described) {
                self.fail(format!(
                    "Blob at iteration {i}: decoded {decoded:?}, expected no fields or \
                     {described:?}"
                ));
            }
            return;
        }

        let want = expected_fields(id, i);
        if !same_fields(decoded, &want) {
            self.fail(format!(
                "{name} at iteration {i}: decoded {decoded:?}, expected {want:?}"
            ));
        }
        let want_bytes = encode(&want);
        if payload != want_bytes.as_slice() {
            self.fail(format!(
                "{name} at iteration {i}: payload {payload:02x?}, expected {want_bytes:02x?}"
            ));
        }
    }

    fn runtime_event(&mut self, event: &Event<'_>, decoded: &[(&str, Value)]) {
        let md = event.metadata;
        let name = md.display_name.as_str();
        if name.is_empty() || name.starts_with("EventID(") {
            return self.fail(format!(
                "runtime event id {} version {} has no manifest name ({name:?})",
                md.event_id, md.version
            ));
        }
        match self.runtime_names.get_mut(name) {
            Some(n) => *n += 1,
            None => {
                self.runtime_names.insert(name.to_string(), 1);
            }
        }
        match name {
            "GC/Start" => {
                let get = |f| field(decoded, f).and_then(Value::as_u64);
                match (get("Count"), get("Depth"), get("Reason")) {
                    (Some(count), Some(depth), Some(reason)) => {
                        self.gc_starts.push((count, depth, reason));
                    }
                    _ => self.fail(format!(
                        "GC/Start v{} lacks Count/Depth/Reason: {decoded:?}",
                        md.version
                    )),
                }
            }
            "Exception/Start" => {
                let ty = field(decoded, "ExceptionType").and_then(Value::as_str);
                let message = field(decoded, "ExceptionMessage").and_then(Value::as_str);
                let (Some(ty), Some(message)) = (ty, message) else {
                    return self.fail(format!(
                        "Exception/Start v{} lacks ExceptionType/ExceptionMessage: {decoded:?}",
                        md.version
                    ));
                };
                match message.strip_prefix("TestApp exception ") {
                    Some(n) => match n.parse::<i64>() {
                        Ok(n) if ty == "System.InvalidOperationException" => {
                            self.exception_iterations.push(n);
                        }
                        _ => self.fail(format!(
                            "Exception/Start: type {ty:?} message {message:?}, expected \
                             System.InvalidOperationException and \"TestApp exception <i>\""
                        )),
                    },
                    None => self.other_exceptions += 1,
                }
            }
            _ => {}
        }
    }

    /// Everything TestApp.cs promises about a session's trace.
    pub fn verify(&self, label: &str, from_startup: bool) {
        let mut problems = Vec::new();
        if self.error_count > 0 {
            problems.push(format!(
                "{} events do not match TestApp.cs; the first ones:\n    {}",
                self.error_count,
                self.errors.join("\n    ")
            ));
        }
        if self.lost_events != 0 {
            problems.push(format!("{} events were lost", self.lost_events));
        }

        // Iterations: every test event id, consecutive, starting and ending together.
        let mut firsts = Vec::new();
        let mut lasts = Vec::new();
        for &(id, name, _, _) in &TEST_EVENTS[..8] {
            let Some(seen) = self.iterations.get(&id) else {
                problems.push(format!("no {name} (id {id}) events"));
                continue;
            };
            if let Some(w) = seen.windows(2).find(|w| w[1] != w[0] + 1) {
                problems.push(format!(
                    "{name} (id {id}): iteration {} follows {} (gap or disorder)",
                    w[1], w[0]
                ));
            }
            if seen.len() < MIN_ITERATIONS {
                problems.push(format!(
                    "{name} (id {id}): only {} iterations (at least {MIN_ITERATIONS} expected)",
                    seen.len()
                ));
            }
            firsts.push(seen[0]);
            lasts.push(seen[seen.len() - 1]);
            if from_startup && seen[0] != 0 {
                problems.push(format!(
                    "{name} (id {id}): the first iteration is {}, not 0: events before it \
                     were lost at startup",
                    seen[0]
                ));
            }
        }
        // Iterations every id saw in full: [lo, hi].
        let (lo, hi) = match (firsts.iter().max(), lasts.iter().min()) {
            (Some(&lo), Some(&hi)) => (lo, hi),
            _ => (0, -1),
        };
        for (what, ends) in [("first", &firsts), ("last", &lasts)] {
            let (min, max) = (ends.iter().min(), ends.iter().max());
            if let (Some(min), Some(max)) = (min, max) {
                if max - min > 2 {
                    problems.push(format!(
                        "the events' {what} iterations differ by more than the session's \
                         start/stop race allows: {ends:?}"
                    ));
                }
            }
        }

        // Heartbeats: right after Mixed of every i % 100 == 0 inside [lo, hi].
        for m in (lo..=hi).filter(|m| m % 100 == 0) {
            if !self.heartbeats_after.contains(&m) {
                problems.push(format!("no Heartbeat right after Mixed of iteration {m}"));
            }
        }
        for before in &self.stray_heartbeats {
            if before.is_some_and(|(_, i)| i >= lo && i < hi) {
                problems.push(format!(
                    "a Heartbeat follows {before:?}, not a Mixed event of an iteration i % 100 == 0"
                ));
            }
        }

        // GC events, named from the manifest and decoded.
        let gc_events: u64 = self
            .runtime_names
            .iter()
            .filter(|(name, _)| name.starts_with("GC/"))
            .map(|(_, n)| n)
            .sum();
        if gc_events == 0 {
            problems.push("no GC/* events".into());
        }
        if self.gc_starts.is_empty() {
            problems.push("no GC/Start event with Count/Depth/Reason".into());
        }
        // Every 1000th iteration calls GC.Collect(): an induced (reason 1) gen2 GC.
        if (lo..hi).any(|m| m > 0 && m % 1000 == 0)
            && !self
                .gc_starts
                .iter()
                .any(|&(_, depth, reason)| depth == 2 && reason == 1)
        {
            problems.push(format!(
                "iterations {lo}..{hi} include a GC.Collect() but no GC/Start has Depth 2 and \
                 Reason 1 (Induced): {:?}",
                self.gc_starts
            ));
        }

        // Exceptions: "TestApp exception i" for every i % 10 == 0.
        if self.exception_iterations.is_empty() {
            problems.push("no Exception/Start event with a TestApp exception message".into());
        }
        if let Some(n) = self.exception_iterations.iter().find(|n| *n % 10 != 0) {
            problems.push(format!(
                "an exception of iteration {n}, not a multiple of 10"
            ));
        }
        if let Some(w) = self
            .exception_iterations
            .windows(2)
            .find(|w| w[1] != w[0] + 10)
        {
            problems.push(format!(
                "the exception of iteration {} follows that of {}",
                w[1], w[0]
            ));
        }
        if let (Some(first), Some(last)) = (
            self.exception_iterations.first(),
            self.exception_iterations.last(),
        ) {
            if *first > lo + 10 || *last < hi - 10 {
                problems.push(format!(
                    "exceptions of iterations {first}..={last} do not cover the iterations \
                     {lo}..={hi} seen"
                ));
            }
        }

        match &self.process_info_command_line {
            Some(line) if line.contains("TestApp") => {}
            other => problems.push(format!(
                "Microsoft-DotNETCore-EventPipe/ProcessInfo: CommandLine {other:?} does not \
                 mention TestApp"
            )),
        }

        assert!(
            problems.is_empty(),
            "{label}: the trace does not match TestApp.cs:\n  {}\n(events by provider: {:?})",
            problems.join("\n  "),
            self.events_by_provider
        );
    }

    /// Prints what the trace held (events by provider, iterations, GCs, exceptions) to
    /// stderr.
    pub fn print_summary(&self, label: &str) {
        let ids: Vec<String> = self
            .iterations
            .iter()
            .map(|(id, seen)| format!("{id}: {}..={}", seen[0], seen[seen.len() - 1]))
            .collect();
        eprintln!(
            "{label}: {} events, {} lost; by provider {:?}",
            self.events, self.lost_events, self.events_by_provider
        );
        eprintln!(
            "{label}: iterations per event id [{}], {} heartbeats, {} TestApp exceptions \
             ({} others), {} GC/Start",
            ids.join(", "),
            self.heartbeats_after.len() + self.stray_heartbeats.len(),
            self.exception_iterations.len(),
            self.other_exceptions,
            self.gc_starts.len()
        );
        eprintln!("{label}: runtime events {:?}", self.runtime_names);
    }
}

// ---------------------------------------------------------------------------------------
// The values TestApp.cs writes at iteration i

/// The Guid of events 6 and 8, in wire order.
fn ident(i: i64) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..4].copy_from_slice(&(i as i32).to_le_bytes());
    g[4..].copy_from_slice(&[
        0x02,
        0x01,
        0x04,
        0x03,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
        (i & 0xff) as u8,
    ]);
    g
}

/// The Color of events 7 and 8.
fn color(i: i64) -> i32 {
    [1, 2, 4][(i % 3) as usize]
}

/// The Data of event 5.
fn blob_data(i: i64) -> Vec<u8> {
    (0..i % 17).map(|k| ((i + k) & 0xff) as u8).collect()
}

/// The fields of event `id` (1..=8 but 5) at iteration `i`.
fn expected_fields(id: u32, i: i64) -> Vec<(&'static str, Value)> {
    let n = i as i32;
    let x = i as f64;
    let guid = Value::Guid(nettrace::Guid(ident(i)));
    match id {
        1 => vec![
            ("Iter", Value::I32(n)),
            ("Negative", Value::I32(n.wrapping_neg().wrapping_sub(1))),
            ("Max", Value::I32(i32::MAX)),
            ("Min", Value::I32(i32::MIN)),
        ],
        2 => vec![
            ("Iter", Value::I64(i)),
            ("Min", Value::I64(i64::MIN)),
            ("Max", Value::I64(i64::MAX)),
            (
                "Scaled",
                Value::I64(i.wrapping_mul(1_000_000_007).wrapping_sub(5_000_000_000)),
            ),
        ],
        3 => vec![
            ("Iter", Value::I32(n)),
            ("Quarter", Value::F64(x + 0.25)),
            ("Third", Value::F64(x / 3.0)),
            ("Negative", Value::F64(-1.0 - 1.5 * x)),
        ],
        4 => vec![
            ("Iter", Value::I32(n)),
            (
                "Message",
                Value::String(format!(
                    "iter {i} h\u{e9}llo w\u{f6}rld \u{4e16}\u{754c} \u{1F980}"
                )),
            ),
            ("Empty", Value::String(String::new())),
        ],
        6 => vec![("Iter", Value::I32(n)), ("Id", guid)],
        7 => vec![("Iter", Value::I32(n)), ("Color", Value::I32(color(i)))],
        8 => vec![
            ("Iter", Value::I32(n)),
            ("Square", Value::I64(i.wrapping_mul(i))),
            ("Half", Value::F64(x / 2.0)),
            ("Name", Value::String(format!("n{i}"))),
            ("Id", guid),
            ("Color", Value::I32(color(i))),
        ],
        _ => unreachable!("event {id} has no fixed layout"),
    }
}

/// The wire bytes of `fields` (TestApp.cs: little-endian, UTF-16 strings with a
/// terminator, Guids in wire order).
fn encode(fields: &[(&str, Value)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (_, value) in fields {
        match value {
            Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::Guid(g) => out.extend_from_slice(&g.0),
            Value::String(s) => utf16z(&mut out, s),
            other => unreachable!("TestApp writes no {other:?}"),
        }
    }
    out
}

/// Same names and values, doubles compared bit for bit.
fn same_fields(got: &[(&str, Value)], want: &[(&str, Value)]) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|((gn, gv), (wn, wv))| {
            gn == wn
                && match (gv, wv) {
                    (Value::F64(a), Value::F64(b)) => a.to_bits() == b.to_bits(),
                    _ => gv == wv,
                }
        })
}

fn field<'a>(decoded: &'a [(&str, Value)], name: &str) -> Option<&'a Value> {
    decoded.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
}
