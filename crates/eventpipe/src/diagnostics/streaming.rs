//! Sessions started over IPC: the connection becomes the session's output.
//!
//! The OK response must reach the client before the first byte of the trace, but the
//! session's drain may write the trace header as soon as the session starts. So the
//! output holds everything back behind a gate until the handler opens it with the OK
//! message; both go through one mutex, so the order is fixed whoever comes first.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use eventpipe_ipc::command::ok_response;

use crate::{Session, SessionStats};

/// A streaming session's socket may refuse writes this long before the session is ended:
/// a client that stops reading must not park Block-mode writers for ever.
pub(crate) const STALLED_READER_TIMEOUT: Duration = Duration::from_secs(10);

/// The sessions started over IPC, by the id their client was given.
fn sessions() -> &'static Mutex<HashMap<u64, Streaming>> {
    static SESSIONS: OnceLock<Mutex<HashMap<u64, Streaming>>> = OnceLock::new();
    SESSIONS.get_or_init(Default::default)
}

struct Streaming {
    session: Session,
    stream: UnixStream,
}

enum GateState {
    /// Trace bytes written before the OK was sent.
    Holding(Vec<u8>),
    Open,
}

/// The session's output: a socket written with `MSG_NOSIGNAL` (a vanished client is an
/// error, not a SIGPIPE that kills the host), behind the gate.
pub(crate) struct SocketOutput {
    stream: UnixStream,
    gate: Arc<Mutex<GateState>>,
}

/// Opens a [`SocketOutput`]'s gate.
pub(crate) struct GateKey {
    stream: UnixStream,
    gate: Arc<Mutex<GateState>>,
}

pub(crate) fn socket_output(stream: &UnixStream) -> std::io::Result<(SocketOutput, GateKey)> {
    stream.set_write_timeout(Some(STALLED_READER_TIMEOUT))?;
    let gate = Arc::new(Mutex::new(GateState::Holding(Vec::new())));
    Ok((
        SocketOutput {
            stream: stream.try_clone()?,
            gate: Arc::clone(&gate),
        },
        GateKey {
            stream: stream.try_clone()?,
            gate,
        },
    ))
}

fn send_all(stream: &UnixStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: the fd is an open socket owned by `stream` for the duration of the
        // call, and `bytes` is a valid readable slice of the given length.
        let n = unsafe {
            libc::send(
                stream.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

impl Write for SocketOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut gate = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *gate {
            GateState::Holding(held) => held.extend_from_slice(buf),
            GateState::Open => send_all(&self.stream, buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl GateKey {
    /// Sends the OK response carrying `session_id`, then whatever trace bytes were held.
    pub(crate) fn open(self, session_id: u64) -> std::io::Result<()> {
        let mut gate = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        send_all(&self.stream, &ok_response(&session_id.to_le_bytes()))?;
        if let GateState::Holding(held) = &*gate {
            send_all(&self.stream, held)?;
        }
        *gate = GateState::Open;
        Ok(())
    }
}

/// Whether a socket error only means "try again".
fn is_transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::Interrupted
            | std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
    )
}

/// Registers a running session under `id` and watches its connection: when the client
/// hangs up, the session is stopped and its memory freed.
pub(crate) fn track(id: u64, session: Session, stream: UnixStream) {
    let watch = stream.try_clone();
    sessions()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, Streaming { session, stream });
    let spawned = watch.and_then(|mut watch| {
        std::thread::Builder::new()
            .name(format!("eventpipe-ipc-watch-{id}"))
            .spawn(move || {
                // Clients send nothing after the command; anything read is ignored, and
                // the end of the stream (or an error) means the client is gone.
                let mut sink = [0u8; 256];
                loop {
                    match watch.read(&mut sink) {
                        Ok(0) => break,
                        Ok(_) => {}
                        // A signal (a profiler's, the host's) interrupting the read, or a
                        // read timeout left on the socket, is not the client leaving.
                        Err(e) if is_transient(&e) => {}
                        Err(_) => break,
                    }
                }
                let _ = stop(id);
            })
    });
    if spawned.is_err() {
        // Without a watcher a vanished client would leave the session running.
        let _ = stop(id);
    }
}

/// Stops the session `id`: flushes and ends its trace, then closes the connection.
/// `None` if there is no such session (already stopped, or never started here).
pub(crate) fn stop(id: u64) -> Option<Result<SessionStats, crate::Error>> {
    let entry = sessions()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id)?;
    let result = entry.session.stop();
    // The client reads until the end of the stream.
    let _ = entry.stream.shutdown(std::net::Shutdown::Both);
    Some(result)
}

/// Stops every IPC session (at process exit).
pub(crate) fn stop_all() {
    let ids: Vec<u64> = sessions()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .copied()
        .collect();
    for id in ids {
        let _ = stop(id);
    }
}

/// How many IPC sessions are running (for tests and diagnostics).
pub(crate) fn running() -> usize {
    sessions().lock().unwrap_or_else(|p| p.into_inner()).len()
}
