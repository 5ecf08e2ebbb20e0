//! Conformance with TraceEvent: for every trace in `../shared/traces` that has a TraceEvent
//! baseline, every `Provider/EventName` count must equal TraceEvent's, and the payload of
//! the first event of each self-describing event must equal the baseline's values.

mod common;

use std::collections::BTreeMap;

use nettrace::{SortedReader, TraceReader, Value};

fn baselines() -> Vec<std::path::PathBuf> {
    let Some(dir) = common::shared_traces("conformance") else {
        return Vec::new();
    };
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".baseline.txt"))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no baselines in {}", dir.display());
    out
}

fn trace_of(baseline: &std::path::Path) -> std::path::PathBuf {
    std::path::PathBuf::from(baseline.to_string_lossy().trim_end_matches(".baseline.txt"))
}

#[test]
fn event_counts_match_traceevent_baselines() {
    for baseline in baselines() {
        let bytes = std::fs::read(trace_of(&baseline)).unwrap();
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        while let Some(event) = reader.next_event().unwrap() {
            *counts.entry(event.qualified_name()).or_default() += 1;
        }
        let mut mismatches = Vec::new();
        for line in common::read_baseline(&baseline) {
            let ours = counts.get(&line.name).copied().unwrap_or(0);
            if ours != line.count {
                mismatches.push(format!(
                    "{}: TraceEvent {} vs ours {}",
                    line.name, line.count, ours
                ));
            }
        }
        assert!(
            mismatches.is_empty(),
            "{}:\n{}\nour names: {:?}",
            baseline.display(),
            mismatches.join("\n"),
            counts
        );
    }
}

/// TraceEvent's rendering of a value in a baseline (en-US): 32/64-bit signed integers with
/// thousands separators, other numbers plain, arrays as `[a,b]` of plain elements.
fn traceevent_text(v: &Value) -> String {
    fn grouped(n: i64) -> String {
        let digits = n.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, ch) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(ch);
        }
        if n < 0 {
            format!("-{out}")
        } else {
            out
        }
    }
    match v {
        Value::I32(n) => grouped(i64::from(*n)),
        Value::I64(n) => grouped(*n),
        Value::Bool(b) => {
            if *b {
                "True".into()
            } else {
                "False".into()
            }
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(|i| i.to_string()).collect();
            format!("[{}]", parts.join(","))
        }
        other => other.to_string(),
    }
}

#[test]
fn first_self_describing_payloads_match_traceevent_baselines() {
    let mut checked = 0;
    for baseline in baselines() {
        let bytes = std::fs::read(trace_of(&baseline)).unwrap();
        let lines = common::read_baseline(&baseline);
        let mut reader = SortedReader::new(TraceReader::from_slice(&bytes).unwrap());
        let mut firsts: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        while let Some(event) = reader.next_event().unwrap() {
            if event.metadata.fields_from_manifest || event.metadata.fields.is_empty() {
                continue;
            }
            let name = event.qualified_name();
            if firsts.contains_key(&name) {
                continue;
            }
            let fields = event.decode_payload().unwrap();
            firsts.insert(
                name,
                fields
                    .iter()
                    .map(|(n, v)| (n.to_string(), traceevent_text(v)))
                    .collect(),
            );
        }
        for line in &lines {
            let Some(ours) = firsts.get(&line.name) else {
                continue;
            };
            let expected: Vec<(String, String)> = line
                .attributes
                .iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "MSec"
                            | "PID"
                            | "PName"
                            | "TID"
                            | "EventName"
                            | "ProviderName"
                            | "FormattedMessage"
                            | "ActivityID"
                    )
                })
                .cloned()
                .collect();
            assert_eq!(ours, &expected, "{} in {}", line.name, baseline.display());
            checked += 1;
        }
    }
    if !baselines().is_empty() {
        assert!(
            checked >= 4,
            "only {checked} self-describing events were compared"
        );
    }
}

#[test]
fn first_event_times_match_traceevent_msec_and_sorted_order_holds() {
    for baseline in baselines() {
        let bytes = std::fs::read(trace_of(&baseline)).unwrap();
        let lines = common::read_baseline(&baseline);
        let file_order_count = {
            let mut r = TraceReader::from_slice(&bytes).unwrap();
            let mut n = 0u64;
            while r.next_event().unwrap().is_some() {
                n += 1;
            }
            n
        };
        let mut reader = SortedReader::new(TraceReader::from_slice(&bytes).unwrap());
        let mut first_msec: BTreeMap<String, f64> = BTreeMap::new();
        let mut last = i64::MIN;
        let mut n = 0u64;
        while let Some(event) = reader.next_event().unwrap() {
            assert!(
                event.header.timestamp >= last,
                "{}: sorted output went back in time",
                baseline.display()
            );
            last = event.header.timestamp;
            first_msec
                .entry(event.qualified_name())
                .or_insert_with(|| event.timestamp_msec().max(0.0));
            n += 1;
        }
        assert_eq!(
            n,
            file_order_count,
            "{}: sorting lost or duplicated events",
            baseline.display()
        );
        assert!(
            (reader.peak_pending() as u64) < file_order_count.max(2),
            "{}: sorting held the whole trace",
            baseline.display()
        );
        for line in &lines {
            let want: f64 = line
                .attributes
                .iter()
                .find(|(k, _)| k == "MSec")
                .map(|(_, v)| v.trim().parse().unwrap())
                .unwrap();
            let ours = first_msec[&line.name];
            assert!(
                (ours - want).abs() < 0.0001,
                "{} {}: MSec {want} vs ours {ours:.4}",
                baseline.display(),
                line.name
            );
        }
    }
}

