//! The Chrome Trace Event converter, on traces written here with `nettrace::write` (V5 and
//! V6: nested and interleaved Start/Stop pairs, an unmatched Stop, a Start never closed,
//! instants, an undecodable payload, thread names from V6 rows and from rundown, a process
//! name from ProcessInfo) and on the real traces in `../shared/traces`. The output is read
//! back with serde_json.

mod common;

use std::collections::BTreeMap;

use eventpipe_insight::chrome::MAX_OPEN_PER_KEY;
use eventpipe_insight::{
    write_chrome_trace, write_chrome_trace_knowing_rows, ChromeSummary, Error,
};
use eventpipe_test_support::trace::{
    async_buffer, async_frame, async_profiler_metadata, async_profiler_rows, md, utf16,
    MetadataExt, TraceBuilder,
};
use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{EventHeader, EventMetadata, FieldType, FormatVersion, TraceInfo, TraceReader};
use serde_json::{json, Value};

const PID: u64 = 4242;
const MAIN: u64 = 100;
const WORKER: u64 = 200;

const TICK: u32 = 1;
const REQUEST_START: u32 = 2;
const REQUEST_STOP: u32 = 3;
const SPAN_START: u32 = 4;
const SPAN_STOP: u32 = 5;
const WORK_START: u32 = 6;
const WORK_STOP: u32 = 7;
const RUNDOWN_THREAD: u32 = 8;
const PROCESS_INFO: u32 = 9;
const OTHER_SPAN_STOP: u32 = 10;

fn metadata() -> Vec<EventMetadata> {
    use FieldType::{UInt32, UInt64, Utf16String};
    vec![
        md(TICK, "Test", "Tick", &[("Count", UInt32)]),
        // Start/Stop by name alone (no opcode stated), as EventSource names them.
        md(
            REQUEST_START,
            "Test",
            "RequestStart",
            &[("Url", Utf16String)],
        ),
        md(REQUEST_STOP, "Test", "RequestStop", &[("Status", UInt32)]),
        // The tracing layer's spans: opcodes stated.
        md(
            SPAN_START,
            "Tracing",
            "SpanStart",
            &[("SpanId", UInt64), ("Name", Utf16String)],
        )
        .with_opcode(Some(1)),
        md(SPAN_STOP, "Tracing", "SpanStop", &[("SpanId", UInt64)]).with_opcode(Some(2)),
        // One name, the opcode telling Start from Stop (like the runtime's GC/Start).
        md(WORK_START, "Test", "Work", &[]).with_opcode(Some(1)),
        md(WORK_STOP, "Test", "Work", &[]).with_opcode(Some(2)),
        md(
            RUNDOWN_THREAD,
            "EventPipeRs-Rundown",
            "Thread",
            &[("ThreadId", UInt64), ("Name", Utf16String)],
        ),
        md(
            PROCESS_INFO,
            "Microsoft-DotNETCore-EventPipe",
            "ProcessInfo",
            &[
                ("CommandLine", Utf16String),
                ("OSInformation", Utf16String),
                ("ArchInformation", Utf16String),
            ],
        ),
        // Same event name as Tracing's stop, another provider: closes nothing of Tracing's.
        md(OTHER_SPAN_STOP, "Other", "SpanStop", &[("SpanId", UInt64)]).with_opcode(Some(2)),
    ]
}

fn span_start(id: u64, name: &str) -> Vec<u8> {
    let mut p = id.to_le_bytes().to_vec();
    p.extend(utf16(name));
    p
}

/// (thread, timestamp in ns, metadata id, payload), in time order.
fn events() -> Vec<(u64, i64, u32, Vec<u8>)> {
    let mut process_info = utf16("/usr/bin/demo --flag");
    process_info.extend(utf16("Linux"));
    process_info.extend(utf16("x64"));
    let mut rundown = WORKER.to_le_bytes().to_vec();
    rundown.extend(utf16("worker-2"));
    vec![
        (MAIN, 1_000, TICK, 1u32.to_le_bytes().to_vec()),
        (MAIN, 2_000, SPAN_START, span_start(1, "outer")),
        (WORKER, 2_500, SPAN_START, span_start(3, "on the worker")),
        (MAIN, 3_000, SPAN_START, span_start(2, "inner")),
        (MAIN, 3_500, OTHER_SPAN_STOP, 2u64.to_le_bytes().to_vec()),
        (MAIN, 4_000, SPAN_STOP, 2u64.to_le_bytes().to_vec()),
        (WORKER, 4_500, SPAN_STOP, 3u64.to_le_bytes().to_vec()),
        (MAIN, 5_000, REQUEST_START, utf16("/a")),
        (MAIN, 6_000, REQUEST_STOP, 200u32.to_le_bytes().to_vec()),
        (MAIN, 7_000, SPAN_STOP, 1u64.to_le_bytes().to_vec()),
        (MAIN, 8_000, SPAN_STOP, 9u64.to_le_bytes().to_vec()),
        (WORKER, 8_500, WORK_STOP, Vec::new()),
        (MAIN, 9_000, WORK_START, Vec::new()),
        // Two bytes of a four-byte field: does not decode.
        (WORKER, 9_500, TICK, vec![1, 2]),
        (MAIN, 10_000, RUNDOWN_THREAD, rundown),
        (MAIN, 10_500, PROCESS_INFO, process_info),
    ]
}

/// The trace of `events()`, ticks in nanoseconds from 0.
fn write_trace(version: FormatVersion) -> Vec<u8> {
    TraceBuilder::new(version)
        .process_id(PID)
        .metadata(metadata())
        .thread(MAIN, Some("main-thread"))
        .thread(WORKER, None)
        .events(events())
        .build()
}

fn convert(bytes: &[u8]) -> (Value, ChromeSummary) {
    let mut reader = TraceReader::from_slice(bytes).unwrap();
    let mut out = Vec::new();
    let summary = write_chrome_trace(&mut reader, &mut out).unwrap();
    (serde_json::from_slice(&out).expect("valid JSON"), summary)
}

fn of_phase<'a>(doc: &'a Value, ph: &str) -> Vec<&'a Value> {
    doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == ph)
        .collect()
}

