//! `eptrace demo`, the README's first command, end to end: a real workload process, attached
//! over IPC from its first event, traced with stacks, converted and reported.

use std::process::Command;

#[test]
fn the_demo_traces_its_workload_and_writes_every_view() {
    let dir = std::env::temp_dir().join(format!("eptrace-demo-test-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(["demo", "--duration", "2s", "-o"])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for file in [
        "trace.nettrace",
        "trace.svg",
        "trace.speedscope.json",
        "trace.timeline.json",
    ] {
        assert!(dir.join(file).is_file(), "{file} missing\n{stdout}");
    }
    assert!(stdout.contains("0 events lost"), "{stdout}");
    assert!(
        stdout.contains("hottest functions (CPU samples"),
        "{stdout}"
    );

    // The flame graph's data: CPU samples whose stacks reach from the workload's threads
    // into its two hot paths (frame pointers make whole stacks), which take most of the CPU.
    let folded = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(["convert", "-f", "collapsed", "-o", "-"])
        .arg(dir.join("trace.nettrace"))
        .output()
        .unwrap();
    assert!(folded.status.success());
    let folded = String::from_utf8_lossy(&folded.stdout);
    let weight_of = |needle: &str| -> u64 {
        folded
            .lines()
            .filter(|l| l.contains(needle))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let total = weight_of("");
    let checksum = weight_of("workload::cruncher;eptrace::demo::workload::checksum_block");
    let sort = weight_of("workload::cruncher;eptrace::demo::workload::sort_block");
    assert!(
        checksum > 10 && sort > 10,
        "checksum {checksum}, sort {sort}\n{folded}"
    );
    assert!(
        (checksum + sort) * 5 >= total * 2,
        "the hot paths hold {checksum} + {sort} of {total} samples\n{folded}"
    );
    // The async worker's futures: in the report, and as async frames in the flame graph
    // (CPU samples inside `render` under `serve > handle_request`).
    assert!(stdout.contains("async futures"), "{stdout}");
    assert!(
        stdout.contains("eptrace::demo::workload::handle_request"),
        "{stdout}"
    );
    assert!(
        weight_of(
            "async eptrace::demo::workload::serve;async eptrace::demo::workload::handle_request;async eptrace::demo::workload::render"
        ) > 0,
        "{folded}"
    );
    // The timeline: the async worker's polls as slices on its thread, each named by its
    // future (the full path once, in the frame's AsyncFrame instant) with its context.
    let timeline: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("trace.timeline.json")).unwrap()).unwrap();
    let events = timeline["traceEvents"].as_array().unwrap();
    let polls: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["args"].get("ctx").is_some())
        .collect();
    assert!(polls.len() > 100, "{} polls", polls.len());
    for name in ["serve", "handle_request", "parse", "render"] {
        assert!(polls.iter().any(|e| e["name"] == name), "no {name} poll");
        let frames = events
            .iter()
            .filter(|e| e["args"]["Name"] == format!("eptrace::demo::workload::{name}"))
            .count();
        assert_eq!(frames, 1, "{name}'s AsyncFrame instant");
    }
    std::fs::remove_dir_all(&dir).ok();
}
