//! Session configuration: which providers, how much memory, what to do when it runs out,
//! and where the trace goes.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::Error;
use crate::{BufferingMode, ProviderConfig};

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
