//! OpenTelemetry (OTLP/HTTP, protobuf) from what a target's sessions record: spans, log
//! records and metrics, in the message types of the maintained `opentelemetry-proto` crate.
//! Pure conversion and batching; [`crate::delivery`] sends.
//!
//! * [`EventConverter`] takes a target's events as they stream and gives [`Signals`]:
//!   - the `tracing` layer's spans (`SpanNew` … `SpanClose`) become OTLP spans from their
//!     creation to their close, with the span's fields as attributes and its parent link;
//!   - Start/Stop pairs (opcodes 1 and 2, and the runtime's named pairs: the rules of
//!     [`eventpipe_insight::intervals`], which the timeline uses too) become OTLP spans
//!     from the begin to the end;
//!   - every other event becomes a log record with its typed payload fields as attributes,
//!     linked to the `tracing` span its thread is in.
//! * [`CounterConverter`] turns counter values into metrics: gauges, cumulative sums, and
//!   summaries for percentiles.
//! * [`Batch`] gathers them per target and scope (the provider) and makes the three
//!   requests, `POST {base}/v1/traces`, `/v1/logs` and `/v1/metrics`
//!   (`application/x-protobuf`).
//!
//! # Ids
//!
//! OTLP wants 16-byte trace ids and 8-byte span ids, never zero. Where a begin carries an
//! activity id (.NET's EventSource activities), the span id is folded from it and its
//! related activity id gives the parent. Otherwise they are made from what identifies the
//! span in the target: its pid, its `tracing` span id and its creation time (a `tracing`
//! span id is reused once the span closes), or for a Start/Stop pair its thread, name and
//! begin time. The same inputs give the same ids. A child takes its parent's trace id; a
//! root's trace id is made from its own inputs; a span whose parent began before the
//! session gets the trace id made from that parent's `tracing` id, which its siblings
//! share.
//!
//! # Resource
//!
//! Every batch of a target carries `service.name` (the process name), `process.pid`,
//! `host.name`, `process.runtime.name` (`rust` or `dotnet`) and
//! `telemetry.sdk.name` = `eptrace`, with `telemetry.sdk.version`.

mod events;
mod metrics;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use prost::Message;

pub use opentelemetry_proto::tonic as proto;
use proto::common::v1::{any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue};
use proto::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use proto::metrics::v1::{Metric, ResourceMetrics, ScopeMetrics};
use proto::resource::v1::Resource;
use proto::trace::v1::{ResourceSpans, ScopeSpans, Span};

pub use self::events::{EventConverter, EventStats, MAX_OPEN_SPANS};
pub use self::metrics::CounterConverter;
use crate::delivery::Request;

/// The content type of every OTLP/HTTP protobuf request.
pub const CONTENT_TYPE: &str = "application/x-protobuf";

/// The process a batch is about: the resource attributes of everything it records.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    /// `service.name`: the process name.
    pub service_name: String,
    /// `process.pid`.
    pub pid: u32,
    /// `host.name`.
    pub host_name: String,
    /// `process.runtime.name`: `rust` or `dotnet`.
    pub runtime: String,
}

impl Target {
    /// The OTLP resource.
    pub fn resource(&self) -> Resource {
        Resource {
            attributes: vec![
                key_value("service.name", string(&self.service_name)),
                key_value(
                    "process.pid",
                    AnyValue {
                        value: Some(any_value::Value::IntValue(i64::from(self.pid))),
                    },
                ),
                key_value("host.name", string(&self.host_name)),
                key_value("process.runtime.name", string(&self.runtime)),
                key_value("telemetry.sdk.name", string("eptrace")),
                key_value("telemetry.sdk.version", string(env!("CARGO_PKG_VERSION"))),
            ],
            ..Default::default()
        }
    }
}

/// What one target recorded, by scope (the provider, or the counter's provider).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Signals {
    /// Spans by scope.
    pub spans: BTreeMap<String, Vec<Span>>,
    /// Log records by scope.
    pub logs: BTreeMap<String, Vec<LogRecord>>,
    /// Metrics by scope.
    pub metrics: BTreeMap<String, Vec<Metric>>,
}

impl Signals {
    /// Spans, log records and metrics held.
    pub fn len(&self) -> usize {
        self.spans.values().map(Vec::len).sum::<usize>()
            + self.logs.values().map(Vec::len).sum::<usize>()
            + self.metrics.values().map(Vec::len).sum::<usize>()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Moves everything `other` holds into this.
    pub fn append(&mut self, other: Signals) {
        for (scope, mut v) in other.spans {
            self.spans.entry(scope).or_default().append(&mut v);
        }
        for (scope, mut v) in other.logs {
            self.logs.entry(scope).or_default().append(&mut v);
        }
        for (scope, mut v) in other.metrics {
            self.metrics.entry(scope).or_default().append(&mut v);
        }
    }
}

/// Signals of several targets waiting to be sent together.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    targets: BTreeMap<Target, Signals>,
    len: usize,
}

