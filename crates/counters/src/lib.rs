//! # eventpipe-counters
//!
//! Counter values from a trace or a live session: .NET's EventCounters (any provider's
//! `EventCounters` event, written by .NET runtimes and by this project's runtime alike) and
//! .NET's Meters (`System.Diagnostics.Metrics`).
//!
//! # EventCounters
//!
//! One event per counter per interval, its only field `Payload` a struct:
//!
//! * `CounterType` `Mean` (an `EventCounter`, a `PollingCounter`, this runtime's gauges,
//!   up/down counters and histograms): `Name`, `DisplayName`, `Mean`, `StandardDeviation`,
//!   `Count`, `Min`, `Max`, `IntervalSec`, `Series` (`Interval=MS`), `Metadata`,
//!   `DisplayUnits`; the value is `Mean`.
//! * `CounterType` `Sum` (incrementing counters): `Name`, `DisplayName`,
//!   `DisplayRateTimeScale`, `Increment`, `IntervalSec`, `Metadata`, `Series`,
//!   `DisplayUnits`; the value is `Increment`, the increase over the interval (a rate).
//!
//! # Meters
//!
//! The `System.Diagnostics.Metrics` provider (keyword 0x2, filter arguments `SessionId`,
//! `Metrics`, `RefreshInterval`, ...) writes every value as text: `CounterRateValuePublished`
//! and `UpDownCounterRateValuePublished` (`rate`, and `value`: the absolute value since
//! .NET 8), `GaugeValuePublished` (`lastValue`), `HistogramValuePublished` (`quantiles`
//! `0.5=x;0.95=y;0.99=z`, `count`, `sum`); `BeginInstrumentReporting` names each
//! instrument's unit and description; and reports its troubles as events
//! (`TimeSeriesLimitReached`, `HistogramLimitReached`, `Error`,
//! `ObservableInstrumentCallbackError`, `MultipleSessionsNotSupportedError`,
//! `MultipleSessionsConfiguredIncorrectlyError`), which [`decode_counter_event`] turns into
//! words. Events of other sessions (another `SessionId`) are left out.
//!
//! # Data flow
//!
//! ```text
//! nettrace::Event ─▶ decode_counter_event ─▶ CounterEvent (a CounterValue with its
//!                                            CounterKind, an instrument's unit, a problem)
//!                                         ─▶ the caller: eptrace's screen and exports, the
//!                                            agent's Prometheus and OTLP, a client's Sink
//! ```
//!
//! Only `nettrace` and `serde` are needed: a user of counters builds no symbolizer, no
//! profile converter.
#![forbid(unsafe_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use nettrace::{Event, Value};
use serde::Serialize;

/// The provider of .NET's Meters.
pub const METERS_PROVIDER: &str = "System.Diagnostics.Metrics";

/// What a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CounterKind {
    /// A value at the end of the interval, or a mean over it (`dotnet-counters`' `Metric`).
    Metric,
    /// An increase over the interval (`dotnet-counters`' `Rate`).
    Rate,
    /// A gauge's last value (Meters).
    Gauge,
    /// An up/down counter's change (Meters).
    UpDownRate,
    /// A histogram's percentiles (Meters; this runtime's histograms give their mean too).
    Histogram,
}

impl CounterKind {
    /// The name `dotnet-counters` prints in its CSV and JSON: `Metric`, `Rate`, ...
    pub fn dotnet_name(self) -> &'static str {
        match self {
            CounterKind::Metric => "Metric",
            CounterKind::Rate => "Rate",
            CounterKind::Gauge => "Gauge",
            CounterKind::UpDownRate => "UpDownCounter",
            CounterKind::Histogram => "Histogram",
        }
    }
}

/// One counter's value for one interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CounterValue {
    /// Milliseconds since the trace's start.
    pub time_ms: f64,
    /// The provider (EventCounters) or the meter (Meters).
    pub provider: String,
    /// The counter's or instrument's name (`cpu-usage`, `orders`).
    pub name: String,
    /// The name to show (`CPU Usage`); the name when there is none.
    pub display_name: String,
    /// The unit (`%`, `B`, `ms`, or `count` for a rate with none).
    pub unit: String,
    /// What the value is.
    pub kind: CounterKind,
    /// The mean, the increment, the gauge's value, or a histogram's mean where known.
    pub value: f64,
    /// Seconds the value covers, when the event says.
    pub interval_sec: Option<f64>,
    /// The interval the publisher was asked for, in ms (EventCounters' `Series`,
    /// `Interval=1000`): a runtime serving several sessions publishes each of their series,
    /// and a reader keeps its own.
    pub series_ms: Option<u64>,
    /// Tags (`k=v,k=v`): Meters' tags, or an EventCounter's `Metadata`.
    pub tags: String,
    /// Percentiles (quantile, value), for histograms.
    pub quantiles: Vec<(f64, f64)>,
    /// Mean counters' statistics over the interval: count, min, max, standard deviation.
    pub stats: Option<MeanStats>,
}

