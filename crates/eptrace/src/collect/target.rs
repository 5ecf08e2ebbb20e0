//! Finding or starting the process to trace, and talking to it.
//!
//! An existing process (`-p`, `-n`) is reached through its diagnostics socket. A launched
//! one (`-- CMD`) is started with `DOTNET_DiagnosticPorts` naming a reverse port of ours,
//! suspended: it connects to us, we start the session, then let it run, so no early event
//! is missed. Each command on a reverse port uses the next connection the process opens.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use eventpipe_ipc::command::CollectTracing;
use eventpipe_ipc::{transport, Client, ProcessInfo, ReversePort, TraceStream};

/// Which process to trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TargetSpec {
    /// A running process by id.
    Pid(u32),
    /// A running process by name (its `comm`, or its executable's file name).
    Name(String),
    /// A program to start, traced from its first event.
    Launch(Vec<OsString>),
}

/// How long a launched program has to connect to our reverse port.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// A process being traced.
#[derive(Debug)]
pub(crate) enum Target {
    /// Reached through its own socket.
    Attached { pid: u32, client: Client },
    /// Started by us; it connects to `port` for each command. `next` is a connection
    /// accepted ahead of its command; `pid` is what the process advertised (a wrapper
    /// script's child, say, rather than the child we started).
    Launched {
        child: Child,
        port: ReversePort,
        next: Option<eventpipe_ipc::Connection>,
        pid: u32,
    },
}

impl Target {
    /// Finds or starts the process.
    pub(crate) fn open(spec: &TargetSpec) -> Result<Target> {
        match spec {
            TargetSpec::Pid(pid) => Ok(Target::Attached {
                pid: *pid,
                client: Client::for_pid(*pid)?,
            }),
            TargetSpec::Name(name) => {
                let pid = pid_by_name(name)?;
                Ok(Target::Attached {
                    pid,
                    client: Client::for_pid(pid)?,
                })
            }
            TargetSpec::Launch(argv) => launch(argv),
        }
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        match self {
            Target::Attached { pid, .. } => *pid,
            Target::Launched { pid, .. } => *pid,
        }
    }

    /// A short name for messages and the default file name.
    pub(crate) fn name(&self) -> String {
        let pid = self.pid();
        crate::ps::process_name(pid).unwrap_or_else(|| format!("pid{pid}"))
    }

    fn connection(&mut self) -> Result<eventpipe_ipc::Connection> {
        match self {
            Target::Attached { client, .. } => Ok(client.connect()?),
            Target::Launched {
                port, next, pid, ..
            } => {
                if let Some(conn) = next.take() {
                    return Ok(conn);
                }
                let (_, conn) = port.accept(CONNECT_TIMEOUT).with_context(|| {
                    format!("process {pid} did not reconnect to the diagnostic port")
                })?;
                Ok(conn)
            }
        }
    }

    /// `ProcessInfo2`, falling back to `ProcessInfo`.
    pub(crate) fn process_info(&mut self) -> Result<ProcessInfo, eventpipe_ipc::Error> {
        match self {
            Target::Attached { client, .. } => client.process_info(),
            Target::Launched { .. } => {
                let conn = self
                    .connection()
                    .map_err(|e| eventpipe_ipc::Error::Malformed(format!("{e:#}")))?;
                conn.process_info(2)
            }
        }
    }

    /// Starts the session.
    pub(crate) fn collect(&mut self, request: &CollectTracing) -> Result<TraceStream> {
        Ok(self.connection()?.collect_tracing(request)?)
    }

    /// Lets a launched program run (a no-op for attached ones).
    pub(crate) fn resume(&mut self) -> Result<()> {
        if let Target::Launched { .. } = self {
            self.connection()?
                .resume_runtime()
                .context("resuming the launched program")?;
        }
        Ok(())
    }

    /// Stops the session.
    pub(crate) fn stop(&mut self, session_id: u64) -> Result<()> {
        Ok(self.connection()?.stop_tracing(session_id)?)
    }

    /// Whether a launched program has exited (attached ones: whether the pid is gone).
    pub(crate) fn exited(&mut self) -> bool {
        match self {
            Target::Attached { pid, .. } => transport::start_time(*pid).is_none(),
            Target::Launched { child, .. } => !matches!(child.try_wait(), Ok(None)),
        }
    }

    /// Ends a launched program that is still running: SIGINT, then SIGKILL after 5 s.
    pub(crate) fn finish(&mut self) -> Option<std::process::ExitStatus> {
        let Target::Launched { child, .. } = self else {
            return None;
        };
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        child.wait().ok()
    }
}

fn pid_by_name(name: &str) -> Result<u32> {
    let dir = transport::socket_dir();
    let matching: Vec<u32> = transport::discover(&dir)?
        .into_iter()
        .map(|e| e.pid)
        .filter(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
            let exe_name = exe
                .as_ref()
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned());
            comm.trim() == name || exe_name.as_deref() == Some(name)
        })
        .collect();
    match matching.as_slice() {
        [pid] => Ok(*pid),
        [] => bail!(
            "no attachable process is named `{name}` (see `eptrace ps`; sockets in {})",
            dir.display()
        ),
        pids => bail!(
            "{} attachable processes are named `{name}` (pids {}); choose one with -p",
            pids.len(),
            pids.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn launch(argv: &[OsString]) -> Result<Target> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| anyhow!("no program given after `--`"))?;
    // Short, private and unique: socket paths are limited to 108 bytes.
    let path = transport::socket_dir().join(format!(
        "eptrace-{}-{}.sock",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    ));
    let port = ReversePort::bind(PathBuf::from(&path))?;
    let mut child = Command::new(program)
        .args(args)
        .env(
            eventpipe::diagnostics::PORTS_VAR,
            format!("{},suspend", path.display()),
        )
        // Its own process group: Ctrl-C in the terminal stops the trace, not the program;
        // we end the program ourselves once the trace is safe.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", program.to_string_lossy()))?;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    // Wait for the first connection, noticing if the program dies first.
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "{} exited ({status}) before connecting to the diagnostic port",
                program.to_string_lossy()
            );
        }
        match port.accept(Duration::from_millis(50)) {
            Ok((advertise, conn)) => {
                let pid = u32::try_from(advertise.process_id).unwrap_or(child.id());
                return Ok(Target::Launched {
                    child,
                    port,
                    next: Some(conn),
                    pid,
                });
            }
            // Nobody yet: look again.
            Err(eventpipe_ipc::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::TimedOut => {}
            // Something connected and said something other than a runtime's greeting.
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(anyhow::Error::new(e).context(format!(
                    "{} connected to the diagnostic port but did not introduce itself as a \
                     runtime does",
                    program.to_string_lossy()
                )));
            }
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{} did not connect to the diagnostic port within {CONNECT_TIMEOUT:?}: startup \
                 tracing needs .NET 5+ or a Rust program using eventpipe (which connects when \
                 it declares its first event)",
                program.to_string_lossy()
            );
        }
    }
}
