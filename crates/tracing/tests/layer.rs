//! The layer end to end: tracing spans and events under a subscriber with the layer, an
//! eventpipe session to a file, the trace read back. Tests run in parallel, so each one
//! uses targets (providers) of its own and its sessions name only those.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{os_tid, Counted, FileSession, Rec};
use eventpipe_tracing::{
    provider_name, EventPipeLayer, FIRST_CALLSITE_ID, KEYWORD_EVENTS, KEYWORD_SPANS, SPAN_CLOSE_ID,
    SPAN_START_ID, SPAN_STOP_ID,
};
use nettrace::{FormatVersion, Value};
use tracing::Dispatch;
use tracing_subscriber::prelude::*;

fn dispatch() -> Dispatch {
    Dispatch::new(tracing_subscriber::registry().with(EventPipeLayer::new()))
}

fn with_layer<R>(f: impl FnOnce() -> R) -> R {
    tracing::dispatcher::with_default(&dispatch(), f)
}

fn from<'a>(recs: &'a [Rec], provider: &str) -> Vec<&'a Rec> {
    recs.iter().filter(|r| r.provider == provider).collect()
}

#[test]
fn providers_are_named_after_targets_with_dashes_for_double_colons() {
    assert_eq!(provider_name("demo::worker"), "demo-worker");
    assert_eq!(provider_name("a::b::c"), "a-b-c");
    assert_eq!(provider_name("plain"), "plain");

    let session = FileSession::start("naming", &["naming_test-demo-worker"]);
    let line = with_layer(|| {
        let line = line!() + 1;
        tracing::info!(target: "naming_test::demo::worker", n = 1u64, "hello");
        tracing::info!(name: "RequestDone", target: "naming_test::demo::worker", n = 2u64);
        line
    });
    let (written, recs) = session.stop();
    let ours = from(&recs, "naming_test-demo-worker");
    assert_eq!(written, 2);
    assert_eq!(ours.len(), 2, "{recs:?}");
    assert_eq!(ours[0].name, format!("Event layer.rs:{line}"));
    assert_eq!(ours[0].str("Message"), "hello");
    assert_eq!(ours[0].field("n"), &Value::U64(1));
    assert_eq!(ours[1].name, "RequestDone", "an explicit name is kept");
    assert_eq!(ours[1].field_names(), ["n"]);
    for r in &ours {
        assert!(r.id >= FIRST_CALLSITE_ID);
        assert_eq!(r.keywords, KEYWORD_EVENTS);
        assert_eq!(r.opcode, None);
    }
    assert_ne!(ours[0].id, ours[1].id, "one event id per callsite");
}

/// The span events of one span, in trace order.
fn span_events<'a>(recs: &[&'a Rec], span_id: u64) -> Vec<&'a Rec> {
    recs.iter()
        .filter(|r| r.name.starts_with("Span") && r.u64("SpanId") == span_id)
        .copied()
        .collect()
}

fn span_new<'a>(recs: &[&'a Rec], name: &str) -> &'a Rec {
    let found: Vec<_> = recs
        .iter()
        .filter(|r| r.name == "SpanNew" && r.str("Name") == name)
        .collect();
    assert_eq!(found.len(), 1, "one SpanNew for {name}: {recs:?}");
    found[0]
}

/// SpanNew, then (SpanStart, SpanStop) pairs with its id and name on `thread`, then
/// SpanClose.
fn check_span_lifecycle(recs: &[&Rec], name: &str, thread: u64, entries: usize, level: u32) {
    let new = span_new(recs, name);
    let id = new.u64("SpanId");
    assert_eq!(new.level, level, "{name}");
    assert_eq!(new.keywords, KEYWORD_SPANS);
    let events = span_events(recs, id);
    let names: Vec<&str> = events.iter().map(|r| r.name.as_str()).collect();
    let mut expected = vec!["SpanNew"];
    for _ in 0..entries {
        expected.extend(["SpanStart", "SpanStop"]);
    }
    expected.push("SpanClose");
    assert_eq!(names, expected, "span {name}");
    for r in &events[1..events.len() - 1] {
        assert_eq!(r.str("Name"), name);
        assert_eq!(r.field_names(), ["SpanId", "Name"]);
        assert_eq!(
            r.thread, thread,
            "{} of {name} on the entering thread",
            r.name
        );
        assert_eq!(r.level, level);
        assert_eq!(r.keywords, KEYWORD_SPANS);
        if r.name == "SpanStart" {
            assert_eq!((r.id, r.opcode), (SPAN_START_ID, Some(1)));
        } else {
            assert_eq!((r.id, r.opcode), (SPAN_STOP_ID, Some(2)));
        }
    }
    let close = events.last().unwrap();
    assert_eq!(close.id, SPAN_CLOSE_ID);
    assert_eq!(close.field_names(), ["SpanId"]);
}

