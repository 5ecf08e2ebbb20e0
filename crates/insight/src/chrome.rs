//! Chrome's Trace Event Format (the JSON that Perfetto UI and `chrome://tracing` load),
//! straight from a trace: no profile, every event.
//!
//! # What each event becomes
//!
//! * Every event is an instant (`"ph":"i"`, thread scoped) named `Provider/EventName`, with
//!   `ts` in microseconds since the trace's start, `pid`, `tid`, `cat` = the provider, and
//!   `args` = the decoded payload (a payload that does not decode gives
//!   `{"decode_error": "..."}`).
//! * Except start/stop pairs, which become one complete event (`"ph":"X"` with `dur`). An
//!   event with opcode 1 (Start) opens an interval on its thread; the next event with
//!   opcode 2 (Stop) on the same thread, of the same provider and with the same base name
//!   closes the innermost open one. The base name is the event name without a trailing
//!   `/Start`, `Start`, `/Stop` or `Stop` (`GC/Start` ↔ `GC/Stop`, `Request/Start` ↔
//!   `Request/Stop`). An event without a stated opcode whose name ends in `Start`/`Stop`
//!   counts as opcode 1/2, as TraceEvent (and nettrace's naming) has it. The interval is
//!   named by the Start event's string field `Name` when it has one (the tracing layer's
//!   `SpanStart`), else by the base name; its `args` are `{"start": {...}, "stop": {...}}`.
//! * A Stop with nothing open, and a Start never closed (written at the end of the trace),
//!   are instants like any other event.
//! * The async profiler's `AsyncBuffer` events are not instants: their records become
//!   **poll spans**, complete events on the track of the thread that polled, named by the
//!   polled future's frame (`frame#N` if its `AsyncFrame` event has not been read yet),
//!   category `EventPipeRs-AsyncProfiler`, `args` = `{"ctx", "frame", "ended"}` (`suspend`,
//!   `complete`, `unwind`, `lost`, `open at end`; plus `"start_exact": false` for a poll
//!   first seen in a Stack record after lost data). A nested poll lies within the poll that
//!   ran it, so viewers draw it beneath. Polls still open at the end of the trace end at
//!   its last timestamp. See [`crate::async_trace`].
//! * So the trace's event count is exactly instants + 2 × complete events + async buffers
//!   ([`ChromeSummary`]).
//! * Thread names become `thread_name` metadata events (`"ph":"M"`): from NetTrace V6
//!   thread rows and from `EventPipeRs-Rundown/Thread` rundown events (fields `ThreadId`,
//!   `Name`). Process names become `process_name` metadata: from .NET's
//!   `Microsoft-DotNETCore-EventPipe/ProcessInfo` (the command line's program) and
//!   `Universal.System` `ExistingProcess`/`ProcessCreate` events (their `Name`).
//!
//! Intervals of different providers or base names on one thread are not required to nest;
//! the format draws a thread's complete events as one stack, so a viewer may flag two that
//! overlap without nesting.
//!
//! # Memory
//!
//! Output is streamed: each event is written as it is read, and only open intervals are
//! held (at most [`MAX_OPEN_PER_KEY`] per thread, provider and base name; beyond that the
//! oldest is given up and written as an instant), plus the names already announced per
//! thread and process, and for the async profiler each thread's open polls, the interned
//! poll stacks and the frame names. Events are written in stream order, not sorted: the
//! viewers sort.

use std::collections::{HashMap, VecDeque};
use std::io::{BufWriter, Write};

use nettrace::source::Input;
use nettrace::{Event, TraceInfo, TraceReader, Value};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::async_trace::{self, AsyncEvent, AsyncFrameId, Decoder, Fact, PollSpan};
use crate::error::Result;
use crate::symbolize::RUNDOWN_PROVIDER;

/// Open intervals kept per (thread, provider, base name): a trace that starts without ever
/// stopping cannot make the converter hold more.
pub const MAX_OPEN_PER_KEY: usize = 4096;