/// Where OTLP goes: a base URL (`http://collector:4318`) and the headers every request
/// carries (authorization…).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The base URL, without a trailing `/`.
    pub base: String,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
}

/// A base URL that cannot be an OTLP/HTTP endpoint.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("OTLP endpoint `{url}`: {why}")]
pub struct EndpointError {
    /// The URL given.
    pub url: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl Endpoint {
    /// Checks `url` (`http://` or `https://`, a host, no query) and keeps it without a
    /// trailing `/`; a URL already ending in `/v1/traces`, `/v1/logs` or `/v1/metrics` is
    /// refused, since the three paths are added to it.
    ///
    /// # Errors
    /// The URL is not of that form.
    pub fn new(url: &str, headers: Vec<(String, String)>) -> Result<Endpoint, EndpointError> {
        let bad = |why| EndpointError {
            url: url.to_owned(),
            why,
        };
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .ok_or_else(|| bad("it must start with http:// or https://"))?;
        let host = rest.split('/').next().unwrap_or("");
        if host.is_empty() {
            return Err(bad("it has no host"));
        }
        if url.contains(['?', '#', ' ']) {
            return Err(bad(
                "it must be a base URL, without query, fragment or spaces",
            ));
        }
        let base = url.trim_end_matches('/');
        if ["/v1/traces", "/v1/logs", "/v1/metrics"]
            .iter()
            .any(|p| base.ends_with(p))
        {
            return Err(bad(
                "give the base URL (http://host:4318): /v1/traces, /v1/logs and /v1/metrics are added to it",
            ));
        }
        Ok(Endpoint {
            base: base.to_owned(),
            headers,
        })
    }

    fn request(&self, path: &str, body: Vec<u8>, what: String) -> Request {
        Request {
            url: format!("{}{path}", self.base),
            content_type: CONTENT_TYPE.to_owned(),
            headers: self.headers.clone(),
            body,
            what,
            expires: None,
        }
    }
}

impl Batch {
    /// Adds what `target` recorded.
    pub fn add(&mut self, target: &Target, signals: Signals) {
        if signals.is_empty() {
            return;
        }
        self.len += signals.len();
        match self.targets.get_mut(target) {
            Some(held) => held.append(signals),
            None => {
                self.targets.insert(target.clone(), signals);
            }
        }
    }

    /// Spans, log records and metrics held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The requests for what is held (one per signal that has something), emptying it.
    pub fn take_requests(&mut self, endpoint: &Endpoint) -> Vec<Request> {
        let targets = std::mem::take(&mut self.targets);
        self.len = 0;
        let names: Vec<String> = targets
            .keys()
            .map(|t| format!("{} ({})", t.service_name, t.pid))
            .collect();
        let from = if names.len() > 3 {
            format!("{} processes", names.len())
        } else {
            names.join(", ")
        };
        let mut traces = proto::collector::trace::v1::ExportTraceServiceRequest::default();
        let mut logs = proto::collector::logs::v1::ExportLogsServiceRequest::default();
        let mut metrics = proto::collector::metrics::v1::ExportMetricsServiceRequest::default();
        let (mut n_spans, mut n_logs, mut n_metrics) = (0, 0, 0);
        for (target, signals) in targets {
            let resource = target.resource();
            if !signals.spans.is_empty() {
                traces.resource_spans.push(ResourceSpans {
                    resource: Some(resource.clone()),
                    scope_spans: signals
                        .spans
                        .into_iter()
                        .map(|(scope, spans)| {
                            n_spans += spans.len();
                            ScopeSpans {
                                scope: Some(scope_of(scope)),
                                spans,
                                ..Default::default()
                            }
                        })
                        .collect(),
                    ..Default::default()
                });
            }
            if !signals.logs.is_empty() {
                logs.resource_logs.push(ResourceLogs {
                    resource: Some(resource.clone()),
                    scope_logs: signals
                        .logs
                        .into_iter()
                        .map(|(scope, log_records)| {
                            n_logs += log_records.len();
                            ScopeLogs {
                                scope: Some(scope_of(scope)),
                                log_records,
                                ..Default::default()
                            }
                        })
                        .collect(),
                    ..Default::default()
                });
            }
            if !signals.metrics.is_empty() {
                metrics.resource_metrics.push(ResourceMetrics {
                    resource: Some(resource),
                    scope_metrics: signals
                        .metrics
                        .into_iter()
                        .map(|(scope, metrics)| {
                            n_metrics += metrics.len();
                            ScopeMetrics {
                                scope: Some(scope_of(scope)),
                                metrics,
                                ..Default::default()
                            }
                        })
                        .collect(),
                    ..Default::default()
                });
            }
        }
        let mut out = Vec::new();
        if n_spans > 0 {
            out.push(endpoint.request(
                "/v1/traces",
                traces.encode_to_vec(),
                format!("{n_spans} span(s) of {from} (/v1/traces)"),
            ));
        }
        if n_logs > 0 {
            out.push(endpoint.request(
                "/v1/logs",
                logs.encode_to_vec(),
                format!("{n_logs} log record(s) of {from} (/v1/logs)"),
            ));
        }
        if n_metrics > 0 {
            out.push(endpoint.request(
                "/v1/metrics",
                metrics.encode_to_vec(),
                format!("{n_metrics} metric(s) of {from} (/v1/metrics)"),
            ));
        }
        out
    }
}

fn scope_of(name: String) -> InstrumentationScope {
    InstrumentationScope {
        name,
        ..Default::default()
    }
}

fn key_value(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(value),
        ..Default::default()
    }
}

