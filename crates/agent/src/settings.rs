//! The agent's configuration file (TOML): where it listens, who may call it, what it
//! watches, where its files go and the rules that collect on their own.
//!
//! ```toml
//! listen = "127.0.0.1:52323"          # or "unix:/run/eptrace/agent.sock"
//! api_keys = ["sha256:9f86d0..."]     # `eptrace agent key` makes one
//! egress = "/var/lib/eptrace"         # where operations write their files
//!
//! [metrics]
//! interval_seconds = 5                # how often each target publishes its counters
//! counters = ["MyMeter"]              # more providers beside the runtime's own
//!
//! [otlp]                              # OpenTelemetry export (or `--otlp URL`)
//! url = "http://127.0.0.1:4318"       # the collector's OTLP/HTTP base URL
//! providers = ["*:*:4"]               # events recorded in each Rust target (the default)
//! dotnet_providers = []               # in each .NET target (none by default)
//! headers = { authorization = "Bearer ..." }
//! batch_seconds = 5                   # a batch is sent at least this often
//! batch_items = 4096                  # or once it holds this many spans, records, metrics
//! queue_mb = 64                       # what waits for the collector, at most
//! queue_requests = 10000              # and at most this many requests
//! retry_max_seconds = 60              # the longest wait between two attempts
//! queue_dir = "/var/lib/eptrace/otlp" # keep it on disk (default: in memory)
//!
//! [[rules]]
//! name = "high-cpu"
//! filter = { name = "my-service", runtime = "rust" }
//! trigger = { kind = "counter", provider = "EventPipeRs-Runtime", counter = "cpu-usage", above = 80, for_seconds = 10 }
//! action = { kind = "trace", profile = "cpu-sampling", duration_seconds = 30 }
//! limit = { count = 1, window_seconds = 3600 }
//! ```
//!
//! Every mistake is found when the file is read, with the setting's name: an unknown key,
//! a rule without a threshold, a template naming a field that does not exist.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use eventpipe_client::request::Preset;
use serde::Deserialize;

use super::processes::{Process, RuntimeKind};

/// dotnet-monitor's port, on loopback.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:52323";

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Settings {
    /// `HOST:PORT` or `unix:PATH`.
    pub(crate) listen: Option<String>,
    /// SHA-256 hashes of the accepted API keys, `sha256:<64 hex digits>`.
    #[serde(default)]
    pub(crate) api_keys: Vec<String>,
    /// The folder operations write into.
    pub(crate) egress: Option<PathBuf>,
    #[serde(default)]
    pub(crate) metrics: MetricsSettings,
    #[serde(default)]
    pub(crate) rules: Vec<Rule>,
    #[serde(default)]
    pub(crate) profiling: ProfilingSettings,
    #[serde(default)]
    pub(crate) otlp: OtlpSettings,
}