/// What [`write_chrome_trace`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChromeSummary {
    /// Trace events read: always `instants + 2 * complete + async_buffers`.
    pub events: u64,
    /// Instant events written (unmatched starts and stops included).
    pub instants: u64,
    /// Complete (`X`) events written, each from a Start and its Stop.
    pub complete: u64,
    /// Starts never closed.
    pub unmatched_starts: u64,
    /// Stops with no open Start.
    pub unmatched_stops: u64,
    /// `thread_name` metadata events written.
    pub thread_names: u64,
    /// `process_name` metadata events written.
    pub process_names: u64,
    /// The async profiler's `AsyncBuffer` events read (their polls become spans).
    pub async_buffers: u64,
    /// Poll spans written, as complete events.
    pub poll_spans: u64,
}

#[derive(Serialize)]
struct JsonEvent<'a, A> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'a str>,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    pid: u64,
    tid: u64,
    args: A,
}

/// A payload value as JSON: numbers, strings, arrays and objects as such; GUIDs, times,
/// pointers (`0x…`), decimals and bytes (hex) as their text. Object fields keep their
/// order.
#[derive(Debug, Clone, Copy)]
pub struct JsonValue<'a>(pub &'a Value);

impl Serialize for JsonValue<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        match self.0 {
            Value::Bool(v) => ser.serialize_bool(*v),
            Value::I8(v) => ser.serialize_i8(*v),
            Value::U8(v) => ser.serialize_u8(*v),
            Value::I16(v) => ser.serialize_i16(*v),
            Value::U16(v) => ser.serialize_u16(*v),
            Value::I32(v) => ser.serialize_i32(*v),
            Value::U32(v) => ser.serialize_u32(*v),
            Value::I64(v) => ser.serialize_i64(*v),
            Value::U64(v) => ser.serialize_u64(*v),
            // Through the shortest text of the f32, so 0.1f32 reads 0.1, not 0.10000000149.
            Value::F32(v) => float(ser, v.to_string().parse().unwrap_or(f64::from(*v))),
            Value::F64(v) => float(ser, *v),
            Value::String(v) => ser.serialize_str(v),
            Value::Array(items) => {
                let mut seq = ser.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&JsonValue(item))?;
                }
                seq.end()
            }
            Value::Object(fields) => Fields(fields).serialize(ser),
            other => ser.collect_str(other),
        }
    }
}

/// JSON has no NaN or infinity: those are written as text.
fn float<S: Serializer>(ser: S, v: f64) -> std::result::Result<S::Ok, S::Error> {
    if v.is_finite() {
        ser.serialize_f64(v)
    } else {
        ser.collect_str(&v)
    }
}

/// Named values as a JSON object, in their order.
struct Fields<'a, N>(&'a [(N, Value)]);

impl<N: AsRef<str>> Serialize for Fields<'_, N> {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(Some(self.0.len()))?;
        for (name, value) in self.0 {
            map.serialize_entry(name.as_ref(), &JsonValue(value))?;
        }
        map.end()
    }
}

/// An event's `args`: its decoded payload, or why it did not decode.
enum Payload<N> {
    Fields(Vec<(N, Value)>),
    Error(String),
}

impl<N: AsRef<str>> Serialize for Payload<N> {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Payload::Fields(fields) => Fields(fields).serialize(ser),
            Payload::Error(e) => {
                let mut map = ser.serialize_map(Some(1))?;
                map.serialize_entry("decode_error", e)?;
                map.end()
            }
        }
    }
}

impl<N: AsRef<str>> Payload<N> {
    fn field(&self, name: &str) -> Option<&Value> {
        match self {
            Payload::Fields(fields) => fields
                .iter()
                .find_map(|(n, v)| (n.as_ref() == name).then_some(v)),
            Payload::Error(_) => None,
        }
    }
}

