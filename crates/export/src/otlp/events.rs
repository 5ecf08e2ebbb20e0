//! A target's events, as they stream, to OTLP spans and log records (see the module docs
//! of [`super`]).

use std::collections::HashMap;

use eventpipe_insight::intervals::{self, Lifecycle, Role};
use nettrace::{Event, Guid, Value};

use super::proto::common::v1::{AnyValue, KeyValue};
use super::proto::logs::v1::{LogRecord, SeverityNumber};
use super::proto::trace::v1::{span::SpanKind, Span};
use super::{attribute_value, key_value, span_id, text_part, trace_id, Signals};

/// Spans held open at once (`tracing` spans between their creation and close, Start/Stop
/// pairs between begin and end): a target that opens without ever closing cannot make the
/// converter hold more. Beyond it, new ones are not exported, and counted.
pub const MAX_OPEN_SPANS: usize = 65_536;

/// Counts since the converter started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventStats {
    /// Events read.
    pub events: u64,
    /// Spans made.
    pub spans: u64,
    /// Log records made.
    pub logs: u64,
    /// Events whose payload did not decode (each is a log record saying why).
    pub undecodable: u64,
    /// Spans not exported because [`MAX_OPEN_SPANS`] were open.
    pub over_bound: u64,
    /// Stops with no open begin (each is a log record).
    pub unmatched_stops: u64,
}

/// A `tracing` span between its `SpanNew` and `SpanClose`.
#[derive(Debug)]
struct TracingSpan {
    id: [u8; 8],
    trace: [u8; 16],
    parent: Option<[u8; 8]>,
    name: String,
    scope: String,
    start_ns: u64,
    attributes: Vec<KeyValue>,
    /// Time spent entered (between `SpanStart` and `SpanStop`), as tracing-opentelemetry
    /// reports it.
    busy_ns: u64,
    entered_at: Option<u64>,
}

/// A Start/Stop pair's begin, waiting for its end.
#[derive(Debug)]
struct OpenPair {
    id: [u8; 8],
    trace: [u8; 16],
    parent: Option<[u8; 8]>,
    name: String,
    start_ns: u64,
    /// The value the end must carry in the rule's `same` field.
    same: Option<Value>,
    attributes: Vec<KeyValue>,
    /// Begin fields by name, so the end adds only what differs.
    begin_fields: Vec<(String, Value)>,
}

/// What a thread is inside: `tracing` spans entered, pairs begun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Tracing(u64),
    Pair([u8; 8]),
}

#[derive(Debug, Clone, Copy)]
struct Context {
    span: [u8; 8],
    trace: [u8; 16],
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PairKey {
    tid: u64,
    provider: String,
    base: String,
}

/// Turns one target's events into spans and log records, as they stream. Feed it events in
/// timestamp order (`nettrace::SortedReader`): a span's begin and end may be written by
/// different threads, whose events a trace does not order against each other.
#[derive(Debug)]
pub struct EventConverter {
    pid: u32,
    live: HashMap<u64, TracingSpan>,
    open: HashMap<PairKey, Vec<OpenPair>>,
    open_pairs: usize,
    /// Per thread, innermost last.
    frames: HashMap<u64, Vec<(Frame, Context)>>,
    /// Trace ids of the activities begun (.NET EventSource), by activity id.
    activities: HashMap<Guid, [u8; 16]>,
    last_ns: u64,
    stats: EventStats,
}

/// The event payload's field `name`.
fn field<'v>(fields: &'v [(&str, Value)], name: &str) -> Option<&'v Value> {
    fields.iter().find_map(|(n, v)| (*n == name).then_some(v))
}

fn int(v: i64) -> AnyValue {
    AnyValue {
        value: Some(super::proto::common::v1::any_value::Value::IntValue(v)),
    }
}

fn boolean(v: bool) -> AnyValue {
    AnyValue {
        value: Some(super::proto::common::v1::any_value::Value::BoolValue(v)),
    }
}

