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
use serde::Deserialize;

use crate::collect::Profile;

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
    /// Where profiles wait while the server does not take them.
    pub(crate) queue_folder: Option<PathBuf>,
    /// At most this many MiB wait; beyond it the oldest profiles are dropped (and counted).
    #[serde(default = "queue_mb")]
    pub(crate) queue_max_mb: u64,
    /// At most this many profiles wait; beyond it the oldest are dropped (and counted).
    #[serde(default = "queue_profiles")]
    pub(crate) queue_max_profiles: usize,
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
            queue_folder: None,
            queue_max_mb: 256,
            queue_max_profiles: 100_000,
        }
    }
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
}

/// Pyroscope's two ingestion endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PyroscopeApi {
    #[default]
    Push,
    Ingest,
}

fn ten() -> f64 {
    10.0
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
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            enabled: true,
            interval_seconds: 5.0,
            counters: Vec::new(),
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
    pub(crate) fn accepts(&self, process: &super::processes::Process) -> bool {
        self.name.as_ref().is_none_or(|n| *n == process.name)
            && self.runtime.is_none_or(|r| Some(r) == process.kind)
            && self
                .command_line
                .as_ref()
                .is_none_or(|c| process.command_line.contains(c.as_str()))
    }
}

/// The two kinds of target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RuntimeKind {
    Rust,
    Dotnet,
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
}

fn thirty() -> f64 {
    30.0
}

impl Action {
    pub(crate) fn name_template(&self) -> Option<&str> {
        match self {
            Action::Trace { name, .. } | Action::Gcdump { name } | Action::Heap { name } => {
                name.as_deref()
            }
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
        crate::agent::auth::parse_hash(key).with_context(|| format!("api_keys: `{key}`"))?;
    }
    let interval = s.metrics.interval_seconds;
    if !(1.0..=3600.0).contains(&interval) {
        bail!("metrics.interval_seconds is {interval}: it must be between 1 and 3600");
    }
    for spec in &s.metrics.counters {
        crate::counters::parse_counter_specs(spec)
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
                eventpipe::ProviderConfig::parse(spec)
                    .with_context(|| format!("{at}: provider `{spec}`"))?;
            }
            if !(*duration_seconds > 0.0 && *duration_seconds <= 86_400.0) {
                bail!("{at}: duration_seconds must be above 0 and at most 86400");
            }
        }
        if let Some(template) = rule.action.name_template() {
            crate::agent::egress::check_template(template).with_context(|| at.clone())?;
        }
    }
    Ok(())
}

/// A profile by the name `eptrace collect --profile` takes.
pub(crate) fn parse_profile(name: &str) -> Result<Profile> {
    <Profile as clap::ValueEnum>::from_str(name, true).map_err(|_| {
        let known: Vec<String> = <Profile as clap::ValueEnum>::value_variants()
            .iter()
            .filter_map(|p| clap::ValueEnum::to_possible_value(p).map(|v| v.get_name().to_owned()))
            .collect();
        anyhow::anyhow!("unknown profile `{name}` (known: {})", known.join(", "))
    })
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
            "#,
        )
        .unwrap();
        let p = &s.profiling;
        assert_eq!(p.api, PyroscopeApi::Ingest);
        assert_eq!(p.headers["X-Scope-OrgID"], "team-a");
        assert_eq!(
            (p.period_seconds, p.rate_hz, p.allocations),
            (15.0, 49, false)
        );
        assert_eq!(p.queue_folder(), PathBuf::from("/var/lib/q"));
        assert_eq!((p.queue_max_mb, p.queue_max_profiles), (8, 10));
        assert_eq!(p.filter.name.as_deref(), Some("svc"));
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
        ];
        for (text, expected) in cases {
            let err = format!("{:#}", parse(text).unwrap_err());
            assert!(err.contains(expected), "{text}\n=> {err}");
        }
    }
}
