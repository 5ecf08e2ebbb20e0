//! See `fuzz/bodies/trace.rs`.
#![no_main]

#[path = "../bodies/trace.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::read_stream(data));
