//! A blocking diagnostics client.
//!
//! Every command takes a connection of its own (the protocol allows one command per
//! connection); [`Client`] opens them to a process's socket, [`ReversePort`] receives them
//! from processes that connect out to it (startup tracing).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::advertise::{Advertise, ADVERTISE_LEN};
use crate::command::{CollectTracing, Request, ServerError};
use crate::header::{server, set, Header, HEADER_LEN};
use crate::transport::{self, Listener, Stream};
use crate::Error;

pub use crate::command::ProcessInfo;

/// How long a command may take to be answered.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Talks to one process's diagnostics socket.
#[derive(Debug, Clone)]
pub struct Client {
    path: PathBuf,
}

impl Client {
    /// The client for process `pid`, found in the socket directory.
    pub fn for_pid(pid: u32) -> Result<Client, Error> {
        let endpoint = transport::find(&transport::socket_dir(), pid)?;
        Ok(Client {
            path: endpoint.path,
        })
    }

    /// The client for the socket at `path`.
    pub fn at(path: impl Into<PathBuf>) -> Client {
        Client { path: path.into() }
    }

    /// The socket this client connects to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A fresh connection, good for one command.
    pub fn connect(&self) -> Result<Connection, Error> {
        let stream = transport::connect(&self.path)
            .map_err(Error::io(format!("connecting to {}", self.path.display())))?;
        Ok(Connection { stream })
    }

    /// `ProcessInfo2`, falling back to `ProcessInfo` for runtimes that lack it. Runtimes
    /// that know neither (.NET Core 3.1) answer with [`Error::Refused`].
    pub fn process_info(&self) -> Result<ProcessInfo, Error> {
        match self.connect()?.process_info(2) {
            Err(Error::Refused(ServerError::UNKNOWN_COMMAND)) => self.connect()?.process_info(1),
            other => other,
        }
    }

    /// Starts a session; its trace streams on the returned connection.
    pub fn collect_tracing(&self, request: &CollectTracing) -> Result<TraceStream, Error> {
        self.connect()?.collect_tracing(request)
    }

    /// Stops a session. The session's stream ends once the runtime has flushed it; keep
    /// reading it until then, or the runtime may never answer.
    pub fn stop_tracing(&self, session_id: u64) -> Result<(), Error> {
        self.connect()?.stop_tracing(session_id)
    }

    /// Lets a process suspended at startup run.
    pub fn resume_runtime(&self) -> Result<(), Error> {
        self.connect()?.resume_runtime()
    }
}

/// One connection to a diagnostics server, consumed by the command sent on it.
#[derive(Debug)]
pub struct Connection {
    stream: Stream,
}

impl Connection {
    /// Wraps a connected stream (for instance one a process opened to a reverse port).
    pub fn new(stream: Stream) -> Connection {
        Connection { stream }
    }

