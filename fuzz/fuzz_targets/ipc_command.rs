//! See `fuzz/bodies/ipc.rs`.
#![no_main]

#[path = "../bodies/ipc.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::ipc_command(data));
