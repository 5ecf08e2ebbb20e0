//! Counter values (EventCounters and Meters, as `eventpipe_counters` reads them)
//! to OTLP metrics. Each value is one data point of a metric named as the counter, in the
//! scope of its provider, with the counter's tags as attributes:
//!
//! | counter | metric |
//! |---|---|
//! | `Metric` (a mean over the interval), `Gauge` | gauge |
//! | `Rate` (an increase over the interval) | monotonic sum, cumulative: the increases added up since the converter first saw the series |
//! | `UpDownRate` (a change) | non-monotonic sum, cumulative |
//! | `Histogram` with percentiles | summary: the quantiles; `count` and `sum` from the interval's statistics where the counter gives them, else 0 |
//! | `Histogram` without | gauge of its mean |
//!
//! Cumulative rather than delta sums: a collector can turn them into Prometheus counters
//! as they are, and a lost batch loses no total. Units become UCUM's: `B` → `By`, `MB` →
//! `MBy` (10⁶ bytes, the runtime's MB), `count` → `{count}`; others are kept.

use std::collections::HashMap;

use eventpipe_counters::{CounterKind, CounterValue};

use super::proto::common::v1::KeyValue;
use super::proto::metrics::v1::{
    metric::Data, number_data_point, summary_data_point::ValueAtQuantile, AggregationTemporality,
    Gauge, Metric, NumberDataPoint, Sum, Summary, SummaryDataPoint,
};
use super::{key_value, string, Signals};

/// Turns one target's counter values into metrics, keeping the running totals of its sums.
#[derive(Debug, Default)]
pub struct CounterConverter {
    /// Per series (provider, name, tags): when it started, and its total.
    totals: HashMap<(String, String, String), (u64, f64)>,
}

fn unit(unit: &str) -> String {
    match unit {
        "B" | "bytes" => "By".to_owned(),
        "MB" => "MBy".to_owned(),
        "count" => "{count}".to_owned(),
        other => other.to_owned(),
    }
}

fn tags(text: &str) -> Vec<KeyValue> {
    text.split(',')
        .filter(|t| !t.is_empty())
        .map(|t| {
            let (k, v) = t.split_once('=').unwrap_or((t, ""));
            key_value(k.trim(), string(v.trim()))
        })
        .collect()
}

fn point(attributes: Vec<KeyValue>, start: u64, at: u64, value: f64) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: at,
        value: Some(number_data_point::Value::AsDouble(value)),
        ..Default::default()
    }
}

impl CounterConverter {
    /// A converter with no totals yet.
    pub fn new() -> CounterConverter {
        CounterConverter::default()
    }

    /// Converts `v`, published at `at_ns` (Unix nanoseconds), into `out`. A value that is
    /// not a finite number is left out (OTLP has no place for it in a sum).
    pub fn value(&mut self, v: &CounterValue, at_ns: u64, out: &mut Signals) {
        if !v.value.is_finite() && v.quantiles.is_empty() {
            return;
        }
        let attributes = tags(&v.tags);
        let interval_ns = v
            .interval_sec
            .filter(|s| s.is_finite() && *s > 0.0)
            .map_or(0, |s| (s * 1e9) as u64);
        let data = match v.kind {
            CounterKind::Metric | CounterKind::Gauge => Data::Gauge(Gauge {
                data_points: vec![point(attributes, 0, at_ns, v.value)],
            }),
            CounterKind::Rate | CounterKind::UpDownRate => {
                let monotonic = v.kind == CounterKind::Rate;
                if monotonic && v.value < 0.0 {
                    return;
                }
                let key = (v.provider.clone(), v.name.clone(), v.tags.clone());
                let total = self
                    .totals
                    .entry(key)
                    .or_insert((at_ns.saturating_sub(interval_ns), 0.0));
                total.1 += v.value;
                Data::Sum(Sum {
                    data_points: vec![point(attributes, total.0, at_ns, total.1)],
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    is_monotonic: monotonic,
                })
            }
            CounterKind::Histogram if !v.quantiles.is_empty() => {
                let (count, sum) = v
                    .stats
                    .as_ref()
                    .map_or((0, 0.0), |s| (s.count, s.count as f64 * v.value));
                Data::Summary(Summary {
                    data_points: vec![SummaryDataPoint {
                        attributes,
                        start_time_unix_nano: at_ns.saturating_sub(interval_ns),
                        time_unix_nano: at_ns,
                        count,
                        sum: if sum.is_finite() { sum } else { 0.0 },
                        quantile_values: v
                            .quantiles
                            .iter()
                            .map(|&(quantile, value)| ValueAtQuantile { quantile, value })
                            .collect(),
                        ..Default::default()
                    }],
                })
            }
            CounterKind::Histogram => Data::Gauge(Gauge {
                data_points: vec![point(attributes, 0, at_ns, v.value)],
            }),
        };
        out.metrics
            .entry(v.provider.clone())
            .or_default()
            .push(Metric {
                name: v.name.clone(),
                description: if v.display_name.is_empty() || v.display_name == v.name {
                    String::new()
                } else {
                    v.display_name.clone()
                },
                unit: unit(&v.unit),
                data: Some(data),
                ..Default::default()
            });
    }
}
