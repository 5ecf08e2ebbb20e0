//! Every input the IPC fuzz targets keep — their seeds (`fuzz/seeds/`) and every input
//! that once crashed them (`fuzz/regressions/`, where `ci/fuzz.sh` saves each new crash) —
//! replayed through the same code the targets run (`fuzz/bodies/ipc.rs`), on every
//! `cargo test`. (The bodies serve over Unix sockets.)
#![cfg(unix)]

#[path = "../../../fuzz/bodies/ipc.rs"]
mod bodies;

use std::path::Path;

/// Runs `body` on every saved input of `target`; returns how many there were.
fn replay(target: &str, body: fn(&[u8])) -> usize {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut n = 0;
    for kind in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(kind).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_file() {
                let bytes = std::fs::read(&path).unwrap();
                eprintln!("replaying {}", path.display());
                body(&bytes);
                n += 1;
            }
        }
    }
    n
}

#[test]
fn every_saved_input_of_the_ipc_targets_is_handled() {
    assert!(replay("ipc_command", bodies::ipc_command) >= 4);
    assert!(replay("ipc_response", bodies::ipc_response) >= 4);
    assert!(replay("advertise", bodies::advertise) >= 1);
}