/// A baseline value as a number: decimal with thousands separators, hex, or a float.
fn baseline_number(text: &str) -> Option<f64> {
    if let Some(hex) = text.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).ok().map(|v| v as f64);
    }
    text.replace(',', "").parse::<f64>().ok()
}

#[test]
fn first_native_event_payloads_match_traceevent_baselines() {
    let mut compared = 0;
    for baseline in baselines() {
        let bytes = std::fs::read(trace_of(&baseline)).unwrap();
        let mut reader = SortedReader::new(TraceReader::from_slice(&bytes).unwrap());
        let mut firsts: BTreeMap<String, Vec<(String, Value)>> = BTreeMap::new();
        while let Some(event) = reader.next_event().unwrap() {
            if event.metadata.fields_from_manifest && !firsts.contains_key(&event.qualified_name())
            {
                let fields = event.decode_payload().unwrap();
                let owned = fields
                    .into_iter()
                    .map(|(n, v)| (n.to_string(), v))
                    .collect();
                firsts.insert(event.qualified_name(), owned);
            }
        }
        for line in common::read_baseline(&baseline) {
            let Some(ours) = firsts.get(&line.name) else {
                continue;
            };
            for (name, text) in &line.attributes {
                let Some((_, value)) = ours.iter().find(|(n, _)| n == name) else {
                    continue;
                };
                let context = format!(
                    "{} {} {name}: baseline {text:?}, ours {value}",
                    baseline.display(),
                    line.name
                );
                match value {
                    Value::String(s) => assert_eq!(s, text, "{context}"),
                    _ => {
                        // Value maps (Reason="AllocSmall") print names; only numbers compare.
                        let (Some(want), Some(got)) = (baseline_number(text), value.as_f64())
                        else {
                            continue;
                        };
                        let tolerance = want.abs() * 1e-9;
                        // TraceEvent prints some unsigned manifest fields as signed: same bits.
                        let same_bits = match value {
                            Value::U32(v) => want < 0.0 && (want as i64) as u32 == *v,
                            Value::U64(v) => want < 0.0 && (want as i64) as u64 == *v,
                            _ => false,
                        };
                        assert!((want - got).abs() <= tolerance || same_bits, "{context}");
                    }
                }
                compared += 1;
            }
        }
    }
    if !baselines().is_empty() {
        assert!(compared >= 150, "only {compared} native fields compared");
    }
}

/// A filtered sorted read yields exactly the events the filter keeps, in the order the
/// unfiltered sorted read yields them, and its filter sees every event of the trace.
#[test]
fn a_filtered_sorted_read_keeps_the_full_reads_order_and_sees_every_event() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    for baseline in baselines() {
        let bytes = std::fs::read(trace_of(&baseline)).unwrap();
        let keep = |provider: &str, id: u32| provider.contains("DotNETRuntime") && id % 3 == 1;
        let mut full = SortedReader::new(TraceReader::from_slice(&bytes).unwrap());
        let mut expected = Vec::new();
        let mut all = 0u64;
        while let Some(e) = full.next_event().unwrap() {
            all += 1;
            if keep(&e.metadata.provider, e.metadata.event_id) {
                expected.push((e.header.timestamp, e.offset));
            }
        }
        let seen = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&seen);
        let mut filtered =
            SortedReader::with_filter(TraceReader::from_slice(&bytes).unwrap(), move |e| {
                counter.fetch_add(1, Ordering::Relaxed);
                keep(&e.metadata().provider, e.metadata().event_id)
            })
            .checking_order();
        let mut got = Vec::new();
        while let Some(e) = filtered.next_event().unwrap() {
            got.push((e.header.timestamp, e.offset));
        }
        assert_eq!(got, expected, "{}", baseline.display());
        assert_eq!(seen.load(Ordering::Relaxed), all, "{}", baseline.display());
        // Its order check is the one a pass holding timestamps alone makes.
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let alone = nettrace::check_sorted_order(&mut reader, 1024, |_, _| true).unwrap();
        assert_eq!(
            filtered.order_check(),
            Some(alone),
            "{}",
            baseline.display()
        );
        assert_eq!(alone.events, all);
    }
}