/// Continuous profiling to Grafana Pyroscope (`[profiling]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProfilingSettings {
    /// The Pyroscope server's URL (`http://pyroscope:4040`); none: no continuous profiling.
    pub(crate) pyroscope: Option<String>,
    /// `push` (`/push.v1.PusherService/Push`) or `ingest` (`/ingest`).
    #[serde(default)]
    pub(crate) api: PyroscopeApi,
    /// Headers every request carries (`Authorization`, `X-Scope-OrgID`).
    #[serde(default)]
    pub(crate) headers: std::collections::BTreeMap<String, String>,
    /// The length of one profile.
    #[serde(default = "ten")]
    pub(crate) period_seconds: f64,
    /// The CPU sampler's rate for Rust targets (.NET's sample profiler has its own, ~1 kHz).
    #[serde(default = "hundred")]
    pub(crate) rate_hz: u32,
    /// Whether Rust targets' allocation samples are profiled too (when the program
    /// installs the profiled allocator).
    #[serde(default = "yes")]
    pub(crate) allocations: bool,
    /// Which processes are profiled; every field given must match.
    #[serde(default)]
    pub(crate) filter: Filter,
    /// Whether stripped libraries are named from their separate debug files
    /// (`/usr/lib/debug`). Off by default: the agent keeps what it opens, and a debug
    /// file's compressed sections take tens of MB once read (libc's about 30); the
    /// profiles keep the build ids, by which the backend can name those frames.
    #[serde(default)]
    pub(crate) debug_files: bool,
    /// Where profiles wait while the server does not take them.
    pub(crate) queue_folder: Option<PathBuf>,
    /// At most this many MiB wait; beyond it the oldest profiles are dropped (and counted).
    #[serde(default = "queue_mb")]
    pub(crate) queue_max_mb: u64,
    /// At most this many profiles wait; beyond it the oldest are dropped (and counted).
    #[serde(default = "queue_profiles")]
    pub(crate) queue_max_profiles: usize,
    /// Whether samples carry their thread's name as the string label `thread` (one
    /// Pyroscope series per distinct name); off: only the numeric `thread_id`, which
    /// Pyroscope keeps in the profile without making series of it.
    #[serde(default)]
    pub(crate) thread_names: bool,
    /// How old a profile the server takes, in minutes (Pyroscope's
    /// `validation.reject-older-than`, 60 by default); older queued profiles are dropped
    /// unsent. 0: no limit.
    #[serde(default = "sixty")]
    pub(crate) max_profile_age_minutes: u64,
}

impl Default for ProfilingSettings {
    fn default() -> Self {
        ProfilingSettings {
            pyroscope: None,
            api: PyroscopeApi::Push,
            headers: Default::default(),
            period_seconds: 10.0,
            rate_hz: 100,
            allocations: true,
            filter: Filter::default(),
            debug_files: false,
            queue_folder: None,
            queue_max_mb: 256,
            queue_max_profiles: 100_000,
            thread_names: false,
            max_profile_age_minutes: sixty(),
        }
    }
}

/// OpenTelemetry export: on when `url` is set (here or with `--otlp`).
///
/// Each target gets a standing event session recording `providers` (Rust targets) or
/// `dotnet_providers` (.NET targets), in `eptrace collect --providers` syntax: its spans
/// and events go to the collector as OTLP spans and log records. Rust targets take `*`
/// for every provider they have (their `tracing` targets included, this project's
/// profilers not), so the default records everything at Informational; a .NET runtime
/// has no such wildcard, so .NET targets record nothing unless providers are named. The
/// counters the agent watches (`[metrics]`) go as OTLP metrics.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OtlpSettings {
    /// The collector's base URL (`/v1/traces`, `/v1/logs`, `/v1/metrics` are added).
    pub(crate) url: Option<String>,
    #[serde(default = "default_otlp_providers")]
    pub(crate) providers: Vec<String>,
    #[serde(default)]
    pub(crate) dotnet_providers: Vec<String>,
    /// Headers of every request (authorization…).
    #[serde(default)]
    pub(crate) headers: std::collections::BTreeMap<String, String>,
    #[serde(default = "five")]
    pub(crate) batch_seconds: f64,
    #[serde(default = "default_batch_items")]
    pub(crate) batch_items: usize,
    #[serde(default = "default_queue_mb")]
    pub(crate) queue_mb: u64,
    #[serde(default = "default_queue_requests")]
    pub(crate) queue_requests: usize,
    #[serde(default = "default_retry_max")]
    pub(crate) retry_max_seconds: f64,
    /// A folder to queue requests in (they then survive the agent); else memory.
    pub(crate) queue_dir: Option<PathBuf>,
}

impl Default for OtlpSettings {
    fn default() -> Self {
        OtlpSettings {
            url: None,
            providers: default_otlp_providers(),
            dotnet_providers: Vec::new(),
            headers: std::collections::BTreeMap::new(),
            batch_seconds: five(),
            batch_items: default_batch_items(),
            queue_mb: default_queue_mb(),
            queue_requests: default_queue_requests(),
            retry_max_seconds: default_retry_max(),
            queue_dir: None,
        }
    }
}