/// A span of this process's own code (`Internal`) from `start_ns` to `end` (never before
/// its start).
fn internal_span(
    trace: [u8; 16],
    id: [u8; 8],
    parent: Option<[u8; 8]>,
    name: String,
    start_ns: u64,
    end: u64,
    attributes: Vec<KeyValue>,
) -> Span {
    Span {
        trace_id: trace.to_vec(),
        span_id: id.to_vec(),
        parent_span_id: parent.map(|p| p.to_vec()).unwrap_or_default(),
        name,
        kind: SpanKind::Internal as i32,
        start_time_unix_nano: start_ns,
        end_time_unix_nano: end.max(start_ns),
        attributes,
        ..Default::default()
    }
}

/// Folds a 16-byte activity id into a span id.
fn fold(guid: &Guid) -> [u8; 8] {
    let [hi, lo] = halves(guid);
    span_id(&[hi, lo])
}

fn halves(guid: &Guid) -> [u64; 2] {
    let mut hi = [0u8; 8];
    let mut lo = [0u8; 8];
    hi.copy_from_slice(&guid.0[..8]);
    lo.copy_from_slice(&guid.0[8..]);
    [u64::from_be_bytes(hi), u64::from_be_bytes(lo)]
}

/// OTLP's severity for an eventpipe level (1 Critical … 5 Verbose; 0 LogAlways).
fn severity(level: u32) -> (SeverityNumber, &'static str) {
    match level {
        1 => (SeverityNumber::Fatal, "CRITICAL"),
        2 => (SeverityNumber::Error, "ERROR"),
        3 => (SeverityNumber::Warn, "WARN"),
        4 | 0 => (SeverityNumber::Info, "INFO"),
        _ => (SeverityNumber::Debug, "DEBUG"),
    }
}

impl EventConverter {
    /// A converter for the events of process `pid`.
    pub fn new(pid: u32) -> EventConverter {
        EventConverter {
            pid,
            live: HashMap::new(),
            open: HashMap::new(),
            open_pairs: 0,
            frames: HashMap::new(),
            activities: HashMap::new(),
            last_ns: 0,
            stats: EventStats::default(),
        }
    }

    /// The counts so far.
    pub fn stats(&self) -> EventStats {
        self.stats
    }

    /// Spans open now (`tracing` spans and pairs).
    pub fn open_spans(&self) -> usize {
        self.live.len() + self.open_pairs
    }

    fn pid(&self) -> u64 {
        u64::from(self.pid)
    }

    fn context(&self, tid: u64) -> Option<Context> {
        self.frames
            .get(&tid)
            .and_then(|f| f.last())
            .map(|(_, c)| *c)
    }

    fn pop_frame(&mut self, tid: u64, frame: Frame) {
        if let Some(frames) = self.frames.get_mut(&tid) {
            if let Some(at) = frames.iter().rposition(|(f, _)| *f == frame) {
                frames.remove(at);
            }
            if frames.is_empty() {
                self.frames.remove(&tid);
            }
        }
    }