#[derive(Serialize)]
struct StartStop<'a> {
    start: &'a Payload<String>,
    stop: &'a Payload<&'a str>,
}

#[derive(Serialize)]
struct NameArg<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct PollArgs {
    ctx: u64,
    frame: u32,
    ended: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    start_exact: Option<bool>,
}

/// A Start waiting for its Stop.
struct Open {
    ts: f64,
    pid: u64,
    tid: u64,
    /// `Provider/EventName` of the Start, for when it ends up an instant.
    qualified: String,
    /// The interval's name.
    label: String,
    args: Payload<String>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    pid: u64,
    tid: u64,
    provider: String,
    base: String,
}

/// The event's opcode: stated, or implied by a name ending in Start/Stop.
fn opcode(event: &Event<'_>) -> u8 {
    let md = event.metadata;
    md.opcode.unwrap_or_else(|| {
        let lower = md.event_name.to_ascii_lowercase();
        if lower.ends_with("start") {
            1
        } else if lower.ends_with("stop") {
            2
        } else {
            0
        }
    })
}

/// `name` without a trailing `/Start`/`Start` (opcode 1) or `/Stop`/`Stop` (opcode 2).
fn base_name(name: &str, opcode: u8) -> &str {
    let suffix = if opcode == 1 { "Start" } else { "Stop" };
    match name.strip_suffix(suffix) {
        Some(rest) => rest.strip_suffix('/').unwrap_or(rest),
        None => name,
    }
}

/// The program of a command line: its first word (quotes respected), without directory.
fn program_name(command_line: &str) -> Option<&str> {
    let line = command_line.trim_start();
    let first = match line.strip_prefix('"') {
        Some(rest) => rest.split('"').next()?,
        None => line.split_whitespace().next()?,
    };
    let name = first.rsplit(['/', '\\']).next()?;
    (!name.is_empty()).then_some(name)
}

struct Writer<W: Write> {
    out: BufWriter<W>,
    first: bool,
}

impl<W: Write> Writer<W> {
    fn event<A: Serialize>(&mut self, e: &JsonEvent<'_, A>) -> Result<()> {
        if self.first {
            self.first = false;
        } else {
            self.out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut self.out, e)?;
        Ok(())
    }
}

struct Converter<W: Write> {
    w: Writer<W>,
    open: HashMap<Key, VecDeque<Open>>,
    thread_names: HashMap<(u64, u64), String>,
    process_names: HashMap<u64, String>,
    summary: ChromeSummary,
    default_pid: u64,
    trace: TraceInfo,
    /// The latest event timestamp, where polls still open at the end end.
    last_ticks: Option<i64>,
    polls: Decoder,
    facts: Vec<Fact>,
    frame_names: HashMap<AsyncFrameId, String>,
    /// The process of each thread that wrote async-profiler buffers.
    poll_pids: HashMap<u64, u64>,
}

impl<W: Write> Converter<W> {
    fn new(w: W, trace: &TraceInfo) -> Result<Self> {
        let mut out = BufWriter::new(w);
        out.write_all(b"{\"traceEvents\":[\n")?;
        Ok(Converter {
            w: Writer { out, first: true },
            open: HashMap::new(),
            thread_names: HashMap::new(),
            process_names: HashMap::new(),
            summary: ChromeSummary::default(),
            default_pid: trace.process_id.unwrap_or(0),
            trace: trace.clone(),
            last_ticks: None,
            polls: Decoder::default(),
            facts: Vec::new(),
            frame_names: HashMap::new(),
            poll_pids: HashMap::new(),
        })
    }

    /// Writes the poll spans and learns the frame names of the decoder's latest facts.
    fn write_facts(&mut self) -> Result<()> {
        let mut facts = std::mem::take(&mut self.facts);
        for fact in facts.drain(..) {
            match fact {
                Fact::Frame(id, frame) => {
                    self.frame_names.insert(id, frame.name);
                }
                Fact::Span(span) => self.poll_span(&span)?,
                Fact::Reference(_) | Fact::Created { .. } | Fact::Dropped { .. } => {}
            }
        }
        self.facts = facts;
        Ok(())
    }

