//! The Chrome Trace Event converter, on traces written here with `nettrace::write` (V5 and
//! V6: nested and interleaved Start/Stop pairs, an unmatched Stop, a Start never closed,
//! instants, an undecodable payload, thread names from V6 rows and from rundown, a process
//! name from ProcessInfo) and on the real traces in `../shared/traces`. The output is read
//! back with serde_json.

mod common;

use std::collections::BTreeMap;

use eventpipe_insight::chrome::MAX_OPEN_PER_KEY;
use eventpipe_insight::{write_chrome_trace, ChromeSummary, Error};
use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{
    EventHeader, EventMetadata, FieldDesc, FieldType, FormatVersion, ThreadInfo, TraceInfo,
    TraceReader,
};
use serde_json::{json, Value};

const PID: u64 = 4242;
const MAIN: u64 = 100;
const WORKER: u64 = 200;

fn md(
    id: u32,
    provider: &str,
    name: &str,
    opcode: Option<u8>,
    fields: &[(&str, FieldType)],
) -> EventMetadata {
    EventMetadata {
        metadata_id: id,
        provider: provider.into(),
        event_id: id,
        event_name: name.into(),
        opcode,
        fields: fields
            .iter()
            .map(|(n, ty)| FieldDesc {
                name: (*n).into(),
                ty: ty.clone(),
            })
            .collect(),
        ..Default::default()
    }
}

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
        md(TICK, "Test", "Tick", None, &[("Count", UInt32)]),
        // Start/Stop by name alone (no opcode stated), as EventSource names them.
        md(
            REQUEST_START,
            "Test",
            "RequestStart",
            None,
            &[("Url", Utf16String)],
        ),
        md(
            REQUEST_STOP,
            "Test",
            "RequestStop",
            None,
            &[("Status", UInt32)],
        ),
        // The tracing layer's spans: opcodes stated.
        md(
            SPAN_START,
            "Tracing",
            "SpanStart",
            Some(1),
            &[("SpanId", UInt64), ("Name", Utf16String)],
        ),
        md(
            SPAN_STOP,
            "Tracing",
            "SpanStop",
            Some(2),
            &[("SpanId", UInt64)],
        ),
        // One name, the opcode telling Start from Stop (like the runtime's GC/Start).
        md(WORK_START, "Test", "Work", Some(1), &[]),
        md(WORK_STOP, "Test", "Work", Some(2), &[]),
        md(
            RUNDOWN_THREAD,
            "EventPipeRs-Rundown",
            "Thread",
            None,
            &[("ThreadId", UInt64), ("Name", Utf16String)],
        ),
        md(
            PROCESS_INFO,
            "Microsoft-DotNETCore-EventPipe",
            "ProcessInfo",
            None,
            &[
                ("CommandLine", Utf16String),
                ("OSInformation", Utf16String),
                ("ArchInformation", Utf16String),
            ],
        ),
        // Same event name as Tracing's stop, another provider: closes nothing of Tracing's.
        md(
            OTHER_SPAN_STOP,
            "Other",
            "SpanStop",
            Some(2),
            &[("SpanId", UInt64)],
        ),
    ]
}

fn utf16(s: &str) -> Vec<u8> {
    s.encode_utf16()
        .chain([0])
        .flat_map(u16::to_le_bytes)
        .collect()
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
    let mut info = TraceInfo::new(version, 8);
    info.process_id = Some(PID);
    let mut w = TraceWriter::new(Vec::new(), &info).unwrap();
    w.write_metadata_block(&metadata()).unwrap();
    let v6 = version == FormatVersion::V6;
    if v6 {
        w.write_thread_block(&[
            ThreadInfo {
                index: 1,
                name: Some("main-thread".into()),
                process_id: Some(PID),
                thread_id: Some(MAIN),
                key_values: Vec::new(),
            },
            ThreadInfo {
                index: 2,
                name: None,
                process_id: Some(PID),
                thread_id: Some(WORKER),
                key_values: Vec::new(),
            },
        ])
        .unwrap();
    }
    let mut block = EventBlockBuilder::new(version);
    let mut sequence: BTreeMap<u64, u32> = BTreeMap::new();
    for (thread, ts, id, payload) in events() {
        let seq = sequence.entry(thread).or_insert(0);
        *seq += 1;
        let thread = if v6 {
            if thread == MAIN {
                1
            } else {
                2
            }
        } else {
            thread
        };
        let header = EventHeader {
            metadata_id: id,
            sequence_number: *seq,
            thread,
            capture_thread: thread,
            timestamp: ts,
            ..Default::default()
        };
        block.push(&header, &payload);
    }
    w.write_event_block(&block).unwrap();
    w.finish().unwrap()
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
            json!({"start": {"SpanId": 2, "Name": "inner"}, "stop": {"SpanId": 2}})
        );
        let request = xs.iter().find(|e| e["name"] == "Request").unwrap();
        assert_eq!(
            request["args"],
            json!({"start": {"Url": "/a"}, "stop": {"Status": 200}})
        );

        // Everything else is an instant, thread-scoped, at its own time.
        let instants = of_phase(&doc, "i");
        let mut names: Vec<(&str, u64, f64)> = instants
            .iter()
            .map(|e| {
                assert_eq!(e["s"], "t");
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
        assert_eq!(instants[0]["cat"], "Test");
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
    let info = TraceInfo::new(FormatVersion::V5, 8);
    let mut w = TraceWriter::new(Vec::new(), &info).unwrap();
    w.write_metadata_block(&metadata()).unwrap();
    let mut block = EventBlockBuilder::new(FormatVersion::V5);
    let starts = MAX_OPEN_PER_KEY + 4;
    for i in 0..=starts {
        let (id, payload) = if i < starts {
            (SPAN_START, span_start(i as u64, &format!("span {i}")))
        } else {
            (SPAN_STOP, (i as u64).to_le_bytes().to_vec())
        };
        let header = EventHeader {
            metadata_id: id,
            sequence_number: i as u32 + 1,
            thread: 1,
            capture_thread: 1,
            timestamp: i as i64 * 1000,
            ..Default::default()
        };
        block.push(&header, &payload);
    }
    w.write_event_block(&block).unwrap();
    let (doc, summary) = convert(&w.finish().unwrap());
    // The Stop closes the newest Start; the rest end up instants.
    let xs = of_phase(&doc, "X");
    assert_eq!(xs.len(), 1);
    assert_eq!(xs[0]["name"], format!("span {}", starts - 1));
    assert_eq!(summary.unmatched_starts, starts as u64 - 1);
    assert_eq!(of_phase(&doc, "i").len(), starts - 1);
    assert_eq!(summary.events, starts as u64 + 1);
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
        let instants = of_phase(&doc, "i").len() as u64;
        let xs = of_phase(&doc, "X");
        assert_eq!(instants + 2 * xs.len() as u64, events, "{name}");
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
                    assert_eq!(gc["args"]["start"]["Count"], gc["args"]["stop"]["Count"]);
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