#[test]
fn start_stop_pairs_become_complete_events() {
    for version in [FormatVersion::V5, FormatVersion::V6] {
        let (doc, summary) = convert(&write_trace(version));
        let ctx = format!("{version}");

        let mut complete: Vec<(String, String, u64, f64, f64)> = of_phase(&doc, "X")
            .iter()
            .map(|e| {
                assert_eq!(e["pid"], PID, "{ctx}");
                (
                    e["name"].as_str().unwrap().to_owned(),
                    e["cat"].as_str().unwrap().to_owned(),
                    e["tid"].as_u64().unwrap(),
                    e["ts"].as_f64().unwrap(),
                    e["dur"].as_f64().unwrap(),
                )
            })
            .collect();
        complete.sort_by(|a, b| a.3.total_cmp(&b.3));
        let want = [
            ("outer", "Tracing", MAIN, 2.0, 5.0),
            ("on the worker", "Tracing", WORKER, 2.5, 2.0),
            ("inner", "Tracing", MAIN, 3.0, 1.0),
            // No Name field: the base name.
            ("Request", "Test", MAIN, 5.0, 1.0),
        ];
        let want: Vec<(String, String, u64, f64, f64)> = want
            .iter()
            .map(|&(n, c, t, ts, d)| (n.to_owned(), c.to_owned(), t, ts, d))
            .collect();
        assert_eq!(complete, want, "{ctx}");

        // Nesting: inner and Request lie within outer on the same thread.
        let (outer, inner, request) = (&complete[0], &complete[2], &complete[3]);
        for child in [inner, request] {
            assert!(outer.3 <= child.3 && child.3 + child.4 <= outer.3 + outer.4);
        }

        // Both halves' payloads are kept.
        let xs = of_phase(&doc, "X");
        let inner = xs.iter().find(|e| e["name"] == "inner").unwrap();
        assert_eq!(
            inner["args"],
            json!({"SpanId": 2}),
            "one object, each fact once: the Name is the slice's name, the Stop's SpanId the Start's"
        );
        let request = xs.iter().find(|e| e["name"] == "Request").unwrap();
        assert_eq!(request["args"], json!({"Url": "/a", "Status": 200}));

        // Everything else is an instant, thread-scoped (the format's default, so no `s`),
        // at its own time, named `Provider/Event` (so no category repeating the provider).
        let instants = of_phase(&doc, "I");
        let mut names: Vec<(&str, u64, f64)> = instants
            .iter()
            .map(|e| {
                assert!(e.get("s").is_none() && e.get("cat").is_none(), "{e}");
                (
                    e["name"].as_str().unwrap(),
                    e["tid"].as_u64().unwrap(),
                    e["ts"].as_f64().unwrap(),
                )
            })
            .collect();
        names.sort_by(|a, b| a.2.total_cmp(&b.2));
        assert_eq!(
            names,
            [
                ("Test/Tick", MAIN, 1.0),
                ("Other/Span/Stop", MAIN, 3.5), // another provider's stop
                ("Tracing/Span/Stop", MAIN, 8.0), // nothing open
                ("Test/Work/Stop", WORKER, 8.5), // the Start is later, on another thread
                ("Test/Work/Start", MAIN, 9.0), // never stopped
                ("Test/Tick", WORKER, 9.5),
                ("EventPipeRs-Rundown/Thread", MAIN, 10.0),
                ("Microsoft-DotNETCore-EventPipe/ProcessInfo", MAIN, 10.5),
            ],
            "{ctx}"
        );
        assert_eq!(instants[0]["args"], json!({"Count": 1}));
        // An instant with no payload has no args.
        let work = instants
            .iter()
            .find(|e| e["name"] == "Test/Work/Start")
            .unwrap();
        assert!(work.get("args").is_none(), "{work}");
        let bad = instants.iter().find(|e| e["ts"] == 9.5).unwrap();
        let error = bad["args"]["decode_error"]
            .as_str()
            .expect("decode error text");
        assert!(error.contains("Count"), "{error}");

        // Every trace event is accounted for exactly once.
        assert_eq!(
            summary,
            ChromeSummary {
                events: 16,
                instants: 8,
                complete: 4,
                unmatched_starts: 1,
                unmatched_stops: 3,
                folded_span_events: 0,
                thread_names: if version == FormatVersion::V6 { 2 } else { 1 },
                process_names: 1,
                async_buffers: 0,
                poll_spans: 0,
            },
            "{ctx}"
        );
        assert_eq!(instants.len() + 2 * xs.len(), events().len());

        // Names: the worker's from rundown, the main thread's from the V6 thread row, the
        // process's from ProcessInfo's command line.
        let mut meta: Vec<(String, u64, u64, String)> = of_phase(&doc, "M")
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_owned(),
                    e["pid"].as_u64().unwrap(),
                    e["tid"].as_u64().unwrap(),
                    e["args"]["name"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        meta.sort();
        let mut want = vec![
            ("process_name".to_owned(), PID, 0, "demo".to_owned()),
            ("thread_name".to_owned(), PID, WORKER, "worker-2".to_owned()),
        ];
        if version == FormatVersion::V6 {
            want.push((
                "thread_name".to_owned(),
                PID,
                MAIN,
                "main-thread".to_owned(),
            ));
            want.sort();
        }
        assert_eq!(meta, want, "{ctx}");
        assert_eq!(doc["otherData"]["exporter"], "eventpipe-rs");
        assert_eq!(doc["otherData"]["lost_events"], 0);
    }
}

#[test]
fn endless_starts_are_bounded_and_counted() {
    let starts = MAX_OPEN_PER_KEY + 4;
    let mut trace = TraceBuilder::new(FormatVersion::V5).metadata(metadata());
    for i in 0..=starts {
        let (id, payload) = if i < starts {
            (SPAN_START, span_start(i as u64, &format!("span {i}")))
        } else {
            (SPAN_STOP, (i as u64).to_le_bytes().to_vec())
        };
        trace = trace.event(1, i as i64 * 1000, id, payload);
    }
    let (doc, summary) = convert(&trace.build());
    // The Stop closes the newest Start; the rest end up instants.
    let xs = of_phase(&doc, "X");
    assert_eq!(xs.len(), 1);
    assert_eq!(xs[0]["name"], format!("span {}", starts - 1));
    assert_eq!(summary.unmatched_starts, starts as u64 - 1);
    assert_eq!(of_phase(&doc, "I").len(), starts - 1);
    assert_eq!(summary.events, starts as u64 + 1);
}

/// Begins of a row the converter never looks into by name (`RequestStart`: a `Url`, no
/// `Name` or span id) are held as their bytes: those given up are still written with every
/// field, in time order, and the one a Stop closes is a slice carrying the fields of both.
#[test]
fn endless_starts_held_as_bytes_keep_their_fields() {
    let starts = MAX_OPEN_PER_KEY + 3;
    let url = |i: usize| format!("/orders/{i}");
    let mut trace = TraceBuilder::new(FormatVersion::V5).metadata(metadata());
    for i in 0..starts {
        trace = trace.event(1, i as i64 * 1000, REQUEST_START, utf16(&url(i)));
    }
    let stop = 200u32.to_le_bytes().to_vec();
    trace = trace.event(1, starts as i64 * 1000, REQUEST_STOP, stop);
    let (doc, summary) = convert(&trace.build());
    let xs = of_phase(&doc, "X");
    assert_eq!(xs.len(), 1);
    assert_eq!(xs[0]["name"], "Request");
    assert_eq!(
        xs[0]["args"],
        json!({"Url": url(starts - 1), "Status": 200})
    );
    let instants = of_phase(&doc, "I");
    assert_eq!(instants.len(), starts - 1);
    assert_eq!(summary.unmatched_starts, starts as u64 - 1);
    for (i, instant) in instants.iter().enumerate() {
        assert_eq!(instant["name"], "Test/Request/Start");
        assert_eq!(instant["ts"], json!(i as f64), "given up in time order");
        assert_eq!(instant["args"], json!({"Url": url(i)}));
    }
}

fn convert_knowing_rows(bytes: &[u8]) -> (Value, ChromeSummary) {
    let mut reader = TraceReader::from_slice(bytes).unwrap();
    let mut out = Vec::new();
    let rows = nettrace::scan_metadata(bytes);
    let summary = write_chrome_trace_knowing_rows(&mut reader, &mut out, &rows).unwrap();
    (serde_json::from_slice(&out).expect("valid JSON"), summary)
}

/// A V5 trace written in two parts, each a metadata block and then an event block:
/// `RequestStart` defined and written first, `RequestStop` (when `stop`) only after.
fn starts_then_a_late_stop(starts: usize, stop: bool) -> Vec<u8> {
    let rows = metadata();
    let row = |id: u32| rows.iter().find(|r| r.metadata_id == id).unwrap().clone();
    let mut w = TraceWriter::new(Vec::new(), &TraceInfo::new(FormatVersion::V5, 8)).unwrap();
    let header = |id: u32, seq: usize| EventHeader {
        metadata_id: id,
        sequence_number: seq as u32,
        thread: 1,
        capture_thread: 1,
        timestamp: seq as i64 * 1000,
        ..EventHeader::default()
    };
    w.write_metadata_block(&[row(REQUEST_START), row(TICK)])
        .unwrap();
    let mut block = EventBlockBuilder::new(FormatVersion::V5);
    for i in 0..starts {
        block.push(
            &header(REQUEST_START, i + 1),
            &utf16(&format!("/orders/{i}")),
        );
    }
    block.push(&header(TICK, starts + 1), &7u32.to_le_bytes());
    w.write_event_block(&mut block).unwrap();
    if stop {
        w.write_metadata_block(&[row(REQUEST_STOP)]).unwrap();
        let mut block = EventBlockBuilder::new(FormatVersion::V5);
        block.push(&header(REQUEST_STOP, starts + 2), &200u32.to_le_bytes());
        w.write_event_block(&mut block).unwrap();
    }
    w.finish().unwrap()
}

/// Told the trace's rows up front, the converter writes a begin that nothing in the trace
/// can end as an instant at once: the same events as holding it, each with its fields,
/// counted as unmatched. A Stop defined only later in the file still ends its Start.
#[test]
fn begins_nothing_can_end_are_instants_at_once_and_a_late_end_still_pairs() {
    let starts = 10;
    let (doc, summary) = convert_knowing_rows(&starts_then_a_late_stop(starts, false));
    let instants = of_phase(&doc, "I");
    assert_eq!(instants.len(), starts + 1);
    assert_eq!(summary.unmatched_starts, starts as u64);
    // Written as read, before the Tick that follows them (held, they would come at the end).
    assert_eq!(instants[starts]["name"], "Test/Tick", "{doc:#}");
    let mut urls: Vec<&str> = instants[..starts]
        .iter()
        .map(|e| e["args"]["Url"].as_str().unwrap())
        .collect();
    urls.sort_unstable();
    let mut expected: Vec<String> = (0..starts).map(|i| format!("/orders/{i}")).collect();
    expected.sort_unstable();
    assert_eq!(urls, expected);
    // The same events as the converter that holds them until the end gives them up.
    let (held, held_summary) = convert(&starts_then_a_late_stop(starts, false));
    let sorted = |doc: &Value| {
        let mut events: Vec<String> = doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .map(Value::to_string)
            .collect();
        events.sort();
        events
    };
    assert_eq!(sorted(&doc), sorted(&held));
    assert_eq!(summary, held_summary);

    let (doc, summary) = convert_knowing_rows(&starts_then_a_late_stop(starts, true));
    let xs = of_phase(&doc, "X");
    assert_eq!(xs.len(), 1, "the late Stop ends the newest Start");
    assert_eq!(xs[0]["args"], json!({"Url": "/orders/9", "Status": 200}));
    assert_eq!(summary.unmatched_starts, starts as u64 - 1);
}

#[test]
fn an_unreadable_trace_still_gives_valid_json() {
    let bytes = write_trace(FormatVersion::V5);
    let cut = &bytes[..bytes.len() - 40];
    let mut reader = TraceReader::from_slice(cut).unwrap();
    let mut out = Vec::new();
    let result = write_chrome_trace(&mut reader, &mut out);
    assert!(matches!(result, Err(Error::Trace(_))), "{result:?}");
    let doc: Value = serde_json::from_slice(&out).expect("valid JSON even so");
    assert!(doc["otherData"]["error"].as_str().is_some());
}

// ---------------------------------------------------------------------------------------
// Real traces

/// Events in the trace, counted with a plain reader.
fn count_events(bytes: &[u8]) -> (u64, BTreeMap<String, u64>) {
    let mut reader = TraceReader::from_slice(bytes).unwrap();
    let mut by_name = BTreeMap::new();
    let mut n = 0;
    while let Some(e) = reader.next_event().unwrap() {
        n += 1;
        *by_name.entry(e.qualified_name()).or_insert(0) += 1;
    }
    (n, by_name)
}

#[test]
fn real_traces_convert_with_every_event_accounted_for() {
    let Some(dir) = common::shared_traces("Chrome conversion of the real traces") else {
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "nettrace"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&file).unwrap();
        let (events, by_name) = count_events(&bytes);
        let (doc, summary) = convert(&bytes);
        let instants = of_phase(&doc, "I").len() as u64;
        let xs = of_phase(&doc, "X");
        assert_eq!(
            instants + 2 * xs.len() as u64 + summary.folded_span_events,
            events,
            "{name}"
        );
        assert_eq!(summary.events, events, "{name}");
        assert_eq!(
            (summary.instants, summary.complete),
            (instants, xs.len() as u64),
            "{name}"
        );
        let all = doc["traceEvents"].as_array().unwrap().len() as u64;
        assert_eq!(
            all,
            instants + xs.len() as u64 + summary.thread_names + summary.process_names
        );

        match name.as_str() {
            "eventpipe-dotnetcore3.0-win-x64-objver4.nettrace" => {
                // TraceEvent's baseline: 478 GC/Start and 478 GC/Stop; each pairs with the
                // Stop of the same GC (the payloads' Count is the GC's number).
                assert_eq!(by_name["Microsoft-Windows-DotNETRuntime/GC/Start"], 478);
                assert_eq!(by_name["Microsoft-Windows-DotNETRuntime/GC/Stop"], 478);
                let gcs: Vec<&&Value> = xs
                    .iter()
                    .filter(|e| e["name"] == "GC" && e["cat"] == "Microsoft-Windows-DotNETRuntime")
                    .collect();
                assert_eq!(gcs.len(), 478, "{name}");
                for gc in gcs {
                    // The Stop's Count equals the Start's, so it is written once.
                    assert!(gc["args"]["Count"].is_u64(), "{gc}");
                    assert!(gc["args"].get("stop.Count").is_none(), "{gc}");
                    assert!(gc["dur"].as_f64().unwrap() >= 0.0);
                }
            }
            "eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace" => {
                let process = of_phase(&doc, "M")
                    .into_iter()
                    .find(|e| e["name"] == "process_name")
                    .expect("a process name from ProcessInfo");
                assert_eq!(process["pid"], 26240);
                assert!(!process["args"]["name"].as_str().unwrap().is_empty());
            }
            "onecollect-v6-small.nettrace" => {
                // RequestStart/RequestStop pairs of Contoso-Demo: 5 of each.
                let requests = xs.iter().filter(|e| e["cat"] == "Contoso-Demo").count();
                assert_eq!(requests, 5, "{name}");
                let processes: BTreeMap<u64, &str> = of_phase(&doc, "M")
                    .into_iter()
                    .filter(|e| e["name"] == "process_name")
                    .map(|e| {
                        (
                            e["pid"].as_u64().unwrap(),
                            e["args"]["name"].as_str().unwrap(),
                        )
                    })
                    .collect();
                assert_eq!(
                    processes,
                    BTreeMap::from([(40001, "contoso-web"), (40002, "fabrikam-store")])
                );
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------
// Runtime pairs, the tracing layer's spans, and what the JSON holds for JavaScript

/// One event as a plain reader sees it: qualified name, thread, payload fields.
type PlainEvent = (String, u64, Vec<(String, nettrace::Value)>);

/// A runtime pair to look for: trace, begin, end, slice name, the field both carry (if
/// matched on one), and the number of pairs known to be in the trace.
type PairCase = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    u64,
);

/// Every event, read with a plain reader.
fn read_events(bytes: &[u8]) -> Vec<PlainEvent> {
    let mut reader = TraceReader::from_slice(bytes).unwrap();
    let mut out = Vec::new();
    while let Some(e) = reader.next_event().unwrap() {
        out.push((
            e.qualified_name(),
            e.thread_id(),
            e.decode_payload()
                .map(|f| f.into_iter().map(|(n, v)| (n.to_owned(), v)).collect())
                .unwrap_or_default(),
        ));
    }
    out
}

/// Slices (X events) per (thread, name).
fn slices_by_thread_and_name(doc: &Value) -> BTreeMap<(u64, String), u64> {
    let mut out = BTreeMap::new();
    for e in of_phase(doc, "X") {
        let key = (
            e["tid"].as_u64().unwrap(),
            e["name"].as_str().unwrap().to_owned(),
        );
        *out.entry(key).or_insert(0) += 1;
    }
    out
}

/// Begin/end pairs of one thread, counted from the event sequence alone: each end closes
/// the latest open begin of the same thread (and, with `same`, the same field value).
fn count_pairs(
    events: &[PlainEvent],
    begin: &str,
    end: &str,
    same: Option<&str>,
) -> BTreeMap<u64, u64> {
    let field = |fields: &[(String, nettrace::Value)]| {
        same.and_then(|s| fields.iter().find(|(n, _)| n == s).map(|(_, v)| v.clone()))
    };
    let mut open: BTreeMap<u64, Vec<Option<nettrace::Value>>> = BTreeMap::new();
    let mut pairs = BTreeMap::new();
    for (name, tid, fields) in events {
        if name == begin {
            open.entry(*tid).or_default().push(field(fields));
        } else if name == end {
            let stack = open.entry(*tid).or_default();
            let value = field(fields);
            if let Some(i) = stack.iter().rposition(|v| *v == value) {
                stack.remove(i);
                *pairs.entry(*tid).or_insert(0) += 1;
            }
        }
    }
    pairs
}

#[test]
fn runtime_begin_end_pairs_become_slices_on_their_thread() {
    let Some(dir) = common::shared_traces("runtime pairs in the Chrome JSON") else {
        return;
    };
    const RT: &str = "Microsoft-Windows-DotNETRuntime";
    // (trace, begin, end, slice name, same field, the number of pairs we know are there)
    let cases: &[PairCase] = &[
        // TraceEvent counts 7,423 of each of the four (our reader agrees: dotnet_traces.rs),
        // every one on the thread that suspended the runtime.
        (
            "only_managed_samples",
            "GC/SuspendEEStart",
            "GC/SuspendEEStop",
            "GC/SuspendEE",
            None,
            7423,
        ),
        (
            "only_managed_samples",
            "GC/RestartEEStart",
            "GC/RestartEEStop",
            "GC/RestartEE",
            None,
            7423,
        ),
        // The baseline: 5,953 SuspendEE and 6,002 RestartEE begin/end events.
        (
            "eventpipe-dotnetcore3.0-win-x64-objver4",
            "GC/SuspendEEStart",
            "GC/SuspendEEStop",
            "GC/SuspendEE",
            None,
            5953,
        ),
        (
            "eventpipe-dotnetcore3.0-win-x64-objver4",
            "GC/RestartEEStart",
            "GC/RestartEEStop",
            "GC/RestartEE",
            None,
            6002,
        ),
        (
            "eventpipe-dotnetcore3.0-win-x64-objver4",
            "GC/FinalizersStart",
            "GC/FinalizersStop",
            "GC/Finalizers",
            None,
            2,
        ),
        (
            "eventpipe-dotnetcore3.0-win-x64-objver4",
            "GC/Start",
            "GC/Stop",
            "GC",
            None,
            478,
        ),
        (
            "eventpipe-dotnetcore3.0-win-x64-objver4",
            "Contention/Start",
            "Contention/Stop",
            "Contention",
            None,
            8,
        ),
        // 54 JittingStarted, 53 LoadVerbose: one method's compilation never finished.
        (
            "eventpipe-dotnetcore3.0-win-x64-objver4",
            "Method/JittingStarted",
            "Method/LoadVerbose",
            "JIT",
            Some("MethodID"),
            53,
        ),
    ];
    let mut docs: BTreeMap<&str, (Value, Vec<PlainEvent>)> = BTreeMap::new();
    for &(trace, begin, end, slice, same, known) in cases {
        let (doc, events) = docs.entry(trace).or_insert_with(|| {
            let bytes = std::fs::read(dir.join(format!("{trace}.nettrace"))).unwrap();
            (convert(&bytes).0, read_events(&bytes))
        });
        let (begin, end) = (format!("{RT}/{begin}"), format!("{RT}/{end}"));
        let want = count_pairs(events, &begin, &end, same);
        assert_eq!(want.values().sum::<u64>(), known, "{trace} {slice}");
        let got: BTreeMap<u64, u64> = slices_by_thread_and_name(doc)
            .into_iter()
            .filter(|((_, name), _)| name == slice || name.starts_with(&format!("{slice} ")))
            .map(|((tid, _), n)| (tid, n))
            .fold(BTreeMap::new(), |mut m, (tid, n)| {
                *m.entry(tid).or_insert(0) += n;
                m
            });
        assert_eq!(got, want, "{trace} {slice}: slices per thread");
        // Paired events are not also written as instants.
        let leftover = of_phase(doc, "I")
            .iter()
            .filter(|e| e["name"] == begin.as_str() || e["name"] == end.as_str())
            .count() as u64;
        let all = events
            .iter()
            .filter(|(n, _, _)| *n == begin || *n == end)
            .count() as u64;
        assert_eq!(leftover, all - 2 * known, "{trace} {slice}: unpaired");
    }
    // A JIT slice is named by its method and holds both events' facts once.
    let (doc, _) = &docs["eventpipe-dotnetcore3.0-win-x64-objver4"];
    let jit = of_phase(doc, "X")
        .into_iter()
        .find(|e| e["name"].as_str().unwrap().starts_with("JIT "))
        .unwrap();
    let args = &jit["args"];
    assert_eq!(
        jit["name"],
        format!(
            "JIT {}.{}",
            args["MethodNamespace"].as_str().unwrap(),
            args["MethodName"].as_str().unwrap()
        )
    );
    assert!(args["MethodStartAddress"].is_string() || args["MethodStartAddress"].is_u64());
}

const SPAN_NEW: u32 = 11;
const SPAN_CLOSE: u32 = 12;
const BIG: u32 = 13;

/// A trace of the tracing layer's span events (`eventpipe-tracing`'s table): a span entered
/// once (with a nested one, and a child entered on another thread), an async span entered
/// twice, a span never entered, a span never entered nor closed, a span entered but never
/// closed; and an event with 64-bit values above 2^53. In timestamp order.
fn tracing_layer_trace() -> Vec<u8> {
    tracing_layer_trace_in(Order::Time)
}

/// How a trace's events lie in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// By timestamp, across threads.
    Time,
    /// Each thread's events together, the worker's first: as the runtime's drain writes a
    /// pass (and the .NET runtime a buffer flush). The format orders only each thread's own
    /// events; readers sort the rest.
    ThreadRuns,
    /// The same, the main thread's first.
    MainThreadFirst,
}

fn tracing_layer_trace_in(order: Order) -> Vec<u8> {
    use FieldType::{Int64, UInt64, Utf16String};
    let mut metadata = metadata();
    metadata.push(md(
        SPAN_NEW,
        "Tracing",
        "SpanNew",
        &[
            ("SpanId", UInt64),
            ("ParentSpanId", UInt64),
            ("Name", Utf16String),
            ("user", Utf16String),
        ],
    ));
    metadata.push(md(
        SPAN_CLOSE,
        "Tracing",
        "SpanClose",
        &[("SpanId", UInt64)],
    ));
    metadata.push(md(BIG, "Test", "Big", &[("Id", UInt64), ("Delta", Int64)]));
    let new = |id: u64, parent: u64, name: &str| {
        let mut p = id.to_le_bytes().to_vec();
        p.extend(parent.to_le_bytes());
        p.extend(utf16(name));
        p.extend(utf16("ann"));
        p
    };
    let id = |id: u64| id.to_le_bytes().to_vec();
    const OUTER: u64 = (1 << 60) + 1; // above 2^53: written as a string
    let mut big = u64::MAX.to_le_bytes().to_vec();
    big.extend(i64::MIN.to_le_bytes());
    let events: Vec<(u64, i64, u32, Vec<u8>)> = vec![
        (MAIN, 1_000, SPAN_NEW, new(OUTER, 0, "outer")),
        (MAIN, 1_001, SPAN_START, span_start(OUTER, "outer")),
        (MAIN, 2_000, SPAN_NEW, new(2, OUTER, "inner")),
        (MAIN, 2_001, SPAN_START, span_start(2, "inner")),
        (MAIN, 2_500, SPAN_STOP, id(2)),
        (MAIN, 2_501, SPAN_CLOSE, id(2)),
        // A child of outer that runs on the worker: it names outer by its id.
        (MAIN, 2_600, SPAN_NEW, new(6, OUTER, "remote")),
        (WORKER, 2_700, SPAN_START, span_start(6, "remote")),
        (WORKER, 2_800, SPAN_STOP, id(6)),
        (WORKER, 2_900, SPAN_CLOSE, id(6)),
        (MAIN, 3_000, SPAN_NEW, new(3, 0, "async")),
        (MAIN, 3_100, SPAN_START, span_start(3, "async")),
        (MAIN, 3_200, SPAN_STOP, id(3)),
        (WORKER, 3_300, SPAN_START, span_start(3, "async")),
        (WORKER, 3_400, SPAN_STOP, id(3)),
        (WORKER, 3_500, SPAN_CLOSE, id(3)),
        (MAIN, 4_000, SPAN_NEW, new(4, 0, "idle")),
        (MAIN, 4_100, SPAN_CLOSE, id(4)),
        (MAIN, 5_000, SPAN_NEW, new(5, 0, "open")),
        (MAIN, 5_100, SPAN_NEW, new(7, 0, "unclosed")),
        (MAIN, 5_200, SPAN_START, span_start(7, "unclosed")),
        (MAIN, 5_300, SPAN_STOP, id(7)),
        (MAIN, 1_234_567_891, BIG, big),
        (MAIN, 1_234_567_892, SPAN_STOP, id(OUTER)),
        (MAIN, 1_234_567_893, SPAN_CLOSE, id(OUTER)),
    ];
    let mut events = events;
    match order {
        Order::Time => {}
        Order::ThreadRuns => events.sort_by_key(|&(thread, ..)| thread != WORKER),
        Order::MainThreadFirst => events.sort_by_key(|&(thread, ..)| thread != MAIN),
    }
    TraceBuilder::new(FormatVersion::V5)
        .metadata(metadata)
        .events(events)
        .build()
}

#[test]
fn a_span_entered_once_is_one_slice_holding_its_fields() {
    for order in [Order::Time, Order::ThreadRuns, Order::MainThreadFirst] {
        a_span_entered_once_is_one_slice_holding_its_fields_in(order);
    }
}

fn a_span_entered_once_is_one_slice_holding_its_fields_in(order: Order) {
    let bytes = tracing_layer_trace_in(order);
    let (doc, summary) = convert(&bytes);
    let slice = |name: &str| {
        of_phase(&doc, "X")
            .into_iter()
            .filter(|e| e["name"] == name)
            .map(|e| e["args"].clone())
            .collect::<Vec<_>>()
    };
    let outer = ((1u64 << 60) + 1).to_string();
    // The span's fields from SpanNew, no repeated Name, no root's ParentSpanId of 0. Its id
    // (a string: above 2^53) because remote names it as its parent.
    assert_eq!(slice("outer"), [json!({"SpanId": outer, "user": "ann"})]);
    // Nested in outer on its thread: the nesting says who the parent is, and nothing names
    // inner by its id.
    assert_eq!(slice("inner"), [json!({"user": "ann"})]);
    // On another thread: its parent by id.
    assert_eq!(
        slice("remote"),
        [json!({"ParentSpanId": outer, "user": "ann"})]
    );
    // Entered twice, or never closed: each slice names its span.
    assert_eq!(
        slice("async"),
        [
            json!({"SpanId": 3, "user": "ann"}),
            json!({"SpanId": 3, "user": "ann"})
        ]
    );
    assert_eq!(slice("unclosed"), [json!({"SpanId": 7, "user": "ann"})]);
    // Every ParentSpanId written names a SpanId written.
    let ids: Vec<&Value> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["args"].get("SpanId"))
        .collect();
    for e in doc["traceEvents"].as_array().unwrap() {
        if let Some(parent) = e["args"].get("ParentSpanId") {
            assert!(parent == 0 || ids.contains(&parent), "{e}");
        }
    }
    // SpanNew/SpanClose are written only for the spans whose lifetime is not one slice.
    let mut instants: Vec<(String, String)> = of_phase(&doc, "I")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["args"]["SpanId"].to_string(),
            )
        })
        .collect();
    instants.sort();
    assert_eq!(
        instants,
        [
            ("Test/Big".to_owned(), "null".to_owned()),
            ("Tracing/SpanClose".to_owned(), "3".to_owned()), // entered twice
            ("Tracing/SpanClose".to_owned(), "4".to_owned()), // never entered
            ("Tracing/SpanNew".to_owned(), "3".to_owned()),
            ("Tracing/SpanNew".to_owned(), "4".to_owned()),
            ("Tracing/SpanNew".to_owned(), "5".to_owned()), // never closed
            ("Tracing/SpanNew".to_owned(), "7".to_owned()), // never closed
        ]
    );
    assert_eq!(summary.folded_span_events, 6);
    assert_eq!(summary.complete, 6);
    assert_eq!(
        summary.events,
        summary.instants + 2 * summary.complete + summary.folded_span_events
    );
    assert_eq!(summary.events, 25);
}

