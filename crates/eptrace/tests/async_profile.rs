//! `eptrace report` and `eptrace convert` on a trace with async-profiler data, written here
//! with `nettrace::write`: the report's async section (per-future counts and times, tasks
//! still pending at the end, a lost buffer), async-aware collapsed stacks and `--no-async-stacks`,
//! and poll spans in the Chrome output. The records are encoded from
//! docs/async-profiler-format.md; native addresses are named by .NET-style method events so
//! the stacks are exact without a binary on disk.

use std::path::PathBuf;
use std::process::{Command, Output};

use eventpipe_insight::async_trace::{encode_records, AsyncFrameId, ContextId, Record};
use eventpipe_test_support::trace::{
    async_buffer, async_frame, async_profiler_metadata, async_profiler_rows, md, method_load,
    method_load_row, TraceBuilder,
};
use nettrace::{FieldType, FormatVersion};
use serde_json::Value;

const MAIN: u64 = 100;
const WORKER: u64 = 200;
const WRAPPER_NS: &str =
    "<eventpipe_profiler::futures::Profiled<F> as core::future::future::Future>";

/// Milliseconds as ticks (the writer's clock is nanoseconds).
fn ms(v: f64) -> i64 {
    (v * 1_000_000.0) as i64
}

/// (ms, kind, ctx, frame, parent) → one buffer's records (kinds as the format numbers them).
fn records(base: i64, recs: &[(f64, u64, u64, u32, Option<u64>)]) -> Vec<u8> {
    let recs: Vec<Record> = recs
        .iter()
        .map(|&(at, kind, c, f, parent)| {
            let (ts, ctx, frame) = (ms(at), ContextId(c), AsyncFrameId(f));
            match kind {
                0 => Record::Create {
                    ts,
                    ctx,
                    frame,
                    parent: parent.map(ContextId),
                },
                1 => Record::Resume { ts, ctx, frame },
                2 => Record::Suspend { ts },
                3 => Record::Complete { ts },
                4 => Record::Unwind { ts },
                6 => Record::Drop { ts, ctx },
                other => panic!("no record kind {other} in these tests"),
            }
        })
        .collect();
    encode_records(&recs, base)
}

fn buffer(
    thread: u64,
    sequence: u32,
    base: i64,
    recs: &[(f64, u64, u64, u32, Option<u64>)],
) -> Vec<u8> {
    async_buffer(thread, sequence, base, &records(base, recs))
}

/// serve (frame 1, ctx 10) creates three handles (frame 2): 11 completes, 13 panics, 12 is
/// cancelled; a second serve (20) is never polled. The worker's first buffer in the trace is
/// its fourth (the session started late: not a loss), then one is lost.
fn write_trace() -> Vec<u8> {
    use FieldType::{UInt32, UInt64};
    let mut metadata = vec![
        method_load_row(1, "Test-Methods"),
        md(
            2,
            "EventPipeRs-CpuSampler",
            "Sample",
            &[("State", UInt32), ("AsyncContext", UInt64)],
        ),
    ];
    metadata.extend(async_profiler_rows([3, 4, 5]));
    let (method, frame) = (method_load, async_frame);
    let reference = async_profiler_metadata(0, 1_000_000_000, 0);
    let mut sample = 1u32.to_le_bytes().to_vec();
    sample.extend(11u64.to_le_bytes());
    // (thread, ticks, metadata id, payload, has the stack)
    let events: Vec<(u64, i64, u32, Vec<u8>, bool)> = vec![
        (MAIN, 1, 1, method(0x1000, "", "main"), false),
        (MAIN, 2, 1, method(0x2000, "executor", "block_on"), false),
        (MAIN, 3, 1, method(0x3000, WRAPPER_NS, "poll"), false),
        (
            MAIN,
            4,
            1,
            method(0x4000, "app::serve", "{{closure}}"),
            false,
        ),
        (
            MAIN,
            5,
            1,
            method(0x5000, "app::handle", "{{closure}}"),
            false,
        ),
        (MAIN, 6, 1, method(0x6000, "", "memcpy"), false),
        (MAIN, 7, 3, reference, false),
        (
            MAIN,
            8,
            4,
            frame(1, "app::serve", "src/serve.rs", 10),
            false,
        ),
        (
            MAIN,
            9,
            4,
            frame(2, "app::handle", "src/handle.rs", 20),
            false,
        ),
        (MAIN, ms(3.0), 2, sample, true),
        (
            MAIN,
            ms(9.5),
            5,
            buffer(
                MAIN,
                0,
                0,
                &[
                    (1.0, 0, 10, 1, None),
                    (1.0, 1, 10, 1, None),
                    (1.5, 0, 11, 2, Some(10)),
                    (1.6, 0, 12, 2, Some(10)),
                    (1.7, 0, 13, 2, Some(10)),
                    (2.0, 1, 11, 2, None),
                    (4.0, 3, 0, 0, None),
                    (4.0, 1, 13, 2, None),
                    (4.5, 4, 0, 0, None),
                    (5.0, 6, 12, 0, None),
                    (6.0, 2, 0, 0, None),
                    (7.0, 0, 20, 1, None),
                ],
            ),
            false,
        ),
        (
            WORKER,
            ms(9.2),
            5,
            buffer(
                WORKER,
                3,
                ms(7.5),
                &[(8.0, 1, 30, 2, None), (9.0, 2, 0, 0, None)],
            ),
            false,
        ),
        (
            WORKER,
            ms(10.0),
            5,
            buffer(
                WORKER,
                5,
                ms(9.5),
                &[(9.5, 1, 30, 2, None), (9.6, 2, 0, 0, None)],
            ),
            false,
        ),
    ];
    let stack = [0x6000u64, 0x5010, 0x3010, 0x4010, 0x3010, 0x2010, 0x1010];
    let mut trace = TraceBuilder::new(FormatVersion::V5).metadata(metadata);
    for (thread, ts, id, payload, has_stack) in events {
        let stack: &[u64] = if has_stack { &stack } else { &[] };
        trace = trace.event_with_stack(thread, ts, id, payload, stack);
    }
    trace.build()
}

