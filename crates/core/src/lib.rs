//! # eventpipe-core
//!
//! What instrumented code needs of EventPipe and nothing more: providers and events
//! ([`define_event!`], [`write_event!`]), payload encoding, counters, the clock, and the
//! per-thread write path that appends records to a session's buffers. No trace format, no
//! IPC, no drain, no unwinder: a library that only declares and writes events depends on
//! this crate alone. The runtime, `eventpipe`, builds sessions, their drain threads, the
//! trace output and the diagnostics server on top of it, and re-exports all of this.
//!
//! Inside, each module depends only on those before it, in the order of the data flow:
//! `sync`, `clock`, `guid` and `record` (a buffered record's layout) at the bottom;
//! `provider` (what is declared), `payload` (how values encode), `config` (what a session
//! asks), `stack`; `buffer` (one thread's records) → `threads` (a thread's buffers in a
//! session) → `manager` (a session's one lock and budget) → `recording` (what a session's
//! writers and drain share) → `registry` (the sessions, and the events they enable) →
//! `writer` (the per-thread write path) → `event` (what instrumented code calls);
//! `counters` on top. The runtime reaches the write path's internals through one documented
//! module, [`runtime`]; [`server`] tells libraries whether a diagnostics server can run.
//!
//! ```
//! use eventpipe_core::{define_event, write_event, Level, Provider};
//!
//! static APP: Provider = Provider::new("MyApp");
//! define_event! {
//!     static REQUEST = APP { id: 1, name: "Request", level: Level::Informational, keywords: 0 }
//!         (path: &str, status: u32);
//! }
//!
//! // One relaxed load and a branch while no session records it.
//! write_event!(REQUEST, "/index.html", 200);
//! ```

mod buffer;
#[cfg(not(eventpipe_loom))]
pub mod clock;
#[cfg(not(eventpipe_loom))]
mod config;
#[cfg(not(eventpipe_loom))]
pub mod counters;
#[cfg(not(eventpipe_loom))]
mod event;
#[cfg(not(eventpipe_loom))]
mod guid;
mod manager;
#[cfg(not(eventpipe_loom))]
mod payload;
#[cfg(not(eventpipe_loom))]
mod payload_check;
#[cfg(not(eventpipe_loom))]
mod payload_writer;

mod platform;
#[cfg(not(eventpipe_loom))]
mod provider;
mod record;
#[cfg(not(eventpipe_loom))]
mod recording;
#[cfg(not(eventpipe_loom))]
mod registry;
#[cfg(not(eventpipe_loom))]
pub mod runtime;
#[cfg(not(eventpipe_loom))]
pub mod server;
#[cfg(not(eventpipe_loom))]
mod stack;
mod sync;
mod threads;
#[cfg(not(eventpipe_loom))]
mod writer;

#[cfg(not(eventpipe_loom))]
pub use config::{BufferingMode, ProviderConfig};
#[cfg(not(eventpipe_loom))]
pub use counters::{
    Counter, CounterInfo, FloatCounter, Gauge, Histogram, ObservedCounter, UpDownCounter,
};
#[cfg(not(eventpipe_loom))]
pub use event::TypedEvent;
#[cfg(not(eventpipe_loom))]
pub use guid::{event_source_guid, Guid};
#[cfg(not(eventpipe_loom))]
pub use payload::{DeclaredType, EventFields, PayloadField};
#[cfg(not(eventpipe_loom))]
pub use payload_writer::{PayloadWriter, UncheckedPayloadWriter};
#[cfg(not(eventpipe_loom))]
pub use provider::{EnableChange, EventDescriptor, FieldKind, FieldSpec, Level, Provider};
#[cfg(not(eventpipe_loom))]
pub use recording::SessionStats;
#[cfg(not(eventpipe_loom))]
pub use registry::MAX_SESSIONS;
#[cfg(not(eventpipe_loom))]
pub use writer::current_os_tid;

#[cfg(eventpipe_loom)]
#[doc(hidden)]
pub mod loom_model;

/// A provider spec that does not parse, or a session with no free slot. The runtime
/// (`eventpipe::Error`) adds its own failures: the output, its threads, the server.
///
/// `Display` and `Error` are written out rather than derived: the core keeps proc-macro
/// crates out of the build of every library that instruments itself.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A provider spec (`Name[:Keywords[:Level[:FilterArgs]]]`) did not parse.
    InvalidProviderSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// All session slots are taken.
    TooManySessions(usize),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::InvalidProviderSpec { spec, reason } => {
                write!(f, "invalid provider spec `{spec}`: {reason}")
            }
            Error::TooManySessions(n) => write!(f, "all {n} session slots are in use"),
        }
    }
}

impl std::error::Error for Error {}

#[doc(hidden)]
pub mod __private {
    //! Everything the macros call, and nothing else; not part of the API.

    #[cfg(not(eventpipe_loom))]
    pub use crate::{EventDescriptor, FieldSpec, PayloadField, TypedEvent};

    /// The single element of `values`, or 0.
    pub const fn or_zero(values: &[u8]) -> u8 {
        if values.is_empty() {
            0
        } else {
            values[0]
        }
    }
}
