//! `eptrace record` of programs that serve the diagnostics protocol: their own EventPipe
//! session's events join the perf samples in the one V6 trace, on the samples' clock.
//!
//! * A Rust program (`busy-marks`) whose `spinner` thread spins for a known time, writes an
//!   event the moment the loop ends, then sleeps: every event lands after its loop's
//!   samples (the last within a few sampling periods) and before the next loop's (no sample
//!   of the thread in the sleep after it). The trace reads back with as many samples and
//!   events as `record` said it wrote, and with every round the program wrote; cut short,
//!   it still reads up to its last whole block.
//! * A .NET 8 program (`AnalyzeApp`, recorded by pid while it runs its scenarios): its
//!   JIT'd methods named in the perf samples from the session's method rundown, frames in
//!   `libcoreclr.so` and in the kernel, and its runtime's GC events in the same trace, one
//!   per collection the runtime itself counted.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use eventpipe_test_support::dotnet::with_dotnet;
use nettrace::{TraceReader, Value};
use support::{eptrace_ok, text};

/// The number after `label` in `text` ("603 CPU samples" → 603 for "CPU samples").
fn count_before(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no `{label}` in {text}"));
    text[..at]
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count before `{label}` in {text}"))
}

/// One test at a time: each keeps the machine's cores busy, and the ordering test's loops
/// would share them.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "eptrace-record-events-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One event read back: its name, thread's name, time (ns on the samples' clock) and
/// payload fields.
struct Read {
    name: String,
    thread: Option<String>,
    time: i64,
    fields: Vec<(String, Value)>,
}

fn read_trace(bytes: &[u8], cut: bool) -> (Vec<Read>, Option<String>) {
    let mut reader = TraceReader::from_slice(bytes)
        .expect("the trace's header reads")
        .accept_truncation(cut);
    let mut events = Vec::new();
    while let Some(event) = reader.next_event().expect("every event reads") {
        events.push(Read {
            name: event.qualified_name(),
            thread: event.thread_name().map(str::to_owned),
            time: event.header.timestamp,
            fields: event
                .decode_payload()
                .map(|f| f.into_iter().map(|(n, v)| (n.to_owned(), v)).collect())
                .unwrap_or_default(),
        });
    }
    let truncation = reader.stats().truncation.map(|t| format!("{t:?}"));
    (events, truncation)
}

#[test]
fn a_rust_programs_events_land_between_the_samples_of_the_loops_around_them() {
    let _alone = alone();
    // Its default clock (the TSC where the CPU's is invariant, as here), then the monotonic
    // clock it falls back to elsewhere.
    let tsc = std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains("nonstop_tsc"));
    let default = if cfg!(target_arch = "x86_64") && tsc {
        "its clock is the TSC"
    } else {
        "its clock is CLOCK_MONOTONIC"
    };
    busy_marks_recorded(None, default);
    busy_marks_recorded(Some("monotonic"), "its clock is CLOCK_MONOTONIC");
    // --no-events: samples only, no session opened.
    let program = support::build_example("eventpipe", "busy-marks");
    let dir = scratch("busy-no-events");
    let trace = dir.join("busy.nettrace");
    let out = eptrace_ok(
        "record --no-events",
        &[
            "record",
            "--no-events",
            "-o",
            trace.to_str().unwrap(),
            "--",
            program.to_str().unwrap(),
            "--rounds",
            "2",
        ],
    );
    assert!(
        !text(&out.stderr).contains("EventPipe session"),
        "{}",
        text(&out.stderr)
    );
    let (events, _) = read_trace(&std::fs::read(&trace).unwrap(), false);
    assert!(events.iter().any(|e| e.name == "Universal.Events/cpu"));
    assert!(events.iter().all(|e| e.name.starts_with("Universal.")));
    std::fs::remove_dir_all(&dir).ok();
}