    fn poll_span(&mut self, span: &PollSpan) -> Result<()> {
        self.summary.poll_spans += 1;
        let name = match self.frame_names.get(&span.frame) {
            Some(name) => name.clone(),
            None => span.frame.to_string(),
        };
        let start = self.trace.ticks_to_msec(span.start) * 1000.0;
        let end = self.trace.ticks_to_msec(span.end) * 1000.0;
        self.w.event(&JsonEvent {
            name: &name,
            cat: Some(async_trace::PROVIDER),
            ph: "X",
            ts: Some(start),
            dur: Some((end - start).max(0.0)),
            s: None,
            pid: self
                .poll_pids
                .get(&span.thread)
                .copied()
                .unwrap_or(self.default_pid),
            tid: span.thread,
            args: PollArgs {
                ctx: span.ctx.0,
                frame: span.frame.0,
                ended: span.ended.as_str(),
                start_exact: (!span.start_exact).then_some(false),
            },
        })
    }

    fn instant<N: AsRef<str>>(
        &mut self,
        name: &str,
        cat: &str,
        ts: f64,
        pid: u64,
        tid: u64,
        args: &Payload<N>,
    ) -> Result<()> {
        self.summary.instants += 1;
        self.w.event(&JsonEvent {
            name,
            cat: Some(cat),
            ph: "i",
            ts: Some(ts),
            dur: None,
            s: Some("t"),
            pid,
            tid,
            args,
        })
    }

    /// A Start that will never be closed.
    fn give_up(&mut self, o: &Open, cat: &str) -> Result<()> {
        self.summary.unmatched_starts += 1;
        self.instant(&o.qualified, cat, o.ts, o.pid, o.tid, &o.args)
    }

    fn thread_name(&mut self, pid: u64, tid: u64, name: &str) -> Result<()> {
        if self
            .thread_names
            .get(&(pid, tid))
            .is_some_and(|n| n == name)
        {
            return Ok(());
        }
        self.thread_names.insert((pid, tid), name.to_owned());
        self.summary.thread_names += 1;
        self.metadata("thread_name", pid, tid, name)
    }

    fn process_name(&mut self, pid: u64, name: &str) -> Result<()> {
        if self.process_names.get(&pid).is_some_and(|n| n == name) {
            return Ok(());
        }
        self.process_names.insert(pid, name.to_owned());
        self.summary.process_names += 1;
        self.metadata("process_name", pid, 0, name)
    }

    fn metadata(&mut self, kind: &str, pid: u64, tid: u64, name: &str) -> Result<()> {
        self.w.event(&JsonEvent {
            name: kind,
            cat: None,
            ph: "M",
            ts: None,
            dur: None,
            s: None,
            pid,
            tid,
            args: NameArg { name },
        })
    }

