//! The diagnostics server: makes this process attachable by `eptrace` and `dotnet-trace`.
//!
//! [`start_server`] listens on `$TMPDIR/dotnet-diagnostic-{pid}-{key}-socket` (on Windows
//! the named pipe `\\.\pipe\dotnet-diagnostic-{pid}`), as a .NET runtime does; one
//! thread reads every client's command (`accept`), and each whole command is answered on
//! a thread of its own:
//! `CollectTracing` (1–6) starts a session whose trace streams back on that connection
//! until `StopTracing` or the client hanging up; `ProcessInfo` (1–3) describes the
//! process; `ResumeRuntime` releases a startup suspended on a reverse port.
//!
//! The server runs only when asked, in one of two ways and no other: the program calls
//! [`start_server`], or its environment says so when the process starts
//! (`EVENTPIPE_ENABLE_DIAGNOSTICS=1`, or reverse ports in `DOTNET_DiagnosticPorts`), as a
//! .NET runtime reads its environment at start-up. The environment is read once, before
//! `main` (a constructor: `.init_array` on Linux, `__mod_init_func` on macOS, `.CRT$XCU` on
//! Windows), so a suspend port holds the program before it runs any of its own code.
//! Declaring, registering or writing events never starts it.

mod accept;
mod process;
mod reverse;
mod server;
mod streaming;

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use eventpipe_ipc::transport;

pub use process::RUNTIME_NAME;
pub use reverse::SUSPEND_TIMEOUT_VAR;

pub use eventpipe_core::server::{environment_asks, ENABLE_VAR, PORTS_VAR};

/// The running diagnostics server of this process.
#[derive(Debug)]
pub struct DiagnosticServer {
    socket: PathBuf,
}

impl DiagnosticServer {
    /// The socket (on Windows, the pipe) clients connect to.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// Sessions started over IPC that are still running.
    pub fn running_sessions(&self) -> usize {
        streaming::running()
    }
}

/// Starts the process's diagnostics server (once; later calls return the same server).
/// If `DOTNET_DiagnosticPorts` names suspend ports, this waits until a tool resumes the
/// process on each of them (at most `EVENTPIPE_SUSPEND_TIMEOUT_MS`, default 30 s).
pub fn start_server() -> Result<&'static DiagnosticServer, crate::Error> {
    static SERVER: OnceLock<Result<DiagnosticServer, Arc<eventpipe_ipc::Error>>> = OnceLock::new();
    let server = SERVER.get_or_init(|| {
        let started = listen().map_err(Arc::new);
        if started.is_ok() {
            if let Some(ports) = std::env::var(PORTS_VAR).ok().filter(|v| !v.is_empty()) {
                reverse::start(reverse::parse_ports(&ports));
            }
        }
        started
    });
    if server.is_ok() {
        crate::counters::runtime::register();
    }
    server
        .as_ref()
        .map_err(|e| crate::Error::Diagnostics(Arc::clone(e)))
}

fn listen() -> Result<DiagnosticServer, eventpipe_ipc::Error> {
    let pid = std::process::id();
    let key = transport::start_time(pid).unwrap_or(0);
    let socket = transport::socket_path(&transport::socket_dir(), pid, key);
    let listener = transport::listen_private(&socket)?;
    remove_at_exit(&socket);
    std::thread::Builder::new()
        .name("eventpipe-diagnostics".into())
        .spawn(move || accept::run(listener))
        .map_err(|source| eventpipe_ipc::Error::Io {
            what: "starting the diagnostics thread".into(),
            source,
        })?;
    Ok(DiagnosticServer { socket })
}

/// Makes a write to a connection whose client has gone an error rather than a SIGPIPE
/// that kills the host: macOS has no `MSG_NOSIGNAL`, so its sockets say so once
/// (`SO_NOSIGPIPE`); Linux sends with `MSG_NOSIGNAL`, and Windows has no such signal.
pub(crate) fn no_sigpipe(stream: &eventpipe_ipc::transport::Stream) -> std::io::Result<()> {
    #[cfg(target_vendor = "apple")]
    {
        use std::os::fd::AsRawFd;
        let on: libc::c_int = 1;
        // SAFETY: the descriptor is the stream's open socket; `on` is a c_int of the
        // size given.
        let r = unsafe {
            libc::setsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_NOSIGPIPE,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    let _ = stream;
    Ok(())
}

static SOCKET_TO_REMOVE: OnceLock<CString> = OnceLock::new();

extern "C" fn at_exit() {
    // A program returning from `main` ends its IPC sessions properly, so the tools
    // reading them get complete traces.
    streaming::stop_all();
    #[cfg(unix)]
    if let Some(path) = SOCKET_TO_REMOVE.get() {
        // SAFETY: `path` is a valid NUL-terminated string that lives for the program.
        unsafe { libc::unlink(path.as_ptr()) };
    }
}

/// A normal exit ends the IPC sessions and removes the socket, as .NET does; a killed
/// process leaves the socket behind, and discovery recognises it as stale. (A named pipe
/// goes with the process.)
fn remove_at_exit(socket: &Path) {
    let bytes = socket.as_os_str().as_encoded_bytes();
    if let Ok(path) = CString::new(bytes) {
        if SOCKET_TO_REMOVE.set(path).is_ok() {
            // SAFETY: `at_exit` is an extern "C" fn that cannot unwind (it only calls code
            // that reports failures as values) and uses only statics.
            unsafe { libc::atexit(at_exit) };
        }
    }
}

/// Runs [`start_from_environment`] when the process starts, before `main`: the loader
/// calls every function in the platform's constructor section once the C library is
/// ready (the environment is readable then). A constructor, rather than a check on some
/// first use, so that the environment alone decides, at the same point in every program.
#[used]
#[cfg_attr(
    any(target_os = "linux", target_os = "android", target_os = "freebsd"),
    link_section = ".init_array"
)]
#[cfg_attr(target_vendor = "apple", link_section = "__DATA,__mod_init_func")]
#[cfg_attr(windows, link_section = ".CRT$XCU")]
static START_FROM_ENVIRONMENT: extern "C" fn() = start_from_environment;

/// Starts the server if [`environment_asks`]. Never panics (it runs outside `main`, where a
/// panic would abort): a failure is reported on stderr and the program runs unserved.
extern "C" fn start_from_environment() {
    eventpipe_core::server::note_runtime_linked();
    if !environment_asks() {
        return;
    }
    if let Err(e) = start_server() {
        use std::io::Write;
        let mut line = format!("eventpipe: {e}");
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            line.push_str(&format!(": {c}"));
            cause = c.source();
        }
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}