/// The statistics a `Mean` EventCounter carries besides its mean.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MeanStats {
    /// Values recorded in the interval.
    pub count: u64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
    /// Their standard deviation.
    pub standard_deviation: f64,
}

impl CounterValue {
    /// A value of `provider`'s counter `name` over one second, at the trace's start, with
    /// nothing else known (no display name, unit, series, tags or statistics): a start for
    /// values made outside a trace (a bridge from another metrics API, a test).
    pub fn new(provider: &str, name: &str, kind: CounterKind, value: f64) -> CounterValue {
        CounterValue {
            time_ms: 0.0,
            provider: provider.into(),
            name: name.into(),
            display_name: String::new(),
            unit: String::new(),
            kind,
            value,
            interval_sec: Some(1.0),
            series_ms: None,
            tags: String::new(),
            quantiles: Vec::new(),
            stats: None,
        }
    }

    /// The name `dotnet-counters` shows: `DisplayName (unit / 1 sec)` for a rate,
    /// `DisplayName (unit)` else, `DisplayName` without a unit.
    pub fn display(&self) -> String {
        let unit = if self.unit == "count" {
            "Count"
        } else {
            self.unit.as_str()
        };
        match self.kind {
            CounterKind::Rate => format!(
                "{} ({unit} / {} sec)",
                self.display_name,
                self.interval_sec.map_or(1.0, f64::round)
            ),
            _ if !unit.is_empty() => format!("{} ({unit})", self.display_name),
            _ => self.display_name.clone(),
        }
    }
}

/// What a counters event says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum CounterEvent {
    /// A value.
    Value(CounterValue),
    /// An instrument began reporting (Meters): its unit and description.
    Instrument {
        /// The meter.
        meter: String,
        /// The instrument.
        name: String,
        /// Its unit.
        unit: String,
        /// Its description.
        description: String,
    },
    /// The publisher could not do what was asked, in words.
    Problem(String),
}

fn text<'a>(fields: &'a [(&str, Value)], name: &str) -> Option<&'a str> {
    match fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(name))?.1 {
        Value::String(ref s) => Some(s.as_str()),
        _ => None,
    }
}

fn number(fields: &[(&str, Value)], name: &str) -> Option<f64> {
    let value = &fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(name))?.1;
    match *value {
        Value::F64(v) => Some(v),
        Value::F32(v) => Some(f64::from(v)),
        Value::String(ref s) => s.trim().parse().ok(),
        _ => value
            .as_u64()
            .map(|v| v as f64)
            .or_else(|| value.as_i64().map(|v| v as f64)),
    }
}