    /// Sends `request` and returns the OK payload, or the server's error.
    fn exchange(&mut self, request: &Request) -> Result<Vec<u8>, Error> {
        let message = request.encode()?;
        let s = &mut self.stream;
        s.set_write_timeout(Some(ANSWER_TIMEOUT))
            .and_then(|()| s.set_read_timeout(Some(ANSWER_TIMEOUT)))
            .map_err(Error::io("configuring the diagnostics connection"))?;
        s.write_all(&message)
            .map_err(Error::io("sending the command"))?;
        let mut head = [0u8; HEADER_LEN];
        s.read_exact(&mut head)
            .map_err(Error::io("reading the response header"))?;
        let header =
            Header::decode(&head).map_err(|e| Error::malformed(format!("response header: {e}")))?;
        let mut payload = vec![0u8; header.payload_len()];
        s.read_exact(&mut payload)
            .map_err(Error::io("reading the response payload"))?;
        match (header.command_set, header.command_id) {
            (set::SERVER, server::OK) => Ok(payload),
            (set::SERVER, server::ERROR) => {
                let code = payload
                    .get(..4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .ok_or_else(|| Error::malformed("an error response without its code"))?;
                Err(Error::Refused(ServerError(code)))
            }
            (s, i) => Err(Error::malformed(format!(
                "the response has command set {s:#04x} id {i:#04x}, not a server response"
            ))),
        }
    }

    /// `ProcessInfo`, `ProcessInfo2` or `ProcessInfo3`.
    pub fn process_info(mut self, version: u8) -> Result<ProcessInfo, Error> {
        let payload = self.exchange(&Request::ProcessInfo { version })?;
        ProcessInfo::decode(version, &payload)
    }

    /// Starts a session; the connection becomes its stream.
    pub fn collect_tracing(mut self, request: &CollectTracing) -> Result<TraceStream, Error> {
        let payload = self.exchange(&Request::CollectTracing(request.clone()))?;
        let session_id = session_id(&payload)?;
        // The stream may be quiet for as long as the session is; reads block.
        self.stream
            .set_read_timeout(None)
            .map_err(Error::io("configuring the trace stream"))?;
        Ok(TraceStream {
            session_id,
            stream: self.stream,
        })
    }

    /// Stops the session `session_id`.
    pub fn stop_tracing(mut self, session_id_to_stop: u64) -> Result<(), Error> {
        let payload = self.exchange(&Request::StopTracing {
            session_id: session_id_to_stop,
        })?;
        let stopped = session_id(&payload)?;
        if stopped != session_id_to_stop {
            return Err(Error::malformed(format!(
                "asked to stop session {session_id_to_stop:#x}, the server stopped {stopped:#x}"
            )));
        }
        Ok(())
    }

    /// `ResumeRuntime`.
    pub fn resume_runtime(mut self) -> Result<(), Error> {
        self.exchange(&Request::ResumeRuntime).map(drop)
    }
}

fn session_id(payload: &[u8]) -> Result<u64, Error> {
    payload
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        .ok_or_else(|| Error::malformed("the response lacks its session id"))
}

/// A session's live nettrace stream. It ends (reads return 0) after the session stops.
#[derive(Debug)]
pub struct TraceStream {
    session_id: u64,
    stream: Stream,
}

impl TraceStream {
    /// The id to pass to [`Client::stop_tracing`].
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    /// Closes the stream without stopping the session politely: the server ends the
    /// session when it notices.
    pub fn abandon(self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    /// A handle that can cut the stream from another thread (a reader blocked in `read`
    /// then sees its end).
    pub fn closer(&self) -> Result<StreamCloser, Error> {
        let stream = self
            .stream
            .try_clone()
            .map_err(Error::io("cloning the trace stream"))?;
        Ok(StreamCloser { stream })
    }
}

impl Read for TraceStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.stream.read(buf)
    }
}

/// Cuts a [`TraceStream`] from another thread.
#[derive(Debug)]
pub struct StreamCloser {
    stream: Stream,
}

impl StreamCloser {
    /// Shuts the connection down in both directions.
    pub fn close(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// A socket processes connect out to (`DOTNET_DiagnosticPorts=<path>`), each connection
/// greeting with an advertisement and then waiting for one command.
#[derive(Debug)]
pub struct ReversePort {
    listener: Listener,
    path: PathBuf,
}

impl ReversePort {
    /// Listens at `path` (owner-only).
    pub fn bind(path: impl Into<PathBuf>) -> Result<ReversePort, Error> {
        let path = path.into();
        let listener = transport::listen_private(&path)?;
        #[cfg(unix)]
        listener
            .set_nonblocking(true)
            .map_err(Error::io("configuring the reverse port"))?;
        Ok(ReversePort { listener, path })
    }

    /// The socket's path, for `DOTNET_DiagnosticPorts`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits up to `timeout` for a process to connect and advertise itself.
    pub fn accept(&self, timeout: Duration) -> Result<(Advertise, Connection), Error> {
        let mut stream = transport::accept_within(&self.listener, timeout)
            .map_err(Error::io("accepting on the reverse port"))?
            .ok_or_else(|| Error::Io {
                what: format!(
                    "waiting for a process to connect to {}",
                    self.path.display()
                ),
                source: std::io::ErrorKind::TimedOut.into(),
            })?;
        stream
            .set_read_timeout(Some(ANSWER_TIMEOUT))
            .map_err(Error::io("configuring the reverse connection"))?;
        let mut greeting = [0u8; ADVERTISE_LEN];
        stream
            .read_exact(&mut greeting)
            .map_err(Error::io("reading the advertisement"))?;
        Ok((Advertise::decode(&greeting)?, Connection::new(stream)))
    }
}

impl Drop for ReversePort {
    fn drop(&mut self) {
        // A named pipe goes with its handles; a socket file stays until removed.
        if cfg!(unix) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
