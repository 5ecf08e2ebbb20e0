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
//!   are instants like any other event. So the trace's event count is exactly
//!   instants + 2 × complete events ([`ChromeSummary`]).
//! * Thread names become `thread_name` metadata events (`"ph":"M"`): from NetTrace V6
//!   thread rows and from `EventPipeRs-Rundown/Thread` rundown events (fields `ThreadId`,
//!   `Name`). Process names become `process_name` metadata: from .NET's
//!   `Microsoft-DotNETCore-EventPipe/ProcessInfo` (the command line's program) and
//!   `Universal.System` `ExistingProcess`/`ProcessCreate` events (their `Name`).
//!
//! # Memory
//!
//! Output is streamed: each event is written as it is read, and only open intervals are
//! held (at most [`MAX_OPEN_PER_KEY`] per thread, provider and base name; beyond that the
//! oldest is given up and written as an instant), plus the names already announced per
//! thread and process. Events are written in stream order, not sorted: the viewers sort.

use std::collections::{HashMap, VecDeque};
use std::io::{BufWriter, Write};

use nettrace::source::Input;
use nettrace::{Event, TraceInfo, TraceReader, Value};
use serde::Serialize;
use serde_json::{Map, Value as Json};

use crate::error::Result;

/// Open intervals kept per (thread, provider, base name): a trace that starts without ever
/// stopping cannot make the converter hold more.
pub const MAX_OPEN_PER_KEY: usize = 4096;

/// The provider of this project's rundown events.
const RUNDOWN_PROVIDER: &str = "EventPipeRs-Rundown";

/// What [`write_chrome_trace`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChromeSummary {
    /// Trace events read: always `instants + 2 * complete`.
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
}

#[derive(Serialize)]
struct JsonEvent<'a> {
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
    args: &'a Json,
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
    args: Json,
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

/// A payload value as JSON: numbers, strings, arrays and objects as such; GUIDs, times,
/// pointers (`0x…`), decimals and bytes (hex) as their text.
pub fn value_to_json(value: &Value) -> Json {
    match value {
        Value::Bool(v) => Json::Bool(*v),
        Value::I8(v) => Json::from(*v),
        Value::U8(v) => Json::from(*v),
        Value::I16(v) => Json::from(*v),
        Value::U16(v) => Json::from(*v),
        Value::I32(v) => Json::from(*v),
        Value::U32(v) => Json::from(*v),
        Value::I64(v) => Json::from(*v),
        Value::U64(v) => Json::from(*v),
        // Through the shortest text of the f32, so 0.1f32 reads 0.1, not 0.10000000149.
        Value::F32(v) => float_json(v.to_string().parse().unwrap_or(f64::from(*v))),
        Value::F64(v) => float_json(*v),
        Value::String(s) => Json::String(s.clone()),
        Value::Array(items) => Json::Array(items.iter().map(value_to_json).collect()),
        Value::Object(fields) => Json::Object(
            fields
                .iter()
                .map(|(name, v)| (name.clone(), value_to_json(v)))
                .collect(),
        ),
        other => Json::String(other.to_string()),
    }
}

/// JSON has no NaN or infinity: those are written as text.
fn float_json(v: f64) -> Json {
    serde_json::Number::from_f64(v).map_or_else(|| Json::String(v.to_string()), Json::Number)
}

