//! Profiles of real .NET traces (from `../shared/traces`, skipped when absent): sample-profiler
//! stacks map to managed method names through method load/rundown events, as TraceEvent maps
//! them.

use std::path::PathBuf;

use eventpipe_insight::{build_profile, FrameKind, SampleSelection, SampleUnit};
use nettrace::TraceReader;

fn shared_trace(name: &str) -> Option<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces")
        .join(name);
    match std::fs::read(&path) {
        Ok(bytes) => Some(bytes),
        Err(_) => {
            eprintln!(
                "skipping: {} not found (../shared is absent)",
                path.display()
            );
            None
        }
    }
}

#[test]
fn managed_samples_resolve_to_method_names() {
    let Some(bytes) = shared_trace("only_managed_samples.nettrace") else {
        return;
    };
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let built = build_profile(&mut reader, SampleSelection::Auto).unwrap();
    let p = &built.profile;
    assert_eq!(p.unit, SampleUnit::ThreadTime);
    assert!(p.samples.len() > 7000, "{}", p.samples.len());
    assert!(built.methods > 100);
    // This program's samples are all in managed code, and every frame maps to a method.
    for s in &p.samples {
        let stack = &p.stacks[s.stack];
        assert!(stack
            .iter()
            .all(|&f| p.frames[f].kind == FrameKind::Managed));
        assert_eq!(p.frames[stack[0]].function, "NoNativeStacks.Program.Main");
    }
    let top = p.weight_by_function();
    let name = |f: usize| p.frames[f].function.as_str();
    assert_eq!(name(top[0].0), "NoNativeStacks.Program.FindByte");
    assert_eq!(
        p.frames[top[0].0].module.as_deref(),
        Some("NoNativeStacks.dll")
    );
    // Self weights add up to the samples; Main is on every stack.
    assert_eq!(top.iter().map(|r| r.1).sum::<u64>(), p.total_weight());
    let main = top
        .iter()
        .find(|r| name(r.0) == "NoNativeStacks.Program.Main")
        .unwrap();
    assert_eq!(main.2, p.total_weight());
}

#[test]
fn windows_native_frames_are_unknown_but_managed_ones_are_named() {
    let Some(bytes) = shared_trace("eventpipe-dotnetcore3.0-win-x64-objver4.nettrace") else {
        return;
    };
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let built = build_profile(&mut reader, SampleSelection::Cpu).unwrap();
    let p = &built.profile;
    assert!(p.samples.len() > 30_000);
    // Native code of a Windows process cannot be symbolized here; runs of such frames
    // collapse into one `[unknown]` frame instead of one per address.
    for stack in &p.stacks {
        for pair in stack.windows(2) {
            let unknown = |f: usize| p.frames[f].kind == FrameKind::Unknown;
            assert!(!(unknown(pair[0]) && unknown(pair[1])));
        }
    }
    let main = p
        .weight_by_function()
        .into_iter()
        .find(|r| p.frames[r.0].function == "EventGenerator.Program.Main")
        .expect("Main is named");
    assert!(main.2 > 1000, "{main:?}");
}
