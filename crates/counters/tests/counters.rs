//! The counters decoder on synthetic traces laid out as .NET writes them (an
//! `EventCounters` event whose one field is a struct holding `Payload`; Meters events with
//! their values as text): values come back exact, and a payload that is cut short or text
//! that is no number gives nothing rather than a wrong value or a panic.

use eventpipe_counters::{decode_counter_event, CounterEvent, CounterKind};
use eventpipe_test_support::trace::{field, utf16, TraceBuilder};
use nettrace::{EventMetadata, FieldType, FormatVersion, TraceReader};

/// The `Mean` shape, as .NET 8 declares it.
fn mean_metadata() -> EventMetadata {
    use FieldType::*;
    let payload = vec![
        field("Name", Utf16String),
        field("DisplayName", Utf16String),
        field("Mean", Double),
        field("StandardDeviation", Double),
        field("Count", Int32),
        field("Min", Double),
        field("Max", Double),
        field("IntervalSec", Single),
        field("Series", Utf16String),
        field("CounterType", Utf16String),
        field("Metadata", Utf16String),
        field("DisplayUnits", Utf16String),
    ];
    EventMetadata {
        metadata_id: 1,
        provider: "Shop".into(),
        event_id: 2,
        event_name: "EventCounters".into(),
        fields: vec![field("", Object(vec![field("Payload", Object(payload))]))],
        ..Default::default()
    }
}

fn meters_metadata() -> EventMetadata {
    use FieldType::Utf16String;
    EventMetadata {
        metadata_id: 2,
        provider: "System.Diagnostics.Metrics".into(),
        event_id: 10,
        event_name: "HistogramValuePublished".into(),
        fields: [
            "sessionId",
            "meterName",
            "meterVersion",
            "instrumentName",
            "unit",
            "tags",
            "quantiles",
        ]
        .iter()
        .map(|n| field(n, Utf16String))
        .collect(),
        ..Default::default()
    }
}

fn mean_payload(mean: f64) -> Vec<u8> {
    let mut p = utf16("queue-length");
    p.extend(utf16("Queue Length"));
    p.extend(mean.to_le_bytes());
    p.extend(0f64.to_le_bytes());
    p.extend(3i32.to_le_bytes());
    p.extend(1f64.to_le_bytes());
    p.extend(9f64.to_le_bytes());
    p.extend(1f32.to_le_bytes());
    p.extend(utf16("Interval=1000"));
    p.extend(utf16("Mean"));
    p.extend(utf16(""));
    p.extend(utf16(""));
    p
}

fn histogram_payload(session: &str, quantiles: &str) -> Vec<u8> {
    let mut p = Vec::new();
    for s in [
        session,
        "Shop.Meter",
        "",
        "latency",
        "ms",
        "route=/a",
        quantiles,
    ] {
        p.extend(utf16(s));
    }
    p
}

fn decode(events: &[(u32, Vec<u8>)]) -> Vec<Option<CounterEvent>> {
    let mut trace =
        TraceBuilder::new(FormatVersion::V5).metadata(vec![mean_metadata(), meters_metadata()]);
    for (i, (id, payload)) in events.iter().enumerate() {
        trace = trace.event(1, 100 + i as i64, *id, payload.clone());
    }
    let bytes = trace.build();
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let mut out = Vec::new();
    while let Some(e) = reader.next_event().unwrap() {
        out.push(decode_counter_event(&e, Some("mine")));
    }
    out
}

#[test]
fn values_come_back_exact_and_damaged_ones_give_nothing() {
    let mut cut = mean_payload(4.0);
    cut.truncate(30);
    let decoded = decode(&[
        (1, mean_payload(4.25)),
        (1, cut),
        (2, histogram_payload("mine", "0.5=1.5;0.95=2;0.99=7")),
        (2, histogram_payload("theirs", "0.5=1")),
        (2, histogram_payload("mine", "not numbers")),
    ]);
    let Some(CounterEvent::Value(mean)) = &decoded[0] else {
        panic!("{decoded:?}");
    };
    assert_eq!(mean.kind, CounterKind::Metric);
    assert_eq!((mean.name.as_str(), mean.value), ("queue-length", 4.25));
    let stats = mean.stats.unwrap();
    assert_eq!((stats.count, stats.min, stats.max), (3, 1.0, 9.0));
    assert_eq!(mean.series_ms, Some(1000));
    assert_eq!(mean.display(), "Queue Length");
    // Cut short: nothing, not a value read from the wrong bytes.
    assert_eq!(decoded[1], None);
    let Some(CounterEvent::Value(h)) = &decoded[2] else {
        panic!("{decoded:?}");
    };
    assert_eq!(h.kind, CounterKind::Histogram);
    assert_eq!(h.quantiles, vec![(0.5, 1.5), (0.95, 2.0), (0.99, 7.0)]);
    assert_eq!(
        (h.provider.as_str(), h.tags.as_str()),
        ("Shop.Meter", "route=/a")
    );
    // Another session's values are not ours.
    assert_eq!(decoded[3], None);
    // No quantile that reads as a number: a histogram with no percentiles, no made-up value.
    match &decoded[4] {
        Some(CounterEvent::Value(v)) => assert!(v.quantiles.is_empty() && v.value.is_nan()),
        other => panic!("{other:?}"),
    }
}