    /// Converts one event; what it completes goes into `out`.
    pub fn event(&mut self, event: &Event<'_>, out: &mut Signals) {
        self.stats.events += 1;
        let md = event.metadata;
        // Counters are exported as metrics, from the counters session.
        if md.event_name == "EventCounters" {
            return;
        }
        let ns = event
            .trace
            .ticks_to_unix_nanos(event.header.timestamp)
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(self.last_ns);
        self.last_ns = self.last_ns.max(ns);
        let tid = event.thread_id();
        let fields = match event.decode_payload() {
            Ok(fields) => fields,
            Err(e) => {
                self.stats.undecodable += 1;
                let mut record = self.log_record(event, ns, tid, &[]);
                record
                    .attributes
                    .push(key_value("decode_error", super::string(&e.to_string())));
                self.stats.logs += 1;
                out.logs
                    .entry(md.provider.clone())
                    .or_default()
                    .push(record);
                return;
            }
        };
        let look = |name: &str| field(&fields, name);
        if let Some(which) = intervals::lifecycle(md, look) {
            match which {
                Lifecycle::New(id) => self.span_new(id, &fields, &md.provider, ns, tid, out),
                Lifecycle::Close(id) => self.span_close(id, ns, out),
            }
            return;
        }
        let span = look("SpanId").and_then(Value::as_u64);
        match (md.event_name.as_str(), span) {
            ("SpanStart", Some(id)) if intervals::opcode(md) == 1 => {
                self.span_enter(id, &fields, &md.provider, ns, tid);
                return;
            }
            ("SpanStop", Some(id)) if intervals::opcode(md) == 2 => {
                self.span_exit(id, ns, tid);
                return;
            }
            _ => {}
        }
        match intervals::role(md, look) {
            Role::Begin {
                base,
                label,
                named_by_field,
                same,
            } => {
                let key = PairKey {
                    tid,
                    provider: md.provider.clone(),
                    base: base.to_owned(),
                };
                let same = same.and_then(|f| look(f).cloned());
                self.pair_begin(event, key, label, named_by_field, same, &fields, ns, tid);
            }
            Role::End { base, same } => {
                let key = PairKey {
                    tid,
                    provider: md.provider.clone(),
                    base: base.to_owned(),
                };
                let same = same.and_then(look);
                if !self.pair_end(&key, same, &fields, ns, tid, out) {
                    self.stats.unmatched_stops += 1;
                    self.log(event, ns, tid, &fields, out);
                }
            }
            Role::Instant => self.log(event, ns, tid, &fields, out),
        }
    }

    /// Ends what is still open (at the last time seen), marked `eptrace.unfinished`: the
    /// session is over.
    pub fn finish(&mut self, out: &mut Signals) {
        let end = self.last_ns;
        let live: Vec<TracingSpan> = self.live.drain().map(|(_, s)| s).collect();
        for s in live {
            self.emit_tracing(s, end, true, out);
        }
        let open: Vec<(PairKey, Vec<OpenPair>)> = self.open.drain().collect();
        for (key, pairs) in open {
            for p in pairs {
                self.emit_pair(&key.provider, p, end, true, Vec::new(), out);
            }
        }
        self.open_pairs = 0;
        self.frames.clear();
        self.activities.clear();
    }

    fn span_new(
        &mut self,
        id: u64,
        fields: &[(&str, Value)],
        scope: &str,
        ns: u64,
        tid: u64,
        out: &mut Signals,
    ) {
        if let Some(old) = self.live.remove(&id) {
            // Its close was not seen (lost events): end it where its id is reused.
            self.emit_tracing(old, ns, true, out);
        }
        if self.open_spans() >= MAX_OPEN_SPANS {
            self.stats.over_bound += 1;
            return;
        }
        let pid = self.pid();
        let parent = field(fields, "ParentSpanId")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let (parent_id, trace) = if parent == 0 {
            (None, trace_id(&[pid, id, ns]))
        } else if let Some(p) = self.live.get(&parent) {
            (Some(p.id), p.trace)
        } else {
            // The parent began before the session: ids made as for a span whose
            // creation was not seen, shared with its other children.
            (
                Some(span_id(&[pid, parent, 0])),
                trace_id(&[pid, parent, 0]),
            )
        };
        let mut attributes = vec![key_value("thread.id", int(tid as i64))];
        attributes.extend(
            fields
                .iter()
                .filter(|(n, _)| !matches!(*n, "SpanId" | "ParentSpanId" | "Name"))
                .map(|(n, v)| key_value(n, attribute_value(v))),
        );
        let name = field(fields, "Name")
            .and_then(Value::as_str)
            .unwrap_or("span")
            .to_owned();
        self.live.insert(
            id,
            TracingSpan {
                id: span_id(&[pid, id, ns]),
                trace,
                parent: parent_id,
                name,
                scope: scope.to_owned(),
                start_ns: ns,
                attributes,
                busy_ns: 0,
                entered_at: None,
            },
        );
    }

