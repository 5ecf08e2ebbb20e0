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

/// The runtime events of `bytes` with id `event_id` (that carry a stack, with
/// `with_stack`), each as its decoded fields: counted straight from the reader, as a check
/// independent of the builder.
fn runtime_events(
    bytes: &[u8],
    event_id: u32,
    with_stack: bool,
) -> Vec<Vec<(String, nettrace::Value)>> {
    let mut reader = TraceReader::from_slice(bytes).unwrap();
    let mut out = Vec::new();
    while let Some(e) = reader.next_event().unwrap() {
        if e.metadata.provider == "Microsoft-Windows-DotNETRuntime"
            && e.metadata.event_id == event_id
            && (!with_stack || e.stack.is_some_and(|s| !s.is_empty()))
        {
            let fields = e.decode_payload().unwrap();
            out.push(fields.into_iter().map(|(n, v)| (n.to_owned(), v)).collect());
        }
    }
    out
}

fn field<'a>(fields: &'a [(String, nettrace::Value)], name: &str) -> &'a nettrace::Value {
    &fields.iter().find(|(n, _)| n == name).unwrap().1
}

#[test]
fn allocation_ticks_weigh_their_bytes_and_end_in_their_type() {
    let Some(bytes) = shared_trace("eventpipe-dotnetcore3.0-win-x64-objver4.nettrace") else {
        return;
    };
    // GC/AllocationTick is event 10.
    let ticks = runtime_events(&bytes, 10, true);
    assert_eq!(ticks.len(), 35457);
    let total: u64 = ticks
        .iter()
        .map(|t| field(t, "AllocationAmount64").as_u64().unwrap())
        .sum();
    let strings: u64 = ticks
        .iter()
        .filter(|t| field(t, "TypeName").as_str() == Some("System.String"))
        .map(|t| field(t, "AllocationAmount64").as_u64().unwrap())
        .sum();
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let built = build_profile(&mut reader, SampleSelection::Allocations).unwrap();
    let p = &built.profile;
    assert_eq!(p.unit, SampleUnit::Bytes);
    assert_eq!(p.samples.len(), ticks.len());
    assert_eq!(p.samples.iter().map(|s| s.weight).sum::<u64>(), total);
    let leaf_is = |s: &eventpipe_insight::Sample, name: &str| {
        let stack = &p.stacks[s.stack];
        let leaf = &p.frames[*stack.last().unwrap()];
        leaf.function == name && leaf.kind == FrameKind::HeapType
    };
    let in_strings: u64 = p
        .samples
        .iter()
        .filter(|s| leaf_is(s, "Type System.String"))
        .map(|s| s.weight)
        .sum();
    assert_eq!(in_strings, strings);
}

#[test]
fn lock_waits_weigh_the_time_the_runtime_says_they_lasted() {
    let Some(bytes) = shared_trace("eventpipe-dotnetcore3.0-win-x64-objver4.nettrace") else {
        return;
    };
    // Contention/Start (81) carries the stack, Contention/Stop (91) the wait's DurationNs
    // (TraceEvent's baseline shows it for this runtime).
    assert_eq!(runtime_events(&bytes, 81, true).len(), 8);
    let stops = runtime_events(&bytes, 91, false);
    assert_eq!(stops.len(), 8);
    let total_ns: f64 = stops
        .iter()
        .map(|s| field(s, "DurationNs").as_f64().unwrap())
        .sum();
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let built = build_profile(&mut reader, SampleSelection::Contention).unwrap();
    let p = &built.profile;
    assert_eq!(p.unit, SampleUnit::LockWait);
    assert_eq!(p.samples.len(), 8);
    let weight: u64 = p.samples.iter().map(|s| s.weight).sum();
    // Each wait's nanoseconds, truncated.
    assert!(
        (weight as f64 - total_ns).abs() <= 8.0,
        "{weight} ns against the stops' {total_ns}"
    );
    // A trace without exceptions says so and what it has instead.
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let built = build_profile(&mut reader, SampleSelection::Exceptions).unwrap();
    assert!(built.profile.samples.is_empty());
    assert!(built
        .available
        .iter()
        .any(|(s, n)| *s == SampleSelection::Contention && *n == 8));
}
