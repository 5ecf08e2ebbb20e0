//! Unattended diagnostics for every process on the host, shaped after `dotnet-monitor`:
//! the agent `eptrace agent` runs, as a library ([`run`]). It finds the attachable processes (as `eptrace ps`), keeps a standing
//! counters session in each for `/metrics` and the rules, serves traces, heap snapshots,
//! live counters and operations over HTTP, runs the configured collection rules, and
//! exports every target's spans, events and counters to an OpenTelemetry collector when
//! one is configured (the `otlp` module).
//!
//! Threads: the HTTP server runs on a small tokio runtime; everything that speaks IPC to a
//! target is blocking and runs on threads of its own (one scanner, one counters watcher
//! per target, one per operation, tokio's blocking pool for streamed requests; with OTLP,
//! one event session per target and one batching thread).
//!
//! Stopping (SIGTERM, SIGINT): the server stops accepting, every running operation and
//! streamed trace is stopped with StopTracing and read to its end (so its file is a whole
//! trace; a snapshot cut short is discarded), the counters and OTLP event sessions are
//! stopped, and the agent waits for all of it before it exits; then what is batched for the
//! collector is sent, with a few seconds for the queue to drain.

pub(crate) mod auth;
pub(crate) mod egress;
mod http;
mod operations;
mod otlp;
mod processes;
mod profiling;
mod prometheus;
mod rules;
mod sessions;
pub(crate) mod settings;

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use eventpipe_client::capture::counters::RuntimeNews;
use eventpipe_counters::CounterValue;

use self::operations::{Handle, Operations};
use self::processes::{Process, Registry};
use self::rules::{Firing, Rules};
use self::sessions::{CounterListener, Snapshot, TraceAsk};
use self::settings::{Action, Settings};

/// A counter value as a target publishes it, for the tests of the store and the rules.
#[cfg(test)]
pub(crate) fn test_value(
    provider: &str,
    name: &str,
    unit: &str,
    kind: eventpipe_counters::CounterKind,
    value: f64,
) -> CounterValue {
    CounterValue {
        unit: unit.into(),
        ..CounterValue::new(provider, name, kind, value)
    }
}

/// What the agent runs with: its settings file (TOML: listen, api_keys, egress, metrics,
/// rules, profiling, otlp; see the guide's agent page) and what overrides it.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The settings file; `None`: the defaults (loopback, metrics on, nothing else).
    pub settings_file: Option<PathBuf>,
    /// Where the API listens (`HOST:PORT` or `unix:PATH`): overrides `listen`.
    pub listen: Option<String>,
    /// A Pyroscope server's URL: overrides `profiling.pyroscope`.
    pub pyroscope: Option<String>,
    /// How often profiles are pushed: overrides `profiling.period_seconds`.
    pub profile_period: Option<Duration>,
    /// An OpenTelemetry collector's URL: overrides `otlp.url`.
    pub otlp: Option<String>,
}

/// Why the agent did not start, or stopped on an error. The message is the cause's own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The settings are not valid: the file, an override, an API key hash, a listen
    /// address, a public listener without an API key.
    #[error(transparent)]
    Settings(Cause),
    /// What the agent needs could not be set up: its folders, threads, listener,
    /// exporters.
    #[error(transparent)]
    Start(Cause),
    /// The HTTP server failed while serving.
    #[error(transparent)]
    Serve(Cause),
}

/// The cause an [`Error`] carries, with its own causes behind `source()`.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// A new API key, and the hash the settings' `api_keys` holds for it.
#[derive(Debug, Clone)]
pub struct ApiKey {
    /// What clients send (`Authorization: Bearer KEY`).
    pub key: String,
    /// `sha256:HEX`: what the settings store (the key itself is never stored).
    pub hash: String,
}

/// Makes a new API key from the system's random source.
///
/// # Errors
/// When the random source cannot be read.
pub fn new_api_key() -> Result<ApiKey, Error> {
    let key = auth::new_key().map_err(|e| Error::Start(e.into()))?;
    let hash = auth::hash_text(&key);
    Ok(ApiKey { key, hash })
}

