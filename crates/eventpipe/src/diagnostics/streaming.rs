//! Sessions started over IPC: the connection becomes the session's output.
//!
//! The OK response must reach the client before the first byte of the trace, but the
//! session's drain may write the trace header as soon as the session starts. So the
//! output holds everything back behind a gate until the handler opens it with the OK
//! message; both go through one mutex, so the order is fixed whoever comes first. What the
//! gate holds is bounded ([`HOLD_LIMIT`]): past it the drain waits for the gate (as it
//! would for a slow reader), so a provider that writes a burst as its session starts (a
//! heap snapshot) cannot make the gate hold more than the session's budget allows.
//!
//! A client that stops reading parks a Block-mode session's writers (that is the mode's
//! contract) for at most the session's stall limit ([`DEFAULT_STALL_LIMIT`]; a session
//! sets its own with the `EventPipeRs-Session` provider's `StallLimitMs=N` argument, a
//! process with `EVENTPIPE_STALL_LIMIT_MS`): a deadline for the whole stall, renewed only
//! when the socket takes bytes. Past it the session is aborted as a stop ends it
//! (writers released, its memory freed), and its stream is ended properly: the rest of
//! the block being sent, an `EventPipeRs-Session/SessionAborted` event saying why, the
//! end-of-stream marker, then the connection is closed, so a client that reads on gets a
//! whole trace that says why it ended. The trace writer hands each block over in one
//! write, so the rest of that write is the rest of a block.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use eventpipe_ipc::command::ok_response;
use eventpipe_ipc::transport::Stream;

use crate::{Session, SessionStats};

/// How long a streaming session's socket may take no bytes before the session is
/// aborted: a client that stops reading must not park Block-mode writers for ever.
pub(crate) const DEFAULT_STALL_LIMIT: Duration = Duration::from_secs(10);

/// The pseudo-provider whose arguments configure the session (`StallLimitMs=N`).
pub(crate) const SESSION_PROVIDER: &str = "EventPipeRs-Session";

/// The stall limit of a session whose providers are `providers`: the `EventPipeRs-Session`
/// provider's `StallLimitMs`, else `EVENTPIPE_STALL_LIMIT_MS`, else the default.
pub(crate) fn stall_limit(providers: &[eventpipe_ipc::ProviderRequest]) -> Duration {
    let ms = |text: &str| text.trim().parse::<u64>().ok().filter(|&ms| ms > 0);
    providers
        .iter()
        .filter(|p| p.name.eq_ignore_ascii_case(SESSION_PROVIDER))
        .flat_map(|p| p.arguments.split(';'))
        .find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            k.trim()
                .eq_ignore_ascii_case("StallLimitMs")
                .then(|| ms(v))?
        })
        .or_else(|| {
            std::env::var("EVENTPIPE_STALL_LIMIT_MS")
                .ok()
                .and_then(|v| ms(&v))
        })
        .map_or(DEFAULT_STALL_LIMIT, Duration::from_millis)
}

/// The sessions started over IPC, by the id their client was given.
fn sessions() -> &'static Mutex<HashMap<u64, Streaming>> {
    static SESSIONS: OnceLock<Mutex<HashMap<u64, Streaming>>> = OnceLock::new();
    SESSIONS.get_or_init(Default::default)
}

struct Streaming {
    session: Session,
    stream: Stream,
    /// Raised when the output aborted the session for a stalled reader: the abort ends
    /// the stream itself (the rest of a block, the end marker), so a stop must not cut
    /// the connection first.
    aborted: Arc<AtomicBool>,
}

/// Trace bytes the gate holds at most before the drain waits for it to open.
pub(crate) const HOLD_LIMIT: usize = 256 * 1024;

enum GateState {
    /// Trace bytes written before the OK was sent.
    Holding(Vec<u8>),
    /// Streaming to the client of session `id`.
    Open { id: u64 },
    /// The OK could not be sent: the client is gone.
    Closed,
    /// The reader stalled past the limit: the stream has been ended, and what the drain
    /// still writes is discarded.
    Aborted,
}

