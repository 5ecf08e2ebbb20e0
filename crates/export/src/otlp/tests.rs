//! The conversions on a trace written here with `nettrace::write`: the `tracing` layer's
//! span lifecycle with typed fields, an event inside a span, a Start/Stop pair inside a
//! span, an unmatched Stop; counters of every kind; the requests decoded back.

use std::collections::BTreeMap;

use eventpipe_counters::{CounterKind, CounterValue, MeanStats};
use eventpipe_test_support::otlp::attr;
use eventpipe_test_support::trace::{md, utf16, MetadataExt, TraceBuilder};
use nettrace::{EventMetadata, FieldType, FormatVersion};
use prost::Message;

use super::proto::collector::logs::v1::ExportLogsServiceRequest;
use super::proto::collector::metrics::v1::ExportMetricsServiceRequest;
use super::proto::collector::trace::v1::ExportTraceServiceRequest;
use super::proto::common::v1::any_value::Value as Any;
use super::proto::metrics::v1::metric::Data;
use super::proto::metrics::v1::number_data_point::Value as Number;
use super::proto::trace::v1::Span;
use super::*;

const PID: u32 = 4242;
const MAIN: u64 = 100;

const SPAN_START: u32 = 1;
const SPAN_STOP: u32 = 2;
const SPAN_CLOSE: u32 = 3;
const SPAN_NEW: u32 = 16;
const EVENT: u32 = 17;
const REQUEST_START: u32 = 18;
const REQUEST_STOP: u32 = 19;

fn metadata() -> Vec<EventMetadata> {
    use FieldType::{Boolean32 as Boolean, Double, Int64, UInt32, UInt64, Utf16String};
    vec![
        md(
            SPAN_START,
            "app",
            "SpanStart",
            &[("SpanId", UInt64), ("Name", Utf16String)],
        )
        .with_opcode(Some(1))
        .with_level(4)
        .with_display_name("SpanStart"),
        md(
            SPAN_STOP,
            "app",
            "SpanStop",
            &[("SpanId", UInt64), ("Name", Utf16String)],
        )
        .with_opcode(Some(2))
        .with_level(4)
        .with_display_name("SpanStop"),
        md(SPAN_CLOSE, "app", "SpanClose", &[("SpanId", UInt64)])
            .with_opcode(Some(0))
            .with_level(4)
            .with_display_name("SpanClose"),
        md(
            SPAN_NEW,
            "app",
            "SpanNew",
            &[
                ("SpanId", UInt64),
                ("ParentSpanId", UInt64),
                ("Name", Utf16String),
                ("count", Int64),
                ("ratio", Double),
                ("ok", Boolean),
                ("who", Utf16String),
            ],
        )
        .with_opcode(Some(0))
        .with_level(4)
        .with_display_name("SpanNew"),
        md(
            EVENT,
            "app",
            "Event main.rs:10",
            &[
                ("Message", Utf16String),
                ("n", Int64),
                ("x", Double),
                ("flag", Boolean),
                ("big", UInt64),
            ],
        )
        .with_opcode(Some(0))
        .with_level(3)
        .with_display_name("Event main.rs:10"),
        md(
            REQUEST_START,
            "web",
            "RequestStart",
            &[("Path", Utf16String)],
        )
        .with_opcode(Some(1))
        .with_level(4)
        .with_display_name("RequestStart"),
        md(REQUEST_STOP, "web", "RequestStop", &[("Status", UInt32)])
            .with_opcode(Some(2))
            .with_level(4)
            .with_display_name("RequestStop"),
    ]
}

fn span_new(id: u64, parent: u64, name: &str, count: i64, who: &str) -> Vec<u8> {
    let mut p = id.to_le_bytes().to_vec();
    p.extend(parent.to_le_bytes());
    p.extend(utf16(name));
    p.extend(count.to_le_bytes());
    p.extend(0.25f64.to_le_bytes());
    p.extend(1u32.to_le_bytes()); // a Win32 BOOL: 4 bytes
    p.extend(utf16(who));
    p
}

fn span_enter(id: u64, name: &str) -> Vec<u8> {
    let mut p = id.to_le_bytes().to_vec();
    p.extend(utf16(name));
    p
}

fn event_payload() -> Vec<u8> {
    let mut p = utf16("job done");
    p.extend((-3i64).to_le_bytes());
    p.extend(1.5f64.to_le_bytes());
    p.extend(0u32.to_le_bytes());
    p.extend(u64::MAX.to_le_bytes());
    p
}