#[test]
fn spans_nest_and_start_and_stop_on_the_thread_that_enters_them() {
    for format in [FormatVersion::V5, FormatVersion::V6] {
        let session =
            FileSession::start_format(&format!("spans-{format:?}"), &["span_test-jobs"], format);
        let dispatch = dispatch();
        let main_tid = os_tid();
        let worker_tid = tracing::dispatcher::with_default(&dispatch, || {
            let outer = tracing::info_span!(target: "span_test::jobs", "outer", job = 7u64);
            let _entered = outer.enter();
            let parent = outer.clone();
            let d = dispatch.clone();
            let worker = std::thread::spawn(move || {
                tracing::dispatcher::with_default(&d, || {
                    let inner = tracing::info_span!(target: "span_test::jobs", parent: &parent, "inner", step = "a");
                    inner.in_scope(|| tracing::info!(target: "span_test::jobs", "in inner"));
                    inner.in_scope(|| {});
                    let a = tracing::info_span!(target: "span_test::jobs", "a");
                    a.in_scope(|| {
                        let b = tracing::debug_span!(target: "span_test::jobs", "b");
                        b.in_scope(|| {});
                    });
                    drop(parent);
                    os_tid()
                })
            });
            let tid = worker.join().unwrap();
            let root = tracing::info_span!(target: "span_test::jobs", parent: None, "root");
            root.in_scope(|| {});
            tid
        });
        assert_ne!(main_tid, worker_tid);
        let (written, recs) = session.stop();
        let ours = from(&recs, "span_test-jobs");
        assert_eq!(written as usize, ours.len());

        let outer = span_new(&ours, "outer");
        assert_eq!(
            outer.field_names(),
            ["SpanId", "ParentSpanId", "Name", "job"]
        );
        assert_eq!(outer.u64("ParentSpanId"), 0, "outer is a root");
        assert_eq!(outer.field("job"), &Value::U64(7));
        let inner = span_new(&ours, "inner");
        assert_eq!(
            inner.u64("ParentSpanId"),
            outer.u64("SpanId"),
            "explicit parent"
        );
        assert_eq!(inner.str("step"), "a");
        let a = span_new(&ours, "a");
        assert_eq!(
            a.u64("ParentSpanId"),
            0,
            "the worker thread has no current span"
        );
        let b = span_new(&ours, "b");
        assert_eq!(b.u64("ParentSpanId"), a.u64("SpanId"), "contextual parent");
        let root = span_new(&ours, "root");
        assert_eq!(
            root.u64("ParentSpanId"),
            0,
            "parent: None is a root inside outer"
        );
        assert!(outer.thread == main_tid && inner.thread == worker_tid);

        check_span_lifecycle(&ours, "outer", main_tid, 1, 4);
        check_span_lifecycle(&ours, "inner", worker_tid, 2, 4);
        check_span_lifecycle(&ours, "a", worker_tid, 1, 4);
        check_span_lifecycle(&ours, "b", worker_tid, 1, 5);
        check_span_lifecycle(&ours, "root", main_tid, 1, 4);

        // The event inside `inner` lies between inner's first start and stop, on the worker.
        let inner_events = span_events(&ours, inner.u64("SpanId"));
        let pos = |r: &Rec| ours.iter().position(|x| std::ptr::eq(*x, r)).unwrap();
        let event = ours.iter().find(|r| r.name.starts_with("Event ")).unwrap();
        assert!(pos(inner_events[1]) < pos(event) && pos(event) < pos(inner_events[2]));
        assert_eq!(event.thread, worker_tid);
        assert_eq!(event.str("Message"), "in inner");
    }
}

#[derive(Debug)]
struct Boom;

impl std::fmt::Display for Boom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("boom")
    }
}

impl std::error::Error for Boom {}

