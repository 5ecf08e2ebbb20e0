//! `/metrics`: every target's latest counter values in Prometheus's text exposition
//! format (version 0.0.4), named as dotnet-monitor names them (`provider_counter_unit`,
//! lower case, `_` for anything else) with units in Prometheus's base units: `MB` becomes
//! `_bytes` (× 10⁶), `B` `_bytes`, `%` `_ratio` (÷ 100). A rate (an increase per
//! interval) is summed into a counter ending in `_total`; a histogram is a summary with
//! `quantile` labels. Every series is labelled `pid`, `process` and `runtime` (`rust` or
//! `dotnet`), plus the counter's own tags.
//!
//! A .NET target watched with its runtime's events also has its GC totals, labelled
//! `generation`: `dotnet_gc_collections_total` and `dotnet_gc_pause_seconds_total`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use eventpipe_counters::{CounterKind, CounterValue};

/// One series: its labels and value.
#[derive(Debug, Clone)]
struct Series {
    labels: Vec<(String, String)>,
    value: f64,
}

/// A metric family: a name, a type and its series, by label text.
#[derive(Debug, Clone)]
struct Family {
    kind: &'static str,
    help: String,
    series: BTreeMap<String, Series>,
}

/// The latest values, by family name; families are grouped per target so that a target
/// that exits takes its series with it.
#[derive(Debug, Default)]
pub(crate) struct Store {
    targets: Mutex<BTreeMap<u32, BTreeMap<String, Family>>>,
}

/// What labels every series of a target carries.
#[derive(Debug, Clone)]
pub(crate) struct TargetLabels {
    pub(crate) pid: u32,
    pub(crate) process: String,
    pub(crate) runtime: String,
}

impl Store {
    /// Takes a value a target published.
    pub(crate) fn record(&self, target: &TargetLabels, v: &CounterValue) {
        let (suffix, scale) = unit(&v.unit);
        let mut name = format!("{}_{}", normalize_provider(&v.provider), normalize(&v.name));
        if !suffix.is_empty() && !name.ends_with(suffix) {
            name.push('_');
            name.push_str(suffix);
        }
        let mut labels = base_labels(target);
        for tag in v.tags.split(',').filter(|t| !t.is_empty()) {
            let (k, val) = tag.split_once('=').unwrap_or((tag, ""));
            let k = normalize(k);
            if !labels.iter().any(|(l, _)| *l == k) && k != "quantile" {
                labels.push((k, val.to_owned()));
            }
        }
        let help = if v.display_name.is_empty() {
            format!("{} {}", v.provider, v.name)
        } else {
            format!("{} ({})", v.display_name, v.provider)
        };
        let mut targets = self.lock();
        let families = targets.entry(target.pid).or_default();
        match v.kind {
            CounterKind::Rate => {
                if !name.ends_with("_total") {
                    name.push_str("_total");
                }
                let family = families.entry(name).or_insert_with(|| Family {
                    kind: "counter",
                    help,
                    series: BTreeMap::new(),
                });
                let key = label_text(&labels);
                let series = family
                    .series
                    .entry(key)
                    .or_insert(Series { labels, value: 0.0 });
                if v.value.is_finite() && v.value >= 0.0 {
                    series.value += scale(v.value);
                }
            }
            CounterKind::Histogram if !v.quantiles.is_empty() => {
                let family = families.entry(name).or_insert_with(|| Family {
                    kind: "summary",
                    help,
                    series: BTreeMap::new(),
                });
                for &(q, value) in &v.quantiles {
                    let mut labels = labels.clone();
                    labels.push(("quantile".to_owned(), format!("{q}")));
                    family.series.insert(
                        label_text(&labels),
                        Series {
                            labels,
                            value: scale(value),
                        },
                    );
                }
            }
            _ => {
                let family = families.entry(name).or_insert_with(|| Family {
                    kind: "gauge",
                    help,
                    series: BTreeMap::new(),
                });
                family.series.insert(
                    label_text(&labels),
                    Series {
                        labels,
                        value: scale(v.value),
                    },
                );
            }
        }
    }

    /// Starts a .NET target's GC totals at zero for each generation, so that they exist
    /// (and `rate()` sees their first increase) before its first GC.
    pub(crate) fn start_gc_totals(&self, target: &TargetLabels) {
        for generation in 0..=2 {
            self.add_gc(target, generation, 0, 0.0);
        }
    }

    /// Counts a complete GC of `generation` that paused the program `pause_ms` (as the
    /// runtime counts it: `CompletedGc::runtime_pause_ms`), in the
    /// target's GC totals (from its runtime's GC events: counted from when the agent's
    /// session began, as `GC.CollectionCount` counts from the process's start).
    pub(crate) fn record_gc(&self, target: &TargetLabels, generation: u32, pause_ms: f64) {
        self.add_gc(target, generation, 1, pause_ms);
    }

