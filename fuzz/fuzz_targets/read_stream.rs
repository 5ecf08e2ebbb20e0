//! Streaming reader over `io::Read`, in timestamp order: block framing, the sorter and the
//! bounded buffer growth of the streaming input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = nettrace::TraceReader::from_read(data) else { return };
    let mut sorted = nettrace::SortedReader::new(reader);
    while let Ok(Some(event)) = sorted.next_event() {
        let _ = event.decode_payload();
    }
});
