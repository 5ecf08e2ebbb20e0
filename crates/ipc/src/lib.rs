//! The .NET diagnostics IPC protocol, spoken by both sides.
//!
//! A diagnostics client (such as `eptrace` or `dotnet-trace`) connects to a process's Unix
//! domain socket (a named pipe on Windows), sends one command message and reads one response; a `CollectTracing`
//! response is followed by the session's nettrace stream on the same connection. This
//! crate holds what both ends share:
//!
//! - [`header`]: the 20-byte `DOTNET_IPC_V1` message header and the command codes;
//! - [`wire`]: the payload primitives (little-endian integers, length-prefixed UTF-16
//!   strings), decoded with hard bounds so a hostile peer gets an error, never a panic or
//!   an oversized allocation;
//! - [`command`]: the commands and responses (`CollectTracing` 1–6, `StopTracing`,
//!   `ProcessInfo` 1–3, `ResumeRuntime`) and the server's error codes;
//! - [`advertise`]: the `ADVR_V1` greeting of reverse ("connect") diagnostic ports;
//! - [`transport`]: endpoint naming (`dotnet-diagnostic-{pid}-{key}-socket`, on Windows the
//!   pipe `dotnet-diagnostic-{pid}`), discovery, owner-only listening sockets, and the
//!   connection type of each platform;
//! - [`client`]: a blocking client for everything above.
//!
//! The server side lives in the `eventpipe` crate, which owns the sessions it starts.
// Unsafe code only where a platform call needs it (`transport::windows`, the macOS key).
#![deny(unsafe_code)]

pub mod advertise;
pub mod client;
pub mod command;
mod error;
pub mod header;
pub mod transport;
pub mod wire;

pub use client::{Client, Connection, ProcessInfo, ReversePort, TraceStream};
pub use command::{CollectTracing, EventFilter, ProviderRequest, Request, ServerError};
pub use error::Error;
pub use header::{Header, MAGIC};
