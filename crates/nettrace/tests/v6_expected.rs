//! NetTrace V6 files written by an independent writer (one-collect) read back with exactly
//! the contents their `.expected.json` states: counts, threads, stacks, labels, and the
//! header, stack, labels and decoded payload of the first event of every name (and of every
//! event in the small file).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use nettrace::{Event, FormatVersion, Label, TraceReader, Value};
use serde_json::Value as Json;

const FILES: [&str; 3] = [
    "onecollect-v6-small",
    "onecollect-v6-medium",
    "onecollect-v6-cpu-capture",
];

fn raw_name(e: &Event<'_>) -> String {
    // The expected files name events as written, before TraceEvent's Start/Stop split.
    format!("{}/{}", e.metadata.provider, e.metadata.event_name)
}

fn check_event(e: &Event<'_>, want: &Json, context: &str) {
    let ctx = format!("{context}: {}", raw_name(e));
    assert_eq!(
        e.header.timestamp,
        want["timestamp_ticks"].as_i64().unwrap(),
        "{ctx} timestamp"
    );
    assert_eq!(e.process_id(), want["pid"].as_u64(), "{ctx} pid");
    assert_eq!(e.thread_id(), want["tid"].as_u64().unwrap(), "{ctx} tid");
    assert_eq!(
        u64::from(e.header.processor),
        want["processor"].as_u64().unwrap(),
        "{ctx} processor"
    );
    let stack: Vec<String> = e.stack_ips().map(|ip| format!("{ip:#x}")).collect();
    match want["stack"].as_array() {
        Some(ips) => {
            let want: Vec<String> = ips
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect();
            assert_eq!(stack, want, "{ctx} stack");
        }
        None => assert!(stack.is_empty(), "{ctx} has an unexpected stack"),
    }
    match want["labels"].as_array() {
        Some(labels) => {
            let got = e.labels.expect("labels");
            assert_eq!(got.len(), labels.len(), "{ctx} label count");
            for (g, w) in got.iter().zip(labels) {
                match g {
                    Label::String { key, value } => {
                        assert_eq!(Some(key.as_str()), w["key"].as_str(), "{ctx}");
                        assert_eq!(Some(value.as_str()), w["value"].as_str(), "{ctx}");
                    }
                    Label::Int { key, value } => {
                        assert_eq!(Some(key.as_str()), w["key"].as_str(), "{ctx}");
                        assert_eq!(
                            Some(*value),
                            w["value_decoded_per_spec_zigzag"].as_i64(),
                            "{ctx}"
                        );
                    }
                    other => panic!("{ctx}: unexpected label {other:?}"),
                }
            }
        }
        None => assert!(e.labels.is_none(), "{ctx} has unexpected labels"),
    }
    if let Some(hex) = want["payload_hex"].as_str() {
        let got: String = e.payload.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, hex, "{ctx} payload bytes");
    }
    if let Some(fields) = want["fields"].as_array() {
        // Bytes the metadata does not declare are covered by the payload comparison above.
        let fields: Vec<&Json> = fields
            .iter()
            .filter(|f| !f["name"].as_str().unwrap_or("").starts_with("(undeclared)"))
            .collect();
        let decoded = e.decode_payload().unwrap();
        assert_eq!(
            decoded.len(),
            fields.len(),
            "{ctx} field count: {decoded:?}"
        );
        for ((name, value), w) in decoded.iter().zip(fields.iter().copied()) {
            assert_eq!(Some(*name), w["name"].as_str(), "{ctx}");
            let expected = &w["value"];
            match value {
                Value::String(s) => assert_eq!(Some(s.as_str()), expected.as_str(), "{ctx} {name}"),
                Value::F32(_) | Value::F64(_) => {
                    assert_eq!(value.as_f64(), expected.as_f64(), "{ctx} {name}")
                }
                other => assert_eq!(
                    other
                        .as_i64()
                        .map(|v| v.to_string())
                        .or_else(|| other.as_u64().map(|v| v.to_string())),
                    Some(expected.to_string()),
                    "{ctx} {name}"
                ),
            }
        }
    }
}

#[test]
fn v6_traces_match_their_stated_contents() {
    let Some(dir) = common::shared_traces("v6_traces_match_their_stated_contents") else {
        return;
    };
    for file in FILES {
        let expected: Json = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{file}.nettrace.expected.json"))).unwrap(),
        )
        .unwrap();
        let bytes = std::fs::read(dir.join(format!("{file}.nettrace"))).unwrap();
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let trace = reader.trace().clone();
        assert_eq!(trace.version, FormatVersion::V6);
        let tb = &expected["trace_block"];
        assert_eq!(
            trace.sync_time_ticks,
            tb["sync_time_ticks"].as_i64().unwrap(),
            "{file}"
        );
        assert_eq!(
            trace.tick_frequency,
            tb["tick_frequency"].as_i64().unwrap(),
            "{file}"
        );
        assert_eq!(
            u64::from(trace.pointer_size),
            tb["pointer_size"].as_u64().unwrap(),
            "{file}"
        );
        for (k, v) in tb["key_values"].as_object().unwrap() {
            assert!(
                trace
                    .key_values
                    .contains(&(k.clone(), v.as_str().unwrap().to_string())),
                "{file} key {k}"
            );
        }

        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let mut per_thread: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        let mut with_stack = 0;
        let mut stacks = BTreeSet::new();
        let mut with_labels = 0;
        let mut firsts_checked = 0;
        let all_events = expected["events"].as_array();
        let mut index = 0;
        while let Some(e) = reader.next_event().unwrap() {
            let name = raw_name(&e);
            let count = counts.entry(name.clone()).or_default();
            if *count == 0 {
                check_event(&e, &expected["first_event_by_name"][&name], file);
                firsts_checked += 1;
            }
            *count += 1;
            if let Some(all) = all_events {
                check_event(&e, &all[index], &format!("{file} event #{index}"));
            }
            *per_thread
                .entry((e.process_id().unwrap(), e.thread_id()))
                .or_default() += 1;
            if e.stack.is_some() {
                with_stack += 1;
                stacks.insert(e.stack_ips().collect::<Vec<_>>());
            }
            if e.labels.is_some() {
                with_labels += 1;
            }
            index += 1;
        }
        assert_eq!(
            index as u64,
            expected["total_events"].as_u64().unwrap(),
            "{file} total"
        );
        let want_counts: BTreeMap<String, u64> = expected["event_counts_by_name"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
            .collect();
        assert_eq!(counts, want_counts, "{file} counts by name");
        assert_eq!(firsts_checked, want_counts.len());
        let want_threads: BTreeMap<(u64, u64), u64> = expected["threads"]["per_thread"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    (t["pid"].as_u64().unwrap(), t["tid"].as_u64().unwrap()),
                    t["events"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(per_thread, want_threads, "{file} per-thread counts");
        assert_eq!(
            with_stack,
            expected["events_with_stack"].as_u64().unwrap(),
            "{file} events with stack"
        );
        assert_eq!(
            stacks.len() as u64,
            expected["distinct_stacks"].as_u64().unwrap(),
            "{file} distinct stacks"
        );
        assert_eq!(
            with_labels,
            expected["events_with_label_list"].as_u64().unwrap(),
            "{file} with labels"
        );
        assert_eq!(
            reader.stats().lost_events,
            expected["lost_events"].as_u64().unwrap(),
            "{file} lost"
        );
        assert!(
            reader.is_finished(),
            "{file} did not reach its end-of-stream block"
        );
    }
}
