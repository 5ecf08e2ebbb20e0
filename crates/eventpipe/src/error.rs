//! What can go wrong starting, running or stopping a session, or starting the diagnostics
//! server: the core's errors (a provider spec, the session slots) and the runtime's own.
//! Each message describes this layer; the cause, when there is one, is its `source()`.

use std::path::PathBuf;
use std::sync::Arc;

/// A session or the diagnostics server failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A provider spec did not parse, or all session slots are in use.
    #[error(transparent)]
    Core(#[from] eventpipe_core::Error),
    /// The session configuration is invalid.
    #[error("invalid session configuration: {0}")]
    InvalidConfig(String),
    /// The trace file could not be created.
    #[error("cannot create the trace file {}", path.display())]
    CreateTrace {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A thread the session needs could not be started.
    #[error("cannot start the session's {0} thread")]
    SpawnThread(&'static str, #[source] std::io::Error),
    /// Writing the trace failed; the session ended.
    #[error("writing the trace failed")]
    Write(#[source] nettrace::Error),
    /// Flushing the finished trace failed.
    #[error("flushing the trace failed")]
    Flush(#[source] std::io::Error),
    /// A write after the trace was finished (the drain's own mistake).
    #[error("the trace was already finished")]
    Finished,
    /// The drain thread panicked.
    #[error("the session's drain thread panicked")]
    DrainPanicked,
    /// The diagnostics server could not start.
    #[error("the diagnostics server could not start")]
    Diagnostics(#[source] Arc<eventpipe_ipc::Error>),
}