fn trace_file(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.nettrace"));
    std::fs::write(&path, write_trace()).unwrap();
    path
}

fn run(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(args)
        .output()
        .expect("eptrace runs");
    assert!(
        out.status.success(),
        "eptrace {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn close(a: &Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 1e-6)
}

#[test]
fn report_has_an_async_section() {
    let path = trace_file("async-report");
    let path = path.to_str().unwrap();
    let out = run(&["report", "--json", path]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = &r["async_profile"];
    let frames = a["frames"].as_array().unwrap();
    assert_eq!(frames.len(), 2, "{a:#}");
    let serve = &frames[0];
    assert_eq!(serve["name"], "app::serve");
    assert_eq!(serve["file"], "src/serve.rs");
    assert_eq!(serve["line"], 10);
    let counts = |f: &Value| -> Vec<u64> {
        let keys = "created polls completed cancelled panicked pending";
        keys.split(' ').map(|k| f[k].as_u64().unwrap()).collect()
    };
    assert_eq!(counts(serve), [2, 1, 0, 0, 0, 2]);
    assert!(close(&serve["running_ms"], 5.0), "{serve}");
    // First poll at 1 ms, trace end at 10 ms, 5 ms running.
    assert!(close(&serve["suspended_ms"], 4.0), "{serve}");
    assert!(close(&serve["mean_poll_us"], 5000.0), "{serve}");
    let handle = &frames[1];
    assert_eq!(handle["name"], "app::handle");
    // 11 completed, 12 cancelled, 13 panicked, 30 (the worker's, created before the
    // session) pending after two polls.
    assert_eq!(counts(handle), [3, 4, 1, 1, 1, 1]);
    assert!(close(&handle["running_ms"], 3.6), "{handle}");
    // 30: from its first poll at 8 ms to the end at 10 ms, 1.1 ms of it running.
    assert!(close(&handle["suspended_ms"], 0.9), "{handle}");
    assert!(close(&handle["mean_poll_us"], 900.0), "{handle}");

    let roots = a["pending_roots"].as_array().unwrap();
    let roots: Vec<(u64, &str, f64)> = roots
        .iter()
        .map(|r| {
            (
                r["context"].as_u64().unwrap(),
                r["frame"].as_str().unwrap(),
                r["alive_ms"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(roots, [(10, "app::serve", 9.0), (20, "app::serve", 3.0)]);
    let d = &a["diagnostics"];
    assert_eq!(d["buffers"], 3);
    assert_eq!(d["lost_buffers"], 1);
    assert_eq!(d["lost_by_thread"][0]["thread_id"], WORKER);

    let text = String::from_utf8(run(&["report", path]).stdout).unwrap();
    for needle in [
        "async futures (2 instrumented sites",
        "app::serve  (src/serve.rs:10)",
        "async tasks still pending when the trace ended (root futures not yet complete) (2):",
        "ctx 20  app::serve",
        "1 buffer lost (tid 200: 1)",
        "async app::serve",
    ] {
        assert!(text.contains(needle), "no {needle:?} in\n{text}");
    }
}

#[test]
fn convert_splices_async_stacks_unless_told_not_to() {
    let path = trace_file("async-convert");
    let path = path.to_str().unwrap();
    let folded = |extra: &[&str]| {
        let mut args = vec!["convert", "--format", "collapsed", "-o", "-"];
        args.extend_from_slice(extra);
        args.push(path);
        String::from_utf8(run(&args).stdout).unwrap()
    };
    // One 1 ms sample: 1000 µs of CPU time.
    assert_eq!(
        folded(&[]),
        "main;executor.block_on;async app::serve;async app::handle;app::handle.{{closure}};memcpy 1000\n"
    );
    let native = folded(&["--no-async-stacks"]);
    assert!(!native.contains("async app::"), "{native}");
    assert!(
        native.contains(&format!("{WRAPPER_NS}.poll;app::serve.{{{{closure}}}}")),
        "{native}"
    );

    let chrome = run(&["convert", "--format", "chrome", "-o", "-", path]);
    let doc: Value = serde_json::from_slice(&chrome.stdout).unwrap();
    let polls: Vec<(&str, &str)> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["args"].get("ctx").is_some())
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                // Written unless the poll returned Pending.
                e["args"]["ended"].as_str().unwrap_or("pending"),
            )
        })
        .collect();
    assert_eq!(polls.len(), 5, "{polls:?}");
    // Named by the frame's last path segment (app::handle): the frames' names tell apart.
    assert!(polls.contains(&("handle", "unwind")), "{polls:?}");
    assert!(String::from_utf8_lossy(&chrome.stderr).contains("5 async polls"));
}

/// `analyze --async` on the known polls: serve's one outermost poll runs 1.0-6.0 ms, with
/// handle 11's 2.0-4.0 ms and handle 13's 4.0-4.5 ms inside it; serve 10 and serve 20
/// never finish.
#[test]
fn analyze_finds_polls_at_the_threshold_and_the_future_inside_that_kept_the_thread() {
    let path = trace_file("analyze-async");
    let file = path.to_str().unwrap();
    let analyze = |long_poll: &str| -> Value {
        let out = run(&[
            "analyze",
            "--async",
            "--json",
            "--long-poll",
            long_poll,
            file,
        ]);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let rules = |a: &Value| -> Vec<String> {
        a["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["rule"].as_str().unwrap().to_owned())
            .collect()
    };
    // At its threshold the 5 ms poll is long; just above it, nothing is.
    let at = analyze("5");
    assert_eq!(at["async"]["long_polls"], 1, "{at}");
    assert!(close(&at["async"]["longest_poll_ms"], 5.0));
    assert_eq!(rules(&at), ["async-long-poll"]);
    let above = analyze("5.001");
    assert_eq!(above["async"]["long_polls"], 0);
    assert!(rules(&above).is_empty(), "{above}");
    // At 2 ms, handle's 2 ms poll inside serve's is the one named, under serve.
    let two = analyze("2");
    let longest = &two["async"]["longest"][0];
    assert_eq!(longest["future"], "app::handle", "{two}");
    assert_eq!(
        longest["callstack"],
        serde_json::json!(["app::handle", "app::serve"])
    );
    assert!(close(&longest["ms"], 2.0));
    let by_future: Vec<&str> = two["async"]["by_future"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["future"].as_str().unwrap())
        .collect();
    assert_eq!(by_future, ["app::serve", "app::handle"]);
    let pending: Vec<&str> = two["async"]["never_completed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["future"].as_str().unwrap())
        .collect();
    assert_eq!(pending, ["app::serve", "app::serve"]);
    // A threshold that is not a positive number is refused, naming the flag's unit.
    let out = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(["analyze", "--long-poll", "0", file])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("positive number of milliseconds"));
    std::fs::remove_file(&path).ok();
}
