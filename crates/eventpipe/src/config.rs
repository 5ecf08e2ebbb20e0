//! Session configuration: which providers, how much memory, what to do when it runs out,
//! and where the trace goes.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::provider::Level;
use crate::Error;

/// One provider a session enables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// Provider name (matched case-insensitively).
    pub name: String,
    /// Keyword mask; an event is recorded if it has no keywords or shares one.
    pub keywords: u64,
    /// Most verbose level recorded.
    pub level: Level,
    /// Filter arguments passed to the provider's enable callback.
    pub filter_args: Option<String>,
}

impl ProviderConfig {
    /// All keywords at `Verbose` level.
    pub fn new(name: impl Into<String>) -> Self {
        ProviderConfig {
            name: name.into(),
            keywords: u64::MAX,
            level: Level::Verbose,
            filter_args: None,
        }
    }

    /// Parses `Name[:Keywords[:Level[:FilterArgs]]]`, the dotnet-trace syntax. Keywords are
    /// hex (`0x` optional) or `*`; the level is 0-5 or a name (`informational`, ...).
    pub fn parse(spec: &str) -> Result<Self, Error> {
        let bad = |why: String| Error::InvalidProviderSpec {
            spec: spec.to_string(),
            reason: why,
        };
        let mut parts = spec.splitn(4, ':');
        let name = parts.next().unwrap_or("").trim();
        if name.is_empty() {
            return Err(bad("the provider name is empty".into()));
        }
        let mut config = ProviderConfig::new(name);
        if let Some(kw) = parts.next().map(str::trim).filter(|k| !k.is_empty()) {
            config.keywords = if kw == "*" {
                u64::MAX
            } else {
                let hex = kw
                    .strip_prefix("0x")
                    .or_else(|| kw.strip_prefix("0X"))
                    .unwrap_or(kw);
                u64::from_str_radix(hex, 16)
                    .map_err(|_| bad(format!("keywords `{kw}` are not a hex number")))?
            };
        }
        if let Some(level) = parts.next().map(str::trim).filter(|l| !l.is_empty()) {
            config.level = match level.to_ascii_lowercase().as_str() {
                "0" | "logalways" => Level::LogAlways,
                "1" | "critical" => Level::Critical,
                "2" | "error" => Level::Error,
                "3" | "warning" => Level::Warning,
                "4" | "informational" => Level::Informational,
                "5" | "verbose" => Level::Verbose,
                _ => return Err(bad(format!("level `{level}` is not 0-5 or a level name"))),
            };
        }
        config.filter_args = parts.next().map(str::to_string);
        Ok(config)
    }

    /// Whether an event with these attributes is recorded under this configuration.
    pub(crate) fn enables(&self, level: Level, keywords: u64) -> bool {
        let level_ok =
            level == Level::LogAlways || level <= self.level || self.level == Level::LogAlways;
        let keywords_ok = keywords == 0 || keywords & self.keywords != 0;
        level_ok && keywords_ok
    }
}

/// What a writer does when the session's buffer budget is exhausted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferingMode {
    /// Drop the event and count it; memory stays bounded and writers never wait.
    Drop,
    /// Park until the drain frees a buffer; no event is lost unless the session ends.
    Block,
}

/// Receives each event of a listener session, decoded, on the listener's own thread.
pub type ListenerCallback = Box<dyn FnMut(&nettrace::Event<'_>) + Send>;

/// Where a session's trace goes.
pub enum Output {
    /// A nettrace file (created or truncated).
    File(PathBuf),
    /// Any byte stream (a socket, a pipe, a Vec).
    Stream(Box<dyn Write + Send>),
    /// An in-process listener: events are decoded and passed to the callback on a thread of
    /// their own, like .NET's EventListener.
    Listener(ListenerCallback),
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Output::File(p) => f.debug_tuple("File").field(p).finish(),
            Output::Stream(_) => f.write_str("Stream(..)"),
            Output::Listener(_) => f.write_str("Listener(..)"),
        }
    }
}