/// Where the API listens.
#[derive(Debug, Clone)]
pub(crate) enum Listen {
    Tcp(SocketAddr),
    /// A Unix socket, owner-only.
    Unix(PathBuf),
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(addr) => write!(f, "http://{addr}"),
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

fn parse_listen(text: &str) -> Result<Listen> {
    if let Some(path) = text.strip_prefix("unix:") {
        if path.is_empty() {
            bail!("--listen unix:PATH needs a path");
        }
        return Ok(Listen::Unix(PathBuf::from(path)));
    }
    let addr = text
        .to_socket_addrs()
        .with_context(|| format!("--listen `{text}`: not HOST:PORT or unix:PATH"))?
        .next()
        .with_context(|| format!("--listen `{text}`: the name has no address"))?;
    Ok(Listen::Tcp(addr))
}

/// Everything the agent shares between its threads.
pub(crate) struct Agent {
    pub(crate) settings: Settings,
    pub(crate) keys: Vec<auth::KeyHash>,
    pub(crate) listen: Listen,
    pub(crate) processes: Registry,
    pub(crate) store: prometheus::Store,
    pub(crate) rules: Rules,
    pub(crate) operations: Operations,
    /// Where request snapshots without egress are staged: the egress folder, else a
    /// private temporary folder.
    pub(crate) staging: PathBuf,
    pub(crate) stopping: AtomicBool,
    /// Per target: its counters watcher's stop flag.
    watchers: Mutex<HashMap<u32, Arc<AtomicBool>>>,
    /// Every thread that must finish before the agent exits.
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Cancel flags of traces streamed straight to a client.
    pub(crate) streams: Mutex<Vec<Arc<AtomicBool>>>,
    pub(crate) session_errors: AtomicU64,
    pub(crate) requests: AtomicU64,
    /// Continuous profiling, when a Pyroscope server is set.
    pub(crate) profiling: Option<profiling::Profiling>,
    /// The OpenTelemetry export, when a collector is configured.
    pub(crate) otlp: Option<Arc<otlp::Exporter>>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("listen", &self.listen)
            .finish()
    }
}

/// A line in the agent's log (stderr), with the time.
pub(crate) fn log(message: &str) {
    let _ = writeln!(
        std::io::stderr().lock(),
        "{} {message}",
        eventpipe_counters::iso8601(SystemTime::now())
    );
}

