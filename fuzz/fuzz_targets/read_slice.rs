//! Whole-stream reader over a borrowed slice: every event, its payload, stack and labels.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = nettrace::TraceReader::from_slice(data) else { return };
    while let Ok(Some(event)) = reader.next_event() {
        let _ = event.decode_payload();
        let _ = event.stack_ips().count();
        let _ = event.activity_id();
    }
});