/// The gate's state, and the drain's wait for it to open.
struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

/// The session's output: a socket (a pipe on Windows) on which a vanished client is an
/// error, not a SIGPIPE that kills the host (`send_within`), behind the gate.
pub(crate) struct SocketOutput {
    stream: Stream,
    gate: Arc<Gate>,
    stall_limit: Duration,
    format: nettrace::FormatVersion,
    /// Bytes of the stream handed to this output so far (where an appended block starts).
    written: u64,
    aborted: Arc<AtomicBool>,
}

/// Opens a [`SocketOutput`]'s gate.
pub(crate) struct GateKey {
    stream: Stream,
    gate: Arc<Gate>,
    stall_limit: Duration,
}

/// The output of a session streaming in `format` to `stream`, whose reader may stall for
/// `stall_limit`.
pub(crate) fn socket_output(
    stream: &Stream,
    format: nettrace::FormatVersion,
    stall_limit: Duration,
) -> std::io::Result<(SocketOutput, GateKey)> {
    let gate = Arc::new(Gate {
        state: Mutex::new(GateState::Holding(Vec::new())),
        changed: Condvar::new(),
    });
    Ok((
        SocketOutput {
            stream: stream.try_clone()?,
            gate: Arc::clone(&gate),
            stall_limit,
            format,
            written: 0,
            aborted: Arc::new(AtomicBool::new(false)),
        },
        GateKey {
            stream: stream.try_clone()?,
            gate,
            stall_limit,
        },
    ))
}

/// Why bytes could not all be sent.
enum SendError {
    /// The socket took nothing for the whole stall limit; `sent` bytes went before.
    Stalled { sent: usize },
    /// The client is gone (or the socket broke).
    Io(std::io::Error),
}

/// Sends all of `bytes`, waiting while the socket is full for at most `stall_limit` at a
/// time: the deadline is renewed whenever the socket takes bytes, so it bounds each
/// stall as a whole, however many partial sends it spans.
#[cfg(unix)]
fn send_within(stream: &Stream, bytes: &[u8], stall_limit: Duration) -> Result<(), SendError> {
    use std::os::fd::AsRawFd;
    // Linux: no SIGPIPE for this send. macOS: the socket has SO_NOSIGPIPE (`no_sigpipe`).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    const FLAGS: libc::c_int = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    const FLAGS: libc::c_int = libc::MSG_DONTWAIT;
    let mut sent = 0;
    let mut deadline = Instant::now() + stall_limit;
    while sent < bytes.len() {
        let rest = &bytes[sent..];
        // SAFETY: the fd is an open socket owned by `stream` for the duration of the
        // call, and `rest` is a valid readable slice of the given length.
        let n = unsafe { libc::send(stream.as_raw_fd(), rest.as_ptr().cast(), rest.len(), FLAGS) };
        if n > 0 {
            sent += n as usize;
            deadline = Instant::now() + stall_limit;
            continue;
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::Interrupted => continue,
            std::io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(SendError::Stalled { sent });
                }
                let mut fd = libc::pollfd {
                    fd: stream.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
                // SAFETY: `fd` is one initialized pollfd that poll(2) may write into.
                unsafe { libc::poll(&mut fd, 1, ms) };
            }
            _ => return Err(SendError::Io(e)),
        }
    }
    Ok(())
}

/// Sends all of `bytes` through the pipe a chunk at a time, each chunk within what is
/// left of the stall limit, renewed whenever a chunk is taken.
#[cfg(windows)]
fn send_within(stream: &Stream, bytes: &[u8], stall_limit: Duration) -> Result<(), SendError> {
    let mut sent = 0;
    let mut deadline = Instant::now() + stall_limit;
    while sent < bytes.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(SendError::Stalled { sent });
        }
        match stream.write_within(&bytes[sent..], Some(left)) {
            Ok(n) => {
                sent += n;
                deadline = Instant::now() + stall_limit;
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Err(SendError::Stalled { sent })
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(SendError::Io(e)),
        }
    }
    Ok(())
}

