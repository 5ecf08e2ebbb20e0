//! A trace much larger than the memory it should take: `report`, `dump` and `convert` read
//! a generated 1.5 GB trace with their resident memory bounded (ARCHITECTURE.md, "From
//! trace to insight": the map's pages are given back once every reader has passed them),
//! checked by sampling each process's peak resident set (`VmHWM`) while it runs.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{EventHeader, EventMetadata, FormatVersion, TraceInfo};

const BLOCKS: u32 = 1500;
const EVENTS_PER_BLOCK: u32 = 32;
const PAYLOAD: usize = 32 * 1024;

/// 1500 blocks of 32 events of 32 KiB: 1.5 GB, 48,000 events, a sequence point every 16
/// blocks.
fn big_trace() -> PathBuf {
    let path = std::env::temp_dir().join(format!("eptrace-big-{}.nettrace", std::process::id()));
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut w = TraceWriter::new(file, &TraceInfo::new(FormatVersion::V5, 8)).unwrap();
    w.write_metadata_block(&[EventMetadata {
        metadata_id: 1,
        provider: "Big".into(),
        event_name: "Chunk".into(),
        ..Default::default()
    }])
    .unwrap();
    let payload = vec![0x5Au8; PAYLOAD];
    let mut seq = 0u32;
    for _ in 0..BLOCKS {
        let mut b = EventBlockBuilder::new(FormatVersion::V5);
        for _ in 0..EVENTS_PER_BLOCK {
            seq += 1;
            let h = EventHeader {
                metadata_id: 1,
                sequence_number: seq,
                timestamp: i64::from(seq) * 1000,
                ..Default::default()
            };
            b.push(&h, &payload);
        }
        w.write_event_block(&mut b).unwrap();
        // A sequence point every 16 blocks, as a runtime writes them: the sorted pass holds
        // one region between them.
        if seq % (16 * EVENTS_PER_BLOCK) == 0 {
            w.write_sequence_point(i64::from(seq) * 1000, 0, &[])
                .unwrap();
        }
    }
    w.finish().unwrap();
    path
}

/// Runs eptrace with `args`, sampling its peak resident set; returns (stdout, peak kB).
fn run_sampled(args: &[&str]) -> (String, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut peak = 0u64;
    let began = Instant::now();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let mut lines = 0usize;
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            lines += 1;
            if out.len() < 1 << 20 {
                out.push_str(&line);
                out.push('\n');
            }
        }
        (out, lines)
    });
    while child.try_wait().unwrap().is_none() {
        if let Some(kb) = support::peak_resident_kb(child.id()) {
            peak = peak.max(kb);
        }
        assert!(
            began.elapsed() < Duration::from_secs(600),
            "eptrace {args:?} hung"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = child.wait().unwrap();
    // The exact peak of the children so far (each must stay under the bound, so their
    // largest does too), however briefly it lasted.
    peak = peak.max(support::children_peak_resident_kb());
    let (out, lines) = reader.join().unwrap();
    println!(
        "eptrace {args:?}: {:?}, peak resident {peak} kB",
        began.elapsed()
    );
    assert!(status.success(), "eptrace {args:?}: {status}");
    (format!("{out}lines: {lines}\n"), peak)
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn a_trace_larger_than_memory_reads_in_bounded_memory() {
    let trace = big_trace();
    let t = trace.to_str().unwrap();
    let bytes = size(&trace);
    assert!(bytes > 1_500_000_000, "{bytes}");
    let bound_kb = 300 * 1024;

    let (out, peak) = run_sampled(&["report", "--json", t]);
    let report: serde_json::Value =
        serde_json::from_str(out.split("lines: ").next().unwrap()).unwrap();
    assert_eq!(
        report["total_events"].as_u64(),
        Some(u64::from(BLOCKS * EVENTS_PER_BLOCK))
    );
    assert!(
        peak < bound_kb,
        "report peaked at {peak} kB on a {bytes}-byte trace"
    );

    let (out, peak) = run_sampled(&["dump", "--no-payload", t]);
    assert!(
        out.ends_with(&format!("lines: {}\n", BLOCKS * EVENTS_PER_BLOCK)),
        "{}",
        &out[out.len().saturating_sub(100)..]
    );
    assert!(
        peak < bound_kb,
        "dump peaked at {peak} kB on a {bytes}-byte trace"
    );

    let timeline =
        std::env::temp_dir().join(format!("eptrace-big-{}.timeline.json", std::process::id()));
    let (_, peak) = run_sampled(&[
        "convert",
        "-f",
        "chrome",
        "-o",
        timeline.to_str().unwrap(),
        t,
    ]);
    assert!(size(&timeline) > 0);
    assert!(
        peak < bound_kb,
        "convert peaked at {peak} kB on a {bytes}-byte trace"
    );
    let _ = std::fs::remove_file(&timeline);
    let _ = std::fs::remove_file(&trace);
}
