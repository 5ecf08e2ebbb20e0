//! # eventpipe
//!
//! EventPipe for Rust: a program declares providers and events, sessions choose which to
//! record, and events flow through per-thread buffers to a nettrace file, any byte stream or
//! an in-process listener.
//!
//! Declaring and writing events (and counters) is `eventpipe_core`'s, re-exported here; a
//! library that only writes events can depend on the core alone. This crate adds sessions,
//! their drain threads, the trace output, rundown and the diagnostics server.
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

// The write path's modules, from the core, under the names the runtime's modules use.
use eventpipe_core::runtime::registry;

pub use eventpipe_core::{clock, counters, current_os_tid, define_event, write_event};
pub use eventpipe_core::{
    BufferingMode, Counter, CounterInfo, DeclaredType, EnableChange, EventDescriptor, EventFields,
    FieldKind, FieldSpec, FloatCounter, Gauge, Guid, Histogram, Level, ObservedCounter,
    PayloadField, PayloadWriter, Provider, ProviderConfig, SessionStats, TypedEvent,
    UncheckedPayloadWriter, UpDownCounter, MAX_SESSIONS,
};

mod config;
pub mod diagnostics;
mod drain;
mod error;
mod listener;
mod metadata;
pub mod rundown;
mod session;
mod stack;

pub use config::{ListenerCallback, Output, SessionConfig, MIN_BUDGET};
pub use error::Error;
pub use session::Session;
