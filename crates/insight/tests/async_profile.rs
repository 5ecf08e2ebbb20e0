//! The async profiler's data, end to end through the converters, on traces written here
//! with `nettrace::write` (V5 and V6): `AsyncProfilerMetadata`, `AsyncFrame` and
//! `AsyncBuffer` events (records encoded here from docs/async-profiler-format.md), and CPU
//! sampler `Sample` events with stacks and an `AsyncContext` field (and one older sample
//! without it). Native addresses are named through .NET-style method events, so the
//! stacks' function names are exact without a binary on disk: one of them is the profiler's
//! poll wrapper.

use eventpipe_insight::async_trace::{
    encode_records, AsyncFrameId, ContextEnd, ContextId, Record, SpanEnd,
};
use eventpipe_insight::{build_profile, write_chrome_trace, FrameKind, ProfileBuilder};
use eventpipe_insight::{Profile, SampleSelection};
use eventpipe_test_support::trace::{
    async_buffer, async_frame, async_profiler_metadata, async_profiler_rows, md, method_load,
    method_load_row, TraceBuilder,
};
use nettrace::{EventMetadata, FieldType, FormatVersion, TraceReader};
use serde_json::Value;

const PID: u64 = 4242;
const MAIN: u64 = 100;
const WORKER: u64 = 200;

// Metadata ids.
const METHOD: u32 = 1;
const SAMPLE: u32 = 2;
const OLD_SAMPLE: u32 = 3;
const ASYNC_METADATA: u32 = 4;
const ASYNC_FRAME: u32 = 5;
const ASYNC_BUFFER: u32 = 6;

// Code addresses, named by method events.
const MAIN_FN: u64 = 0x1000;
const BLOCK_ON: u64 = 0x2000;
const WRAPPER: u64 = 0x3000;
const SERVE: u64 = 0x4000;
const HANDLE: u64 = 0x5000;
const LEAF: u64 = 0x6000;

const WRAPPER_NAME: &str =
    "<eventpipe_profiler::futures::Profiled<F> as core::future::future::Future>.poll";

fn metadata() -> Vec<EventMetadata> {
    use FieldType::{UInt32, UInt64};
    let mut rows = vec![
        method_load_row(METHOD, "Test-Methods"),
        md(
            SAMPLE,
            "EventPipeRs-CpuSampler",
            "Sample",
            &[("State", UInt32), ("AsyncContext", UInt64)],
        ),
        // A sampler from before the async profiler: no AsyncContext.
        md(
            OLD_SAMPLE,
            "EventPipeRs-CpuSampler",
            "Sample",
            &[("State", UInt32)],
        ),
    ];
    rows.extend(async_profiler_rows([
        ASYNC_METADATA,
        ASYNC_FRAME,
        ASYNC_BUFFER,
    ]));
    rows
}

// ---------------------------------------------------------------------------------------
// The records, encoded from the format document.

enum Rec {
    Create(i64, u64, u32, Option<u64>),
    Resume(i64, u64, u32),
    Suspend(i64),
    Complete(i64),
    Drop(i64, u64),
}

fn records(base: i64, recs: &[Rec]) -> Vec<u8> {
    let (ctx, frame) = (ContextId, AsyncFrameId);
    let recs: Vec<Record> = recs
        .iter()
        .map(|r| match *r {
            Rec::Create(ts, c, f, parent) => Record::Create {
                ts,
                ctx: ctx(c),
                frame: frame(f),
                parent: parent.map(ctx),
            },
            Rec::Resume(ts, c, f) => Record::Resume {
                ts,
                ctx: ctx(c),
                frame: frame(f),
            },
            Rec::Suspend(ts) => Record::Suspend { ts },
            Rec::Complete(ts) => Record::Complete { ts },
            Rec::Drop(ts, c) => Record::Drop { ts, ctx: ctx(c) },
        })
        .collect();
    encode_records(&recs, base)
}

fn buffer(thread: u64, sequence: u32, base: i64, recs: &[Rec]) -> Vec<u8> {
    async_buffer(thread, sequence, base, &records(base, recs))
}

// ---------------------------------------------------------------------------------------
// The trace.

/// One event: thread, timestamp (ns), metadata id, payload, stack (leaf first).
type Ev = (u64, i64, u32, Vec<u8>, Vec<u64>);

fn sample(thread: u64, ts: i64, ctx: u64, stack: &[u64]) -> Ev {
    let mut p = 1u32.to_le_bytes().to_vec();
    p.extend(ctx.to_le_bytes());
    (thread, ts, SAMPLE, p, stack.to_vec())
}