    fn event(&mut self, event: &Event<'_>) -> Result<()> {
        self.summary.events += 1;
        let md = event.metadata;
        let pid = event.process_id().unwrap_or(self.default_pid);
        let tid = event.thread_id();
        let ts = event.timestamp_msec() * 1000.0;
        let ticks = event.header.timestamp;
        self.last_ticks = Some(self.last_ticks.map_or(ticks, |t| t.max(ticks)));
        if let Some(name) = event.thread_name() {
            self.thread_name(pid, tid, name)?;
        }
        if let Some(which) = self.polls.observe(event, &mut self.facts) {
            if which == AsyncEvent::Buffer {
                // The buffer is attributed to the thread whose polls it holds.
                self.poll_pids.insert(tid, pid);
                self.summary.async_buffers += 1;
                return self.write_facts();
            }
            self.write_facts()?;
        }
        let payload = match event.decode_payload() {
            Ok(fields) => Payload::Fields(fields),
            Err(e) => Payload::Error(e.to_string()),
        };

        // Names the trace states in events.
        match md.provider.as_str() {
            RUNDOWN_PROVIDER if md.display_name == "Thread" || md.event_name == "Thread" => {
                if let (Some(thread), Some(name)) = (
                    payload.field("ThreadId").and_then(Value::as_u64),
                    payload.field("Name").and_then(Value::as_str),
                ) {
                    self.thread_name(pid, thread, name)?;
                }
            }
            "Microsoft-DotNETCore-EventPipe" if md.display_name == "ProcessInfo" => {
                if let Some(name) = payload
                    .field("CommandLine")
                    .and_then(Value::as_str)
                    .and_then(program_name)
                {
                    self.process_name(pid, name)?;
                }
            }
            "Universal.System"
                if md.display_name == "ExistingProcess" || md.display_name == "ProcessCreate" =>
            {
                if let Some(name) = payload.field("Name").and_then(Value::as_str) {
                    self.process_name(pid, name)?;
                }
            }
            _ => {}
        }

        let op = opcode(event);
        if op != 1 && op != 2 {
            return self.instant(
                &event.qualified_name(),
                &md.provider,
                ts,
                pid,
                tid,
                &payload,
            );
        }
        let base = base_name(&md.display_name, op);
        let key = Key {
            pid,
            tid,
            provider: md.provider.clone(),
            base: base.to_owned(),
        };
        if op == 1 {
            let label = payload
                .field("Name")
                .and_then(Value::as_str)
                .unwrap_or(base)
                .to_owned();
            let args = match payload {
                Payload::Fields(fields) => {
                    Payload::Fields(fields.into_iter().map(|(n, v)| (n.to_owned(), v)).collect())
                }
                Payload::Error(e) => Payload::Error(e),
            };
            let stack = self.open.entry(key).or_default();
            stack.push_back(Open {
                ts,
                pid,
                tid,
                qualified: event.qualified_name(),
                label,
                args,
            });
            if stack.len() > MAX_OPEN_PER_KEY {
                if let Some(oldest) = stack.pop_front() {
                    self.give_up(&oldest, &md.provider)?;
                }
            }
            return Ok(());
        }
        let start = match self.open.get_mut(&key) {
            Some(stack) => {
                let start = stack.pop_back();
                if stack.is_empty() {
                    self.open.remove(&key);
                }
                start
            }
            None => None,
        };
        match start {
            Some(start) => {
                self.summary.complete += 1;
                self.w.event(&JsonEvent {
                    name: &start.label,
                    cat: Some(&md.provider),
                    ph: "X",
                    ts: Some(start.ts),
                    dur: Some((ts - start.ts).max(0.0)),
                    s: None,
                    pid: start.pid,
                    tid: start.tid,
                    args: StartStop {
                        start: &start.args,
                        stop: &payload,
                    },
                })
            }
            None => {
                self.summary.unmatched_stops += 1;
                self.instant(
                    &event.qualified_name(),
                    &md.provider,
                    ts,
                    pid,
                    tid,
                    &payload,
                )
            }
        }
    }