    fn add_gc(&self, target: &TargetLabels, generation: u32, count: u64, pause_ms: f64) {
        let mut labels = base_labels(target);
        labels.push(("generation".to_owned(), generation.to_string()));
        let key = label_text(&labels);
        let mut targets = self.lock();
        let families = targets.entry(target.pid).or_default();
        for (name, help, add) in [
            (
                GC_COUNT,
                "GCs complete, by the generation each collected (.NET runtime events; \
                 since the agent attached)",
                count as f64,
            ),
            (
                GC_PAUSE,
                "Time the program was paused for GCs, by generation, as the runtime counts \
                 it (to each GC's end, before its threads restart: GC.GetTotalPauseDuration) \
                 (.NET runtime events; since the agent attached)",
                pause_ms / 1000.0,
            ),
        ] {
            let family = families.entry(name.to_owned()).or_insert_with(|| Family {
                kind: "counter",
                help: help.to_owned(),
                series: BTreeMap::new(),
            });
            family
                .series
                .entry(key.clone())
                .or_insert(Series {
                    labels: labels.clone(),
                    value: 0.0,
                })
                .value += add;
        }
    }

    /// Forgets a target that exited.
    pub(crate) fn forget(&self, pid: u32) {
        self.lock().remove(&pid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, BTreeMap<String, Family>>> {
        // Updates are whole inserts; a poisoned store is still consistent.
        self.targets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The exposition text of every family, then `extra` (the agent's own health).
    pub(crate) fn render(&self, out: &mut String) {
        let targets = self.lock();
        // A family may have series from several targets: merge by name.
        let mut merged: BTreeMap<&str, (&Family, Vec<&Series>)> = BTreeMap::new();
        for families in targets.values() {
            for (name, family) in families {
                let entry = merged.entry(name).or_insert((family, Vec::new()));
                if entry.0.kind == family.kind {
                    entry.1.extend(family.series.values());
                }
            }
        }
        for (name, (family, series)) in merged {
            let _ = writeln!(out, "# HELP {name} {}", escape_help(&family.help));
            let _ = writeln!(out, "# TYPE {name} {}", family.kind);
            for s in series {
                let _ = writeln!(out, "{name}{} {}", label_text(&s.labels), number(s.value));
            }
        }
    }
}

/// The family of GC counts per generation.
pub(crate) const GC_COUNT: &str = "dotnet_gc_collections_total";
/// The family of GC pause time per generation.
pub(crate) const GC_PAUSE: &str = "dotnet_gc_pause_seconds_total";

/// The labels every series of `target` carries.
fn base_labels(target: &TargetLabels) -> Vec<(String, String)> {
    vec![
        ("pid".to_owned(), target.pid.to_string()),
        ("process".to_owned(), target.process.clone()),
        ("runtime".to_owned(), target.runtime.clone()),
    ]
}

/// One family of the agent's own metrics.
pub(crate) fn own(out: &mut String, name: &str, kind: &str, help: &str, series: &[(&str, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in series {
        let _ = writeln!(out, "{name}{labels} {}", number(*value));
    }
}

/// The delivery counts of the agent's export backends, one series per backend
/// (`backend="otlp"`, `backend="pyroscope"`), each family written once.
pub(crate) fn deliveries(out: &mut String, backends: &[(&str, eventpipe_export::delivery::Stats)]) {
    if backends.is_empty() {
        return;
    }
    type Pick = fn(&eventpipe_export::delivery::Stats) -> f64;
    let families: [(&str, &str, &str, Pick); 9] = [
        (
            "eptrace_agent_export_sent_total",
            "counter",
            "Requests the backend accepted",
            |s| s.sent as f64,
        ),
        (
            "eptrace_agent_export_retries_total",
            "counter",
            "Attempts that failed and are tried again (connection errors, timeouts, 408, 429, 5xx)",
            |s| s.retries as f64,
        ),
        (
            "eptrace_agent_export_dropped_total",
            "counter",
            "Requests dropped: the queue over its bound, or unreadable",
            |s| s.dropped as f64,
        ),
        (
            "eptrace_agent_export_rejected_total",
            "counter",
            "Requests the backend refused for good (the agent's log says why)",
            |s| s.rejected as f64,
        ),
        (
            "eptrace_agent_export_expired_total",
            "counter",
            "Requests dropped unsent: older than the backend takes",
            |s| s.expired as f64,
        ),
        (
            "eptrace_agent_export_unconfirmed_total",
            "counter",
            "Requests sent whole that got no answer in time and were not sent again (the backend may have stored them)",
            |s| s.unconfirmed as f64,
        ),
        (
            "eptrace_agent_export_queued",
            "gauge",
            "Requests waiting to be sent",
            |s| s.queued as f64,
        ),
        (
            "eptrace_agent_export_queued_bytes",
            "gauge",
            "Bytes of the requests waiting",
            |s| s.queued_bytes as f64,
        ),
        (
            "eptrace_agent_export_failing",
            "gauge",
            "1 while the backend's last attempt failed",
            |s| f64::from(u8::from(s.failing)),
        ),
    ];
    for (name, kind, help, pick) in families {
        let series: Vec<(String, f64)> = backends
            .iter()
            .map(|(backend, stats)| {
                (
                    label_text(&[("backend".to_owned(), (*backend).to_owned())]),
                    pick(stats),
                )
            })
            .collect();
        let series: Vec<(&str, f64)> = series.iter().map(|(l, v)| (l.as_str(), *v)).collect();
        own(out, name, kind, help, &series);
    }
}

/// The suffix, and the value in base units.
fn unit(unit: &str) -> (&'static str, fn(f64) -> f64) {
    match unit {
        "MB" => ("bytes", |v| v * 1e6),
        "B" | "bytes" | "By" => ("bytes", |v| v),
        // Divisions, not products with 0.01: 25 % is exactly 0.25.
        "%" => ("ratio", |v| v / 100.0),
        "ms" => ("seconds", |v| v / 1000.0),
        "s" => ("seconds", |v| v),
        _ => ("", |v| v),
    }
}

/// A provider's part of a name: its letters and digits, lower case (`System.Runtime` →
/// `systemruntime`, as dotnet-monitor writes it).
fn normalize_provider(text: &str) -> String {
    let out: String = text
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) || out.is_empty() {
        format!("_{out}")
    } else {
        out
    }
}

/// Lower case; anything but a letter or digit becomes `_`; no leading digit.
fn normalize(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) || out.is_empty() {
        out.insert(0, '_');
    }
    out
}

fn label_text(labels: &[(String, String)]) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push('}');
    out
}

fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Prometheus's numbers: `NaN`, `+Inf`, `-Inf`, else Rust's shortest exact text.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_value as value;

    #[test]
    fn names_and_units_follow_prometheus() {
        let store = Store::default();
        let t = TargetLabels {
            pid: 42,
            process: "svc".into(),
            runtime: "dotnet".into(),
        };
        // dotnet-monitor's own test table names these systemruntime_cpu_usage_ratio and
        // systemruntime_working_set_bytes.
        store.record(
            &t,
            &value(
                "System.Runtime",
                "cpu-usage",
                "%",
                CounterKind::Metric,
                25.0,
            ),
        );
        store.record(
            &t,
            &value(
                "System.Runtime",
                "working-set",
                "MB",
                CounterKind::Metric,
                3.5,
            ),
        );
        store.record(&t, &value("Demo", "jobs", "", CounterKind::Rate, 7.0));
        store.record(&t, &value("Demo", "jobs", "", CounterKind::Rate, 7.0));
        let mut h = value("Demo", "latency", "ms", CounterKind::Histogram, 0.0);
        h.quantiles = vec![(0.5, 10.0), (0.99, 20.0)];
        h.tags = "route=/a\"b".into();
        store.record(&t, &h);
        let mut out = String::new();
        store.render(&mut out);
        let labels = r#"pid="42",process="svc",runtime="dotnet""#;
        for line in [
            format!("systemruntime_cpu_usage_ratio{{{labels}}} 0.25"),
            format!("systemruntime_working_set_bytes{{{labels}}} 3500000"),
            format!("demo_jobs_total{{{labels}}} 14"),
            format!(r#"demo_latency_seconds{{{labels},route="/a\"b",quantile="0.99"}} 0.02"#),
            "# TYPE demo_jobs_total counter".to_owned(),
            "# TYPE demo_latency_seconds summary".to_owned(),
        ] {
            assert!(out.lines().any(|l| l == line), "{line} not in\n{out}");
        }
        store.forget(42);
        let mut out = String::new();
        store.render(&mut out);
        assert!(out.is_empty(), "{out}");
    }

    #[test]
    fn each_delivery_family_is_written_once_with_a_series_per_backend() {
        let otlp = eventpipe_export::delivery::Stats {
            sent: 3,
            dropped: 2,
            failing: true,
            ..Default::default()
        };
        let pyroscope = eventpipe_export::delivery::Stats {
            expired: 4,
            unconfirmed: 1,
            ..Default::default()
        };
        let mut out = String::new();
        deliveries(&mut out, &[("otlp", otlp), ("pyroscope", pyroscope)]);
        for line in [
            "# TYPE eptrace_agent_export_dropped_total counter",
            r#"eptrace_agent_export_sent_total{backend="otlp"} 3"#,
            r#"eptrace_agent_export_dropped_total{backend="otlp"} 2"#,
            r#"eptrace_agent_export_failing{backend="otlp"} 1"#,
            r#"eptrace_agent_export_sent_total{backend="pyroscope"} 0"#,
            r#"eptrace_agent_export_expired_total{backend="pyroscope"} 4"#,
            r#"eptrace_agent_export_unconfirmed_total{backend="pyroscope"} 1"#,
            r#"eptrace_agent_export_expired_total{backend="otlp"} 0"#,
        ] {
            assert!(out.lines().any(|l| l == line), "{line} not in\n{out}");
        }
        assert_eq!(
            out.matches("# TYPE eptrace_agent_export_sent_total")
                .count(),
            1
        );
    }
}
