#![allow(dead_code)] // each fuzz target uses one of these
//! What the nettrace fuzz targets do with their input, shared with the regression tests
//! (`crates/nettrace/tests/fuzz_regressions.rs`), which replay every saved input.

/// Whole-stream reader over a borrowed slice: every event, its payload, stack and labels.
pub(crate) fn read_slice(data: &[u8]) {
    let Ok(mut reader) = nettrace::TraceReader::from_slice(data) else {
        return;
    };
    while let Ok(Some(event)) = reader.next_event() {
        let _ = event.decode_payload();
        let _ = event.stack_ips().count();
        let _ = event.activity_id();
    }
}

/// Streaming reader over `io::Read`, in timestamp order: block framing, the sorter and the
/// bounded buffer growth of the streaming input; and the same accepting a cut-off end.
pub(crate) fn read_stream(data: &[u8]) {
    for accept_truncation in [false, true] {
        let Ok(reader) = nettrace::TraceReader::from_read(data) else {
            return;
        };
        let mut sorted = nettrace::SortedReader::new(reader.accept_truncation(accept_truncation));
        while let Ok(Some(event)) = sorted.next_event() {
            let _ = event.decode_payload();
        }
    }
}
