//! The attachable processes, and who each one is.
//!
//! A process is attachable when it serves the diagnostics protocol on an endpoint of the
//! platform's naming ([`eventpipe_ipc::transport`]). Asked `ProcessInfo`, it says what it
//! runs: a .NET runtime (its version), an `eventpipe` Rust program (its product string),
//! or, for .NET Core 3.1 and older which lack the command, nothing usable.

use std::path::PathBuf;

use eventpipe_ipc::{transport, Client, ProcessInfo, ServerError};

use crate::{Error, ExamineError};

/// The product string `eventpipe`'s server reports as its runtime version.
const RUST_RUNTIME: &str = "eventpipe-rs";

/// The runtime behind a diagnostics endpoint, from what it said about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runtime {
    /// A Rust program using eventpipe; its product string.
    Rust(String),
    /// A .NET runtime; its version when it told us.
    DotNet(Option<String>),
    /// A .NET runtime too old for `ProcessInfo` (.NET Core 3.1 and earlier).
    OldDotNet,
    /// No usable answer.
    Unknown,
}

impl Runtime {
    /// The runtime that answered `info` (or failed to).
    pub fn of(info: &Result<ProcessInfo, eventpipe_ipc::Error>) -> Runtime {
        match info {
            Ok(info) => match info.runtime_version.as_deref() {
                Some(v) if v.starts_with(RUST_RUNTIME) => Runtime::Rust(v.to_string()),
                Some(v) if !v.is_empty() => Runtime::DotNet(Some(v.to_string())),
                _ => Runtime::DotNet(None),
            },
            // Only .NET Core 3.1 and older lack ProcessInfo.
            Err(eventpipe_ipc::Error::Refused(ServerError::UNKNOWN_COMMAND)) => Runtime::OldDotNet,
            Err(_) => Runtime::Unknown,
        }
    }

    /// Whether it is a Rust program.
    pub fn is_rust(&self) -> bool {
        matches!(self, Runtime::Rust(_))
    }

    /// Whether it is a .NET runtime, of any version.
    pub fn is_dotnet(&self) -> bool {
        matches!(self, Runtime::DotNet(_) | Runtime::OldDotNet)
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Runtime::Rust(v) => write!(f, "Rust ({v})"),
            Runtime::DotNet(Some(v)) => write!(f, ".NET {v}"),
            Runtime::DotNet(None) => f.write_str(".NET"),
            Runtime::OldDotNet => f.write_str(".NET (3.1 or older)"),
            Runtime::Unknown => f.write_str("unknown (did not answer)"),
        }
    }
}

/// What an attachable process says about itself.
#[derive(Debug, Clone)]
pub struct Process {
    /// Its id.
    pub pid: u32,
    /// Its name ([`process_name`]), `?` when it is gone.
    pub name: String,
    /// Its command line, as it reported it (else as the system has it).
    pub command_line: String,
    /// What it runs.
    pub runtime: Runtime,
}

/// One endpoint [`list`] found, and what came of asking its process.
#[derive(Debug)]
pub struct Listed {
    /// The process id in the endpoint's name.
    pub pid: u32,
    /// The endpoint's disambiguation key (0 where the platform has none).
    pub key: u64,
    /// The endpoint.
    pub path: PathBuf,
    /// The process, or why it cannot be attached to.
    pub examined: Result<Process, ExamineError>,
}

/// An attachable process's diagnostics endpoint: its pid, the key that tells a reused pid
/// apart (the process's start time), and where to connect.
pub use eventpipe_ipc::transport::Endpoint;

/// The attachable processes' endpoints, by pid, not yet asked who they are: a directory
/// listing, cheap enough to repeat every second; [`examine`] asks.
///
/// # Errors
/// When the endpoint directory cannot be listed.
pub fn endpoints() -> Result<Vec<Endpoint>, Error> {
    Ok(transport::discover(&transport::socket_dir())?)
}

/// Every attachable process, by pid, each asked who it is.
///
/// # Errors
/// When the endpoint directory cannot be listed.
pub fn list() -> Result<Vec<Listed>, Error> {
    let endpoints = endpoints()?;
    Ok(endpoints
        .into_iter()
        .map(|endpoint| Listed {
            examined: examine(&endpoint),
            pid: endpoint.pid,
            key: endpoint.key,
            path: endpoint.path,
        })
        .collect())
}

