//! What the core knows of the diagnostics server, which the `eventpipe` runtime runs: the
//! environment that asks for it at start-up, and whether the runtime is in this program.
//!
//! A library that instruments itself (a profiler, a `tracing` layer, a `metrics` bridge)
//! depends on this crate alone, so a program can use one without linking the runtime: it
//! links a crate only if the program names something of it. Such a program has no server,
//! whatever its environment says, and nobody can attach to it. That setup would look fine
//! and record nothing, so the libraries' set-up calls ([`warn_if_unserved`]) say so on
//! stderr, once, when the environment asks for a server that cannot start.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

/// The environment variable that starts the server at process start-up, in programs that
/// do not call `eventpipe::diagnostics::start_server` (`1` starts it).
pub const ENABLE_VAR: &str = "EVENTPIPE_ENABLE_DIAGNOSTICS";

/// The environment variable naming reverse diagnostic ports (`DOTNET_DiagnosticPorts`,
/// as a .NET runtime reads it): the process connects out to each.
pub const PORTS_VAR: &str = "DOTNET_DiagnosticPorts";

/// Set by the runtime's start-up constructor, which runs before `main` in every program
/// that links it. Relaxed suffices: it is written before `main` on the main thread, and
/// read after.
static RUNTIME_LINKED: AtomicBool = AtomicBool::new(false);

/// Whether the environment asks for the server: [`ENABLE_VAR`] is `1`, or [`PORTS_VAR`]
/// names ports.
pub fn environment_asks() -> bool {
    let enabled = std::env::var_os(ENABLE_VAR).is_some_and(|v| v == "1");
    let ports = std::env::var_os(PORTS_VAR).is_some_and(|v| !v.is_empty());
    enabled || ports
}

/// Whether the `eventpipe` runtime is linked into this program (its start-up constructor
/// ran). Meaningful from `main` on.
pub fn runtime_linked() -> bool {
    RUNTIME_LINKED.load(Ordering::Relaxed)
}

/// Records that the runtime is linked. Called by the runtime's start-up constructor; not
/// for instrumented code.
#[doc(hidden)]
pub fn note_runtime_linked() {
    RUNTIME_LINKED.store(true, Ordering::Relaxed);
}

/// The warning [`warn_if_unserved`] prints, or `None` when there is nothing to warn of:
/// the environment does not ask for a server, or the runtime is here to start it.
pub fn unserved_warning(library: &str) -> Option<String> {
    if !environment_asks() || runtime_linked() {
        return None;
    }
    Some(format!(
        "eventpipe: the environment asks for the diagnostics server ({ENABLE_VAR} or \
         {PORTS_VAR}), but this program does not link the `eventpipe` runtime that runs it \
         ({library} needs only `eventpipe-core`), so nothing can attach to it. Add `eventpipe` \
         to its dependencies and call `eventpipe::diagnostics::start_server()` at start-up \
         (or write `extern crate eventpipe;` in its main file to let the environment start it)."
    ))
}

/// Prints [`unserved_warning`] to stderr, at most once per process. The libraries built on
/// the core call it from their set-up (`eventpipe_profiler::cpu::register`,
/// `EventPipeLayer::new`, ...), so a program that cannot be attached to says why instead
/// of recording nothing.
pub fn warn_if_unserved(library: &str) {
    static WARNED: Once = Once::new();
    if let Some(warning) = unserved_warning(library) {
        WARNED.call_once(|| {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "{warning}");
        });
    }
}