/// (timestamp in ns, metadata id, payload), on one thread, in time order.
fn events() -> Vec<(i64, u32, Vec<u8>)> {
    vec![
        (1_000, SPAN_NEW, span_new(1, 0, "outer", 7, "ann")),
        (2_000, SPAN_START, span_enter(1, "outer")),
        (3_000, SPAN_NEW, span_new(2, 1, "inner", -1, "bob")),
        (4_000, SPAN_START, span_enter(2, "inner")),
        (5_000, EVENT, event_payload()),
        (6_000, SPAN_STOP, span_enter(2, "inner")),
        (7_000, SPAN_CLOSE, 2u64.to_le_bytes().to_vec()),
        (8_000, REQUEST_START, utf16("/a")),
        (9_000, REQUEST_STOP, 200u32.to_le_bytes().to_vec()),
        (10_000, SPAN_STOP, span_enter(1, "outer")),
        (11_000, SPAN_CLOSE, 1u64.to_le_bytes().to_vec()),
        (12_000, REQUEST_STOP, 500u32.to_le_bytes().to_vec()),
    ]
}

fn write_trace() -> Vec<u8> {
    TraceBuilder::new(FormatVersion::V5)
        .process_id(u64::from(PID))
        .metadata(metadata())
        .events(
            events()
                .into_iter()
                .map(|(ts, id, payload)| (MAIN, ts, id, payload)),
        )
        .build()
}

fn convert() -> (Signals, EventStats) {
    let bytes = write_trace();
    let mut reader = nettrace::TraceReader::from_slice(&bytes).unwrap();
    let mut converter = EventConverter::new(PID);
    let mut out = Signals::default();
    while let Some(event) = reader.next_event().unwrap() {
        converter.event(&event, &mut out);
    }
    assert_eq!(converter.open_spans(), 0);
    converter.finish(&mut out);
    (out, converter.stats())
}

fn by_name<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| {
        panic!(
            "no span {name} in {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        )
    })
}

#[test]
fn tracing_spans_pairs_and_events_become_spans_and_log_records() {
    let (out, stats) = convert();
    let app = &out.spans["app"];
    let web = &out.spans["web"];
    assert_eq!((app.len(), web.len()), (2, 1), "{out:#?}");
    let outer = by_name(app, "outer");
    let inner = by_name(app, "inner");
    let request = by_name(web, "Request");

    // Ids: the sizes OTLP wants, never zero; a child in its parent's trace.
    for s in [outer, inner, request] {
        assert_eq!(s.trace_id.len(), 16);
        assert_eq!(s.span_id.len(), 8);
        assert!(s.span_id.iter().any(|&b| b != 0) && s.trace_id.iter().any(|&b| b != 0));
    }
    assert!(outer.parent_span_id.is_empty());
    assert_eq!(inner.parent_span_id, outer.span_id);
    assert_eq!(inner.trace_id, outer.trace_id);
    // The pair began while `outer` was entered on its thread.
    assert_eq!(request.parent_span_id, outer.span_id);
    assert_eq!(request.trace_id, outer.trace_id);
    assert_ne!(inner.span_id, outer.span_id);

    // Times: a `tracing` span from creation to close; a pair from begin to end.
    let base = outer.start_time_unix_nano;
    assert_eq!(outer.end_time_unix_nano - base, 10_000);
    assert_eq!(inner.start_time_unix_nano - base, 2_000);
    assert_eq!(inner.end_time_unix_nano - base, 6_000);
    assert_eq!(request.start_time_unix_nano - base, 7_000);
    assert_eq!(request.end_time_unix_nano - base, 8_000);

    // Typed attributes: the span's own fields, not its ids or name.
    assert_eq!(attr(&outer.attributes, "count"), Some(&Any::IntValue(7)));
    assert_eq!(attr(&inner.attributes, "count"), Some(&Any::IntValue(-1)));
    assert_eq!(
        attr(&outer.attributes, "ratio"),
        Some(&Any::DoubleValue(0.25))
    );
    assert_eq!(attr(&outer.attributes, "ok"), Some(&Any::BoolValue(true)));
    assert_eq!(
        attr(&outer.attributes, "who"),
        Some(&Any::StringValue("ann".into()))
    );
    assert_eq!(
        attr(&outer.attributes, "thread.id"),
        Some(&Any::IntValue(MAIN as i64))
    );
    assert_eq!(
        attr(&outer.attributes, "busy_ns"),
        Some(&Any::IntValue(8_000))
    );
    assert_eq!(
        attr(&inner.attributes, "busy_ns"),
        Some(&Any::IntValue(2_000))
    );
    for hidden in ["SpanId", "ParentSpanId", "Name"] {
        assert_eq!(attr(&outer.attributes, hidden), None, "{hidden}");
    }
    // The pair: the begin's fields and the end's.
    assert_eq!(
        attr(&request.attributes, "Path"),
        Some(&Any::StringValue("/a".into()))
    );
    assert_eq!(
        attr(&request.attributes, "Status"),
        Some(&Any::IntValue(200))
    );

    // The event: a log record in the span its thread was in, typed.
    let logs = &out.logs["app"];
    assert_eq!(logs.len(), 1, "{logs:#?}");
    let log = &logs[0];
    assert_eq!(log.time_unix_nano - base, 4_000);
    assert_eq!(log.severity_text, "WARN");
    assert_eq!(log.event_name, "Event main.rs:10");
    assert_eq!(
        log.body.as_ref().and_then(|b| b.value.clone()),
        Some(Any::StringValue("job done".into()))
    );
    assert_eq!(attr(&log.attributes, "n"), Some(&Any::IntValue(-3)));
    assert_eq!(attr(&log.attributes, "x"), Some(&Any::DoubleValue(1.5)));
    assert_eq!(attr(&log.attributes, "flag"), Some(&Any::BoolValue(false)));
    // Beyond i64: its digits, not a wrapped negative number.
    assert_eq!(
        attr(&log.attributes, "big"),
        Some(&Any::StringValue(u64::MAX.to_string()))
    );
    assert_eq!(attr(&log.attributes, "Message"), None);
    assert_eq!(log.span_id, inner.span_id);
    assert_eq!(log.trace_id, inner.trace_id);

    // The Stop with nothing open: a log record, counted.
    assert_eq!(out.logs["web"].len(), 1);
    assert_eq!(stats.unmatched_stops, 1);
    assert_eq!((stats.spans, stats.logs, stats.events), (3, 2, 12));
}

