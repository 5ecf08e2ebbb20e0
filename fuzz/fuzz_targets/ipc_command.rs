//! Diagnostics IPC command parsing, as the server sees a client's bytes: a header, then
//! whatever payload it claims, decoded into a request. Never a panic, whatever the bytes.
#![no_main]

use eventpipe_ipc::header::HEADER_LEN;
use eventpipe_ipc::{Header, Request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(head) = data.get(..HEADER_LEN) else { return };
    let Ok(header) = Header::decode(head.try_into().unwrap()) else { return };
    let payload = &data[HEADER_LEN..];
    let payload = &payload[..payload.len().min(header.payload_len())];
    if let Ok(request) = Request::decode(&header, payload) {
        // What decodes re-encodes (the client's side of the same code).
        let _ = request.encode();
    }
});