#[test]
fn integers_beyond_2_pow_53_are_strings_and_times_have_ns_precision() {
    let bytes = tracing_layer_trace();
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let mut out = Vec::new();
    write_chrome_trace(&mut reader, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let big = of_phase(&doc, "I")
        .into_iter()
        .find(|e| e["name"] == "Test/Big")
        .unwrap();
    assert_eq!(big["args"]["Id"], u64::MAX.to_string());
    assert_eq!(big["args"]["Delta"], i64::MIN.to_string());
    // 1,234,567,891 ns: 1234567.891 µs exactly, not 1234567.8910000001.
    assert!(text.contains(r#""ts":1234567.891,"#), "{text}");
    // Every time and duration has at most three decimals, unless a duration must carry the
    // difference of the written times so that ts + dur is the end's written time.
    for e in doc["traceEvents"].as_array().unwrap() {
        if let Some(ts) = e.get("ts") {
            let text = ts.to_string();
            let decimals = text.split_once('.').map_or(0, |(_, d)| d.len());
            assert!(decimals <= 3, "{e}");
        }
    }
    let outer = of_phase(&doc, "X")
        .into_iter()
        .find(|e| e["name"] == "outer")
        .unwrap();
    // 1.001 µs to 1234567.892 µs.
    assert_eq!(outer["ts"].as_f64().unwrap(), 1.001);
    assert_eq!(
        outer["ts"].as_f64().unwrap() + outer["dur"].as_f64().unwrap(),
        1234567.892
    );
    // No number in the document is an integer JavaScript would round.
    fn check(v: &Value) {
        match v {
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    assert!(u < 1 << 53, "{u}");
                }
                if let Some(i) = n.as_i64() {
                    assert!(i.unsigned_abs() < 1 << 53, "{i}");
                }
            }
            Value::Array(items) => items.iter().for_each(check),
            Value::Object(map) => map.values().for_each(check),
            _ => {}
        }
    }
    check(&doc);
}

// ---------------------------------------------------------------------------------------
// Independent readers: the DevTools trace engine and speedscope's importer

/// What the DevTools performance panel's trace engine rebuilt from `doc` (see
/// tests/trace_engine/parse.mjs), or `None` when it is not installed.
fn trace_engine_view(what: &str, doc: &[u8]) -> Option<Value> {
    let (node, engine) = common::trace_engine(what)?;
    let dir = common::scratch_dir(&format!("trace-engine-{}", what.replace(' ', "-")));
    let file = dir.join(format!("trace{}", eventpipe_insight::chrome::FILE_SUFFIX));
    std::fs::write(&file, doc).unwrap();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trace_engine/parse.mjs");
    let out = std::process::Command::new(node)
        .arg(script)
        .arg(engine)
        .arg(&file)
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "parse.mjs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let view: Value = serde_json::from_slice(&out.stdout).expect("parse.mjs prints JSON");
    assert!(
        view.get("error").is_none(),
        "the engine failed: {}",
        view["error"]
    );
    assert_eq!(view["generic"], true, "a trace, not a browser recording");
    Some(view)
}

fn chrome_bytes(trace: &[u8]) -> Vec<u8> {
    let mut reader = TraceReader::from_slice(trace).unwrap();
    let mut out = Vec::new();
    write_chrome_trace(&mut reader, &mut out).unwrap();
    out
}

/// Per thread: (slices, instants, entries the engine left out of its tree).
fn engine_counts(view: &Value) -> BTreeMap<u64, (u64, u64, u64)> {
    view["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["tid"].as_u64().unwrap(),
                (
                    t["slices"].as_u64().unwrap(),
                    t["instants"].as_u64().unwrap(),
                    t["dropped"].as_u64().unwrap(),
                ),
            )
        })
        .collect()
}

