//! Serving one command per connection.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use eventpipe_ipc::command::{
    error_response, ok_response, CollectTracing, FORMAT_NETTRACE, FORMAT_NETTRACE_V6,
};
use eventpipe_ipc::header::{HeaderError, HEADER_LEN};
use eventpipe_ipc::{Header, Request, ServerError};

use super::{process, streaming};
use crate::{BufferingMode, Level, Output, ProviderConfig, Session, SessionConfig, MIN_BUDGET};

/// A client has this long to send its whole command once connected (reverse connections
/// wait indefinitely for the command to start, as the tool decides when to send it).
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections being read or answered at once; more are closed at once, so a flood of
/// idle connections cannot exhaust the host's threads.
pub(crate) const MAX_PENDING_CONNECTIONS: usize = 32;

static PENDING: AtomicUsize = AtomicUsize::new(0);
static NEXT_SESSION_ID: AtomicU64 = AtomicU64::new(1);

/// Counts a connection being served; `None` when too many already are.
pub(crate) struct PendingSlot(());

impl PendingSlot {
    pub(crate) fn take() -> Option<PendingSlot> {
        // Relaxed: a counter bounding resource use; it orders nothing else.
        let before = PENDING.fetch_add(1, Ordering::Relaxed);
        if before >= MAX_PENDING_CONNECTIONS {
            PENDING.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(PendingSlot(()))
    }
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        PENDING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a served command asks of the caller.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Served {
    /// Nothing more.
    Done,
    /// The client sent `ResumeRuntime`.
    Resume,
}

/// Reads one command from `stream` and answers it. `wait_for_command` lets the first
/// byte take as long as it takes (reverse connections).
pub(crate) fn serve(mut stream: UnixStream, wait_for_command: bool) -> Served {
    let mut head = [0u8; HEADER_LEN];
    let first_read = if wait_for_command {
        None
    } else {
        Some(COMMAND_TIMEOUT)
    };
    if stream.set_read_timeout(first_read).is_err() || stream.read_exact(&mut head[..1]).is_err() {
        return Served::Done;
    }
    if stream.set_read_timeout(Some(COMMAND_TIMEOUT)).is_err()
        || stream.set_write_timeout(Some(COMMAND_TIMEOUT)).is_err()
        || stream.read_exact(&mut head[1..]).is_err()
    {
        return Served::Done;
    }
    let header = match Header::decode(&head) {
        Ok(h) => h,
        Err(HeaderError::UnknownMagic) => return refuse(stream, ServerError::UNKNOWN_MAGIC),
        Err(HeaderError::BadSize(_)) => return refuse(stream, ServerError::BAD_ENCODING),
    };
    let mut payload = vec![0u8; header.payload_len()];
    if stream.read_exact(&mut payload).is_err() {
        return Served::Done;
    }
    let request = match Request::decode(&header, &payload) {
        Ok(r) => r,
        Err((code, _why)) => return refuse(stream, code),
    };
    match request {
        Request::CollectTracing(c) => {
            collect(stream, &c);
            Served::Done
        }
        Request::StopTracing { session_id } => {
            match streaming::stop(session_id) {
                Some(_) => reply(stream, &session_id.to_le_bytes()),
                None => refuse(stream, ServerError::INVALID_ARG),
            };
            Served::Done
        }
        Request::ProcessInfo { version } => {
            reply(stream, &process::this_process().encode(version));
            Served::Done
        }
        Request::ResumeRuntime => {
            reply(stream, &[]);
            Served::Resume
        }
    }
}

fn reply(mut stream: UnixStream, payload: &[u8]) -> Served {
    let _ = stream.write_all(&ok_response(payload));
    Served::Done
}

fn refuse(mut stream: UnixStream, code: ServerError) -> Served {
    let _ = stream.write_all(&error_response(code));
    Served::Done
}

/// The session a `CollectTracing` request asks for, or the code to refuse it with.
pub(crate) fn session_config(
    request: &CollectTracing,
    output: Output,
) -> Result<SessionConfig, ServerError> {
    let format = match request.format {
        FORMAT_NETTRACE => nettrace::FormatVersion::V5,
        FORMAT_NETTRACE_V6 => nettrace::FormatVersion::V6,
        _ => return Err(ServerError::NOT_SUPPORTED),
    };
    let mode = match request.buffering_mode {
        0 => BufferingMode::Drop,
        1 => BufferingMode::Block,
        _ => return Err(ServerError::INVALID_ARG),
    };
    if request.circular_buffer_mb == 0 || request.providers.is_empty() {
        return Err(ServerError::INVALID_ARG);
    }
    let mut providers = Vec::with_capacity(request.providers.len());
    for p in &request.providers {
        if p.filter.as_ref().is_some_and(|f| !f.event_ids.is_empty()) {
            // Per-event-id filters are not implemented by this runtime.
            return Err(ServerError::NOT_SUPPORTED);
        }
        providers.push(ProviderConfig {
            name: p.name.clone(),
            keywords: p.keywords,
            level: Level::from_u8(p.level.min(5) as u8),
            filter_args: (!p.arguments.is_empty()).then(|| p.arguments.clone()),
        });
    }
    let budget = (request.circular_buffer_mb as usize)
        .saturating_mul(1 << 20)
        .max(MIN_BUDGET);
    Ok(SessionConfig::new(providers, output)
        .buffer_budget(budget)
        .mode(mode)
        .format(format)
        .rundown(request.rundown_keyword != 0)
        .stacks(request.stackwalk))
}

fn collect(stream: UnixStream, request: &CollectTracing) {
    let Ok((output, gate)) = streaming::socket_output(&stream) else {
        return;
    };
    let config = match session_config(request, Output::Stream(Box::new(output))) {
        Ok(c) => c,
        Err(code) => {
            refuse(stream, code);
            return;
        }
    };
    let session = match Session::start(config) {
        Ok(s) => s,
        Err(crate::Error::InvalidConfig(_)) => {
            refuse(stream, ServerError::INVALID_ARG);
            return;
        }
        Err(_) => {
            refuse(stream, ServerError::FAIL);
            return;
        }
    };
    // Relaxed: ids need only be unique.
    let id = NEXT_SESSION_ID.fetch_add(1, Ordering::Relaxed);
    if gate.open(id).is_err() {
        // The client left before the OK: nobody to stream to.
        let _ = session.stop();
        return;
    }
    streaming::track(id, session, stream);
}