/// `serve` (frame 1) polls `handle` (frame 2), then an undescribed future (frame 3); a
/// second `serve` task never finishes; a `handle` is cancelled. The worker loses a buffer.
fn events() -> Vec<Ev> {
    use Rec::*;
    let ret = |a: u64| a + 0x10;
    // Leaf first, as the sampler walks: memcpy ← handle's code ← wrapper ← serve's code ←
    // wrapper ← block_on ← main.
    let deep = [
        LEAF,
        ret(HANDLE),
        ret(WRAPPER),
        ret(SERVE),
        ret(WRAPPER),
        ret(BLOCK_ON),
        ret(MAIN_FN),
    ];
    let mut ev: Vec<Ev> = vec![
        (MAIN, 10, METHOD, method_load(MAIN_FN, "", "main"), vec![]),
        (
            MAIN,
            11,
            METHOD,
            method_load(BLOCK_ON, "executor", "block_on"),
            vec![],
        ),
        (
            MAIN,
            12,
            METHOD,
            method_load(WRAPPER, WRAPPER_NAME.rsplit_once('.').unwrap().0, "poll"),
            vec![],
        ),
        (
            MAIN,
            13,
            METHOD,
            method_load(SERVE, "app::serve", "{{closure}}"),
            vec![],
        ),
        (
            MAIN,
            14,
            METHOD,
            method_load(HANDLE, "app::handle", "{{closure}}"),
            vec![],
        ),
        (MAIN, 15, METHOD, method_load(LEAF, "", "memcpy"), vec![]),
        (
            MAIN,
            20,
            ASYNC_METADATA,
            async_profiler_metadata(0, 1_000_000_000, 1_700_000_000_000_000_000),
            vec![],
        ),
        (
            MAIN,
            21,
            ASYNC_FRAME,
            async_frame(1, "app::serve", "src/serve.rs", 10),
            vec![],
        ),
        (
            MAIN,
            22,
            ASYNC_FRAME,
            async_frame(2, "app::handle", "src/handle.rs", 20),
            vec![],
        ),
        // Inside handle's poll.
        sample(MAIN, 3_000, 11, &deep),
        // Inside frame 3's poll: one wrapper less.
        sample(
            MAIN,
            6_500,
            12,
            &[
                LEAF,
                ret(WRAPPER),
                ret(SERVE),
                ret(WRAPPER),
                ret(BLOCK_ON),
                ret(MAIN_FN),
            ],
        ),
        // Not in a poll.
        sample(MAIN, 8_500, 0, &[LEAF, ret(BLOCK_ON), ret(MAIN_FN)]),
        // In handle's poll, but the walk stopped short of any wrapper.
        sample(MAIN, 3_500, 11, &[LEAF, ret(HANDLE)]),
        // A context no buffer mentions.
        sample(MAIN, 8_600, 99, &[LEAF, ret(BLOCK_ON), ret(MAIN_FN)]),
        // An older sampler's sample: no AsyncContext field.
        (
            MAIN,
            8_700,
            OLD_SAMPLE,
            1u32.to_le_bytes().to_vec(),
            vec![LEAF, ret(BLOCK_ON), ret(MAIN_FN)],
        ),
        (
            MAIN,
            9_000,
            ASYNC_BUFFER,
            buffer(
                MAIN,
                0,
                500,
                &[
                    Create(1_000, 10, 1, None),
                    Resume(1_000, 10, 1),
                    Create(1_500, 11, 2, Some(10)),
                    Create(1_600, 13, 2, Some(10)),
                    Resume(2_000, 11, 2),
                    Complete(5_000),
                    Resume(6_000, 12, 3),
                    Suspend(7_000),
                    Drop(7_500, 13),
                    Suspend(8_000),
                    Create(8_100, 20, 1, None),
                    Resume(8_200, 20, 1),
                    Suspend(8_300),
                ],
            ),
            vec![],
        ),
        (
            WORKER,
            9_100,
            ASYNC_BUFFER,
            buffer(WORKER, 0, 9_000, &[Resume(9_050, 30, 2)]),
            vec![],
        ),
        // Sequence 1 is lost; sequence 2 begins with nothing open (no Stack record).
        (
            WORKER,
            9_900,
            ASYNC_BUFFER,
            buffer(WORKER, 2, 9_500, &[Resume(9_600, 31, 2), Suspend(9_700)]),
            vec![],
        ),
        (
            MAIN,
            10_000,
            ASYNC_BUFFER,
            buffer(MAIN, 1, 9_950, &[Resume(10_000, 10, 1)]),
            vec![],
        ),
    ];
    ev.sort_by_key(|e| e.1);
    ev
}