fn sixty() -> u64 {
    60
}

impl ProfilingSettings {
    /// The queue's folder: as set, else one per user in the temporary folder (kept across
    /// the agent's restarts).
    pub(crate) fn queue_folder(&self) -> PathBuf {
        self.queue_folder.clone().unwrap_or_else(|| {
            let uid = std::fs::metadata("/proc/self")
                .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
                .unwrap_or(0);
            std::env::temp_dir().join(format!("eptrace-agent-{uid}-pyroscope-queue"))
        })
    }

    /// How old a profile the server takes, if it has a limit.
    pub(crate) fn max_profile_age(&self) -> Option<std::time::Duration> {
        (self.max_profile_age_minutes > 0)
            .then(|| std::time::Duration::from_secs(self.max_profile_age_minutes * 60))
    }
}

/// Pyroscope's two ingestion endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PyroscopeApi {
    #[default]
    Push,
    Ingest,
}

fn hundred() -> u32 {
    100
}

fn queue_mb() -> u64 {
    256
}

fn queue_profiles() -> usize {
    100_000
}

fn default_otlp_providers() -> Vec<String> {
    vec!["*:*:4".to_owned()]
}

fn default_batch_items() -> usize {
    4096
}

fn default_queue_mb() -> u64 {
    64
}

fn default_queue_requests() -> usize {
    10_000
}

fn default_retry_max() -> f64 {
    60.0
}

/// The counters the agent keeps for `/metrics` and the rules.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MetricsSettings {
    /// Off: no standing counters session in any target (`/metrics` then shows only the
    /// agent's own health, and counter triggers never fire).
    #[serde(default = "yes")]
    pub(crate) enabled: bool,
    #[serde(default = "five")]
    pub(crate) interval_seconds: f64,
    /// Providers watched in every target besides the runtime's own counters, as
    /// `eptrace counters --counters` takes them (`MyMeter[requests,latency]`).
    #[serde(default)]
    pub(crate) counters: Vec<String>,
    /// In .NET targets, the runtime's GC, exception and thread pool events in the same
    /// session: GC counts and pause time per generation in `/metrics`. (Rules whose
    /// triggers read them enable them for the processes they apply to either way.)
    #[serde(default = "yes")]
    pub(crate) runtime_events: bool,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            enabled: true,
            interval_seconds: 5.0,
            counters: Vec::new(),
            runtime_events: true,
        }
    }
}

fn yes() -> bool {
    true
}

fn five() -> f64 {
    5.0
}

/// A collection rule: when `trigger` fires for a process `filter` accepts, run `action`,
/// at most `limit.count` times per process in any `limit.window_seconds`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rule {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) filter: Filter,
    pub(crate) trigger: Trigger,
    pub(crate) action: Action,
    #[serde(default)]
    pub(crate) limit: Limit,
}

/// Which processes a rule applies to; every field given must match.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Filter {
    /// The process name (`comm`, as `eptrace ps` shows it), exactly.
    pub(crate) name: Option<String>,
    /// `rust` or `dotnet`.
    pub(crate) runtime: Option<RuntimeKind>,
    /// A substring of the command line.
    pub(crate) command_line: Option<String>,
}

impl Filter {
    /// Whether every field given matches `process`.
    pub(crate) fn accepts(&self, process: &Process) -> bool {
        self.name.as_ref().is_none_or(|n| *n == process.name)
            && self.runtime.is_none_or(|r| Some(r) == process.kind)
            && self
                .command_line
                .as_ref()
                .is_none_or(|c| process.command_line.contains(c.as_str()))
    }
}