/// busy-marks recorded with `EVENTPIPE_CLOCK` set to `clock`, its clock said to be `said`.
fn busy_marks_recorded(clock: Option<&str>, expected_clock: &str) {
    let program = support::build_example("eventpipe", "busy-marks");
    let dir = scratch(&format!("busy-{}", clock.unwrap_or("default")));
    let trace = dir.join("busy.nettrace");
    let rounds = 12u64;
    let mut command = Command::new(env!("CARGO_BIN_EXE_eptrace"));
    command
        .args(["record", "-o", trace.to_str().unwrap(), "--"])
        .arg(&program)
        .args([
            "--rounds",
            &rounds.to_string(),
            "--busy-ms",
            "60",
            "--sleep-ms",
            "60",
        ]);
    match clock {
        Some(clock) => command.env("EVENTPIPE_CLOCK", clock),
        None => command.env_remove("EVENTPIPE_CLOCK"),
    };
    let out = command.output().expect("eptrace runs");
    let said = text(&out.stderr);
    eprintln!("{said}");
    assert!(out.status.success(), "{said}");
    assert!(said.contains("own EventPipe session"), "{said}");
    assert!(said.contains(expected_clock), "{said}");

    let bytes = std::fs::read(&trace).unwrap();
    let (events, _) = read_trace(&bytes, false);
    // Counts per kind: what record said it wrote, and what the program wrote.
    let cpu: Vec<&Read> = events
        .iter()
        .filter(|e| e.name == "Universal.Events/cpu")
        .collect();
    assert_eq!(
        cpu.len() as u64,
        count_before(&said, "CPU samples"),
        "{said}"
    );
    let own = events
        .iter()
        .filter(|e| !e.name.starts_with("Universal."))
        .count() as u64;
    assert_eq!(own, count_before(&said, "events of"), "{said}");
    let named = |name: &str| events.iter().filter(|e| e.name == name).count() as u64;
    assert_eq!(
        named("Universal.System/ProcessCreate"),
        count_before(&said, "processes")
    );
    let file_mappings = events
        .iter()
        .filter(|e| e.name == "Universal.System/ProcessMapping")
        .filter(|e| {
            e.fields
                .iter()
                .any(|(n, v)| n == "FileName" && v.as_str().is_some_and(|f| f != "vmlinux"))
        })
        .count() as u64;
    assert_eq!(file_mappings, count_before(&said, "mappings"), "{said}");
    let marks: Vec<&Read> = events
        .iter()
        .filter(|e| e.name == "BusyMarks/LoopEnd")
        .collect();
    assert_eq!(
        marks.len() as u64,
        rounds,
        "one event per round the program ran"
    );
    assert!(events
        .iter()
        .any(|e| e.name == "EventPipeRs-Rundown/Module"));

    // The spinner's samples, by time.
    let mut spins: Vec<i64> = cpu
        .iter()
        .filter(|e| e.thread.as_deref() == Some("spinner"))
        .map(|e| e.time)
        .collect();
    spins.sort_unstable();
    assert!(
        spins.len() as u64 >= rounds * 40,
        "{} spinner samples",
        spins.len()
    );
    let ms = 1_000_000i64;
    let mut gaps = Vec::new();
    for mark in &marks {
        assert_eq!(mark.thread.as_deref(), Some("spinner"));
        let end = mark.time;
        let before = spins.iter().rev().find(|&&t| t <= end).copied();
        // After writing the event the thread runs on into its sleep for some µs: a sample
        // may fall there. The loop's own (a clock off by a millisecond) may not.
        let after = spins.iter().find(|&&t| t > end + ms / 2).copied();
        let before = before.expect("the loop's samples come before its event");
        // The loop ran up to the event: its last sample a period or so before (held over
        // the rounds below: a thread preempted at its loop's end makes one gap longer).
        gaps.push(end - before);
        // The thread slept 60 ms after the event: the next sample is the next loop's.
        if let Some(after) = after {
            assert!(
                after - end >= 50 * ms,
                "a sample {} µs after the event, in the sleep after it",
                (after - end) / 1000
            );
        }
        let busy = match mark.fields.iter().find(|(n, _)| n == "busy_ns") {
            Some((_, v)) => v.as_u64().unwrap() as i64,
            None => panic!("LoopEnd has busy_ns"),
        };
        let in_loop = spins
            .iter()
            .filter(|&&t| t > end - busy && t <= end)
            .count() as i64;
        assert!(
            in_loop * ms >= busy / 2,
            "{in_loop} samples in a {} ms loop",
            busy / ms
        );
    }
    gaps.sort_unstable();
    let median = gaps[gaps.len() / 2];
    assert!(
        median <= 2 * ms && gaps.iter().all(|&g| g <= 30 * ms),
        "from each loop's last sample to its event, µs: {:?}",
        gaps.iter().map(|g| g / 1000).collect::<Vec<_>>()
    );

    // Cut anywhere, the trace reads up to its last whole block, the events it keeps those
    // of the whole trace.
    for cut in [
        bytes.len() / 4,
        bytes.len() / 2,
        bytes.len() * 3 / 4,
        bytes.len() - 1,
    ] {
        let (kept, truncation) = read_trace(&bytes[..cut], true);
        assert!(truncation.is_some(), "a cut at {cut} is reported");
        assert!(kept.len() < events.len() || cut == bytes.len() - 1);
        for (a, b) in kept.iter().zip(&events) {
            assert_eq!((&a.name, a.time), (&b.name, b.time), "cut at {cut}");
        }
        if cut == bytes.len() - 1 {
            assert!(
                kept.len() * 2 > events.len(),
                "{} of {} kept",
                kept.len(),
                events.len()
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_dotnet_8_program_has_its_methods_runtime_and_kernel_in_the_samples_and_its_events_beside() {
    let _alone = alone();
    with_dotnet(|dotnet| {
        let dir = scratch("dotnet");
        let trace = dir.join("app.nettrace");
        let mut app = Command::new(&dotnet.dotnet8)
            .arg(&dotnet.analyzeapp)
            .args(["--wait", "--hold"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the app starts");
        let mut lines = BufReader::new(app.stdout.take().unwrap()).lines();
        let mut pid = 0u32;
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some(p) = line.strip_prefix("pid ") {
                pid = p.parse().unwrap();
            }
            if line == "ready" {
                break;
            }
        }
        let mut record = Command::new(env!("CARGO_BIN_EXE_eptrace"))
            .args([
                "record",
                "-p",
                &pid.to_string(),
                "-o",
                trace.to_str().unwrap(),
            ])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = BufReader::new(record.stderr.take().unwrap());
        let mut first = String::new();
        said.read_line(&mut first).unwrap();
        assert!(first.starts_with("Recording"), "{first}");
        // The work starts once the session has.
        let mut opened = String::new();
        said.read_line(&mut opened).unwrap();
        assert!(opened.contains("EventPipe session is open"), "{opened}");
        let mut stdin = app.stdin.take().unwrap();
        writeln!(stdin).unwrap();
        let mut truth = std::collections::BTreeMap::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some((k, v)) = line.split_once(' ') {
                truth.insert(k.to_owned(), v.to_owned());
            }
            if line.starts_with("done") {
                break;
            }
        }
        Command::new("kill")
            .args(["-INT", &record.id().to_string()])
            .status()
            .unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut said, &mut rest).unwrap();
        assert!(record.wait().unwrap().success(), "{first}{opened}{rest}");
        writeln!(stdin).ok();
        app.wait().ok();
        let said = format!("{first}{opened}{rest}");
        eprintln!("{said}");
        assert!(
            said.contains("own EventPipe session; its clock is CLOCK_MONOTONIC"),
            "{said}"
        );

        let bytes = std::fs::read(&trace).unwrap();
        let (events, _) = read_trace(&bytes, false);
        let gcs = events
            .iter()
            .filter(|e| e.name == "Microsoft-Windows-DotNETRuntime/GC/Start")
            .count() as u64;
        let number = |k: &str| truth[k].parse::<u64>().unwrap();
        eprintln!(
            "GC/Start: {gcs}; the runtime: {} - {}",
            number("gc0"),
            number("start_gc0")
        );
        assert_eq!(
            gcs,
            number("gc0") - number("start_gc0"),
            "a GC/Start for every collection the runtime counted while recorded"
        );
        let frames = support::speedscope_frames(&trace);
        let named =
            |what: &dyn Fn(&(String, String)) -> bool| frames.iter().filter(|f| what(f)).count();
        // The hot method, and the caller every stack of the main thread passes through.
        for method in ["AnalyzeApp.Collections", "AnalyzeApp.Main"] {
            assert!(
                named(&|f| f.0.starts_with(method)) > 0,
                "{method} among the sampled frames: {frames:?}"
            );
        }
        assert!(
            named(&|f| f.1.contains("libcoreclr.so")) > 0,
            "frames in libcoreclr.so"
        );
        assert!(named(&|f| f.1.contains("vmlinux")) > 0, "kernel frames");
        std::fs::remove_dir_all(&dir).ok();
    });
}