/// The metadata id, thread and OS thread id of the event an aborted stream ends with,
/// chosen where the drain's own never reach.
const ABORT_METADATA_ID: u32 = 0x7FFF_FFFF;
const ABORT_THREAD: u64 = 0x7FFF_FFFF;

/// What ends an aborted session's stream that is `offset` bytes long: an
/// `EventPipeRs-Session/SessionAborted` event saying why (its metadata, in V6 its thread,
/// and the event), then the end-of-stream marker.
fn ending(format: nettrace::FormatVersion, offset: u64, id: u64, reason: &str) -> Vec<u8> {
    use nettrace::write::{EventBlockBuilder, TraceWriter};
    use nettrace::{EventHeader, EventMetadata, FieldDesc, FieldType, ThreadInfo};
    let mut out = Vec::new();
    let mut w = TraceWriter::continuing(&mut out, format, offset);
    let metadata = EventMetadata {
        metadata_id: ABORT_METADATA_ID,
        provider: SESSION_PROVIDER.to_owned(),
        event_id: 1,
        event_name: "SessionAborted".to_owned(),
        level: 2,
        fields: vec![
            FieldDesc {
                name: "SessionId".to_owned(),
                ty: FieldType::UInt64,
            },
            FieldDesc {
                name: "Reason".to_owned(),
                ty: FieldType::Utf16String,
            },
        ],
        ..Default::default()
    };
    let mut payload = id.to_le_bytes().to_vec();
    for unit in reason.encode_utf16().chain([0]) {
        payload.extend_from_slice(&unit.to_le_bytes());
    }
    let mut block = EventBlockBuilder::new(format);
    block.push(
        &EventHeader {
            metadata_id: ABORT_METADATA_ID,
            sequence_number: 1,
            thread: ABORT_THREAD,
            capture_thread: ABORT_THREAD,
            timestamp: crate::clock::now(),
            ..Default::default()
        },
        &payload,
    );
    let written = w.write_metadata_block(&[metadata]).and_then(|()| {
        if format == nettrace::FormatVersion::V6 {
            w.write_thread_block(&[ThreadInfo {
                index: ABORT_THREAD,
                name: Some("eventpipe-ipc-abort".to_owned()),
                process_id: Some(u64::from(std::process::id())),
                thread_id: Some(ABORT_THREAD),
                key_values: Vec::new(),
            }])?;
        }
        w.write_event_block(&mut block)?;
        w.finish().map(drop)
    });
    if written.is_err() {
        // Cannot happen for a Vec; end the stream without the reason.
        out.clear();
    }
    if out.is_empty() {
        out.extend_from_slice(if format == nettrace::FormatVersion::V6 {
            &[0, 0, 0, 0]
        } else {
            &[1]
        });
    }
    out
}

fn send_all(stream: &Stream, bytes: &[u8], stall_limit: Duration) -> std::io::Result<()> {
    send_within(stream, bytes, stall_limit).map_err(|e| match e {
        SendError::Stalled { .. } => std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client took nothing for the stall limit",
        ),
        SendError::Io(e) => e,
    })
}

/// Ends an aborted session's stream: stops the session (writers released, memory freed;
/// what its drain still writes is discarded), then sends `rest` (the rest of the block
/// that stalled, and the end-of-stream marker) within another stall limit, and closes.
fn abort(id: u64, stream: Stream, rest: Vec<u8>, stall_limit: Duration) {
    let spawned = std::thread::Builder::new()
        .name(format!("eventpipe-ipc-abort-{id}"))
        .spawn(move || {
            let _ = stop(id);
            let _ = send_all(&stream, &rest, stall_limit);
            let _ = stream.shutdown(std::net::Shutdown::Both);
        });
    if spawned.is_err() {
        // No thread: the session still ends when its client hangs up.
    }
}