/// What makes a rule fire.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) enum Trigger {
    /// A counter above (or below) a threshold in every value for `for_seconds`.
    Counter {
        provider: String,
        counter: String,
        above: Option<f64>,
        below: Option<f64>,
        #[serde(default)]
        for_seconds: f64,
    },
    /// The agent finds the process (at its start, or when the agent starts).
    ProcessStart,
    /// A .NET GC paused the program longer than `above_ms` (a GC of `generation` only,
    /// when given). From the runtime's GC events, as `eptrace analyze` reads them.
    GcPause {
        above_ms: f64,
        generation: Option<u32>,
    },
    /// At least `per_second` × `for_seconds` exceptions thrown within `for_seconds` in a
    /// .NET process (of `exception_type` only, when given: the full type name).
    Exceptions {
        per_second: f64,
        #[serde(default = "ten")]
        for_seconds: f64,
        exception_type: Option<String>,
    },
    /// The .NET thread pool added a worker because queued work made no progress
    /// (hill climbing's Starvation adjustment).
    ThreadPoolStarvation,
}

impl Trigger {
    /// Whether it listens to the runtime's events (a .NET target's, in its counters
    /// session), not to counters or the process list.
    pub(crate) fn reads_runtime_events(&self) -> bool {
        matches!(
            self,
            Trigger::GcPause { .. } | Trigger::Exceptions { .. } | Trigger::ThreadPoolStarvation
        )
    }
}

fn ten() -> f64 {
    10.0
}

/// What a rule does.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) enum Action {
    /// A trace of `duration_seconds` with a profile and/or providers.
    Trace {
        profile: Option<String>,
        #[serde(default)]
        providers: Vec<String>,
        #[serde(default = "thirty")]
        duration_seconds: f64,
        /// The file name without its extension; fields `{rule}`, `{process}`, `{pid}`,
        /// `{time}`.
        name: Option<String>,
    },
    /// A .NET heap dump.
    Gcdump { name: Option<String> },
    /// A Rust program's live heap.
    Heap { name: Option<String> },
    /// Every thread's stack now, as JSON (`eptrace stack --json`).
    Stacks { name: Option<String> },
}

fn thirty() -> f64 {
    30.0
}

impl Action {
    pub(crate) fn name_template(&self) -> Option<&str> {
        match self {
            Action::Trace { name, .. }
            | Action::Gcdump { name }
            | Action::Heap { name }
            | Action::Stacks { name } => name.as_deref(),
        }
    }
}

/// At most `count` firings per process in any window of `window_seconds`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Limit {
    pub(crate) count: u32,
    pub(crate) window_seconds: f64,
}

impl Default for Limit {
    fn default() -> Self {
        Limit {
            count: 1,
            window_seconds: 3600.0,
        }
    }
}

impl Limit {
    pub(crate) fn window(&self) -> Duration {
        Duration::from_secs_f64(self.window_seconds)
    }
}