fn write_trace(version: FormatVersion) -> Vec<u8> {
    let mut trace = TraceBuilder::new(version)
        .process_id(PID)
        .metadata(metadata())
        .thread(MAIN, None)
        .thread(WORKER, None);
    for (thread, ts, id, payload, stack) in events() {
        trace = trace.event_with_stack(thread, ts, id, payload, &stack);
    }
    trace.build()
}

/// Root-first function names of each sample, in time order.
fn sample_stacks(p: &Profile) -> Vec<Vec<String>> {
    p.samples
        .iter()
        .map(|s| {
            p.stacks[s.stack]
                .iter()
                .map(|&f| p.frames[f].function.clone())
                .collect()
        })
        .collect()
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

const VERSIONS: [FormatVersion; 2] = [FormatVersion::V5, FormatVersion::V6];

#[test]
fn cpu_samples_in_a_poll_get_its_async_callstack() {
    for version in VERSIONS {
        let bytes = write_trace(version);
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let built = build_profile(&mut reader, SampleSelection::Auto).unwrap();
        let p = &built.profile;
        let wrapper = WRAPPER_NAME;
        assert_eq!(
            sample_stacks(p),
            vec![
                names(&[
                    "main",
                    "executor.block_on",
                    "async app::serve",
                    "async app::handle",
                    "app::handle.{{closure}}",
                    "memcpy"
                ]),
                // No wrapper found: the async frames at the root.
                names(&[
                    "async app::serve",
                    "async app::handle",
                    "app::handle.{{closure}}",
                    "memcpy"
                ]),
                names(&[
                    "main",
                    "executor.block_on",
                    "async app::serve",
                    "async frame#3",
                    "memcpy"
                ]),
                names(&["main", "executor.block_on", "memcpy"]),
                names(&["main", "executor.block_on", "memcpy"]),
                names(&["main", "executor.block_on", "memcpy"]),
            ],
            "{version}: wrapper {wrapper}"
        );
        let serve = p
            .frames
            .iter()
            .find(|f| f.function == "async app::serve")
            .unwrap();
        assert_eq!(serve.kind, FrameKind::Async);
        assert_eq!(serve.file.as_deref(), Some("src/serve.rs"));
        assert_eq!(serve.line, Some(10));
        // The sample naming context 99 is noted.
        assert!(
            built
                .notes
                .iter()
                .any(|n| n.starts_with("1 CPU samples name an async context")),
            "{:?}",
            built.notes
        );
        let t = built.async_trace.as_ref().expect("async data");
        assert_eq!(t.diagnostics.lost_buffers, 1);
    }
}

#[test]
fn async_stacks_can_be_turned_off() {
    let bytes = write_trace(FormatVersion::V5);
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let mut builder = ProfileBuilder::new(SampleSelection::Cpu).async_stacks(false);
    while let Some(event) = reader.next_event().unwrap() {
        builder.observe(&event);
    }
    let built = builder.finish();
    let first = &sample_stacks(&built.profile)[0];
    assert_eq!(first.len(), 7);
    assert!(first.iter().all(|f| !f.starts_with("async ")), "{first:?}");
    assert_eq!(first[2], WRAPPER_NAME);
    assert!(built.notes.is_empty(), "{:?}", built.notes);
    // The async data is still read.
    assert!(built.async_trace.is_some());
}

#[test]
fn the_model_counts_contexts_polls_and_time() {
    let bytes = write_trace(FormatVersion::V6);
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let t = eventpipe_insight::read_async_trace(&mut reader)
        .unwrap()
        .unwrap();
    let r = t.reference.unwrap();
    assert_eq!((r.version, r.timestamp_frequency), (1, 1_000_000_000));
    assert_eq!(t.to_unix_nanos(1_000), Some(1_700_000_000_000_001_000));
    assert_eq!(t.frame_name(AsyncFrameId(1)), "app::serve");
    assert_eq!(t.frame_name(AsyncFrameId(3)), "frame#3");
    assert_eq!(t.end_ts, 10_000);

    let serve = &t.contexts[&ContextId(10)];
    assert!(serve.is_root());
    // Polls 1000..8000 and 10000..10000 (open at the end).
    assert_eq!((serve.polls, serve.running_ticks), (2, 7_000));
    assert_eq!(serve.suspended_ticks, 9_000 - 7_000);
    assert_eq!(t.contexts[&ContextId(11)].end, ContextEnd::Complete(5_000));
    assert_eq!(t.contexts[&ContextId(13)].end, ContextEnd::Drop(7_500));
    let roots: Vec<u64> = t.pending_roots().iter().map(|c| c.id.0).collect();
    assert_eq!(roots, [10, 20]);

    let worker: Vec<(u64, SpanEnd)> = t
        .spans
        .iter()
        .filter(|s| s.thread == WORKER)
        .map(|s| (s.ctx.0, s.ended))
        .collect();
    assert_eq!(worker, [(30, SpanEnd::Lost), (31, SpanEnd::Suspend)]);
    assert_eq!(t.diagnostics.lost_by_thread, [(WORKER, 1)]);

    let stats = t.frame_stats();
    let handle = stats.iter().find(|s| s.frame == AsyncFrameId(2)).unwrap();
    // Contexts 11 (completed), 13 (cancelled), 30 and 31 (worker; no Create seen).
    assert_eq!(
        (
            handle.created,
            handle.polls,
            handle.completed,
            handle.cancelled,
            handle.pending
        ),
        (2, 3, 1, 1, 2)
    );
}

fn chrome(bytes: &[u8]) -> (Value, eventpipe_insight::ChromeSummary) {
    let mut reader = TraceReader::from_slice(bytes).unwrap();
    let mut out = Vec::new();
    let summary = write_chrome_trace(&mut reader, &mut out).unwrap();
    (serde_json::from_slice(&out).expect("valid JSON"), summary)
}

#[test]
fn polls_are_complete_events_on_their_thread() {
    for version in VERSIONS {
        let (doc, summary) = chrome(&write_trace(version));
        let polls: Vec<&Value> = doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X" && e["args"].get("ctx").is_some())
            .collect();
        let mut rows: Vec<(u64, String, f64, f64, u64, String)> = polls
            .iter()
            .map(|e| {
                assert_eq!(e["pid"], PID);
                // A poll is known by its ctx: no category. Its frame is its name (the
                // AsyncFrame instant holds the full name).
                assert!(e.get("cat").is_none(), "{e}");
                let args = e["args"].as_object().unwrap();
                assert!(args.keys().all(|k| k == "ctx" || k == "ended"), "{e}");
                (
                    e["tid"].as_u64().unwrap(),
                    e["name"].as_str().unwrap().to_owned(),
                    e["ts"].as_f64().unwrap(),
                    e["dur"].as_f64().unwrap(),
                    e["args"]["ctx"].as_u64().unwrap(),
                    // Written unless the poll returned Pending.
                    e["args"]
                        .get("ended")
                        .map_or("(pending)", |v| v.as_str().unwrap())
                        .to_owned(),
                )
            })
            .collect();
        rows.sort_by(|a, b| (a.0, a.2).partial_cmp(&(b.0, b.2)).unwrap());
        // app::serve and app::handle are told apart by their last path segment.
        let want = [
            (MAIN, "serve", 1.0, 7.0, 10, "(pending)"),
            (MAIN, "handle", 2.0, 3.0, 11, "complete"),
            (MAIN, "frame#3", 6.0, 1.0, 12, "(pending)"),
            (MAIN, "serve", 8.2, 0.1, 20, "(pending)"),
            (MAIN, "serve", 10.0, 0.0, 10, "open at end"),
            (WORKER, "handle", 9.05, 0.0, 30, "lost"),
            (WORKER, "handle", 9.6, 0.1, 31, "(pending)"),
        ];
        assert_eq!(rows.len(), want.len(), "{version}: {rows:?}");
        for (got, want) in rows.iter().zip(want) {
            assert_eq!(
                (got.0, got.1.as_str(), got.4, got.5.as_str()),
                (want.0, want.1, want.4, want.5)
            );
            assert!(
                (got.2 - want.2).abs() < 1e-6 && (got.3 - want.3).abs() < 1e-6,
                "{got:?}"
            );
        }
        // Nested polls lie within the poll that ran them.
        let (serve, handle) = (&rows[0], &rows[1]);
        assert!(serve.2 <= handle.2 && handle.2 + handle.3 <= serve.2 + serve.3);

        assert_eq!(summary.async_buffers, 4);
        assert_eq!(summary.poll_spans, 7);
        assert_eq!(
            summary.events,
            summary.instants + 2 * summary.complete + summary.async_buffers
        );
        // The buffers themselves are not instants; frames and metadata are.
        let instants: Vec<&str> = doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "I")
            .filter_map(|e| e["name"].as_str())
            .collect();
        assert!(!instants.iter().any(|n| n.ends_with("AsyncBuffer")));
        assert!(instants.contains(&"EventPipeRs-AsyncProfiler/AsyncFrame"));
        // The frames' full names and places, once each: in their AsyncFrame instants.
        let frames: Vec<(&str, &str)> = doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "EventPipeRs-AsyncProfiler/AsyncFrame")
            .map(|e| {
                (
                    e["args"]["Name"].as_str().unwrap(),
                    e["args"]["File"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            frames,
            [
                ("app::serve", "src/serve.rs"),
                ("app::handle", "src/handle.rs")
            ]
        );
    }
}