fn fields_json(fields: &[(&str, Value)]) -> Json {
    Json::Object(
        fields
            .iter()
            .map(|(name, v)| ((*name).to_owned(), value_to_json(v)))
            .collect(),
    )
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
    fn event(&mut self, e: &JsonEvent<'_>) -> Result<()> {
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
        })
    }

    fn instant(&mut self, o: &Open, cat: &str) -> Result<()> {
        self.summary.instants += 1;
        self.w.event(&JsonEvent {
            name: &o.qualified,
            cat: Some(cat),
            ph: "i",
            ts: Some(o.ts),
            dur: None,
            s: Some("t"),
            pid: o.pid,
            tid: o.tid,
            args: &o.args,
        })
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
        let mut args = Map::new();
        args.insert("name".into(), Json::String(name.to_owned()));
        self.w.event(&JsonEvent {
            name: kind,
            cat: None,
            ph: "M",
            ts: None,
            dur: None,
            s: None,
            pid,
            tid,
            args: &Json::Object(args),
        })
    }

    fn event(&mut self, event: &Event<'_>) -> Result<()> {
        self.summary.events += 1;
        let md = event.metadata;
        let pid = event.process_id().unwrap_or(self.default_pid);
        let tid = event.thread_id();
        if let Some(name) = event.thread_name() {
            self.thread_name(pid, tid, name)?;
        }
        let decoded = event.decode_payload();
        let field = |name: &str| -> Option<&Value> {
            decoded
                .as_ref()
                .ok()?
                .iter()
                .find_map(|(n, v)| (*n == name).then_some(v))
        };
        // Names the trace states in events.
        match md.provider.as_str() {
            RUNDOWN_PROVIDER if md.display_name == "Thread" || md.event_name == "Thread" => {
                if let (Some(thread), Some(name)) = (
                    field("ThreadId").and_then(Value::as_u64),
                    field("Name").and_then(Value::as_str),
                ) {
                    self.thread_name(pid, thread, name)?;
                }
            }
            "Microsoft-DotNETCore-EventPipe" if md.display_name == "ProcessInfo" => {
                if let Some(name) = field("CommandLine")
                    .and_then(Value::as_str)
                    .and_then(program_name)
                {
                    self.process_name(pid, name)?;
                }
            }
            "Universal.System"
                if md.display_name == "ExistingProcess" || md.display_name == "ProcessCreate" =>
            {
                if let Some(name) = field("Name").and_then(Value::as_str) {
                    self.process_name(pid, name)?;
                }
            }
            _ => {}
        }

        let op = opcode(event);
        let label = (op == 1)
            .then(|| field("Name").and_then(Value::as_str).map(str::to_owned))
            .flatten();
        let args = match &decoded {
            Ok(fields) => fields_json(fields),
            Err(e) => {
                let mut m = Map::new();
                m.insert("decode_error".into(), Json::String(e.to_string()));
                Json::Object(m)
            }
        };
        let this = Open {
            ts: event.timestamp_msec() * 1000.0,
            pid,
            tid,
            qualified: event.qualified_name(),
            label: String::new(),
            args,
        };
        match op {
            1 | 2 => {
                let base = base_name(&md.display_name, op);
                let key = Key {
                    pid,
                    tid,
                    provider: md.provider.clone(),
                    base: base.to_owned(),
                };
                if op == 1 {
                    let open = Open {
                        label: label.unwrap_or_else(|| base.to_owned()),
                        ..this
                    };
                    let stack = self.open.entry(key).or_default();
                    stack.push_back(open);
                    if stack.len() > MAX_OPEN_PER_KEY {
                        if let Some(oldest) = stack.pop_front() {
                            self.summary.unmatched_starts += 1;
                            self.instant(&oldest, &md.provider)?;
                        }
                    }
                } else {
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
                        Some(start) => self.complete(start, this, &md.provider)?,
                        None => {
                            self.summary.unmatched_stops += 1;
                            self.instant(&this, &md.provider)?;
                        }
                    }
                }
            }
            _ => self.instant(&this, &md.provider)?,
        }
        Ok(())
    }

    fn complete(&mut self, start: Open, stop: Open, cat: &str) -> Result<()> {
        self.summary.complete += 1;
        let mut args = Map::new();
        args.insert("start".into(), start.args);
        args.insert("stop".into(), stop.args);
        self.w.event(&JsonEvent {
            name: &start.label,
            cat: Some(cat),
            ph: "X",
            ts: Some(start.ts),
            dur: Some((stop.ts - start.ts).max(0.0)),
            s: None,
            pid: start.pid,
            tid: start.tid,
            args: &Json::Object(args),
        })
    }

    /// Writes the starts never closed (in time order) and the end of the document.
    fn finish(
        mut self,
        trace: &TraceInfo,
        lost_events: u64,
        error: Option<&nettrace::Error>,
    ) -> Result<ChromeSummary> {
        let mut left: Vec<(Key, Open)> = self
            .open
            .drain()
            .flat_map(|(key, stack)| stack.into_iter().map(move |o| (key.clone(), o)))
            .collect();
        left.sort_by(|a, b| a.1.ts.total_cmp(&b.1.ts));
        for (key, open) in left {
            self.summary.unmatched_starts += 1;
            self.instant(&open, &key.provider)?;
        }
        let mut other = Map::new();
        other.insert("exporter".into(), Json::from("eventpipe-rs"));
        other.insert("format".into(), Json::from(trace.version.to_string()));
        if let Some(start) = trace.ticks_to_unix_nanos(trace.sync_time_ticks) {
            other.insert(
                "trace_start".into(),
                Json::from(nettrace::format_unix_nanos(start)),
            );
        }
        other.insert("lost_events".into(), Json::from(lost_events));
        if let Some(e) = error {
            other.insert("error".into(), Json::from(e.to_string()));
        }
        let mut out = self.w.out;
        out.write_all(b"\n],\"displayTimeUnit\":\"ms\",\"otherData\":")?;
        serde_json::to_writer(&mut out, &Json::Object(other))?;
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

    #[test]
    fn values_map_to_json_types() {
        assert_eq!(value_to_json(&Value::F32(0.1)), serde_json::json!(0.1));
        assert_eq!(
            value_to_json(&Value::F64(f64::NAN)),
            serde_json::json!("NaN")
        );
        assert_eq!(
            value_to_json(&Value::U64(u64::MAX)),
            serde_json::json!(u64::MAX)
        );
        assert_eq!(
            value_to_json(&Value::Pointer(255)),
            serde_json::json!("0xff")
        );
        assert_eq!(
            value_to_json(&Value::Array(vec![Value::I8(-1), Value::Bool(true)])),
            serde_json::json!([-1, true])
        );
        assert_eq!(
            value_to_json(&Value::Object(vec![(
                "a".into(),
                Value::String("x".into())
            )])),
            serde_json::json!({"a": "x"})
        );
    }
}