/// Reads and checks the file; no file: the defaults.
pub(crate) fn load(path: Option<&Path>) -> Result<Settings> {
    let Some(path) = path else {
        return Ok(Settings::default());
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let settings = parse(&text).with_context(|| format!("in {}", path.display()))?;
    Ok(settings)
}

/// Parses and checks a configuration.
pub(crate) fn parse(text: &str) -> Result<Settings> {
    let settings: Settings = toml::from_str(text)?;
    check(&settings)?;
    Ok(settings)
}

pub(crate) fn check(s: &Settings) -> Result<()> {
    for key in &s.api_keys {
        crate::auth::parse_hash(key).with_context(|| format!("api_keys: `{key}`"))?;
    }
    let interval = s.metrics.interval_seconds;
    if !(1.0..=3600.0).contains(&interval) {
        bail!("metrics.interval_seconds is {interval}: it must be between 1 and 3600");
    }
    for spec in &s.metrics.counters {
        eventpipe_client::capture::counters::parse_counter_specs(spec)
            .map_err(|e| anyhow::anyhow!("metrics.counters: {e}"))?;
    }
    let p = &s.profiling;
    if let Some(url) = &p.pyroscope {
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 {
            bail!("profiling.pyroscope `{url}`: not an http:// or https:// URL");
        }
    }
    if !(1.0..=3600.0).contains(&p.period_seconds) {
        bail!(
            "profiling.period_seconds is {}: it must be between 1 and 3600",
            p.period_seconds
        );
    }
    if !(1..=eventpipe_profiler::cpu::MAX_RATE_HZ).contains(&p.rate_hz) {
        bail!(
            "profiling.rate_hz is {}: it must be between 1 and {}",
            p.rate_hz,
            eventpipe_profiler::cpu::MAX_RATE_HZ
        );
    }
    if p.queue_max_mb == 0 || p.queue_max_profiles == 0 {
        bail!("profiling.queue_max_mb and profiling.queue_max_profiles must be at least 1");
    }
    for (name, value) in &p.headers {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            bail!("profiling.headers: `{name}` is not a header name");
        }
        if value.contains(['\r', '\n']) {
            bail!("profiling.headers: the value of `{name}` holds a line break");
        }
    }
    check_otlp(&s.otlp)?;
    if !s.rules.is_empty() && s.egress.is_none() {
        bail!("rules write files: set `egress` to the folder they go to");
    }
    let mut names = std::collections::BTreeSet::new();
    for rule in &s.rules {
        let at = format!("rule `{}`", rule.name);
        if rule.name.trim().is_empty() {
            bail!("a rule has an empty name");
        }
        if !names.insert(rule.name.as_str()) {
            bail!("{at}: two rules have this name");
        }
        if let Trigger::Counter {
            above,
            below,
            for_seconds,
            ..
        } = &rule.trigger
        {
            match (above, below) {
                (None, None) => bail!("{at}: a counter trigger needs `above` or `below`"),
                (Some(a), Some(b)) if a >= b => {
                    bail!("{at}: `above` {a} and `below` {b} can never both hold")
                }
                _ => {}
            }
            if !(0.0..=86_400.0).contains(for_seconds) {
                bail!("{at}: for_seconds must be between 0 and 86400");
            }
        }
        check_runtime_trigger(rule, &at)?;
        if !(rule.limit.count >= 1 && rule.limit.window_seconds > 0.0) {
            bail!("{at}: limit.count must be at least 1 and limit.window_seconds above 0");
        }
        if let Action::Trace {
            profile,
            providers,
            duration_seconds,
            ..
        } = &rule.action
        {
            if let Some(p) = profile {
                parse_profile(p).with_context(|| at.clone())?;
            }
            for spec in providers {
                eventpipe_core::ProviderConfig::parse(spec)
                    .with_context(|| format!("{at}: provider `{spec}`"))?;
            }
            if !(*duration_seconds > 0.0 && *duration_seconds <= 86_400.0) {
                bail!("{at}: duration_seconds must be above 0 and at most 86400");
            }
        }
        if let Some(template) = rule.action.name_template() {
            crate::egress::check_template(template).with_context(|| at.clone())?;
        }
    }
    Ok(())
}

/// The checks of a trigger on the runtime's events: numbers in range, and a filter that
/// can take a .NET process.
fn check_runtime_trigger(rule: &Rule, at: &str) -> Result<()> {
    match &rule.trigger {
        Trigger::GcPause {
            above_ms,
            generation,
        } => {
            if !(above_ms.is_finite() && *above_ms >= 0.0) {
                bail!("{at}: above_ms is {above_ms}: it must be 0 or more");
            }
            if generation.is_some_and(|g| g > 2) {
                bail!("{at}: generation must be 0, 1 or 2");
            }
        }
        Trigger::Exceptions {
            per_second,
            for_seconds,
            ..
        } => {
            if !(per_second.is_finite() && *per_second > 0.0) {
                bail!("{at}: per_second is {per_second}: it must be above 0");
            }
            if !(*for_seconds > 0.0 && *for_seconds <= 86_400.0) {
                bail!("{at}: for_seconds must be above 0 and at most 86400");
            }
        }
        Trigger::ThreadPoolStarvation => {}
        Trigger::Counter { .. } | Trigger::ProcessStart => return Ok(()),
    }
    if rule.filter.runtime == Some(RuntimeKind::Rust) {
        bail!(
            "{at}: its trigger reads the .NET runtime's events, and its filter takes only \
             Rust processes"
        );
    }
    Ok(())
}