/// Everything that defines a session.
#[derive(Debug)]
pub struct SessionConfig {
    /// Providers to enable.
    pub providers: Vec<ProviderConfig>,
    /// Memory budget for buffered events, in bytes.
    pub buffer_budget: usize,
    /// What happens when the budget is exhausted.
    pub mode: BufferingMode,
    /// Where the trace goes.
    pub output: Output,
    /// NetTrace V5 (every TraceEvent since 2019 reads it) or V6.
    pub format: nettrace::FormatVersion,
    /// How often the drain thread wakes to move events to the output.
    pub flush_interval: Duration,
    /// How often a sequence point is written.
    pub sequence_point_interval: Duration,
    /// Whether to write rundown events when the session ends.
    pub rundown: bool,
    /// Whether each event carries the writing thread's stack.
    pub stacks: bool,
}

impl SessionConfig {
    /// A session with `providers` writing to `output`: 64 MiB budget, Drop mode, V5,
    /// 100 ms flush interval, a sequence point per second, rundown on.
    pub fn new(providers: Vec<ProviderConfig>, output: Output) -> Self {
        SessionConfig {
            providers,
            buffer_budget: 64 << 20,
            mode: BufferingMode::Drop,
            output,
            format: nettrace::FormatVersion::V5,
            flush_interval: Duration::from_millis(100),
            sequence_point_interval: Duration::from_secs(1),
            rundown: true,
            stacks: false,
        }
    }

    /// Sets the buffer budget in bytes.
    pub fn buffer_budget(mut self, bytes: usize) -> Self {
        self.buffer_budget = bytes;
        self
    }

    /// Sets the buffering mode.
    pub fn mode(mut self, mode: BufferingMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the format version.
    pub fn format(mut self, format: nettrace::FormatVersion) -> Self {
        self.format = format;
        self
    }

    /// Sets the flush interval.
    pub fn flush_interval(mut self, interval: Duration) -> Self {
        self.flush_interval = interval;
        self
    }

    /// Sets whether events carry the writing thread's stack.
    pub fn stacks(mut self, stacks: bool) -> Self {
        self.stacks = stacks;
        self
    }

    /// Sets whether rundown events are written at the end.
    pub fn rundown(mut self, rundown: bool) -> Self {
        self.rundown = rundown;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.providers.is_empty() {
            return Err(Error::InvalidConfig(
                "a session needs at least one provider".into(),
            ));
        }
        if self.buffer_budget < MIN_BUDGET {
            return Err(Error::InvalidConfig(format!(
                "a buffer budget of {} bytes is below the minimum of {MIN_BUDGET}",
                self.buffer_budget
            )));
        }
        if self.flush_interval.is_zero() {
            return Err(Error::InvalidConfig(
                "the flush interval must be positive".into(),
            ));
        }
        if self.format == nettrace::FormatVersion::V4 {
            return Err(Error::InvalidConfig(
                "sessions write NetTrace V5 or V6".into(),
            ));
        }
        Ok(())
    }

    /// Size of each per-thread buffer: a sixteenth of the budget, between 4 KiB and 64 KiB.
    pub(crate) fn buffer_size(&self) -> usize {
        (self.buffer_budget / 16).clamp(4 << 10, 64 << 10)
    }
}

/// The smallest budget a session accepts.
pub const MIN_BUDGET: usize = 64 << 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_specs_parse_like_dotnet_trace() {
        let c = ProviderConfig::parse("Microsoft-Windows-DotNETRuntime:0x1:4").unwrap();
        assert_eq!(
            (c.name.as_str(), c.keywords, c.level),
            ("Microsoft-Windows-DotNETRuntime", 1, Level::Informational)
        );
        let c = ProviderConfig::parse("Demo").unwrap();
        assert_eq!(
            (c.keywords, c.level, c.filter_args),
            (u64::MAX, Level::Verbose, None)
        );
        let c = ProviderConfig::parse("Demo:*:verbose:Interval=1;Mode=x:y").unwrap();
        assert_eq!(c.filter_args.as_deref(), Some("Interval=1;Mode=x:y"));
        for bad in ["", ":1", "Demo:xyz", "Demo:1:9", "Demo:1:loud"] {
            let err = ProviderConfig::parse(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("`{bad}`")), "{err}");
        }
    }

    #[test]
    fn level_and_keyword_filtering() {
        let c = ProviderConfig {
            keywords: 0b10,
            level: Level::Warning,
            ..ProviderConfig::new("P")
        };
        assert!(c.enables(Level::Error, 0b10));
        assert!(c.enables(Level::Warning, 0));
        assert!(!c.enables(Level::Informational, 0b10));
        assert!(!c.enables(Level::Error, 0b01));
        assert!(c.enables(Level::LogAlways, 0b11));
    }
}