#[test]
fn ids_are_the_same_for_the_same_trace() {
    assert_eq!(convert().0, convert().0);
}

#[test]
fn spans_still_open_at_the_end_are_ended_and_marked() {
    let bytes = write_trace();
    let mut reader = nettrace::TraceReader::from_slice(&bytes).unwrap();
    let mut converter = EventConverter::new(PID);
    let mut out = Signals::default();
    // Up to the inner span's first entry: outer and inner open.
    for _ in 0..4 {
        let event = reader.next_event().unwrap().unwrap();
        converter.event(&event, &mut out);
    }
    assert!(out.spans.is_empty());
    assert_eq!(converter.open_spans(), 2);
    converter.finish(&mut out);
    let app = &out.spans["app"];
    assert_eq!(app.len(), 2);
    for s in app {
        assert_eq!(
            attr(&s.attributes, "eptrace.unfinished"),
            Some(&Any::BoolValue(true))
        );
        assert!(s.end_time_unix_nano >= s.start_time_unix_nano);
    }
    assert_eq!(converter.open_spans(), 0);
}

fn counter(name: &str, kind: CounterKind, value: f64) -> CounterValue {
    CounterValue::new("Demo", name, kind, value)
}

fn number(m: &Metric) -> (f64, u64, u64) {
    let p = match &m.data {
        Some(Data::Gauge(g)) => &g.data_points[0],
        Some(Data::Sum(s)) => &s.data_points[0],
        other => panic!("not a number: {other:?}"),
    };
    match p.value {
        Some(Number::AsDouble(v)) => (v, p.start_time_unix_nano, p.time_unix_nano),
        ref other => panic!("{other:?}"),
    }
}

#[test]
fn counters_become_gauges_cumulative_sums_and_summaries() {
    let mut c = CounterConverter::new();
    let mut out = Signals::default();
    let mut gauge = counter("fixed-gauge", CounterKind::Metric, 42.5);
    gauge.unit = "MB".into();
    gauge.tags = "kind=batch,zone=a".into();
    c.value(&gauge, 5_000_000_000, &mut out);
    c.value(
        &counter("fixed-total", CounterKind::Rate, 7.0),
        5_000_000_000,
        &mut out,
    );
    c.value(
        &counter("fixed-total", CounterKind::Rate, 7.0),
        6_000_000_000,
        &mut out,
    );
    c.value(
        &counter("depth", CounterKind::UpDownRate, -2.0),
        6_000_000_000,
        &mut out,
    );
    c.value(
        &counter("nan", CounterKind::Gauge, f64::NAN),
        6_000_000_000,
        &mut out,
    );
    let mut h = counter("latency", CounterKind::Histogram, 10.0);
    h.quantiles = vec![(0.5, 10.0), (0.99, 12.0)];
    h.stats = Some(MeanStats {
        count: 100,
        min: 9.0,
        max: 12.0,
        standard_deviation: 0.1,
    });
    c.value(&h, 6_000_000_000, &mut out);
    let metrics = &out.metrics["Demo"];
    assert_eq!(metrics.len(), 5, "the NaN gauge is left out: {metrics:#?}");

    assert_eq!(metrics[0].name, "fixed-gauge");
    assert_eq!(metrics[0].unit, "MBy");
    assert_eq!(number(&metrics[0]), (42.5, 0, 5_000_000_000));
    let Some(Data::Gauge(g)) = &metrics[0].data else {
        panic!()
    };
    assert_eq!(
        attr(&g.data_points[0].attributes, "zone"),
        Some(&Any::StringValue("a".into()))
    );

    // A rate is a cumulative, monotonic sum from the start of its first interval.
    for (m, total) in [(&metrics[1], 7.0), (&metrics[2], 14.0)] {
        let Some(Data::Sum(s)) = &m.data else {
            panic!()
        };
        assert!(s.is_monotonic);
        assert_eq!(
            s.aggregation_temporality,
            proto::metrics::v1::AggregationTemporality::Cumulative as i32
        );
        assert_eq!(number(m).0, total);
        assert_eq!(number(m).1, 4_000_000_000);
    }
    let Some(Data::Sum(s)) = &metrics[3].data else {
        panic!()
    };
    assert!(!s.is_monotonic);
    assert_eq!(number(&metrics[3]).0, -2.0);

    let Some(Data::Summary(summary)) = &metrics[4].data else {
        panic!("{:?}", metrics[4])
    };
    let p = &summary.data_points[0];
    assert_eq!((p.count, p.sum), (100, 1000.0));
    let q: Vec<(f64, f64)> = p
        .quantile_values
        .iter()
        .map(|q| (q.quantile, q.value))
        .collect();
    assert_eq!(q, [(0.5, 10.0), (0.99, 12.0)]);
}

