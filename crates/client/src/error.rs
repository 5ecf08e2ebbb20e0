use std::path::PathBuf;
use std::time::Duration;

/// What can go wrong finding, starting or talking to a process. Each message says what
/// this layer was doing; the cause, where there is one, is [`std::error::Error::source`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The diagnostics protocol failed (connecting, a refused command, a bad answer).
    #[error(transparent)]
    Ipc(#[from] eventpipe_ipc::Error),
    /// No attachable process has that name.
    #[error("no attachable process is named `{name}` (see `eptrace ps`; sockets in {})", dir.display())]
    NoSuchName {
        /// The name asked for.
        name: String,
        /// Where the sockets were looked for.
        dir: PathBuf,
    },
    /// Several attachable processes have that name.
    #[error("{} attachable processes are named `{name}` (pids {}); choose one with -p", pids.len(), list(pids))]
    AmbiguousName {
        /// The name asked for.
        name: String,
        /// The processes that have it.
        pids: Vec<u32>,
    },
    /// Launching needs a program.
    #[error("no program given after `--`")]
    NoProgram,
    /// The program could not be started.
    #[error("starting {program}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The launched program exited before it connected to the reverse port.
    #[error("{program} exited ({status}) before connecting to the diagnostic port")]
    ExitedBeforeConnecting {
        /// The program.
        program: String,
        /// How it exited.
        status: std::process::ExitStatus,
    },
    /// Something connected to the reverse port without a runtime's greeting.
    #[error(
        "{program} connected to the diagnostic port but did not introduce itself as a runtime does"
    )]
    NotARuntime {
        /// The program.
        program: String,
        /// What it said instead.
        #[source]
        source: eventpipe_ipc::Error,
    },
    /// The launched program never connected.
    #[error(
        "{program} did not connect to the diagnostic port within {timeout:?}: startup tracing \
         needs .NET 5+ or a Rust program using eventpipe (which connects when it declares \
         its first event)"
    )]
    NeverConnected {
        /// The program.
        program: String,
        /// How long it had.
        timeout: Duration,
    },
    /// A launched program did not open the connection a command needed.
    #[error("process {pid} did not reconnect to the diagnostic port")]
    NoReconnect {
        /// The process.
        pid: u32,
        /// Why.
        #[source]
        source: eventpipe_ipc::Error,
    },
    /// A thread could not be started.
    #[error("starting the thread {name}")]
    Thread {
        /// Its name.
        name: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The thread reading a session's stream panicked.
    #[error("the stream reader panicked")]
    ReaderPanicked,
    /// `ResumeRuntime` failed.
    #[error("resuming the launched program")]
    Resume {
        /// Why.
        #[source]
        source: eventpipe_ipc::Error,
    },
}

impl Error {
    /// The server's error code, when the process refused the command.
    pub fn refusal(&self) -> Option<eventpipe_ipc::ServerError> {
        match self {
            Error::Ipc(eventpipe_ipc::Error::Refused(code)) => Some(*code),
            _ => None,
        }
    }
}

fn list(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a process with a diagnostics socket cannot be attached to.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExamineError {
    /// Another user's process.
    #[error("permission denied on {} (another user's process: this runs as uid {uid})", path.display())]
    PermissionDenied {
        /// The socket.
        path: PathBuf,
        /// This process's effective uid.
        uid: u32,
    },
    /// The socket is there, but nothing listens on it.
    #[error("{} refuses connections (the process stopped listening)", path.display())]
    Refused {
        /// The socket.
        path: PathBuf,
    },
    /// It did not answer `ProcessInfo` usably.
    #[error("it did not answer ProcessInfo")]
    NoAnswer {
        /// What went wrong.
        #[source]
        source: eventpipe_ipc::Error,
    },
}

/// An error and its causes on one line, `: `-separated: for messages that carry a cause
/// where no error chain is printed (a note, a table cell, a JSON field).
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