/// Waits 5 s before a failed loop tries again, or less once `stop` is set.
fn retry_pause(stop: &AtomicBool) {
    for _ in 0..50 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Keeps a thread the agent `spawned`, to be joined when it stops; or logs that `what`
/// could not start.
fn keep_thread(agent: &Agent, spawned: std::io::Result<std::thread::JoinHandle<()>>, what: &str) {
    match spawned {
        Ok(t) => lock(&agent.threads).push(t),
        Err(e) => log(&format!("cannot start {what}: {e}")),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every update under these locks is a whole insert or removal: a poisoned value is
    // still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps glibc to two malloc arenas. The agent runs a thread per session (dozens with a
/// fleet's worth of targets), and glibc would give each busy thread an arena of its own
/// that keeps what it freed: measured, 10 MB more resident for 20 targets.
fn bound_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // M_ARENA_MAX from glibc's malloc.h.
        const M_ARENA_MAX: libc::c_int = -8;
        // SAFETY: mallopt only sets a tunable of the allocator; it is called before the
        // agent starts any thread, and a refusal (0) leaves glibc's default.
        let _ = unsafe { libc::mallopt(M_ARENA_MAX, 2) };
    }
}

/// The settings the agent runs with, checked, and where it listens.
struct Settled {
    settings: Settings,
    listen: Listen,
    keys: Vec<auth::KeyHash>,
    otlp_endpoint: Option<eventpipe_export::otlp::Endpoint>,
}

/// Reads the settings file, applies the overrides, and checks the result.
fn settle(options: &Options) -> Result<Settled> {
    let mut settings = settings::load(options.settings_file.as_deref())?;
    if let Some(url) = &options.pyroscope {
        settings.profiling.pyroscope = Some(url.clone());
    }
    if let Some(period) = options.profile_period {
        settings.profiling.period_seconds = period.as_secs_f64();
    }
    settings::check(&settings)?;
    if let Some(url) = &options.otlp {
        settings.otlp.url = Some(url.clone());
    }
    let otlp_endpoint = settings::otlp_endpoint(&settings.otlp)?;
    let listen_text = options
        .listen
        .clone()
        .or_else(|| settings.listen.clone())
        .unwrap_or_else(|| settings::DEFAULT_LISTEN.to_owned());
    let listen = parse_listen(&listen_text)?;
    let keys = settings
        .api_keys
        .iter()
        .map(|k| auth::parse_hash(k))
        .collect::<Result<Vec<_>>>()?;
    if let Listen::Tcp(addr) = &listen {
        if !addr.ip().is_loopback() && keys.is_empty() {
            bail!(
                "listening on {addr}, which is not loopback, needs an API key: run `eptrace \
                 agent key` and put the hash it prints in the config's api_keys (or listen on \
                 loopback, or on unix:PATH)"
            );
        }
    }
    Ok(Settled {
        settings,
        listen,
        keys,
        otlp_endpoint,
    })
}

/// Runs the agent until SIGTERM or SIGINT: every operation and session it started is
/// finished (whole traces, no half snapshots) before it returns.
///
/// # Errors
/// [`Error::Settings`] before anything starts; [`Error::Start`] when what it needs cannot
/// be set up; [`Error::Serve`] when the HTTP server fails.
pub fn run(options: &Options) -> std::result::Result<(), Error> {
    bound_malloc_arenas();
    let settled = settle(options).map_err(|e| Error::Settings(e.into()))?;
    start_and_serve(settled)
}

/// Starts the agent's parts, serves until asked to stop, then ends them in order.
fn start_and_serve(settled: Settled) -> std::result::Result<(), Error> {
    let started = start(settled).map_err(|e| Error::Start(e.into()))?;
    serve(started).map_err(|e| Error::Serve(e.into()))
}

/// What [`start`] leaves running.
struct Started {
    agent: Arc<Agent>,
    runtime: tokio::runtime::Runtime,
    listener: http::Listener,
    export_thread: Option<std::thread::JoinHandle<()>>,
    scanner: std::thread::JoinHandle<()>,
}

fn start(settled: Settled) -> Result<Started> {
    let Settled {
        settings,
        listen,
        keys,
        otlp_endpoint,
    } = settled;
    let profiling = profiling::Profiling::start(&settings.profiling)?;
    let staging = match &settings.egress {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the egress folder {}", dir.display()))?;
            dir.clone()
        }
        None => {
            let dir = std::env::temp_dir().join(format!("eptrace-agent-{}", std::process::id()));
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .with_context(|| format!("restricting {}", dir.display()))?;
            dir
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(256)
        .thread_name("eptrace-agent")
        .enable_all()
        .build()
        .context("starting the agent's runtime")?;
    let listener = runtime.block_on(http::bind(&listen))?;
    let listen = listener.address(&listen);
    let (exporter, export_thread) = match otlp_endpoint {
        Some(endpoint) => {
            let (exporter, thread) = otlp::Exporter::start(endpoint, &settings.otlp)?;
            (Some(exporter), Some(thread))
        }
        None => (None, None),
    };
    let agent = Arc::new(Agent {
        rules: Rules::new(settings.rules.clone()),
        settings,
        keys,
        listen: listen.clone(),
        processes: Registry::default(),
        store: prometheus::Store::default(),
        operations: Operations::default(),
        staging,
        stopping: AtomicBool::new(false),
        watchers: Mutex::new(HashMap::new()),
        threads: Mutex::new(Vec::new()),
        streams: Mutex::new(Vec::new()),
        session_errors: AtomicU64::new(0),
        requests: AtomicU64::new(0),
        profiling,
        otlp: exporter,
    });
    log(&format!(
        "eptrace agent listening on {listen}{}; egress {}; {} rule(s); profiling {}",
        if agent.keys.is_empty() {
            " (no API key: loopback or owner-only socket)"
        } else {
            " (API key required)"
        },
        agent
            .settings
            .egress
            .as_ref()
            .map_or_else(|| "none".to_owned(), |p| p.display().to_string()),
        agent.settings.rules.len(),
        agent.settings.profiling.pyroscope.as_deref().map_or_else(
            || "off".to_owned(),
            |url| format!(
                "to {url} every {} s at {} Hz",
                agent.settings.profiling.period_seconds, agent.settings.profiling.rate_hz
            )
        ),
    ));
    profiling::start_builder(&agent)?;
    if let Some(exporter) = &agent.otlp {
        let o = &agent.settings.otlp;
        log(&format!(
            "exporting OTLP to {} (spans and events of {} in Rust targets, {} in .NET \
             targets; counters as metrics); a batch at least every {} s, queue at most {} MiB",
            exporter.url(),
            if o.providers.is_empty() {
                "no providers".to_owned()
            } else {
                o.providers.join(", ")
            },
            if o.dotnet_providers.is_empty() {
                "none".to_owned()
            } else {
                o.dotnet_providers.join(", ")
            },
            o.batch_seconds,
            o.queue_mb
        ));
    }
    let scanner = {
        let agent = Arc::clone(&agent);
        std::thread::Builder::new()
            .name("eptrace-agent-scan".into())
            .spawn(move || scan_loop(&agent))?
    };
    Ok(Started {
        agent,
        runtime,
        listener,
        export_thread,
        scanner,
    })
}

/// Serves until asked to stop, then finishes what runs, in order.
fn serve(started: Started) -> Result<()> {
    let Started {
        agent,
        runtime,
        listener,
        export_thread,
        scanner,
    } = started;
    let served = runtime.block_on(http::serve(Arc::clone(&agent), listener));
    log("stopping: finishing operations and sessions");
    agent.stopping.store(true, Ordering::Relaxed);
    agent.operations.cancel_all();
    for flag in lock(&agent.streams).iter() {
        flag.store(true, Ordering::Relaxed);
    }
    for flag in lock(&agent.watchers).values() {
        flag.store(true, Ordering::Relaxed);
    }
    if let Some(p) = &agent.profiling {
        p.stop_all();
    }
    let _ = scanner.join();
    let threads = std::mem::take(&mut *lock(&agent.threads));
    for t in threads {
        let _ = t.join();
    }
    if let Some(p) = &agent.profiling {
        p.shutdown();
    }
    if let Some(exporter) = &agent.otlp {
        let stats = exporter.shutdown(Duration::from_secs(5));
        if let Some(t) = export_thread {
            let _ = t.join();
        }
        log(&format!(
            "otlp: {} request(s) sent, {} dropped, {} rejected, {} left queued",
            stats.sent, stats.dropped, stats.rejected, stats.queued
        ));
    }
    runtime.shutdown_timeout(Duration::from_secs(20));
    if let Listen::Unix(path) = &agent.listen {
        let _ = std::fs::remove_file(path);
    }
    if agent.settings.egress.is_none() {
        let _ = std::fs::remove_dir_all(&agent.staging);
    }
    log("stopped");
    served
}

/// Finds processes every second until the agent stops.
fn scan_loop(agent: &Arc<Agent>) {
    while !agent.stopping.load(Ordering::Relaxed) {
        let changes = agent.processes.scan();
        for s in &changes.skipped {
            log(&format!("skipping process {}: {}", s.pid, s.reason));
        }
        for pid in &changes.exited {
            log(&format!("process {pid} is gone"));
            if let Some(flag) = lock(&agent.watchers).remove(pid) {
                flag.store(true, Ordering::Relaxed);
            }
            agent.store.forget(*pid);
            agent.rules.forget(*pid);
            if let Some(p) = &agent.profiling {
                p.forget(*pid);
            }
        }
        for p in &changes.started {
            log(&format!("found {} ({}), {}", p.name, p.pid, p.runtime));
            // One stop flag for everything standing in the process.
            let stop = Arc::new(AtomicBool::new(false));
            lock(&agent.watchers).insert(p.pid, Arc::clone(&stop));
            if agent.settings.metrics.enabled {
                start_watcher(agent, p.clone(), Arc::clone(&stop));
            }
            if let Some(exporter) = &agent.otlp {
                otlp::start_events(agent, exporter, p.clone(), stop);
            }
            profiling::start_profiler(agent, p.clone());
            for firing in agent.rules.on_start(p) {
                act(agent, p, &firing);
            }
        }
        // Finished threads are joined as they go, so the list stays short.
        let mut threads = lock(&agent.threads);
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut *threads)
            .into_iter()
            .partition(|t| t.is_finished());
        *threads = running;
        drop(threads);
        for t in done {
            let _ = t.join();
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Feeds one target's counters to the store and the rules.
struct Watcher {
    agent: Arc<Agent>,
    process: Process,
    labels: prometheus::TargetLabels,
    problems: Vec<String>,
    /// Counter values as OTLP metrics, when exporting.
    export: Option<otlp::CounterExport>,
    /// The session carries the runtime's events (a .NET target).
    runtime_events: bool,
}

impl CounterListener for Watcher {
    fn started(&mut self) {
        if self.runtime_events {
            self.agent.store.start_gc_totals(&self.labels);
        }
    }
    fn value(&mut self, value: CounterValue, at: SystemTime) {
        self.agent.store.record(&self.labels, &value);
        if let Some(export) = &mut self.export {
            export.value(&value, at);
        }
        for firing in self.agent.rules.on_value(&self.process, &value, at) {
            act(&self.agent, &self.process, &firing);
        }
    }
    fn runtime(&mut self, news: RuntimeNews, at: SystemTime) {
        if let RuntimeNews::Gc(gc) = &news {
            self.agent.store.record_gc(
                &self.labels,
                gc.generation,
                gc.runtime_pause_ms().unwrap_or(0.0),
            );
        }
        for firing in self.agent.rules.on_runtime(&self.process, &news, at) {
            act(&self.agent, &self.process, &firing);
        }
    }
    fn problem(&mut self, problem: &str) {
        if !self.problems.iter().any(|p| p == problem) && self.problems.len() < 16 {
            log(&format!(
                "counters of {} ({}): {problem}",
                self.process.name, self.process.pid
            ));
            self.problems.push(problem.to_owned());
        }
    }
}

/// A standing counters session in `process`, restarted (after a pause) if it fails while
/// the process lives.
fn start_watcher(agent: &Arc<Agent>, process: Process, stop: Arc<AtomicBool>) {
    let is_rust = process.kind == Some(processes::RuntimeKind::Rust);
    let mut specs = eventpipe_client::capture::counters::default_specs(is_rust);
    for text in &agent.settings.metrics.counters {
        specs.extend(
            eventpipe_client::capture::counters::parse_counter_specs(text).unwrap_or_default(),
        );
    }
    for provider in agent.rules.providers_for(&process) {
        if !specs
            .iter()
            .any(|s| s.provider.eq_ignore_ascii_case(&provider))
        {
            specs.push(eventpipe_client::capture::counters::CounterSpec {
                provider,
                names: Vec::new(),
            });
        }
    }
    let interval = agent.settings.metrics.interval_seconds;
    let runtime_events = process.kind == Some(processes::RuntimeKind::Dotnet)
        && (agent.settings.metrics.runtime_events || agent.rules.read_runtime_events(&process));
    let thread_agent = Arc::clone(agent);
    let spawned = std::thread::Builder::new()
        .name(format!("eptrace-agent-counters-{}", process.pid))
        .spawn(move || {
            let agent = thread_agent;
            let mut watcher = Watcher {
                labels: prometheus::TargetLabels {
                    pid: process.pid,
                    process: process.name.clone(),
                    runtime: match process.kind {
                        Some(processes::RuntimeKind::Rust) => "rust",
                        Some(processes::RuntimeKind::Dotnet) => "dotnet",
                        None => "unknown",
                    }
                    .to_owned(),
                },
                agent: Arc::clone(&agent),
                process: process.clone(),
                problems: Vec::new(),
                export: agent
                    .otlp
                    .as_ref()
                    .map(|e| otlp::CounterExport::new(Arc::clone(e), &process)),
                runtime_events,
            };
            while !stop.load(Ordering::Relaxed) {
                let outcome = sessions::watch_counters(
                    &process,
                    specs.clone(),
                    interval,
                    runtime_events,
                    &stop,
                    &mut watcher,
                );
                if stop.load(Ordering::Relaxed) || agent.processes.get(process.pid).is_none() {
                    break;
                }
                agent.session_errors.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = outcome {
                    watcher.problem(&format!("{e:#}; trying again in 5 s"));
                }
                retry_pause(&stop);
            }
        });
    keep_thread(agent, spawned, "a counters thread");
}

/// Runs a rule's action on `process` as an operation.
fn act(agent: &Arc<Agent>, process: &Process, firing: &Firing) {
    let rule = agent.rules.get(firing.rule);
    let Some(egress) = agent.settings.egress.clone() else {
        return;
    };
    let (kind, default_ext) = match &rule.action {
        Action::Trace { .. } => ("trace", ".nettrace"),
        Action::Gcdump { .. } => ("gcdump", Snapshot::Gcdump.extension()),
        Action::Heap { .. } => ("heap", Snapshot::Heap.extension()),
        Action::Stacks { .. } => ("stacks", STACKS_EXTENSION),
    };
    let template = rule
        .action
        .name_template()
        .unwrap_or("{process}_{pid}_{time}_{rule}");
    let name = egress::expand(
        template,
        &egress::NameFields {
            rule: &rule.name,
            process: &process.name,
            pid: process.pid,
            time: SystemTime::now(),
        },
    ) + default_ext;
    let handle = agent
        .operations
        .start(kind, process.pid, &process.name, Some(&rule.name));
    log(&format!(
        "rule `{}` fired for {} ({}): {}; operation {} writes {}",
        rule.name, process.name, process.pid, firing.why, handle.id, name
    ));
    let work = match &rule.action {
        Action::Trace {
            profile,
            providers,
            duration_seconds,
            ..
        } => Work::Trace(TraceAsk {
            profile: profile
                .as_deref()
                .map(settings::parse_profile)
                .transpose()
                .unwrap_or(None)
                .unwrap_or_default(),
            providers: providers.clone(),
            duration: Duration::from_secs_f64(*duration_seconds),
            buffer_mb: 256,
            rundown: true,
        }),
        Action::Gcdump { .. } => Work::Snapshot(Snapshot::Gcdump),
        Action::Heap { .. } => Work::Snapshot(Snapshot::Heap),
        Action::Stacks { .. } => Work::Stacks,
    };
    run_operation(
        agent,
        process.clone(),
        work,
        egress,
        Naming::Numbered(name),
        handle,
    );
}

/// What an operation does.
#[derive(Debug, Clone)]
pub(crate) enum Work {
    Trace(TraceAsk),
    Snapshot(Snapshot),
    /// Every thread's stack now, as JSON.
    Stacks,
}

/// The extension of a stack snapshot's file.
pub(crate) const STACKS_EXTENSION: &str = ".stacks.json";

impl Work {
    /// The extension of the file it writes.
    fn extension(&self) -> &'static str {
        match self {
            Work::Trace(_) => ".nettrace",
            Work::Snapshot(which) => which.extension(),
            Work::Stacks => STACKS_EXTENSION,
        }
    }
}

/// The name of an operation's file.
#[derive(Debug, Clone)]
pub(crate) enum Naming {
    /// As a client asked: taken already is an error.
    Exact(String),
    /// As a rule made it (ending in the work's extension): numbered when taken.
    Numbered(String),
}

/// Runs `work` on its own thread, into `dir/name` (appearing only once complete).
pub(crate) fn run_operation(
    agent: &Arc<Agent>,
    process: Process,
    work: Work,
    dir: PathBuf,
    name: Naming,
    handle: Handle,
) {
    let thread_agent = Arc::clone(agent);
    let spawned = std::thread::Builder::new()
        .name(format!("eptrace-agent-op-{}", handle.id))
        .spawn(move || {
            let outcome = operate(&process, &work, &dir, &name, &handle);
            match &outcome {
                Ok(path) => log(&format!("operation {} wrote {path}", handle.id)),
                Err(e) => log(&format!("operation {} failed: {e}", handle.id)),
            }
            handle.finish(outcome);
            drop(thread_agent);
        });
    keep_thread(agent, spawned, "an operation thread");
}

fn operate(
    process: &Process,
    work: &Work,
    dir: &std::path::Path,
    name: &Naming,
    handle: &Handle,
) -> std::result::Result<String, String> {
    let created = match name {
        Naming::Exact(name) => egress::Pending::create(dir, name),
        Naming::Numbered(name) => egress::Pending::create_numbered(dir, name, work.extension()),
    };
    let (pending, mut file) = created.map_err(|e| format!("{e:#}"))?;
    let result: Result<()> = (|| match work {
        Work::Trace(ask) => {
            let request = sessions::trace_request(process, ask)?;
            let mut write = |bytes: &[u8]| file.write_all(bytes);
            let end = sessions::run_trace(
                process,
                &request,
                ask.duration,
                &handle.cancel,
                |_| {},
                &mut write,
            )?;
            file.sync_all()?;
            if !end.whole {
                bail!("the trace stream broke after {} bytes", end.bytes);
            }
            if end.early {
                handle.note("stopped before its duration (cancelled or the agent stopping); the trace is whole");
            }
            Ok(())
        }
        Work::Snapshot(which) => {
            let file = file.try_clone()?;
            let summary = sessions::take_snapshot(
                *which,
                process,
                file,
                pending.partial_path(),
                &handle.cancel,
                &mut |n| handle.note(n),
            )?;
            handle.note(&summary);
            Ok(())
        }
        Work::Stacks => {
            let stacks = sessions::thread_stacks(sessions::sample_threads(process)?)?;
            serde_json::to_writer_pretty(&mut file, &stacks)?;
            file.sync_all()?;
            handle.note(&format!("{} threads", stacks.threads.len()));
            Ok(())
        }
    })();
    match result {
        Ok(()) => pending
            .commit()
            .map(|p| p.display().to_string())
            .map_err(|e| format!("{e:#}")),
        Err(e) => {
            pending.discard();
            Err(format!("{e:#}"))
        }
    }
}
