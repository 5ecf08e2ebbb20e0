//! Every input that once crashed the reader's fuzz targets (`fuzz/regressions/`, where
//! `ci/fuzz.sh` saves each new crash), and the fixtures they start from, replayed through
//! the same code the targets run (`fuzz/bodies/trace.rs`) on every `cargo test`.

#[path = "../../../fuzz/bodies/trace.rs"]
mod bodies;

use std::path::Path;

fn inputs(target: &str) -> Vec<Vec<u8>> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dirs = [
        here.join("tests/fixtures"),
        here.join("../../fuzz/regressions").join(target),
    ];
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_file() {
                out.push(std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

#[test]
fn every_saved_input_of_the_reader_targets_is_handled() {
    for (target, body) in [
        ("read_slice", bodies::read_slice as fn(&[u8])),
        ("read_stream", bodies::read_stream),
    ] {
        let inputs = inputs(target);
        assert!(!inputs.is_empty(), "{target}: no inputs");
        for input in &inputs {
            body(input);
            // And every prefix of a short input: what a cut-off copy looks like.
            if input.len() <= 4096 {
                for cut in 0..input.len() {
                    body(&input[..cut]);
                }
            }
        }
    }
}