    /// Writes the starts never closed (in time order) and the end of the document.
    fn finish(
        mut self,
        trace: &TraceInfo,
        lost_events: u64,
        error: Option<&nettrace::Error>,
    ) -> Result<ChromeSummary> {
        let end = match (self.last_ticks, self.polls.last_record_ts) {
            (Some(a), Some(b)) => a.max(b),
            (a, b) => a.or(b).unwrap_or(0),
        };
        self.polls.finish(end, &mut self.facts);
        self.write_facts()?;
        let mut left: Vec<(String, Open)> = self
            .open
            .drain()
            .flat_map(|(key, stack)| stack.into_iter().map(move |o| (key.provider.clone(), o)))
            .collect();
        left.sort_by(|a, b| a.1.ts.total_cmp(&b.1.ts));
        for (provider, open) in left {
            self.give_up(&open, &provider)?;
        }
        #[derive(Serialize)]
        struct OtherData {
            exporter: &'static str,
            format: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            trace_start: Option<String>,
            lost_events: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<String>,
        }
        let other = OtherData {
            exporter: "eventpipe-rs",
            format: trace.version.to_string(),
            trace_start: trace
                .ticks_to_unix_nanos(trace.sync_time_ticks)
                .map(nettrace::format_unix_nanos),
            lost_events,
            error: error.map(ToString::to_string),
        };
        let mut out = self.w.out;
        out.write_all(b"\n],\"displayTimeUnit\":\"ms\",\"otherData\":")?;
        serde_json::to_writer(&mut out, &other)?;
        out.write_all(b"}\n")?;
        out.flush()?;
        Ok(self.summary)
    }
}

/// Converts every event `reader` has left into Chrome Trace Event JSON on `w`.
///
/// # Errors
/// [`crate::Error::Trace`] when the trace stops being readable: the output is still a
/// complete JSON document, holding the events before that point and the error's text in
/// `otherData.error`. [`crate::Error::Io`] / [`crate::Error::Json`] when writing fails.
pub fn write_chrome_trace<I: Input, W: Write>(
    reader: &mut TraceReader<I>,
    w: W,
) -> Result<ChromeSummary> {
    let trace = reader.trace().clone();
    let mut conv = Converter::new(w, &trace)?;
    let error = loop {
        match reader.next_event() {
            Ok(Some(event)) => conv.event(&event)?,
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    let summary = conv.finish(&trace, reader.stats().lost_events, error.as_ref())?;
    match error {
        Some(e) => Err(e.into()),
        None => Ok(summary),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_names_drop_one_start_or_stop_suffix() {
        assert_eq!(base_name("GC/Start", 1), "GC");
        assert_eq!(base_name("GC/Stop", 2), "GC");
        assert_eq!(base_name("RequestStart", 1), "Request");
        assert_eq!(base_name("Span/Stop", 2), "Span");
        assert_eq!(base_name("Begin", 1), "Begin");
        assert_eq!(base_name("GC/Start", 2), "GC/Start");
    }

    #[test]
    fn program_names_come_from_the_first_word() {
        assert_eq!(program_name("/usr/bin/app --x"), Some("app"));
        assert_eq!(
            program_name(r#""C:\Program Files\dotnet\dotnet.exe" app.dll"#),
            Some("dotnet.exe")
        );
        assert_eq!(program_name("   "), None);
        assert_eq!(program_name("dir/"), None);
    }

    fn json(v: Value) -> String {
        serde_json::to_string(&JsonValue(&v)).unwrap()
    }

    #[test]
    fn values_map_to_json_types() {
        assert_eq!(json(Value::F32(0.1)), "0.1");
        assert_eq!(json(Value::F64(f64::NAN)), r#""NaN""#);
        assert_eq!(json(Value::F64(f64::NEG_INFINITY)), r#""-inf""#);
        assert_eq!(json(Value::U64(u64::MAX)), "18446744073709551615");
        assert_eq!(json(Value::Pointer(255)), r#""0xff""#);
        assert_eq!(json(Value::Bytes(vec![1, 0xab])), r#""01ab""#);
        assert_eq!(json(Value::Char('"')), r#""\"""#);
        assert_eq!(
            json(Value::Array(vec![Value::I8(-1), Value::Bool(true)])),
            "[-1,true]"
        );
        // Fields keep their order.
        assert_eq!(
            json(Value::Object(vec![
                ("z".into(), Value::String("x".into())),
                ("a".into(), Value::U16(2)),
            ])),
            r#"{"z":"x","a":2}"#
        );
    }
}