/// Checks the `[otlp]` table (its URL again once `--otlp` may have replaced it:
/// [`otlp_endpoint`]).
pub(crate) fn check_otlp(o: &OtlpSettings) -> Result<()> {
    if o.url.is_some() {
        otlp_endpoint(o)?;
    }
    for (which, list) in [
        ("providers", &o.providers),
        ("dotnet_providers", &o.dotnet_providers),
    ] {
        for spec in list {
            eventpipe_core::ProviderConfig::parse(spec)
                .with_context(|| format!("otlp.{which}: provider `{spec}`"))?;
        }
    }
    if !(0.1..=3600.0).contains(&o.batch_seconds) {
        bail!(
            "otlp.batch_seconds is {}: it must be between 0.1 and 3600",
            o.batch_seconds
        );
    }
    if !(1..=1_000_000).contains(&o.batch_items) {
        bail!(
            "otlp.batch_items is {}: it must be between 1 and 1000000",
            o.batch_items
        );
    }
    if !(1..=65_536).contains(&o.queue_mb) {
        bail!(
            "otlp.queue_mb is {}: it must be between 1 and 65536",
            o.queue_mb
        );
    }
    if !(1..=1_000_000).contains(&o.queue_requests) {
        bail!(
            "otlp.queue_requests is {}: it must be between 1 and 1000000",
            o.queue_requests
        );
    }
    if !(0.1..=3600.0).contains(&o.retry_max_seconds) {
        bail!(
            "otlp.retry_max_seconds is {}: it must be between 0.1 and 3600",
            o.retry_max_seconds
        );
    }
    for (name, value) in &o.headers {
        let bad_name = name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if bad_name {
            bail!("otlp.headers: `{name}` is not an HTTP header name");
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            bail!("otlp.headers: the value of `{name}` holds a line break or NUL");
        }
    }
    Ok(())
}

/// The collector's endpoint, from `url` and `headers`.
pub(crate) fn otlp_endpoint(o: &OtlpSettings) -> Result<Option<eventpipe_export::otlp::Endpoint>> {
    let Some(url) = &o.url else {
        return Ok(None);
    };
    let headers = o
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let endpoint = eventpipe_export::otlp::Endpoint::new(url, headers)
        .map_err(|e| anyhow::anyhow!("otlp.url (or --otlp): {e}"))?;
    Ok(Some(endpoint))
}