    fn span_enter(&mut self, id: u64, fields: &[(&str, Value)], scope: &str, ns: u64, tid: u64) {
        if !self.live.contains_key(&id) {
            if self.open_spans() >= MAX_OPEN_SPANS {
                self.stats.over_bound += 1;
                return;
            }
            // Created before the session: from its first entry, without its fields.
            let pid = self.pid();
            let name = field(fields, "Name")
                .and_then(Value::as_str)
                .unwrap_or("span")
                .to_owned();
            self.live.insert(
                id,
                TracingSpan {
                    id: span_id(&[pid, id, 0]),
                    trace: trace_id(&[pid, id, 0]),
                    parent: None,
                    name,
                    scope: scope.to_owned(),
                    start_ns: ns,
                    attributes: vec![
                        key_value("thread.id", int(tid as i64)),
                        key_value("eptrace.created_before_session", boolean(true)),
                    ],
                    busy_ns: 0,
                    entered_at: None,
                },
            );
        }
        let Some(span) = self.live.get_mut(&id) else {
            return;
        };
        span.entered_at = Some(ns);
        let context = Context {
            span: span.id,
            trace: span.trace,
        };
        self.frames
            .entry(tid)
            .or_default()
            .push((Frame::Tracing(id), context));
    }

    fn span_exit(&mut self, id: u64, ns: u64, tid: u64) {
        if let Some(span) = self.live.get_mut(&id) {
            if let Some(at) = span.entered_at.take() {
                span.busy_ns += ns.saturating_sub(at);
            }
        }
        self.pop_frame(tid, Frame::Tracing(id));
    }

    fn span_close(&mut self, id: u64, ns: u64, out: &mut Signals) {
        if let Some(span) = self.live.remove(&id) {
            self.emit_tracing(span, ns, false, out);
        }
    }

    fn emit_tracing(&mut self, s: TracingSpan, end: u64, unfinished: bool, out: &mut Signals) {
        let mut attributes = s.attributes;
        attributes.push(key_value(
            "busy_ns",
            int(i64::try_from(s.busy_ns).unwrap_or(i64::MAX)),
        ));
        let idle = end.saturating_sub(s.start_ns).saturating_sub(s.busy_ns);
        attributes.push(key_value(
            "idle_ns",
            int(i64::try_from(idle).unwrap_or(i64::MAX)),
        ));
        let span = internal_span(s.trace, s.id, s.parent, s.name, s.start_ns, end, attributes);
        self.push_span(s.scope, span, unfinished, out);
    }

    /// Counts `span` and adds it to `scope`'s; `unfinished` marks one the trace ended inside.
    fn push_span(&mut self, scope: String, mut span: Span, unfinished: bool, out: &mut Signals) {
        if unfinished {
            span.attributes
                .push(key_value("eptrace.unfinished", boolean(true)));
        }
        self.stats.spans += 1;
        out.spans.entry(scope).or_default().push(span);
    }