#[test]
fn event_fields_keep_their_types() {
    let session = FileSession::start("types", &["types_test"]);
    let long = "long-ascii-".repeat(20);
    let long_unicode = "é€😀\0".repeat(40);
    with_layer(|| {
        let err = Boom;
        tracing::warn!(
            target: "types_test",
            i = -5i64,
            small = -3i32,
            u = 7u64,
            byte = 200u8,
            f = 1.5f64,
            b = true,
            s = "text",
            owned = String::from("owned"),
            d = ?vec![1, 2],
            disp = %"shown",
            e = &err as &(dyn std::error::Error + 'static),
            big = 1u128 << 100,
            neg = -(1i128 << 100),
            bytes = b"ab\0".as_slice(),
            nul = "a\0b",
            uni = "hé\0",
            long = long.as_str(),
            long_unicode = long_unicode.as_str(),
            "msg {}", 42
        );
    });
    let (written, recs) = session.stop();
    assert_eq!(written, 1);
    let ours = from(&recs, "types_test");
    assert_eq!(ours.len(), 1);
    let r = ours[0];
    assert_eq!(r.level, 3, "WARN is Warning");
    let expect = [
        ("i", Value::I64(-5)),
        ("small", Value::I64(-3)),
        ("u", Value::U64(7)),
        ("byte", Value::U64(200)),
        ("f", Value::F64(1.5)),
        ("b", Value::Bool(true)),
        ("s", Value::String("text".into())),
        ("owned", Value::String("owned".into())),
        ("d", Value::String("[1, 2]".into())),
        ("disp", Value::String("shown".into())),
        ("e", Value::String("boom".into())),
        (
            "big",
            Value::String("1267650600228229401496703205376".into()),
        ),
        (
            "neg",
            Value::String("-1267650600228229401496703205376".into()),
        ),
        ("nul", Value::String("a\u{FFFD}b".into())),
        ("uni", Value::String("hé\u{FFFD}".into())),
        ("long", Value::String(long.clone())),
        (
            "long_unicode",
            Value::String(long_unicode.replace('\0', "\u{FFFD}")),
        ),
        ("Message", Value::String("msg 42".into())),
    ];
    for (name, value) in &expect {
        assert_eq!(r.field(name), value, "field {name}");
    }
    match r.field("bytes") {
        Value::Bytes(b) => assert_eq!(b, b"ab\0"),
        Value::Array(a) => assert_eq!(a, &[Value::U8(b'a'), Value::U8(b'b'), Value::U8(0)]),
        other => panic!("bytes: {other:?}"),
    }
    assert_eq!(r.fields.len(), expect.len() + 1, "{:?}", r.field_names());
}

fn emit_dyn(v: &dyn tracing::Value, o: Option<u64>) {
    tracing::info!(target: "signature_test", v = v, o = o);
}

#[test]
fn a_callsite_recorded_with_other_types_gets_an_event_per_signature() {
    let session = FileSession::start("signatures", &["signature_test"]);
    with_layer(|| {
        emit_dyn(&5i64, Some(1));
        emit_dyn(&"x", Some(2));
        emit_dyn(&6i64, None);
        emit_dyn(&7i64, Some(3));
        emit_dyn(&true, Some(4));
    });
    let (written, recs) = session.stop();
    assert_eq!(written, 5);
    let ours = from(&recs, "signature_test");
    let values: Vec<Vec<&Value>> = ours
        .iter()
        .map(|r| r.fields.iter().map(|(_, v)| v).collect())
        .collect();
    assert_eq!(
        values,
        [
            vec![&Value::I64(5), &Value::U64(1)],
            vec![&Value::String("x".into()), &Value::U64(2)],
            vec![&Value::I64(6)],
            vec![&Value::I64(7), &Value::U64(3)],
            vec![&Value::Bool(true), &Value::U64(4)],
        ]
    );
    assert_eq!(ours[2].field_names(), ["v"], "a None records nothing");
    let ids: Vec<u32> = ours.iter().map(|r| r.id).collect();
    assert_eq!(ids[0], ids[3], "same signature, same event");
    let distinct: BTreeSet<u32> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), 4, "{ids:?}");
    assert!(ours.iter().all(|r| r.name == ours[0].name));
}

fn emit_levels() {
    tracing::error!(target: "level_test", "e");
    tracing::warn!(target: "level_test", "w");
    tracing::info!(target: "level_test", "i");
    tracing::debug!(target: "level_test", "d");
    tracing::trace!(target: "level_test", "t");
    tracing::error_span!(target: "level_test", "error_span").in_scope(|| {});
    tracing::trace_span!(target: "level_test", "trace_span").in_scope(|| {});
}

#[test]
fn levels_map_to_eventpipe_levels_and_sessions_filter_by_them() {
    let warning = FileSession::start("levels-warning", &["level_test::warning"]);
    let verbose = FileSession::start("levels-verbose", &["level_test"]);
    with_layer(emit_levels);
    let (_, w) = warning.stop();
    let (_, v) = verbose.stop();
    let messages = |recs: &[Rec]| -> Vec<(String, u32)> {
        from(recs, "level_test")
            .iter()
            .filter(|r| r.name.starts_with("Event "))
            .map(|r| (r.str("Message").to_string(), r.level))
            .collect()
    };
    let own = |v: &[(&str, u32)]| -> Vec<(String, u32)> {
        v.iter().map(|(m, l)| (m.to_string(), *l)).collect()
    };
    assert_eq!(
        messages(&v),
        own(&[("e", 2), ("w", 3), ("i", 4), ("d", 5), ("t", 5)])
    );
    assert_eq!(messages(&w), own(&[("e", 2), ("w", 3)]));
    let spans = |recs: &[Rec]| -> Vec<(String, String, u32)> {
        from(recs, "level_test")
            .iter()
            .filter(|r| r.name == "SpanStart")
            .map(|r| (r.name.clone(), r.str("Name").to_string(), r.level))
            .collect()
    };
    assert_eq!(
        spans(&v),
        [
            ("SpanStart".to_string(), "error_span".to_string(), 2),
            ("SpanStart".to_string(), "trace_span".to_string(), 5)
        ]
    );
    assert_eq!(
        spans(&w),
        [("SpanStart".to_string(), "error_span".to_string(), 2)]
    );
}

