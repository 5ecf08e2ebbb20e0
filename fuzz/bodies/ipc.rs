#![allow(dead_code)] // each fuzz target uses one of these
//! What the IPC fuzz targets do with their input, shared with the regression tests
//! (`crates/ipc/tests/fuzz_regressions.rs`), which replay every saved input.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use eventpipe_ipc::advertise::{Advertise, ADVERTISE_LEN};
use eventpipe_ipc::header::HEADER_LEN;
use eventpipe_ipc::{CollectTracing, Connection, Header, ProviderRequest, Request};

/// Command parsing, as the server sees a client's bytes: a header, then whatever payload
/// it claims, decoded into a request. Never a panic, whatever the bytes.
pub(crate) fn ipc_command(data: &[u8]) {
    let Some(head) = data.get(..HEADER_LEN) else {
        return;
    };
    let Ok(header) = Header::decode(head.try_into().unwrap()) else {
        return;
    };
    let payload = &data[HEADER_LEN..];
    let payload = &payload[..payload.len().min(header.payload_len())];
    if let Ok(request) = Request::decode(&header, payload) {
        // What decodes re-encodes (the client's side of the same code).
        let _ = request.encode();
    }
}

/// The client facing a hostile server: whatever bytes come back on the socket, each
/// command's answer is parsed into a value or a clear error, with memory bounded by the
/// message size and no panic. The first byte picks the command; the rest is the answer.
pub(crate) fn ipc_response(data: &[u8]) {
    let Some((&which, answer)) = data.split_first() else {
        return;
    };
    let (ours, mut theirs) = UnixStream::pair().unwrap();
    let answer = answer.to_vec();
    // The server: reads the command, answers with the bytes, hangs up.
    let server = std::thread::spawn(move || {
        let mut command = [0u8; 65536];
        let _ = theirs.read(&mut command);
        let _ = theirs.write_all(&answer);
    });
    let connection = Connection::new(ours);
    match which % 4 {
        0 => {
            let _ = connection.process_info(1 + which / 4 % 3);
        }
        1 => {
            let provider = ProviderRequest {
                keywords: 1,
                level: 5,
                name: "P".into(),
                arguments: String::new(),
                filter: None,
            };
            if let Ok(mut stream) =
                connection.collect_tracing(&CollectTracing::new(2, vec![provider]))
            {
                let mut rest = Vec::new();
                let _ = stream.read_to_end(&mut rest);
            }
        }
        2 => {
            let _ = connection.stop_tracing(7);
        }
        _ => {
            let _ = connection.resume_runtime();
        }
    }
    let _ = server.join();
}

/// A reverse-port advertisement from a process that lies: any bytes decode into an
/// advertisement or a clear error, and what decodes keeps the magic, cookie and pid.
pub(crate) fn advertise(data: &[u8]) {
    let Some(bytes) = data.get(..ADVERTISE_LEN) else {
        return;
    };
    let bytes: &[u8; ADVERTISE_LEN] = bytes.try_into().unwrap();
    if let Ok(ad) = Advertise::decode(bytes) {
        assert_eq!(ad.encode()[..32], bytes[..32]);
    }
}