    #[allow(clippy::too_many_arguments)] // one event's facts, taken apart once by the caller
    fn pair_begin(
        &mut self,
        event: &Event<'_>,
        key: PairKey,
        label: String,
        named_by_field: bool,
        same: Option<Value>,
        fields: &[(&str, Value)],
        ns: u64,
        tid: u64,
    ) {
        if self.open_spans() >= MAX_OPEN_SPANS {
            self.stats.over_bound += 1;
            return;
        }
        let pid = self.pid();
        let activity = event.activity_id();
        let (id, parent, trace) = if !activity.is_zero() {
            let related = event.related_activity_id();
            let id = fold(&activity);
            let (parent, trace) = if related.is_zero() {
                let [hi, lo] = halves(&activity);
                (None, trace_id(&[pid, hi, lo]))
            } else {
                let trace = self.activities.get(&related).copied().unwrap_or_else(|| {
                    let [hi, lo] = halves(&related);
                    trace_id(&[pid, hi, lo])
                });
                (Some(fold(&related)), trace)
            };
            if self.activities.len() < MAX_OPEN_SPANS {
                self.activities.insert(activity, trace);
            }
            (id, parent, trace)
        } else {
            let own = [pid, tid, ns, text_part(&label)];
            match self.context(tid) {
                Some(c) => (span_id(&own), Some(c.span), c.trace),
                None => (span_id(&own), None, trace_id(&own)),
            }
        };
        let mut attributes = vec![key_value("thread.id", int(tid as i64))];
        attributes.extend(
            fields
                .iter()
                .filter(|(n, _)| !(named_by_field && *n == "Name"))
                .map(|(n, v)| key_value(n, attribute_value(v))),
        );
        self.frames
            .entry(tid)
            .or_default()
            .push((Frame::Pair(id), Context { span: id, trace }));
        self.open.entry(key).or_default().push(OpenPair {
            id,
            trace,
            parent,
            name: label,
            start_ns: ns,
            same,
            attributes,
            begin_fields: fields
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.clone()))
                .collect(),
        });
        self.open_pairs += 1;
    }

    /// Ends the innermost open begin of `key` (with the same `same` value); false when
    /// none is open.
    fn pair_end(
        &mut self,
        key: &PairKey,
        same: Option<&Value>,
        fields: &[(&str, Value)],
        ns: u64,
        tid: u64,
        out: &mut Signals,
    ) -> bool {
        let Some(open) = self.open.get_mut(key) else {
            return false;
        };
        let Some(at) = open
            .iter()
            .rposition(|p| same.is_none() || p.same.as_ref() == same)
        else {
            return false;
        };
        let pair = open.remove(at);
        if open.is_empty() {
            self.open.remove(key);
        }
        self.open_pairs -= 1;
        self.pop_frame(tid, Frame::Pair(pair.id));
        // The end's fields the begin does not hold with the same value.
        let mut extra = Vec::new();
        for (n, v) in fields {
            match pair.begin_fields.iter().find(|(b, _)| b == n) {
                Some((_, bv)) if bv == v => {}
                Some(_) => extra.push(key_value(&format!("stop.{n}"), attribute_value(v))),
                None => extra.push(key_value(n, attribute_value(v))),
            }
        }
        self.emit_pair(&key.provider, pair, ns, false, extra, out);
        true
    }

    fn emit_pair(
        &mut self,
        scope: &str,
        p: OpenPair,
        end: u64,
        unfinished: bool,
        extra: Vec<KeyValue>,
        out: &mut Signals,
    ) {
        let mut attributes = p.attributes;
        attributes.extend(extra);
        let span = internal_span(p.trace, p.id, p.parent, p.name, p.start_ns, end, attributes);
        self.push_span(scope.to_owned(), span, unfinished, out);
    }

    fn log_record(
        &self,
        event: &Event<'_>,
        ns: u64,
        tid: u64,
        fields: &[(&str, Value)],
    ) -> LogRecord {
        let md = event.metadata;
        let (number, text) = severity(md.level);
        // The tracing layer names an event's message `Message`: it is the body.
        let message = field(fields, "Message").and_then(Value::as_str);
        let mut attributes = vec![key_value("thread.id", int(tid as i64))];
        attributes.extend(
            fields
                .iter()
                .filter(|(n, _)| !(message.is_some() && *n == "Message"))
                .map(|(n, v)| key_value(n, attribute_value(v))),
        );
        let context = self.context(tid);
        LogRecord {
            time_unix_nano: ns,
            observed_time_unix_nano: ns,
            severity_number: number as i32,
            severity_text: text.to_owned(),
            body: Some(super::string(message.unwrap_or(&md.display_name))),
            attributes,
            trace_id: context.map(|c| c.trace.to_vec()).unwrap_or_default(),
            span_id: context.map(|c| c.span.to_vec()).unwrap_or_default(),
            event_name: md.display_name.clone(),
            ..Default::default()
        }
    }

    fn log(
        &mut self,
        event: &Event<'_>,
        ns: u64,
        tid: u64,
        fields: &[(&str, Value)],
        out: &mut Signals,
    ) {
        let record = self.log_record(event, ns, tid, fields);
        self.stats.logs += 1;
        out.logs
            .entry(event.metadata.provider.clone())
            .or_default()
            .push(record);
    }
}