/// A profile by the name `eptrace collect --profile` takes, or several separated by
/// commas (`cpu-sampling,tracing`).
pub(crate) fn parse_profile(names: &str) -> Result<Vec<Preset>> {
    names
        .split(',')
        .map(|name| Ok(name.trim().parse::<Preset>()?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_reads() {
        let s = parse(
            r#"
            listen = "0.0.0.0:9000"
            api_keys = ["sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"]
            egress = "/tmp/out"
            [metrics]
            interval_seconds = 2
            counters = ["Demo[fixed-gauge]"]
            [[rules]]
            name = "cpu"
            filter = { runtime = "rust" }
            trigger = { kind = "counter", provider = "EventPipeRs-Runtime", counter = "cpu-usage", above = 50, for_seconds = 2 }
            action = { kind = "trace", profile = "cpu-sampling", duration_seconds = 3, name = "{rule}-{pid}" }
            limit = { count = 2, window_seconds = 60 }
            "#,
        )
        .unwrap();
        assert_eq!(s.rules.len(), 1);
        assert_eq!(s.rules[0].limit.count, 2);
        assert_eq!(s.rules[0].filter.runtime, Some(RuntimeKind::Rust));
        assert!(matches!(
            s.rules[0].trigger,
            Trigger::Counter { above: Some(a), .. } if a == 50.0
        ));
        // Without [profiling]: off, with its defaults.
        assert!(s.profiling.pyroscope.is_none());
        assert!(!s.profiling.thread_names);
        assert_eq!(
            s.profiling.max_profile_age(),
            Some(std::time::Duration::from_secs(3600))
        );
        assert_eq!(
            (s.profiling.period_seconds, s.profiling.rate_hz),
            (10.0, 100)
        );
    }

    #[test]
    fn a_profiling_section_reads() {
        let s = parse(
            r#"
            [profiling]
            pyroscope = "https://profiles.example.com"
            api = "ingest"
            headers = { "X-Scope-OrgID" = "team-a" }
            period_seconds = 15
            rate_hz = 49
            allocations = false
            filter = { name = "svc" }
            queue_folder = "/var/lib/q"
            queue_max_mb = 8
            queue_max_profiles = 10
            thread_names = true
            max_profile_age_minutes = 0
            "#,
        )
        .unwrap();
        let p = &s.profiling;
        assert!(p.thread_names);
        assert_eq!(p.max_profile_age(), None);
        assert_eq!(p.api, PyroscopeApi::Ingest);
        assert_eq!(p.headers["X-Scope-OrgID"], "team-a");
        assert_eq!(
            (p.period_seconds, p.rate_hz, p.allocations),
            (15.0, 49, false)
        );
        assert_eq!(p.queue_folder(), PathBuf::from("/var/lib/q"));
        assert_eq!((p.queue_max_mb, p.queue_max_profiles), (8, 10));
        assert_eq!(p.filter.name.as_deref(), Some("svc"));
        assert_eq!(s.otlp.url, None);
        assert_eq!(s.otlp.providers, ["*:*:4"]);
    }

    #[test]
    fn an_otlp_table_reads() {
        let s = parse(
            r#"
            [otlp]
            url = "http://127.0.0.1:4318/"
            providers = ["app:*:5"]
            headers = { authorization = "Bearer t" }
            batch_seconds = 0.5
            queue_dir = "/tmp/q"
            "#,
        )
        .unwrap();
        let endpoint = otlp_endpoint(&s.otlp).unwrap().unwrap();
        assert_eq!(endpoint.base, "http://127.0.0.1:4318");
        assert_eq!(
            endpoint.headers,
            [("authorization".into(), "Bearer t".into())]
        );
        assert_eq!(s.otlp.providers, ["app:*:5"]);
        assert_eq!(s.otlp.batch_items, 4096);
    }

    #[test]
    fn the_guides_rules_parse() {
        let page = include_str!("../../../docs/agent.md");
        let blocks: Vec<&str> = page
            .split("```toml\n")
            .skip(1)
            .map(|b| b.split("```").next().unwrap())
            .collect();
        assert!(blocks.len() >= 2);
        for block in blocks {
            let text = format!("egress = \"/x\"\n{block}");
            let settings = parse(&text).unwrap_or_else(|e| panic!("{block}\n=> {e:#}"));
            assert!(!settings.rules.is_empty());
        }
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            ("lissen = \"x\"", "lissen"),
            (
                "egress = \"/x\"\n[[rules]]\nname = \"r\"\ntrigger = { kind = \"counter\", provider = \"p\", counter = \"c\" }\naction = { kind = \"gcdump\" }",
                "needs `above` or `below`",
            ),
            (
                "[[rules]]\nname = \"r\"\ntrigger = { kind = \"process-start\" }\naction = { kind = \"heap\" }",
                "egress",
            ),
            (
                "egress = \"/x\"\n[[rules]]\nname = \"r\"\ntrigger = { kind = \"process-start\" }\naction = { kind = \"trace\", profile = \"fast\" }",
                "unknown profile `fast`",
            ),
            (
                "egress = \"/x\"\n[[rules]]\nname = \"r\"\ntrigger = { kind = \"process-start\" }\naction = { kind = \"heap\", name = \"{user}\" }",
                "{user}",
            ),
            (
                "egress = \"/x\"\n[[rules]]\nname = \"r\"\ntrigger = { kind = \"gc-pause\", above_ms = 5, generation = 3 }\naction = { kind = \"gcdump\" }",
                "generation must be 0, 1 or 2",
            ),
            (
                "egress = \"/x\"\n[[rules]]\nname = \"r\"\ntrigger = { kind = \"gc-pause\", above_ms = -1 }\naction = { kind = \"gcdump\" }",
                "above_ms is -1",
            ),
            (
                "egress = \"/x\"\n[[rules]]\nname = \"r\"\ntrigger = { kind = \"exceptions\", per_second = 0 }\naction = { kind = \"gcdump\" }",
                "per_second is 0",
            ),
            (
                "egress = \"/x\"\n[[rules]]\nname = \"r\"\ntrigger = { kind = \"exceptions\", per_second = 1, for_seconds = 0 }\naction = { kind = \"gcdump\" }",
                "for_seconds must be above 0",
            ),
            (
                "egress = \"/x\"\n[[rules]]\nname = \"r\"\nfilter = { runtime = \"rust\" }\ntrigger = { kind = \"thread-pool-starvation\" }\naction = { kind = \"heap\" }",
                "reads the .NET runtime's events, and its filter takes only Rust",
            ),
            (
                "egress = \"/x\"\n[[rules]]\nname = \"r\"\ntrigger = { kind = \"gc-pause\", above = 5 }\naction = { kind = \"gcdump\" }",
                "above",
            ),
            ("api_keys = [\"hunter2\"]", "sha256:"),
            ("[metrics]\ninterval_seconds = 0", "interval_seconds"),
            ("[profiling]\npyroscope = \"pyroscope:4040\"", "not an http:// or https:// URL"),
            ("[profiling]\nperiod_seconds = 0.5", "profiling.period_seconds"),
            ("[profiling]\nrate_hz = 0", "profiling.rate_hz"),
            ("[profiling]\nrate_hz = 20000", "between 1 and 10000"),
            ("[profiling]\nqueue_max_profiles = 0", "queue_max_profiles"),
            ("[profiling]\nheaders = { \"Bad Name\" = \"x\" }", "`Bad Name` is not a header name"),
            ("[profiling]\nheaders = { A = \"x\\ny\" }", "line break"),
            ("[profiling]\napi = \"grpc\"", "grpc"),
            ("[profiling]\nperiod = 10", "period"),
            ("[otlp]\nurl = \"127.0.0.1:4318\"", "otlp.url"),
            ("[otlp]\nurl = \"http://h:4318/v1/traces\"", "base URL"),
            ("[otlp]\nprovider = [\"x\"]", "provider"),
            ("[otlp]\nproviders = [\"app:zz\"]", "otlp.providers: provider `app:zz`"),
            ("[otlp]\nbatch_seconds = 0", "otlp.batch_seconds"),
            ("[otlp]\nbatch_items = 0", "otlp.batch_items"),
            ("[otlp]\nqueue_mb = 0", "otlp.queue_mb"),
            ("[otlp]\nqueue_requests = 0", "otlp.queue_requests"),
            ("[otlp]\nretry_max_seconds = 0", "otlp.retry_max_seconds"),
            ("[otlp]\nheaders = { \"a b\" = \"x\" }", "`a b` is not an HTTP header name"),
        ];
        for (text, expected) in cases {
            let err = format!("{:#}", parse(text).unwrap_err());
            assert!(err.contains(expected), "{text}\n=> {err}");
        }
    }
}
