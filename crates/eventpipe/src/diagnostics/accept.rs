//! Accepting connections and reading their commands, for every client at once.
//!
//! A connection has [`COMMAND_DEADLINE`] from its accept to send its whole command; one
//! that does not is closed. At most [`MAX_READING`] are read at once: beyond that the
//! oldest is closed, never the newcomer, so idle or half-sent connections cannot shut a
//! good client out (a good client sends its command as soon as it connects, and is then
//! served on a thread of its own). Nothing here blocks on a client.
//!
//! On Unix one thread polls the listening socket and every connection still sending its
//! command (non-blocking, `poll(2)`). A named pipe cannot be polled, so on Windows the
//! accepting thread hands each connection to a reader thread whose reads time out at the
//! deadline; closing the oldest is shutting its pipe down, which ends its reader's wait.

use std::collections::VecDeque;
use std::io::{ErrorKind, Write};
use std::time::{Duration, Instant};

use eventpipe_ipc::command::error_response;
use eventpipe_ipc::header::{HeaderError, HEADER_LEN};
use eventpipe_ipc::transport::{Listener, Stream};
use eventpipe_ipc::{Header, ServerError};

use super::server;

/// How long a connection has, from its accept, to send its whole command.
pub(crate) const COMMAND_DEADLINE: Duration = Duration::from_secs(2);
/// Connections read at once; a newer one closes the oldest. Kept well below the usual
/// 1024-descriptor limit, which the host program needs for itself.
pub(crate) const MAX_READING: usize = 128;

/// A connection still sending its command.
struct Reading {
    stream: Stream,
    /// The header, then the payload, as they arrive.
    bytes: Vec<u8>,
    /// The header, once whole.
    header: Option<Header>,
    deadline: Instant,
}

/// What a read made of a connection.
enum Progress {
    /// More to come.
    Waiting,
    /// The command is whole.
    Complete,
    /// Closed, broken or refused: drop it.
    Done,
}

impl Reading {
    fn wanted(&self) -> usize {
        match &self.header {
            None => HEADER_LEN,
            Some(h) => HEADER_LEN + h.payload_len(),
        }
    }

    fn read_some(&mut self) -> Progress {
        loop {
            let wanted = self.wanted();
            if self.bytes.len() == wanted {
                if self.header.is_some() {
                    return Progress::Complete;
                }
                let head: &[u8; HEADER_LEN] = self.bytes[..HEADER_LEN]
                    .try_into()
                    .expect("the header's length");
                match Header::decode(head) {
                    Ok(h) => {
                        self.header = Some(h);
                        continue;
                    }
                    Err(HeaderError::UnknownMagic) => {
                        return refuse(&mut self.stream, ServerError::UNKNOWN_MAGIC)
                    }
                    Err(HeaderError::BadSize(_)) => {
                        return refuse(&mut self.stream, ServerError::BAD_ENCODING)
                    }
                }
            }
            let start = self.bytes.len();
            self.bytes.resize(wanted, 0);
            match std::io::Read::read(&mut self.stream, &mut self.bytes[start..]) {
                Ok(0) => return Progress::Done,
                Ok(n) => self.bytes.truncate(start + n),
                Err(e) => {
                    self.bytes.truncate(start);
                    return match e.kind() {
                        // Non-blocking (Unix), or a read that timed out (Windows).
                        ErrorKind::WouldBlock | ErrorKind::TimedOut => Progress::Waiting,
                        ErrorKind::Interrupted => continue,
                        _ => Progress::Done,
                    };
                }
            }
        }
    }
}

/// Answers a malformed header with its error code (24 bytes: the socket buffer takes
/// them without waiting), then drops the connection.
fn refuse(stream: &mut Stream, code: ServerError) -> Progress {
    let _ = stream.write_all(&error_response(code));
    Progress::Done
}