fn target() -> Target {
    Target {
        service_name: "svc".into(),
        pid: PID,
        host_name: "box".into(),
        runtime: "rust".into(),
    }
}

#[test]
fn a_batch_is_one_request_per_signal_with_the_resource() {
    let (signals, _) = convert();
    let mut metrics = Signals::default();
    CounterConverter::new().value(&counter("g", CounterKind::Gauge, 1.0), 1, &mut metrics);
    let mut batch = Batch::default();
    batch.add(&target(), signals);
    batch.add(&target(), metrics);
    assert_eq!(batch.len(), 3 + 2 + 1);
    let endpoint = Endpoint::new(
        "http://127.0.0.1:4318/",
        vec![("Authorization".into(), "Bearer x".into())],
    )
    .unwrap();
    let requests = batch.take_requests(&endpoint);
    assert!(batch.is_empty());
    let urls: Vec<&str> = requests.iter().map(|r| r.url.as_str()).collect();
    assert_eq!(
        urls,
        [
            "http://127.0.0.1:4318/v1/traces",
            "http://127.0.0.1:4318/v1/logs",
            "http://127.0.0.1:4318/v1/metrics"
        ]
    );
    for r in &requests {
        assert_eq!(r.content_type, "application/x-protobuf");
        assert_eq!(r.headers, endpoint.headers);
        assert!(r.what.contains("svc (4242)"), "{}", r.what);
    }
    assert!(
        requests[0].what.starts_with("3 span(s)"),
        "{}",
        requests[0].what
    );

    let traces = ExportTraceServiceRequest::decode(&requests[0].body[..]).unwrap();
    let resource = traces.resource_spans[0].resource.as_ref().unwrap();
    let expect: BTreeMap<&str, Any> = [
        ("service.name", Any::StringValue("svc".into())),
        ("process.pid", Any::IntValue(4242)),
        ("host.name", Any::StringValue("box".into())),
        ("process.runtime.name", Any::StringValue("rust".into())),
    ]
    .into();
    for (k, v) in expect {
        assert_eq!(attr(&resource.attributes, k), Some(&v), "{k}");
    }
    let scopes: Vec<&str> = traces.resource_spans[0]
        .scope_spans
        .iter()
        .map(|s| s.scope.as_ref().unwrap().name.as_str())
        .collect();
    assert_eq!(scopes, ["app", "web"]);
    let logs = ExportLogsServiceRequest::decode(&requests[1].body[..]).unwrap();
    assert_eq!(logs.resource_logs[0].scope_logs.len(), 2);
    let metrics = ExportMetricsServiceRequest::decode(&requests[2].body[..]).unwrap();
    assert_eq!(
        metrics.resource_metrics[0].scope_metrics[0].metrics[0].name,
        "g"
    );
}

#[test]
fn endpoint_mistakes_are_named() {
    for (url, expected) in [
        ("127.0.0.1:4318", "http:// or https://"),
        ("http://", "no host"),
        ("http://h:4318/v1/traces", "base URL"),
        ("http://h:4318?x=1", "without query"),
    ] {
        let e = Endpoint::new(url, Vec::new()).unwrap_err().to_string();
        assert!(e.contains(expected) && e.contains(url), "{url}: {e}");
    }
    assert_eq!(
        Endpoint::new("https://otel.example:4318/prefix/", Vec::new())
            .unwrap()
            .base,
        "https://otel.example:4318/prefix"
    );
}