#[test]
fn keywords_choose_spans_or_events() {
    let spans_only = FileSession::start("kw-spans", &["keyword_test:0x1"]);
    let events_only = FileSession::start("kw-events", &["keyword_test:0x2"]);
    with_layer(|| {
        tracing::info_span!(target: "keyword_test", "s")
            .in_scope(|| tracing::info!(target: "keyword_test", "inside"));
    });
    let names = |recs: Vec<Rec>| -> Vec<String> {
        recs.into_iter()
            .filter(|r| r.provider == "keyword_test")
            .map(|r| r.name)
            .collect()
    };
    assert_eq!(
        names(spans_only.stop().1),
        ["SpanNew", "SpanStart", "SpanStop", "SpanClose"]
    );
    let events = names(events_only.stop().1);
    assert_eq!(events.len(), 1);
    assert!(events[0].starts_with("Event "), "{events:?}");
}

#[test]
fn a_session_records_only_the_targets_it_enables() {
    static ON: AtomicUsize = AtomicUsize::new(0);
    static OFF: AtomicUsize = AtomicUsize::new(0);
    let session = FileSession::start("per-target", &["per_target-on"]);
    with_layer(|| {
        for _ in 0..3 {
            tracing::info!(target: "per_target::on", v = ?Counted(&ON, "on"));
            tracing::info!(target: "per_target::off", v = ?Counted(&OFF, "off"));
            tracing::info_span!(target: "per_target::off", "quiet", v = ?Counted(&OFF, "off"))
                .in_scope(|| {});
        }
    });
    let (written, recs) = session.stop();
    assert_eq!(
        OFF.load(Ordering::SeqCst),
        0,
        "fields of a target no session records are not even formatted"
    );
    assert_eq!(ON.load(Ordering::SeqCst), 3, "formatted once per event");
    assert_eq!(written, 3);
    let providers: BTreeSet<&str> = recs.iter().map(|r| r.provider.as_str()).collect();
    assert_eq!(providers, BTreeSet::from(["per_target-on"]));
    assert!(recs.iter().all(|r| r.str("v") == "on"));
}

#[test]
fn nothing_is_written_after_the_session_stops() {
    static FORMATTED: AtomicUsize = AtomicUsize::new(0);
    let dispatch = dispatch();
    let emit = |n: u64| {
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info!(target: "after_stop", n, v = ?Counted(&FORMATTED, "x"));
            tracing::info_span!(target: "after_stop", "span").in_scope(|| {});
        })
    };
    emit(0);
    let session = FileSession::start("after-stop", &["after_stop"]);
    emit(1);
    emit(2);
    let (written, recs) = session.stop();
    assert_eq!(FORMATTED.load(Ordering::SeqCst), 2);
    emit(3);
    emit(4);
    assert_eq!(
        FORMATTED.load(Ordering::SeqCst),
        2,
        "no recording once the session stopped"
    );
    let events: Vec<u64> = recs
        .iter()
        .filter(|r| r.name.starts_with("Event "))
        .map(|r| r.u64("n"))
        .collect();
    assert_eq!(events, [1, 2]);
    assert_eq!(
        written,
        2 + 2 * 4,
        "two events and two spans' four events each"
    );
}

/// Counts the events it sees.
struct CountingLayer(&'static AtomicUsize);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountingLayer {
    fn on_event(&self, _: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn other_layers_see_every_event_whether_or_not_a_session_listens() {
    static SEEN_INNER: AtomicUsize = AtomicUsize::new(0);
    static SEEN_OUTER: AtomicUsize = AtomicUsize::new(0);
    // The layer both inside and outside another one: neither position may filter.
    let subscriber = tracing_subscriber::registry()
        .with(CountingLayer(&SEEN_INNER))
        .with(EventPipeLayer::new())
        .with(CountingLayer(&SEEN_OUTER));
    let dispatch = Dispatch::new(subscriber);
    let emit = || {
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::trace!(target: "other_layers_quiet", "not recorded");
            tracing::info!(target: "other_layers", "recorded");
        })
    };
    emit();
    let session = FileSession::start("other-layers", &["other_layers::informational"]);
    emit();
    let (written, _) = session.stop();
    emit();
    assert_eq!(written, 1);
    assert_eq!(SEEN_INNER.load(Ordering::SeqCst), 6);
    assert_eq!(SEEN_OUTER.load(Ordering::SeqCst), 6);
}