/// Serves `listener` until the process ends.
#[cfg(unix)]
pub(crate) fn run(listener: Listener) {
    use std::os::fd::AsRawFd;
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let mut reading: VecDeque<Reading> = VecDeque::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        fds.clear();
        fds.push(pollfd(listener.as_raw_fd()));
        fds.extend(reading.iter().map(|r| pollfd(r.stream.as_raw_fd())));
        let now = Instant::now();
        let timeout_ms = reading
            .iter()
            .map(|r| r.deadline.saturating_duration_since(now))
            .min()
            .map_or(-1, |d| d.as_millis().min(60_000) as i32 + 1);
        // SAFETY: `fds` is a live, initialized array of `fds.len()` pollfd structs that
        // poll(2) may write `revents` into; the descriptors belong to sockets we own.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if ready < 0 {
            // EINTR, or a transient failure: look again (the deadlines still hold).
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        // The connections first (their indices match `fds[1..]`), then new ones.
        let mut index = 0;
        let mut fd_index = 1;
        while index < reading.len() {
            let revents = fds.get(fd_index).map_or(0, |f| f.revents);
            fd_index += 1;
            let progress = if revents != 0 {
                reading[index].read_some()
            } else if Instant::now() >= reading[index].deadline {
                Progress::Done
            } else {
                Progress::Waiting
            };
            match progress {
                Progress::Waiting if Instant::now() < reading[index].deadline => index += 1,
                Progress::Waiting | Progress::Done => {
                    reading.remove(index);
                }
                Progress::Complete => {
                    let done = reading.remove(index).expect("the index is in range");
                    dispatch(done);
                }
            }
        }
        if fds[0].revents != 0 {
            accept_all(&listener, &mut reading);
        }
    }
}

#[cfg(unix)]
fn pollfd(fd: i32) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

#[cfg(unix)]
fn accept_all(listener: &Listener, reading: &mut VecDeque<Reading>) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(true).is_err() || super::no_sigpipe(&stream).is_err() {
                    continue;
                }
                if reading.len() >= MAX_READING {
                    reading.pop_front();
                }
                let mut r = Reading {
                    stream,
                    bytes: Vec::with_capacity(HEADER_LEN),
                    header: None,
                    deadline: Instant::now() + COMMAND_DEADLINE,
                };
                // Most clients send at once: read what is there now.
                match r.read_some() {
                    Progress::Waiting => reading.push_back(r),
                    Progress::Complete => dispatch(r),
                    Progress::Done => {}
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // WouldBlock: all accepted. Anything else (out of descriptors): the
            // connection stays in the backlog for the next round.
            Err(_) => return,
        }
    }
}

/// Serves `listener` until the process ends.
#[cfg(windows)]
pub(crate) fn run(listener: Listener) {
    use std::sync::{Arc, Mutex};
    // The connections being read, oldest first, by a number of their own.
    let reading: Arc<Mutex<VecDeque<(u64, Stream)>>> = Arc::default();
    let mut next = 0u64;
    loop {
        let Ok(stream) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let Ok(watched) = stream.try_clone() else {
            continue;
        };
        next += 1;
        let id = next;
        {
            let mut list = reading.lock().unwrap_or_else(|p| p.into_inner());
            if list.len() >= MAX_READING {
                if let Some((_, oldest)) = list.pop_front() {
                    let _ = oldest.shutdown(std::net::Shutdown::Both);
                }
            }
            list.push_back((id, watched));
        }
        let list = Arc::clone(&reading);
        let spawned = std::thread::Builder::new()
            .name("eventpipe-ipc-read".into())
            .spawn(move || {
                let mut r = Reading {
                    stream,
                    bytes: Vec::with_capacity(HEADER_LEN),
                    header: None,
                    deadline: Instant::now() + COMMAND_DEADLINE,
                };
                let progress = loop {
                    let left = r.deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || r.stream.set_read_timeout(Some(left)).is_err() {
                        break Progress::Done;
                    }
                    match r.read_some() {
                        Progress::Waiting => continue,
                        done => break done,
                    }
                };
                list.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|(i, _)| *i != id);
                if let Progress::Complete = progress {
                    let _ = r.stream.set_read_timeout(None);
                    dispatch(r);
                }
            });
        if spawned.is_err() {
            // No thread: the connection closes, as a full list would close it.
            reading
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|(i, _)| *i != id);
        }
    }
}

/// Serves a whole command on a thread of its own (a trace streams for as long as its
/// session runs).
fn dispatch(done: Reading) {
    let Some(header) = done.header else { return };
    #[cfg(unix)]
    if done.stream.set_nonblocking(false).is_err() {
        return;
    }
    let payload = done.bytes[HEADER_LEN..].to_vec();
    let stream = done.stream;
    let _ = std::thread::Builder::new()
        .name("eventpipe-ipc-conn".into())
        .spawn(move || {
            server::answer(stream, &header, &payload);
        });
}