impl Write for SocketOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let taken = self.write_inner(buf)?;
        self.written += taken as u64;
        Ok(taken)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SocketOutput {
    fn write_inner(&mut self, buf: &[u8]) -> std::io::Result<usize> {
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
                        .wait_timeout(state, self.stall_limit)
                        .unwrap_or_else(|p| p.into_inner());
                    state = next;
                    if waited.timed_out() && matches!(*state, GateState::Holding(_)) {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "the session's OK was never sent",
                        ));
                    }
                }
                GateState::Open { id } => {
                    let id = *id;
                    return match send_within(&self.stream, buf, self.stall_limit) {
                        Ok(()) => Ok(buf.len()),
                        Err(SendError::Io(e)) => Err(e),
                        Err(SendError::Stalled { sent }) => {
                            *state = GateState::Aborted;
                            drop(state);
                            self.aborted.store(true, Ordering::Release);
                            // The rest of this block, the reason, the end marker.
                            let mut rest = buf[sent..].to_vec();
                            let end = self.written + buf.len() as u64;
                            let reason = format!(
                                "the client read nothing for {:.1} s (the session's stall \
                                 limit): the session was aborted",
                                self.stall_limit.as_secs_f64()
                            );
                            rest.extend_from_slice(&ending(self.format, end, id, &reason));
                            abort(id, self.stream.try_clone()?, rest, self.stall_limit);
                            // Taken, as far as the drain knows: it runs on to its end.
                            Ok(buf.len())
                        }
                    };
                }
                GateState::Aborted => return Ok(buf.len()),
                GateState::Closed => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::BrokenPipe,
                        "the client left before the session started",
                    ))
                }
            }
        }
    }
}

impl SocketOutput {
    /// Raised if the output aborts its session for a stalled reader.
    pub(crate) fn aborted_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.aborted)
    }
}

impl GateKey {
    /// Sends the OK response carrying `session_id`, then whatever trace bytes were held.
    pub(crate) fn open(self, session_id: u64) -> std::io::Result<()> {
        let mut state = self.gate.state.lock().unwrap_or_else(|p| p.into_inner());
        let limit = self.stall_limit;
        let sent =
            send_all(&self.stream, &ok_response(&session_id.to_le_bytes()), limit).and_then(|()| {
                match &*state {
                    GateState::Holding(held) => send_all(&self.stream, held, limit),
                    _ => Ok(()),
                }
            });
        *state = if sent.is_ok() {
            GateState::Open { id: session_id }
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
pub(crate) fn track(id: u64, session: Session, stream: Stream, aborted: Arc<AtomicBool>) {
    let watch = stream.try_clone();
    sessions().lock().unwrap_or_else(|p| p.into_inner()).insert(
        id,
        Streaming {
            session,
            stream,
            aborted,
        },
    );
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
    // The client reads until the end of the stream (an aborted one is ended by its abort).
    if !entry.aborted.load(Ordering::Acquire) {
        let _ = entry.stream.shutdown(std::net::Shutdown::Both);
    }
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

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn the_gate_holds_a_bounded_amount_then_waits_for_the_ok() {
        let (ours, mut client) = std::os::unix::net::UnixStream::pair().unwrap();
        let (mut output, key) =
            socket_output(&ours, nettrace::FormatVersion::V5, DEFAULT_STALL_LIMIT).unwrap();
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
        let (ours, client) = std::os::unix::net::UnixStream::pair().unwrap();
        let (mut output, key) =
            socket_output(&ours, nettrace::FormatVersion::V5, DEFAULT_STALL_LIMIT).unwrap();
        output.write_all(&vec![1u8; HOLD_LIMIT]).unwrap();
        let writer = std::thread::spawn(move || output.write_all(&[2u8; 16]));
        std::thread::sleep(Duration::from_millis(100));
        drop(client);
        assert!(key.open(1).is_err());
        let err = writer.join().unwrap().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe);
    }
}
