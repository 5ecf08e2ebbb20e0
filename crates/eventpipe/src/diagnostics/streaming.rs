//! Sessions started over IPC: the connection becomes the session's output.
//!
//! The OK response must reach the client before the first byte of the trace, but the
//! session's drain may write the trace header as soon as the session starts. So the
//! output holds everything back behind a gate until the handler opens it with the OK
//! message; both go through one mutex, so the order is fixed whoever comes first. What the
//! gate holds is bounded ([`HOLD_LIMIT`]): past it the drain waits for the gate (as it
//! would for a slow reader), so a provider that writes a burst as its session starts (a
//! heap snapshot) cannot make the gate hold more than the session's budget allows.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
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

/// Trace bytes the gate holds at most before the drain waits for it to open.
pub(crate) const HOLD_LIMIT: usize = 256 * 1024;

enum GateState {
    /// Trace bytes written before the OK was sent.
    Holding(Vec<u8>),
    Open,
    /// The OK could not be sent: the client is gone.
    Closed,
}

/// The gate's state, and the drain's wait for it to open.
struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

/// The session's output: a socket written with `MSG_NOSIGNAL` (a vanished client is an
/// error, not a SIGPIPE that kills the host), behind the gate.
pub(crate) struct SocketOutput {
    stream: UnixStream,
    gate: Arc<Gate>,
}

/// Opens a [`SocketOutput`]'s gate.
pub(crate) struct GateKey {
    stream: UnixStream,
    gate: Arc<Gate>,
}

pub(crate) fn socket_output(stream: &UnixStream) -> std::io::Result<(SocketOutput, GateKey)> {
    stream.set_write_timeout(Some(STALLED_READER_TIMEOUT))?;
    let gate = Arc::new(Gate {
        state: Mutex::new(GateState::Holding(Vec::new())),
        changed: Condvar::new(),
    });
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
        let mut state = self.gate.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match &mut *state {
                // Held within the limit; a write larger than the limit on its own is held
                // whole rather than never.
                GateState::Holding(held)
                    if held.is_empty() || held.len() + buf.len() <= HOLD_LIMIT =>
                {
                    held.extend_from_slice(buf);
                    return Ok(buf.len());
                }
                GateState::Holding(_) => {
                    let (next, waited) = self
                        .gate
                        .changed
                        .wait_timeout(state, STALLED_READER_TIMEOUT)
                        .unwrap_or_else(|p| p.into_inner());
                    state = next;
                    if waited.timed_out() && matches!(*state, GateState::Holding(_)) {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "the session's OK was never sent",
                        ));
                    }
                }
                GateState::Open => {
                    send_all(&self.stream, buf)?;
                    return Ok(buf.len());
                }
                GateState::Closed => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::BrokenPipe,
                        "the client left before the session started",
                    ))
                }
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl GateKey {
    /// Sends the OK response carrying `session_id`, then whatever trace bytes were held.
    pub(crate) fn open(self, session_id: u64) -> std::io::Result<()> {
        let mut state = self.gate.state.lock().unwrap_or_else(|p| p.into_inner());
        let sent = send_all(&self.stream, &ok_response(&session_id.to_le_bytes())).and_then(|()| {
            match &*state {
                GateState::Holding(held) => send_all(&self.stream, held),
                _ => Ok(()),
            }
        });
        *state = if sent.is_ok() {
            GateState::Open
        } else {
            GateState::Closed
        };
        // Wakes a drain waiting for room.
        self.gate.changed.notify_all();
        sent
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_holds_a_bounded_amount_then_waits_for_the_ok() {
        let (ours, mut client) = UnixStream::pair().unwrap();
        let (mut output, key) = socket_output(&ours).unwrap();
        let chunk = vec![7u8; HOLD_LIMIT / 4];
        let writer = std::thread::spawn(move || {
            for _ in 0..8 {
                output.write_all(&chunk).unwrap();
            }
        });
        // The writer fills the gate, then waits: it cannot finish while the gate is shut.
        std::thread::sleep(Duration::from_millis(200));
        assert!(!writer.is_finished(), "the writer got past a full gate");
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            client.read_to_end(&mut all).unwrap();
            all
        });
        key.open(42).unwrap();
        writer.join().unwrap();
        drop(ours);
        let all = reader.join().unwrap();
        let ok = ok_response(&42u64.to_le_bytes());
        assert_eq!(&all[..ok.len()], &ok[..], "the OK comes first");
        assert_eq!(
            all.len() - ok.len(),
            8 * (HOLD_LIMIT / 4),
            "then every byte, once"
        );
    }

    #[test]
    fn a_gate_whose_ok_cannot_be_sent_fails_the_waiting_writer() {
        let (ours, client) = UnixStream::pair().unwrap();
        let (mut output, key) = socket_output(&ours).unwrap();
        output.write_all(&vec![1u8; HOLD_LIMIT]).unwrap();
        let writer = std::thread::spawn(move || output.write_all(&[2u8; 16]));
        std::thread::sleep(Duration::from_millis(100));
        drop(client);
        assert!(key.open(1).is_err());
        let err = writer.join().unwrap().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe);
    }
}