fn string(s: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(s.to_owned())),
    }
}

/// A payload value as an attribute value, keeping its type: integers as ints (an unsigned
/// one beyond `i64::MAX` as its decimal string, rather than wrapped), floats as doubles,
/// bools, strings, byte arrays as bytes, arrays and objects as arrays and key-value
/// lists; GUIDs, characters, times and decimals as their text.
pub fn attribute_value(value: &nettrace::Value) -> AnyValue {
    use nettrace::Value as V;
    let v = match value {
        V::Bool(b) => any_value::Value::BoolValue(*b),
        V::I8(v) => any_value::Value::IntValue(i64::from(*v)),
        V::U8(v) => any_value::Value::IntValue(i64::from(*v)),
        V::I16(v) => any_value::Value::IntValue(i64::from(*v)),
        V::U16(v) => any_value::Value::IntValue(i64::from(*v)),
        V::I32(v) => any_value::Value::IntValue(i64::from(*v)),
        V::U32(v) => any_value::Value::IntValue(i64::from(*v)),
        V::I64(v) => any_value::Value::IntValue(*v),
        V::U64(v) | V::Pointer(v) => match i64::try_from(*v) {
            Ok(i) => any_value::Value::IntValue(i),
            Err(_) => any_value::Value::StringValue(v.to_string()),
        },
        V::F32(v) => any_value::Value::DoubleValue(f64::from(*v)),
        V::F64(v) => any_value::Value::DoubleValue(*v),
        V::String(s) => any_value::Value::StringValue(s.clone()),
        V::Bytes(b) => any_value::Value::BytesValue(b.clone()),
        V::Array(items) => any_value::Value::ArrayValue(ArrayValue {
            values: items.iter().map(attribute_value).collect(),
        }),
        V::Object(fields) => any_value::Value::KvlistValue(proto::common::v1::KeyValueList {
            values: fields
                .iter()
                .map(|(k, v)| key_value(k, attribute_value(v)))
                .collect(),
        }),
        other => any_value::Value::StringValue(other.to_string()),
    };
    AnyValue { value: Some(v) }
}

/// SplitMix64's finalizer: a well-spread 64-bit value from any input.
fn spread(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A 64-bit digest of `parts`, never zero (a zero id means "none" in OTLP).
fn digest(parts: &[u64]) -> u64 {
    let mut h = 0x6F74_6C70_u64; // "otlp"
    for &p in parts {
        h = spread(h ^ spread(p));
    }
    if h == 0 {
        1
    } else {
        h
    }
}

/// FNV-1a of a string, as a digest part.
fn text_part(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A span id (8 bytes) from `parts`.
fn span_id(parts: &[u64]) -> [u8; 8] {
    digest(parts).to_be_bytes()
}

/// A trace id (16 bytes) from `parts`.
fn trace_id(parts: &[u64]) -> [u8; 16] {
    // Salted, so that a root span's id is not the first half of its trace's id.
    let mut with = parts.to_vec();
    with.push(0x0074_7261_6365); // "trace"
    let hi = digest(&with);
    with.push(0x6c6f); // "lo"
    let lo = digest(&with);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&hi.to_be_bytes());
    out[8..].copy_from_slice(&lo.to_be_bytes());
    out
}