#[test]
fn the_trace_engine_rebuilds_every_slice_of_a_synthetic_trace() {
    let Some(view) = trace_engine_view(
        "synthetic trace through the DevTools trace engine",
        &chrome_bytes(&write_trace(FormatVersion::V5)),
    ) else {
        return;
    };
    // events(): on MAIN the spans outer ⊃ inner and Request, with instants Tick, the other
    // provider's SpanStop, the unmatched SpanStop, the never-stopped Work Start, rundown
    // Thread and ProcessInfo; on WORKER the span "on the worker", the early Work Stop and
    // the undecodable Tick.
    assert_eq!(
        engine_counts(&view),
        BTreeMap::from([(MAIN, (3, 6, 0)), (WORKER, (1, 2, 0))])
    );
    let main = view["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == MAIN)
        .unwrap();
    assert_eq!(
        main["slice_names"],
        json!({"outer": 1, "inner": 1, "Request": 1})
    );
    // The other provider's SpanStop (an instant) lies in inner, which lies in outer.
    assert_eq!(main["max_depth"], 3, "inner and Request nest in outer");

    let Some(view) = trace_engine_view(
        "tracing layer spans through the DevTools trace engine",
        &chrome_bytes(&tracing_layer_trace()),
    ) else {
        return;
    };
    // MAIN: outer ⊃ inner, the async span's first entry, unclosed; WORKER: remote and the
    // async span's second entry.
    assert_eq!(
        engine_counts(&view),
        BTreeMap::from([(MAIN, (4, 6, 0)), (WORKER, (2, 1, 0))])
    );
}

#[test]
fn the_trace_engine_sees_the_runtime_pairs_of_a_dotnet_trace() {
    let Some(dir) = common::shared_traces("only_managed_samples through the trace engine") else {
        return;
    };
    let bytes = std::fs::read(dir.join("only_managed_samples.nettrace")).unwrap();
    let Some(view) = trace_engine_view(
        "only_managed_samples through the DevTools trace engine",
        &chrome_bytes(&bytes),
    ) else {
        return;
    };
    // The pairs in the input, counted from the events alone (see count_pairs).
    let events = read_events(&bytes);
    let rt = "Microsoft-Windows-DotNETRuntime/GC";
    let mut want: BTreeMap<u64, u64> = BTreeMap::new();
    for (begin, end) in [
        ("SuspendEEStart", "SuspendEEStop"),
        ("RestartEEStart", "RestartEEStop"),
    ] {
        for (tid, n) in count_pairs(
            &events,
            &format!("{rt}/{begin}"),
            &format!("{rt}/{end}"),
            None,
        ) {
            *want.entry(tid).or_insert(0) += n;
        }
    }
    assert_eq!(want.values().sum::<u64>(), 2 * 7423);
    let got: BTreeMap<u64, u64> = engine_counts(&view)
        .into_iter()
        .filter(|(_, (slices, _, _))| *slices > 0)
        .map(|(tid, (slices, _, _))| (tid, slices))
        .collect();
    assert_eq!(got, want);
    assert!(
        engine_counts(&view)
            .values()
            .all(|&(_, _, dropped)| dropped == 0),
        "every slice nests: {view}"
    );
}

/// speedscope's importer picks a reader by file name first (`src/import/index.ts`,
/// `_importProfileGroup`, in jlfwong/speedscope v1.25.0): `*.speedscope.json`,
/// `/Trace-\d{8}T\d{6}/`, `*.chrome.json` or `/Profile-\d{8}T\d{6}/` (a Chrome DevTools
/// timeline: an array holding a `CpuProfile` event, which a Trace Event Format object is
/// not), `*.stackprof.json`, ... ; only a name matching no rule is recognised by its
/// content, where `{"traceEvents": [...]}` is the Trace Event Format. The rules are read
/// here from the installed bundle, so a speedscope upgrade that changes them is noticed.
#[test]
fn the_default_file_name_is_recognised_by_speedscope_from_its_content() {
    let Some(package) = common::speedscope_package("speedscope's file-name rules") else {
        return;
    };
    let release = package.join("dist/release");
    let bundle = std::fs::read_dir(&release)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "js"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .find(|text| text.contains("Importing as Chrome Timeline"))
        .expect("the bundle holding speedscope's importer");
    // The first pass: from the speedscope rule to the last file-name rule.
    let from = bundle
        .find(r#".endsWith(".speedscope.json")"#)
        .expect("the speedscope file-name rule");
    let to = from
        + bundle[from..]
            .find("Importing as Java Flight Recorder")
            .expect("the last file-name rule");
    let rules = &bundle[from..to];
    let quoted = |call: &str| -> Vec<String> {
        rules
            .match_indices(call)
            .filter_map(|(at, _)| {
                let rest = &rules[at + call.len()..];
                Some(rest[..rest.find('"')?].to_owned())
            })
            .collect()
    };
    let suffixes = quoted(r#".endsWith(""#);
    let prefixes = quoted(r#".startsWith(""#);
    let patterns: Vec<String> = rules
        .match_indices("/.exec(")
        .filter_map(|(at, _)| {
            let start = rules[..at].rfind('/')?;
            Some(rules[start + 1..at].to_owned())
        })
        .collect();
    assert!(suffixes.iter().any(|s| s == ".chrome.json"), "{suffixes:?}");
    assert!(
        suffixes.len() >= 10 && patterns.len() >= 2,
        "{suffixes:?} {patterns:?}"
    );

    let suffix = eventpipe_insight::chrome::FILE_SUFFIX;
    let names = ["trace", "managed", "app"].map(|stem| format!("{stem}{suffix}"));
    let js_matches = |pattern: &str, name: &str| -> Option<bool> {
        let (node, _) = common::trace_engine("speedscope's name patterns, run with node")?;
        let out = std::process::Command::new(node)
            .args([
                "-e",
                "process.stdout.write(String(new RegExp(process.argv[1]).test(process.argv[2])))",
            ])
            .arg(pattern)
            .arg(name)
            .output()
            .unwrap();
        Some(out.stdout == b"true")
    };
    for name in &names {
        for s in &suffixes {
            assert!(
                !name.ends_with(s.as_str()),
                "{name} matches speedscope's *{s} rule"
            );
        }
        for p in &prefixes {
            assert!(
                !name.starts_with(p.as_str()),
                "{name} matches speedscope's {p}* rule"
            );
        }
        for p in &patterns {
            if let Some(hit) = js_matches(p, name) {
                assert!(!hit, "{name} matches speedscope's /{p}/ rule");
            }
        }
    }
    // Today's name hit the DevTools-timeline rule.
    assert!(suffixes
        .iter()
        .any(|s| "trace.chrome.json".ends_with(s.as_str())));
}

// ---------------------------------------------------------------------------------------
// Size: one representation per fact, on a trace shaped like the demo's

/// A trace shaped like `eptrace demo`'s (deterministic): on an executor thread, four
/// `serve` tasks polled round-robin, each serving requests (`handle_request`, which runs
/// `parse`, waits three polls for its backend, then runs `render`); on two worker threads,
/// tracing-layer spans (`request` with the nested `checksum` and `sort`). Thread and process
/// ids have five digits, times run past a second with nanoseconds that are not round.
/// Returns the trace and its number of polls and of spans.
fn demo_shaped_trace(requests_per_task: u64) -> (Vec<u8>, u64, u64) {
    use eventpipe_insight::async_trace::{encode_records, AsyncFrameId, ContextId, Record};
    use FieldType::{UInt32, UInt64, Utf16String};
    const PROCESS: u64 = 31_207;
    const EXECUTOR: u64 = 31_220;
    const WORKERS: [u64; 2] = [31_216, 31_217];
    const META: u32 = 1;
    const FRAME: u32 = 2;
    const BUFFER: u32 = 3;
    const NEW: u32 = 4;
    const START: u32 = 5;
    const STOP: u32 = 6;
    const CLOSE: u32 = 7;
    let mut metadata = async_profiler_rows([META, FRAME, BUFFER]);
    metadata.extend([
        md(
            NEW,
            "demo-workload",
            "SpanNew",
            &[
                ("SpanId", UInt64),
                ("ParentSpanId", UInt64),
                ("Name", Utf16String),
                ("units", UInt32),
            ],
        ),
        md(
            START,
            "demo-workload",
            "SpanStart",
            &[("SpanId", UInt64), ("Name", Utf16String)],
        )
        .with_opcode(Some(1)),
        md(STOP, "demo-workload", "SpanStop", &[("SpanId", UInt64)]).with_opcode(Some(2)),
        md(CLOSE, "demo-workload", "SpanClose", &[("SpanId", UInt64)]),
    ]);
    // Deterministic jitter: a few hundred ns that are not round.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut jitter = move |scale: i64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        scale + (seed % 997) as i64
    };
    let mut events: Vec<(u64, i64, u32, Vec<u8>)> = Vec::new();
    let meta = async_profiler_metadata(0, 1_000_000_000, 1_790_000_000_000_000_000);
    events.push((EXECUTOR, 1_000, META, meta));
    let frames: [(u32, &str, u32); 4] = [
        (1, "demo::workload::serve", 178),
        (2, "demo::workload::handle_request", 188),
        (3, "demo::workload::parse", 195),
        (4, "demo::workload::render", 200),
    ];
    for (id, name, line) in frames {
        let p = async_frame(id, name, "src/demo/workload.rs", line);
        events.push((EXECUTOR, 1_100 + i64::from(id), FRAME, p));
    }

    // The executor: per round, each task's poll runs its request's next step.
    let (ctx, frame) = (ContextId, AsyncFrameId);
    let mut records: Vec<Record> = Vec::new();
    let mut polls = 0u64;
    let mut next_ctx = 5u64;
    let mut t = 2_000_000i64;
    // Per task: its request's context and the step it is at (0 parse, 1-3 backend, 4 render).
    let mut tasks: Vec<(u64, u64, u32, u64)> = (1..=4).map(|c| (c, 0, 0, 0)).collect();
    for c in 1..=4 {
        records.push(Record::Create {
            ts: t,
            ctx: ctx(c),
            frame: frame(1),
            parent: None,
        });
    }
    while tasks.iter().any(|task| task.3 < requests_per_task) {
        for task in tasks.iter_mut().filter(|task| task.3 < requests_per_task) {
            let (serve, request, step, _) = *task;
            t += jitter(2_000);
            records.push(Record::Resume {
                ts: t,
                ctx: ctx(serve),
                frame: frame(1),
            });
            let request = if step == 0 {
                next_ctx += 1;
                t += jitter(300);
                records.push(Record::Create {
                    ts: t,
                    ctx: ctx(next_ctx),
                    frame: frame(2),
                    parent: Some(ctx(serve)),
                });
                next_ctx
            } else {
                request
            };
            t += jitter(400);
            records.push(Record::Resume {
                ts: t,
                ctx: ctx(request),
                frame: frame(2),
            });
            polls += 2;
            if step == 0 || step == 4 {
                next_ctx += 1;
                let inner = if step == 0 { 3 } else { 4 };
                t += jitter(200);
                records.push(Record::Create {
                    ts: t,
                    ctx: ctx(next_ctx),
                    frame: frame(inner),
                    parent: Some(ctx(request)),
                });
                t += jitter(100);
                records.push(Record::Resume {
                    ts: t,
                    ctx: ctx(next_ctx),
                    frame: frame(inner),
                });
                t += jitter(if step == 0 { 40_000 } else { 80_000 });
                records.push(Record::Complete { ts: t });
                polls += 1;
            }
            t += jitter(300);
            if step == 4 {
                records.push(Record::Complete { ts: t });
                *task = (serve, 0, 0, task.3 + 1);
            } else {
                records.push(Record::Suspend { ts: t });
                *task = (serve, request, step + 1, task.3);
            }
            t += jitter(200);
            records.push(Record::Suspend { ts: t });
        }
        t += jitter(300_000);
    }
    for (sequence, chunk) in records.chunks(500).enumerate() {
        let base = match chunk[0] {
            Record::Create { ts, .. } | Record::Resume { ts, .. } => ts,
            Record::Suspend { ts } | Record::Complete { ts } => ts,
            _ => unreachable!(),
        };
        let p = async_buffer(
            EXECUTOR,
            sequence as u32,
            base,
            &encode_records(chunk, base),
        );
        let last = match chunk[chunk.len() - 1] {
            Record::Create { ts, .. } | Record::Resume { ts, .. } => ts,
            Record::Suspend { ts } | Record::Complete { ts } => ts,
            _ => unreachable!(),
        };
        events.push((EXECUTOR, last + 1, BUFFER, p));
    }

    // The workers: request ⊃ checksum, sort, as the tracing layer writes them (ids from a
    // registry: large, reused after close).
    let mut spans = 0u64;
    let new = |id: u64, parent: u64, name: &str, units: u32| {
        let mut p = id.to_le_bytes().to_vec();
        p.extend(parent.to_le_bytes());
        p.extend(utf16(name));
        p.extend(units.to_le_bytes());
        p
    };
    for (w, &thread) in WORKERS.iter().enumerate() {
        let mut t = 2_500_000 + w as i64 * 1_000;
        let base = (w as u64 + 1) << 40;
        while t < 1_400_000_000 {
            let round = (t as u64 / 1_000) & 0xffff;
            let (request, checksum, sort) = (base | 1, base | 2 | round << 48, base | 3);
            for (id, parent, name, units) in [
                (request, 0, "request", 1),
                (checksum, request, "checksum", 3),
            ] {
                events.push((thread, t, NEW, new(id, parent, name, units)));
                t += jitter(100);
                events.push((thread, t, START, span_start(id, name)));
                t += jitter(100);
            }
            t += jitter(1_300_000);
            events.push((thread, t, STOP, checksum.to_le_bytes().to_vec()));
            t += jitter(50);
            events.push((thread, t, CLOSE, checksum.to_le_bytes().to_vec()));
            t += jitter(50);
            events.push((thread, t, NEW, new(sort, request, "sort", 1)));
            t += jitter(100);
            events.push((thread, t, START, span_start(sort, "sort")));
            t += jitter(120_000);
            for id in [sort, request] {
                events.push((thread, t, STOP, id.to_le_bytes().to_vec()));
                t += jitter(50);
                events.push((thread, t, CLOSE, id.to_le_bytes().to_vec()));
                t += jitter(50);
            }
            spans += 3;
            t += jitter(200_000);
        }
    }
    events.sort_by_key(|e| e.1);

    let trace = TraceBuilder::new(FormatVersion::V5)
        .process_id(PROCESS)
        .metadata(metadata)
        .events(events)
        .events_per_block(1_000)
        .build();
    (trace, polls, spans)
}

#[test]
fn a_demo_shaped_timeline_writes_each_fact_once() {
    let (trace, polls, spans) = demo_shaped_trace(100);
    let mut reader = TraceReader::from_slice(&trace).unwrap();
    let mut out = Vec::new();
    let summary = write_chrome_trace(&mut reader, &mut out).unwrap();
    assert_eq!((summary.poll_spans, summary.complete), (polls, spans));
    assert!(
        polls > 1_000 && spans > 1_000,
        "{polls} polls, {spans} spans"
    );
    let text = std::str::from_utf8(&out).unwrap();
    serde_json::from_str::<Value>(text).expect("valid JSON");

    // One event a line: the bytes of each kind.
    let mut poll_bytes = 0;
    let mut span_bytes = 0;
    let mut contexts: BTreeMap<u64, Vec<Value>> = BTreeMap::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line.trim_end_matches(',')) else {
            continue; // the document's first and last lines
        };
        if e["ph"] != "X" {
            continue;
        }
        if let Some(ctx) = e["args"].get("ctx") {
            poll_bytes += line.len() + 1;
            // No category, no frame id, no full path: the short name, the context once.
            assert!(e.get("cat").is_none(), "{line}");
            assert!(!e["name"].as_str().unwrap().contains("::"), "{line}");
            assert_eq!(line.matches("\"ctx\"").count(), 1, "{line}");
            contexts
                .entry(ctx.as_u64().unwrap())
                .or_default()
                .push(e["args"].get("ended").cloned().unwrap_or(Value::Null));
        } else {
            span_bytes += line.len() + 1;
            // Nested in its parent on its thread, referred to by nothing: no ids.
            assert!(
                e["args"].get("SpanId").is_none() && e["args"].get("ParentSpanId").is_none(),
                "{line}"
            );
        }
    }
    // Every context's polls but its last returned Pending and say nothing of it; the
    // last of each finished request says it completed.
    for (ctx, ends) in &contexts {
        let (last, before) = ends.split_last().unwrap();
        assert!(before.iter().all(Value::is_null), "ctx {ctx}: {ends:?}");
        if *ctx > 4 {
            assert_eq!(*last, "complete", "ctx {ctx}: {ends:?}");
        }
    }
    // The frames' full names are written once each: in their AsyncFrame instants.
    for name in ["serve", "handle_request", "parse", "render"] {
        assert_eq!(
            text.matches(&format!("demo::workload::{name}\"")).count(),
            1
        );
    }
    // The bytes per slice: a poll is its name, its times in µs with ns precision, its
    // thread, process and context (about 45 bytes here) in the format's frame of keys
    // (about 65 bytes): 108 bytes here. A span slice is its name, category, times,
    // thread, process and fields: 126 bytes here. The converter's output before it wrote
    // each fact once took 208 bytes a poll and 240 a span slice of the demo's trace.
    let per_poll = poll_bytes as f64 / polls as f64;
    let per_span = span_bytes as f64 / spans as f64;
    eprintln!(
        "{} bytes: {polls} polls at {per_poll:.1} bytes, {spans} span slices at {per_span:.1}",
        out.len()
    );
    assert!(per_poll <= 112.0, "{per_poll:.1} bytes a poll");
    assert!(per_span <= 130.0, "{per_span:.1} bytes a span slice");

    // The DevTools trace engine rebuilds every slice, nested as written.
    let Some(view) = trace_engine_view("a demo-shaped trace through the trace engine", &out) else {
        return;
    };
    let counts = engine_counts(&view);
    assert_eq!(
        counts.values().map(|c| c.0).sum::<u64>(),
        polls + spans,
        "{counts:?}"
    );
    assert!(counts.values().all(|c| c.2 == 0), "{counts:?}");
}
