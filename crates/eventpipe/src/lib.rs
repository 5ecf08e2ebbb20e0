//! # eventpipe
//!
//! EventPipe for Rust: a program declares providers and events, sessions choose which to
//! record, and events flow through per-thread buffers to a nettrace file, any byte stream or
//! an in-process listener.
//!
//! ## Data flow
//!
//! ```text
//! write_event!(EVENT, ...)          one relaxed load of EVENT's session mask; then per session:
//!   └─▶ writer (thread-local)       stamp, append to this thread's buffer (no lock, SPSC)
//!         └─▶ Buffer ──▶ drain thread (one per session; wakes every flush interval or when
//!                         a Block-mode writer waits): snapshot under the session's one lock,
//!                         read, merge by timestamp, free buffers, reclaim exited threads
//!               └─▶ nettrace::write::TraceWriter ─▶ file │ io::Write │ listener thread
//! ```
//!
//! ## Example
//!
//! ```
//! use eventpipe::{define_event, write_event, Level, Output, Provider, ProviderConfig, Session, SessionConfig};
//!
//! static APP: Provider = Provider::new("MyApp");
//! define_event! {
//!     static REQUEST = APP { id: 1, name: "Request", level: Level::Informational, keywords: 0 }
//!         (path: &str, status: u32);
//! }
//!
//! let path = std::env::temp_dir().join(format!("doc-{}.nettrace", std::process::id()));
//! let session = Session::start(SessionConfig::new(
//!     vec![ProviderConfig::new("MyApp")],
//!     Output::File(path.clone()),
//! ))?;
//! write_event!(REQUEST, "/index.html", 200u32);
//! let stats = session.stop()?;
//! assert_eq!(stats.events_written, 1);
//! # std::fs::remove_file(path).ok();
//! # Ok::<(), eventpipe::Error>(())
//! ```

mod buffer;
#[cfg(not(eventpipe_loom))]
pub mod clock;
#[cfg(not(eventpipe_loom))]
mod config;
#[cfg(not(eventpipe_loom))]
pub mod counters;
#[cfg(not(eventpipe_loom))]
pub mod diagnostics;
#[cfg(not(eventpipe_loom))]
mod drain;
#[cfg(not(eventpipe_loom))]
mod guid;
#[cfg(not(eventpipe_loom))]
mod listener;
mod manager;
#[cfg(not(eventpipe_loom))]
mod payload;
#[cfg(not(eventpipe_loom))]
mod provider;
#[cfg(not(eventpipe_loom))]
mod registry;
#[cfg(not(eventpipe_loom))]
pub mod rundown;
#[cfg(not(eventpipe_loom))]
mod session;
#[cfg(not(eventpipe_loom))]
mod stack;
mod sync;
mod threads;
#[cfg(not(eventpipe_loom))]
mod writer;

#[cfg(not(eventpipe_loom))]
pub use config::{
    BufferingMode, ListenerCallback, Output, ProviderConfig, SessionConfig, MIN_BUDGET,
};
#[cfg(not(eventpipe_loom))]
pub use counters::{
    Counter, CounterInfo, FloatCounter, Gauge, Histogram, ObservedCounter, UpDownCounter,
};
#[cfg(not(eventpipe_loom))]
pub use payload::{EventFields, FieldType, PayloadField, PayloadWriter};
#[cfg(not(eventpipe_loom))]
pub use provider::{EnableChange, Event, EventDescriptor, FieldKind, FieldSpec, Level, Provider};
#[cfg(not(eventpipe_loom))]
pub use registry::MAX_SESSIONS;
#[cfg(not(eventpipe_loom))]
pub use session::{Session, SessionStats};

#[cfg(eventpipe_loom)]
#[doc(hidden)]
pub mod loom_model;

/// What can go wrong starting, running or stopping a session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The session configuration is invalid.
    #[error("invalid session configuration: {0}")]
    InvalidConfig(String),
    /// A provider spec (`Name[:Keywords[:Level[:FilterArgs]]]`) did not parse.
    #[error("invalid provider spec `{spec}`: {reason}")]
    InvalidProviderSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// All session slots are taken.
    #[error("all {0} session slots are in use")]
    TooManySessions(usize),
    /// The output failed; the session ended.
    #[error("session output failed: {0}")]
    Output(String),
    /// The drain thread panicked.
    #[error("the session's drain thread panicked")]
    DrainPanicked,
    /// The diagnostics server could not start.
    #[error("diagnostics server: {0}")]
    Diagnostics(String),
}

#[doc(hidden)]
pub mod __private {
    //! Everything the macros call, and nothing else; not part of the API.

    #[cfg(not(eventpipe_loom))]
    pub use crate::{Event, EventDescriptor, FieldSpec, PayloadField};

    /// The single element of `values`, or 0.
    pub const fn or_zero(values: &[u8]) -> u8 {
        if values.is_empty() {
            0
        } else {
            values[0]
        }
    }
}
