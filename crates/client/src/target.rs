//! Finding or starting the process to trace, and talking to it.
//!
//! An existing process (by pid or name) is reached through its diagnostics endpoint. A
//! launched one is started with `DOTNET_DiagnosticPorts` naming a reverse port of ours,
//! suspended: it connects to us, the caller starts its session, then lets it run
//! ([`Target::resume`]), so no early event is missed. Each command on a reverse port uses
//! the next connection the process opens.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use eventpipe_ipc::command::CollectTracing;
use eventpipe_ipc::{transport, Client, Connection, ProcessInfo, ReversePort, TraceStream};

use crate::discover::{pid_by_name, process_name};
use crate::Error;

/// The variable a process reads its reverse diagnostic ports from (.NET's name).
const PORTS_VAR: &str = "DOTNET_DiagnosticPorts";

/// How long a launched program has to connect to the reverse port, and to open each
/// connection after.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Which process to trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    /// A running process by id.
    Pid(u32),
    /// A running process by name (its `comm`, or its executable's file name).
    Name(String),
    /// A program to start (its argv), traced from its first event.
    Launch(Vec<OsString>),
}

/// A process being traced.
#[derive(Debug)]
pub enum Target {
    /// Reached through its own endpoint.
    Attached {
        /// Its id.
        pid: u32,
        /// The client of its endpoint.
        client: Client,
    },
    /// Started by us; it connects to `port` for each command.
    Launched {
        /// The program we started.
        child: Child,
        /// Our reverse port.
        port: ReversePort,
        /// A connection accepted ahead of its command.
        next: Option<Connection>,
        /// What the process advertised (a wrapper script's child, say, rather than the
        /// child we started).
        pid: u32,
    },
}

impl Target {
    /// Finds or starts the process.
    ///
    /// # Errors
    /// When no process (or several) has the name, its endpoint cannot be found, or a
    /// launched program cannot be started or never connects.
    pub fn open(spec: &TargetSpec) -> Result<Target, Error> {
        let attach = |pid| -> Result<Target, Error> {
            Ok(Target::Attached {
                pid,
                client: Client::for_pid(pid)?,
            })
        };
        match spec {
            TargetSpec::Pid(pid) => attach(*pid),
            TargetSpec::Name(name) => attach(pid_by_name(name)?),
            TargetSpec::Launch(argv) => launch(argv),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        match self {
            Target::Attached { pid, .. } | Target::Launched { pid, .. } => *pid,
        }
    }

    /// A short name for messages and file names: [`process_name`], else `pid{N}`.
    pub fn name(&self) -> String {
        let pid = self.pid();
        process_name(pid).unwrap_or_else(|| format!("pid{pid}"))
    }

    fn connection(&mut self) -> Result<Connection, Error> {
        match self {
            Target::Attached { client, .. } => Ok(client.connect()?),
            Target::Launched {
                port, next, pid, ..
            } => {
                if let Some(conn) = next.take() {
                    return Ok(conn);
                }
                let (_, conn) = port
                    .accept(CONNECT_TIMEOUT)
                    .map_err(|source| Error::NoReconnect { pid: *pid, source })?;
                Ok(conn)
            }
        }
    }

    /// `ProcessInfo2`, falling back to `ProcessInfo`.
    ///
    /// # Errors
    /// The protocol's: a refusal (.NET Core 3.1 knows neither), or no answer.
    pub fn process_info(&mut self) -> Result<ProcessInfo, eventpipe_ipc::Error> {
        match self {
            Target::Attached { client, .. } => client.process_info(),
            Target::Launched { .. } => match self.connection() {
                Ok(conn) => conn.process_info(2),
                Err(Error::Ipc(e)) => Err(e),
                Err(e) => Err(eventpipe_ipc::Error::Malformed(crate::with_causes(&e))),
            },
        }
    }

    /// Starts a session; its trace streams on the returned stream.
    ///
    /// # Errors
    /// When the process refuses the session or cannot be reached.
    pub fn collect(&mut self, request: &CollectTracing) -> Result<TraceStream, Error> {
        Ok(self.connection()?.collect_tracing(request)?)
    }

    /// Lets a launched program run (a no-op for attached ones).
    ///
    /// # Errors
    /// When `ResumeRuntime` fails.
    pub fn resume(&mut self) -> Result<(), Error> {
        if let Target::Launched { .. } = self {
            self.connection()?
                .resume_runtime()
                .map_err(|source| Error::Resume { source })?;
        }
        Ok(())
    }

    /// Stops the session `session_id`; its stream then ends once the process has flushed
    /// it.
    ///
    /// # Errors
    /// When the process cannot be reached or refuses.
    pub fn stop(&mut self, session_id: u64) -> Result<(), Error> {
        Ok(self.connection()?.stop_tracing(session_id)?)
    }

    /// Whether a launched program has exited (attached ones: whether the pid is gone).
    pub fn exited(&mut self) -> bool {
        match self {
            Target::Attached { pid, .. } => cfg!(unix) && transport::start_time(*pid).is_none(),
            Target::Launched { child, .. } => !matches!(child.try_wait(), Ok(None)),
        }
    }

    /// Ends a launched program that is still running (SIGINT, then SIGKILL after 5 s) and
    /// returns how it exited; `None` for attached processes.
    pub fn finish(&mut self) -> Option<std::process::ExitStatus> {
        let Target::Launched { child, .. } = self else {
            return None;
        };
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        #[cfg(unix)]
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGINT)
        };
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

/// A private, unique reverse port name: short, as socket paths are limited to 108 bytes.
fn reverse_port_path() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!("eptrace-{}-{nanos}", std::process::id());
    if cfg!(windows) {
        transport::socket_dir().join(name)
    } else {
        transport::socket_dir().join(format!("{name}.sock"))
    }
}

fn launch(argv: &[OsString]) -> Result<Target, Error> {
    let (program, args) = argv.split_first().ok_or(Error::NoProgram)?;
    let name = program.to_string_lossy().into_owned();
    let path = reverse_port_path();
    let port = ReversePort::bind(path.clone())?;
    let mut command = Command::new(program);
    command
        .args(args)
        .env(PORTS_VAR, format!("{},suspend", path.display()));
    // Its own process group: Ctrl-C in the terminal stops the trace, not the program;
    // the caller ends the program once the trace is safe.
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command.spawn().map_err(|source| Error::Spawn {
        program: name.clone(),
        source,
    })?;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let give_up = |child: &mut Child| {
        let _ = child.kill();
        let _ = child.wait();
    };
    // Wait for the first connection, noticing if the program dies first.
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Error::ExitedBeforeConnecting {
                program: name,
                status,
            });
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
            Err(source) => {
                give_up(&mut child);
                return Err(Error::NotARuntime {
                    program: name,
                    source,
                });
            }
        }
        if Instant::now() >= deadline {
            give_up(&mut child);
            return Err(Error::NeverConnected {
                program: name,
                timeout: CONNECT_TIMEOUT,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ports_variable_is_the_runtimes() {
        assert_eq!(super::PORTS_VAR, eventpipe::diagnostics::PORTS_VAR);
    }
}
