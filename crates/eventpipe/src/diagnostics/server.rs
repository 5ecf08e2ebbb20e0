//! Serving one command per connection.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use eventpipe_ipc::command::{
    error_response, ok_response, CollectTracing, FORMAT_NETPERF, FORMAT_NETTRACE,
    FORMAT_NETTRACE_V6,
};
use eventpipe_ipc::header::{HeaderError, HEADER_LEN};
use eventpipe_ipc::transport::Stream;
use eventpipe_ipc::{Header, Request, ServerError};

use super::{process, streaming};
use crate::{BufferingMode, Level, Output, ProviderConfig, Session, SessionConfig, MIN_BUDGET};

/// A reverse connection's command, once it starts, has this long to arrive whole (the
/// tool decides when to start it); and every answer this long to be written.
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

static NEXT_SESSION_ID: AtomicU64 = AtomicU64::new(1);

/// What a served command asks of the caller.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Served {
    /// Nothing more.
    Done,
    /// The client sent `ResumeRuntime`.
    Resume,
}

/// Reads one command from a reverse connection, waiting as long as it takes for it to
/// start, and answers it.
pub(crate) fn serve_reverse(mut stream: Stream) -> Served {
    let mut head = [0u8; HEADER_LEN];
    if stream.set_read_timeout(None).is_err() || stream.read_exact(&mut head[..1]).is_err() {
        return Served::Done;
    }
    if stream.set_read_timeout(Some(COMMAND_TIMEOUT)).is_err()
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
    answer(stream, &header, &payload)
}

/// Answers a whole command, as the .NET runtime answers it (the codes are listed in
/// ARCHITECTURE.md, "Attaching").
pub(crate) fn answer(stream: Stream, header: &Header, payload: &[u8]) -> Served {
    if stream.set_write_timeout(Some(COMMAND_TIMEOUT)).is_err() {
        return Served::Done;
    }
    let request = match Request::decode(header, payload) {
        Ok(r) => r,
        Err((code, _why)) => return refuse(stream, code),
    };
    match request {
        Request::CollectTracing(c) => {
            collect(stream, &c);
            Served::Done
        }
        Request::StopTracing { session_id } => {
            // As the runtime: stopping a session that is not running (already stopped,
            // never started) is done, and answered with the id.
            let _ = streaming::stop(session_id);
            reply(stream, &session_id.to_le_bytes());
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

fn reply(mut stream: Stream, payload: &[u8]) -> Served {
    let _ = stream.write_all(&ok_response(payload));
    Served::Done
}

fn refuse(mut stream: Stream, code: ServerError) -> Served {
    let _ = stream.write_all(&error_response(code));
    Served::Done
}

/// The most providers a request may name (the runtime's bound).
const MAX_PROVIDERS: usize = 1000;

/// The session a `CollectTracing` request asks for, or the code to refuse it with: what
/// the .NET runtime's payload parser rejects is `BAD_ENCODING`, as there (a zero buffer
/// size, no provider or more than 1000, a level above Verbose, an empty provider name, a
/// format or buffering mode that does not exist); what this runtime does not implement
/// (NetPerf, per-event-id filters) is `NOT_SUPPORTED`.
pub(crate) fn session_config(
    request: &CollectTracing,
    output: Output,
) -> Result<SessionConfig, ServerError> {
    let format = match request.format {
        FORMAT_NETTRACE => nettrace::FormatVersion::V5,
        FORMAT_NETTRACE_V6 => nettrace::FormatVersion::V6,
        FORMAT_NETPERF => return Err(ServerError::NOT_SUPPORTED),
        _ => return Err(ServerError::BAD_ENCODING),
    };
    let mode = match request.buffering_mode {
        0 => BufferingMode::Drop,
        1 => BufferingMode::Block,
        _ => return Err(ServerError::BAD_ENCODING),
    };
    if request.circular_buffer_mb == 0
        || request.providers.is_empty()
        || request.providers.len() > MAX_PROVIDERS
    {
        return Err(ServerError::BAD_ENCODING);
    }
    let mut providers = Vec::with_capacity(request.providers.len());
    for p in &request.providers {
        if p.level > 5 || p.name.is_empty() {
            return Err(ServerError::BAD_ENCODING);
        }
        if p.filter.as_ref().is_some_and(|f| !f.event_ids.is_empty()) {
            // Per-event-id filters are not implemented by this runtime.
            return Err(ServerError::NOT_SUPPORTED);
        }
        providers.push(ProviderConfig {
            name: p.name.clone(),
            keywords: p.keywords,
            level: Level::from_u8(p.level as u8),
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

fn collect(stream: Stream, request: &CollectTracing) {
    let format = if request.format == FORMAT_NETTRACE_V6 {
        nettrace::FormatVersion::V6
    } else {
        nettrace::FormatVersion::V5
    };
    let limit = streaming::stall_limit(&request.providers);
    let Ok((output, gate)) = streaming::socket_output(&stream, format, limit) else {
        return;
    };
    let aborted = output.aborted_flag();
    let config = match session_config(request, Output::Stream(Box::new(output))) {
        Ok(c) => c,
        Err(code) => {
            refuse(stream, code);
            return;
        }
    };
    // As the runtime when it cannot enable a session (every slot taken, say): FAIL.
    let session = match Session::start(config) {
        Ok(s) => s,
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
    streaming::track(id, session, stream, aborted);
}
