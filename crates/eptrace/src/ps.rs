//! `eptrace ps`: every process with a live diagnostics socket, .NET or Rust.

use std::io::Write;

use anyhow::{Context, Result};
use eventpipe_ipc::{transport, Client, ProcessInfo, ServerError};
use serde::Serialize;

/// What `ps` prints.
#[derive(Debug)]
pub(crate) struct Config {
    /// JSON instead of a table.
    pub(crate) json: bool,
}

/// One attachable process.
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    pub(crate) pid: u32,
    pub(crate) name: String,
    pub(crate) runtime: String,
    pub(crate) command_line: String,
}

/// The runtime behind a diagnostics socket, from what it said about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Runtime {
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
    pub(crate) fn of(info: &Result<ProcessInfo, eventpipe_ipc::Error>) -> Runtime {
        match info {
            Ok(info) => match info.runtime_version.as_deref() {
                Some(v) if v.starts_with(eventpipe::diagnostics::RUNTIME_NAME) => {
                    Runtime::Rust(v.to_string())
                }
                Some(v) if !v.is_empty() => Runtime::DotNet(Some(v.to_string())),
                _ => Runtime::DotNet(None),
            },
            // Only .NET Core 3.1 and older lack ProcessInfo.
            Err(eventpipe_ipc::Error::Refused(ServerError::UNKNOWN_COMMAND)) => Runtime::OldDotNet,
            Err(_) => Runtime::Unknown,
        }
    }

    pub(crate) fn is_rust(&self) -> bool {
        matches!(self, Runtime::Rust(_))
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

/// The kernel keeps a process's name (`comm`) to 15 bytes: a name that long which begins
/// the executable's file name is that name cut, and the file name is the one to show.
pub(crate) fn untruncated_name(comm: &str, exe_name: Option<&str>) -> String {
    const COMM_MAX: usize = 15;
    match exe_name {
        Some(exe) if comm.len() == COMM_MAX && exe.len() > COMM_MAX && exe.starts_with(comm) => {
            exe.to_string()
        }
        _ => comm.to_string(),
    }
}

/// Process `pid`'s name: its `comm`, or its executable's file name where the kernel cut
/// `comm` short (`mini-redis-serv` → `mini-redis-server`). `None` when it is gone.
pub(crate) fn process_name(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let exe_name = exe
        .as_ref()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned());
    Some(untruncated_name(comm.trim(), exe_name.as_deref()))
}

fn proc_text(pid: u32, file: &str) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/{file}")).ok()?;
    let text = String::from_utf8_lossy(&raw);
    Some(
        text.trim_end_matches(['\0', '\n'])
            .replace('\0', " ")
            .to_string(),
    )
}

/// What a process says about itself over its diagnostics socket.
#[derive(Debug, Clone)]
pub(crate) struct Examined {
    pub(crate) pid: u32,
    pub(crate) name: String,
    pub(crate) command_line: String,
    pub(crate) runtime: Runtime,
}

/// Asks the process behind `endpoint` who it is; the error says why it cannot be attached
/// to (another user's process, a socket that refuses or does not answer).
pub(crate) fn examine(endpoint: &transport::Endpoint) -> std::result::Result<Examined, String> {
    let info = Client::at(&endpoint.path).process_info();
    if let Err(eventpipe_ipc::Error::Io { source, .. }) = &info {
        return Err(match source.kind() {
            std::io::ErrorKind::PermissionDenied => format!(
                "permission denied on {} (another user's process: this runs as uid {})",
                endpoint.path.display(),
                // SAFETY: geteuid(2) has no preconditions and cannot fail.
                unsafe { libc::geteuid() }
            ),
            std::io::ErrorKind::ConnectionRefused => format!(
                "{} refuses connections (the process stopped listening)",
                endpoint.path.display()
            ),
            _ => format!("it did not answer ProcessInfo ({source})"),
        });
    }
    let runtime = Runtime::of(&info);
    if runtime == Runtime::Unknown {
        return Err(format!(
            "it did not answer ProcessInfo ({})",
            info.err().map(|e| e.to_string()).unwrap_or_default()
        ));
    }
    let command_line = match &info {
        Ok(i) if !i.command_line.is_empty() => i.command_line.clone(),
        _ => proc_text(endpoint.pid, "cmdline").unwrap_or_default(),
    };
    Ok(Examined {
        pid: endpoint.pid,
        name: process_name(endpoint.pid).unwrap_or_else(|| "?".into()),
        command_line,
        runtime,
    })
}

/// The processes with a live diagnostics socket, by pid; one that cannot be attached to
/// says why in its runtime column.
pub(crate) fn list() -> Result<Vec<Row>> {
    let dir = transport::socket_dir();
    let endpoints = transport::discover(&dir)
        .with_context(|| format!("looking for diagnostics sockets in {}", dir.display()))?;
    Ok(endpoints
        .iter()
        .map(|e| match examine(e) {
            Ok(p) => Row {
                pid: p.pid,
                name: p.name,
                runtime: p.runtime.to_string(),
                command_line: p.command_line,
            },
            Err(why) => Row {
                pid: e.pid,
                name: process_name(e.pid).unwrap_or_else(|| "?".into()),
                runtime: format!("unknown: {why}"),
                command_line: proc_text(e.pid, "cmdline").unwrap_or_default(),
            },
        })
        .collect())
}

/// Prints the table (or JSON).
pub(crate) fn do_ps(config: &Config) -> Result<()> {
    let rows = list()?;
    if config.json {
        return crate::print_json(&rows);
    }
    let mut out = std::io::stdout().lock();
    if rows.is_empty() {
        writeln!(
            out,
            "No attachable processes (no live dotnet-diagnostic-*-socket in {}).",
            transport::socket_dir().display()
        )?;
        return Ok(());
    }
    let name_w = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    let rt_w = rows
        .iter()
        .map(|r| r.runtime.len())
        .max()
        .unwrap_or(7)
        .max(7);
    writeln!(
        out,
        "{:>7}  {:name_w$}  {:rt_w$}  COMMAND",
        "PID", "NAME", "RUNTIME"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:>7}  {:name_w$}  {:rt_w$}  {}",
            r.pid, r.name, r.runtime, r.command_line
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod name_tests {
    use super::untruncated_name;

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
}
