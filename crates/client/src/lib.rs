//! Sessions against any process that speaks the .NET diagnostics protocol (a .NET runtime,
//! or a Rust program running `eventpipe`'s diagnostics server): what `dotnet-trace`,
//! `dotnet-counters` and `dotnet-monitor` build on in .NET
//! (`Microsoft.Diagnostics.NETCore.Client`), here for Rust code.
//!
//! - [`discover`]: the attachable processes ([`discover::list`]), who one is
//!   ([`discover::examine`]: its name, command line and [`Runtime`]), a pid by name.
//! - [`Target`]: a process to trace, attached by pid or name, or launched suspended on a
//!   reverse diagnostics port and resumed once its session runs, so no early event is
//!   missed; it starts and stops sessions and tells when the process has exited.
//! - [`TraceSession`]: a session's stream read on a thread of its own, and the one way a
//!   session ends: stop, a grace period ([`STOP_GRACE`]) for the stream to end, then cut.
//! - [`request`]: what a trace asks for (presets like `dotnet-trace --profile`, provider
//!   specs, buffering, format) made into the request a runtime takes.
//! - [`capture`]: sessions that run to an end of their own: a .NET heap dump
//!   ([`capture::gcdump`]), a Rust program's live heap ([`capture::heap`]), a counters
//!   session ([`capture::counters`]).
//!
//! The wire protocol itself (messages, the transport, a connection-level client) is
//! `eventpipe-ipc`'s; this crate is the layer a tool uses.
//!
//! ```no_run
//! use eventpipe_client::{discover, Target, TargetSpec};
//!
//! for process in discover::list()? {
//!     match process.examined {
//!         Ok(p) => println!("{} {} {}", p.pid, p.name, p.runtime),
//!         Err(why) => println!("{} cannot be attached to: {why}", process.pid),
//!     }
//! }
//! let mut target = Target::open(&TargetSpec::Name("my-service".into()))?;
//! println!("tracing {} ({})", target.name(), target.pid());
//! # Ok::<(), eventpipe_client::Error>(())
//! ```
//!
//! ## Parity with `DiagnosticsClient`
//!
//! | `DiagnosticsClient` | here |
//! |---|---|
//! | `GetPublishedProcesses` | [`discover::list`] |
//! | `GetProcessInfo` | [`Target::process_info`], [`discover::examine`] |
//! | `StartEventPipeSession` | [`Target::collect`] (a [`TraceStream`] to read) |
//! | `EventPipeSession.Stop` | [`Target::stop`], [`TraceSession::stop`] then [`TraceSession::wait_within`] |
//! | `ResumeRuntime` | [`Target::resume`] (launched targets) |
//! | `DiagnosticsClientConnector.FromDiagnosticPort` | [`TargetSpec::Launch`] (a reverse port of its own) |
//! | `WriteDump`, `AttachProfiler`, `SetStartupProfiler`, `SetEnvironmentVariable`, `GetProcessEnvironment`, `ApplyStartupHook`, `EnablePerfMap` | not yet: `eventpipe-ipc` does not speak these commands |
#![cfg_attr(not(unix), allow(unused))]

pub mod capture;
pub mod discover;
mod error;
pub mod request;
mod session;
mod target;

pub use discover::Runtime;
pub use error::{with_causes, Error, ExamineError};
pub use eventpipe_ipc::{CollectTracing, ProcessInfo, ProviderRequest, TraceStream};
pub use session::{TraceSession, STOP_GRACE};
pub use target::{Target, TargetSpec, CONNECT_TIMEOUT};