/// Asks the process behind `endpoint` who it is.
///
/// # Errors
/// Why it cannot be attached to: another user's process, an endpoint that refuses
/// connections, or no usable answer.
pub fn examine(endpoint: &Endpoint) -> Result<Process, ExamineError> {
    let info = Client::at(&endpoint.path).process_info();
    if let Err(eventpipe_ipc::Error::Io { source, .. }) = &info {
        match source.kind() {
            std::io::ErrorKind::PermissionDenied => {
                return Err(ExamineError::PermissionDenied {
                    path: endpoint.path.clone(),
                    uid: effective_uid(),
                })
            }
            std::io::ErrorKind::ConnectionRefused => {
                return Err(ExamineError::Refused {
                    path: endpoint.path.clone(),
                })
            }
            _ => {}
        }
    }
    let runtime = Runtime::of(&info);
    let info = match info {
        Err(source) if runtime == Runtime::Unknown => {
            return Err(ExamineError::NoAnswer { source })
        }
        other => other.ok(),
    };
    let command_line = match info {
        Some(i) if !i.command_line.is_empty() => i.command_line,
        _ => command_line(endpoint.pid).unwrap_or_default(),
    };
    Ok(Process {
        pid: endpoint.pid,
        name: process_name(endpoint.pid).unwrap_or_else(|| "?".into()),
        command_line,
        runtime,
    })
}

#[cfg(unix)]
fn effective_uid() -> u32 {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(not(unix))]
fn effective_uid() -> u32 {
    0
}

/// The kernel keeps a process's name (`comm`) to 15 bytes: a name that long which begins
/// the executable's file name is that name cut, and the file name is the one to show.
pub fn untruncated_name(comm: &str, exe_name: Option<&str>) -> String {
    const COMM_MAX: usize = 15;
    match exe_name {
        Some(exe) if comm.len() == COMM_MAX && exe.len() > COMM_MAX && exe.starts_with(comm) => {
            exe.to_string()
        }
        _ => comm.to_string(),
    }
}

/// The file name of process `pid`'s executable.
fn exe_name(pid: u32) -> Option<String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    Some(exe.file_name()?.to_string_lossy().into_owned())
}

/// Process `pid`'s name: its `comm`, or its executable's file name where the kernel cut
/// `comm` short (`mini-redis-serv` → `mini-redis-server`). `None` when it is gone (or the
/// platform has no `/proc`).
pub fn process_name(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(untruncated_name(comm.trim(), exe_name(pid).as_deref()))
}

/// Process `pid`'s command line as the system has it, arguments joined by spaces.
pub fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let text = String::from_utf8_lossy(&raw);
    Some(
        text.trim_end_matches(['\0', '\n'])
            .replace('\0', " ")
            .to_string(),
    )
}

/// The one attachable process whose `comm` or executable file name is `name`.
///
/// # Errors
/// When none is, or several are, or the endpoints cannot be listed.
pub fn pid_by_name(name: &str) -> Result<u32, Error> {
    let dir = transport::socket_dir();
    let matching: Vec<u32> = transport::discover(&dir)?
        .into_iter()
        .map(|e| e.pid)
        .filter(|&pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            comm.trim() == name || exe_name(pid).as_deref() == Some(name)
        })
        .collect();
    match matching.as_slice() {
        [pid] => Ok(*pid),
        [] => Err(Error::NoSuchName {
            name: name.to_owned(),
            dir,
        }),
        _ => Err(Error::AmbiguousName {
            name: name.to_owned(),
            pids: matching,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_the_kernel_cut_is_shown_whole() {
        assert_eq!(
            untruncated_name("profiled-servic", Some("profiled-service")),
            "profiled-service"
        );
        // Short names, and a comm the program set to something else, stay as they are.
        assert_eq!(
            untruncated_name("traced-app", Some("traced-app")),
            "traced-app"
        );
        assert_eq!(untruncated_name("dotnet", Some("dotnet")), "dotnet");
        assert_eq!(
            untruncated_name("worker-pool-thr", Some("my-service-binary")),
            "worker-pool-thr"
        );
        assert_eq!(untruncated_name("profiled-servic", None), "profiled-servic");
    }

    #[test]
    fn the_rust_product_string_is_the_servers() {
        // The server's own constant, not a copy of it, decides.
        assert_eq!(RUST_RUNTIME, eventpipe::diagnostics::RUNTIME_NAME);
    }
}