/// Decodes a counters event; `None` for any other event (or one of another Meters session
/// than `session_id`, when given).
pub fn decode_counter_event(event: &Event<'_>, session_id: Option<&str>) -> Option<CounterEvent> {
    let md = event.metadata;
    if md.event_name == "EventCounters" {
        return event_counter(event);
    }
    if md.provider != METERS_PROVIDER {
        return None;
    }
    let fields = event.decode_payload().ok()?;
    if let (Some(wanted), Some(theirs)) = (session_id, text(&fields, "sessionId")) {
        if !theirs.is_empty() && theirs != wanted {
            return None;
        }
    }
    let meter = text(&fields, "meterName").unwrap_or_default().to_owned();
    let instrument = text(&fields, "instrumentName")
        .unwrap_or_default()
        .to_owned();
    let value = |kind, value: Option<f64>| {
        Some(CounterEvent::Value(CounterValue {
            time_ms: event.timestamp_msec(),
            provider: meter.clone(),
            display_name: instrument.clone(),
            name: instrument.clone(),
            unit: text(&fields, "unit").unwrap_or_default().to_owned(),
            kind,
            value: value?,
            interval_sec: None,
            series_ms: None,
            tags: text(&fields, "tags").unwrap_or_default().to_owned(),
            quantiles: Vec::new(),
            stats: None,
        }))
    };
    match md.event_name.as_str() {
        "CounterRateValuePublished" => value(CounterKind::Rate, number(&fields, "rate")),
        "UpDownCounterRateValuePublished" => value(
            CounterKind::UpDownRate,
            number(&fields, "value").or_else(|| number(&fields, "rate")),
        ),
        "GaugeValuePublished" => value(CounterKind::Gauge, number(&fields, "lastValue")),
        "HistogramValuePublished" => {
            let quantiles = parse_quantiles(text(&fields, "quantiles").unwrap_or_default());
            let count = number(&fields, "count");
            let mean = match (number(&fields, "sum"), count) {
                (Some(sum), Some(count)) if count > 0.0 => Some(sum / count),
                _ => quantiles
                    .iter()
                    .find(|(q, _)| (*q - 0.5).abs() < 1e-9)
                    .map(|&(_, v)| v)
                    .or(Some(f64::NAN)),
            };
            match value(CounterKind::Histogram, mean)? {
                CounterEvent::Value(mut v) => {
                    v.quantiles = quantiles;
                    Some(CounterEvent::Value(v))
                }
                other => Some(other),
            }
        }
        "BeginInstrumentReporting" => Some(CounterEvent::Instrument {
            meter,
            name: instrument,
            unit: text(&fields, "unit").unwrap_or_default().to_owned(),
            description: text(&fields, "description").unwrap_or_default().to_owned(),
        }),
        "TimeSeriesLimitReached" => Some(CounterEvent::Problem(
            "the target reached its limit of time series (--max-time-series): new tag \
             combinations are not reported"
                .to_owned(),
        )),
        "HistogramLimitReached" => Some(CounterEvent::Problem(
            "the target reached its limit of histograms (--max-histograms): new histograms \
             are not reported"
                .to_owned(),
        )),
        "Error" => Some(CounterEvent::Problem(format!(
            "the target's metrics publisher failed: {}",
            text(&fields, "errorMessage").unwrap_or("(no message)")
        ))),
        "ObservableInstrumentCallbackError" => Some(CounterEvent::Problem(format!(
            "an observable instrument's callback threw: {}",
            text(&fields, "errorMessage").unwrap_or("(no message)")
        ))),
        "MultipleSessionsNotSupportedError" => Some(CounterEvent::Problem(
            "another tool is already collecting this process's Meters, and this runtime \
             allows one such session at a time (.NET 8+ shares them)"
                .to_owned(),
        )),
        "MultipleSessionsConfiguredIncorrectlyError" => Some(CounterEvent::Problem(format!(
            "another tool collects this process's Meters with different limits, so this \
             session cannot share it: {}",
            [
                "expectedMaxHistograms",
                "actualMaxHistograms",
                "expectedMaxTimeSeries",
                "actualMaxTimeSeries",
                "expectedRefreshInterval",
                "actualRefreshInterval",
            ]
            .iter()
            .filter_map(|k| text(&fields, k).map(|v| format!("{k}={v}")))
            .collect::<Vec<_>>()
            .join(", ")
        ))),
        _ => None,
    }
}

fn event_counter(event: &Event<'_>) -> Option<CounterEvent> {
    let fields = event.decode_payload().ok()?;
    // The one field: `Payload`, a struct (the outer field's name may be empty).
    let payload = fields.iter().find_map(|(_, v)| match v {
        Value::Object(inner) => Some(inner),
        _ => None,
    })?;
    let inner: Vec<(&str, Value)> = payload
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect();
    let payload: &[(&str, Value)] = match inner.iter().find(|(n, _)| *n == "Payload") {
        // Nested once more: { Payload: { ... } }.
        Some((_, Value::Object(p))) => {
            return decode_payload_fields(
                event,
                &p.iter()
                    .map(|(n, v)| (n.as_str(), v.clone()))
                    .collect::<Vec<_>>(),
            )
        }
        _ => &inner,
    };
    decode_payload_fields(event, payload)
}

fn decode_payload_fields(event: &Event<'_>, p: &[(&str, Value)]) -> Option<CounterEvent> {
    let name = text(p, "Name")?.to_owned();
    let display_name = match text(p, "DisplayName") {
        Some(d) if !d.is_empty() => d.to_owned(),
        _ => name.clone(),
    };
    let mut unit = text(p, "DisplayUnits").unwrap_or_default().to_owned();
    let interval_sec = number(p, "IntervalSec");
    let metadata = text(p, "Metadata").unwrap_or_default().to_owned();
    let (kind, value, stats) = match text(p, "CounterType") {
        Some("Sum") => {
            if unit.is_empty() {
                unit = "count".to_owned();
            }
            (CounterKind::Rate, number(p, "Increment")?, None)
        }
        _ => (
            CounterKind::Metric,
            number(p, "Mean")?,
            Some(MeanStats {
                count: number(p, "Count").unwrap_or(0.0).max(0.0) as u64,
                min: number(p, "Min").unwrap_or(f64::NAN),
                max: number(p, "Max").unwrap_or(f64::NAN),
                standard_deviation: number(p, "StandardDeviation").unwrap_or(f64::NAN),
            }),
        ),
    };
    // This runtime's histograms carry their percentiles in the metadata.
    let quantiles = metadata
        .split(',')
        .find_map(|kv| kv.trim().strip_prefix("Percentiles="))
        .map(|q| {
            parse_quantiles(
                &q.split(';')
                    .filter_map(|pair| {
                        let (p, v) = pair.split_once(':')?;
                        let p: f64 = p.trim().trim_start_matches('p').parse().ok()?;
                        Some(format!("{}={v}", p / 100.0))
                    })
                    .collect::<Vec<_>>()
                    .join(";"),
            )
        })
        .unwrap_or_default();
    let kind = if quantiles.is_empty() {
        kind
    } else {
        CounterKind::Histogram
    };
    // The percentiles are values, not tags.
    let metadata = metadata
        .split(',')
        .filter(|kv| !kv.trim().starts_with("Percentiles="))
        .collect::<Vec<_>>()
        .join(",");
    Some(CounterEvent::Value(CounterValue {
        time_ms: event.timestamp_msec(),
        provider: event.metadata.provider.clone(),
        name,
        display_name,
        unit,
        kind,
        value,
        interval_sec,
        series_ms: text(p, "Series")
            .and_then(|s| s.trim().strip_prefix("Interval="))
            .and_then(|ms| ms.trim().parse().ok()),
        tags: metadata,
        quantiles,
        stats,
    }))
}

