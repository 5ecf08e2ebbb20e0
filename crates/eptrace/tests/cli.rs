//! Runs the real `eptrace` binary on the real traces in `../shared/traces`.
//!
//! Each test that needs a trace prints one `skipping <test>: ../shared/traces is absent`
//! line and passes when that folder is missing (as it is outside this workplace).

mod support;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");
const OBJVER4: &str = "eventpipe-dotnetcore3.0-win-x64-objver4.nettrace";
const ARRAYTYPES: &str = "eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace";
const V6_SMALL: &str = "onecollect-v6-small.nettrace";

/// The path of trace `name`, or `None` (after printing the skip line) when the traces are
/// absent.
fn trace(test: &str, name: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(TRACES);
    if !dir.is_dir() {
        println!("skipping {test}: ../shared/traces is absent");
        return None;
    }
    Some(dir.join(name))
}

/// Trace `name` copied as `managed.nettrace` into a fresh folder `eptrace-FOLDER-PID` of the
/// temp dir, so what is written next to it can be checked: (the folder, the copy), or `None`
/// as `trace` says.
fn trace_in_a_folder(test: &str, name: &str, folder: &str) -> Option<(PathBuf, PathBuf)> {
    let src = trace(test, name)?;
    let dir = std::env::temp_dir().join(format!("eptrace-{folder}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("managed.nettrace");
    std::fs::copy(&src, &path).unwrap();
    Some((dir, path))
}

fn eptrace(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_eptrace"));
    cmd.args(args);
    cmd
}

fn run(args: &[&str]) -> Output {
    eptrace(args).output().expect("eptrace runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "eptrace failed: {:?}\nstderr: {}",
        out.status,
        stderr(out)
    );
}

fn report_json(path: &str) -> Value {
    let out = run(&["report", "--json", path]);
    assert_ok(&out);
    serde_json::from_slice(&out.stdout).expect("report --json prints JSON")
}

#[test]
fn report_json_objver4() {
    let Some(path) = trace("report_json_objver4", OBJVER4) else {
        return;
    };
    let r = report_json(path.to_str().unwrap());
    assert_eq!(
        r["event_counts"]["Microsoft-Windows-DotNETRuntime/GC/Start"],
        478
    );
    assert_eq!(
        r["event_counts"]["Microsoft-DotNETCore-SampleProfiler/Thread/Sample"],
        35161
    );
    assert_eq!(r["time_order"]["ok"], true, "{}", r["time_order"]);
    assert_eq!(r["pointer_size"], 8);
    let version = r["format_version"]
        .as_str()
        .expect("format_version is a string");
    assert!(
        version.contains('4') || version.contains('5'),
        "format_version {version}"
    );
    let total = r["total_events"].as_u64().unwrap();
    let counted: u64 = r["event_counts"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(counted, total, "event_counts add up to total_events");
    let by_provider: u64 = r["events_by_provider"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(by_provider, total);
    let by_thread: u64 = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["events"].as_u64().unwrap())
        .sum();
    assert_eq!(by_thread, total);
    assert_eq!(r["time_order"]["sorted_events"].as_u64(), Some(total));
    assert_eq!(
        r["file_bytes"].as_u64(),
        Some(std::fs::metadata(&path).unwrap().len())
    );
    assert!(r["start_time_utc"]
        .as_str()
        .unwrap()
        .starts_with("2019-06-15T"));
}

#[test]
fn report_text_v6_small() {
    let Some(path) = trace("report_text_v6_small", V6_SMALL) else {
        return;
    };
    let out = run(&["report", path.to_str().unwrap()]);
    assert_ok(&out);
    let text = stdout(&out);
    let total = text
        .lines()
        .find_map(|l| l.strip_prefix("total events:"))
        .expect("a total events line");
    assert_eq!(total.split_whitespace().next(), Some("50"), "{text}");
    assert!(text.contains("time order:      ok"), "{text}");
    assert!(text.contains("Universal.Events/cpu"), "{text}");
}

#[test]
fn report_text_top_limits_rows() {
    let Some(path) = trace("report_text_top_limits_rows", OBJVER4) else {
        return;
    };
    let out = run(&["report", "--top", "3", path.to_str().unwrap()]);
    assert_ok(&out);
    let text = stdout(&out);
    // 37 event types: 3 shown, then the rest summed up.
    assert!(text.contains("... and 34 more"), "{text}");
}

#[test]
fn report_from_stdin_matches_file() {
    let Some(path) = trace("report_from_stdin_matches_file", V6_SMALL) else {
        return;
    };
    let from_file = report_json(path.to_str().unwrap());
    let out = eptrace(&["report", "--json", "-"])
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    assert_ok(&out);
    let mut from_stdin: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(from_stdin["file"], "<stdin>");
    from_stdin["file"] = from_file["file"].clone();
    assert_eq!(from_stdin, from_file);
}

#[test]
fn dump_json_limit() {
    let Some(path) = trace("dump_json_limit", OBJVER4) else {
        return;
    };
    let out = run(&["dump", "--json", "--limit", "5", path.to_str().unwrap()]);
    assert_ok(&out);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    for line in lines {
        let v: Value = serde_json::from_str(line).expect("each line is JSON");
        let name = v["name"].as_str().unwrap();
        assert_eq!(
            name,
            format!(
                "{}/{}",
                v["provider"].as_str().unwrap(),
                v["event"].as_str().unwrap()
            )
        );
        assert!(
            v["msec"].is_f64() && v["thread_id"].is_u64() && v["timestamp"].is_i64(),
            "{line}"
        );
        assert!(
            v.get("payload").is_some() || v.get("payload_error").is_some(),
            "{line}"
        );
    }
}

#[test]
fn dump_event_filter_arraytypes() {
    let Some(path) = trace("dump_event_filter_arraytypes", ARRAYTYPES) else {
        return;
    };
    let out = run(&[
        "dump",
        "--event",
        "TestEvent1",
        "--json",
        path.to_str().unwrap(),
    ]);
    assert_ok(&out);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let v: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["payload"]["arg2"], 2033417279);
    assert_eq!(v["name"], "TestEventSource0/TestEvent1");
    assert_eq!(v["stack"].as_array().map(Vec::len), Some(10));

    // The full name matches too, ignoring case; other names do not.
    let out = run(&[
        "dump",
        "--event",
        "testeventsource0/testevent1",
        "--no-payload",
        path.to_str().unwrap(),
    ]);
    assert_ok(&out);
    assert_eq!(stdout(&out).lines().count(), 1);
    let out = run(&[
        "dump",
        "--provider",
        "TESTEVENTSOURCE0",
        path.to_str().unwrap(),
    ]);
    assert_ok(&out);
    assert_eq!(stdout(&out).lines().count(), 3);
}

#[test]
fn dump_sorted_is_in_time_order() {
    let Some(path) = trace("dump_sorted_is_in_time_order", OBJVER4) else {
        return;
    };
    let path = path.to_str().unwrap();
    let plain = run(&["dump", "--no-payload", path]);
    assert_ok(&plain);
    let sorted = run(&["dump", "--sorted", "--json", "--no-payload", path]);
    assert_ok(&sorted);
    let stamps: Vec<i64> = stdout(&sorted)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["timestamp"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(stamps.len(), stdout(&plain).lines().count());
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn dump_to_closed_pipe_exits_zero() {
    let Some(path) = trace("dump_to_closed_pipe_exits_zero", OBJVER4) else {
        return;
    };
    let mut child = eptrace(&["dump", path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 100];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap(); // then dropped: closed
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert_eq!(stderr(&out), "");
}

/// A real trace cut off at 60 % of its bytes, as a killed collector leaves it.
fn cut_trace(test: &str, name: &str) -> Option<(PathBuf, PathBuf)> {
    let path = trace(test, name)?;
    let bytes = std::fs::read(&path).unwrap();
    let cut = std::env::temp_dir().join(format!(
        "eptrace-cut-{}-{test}.nettrace",
        std::process::id()
    ));
    std::fs::write(&cut, &bytes[..bytes.len() * 6 / 10]).unwrap();
    Some((path, cut))
}

#[test]
fn a_cut_trace_is_read_to_its_last_whole_block_and_said_so() {
    let Some((whole, cut)) = cut_trace("cut_report", MANAGED_SAMPLES) else {
        return;
    };
    let cut_s = cut.to_str().unwrap();
    let full = report_json(whole.to_str().unwrap());
    let full_events = full["total_events"].as_u64().unwrap();

    // report: everything before the cut, the cut named, status 3.
    let out = run(&["report", "--json", cut_s]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let events = report["total_events"].as_u64().unwrap();
    assert!(
        events > 0 && events < full_events,
        "{events} of {full_events}"
    );
    let at = report["truncated"]["at_byte"].as_u64().unwrap();
    assert!(at <= std::fs::metadata(&cut).unwrap().len());
    let err = stderr(&out);
    assert!(err.starts_with("eptrace: warning: "), "{err}");
    assert!(err.contains(&format!("byte {at}")), "{err}");
    assert!(
        err.contains(&format!("the {events} events before it")),
        "{err}"
    );
    // The file order and the sorted pass agree on what was read.
    assert_eq!(
        report["time_order"]["sorted_events"].as_u64(),
        Some(events),
        "{report}"
    );
    let text = run(&["report", cut_s]);
    assert_eq!(text.status.code(), Some(3));
    assert!(stdout(&text).contains("CUT OFF:"), "{}", stdout(&text));

    // The same from a stream.
    let piped = eptrace(&["report", "--json", "-"])
        .stdin(std::fs::File::open(&cut).unwrap())
        .output()
        .unwrap();
    assert_eq!(piped.status.code(), Some(3));
    let piped: Value = serde_json::from_str(&stdout(&piped)).unwrap();
    assert_eq!(piped["total_events"].as_u64(), Some(events));

    // dump: one line per event read, status 3.
    let out = run(&["dump", "--json", "--no-payload", cut_s]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count() as u64, events);
    let sorted = run(&["dump", "--sorted", "--no-payload", cut_s]);
    assert_eq!(sorted.status.code(), Some(3));
    assert_eq!(stdout(&sorted).lines().count() as u64, events);

    // convert: the files are written from what was read, status 3.
    let speedscope = std::env::temp_dir().join(format!(
        "eptrace-cut-{}.speedscope.json",
        std::process::id()
    ));
    let out = run(&[
        "convert",
        "-f",
        "speedscope",
        "-o",
        speedscope.to_str().unwrap(),
        cut_s,
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let written: Value = serde_json::from_slice(&std::fs::read(&speedscope).unwrap()).unwrap();
    assert!(!written["profiles"].as_array().unwrap().is_empty());
    let _ = std::fs::remove_file(&speedscope);

    // --require-complete: an error naming the offset, status 1, nothing on stdout.
    let out = run(&["report", "--require-complete", cut_s]);
    let _ = std::fs::remove_file(&cut);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert!(err.starts_with("eptrace: "), "{err}");
    let after = err.split("byte ").nth(1).unwrap_or_default();
    assert!(
        after.starts_with(|c: char| c.is_ascii_digit()),
        "no byte offset in: {err}"
    );
}

#[test]
fn missing_file_fails_clearly() {
    let missing = std::env::temp_dir().join("eptrace-no-such-trace.nettrace");
    let out = run(&["report", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.starts_with("eptrace: cannot open "), "{err}");
    assert!(err.contains("eptrace-no-such-trace.nettrace"), "{err}");
    assert!(err.contains("No such file"), "{err}");
}

#[test]
fn usage_errors_exit_two() {
    assert_eq!(run(&["report"]).status.code(), Some(2));
    assert_eq!(
        run(&["dump", "--from", "5", "--to", "1", "x.nettrace"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(run(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(run(&["--help"]).status.code(), Some(0));
}

/// A heap snapshot has no time: its `convert` offers the profile formats only, in its help
/// and in what it accepts.
#[test]
fn snapshot_convert_offers_no_timeline() {
    for tool in ["heap", "gcdump"] {
        let help = stdout(&run(&[tool, "convert", "--help"]));
        for format in ["speedscope", "pprof", "flamegraph", "collapsed"] {
            assert!(help.contains(&format!("- {format}:")), "{tool}: {help}");
        }
        assert!(!help.contains("chrome"), "{tool}: {help}");
        let out = run(&[tool, "convert", "-f", "chrome", "x.snapshot"]);
        assert_eq!(out.status.code(), Some(2), "{tool}");
        assert!(
            stderr(&out).contains("invalid value 'chrome'"),
            "{tool}: {}",
            stderr(&out)
        );
    }
}

const MANAGED_SAMPLES: &str = "only_managed_samples.nettrace";

#[test]
fn report_shows_the_hottest_functions_of_a_cpu_trace() {
    let Some(path) = trace(
        "report_shows_the_hottest_functions_of_a_cpu_trace",
        MANAGED_SAMPLES,
    ) else {
        return;
    };
    let json = report_json(path.to_str().unwrap());
    // .NET's sampler measures thread time, and the report says so.
    let hot = support::thread_time_profile(&json, MANAGED_SAMPLES);
    assert_eq!(hot["weight_unit"], "nanoseconds of thread time");
    let samples = hot["samples"].as_u64().unwrap();
    assert_eq!(
        Some(samples),
        json["event_counts"]["Microsoft-DotNETCore-SampleProfiler/Thread/Sample"].as_u64()
    );
    let top = &hot["functions"][0];
    assert_eq!(top["function"], "NoNativeStacks.Program.FindByte");
    let self_sum: u64 = hot["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["self_weight"].as_u64().unwrap())
        .sum();
    assert_eq!(Some(self_sum), hot["total_weight"].as_u64());
    // The thread's first sample to its last: 0.446 ms to 10,423.080 ms (`eptrace dump`).
    assert_eq!(self_sum / 1_000_000, 10_422, "{self_sum} ns");
    let text = stdout(&run(&["report", path.to_str().unwrap()]));
    assert!(
        text.contains("7423 samples standing for 10.423 s of thread time"),
        "{text}"
    );
    assert!(
        text.contains("NoNativeStacks.Program.Main > NoNativeStacks.Program.Test"),
        "{text}"
    );
}

#[test]
fn convert_writes_every_format_next_to_the_trace() {
    let Some((dir, path)) = trace_in_a_folder(
        "convert_writes_every_format_next_to_the_trace",
        MANAGED_SAMPLES,
        "convert",
    ) else {
        return;
    };
    let out = run(&[
        "convert",
        "--format",
        "speedscope,chrome,pprof,flamegraph,collapsed",
        path.to_str().unwrap(),
    ]);
    assert_ok(&out);
    let err = stderr(&out);
    for suffix in [
        ".speedscope.json",
        ".timeline.json",
        ".pb.gz",
        ".svg",
        ".folded",
    ] {
        let file = dir.join(format!("managed{suffix}"));
        assert!(file.is_file(), "{suffix} missing; stderr: {err}");
        assert!(err.contains(&file.display().to_string()), "{err}");
    }
    // The folded stacks are exactly the trace's two distinct stacks, weighed in µs of
    // thread time: together the thread's first sample to its last (0.446 ms to
    // 10,423.080 ms, `eptrace dump`), not 7,423 × 1 ms.
    let folded = std::fs::read_to_string(dir.join("managed.folded")).unwrap();
    let mut lines: Vec<(&str, u64)> = folded
        .lines()
        .map(|l| {
            let (stack, us) = l.rsplit_once(' ').unwrap();
            (stack, us.parse().unwrap())
        })
        .collect();
    lines.sort();
    let main =
        "NoNativeStacks.Program.Main;NoNativeStacks.Program.Test;NoNativeStacks.Program.InnerLoop";
    let stacks: Vec<&str> = lines.iter().map(|l| l.0).collect();
    assert_eq!(
        stacks,
        [main, &format!("{main};NoNativeStacks.Program.FindByte")]
    );
    let total_us: u64 = lines.iter().map(|l| l.1).sum();
    assert!(
        (10_422_630..=10_422_640).contains(&total_us),
        "{total_us} µs"
    );
    let speedscope: Value =
        serde_json::from_slice(&std::fs::read(dir.join("managed.speedscope.json")).unwrap())
            .unwrap();
    let samples: usize = speedscope["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["samples"].as_array().unwrap().len())
        .sum();
    assert_eq!(samples, 7423);
    let chrome: Value =
        serde_json::from_slice(&std::fs::read(dir.join("managed.timeline.json")).unwrap()).unwrap();
    // Each GC SuspendEE and RestartEE begin/end pair (7,423 of each) is one slice.
    let slices = chrome["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .count();
    assert_eq!(slices, 2 * 7423);
    let svg = std::fs::read_to_string(dir.join("managed.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("FindByte"));

    // -o with one format; -o with two is a usage error.
    let one = dir.join("one.folded");
    assert_ok(&run(&[
        "convert",
        "-f",
        "collapsed",
        "-o",
        one.to_str().unwrap(),
        path.to_str().unwrap(),
    ]));
    assert_eq!(std::fs::read_to_string(&one).unwrap(), folded);
    let two = run(&[
        "convert",
        "-f",
        "collapsed,flamegraph",
        "-o",
        "x",
        path.to_str().unwrap(),
    ]);
    assert_eq!(two.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn converting_samples_the_trace_does_not_have_fails_and_writes_nothing() {
    let Some((dir, path)) = trace_in_a_folder(
        "converting_samples_the_trace_does_not_have_fails_and_writes_nothing",
        MANAGED_SAMPLES,
        "convert-none",
    ) else {
        return;
    };
    let out = run(&[
        "convert",
        "--samples",
        "alloc",
        "--format",
        "pprof,flamegraph,speedscope",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("nothing to convert") && err.contains("no allocation samples"),
        "{err}"
    );
    // It says what the trace has instead, and how to ask for it.
    assert!(
        err.contains("7423 .NET thread-time samples (--samples thread-time)"),
        "{err}"
    );
    let written: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(written, ["managed.nettrace"], "no file besides the trace");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn gcdump_report_of_a_trace_without_a_heap_dump_or_cut_short_fails_clearly() {
    let Some(src) = trace(
        "gcdump_report_of_a_trace_without_a_heap_dump",
        MANAGED_SAMPLES,
    ) else {
        return;
    };
    let out = run(&["gcdump", "report", src.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("no heap dump in the trace"), "{err}");
    // Cut in the middle of a block: the reader names the offset.
    let bytes = std::fs::read(&src).unwrap();
    let cut = std::env::temp_dir().join(format!(
        "eptrace-gcdump-cut-{}.nettrace",
        std::process::id()
    ));
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let out = run(&["gcdump", "report", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cannot read"), "{}", stderr(&out));
    std::fs::remove_file(&cut).ok();
}