/// `0.5=1.5;0.95=2;0.99=7` as (quantile, value) pairs; malformed pairs are skipped.
pub fn parse_quantiles(text: &str) -> Vec<(f64, f64)> {
    text.split(';')
        .filter_map(|pair| {
            let (q, v) = pair.split_once('=')?;
            Some((q.trim().parse().ok()?, v.trim().parse().ok()?))
        })
        .collect()
}

/// The filter arguments of a Meters session (`System.Diagnostics.Metrics`, keyword 0x2)
/// listening to `metrics` (`Meter` or `Meter\Instrument`, comma separated).
pub fn meters_filter_args(
    session_id: &str,
    metrics: &[String],
    refresh_interval_sec: f64,
    max_time_series: u32,
    max_histograms: u32,
) -> String {
    format!(
        "SessionId={session_id};Metrics={};RefreshInterval={refresh_interval_sec};\
         MaxTimeSeries={max_time_series};MaxHistograms={max_histograms}",
        metrics.join(",")
    )
}

/// (year, month, day, hour, minute, second, nanos) in UTC.
fn civil(t: SystemTime) -> (i64, u32, u32, u32, u32, u32, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days to civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
        d.subsec_nanos(),
    )
}

/// `2026-11-25T21:07:15.1234567Z`: .NET's round-trip format, in UTC (the timestamps of
/// `dotnet-counters collect --format json`).
pub fn iso8601(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s, ns) = civil(t);
    format!(
        "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:07}Z",
        ns / 100
    )
}

/// `11/25/2026 21:07:15`: .NET's invariant `DateTime.ToString()`, in UTC (the timestamps of
/// `dotnet-counters collect --format csv`).
pub fn dotnet_timestamp(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s, _) = civil(t);
    format!("{mo:02}/{d:02}/{y:04} {h:02}:{mi:02}:{s:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn quantiles_parse_and_skip_what_is_not_a_pair() {
        assert_eq!(
            parse_quantiles("0.5=1.5;0.95=2;x;0.99=7"),
            vec![(0.5, 1.5), (0.95, 2.0), (0.99, 7.0)]
        );
        assert!(parse_quantiles("").is_empty());
    }

    #[test]
    fn display_names_read_as_dotnet_counters_prints_them() {
        let mut v = CounterValue {
            time_ms: 0.0,
            provider: "System.Runtime".into(),
            name: "alloc-rate".into(),
            display_name: "Allocation Rate".into(),
            unit: "B".into(),
            kind: CounterKind::Rate,
            value: 1.0,
            interval_sec: Some(1.0),
            series_ms: Some(1000),
            tags: String::new(),
            quantiles: Vec::new(),
            stats: None,
        };
        assert_eq!(v.display(), "Allocation Rate (B / 1 sec)");
        v.unit = "count".into();
        assert_eq!(v.display(), "Allocation Rate (Count / 1 sec)");
        v.kind = CounterKind::Metric;
        v.unit = "%".into();
        assert_eq!(v.display(), "Allocation Rate (%)");
        v.unit = String::new();
        assert_eq!(v.display(), "Allocation Rate");
    }

    #[test]
    fn timestamps_read_as_dotnet_writes_them() {
        // 2026-11-25 21:07:15.5 UTC.
        let t = UNIX_EPOCH + Duration::from_millis(1_795_640_835_500);
        assert_eq!(dotnet_timestamp(t), "11/25/2026 21:07:15");
        assert_eq!(iso8601(t), "2026-11-25T21:07:15.5000000Z");
        assert_eq!(iso8601(UNIX_EPOCH), "1970-01-01T00:00:00.0000000Z");
        // A leap day.
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(dotnet_timestamp(leap), "02/29/2000 00:00:00");
    }
}
