//! Chrome's Trace Event Format (the JSON that Perfetto UI, `chrome://tracing`, the DevTools
//! performance panel and speedscope load), straight from a trace: no profile, every event.
//! The CLI names the file `*.timeline.json` ([`FILE_SUFFIX`]).
//!
//! # What each event becomes
//!
//! * Every event is an instant (`"ph":"I"`, thread scoped: the format's default, so no
//!   `s`) named `Provider/EventName`, with `pid`, `tid` and `args` = the decoded payload (a
//!   payload that does not decode gives `{"decode_error": "..."}`; an empty one, no `args`).
//!   No `cat`: the name holds the provider.
//! * Except begin/end pairs, which become one complete event (`"ph":"X"` with `dur`) on the
//!   thread that wrote them: a begin opens an interval on its thread; the next end on the
//!   same thread, of the same provider and with the same base name closes the innermost
//!   open one. Pairs are recognised in two ways:
//!   - **Start/Stop opcodes.** An event with opcode 1 (Start) begins, one with opcode 2
//!     (Stop) ends. The base name is the event name without a trailing `/Start`, `Start`,
//!     `/Stop` or `Stop` (`GC/Start` ↔ `GC/Stop`, `Contention/Start` ↔ `Contention/Stop`,
//!     `Request/Start` ↔ `Request/Stop`). An event without a stated opcode whose name ends
//!     in `Start`/`Stop` counts as opcode 1/2, as TraceEvent (and nettrace's naming) has it.
//!     The interval is named by the Start event's string field `Name` when it has one (the
//!     tracing layer's `SpanStart`), else by the base name.
//!   - **The runtime's named pairs**, [`PAIR_RULES`]: events the .NET runtime writes as a
//!     begin and an end with opcodes of their own. From its manifest (`ClrEtwAll.man`):
//!     `GC/SuspendEEStart` → `GC/SuspendEEStop` (slice `GC/SuspendEE`), `GC/RestartEEStart`
//!     → `GC/RestartEEStop` (`GC/RestartEE`), `GC/FinalizersStart` → `GC/FinalizersStop`,
//!     `Method/JittingStarted` → `Method/LoadVerbose` of the same `MethodID` (`JIT
//!     Namespace.Method`, as TraceEvent's JIT statistics pair them), and the private
//!     provider's background-GC phases (`GC/BGC2ndNonCon`, `GC/BGC2ndCon`,
//!     `GC/BGCAllocWait`). Each is written by one thread. Left out on purpose: the rundown
//!     `*DCStart`/`*DCStop` events (the state at the session's start and at its end, not an
//!     interval), `GC/GenAwareBegin`/`End` and the .NET Framework-only startup and binding
//!     phases of the private provider.
//!
//!   A slice's `args` hold the begin's and the end's facts once: the begin's fields, then
//!   the end's fields the begin does not hold with the same value (`stop.<name>` when it
//!   holds that name with another value); the `Name` that names the slice is not repeated.
//! * A Stop with nothing open, and a Start never closed (written at the end of the trace),
//!   are instants like any other event.
//! * The tracing layer's span lifecycle (`eventpipe-tracing`: `SpanNew` with the span's
//!   fields when it is created, `SpanStart`/`SpanStop` each time it is entered and exited,
//!   `SpanClose`): each `SpanStart`/`SpanStop` pair is a slice whose `args` are the span's
//!   `SpanNew` fields (`SpanId`, `ParentSpanId` unless the span is a root, the span's own
//!   fields). A span entered exactly once between its creation and its close is that one
//!   slice: its `SpanNew` and `SpanClose` are not written again
//!   ([`ChromeSummary::folded_span_events`]). A span never entered, entered several times
//!   (an async span) or never closed keeps its `SpanNew` and `SpanClose` as instants, since
//!   its lifetime is not one slice. Ids are written where they link facts, not where the
//!   drawing already does:
//!   - `ParentSpanId` is left out when the parent is the innermost span of the same
//!     provider open around the slice on its thread: the viewer draws the slice beneath it.
//!   - The slice of a span entered once is written when the span closes (the tracing
//!     registry closes a parent after its children), with its `SpanId` only if something
//!     written names that id (a child's `ParentSpanId` on another thread, a `SpanNew`
//!     instant). A span entered again, or never closed, keeps its `SpanId` on every slice.
//! * The async profiler's `AsyncBuffer` events are not instants: their records become
//!   **poll spans**, complete events on the track of the thread that polled, named by the
//!   polled future's frame: its path without the leading segments no other frame needs to
//!   be told apart (`handle_request` for `app::server::handle_request`; the full name, file
//!   and line are the frame's `AsyncFrame` instant), or `frame#N` if that event has not
//!   been read yet. No `cat`; `args` = `{"ctx"}`, the context polled, which CPU samples
//!   name as their `AsyncContext`, plus `"ended"` for a poll that did not return `Pending`
//!   (`complete`, `unwind`, `lost`, `open at end`) and `"start_exact": false` for a poll
//!   first seen in a Stack record after lost data. A nested poll lies within the poll that
//!   ran it, so viewers draw it beneath. Polls still open at the end of the trace end at
//!   its last timestamp. See [`crate::async_trace`].
//! * So the trace's event count is exactly instants + 2 × complete events + async buffers
//!   + folded span events ([`ChromeSummary`]).
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
//! # Numbers JavaScript reads exactly
//!
//! The viewers are JavaScript, whose numbers are doubles:
//! * `ts` is the time since the trace's start in microseconds with at most three decimals
//!   (nanoseconds, exact from the trace's ticks). `dur` too, whenever `ts + dur` computed in
//!   doubles gives the end's written time exactly; otherwise `dur` is the shortest decimal
//!   near the difference of the two written times for which it does, so that a slice
//!   ending with its parent never seems to end after it (viewers nest by comparing
//!   `ts + dur`).
//! * Integers beyond ±(2^53 − 1) ([`MAX_SAFE_INTEGER`]: 64-bit span ids, pointers read as
//!   integers, hashes) are written as strings of their decimal digits, which a viewer shows
//!   as they are instead of rounding.
//!
//! # Memory
//!
//! Output is streamed: each event is written as it is read, and only open intervals are
//! held (at most [`MAX_OPEN_PER_KEY`] per thread, provider and base name; beyond that the
//! oldest is given up and written as an instant), the tracing layer's live spans with the
//! slice of each exited one (at most [`MAX_LIVE_SPANS`]; beyond that a `SpanNew` is
//! written at once, and the span's slices with their ids), the names already
//! announced per thread and process, and for the async profiler each thread's open polls,
//! the interned poll stacks and the frame names. Events are written as they complete (the
//! slice of a span entered once when the span closes), not sorted: the viewers sort. A
//! parent whose Start is given up (more than [`MAX_OPEN_PER_KEY`] spans open inside it on
//! its thread) leaves the children already written without their `ParentSpanId`.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::io::Write;
use std::rc::Rc;
use std::sync::Arc;

use nettrace::source::Input;
use nettrace::{
    Event, EventHeader, EventMetadata, EventRef, OwnedEvent, TimeOrder, TraceInfo, TraceReader,
    Value,
};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::async_trace::{AsyncEvent, AsyncFrameId, Decoder, Fact, PollSpan, SpanEnd};
use crate::error::Result;
use crate::hash::FastHash;
use crate::intervals::{self, Lifecycle, Role};
use crate::json::{Fields, Json, Numbers};
use crate::symbolize::RUNDOWN_PROVIDER;

/// The file-name suffix the CLI gives this format: `trace.timeline.json`.
///
/// Not `.chrome.json`: speedscope's importer takes a name ending in `.chrome.json` for a
/// Chrome DevTools timeline recording (an array holding a `CpuProfile` event) and fails on
/// a Trace Event Format object; with any other name it recognises the format from the
/// content. Perfetto UI and `chrome://tracing` look only at the content.
pub const FILE_SUFFIX: &str = ".timeline.json";

/// Open intervals kept per (thread, provider, base name): a trace that starts without ever
/// stopping cannot make the converter hold more.
pub const MAX_OPEN_PER_KEY: usize = 4096;

/// Spans of the tracing layer held from `SpanNew` to `SpanClose`; beyond that a new span's
/// `SpanNew` is written at once, as an instant.
pub const MAX_LIVE_SPANS: usize = 65_536;

/// The largest integer a JavaScript number holds exactly (2^53 − 1): larger ones are
/// written as strings.
pub use crate::json::MAX_SAFE_INTEGER;

pub use crate::intervals::{PairRule, PAIR_RULES};

/// What [`write_chrome_trace`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChromeSummary {
    /// Trace events read: always `instants + 2 * complete + async_buffers +
    /// folded_span_events`.
    pub events: u64,
    /// Instant events written (unmatched starts and stops included).
    pub instants: u64,
    /// Complete (`X`) events written, each from a begin and its end.
    pub complete: u64,
    /// Starts never closed.
    pub unmatched_starts: u64,
    /// Stops with no open Start.
    pub unmatched_stops: u64,
    /// The tracing layer's `SpanNew` and `SpanClose` events whose facts are in their span's
    /// one slice (a span entered exactly once), so not written on their own.
    pub folded_span_events: u64,
    /// `thread_name` metadata events written.
    pub thread_names: u64,
    /// `process_name` metadata events written.
    pub process_names: u64,
    /// The async profiler's `AsyncBuffer` events read (their polls become spans).
    pub async_buffers: u64,
    /// Poll spans written, as complete events.
    pub poll_spans: u64,
}

/// A time or duration in nanoseconds, written in microseconds (the format's unit) with at
/// most three decimals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Micros(i64);

impl Serialize for Micros {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        if self.0.unsigned_abs() <= MAX_SAFE_INTEGER {
            // The quotient is the double nearest the exact decimal, and the shortest text
            // that reads back as that double is that decimal: three decimals at most.
            ser.serialize_f64(self.0 as f64 / 1000.0)
        } else {
            ser.collect_str(&format_args!(
                "{}{}.{:03}",
                if self.0 < 0 { "-" } else { "" },
                self.0.unsigned_abs() / 1000,
                self.0.unsigned_abs() % 1000
            ))
        }
    }
}

/// A slice's duration, from its start and end in nanoseconds: in microseconds with at most
/// three decimals when `ts + dur`, added as JavaScript adds, gives exactly the end's
/// written time; else the difference of the two written times, which does. Viewers find a
/// slice's end as `ts + dur` and nest slices by comparing ends: rounding in that sum would
/// make a child that ends with its parent seem to end after it (the DevTools trace engine
/// then drops the child).
#[derive(Debug, Clone, Copy)]
struct Duration {
    start: i64,
    end: i64,
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        let dur = self.end.saturating_sub(self.start).max(0);
        let exact = self.start.unsigned_abs() <= MAX_SAFE_INTEGER
            && self.end.unsigned_abs() <= MAX_SAFE_INTEGER;
        if !exact {
            return Micros(dur).serialize(ser);
        }
        let (ts, end) = (self.start as f64 / 1000.0, self.end as f64 / 1000.0);
        let decimal = dur as f64 / 1000.0;
        if ts + decimal == end {
            return ser.serialize_f64(decimal);
        }
        let difference = end - ts;
        if !(difference >= 0.0 && ts + difference == end) {
            return ser.serialize_f64(decimal);
        }
        // The difference rounded to the fewest decimals that still add up to the end: a
        // few more than three, where the difference itself takes up to seventeen digits.
        let mut text = String::with_capacity(32);
        for decimals in 4..17 {
            text.clear();
            let _ = write!(text, "{difference:.decimals$}");
            if let Ok(shorter) = text.parse::<f64>() {
                if shorter >= 0.0 && ts + shorter == end {
                    return ser.serialize_f64(shorter);
                }
            }
        }
        ser.serialize_f64(difference)
    }
}

/// Nanoseconds from the trace's start (its sync time) to `ticks`, exactly.
fn ticks_to_ns(trace: &TraceInfo, ticks: i64) -> i64 {
    if trace.tick_frequency <= 0 {
        return 0;
    }
    let delta = i128::from(ticks) - i128::from(trace.sync_time_ticks);
    let ns = delta * 1_000_000_000 / i128::from(trace.tick_frequency);
    i64::try_from(ns).unwrap_or(if ns < 0 { i64::MIN } else { i64::MAX })
}

#[derive(Serialize)]
struct JsonEvent<'a, A: EventArgs> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'a str>,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<Micros>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<Duration>,
    pid: u64,
    tid: u64,
    #[serde(skip_serializing_if = "EventArgs::is_empty")]
    args: A,
}

/// An event's `args`, left out when it holds nothing.
trait EventArgs: Serialize {
    fn is_empty(&self) -> bool;
}

/// An integer as JSON: a number when JavaScript holds it exactly, else its decimal text.
struct Integer<T>(T);

impl Serialize for Integer<u64> {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        if self.0 <= MAX_SAFE_INTEGER {
            ser.serialize_u64(self.0)
        } else {
            ser.collect_str(&self.0)
        }
    }
}

impl Serialize for Integer<i64> {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        if self.0.unsigned_abs() <= MAX_SAFE_INTEGER {
            ser.serialize_i64(self.0)
        } else {
            ser.collect_str(&self.0)
        }
    }
}

/// A payload value as the timeline writes it ([`crate::json`], integers beyond
/// ±(2^53 − 1) as text).
fn json_value(value: &Value) -> Json<'_> {
    Json::new(value, Numbers::JavaScript)
}

/// An event's `args`: its decoded payload, or why it did not decode.
enum Payload<N> {
    Fields(Vec<(N, Value)>),
    Error(String),
}

impl<N: AsRef<str>> Serialize for Payload<N> {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Payload::Fields(fields) => Fields::new(fields, Numbers::JavaScript).serialize(ser),
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
            Payload::Fields(fields) => crate::fields::field(fields, name),
            Payload::Error(_) => None,
        }
    }

    /// The payload, held past its event: field names come from `names`, shared.
    fn into_owned(self, names: &mut FieldNames) -> Payload<FieldName> {
        match self {
            Payload::Fields(fields) => Payload::Fields(
                fields
                    .into_iter()
                    .map(|(n, v)| (names.get(n.as_ref()), v))
                    .collect(),
            ),
            Payload::Error(e) => Payload::Error(e),
        }
    }
}

/// `Provider/EventName` of each metadata row whose begins are held open, made once and
/// shared by them (they are written as instants if they are given up).
#[derive(Default)]
struct QualifiedNames(HashMap<u32, Rc<str>, FastHash>);

impl QualifiedNames {
    fn get(&mut self, md: &EventMetadata) -> Rc<str> {
        // A V6 trace may reuse a metadata id after a flush: a held name is used only while
        // it still reads as this row's.
        let still = |name: &str| {
            name.strip_prefix(md.provider.as_str())
                .and_then(|rest| rest.strip_prefix('/'))
                == Some(md.display_name.as_str())
        };
        match self.0.get(&md.metadata_id) {
            Some(name) if still(name) => Rc::clone(name),
            _ => {
                let name: Rc<str> = Rc::from(md.qualified_name());
                self.0.insert(md.metadata_id, Rc::clone(&name));
                name
            }
        }
    }
}

/// A field name of a payload held past its event (an open begin's, a live span's).
type FieldName = Rc<str>;

/// The field names of held payloads, one allocation per distinct name: a begin held
/// thousands of events before it is written does not bring its own copies of the names
/// (each a cache miss when it is written) nor allocate them.
#[derive(Default)]
struct FieldNames(HashMap<String, FieldName, FastHash>);

impl FieldNames {
    fn get(&mut self, name: &str) -> FieldName {
        if let Some(shared) = self.0.get(name) {
            return Rc::clone(shared);
        }
        let shared: FieldName = Rc::from(name);
        self.0.insert(name.to_owned(), Rc::clone(&shared));
        shared
    }
}

/// A slice's `args`: one object holding each fact of its begin and end once. The begin's
/// fields first; then the end's fields that the begin does not already hold with the same
/// value (under `stop.<name>` when the begin holds that name with another value). The
/// `Name` field that names the slice is not repeated, nor what [`Omit`] says the document
/// shows otherwise.
struct SliceArgs<'a, N> {
    start: &'a Payload<FieldName>,
    stop: &'a Payload<N>,
    /// The slice's name when it came from a `Name` field.
    named_by: Option<&'a str>,
    omit: Omit,
}

/// Fields of a tracing-layer span's slice that the document shows otherwise.
#[derive(Debug, Clone, Copy, Default)]
struct Omit {
    /// `SpanId`: nothing in the document refers to the span.
    span_id: bool,
    /// `ParentSpanId`: the parent is the slice around this one.
    parent: bool,
}

/// A field of [`SliceArgs`]: its name (`stop.` prefixed or not) and value, or a decode error.
enum SliceField<'a> {
    Value(&'a str, bool, &'a Value),
    Error(&'static str, &'a str),
}

impl<'a, N: AsRef<str>> SliceArgs<'a, N> {
    /// Each field to write, in order.
    fn fields(&self) -> impl Iterator<Item = SliceField<'a>> + '_ {
        let named_by = self.named_by;
        let omit = self.omit;
        let keep = move |name: &str, value: &Value| {
            !(name == "Name" && named_by.is_some() && value.as_str() == named_by
                || omit.span_id && name == "SpanId"
                || omit.parent && name == "ParentSpanId")
        };
        let start: Box<dyn Iterator<Item = SliceField<'a>>> = match self.start {
            Payload::Fields(fields) => Box::new(
                fields
                    .iter()
                    .filter(move |(n, v)| keep(n, v))
                    .map(|(n, v)| SliceField::Value(n, false, v)),
            ),
            Payload::Error(e) => Box::new(std::iter::once(SliceField::Error("decode_error", e))),
        };
        let begin = self.start;
        let stop: Box<dyn Iterator<Item = SliceField<'a>>> = match self.stop {
            Payload::Fields(fields) => {
                Box::new(fields.iter().filter_map(move |(n, v)| {
                    let n = n.as_ref();
                    match begin.field(n) {
                        // The begin's value, written (or omitted) there.
                        Some(same) if same == v => None,
                        Some(_) => Some(SliceField::Value(n, true, v)),
                        None => keep(n, v).then_some(SliceField::Value(n, false, v)),
                    }
                }))
            }
            Payload::Error(e) => {
                Box::new(std::iter::once(SliceField::Error("stop.decode_error", e)))
            }
        };
        start.chain(stop)
    }
}

impl<N: AsRef<str>> Serialize for SliceArgs<'_, N> {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(None)?;
        for field in self.fields() {
            match field {
                SliceField::Value(name, false, value) => {
                    map.serialize_entry(name, &json_value(value))?
                }
                SliceField::Value(name, true, value) => {
                    map.serialize_entry(&format_args!("stop.{name}"), &json_value(value))?
                }
                SliceField::Error(name, e) => map.serialize_entry(name, e)?,
            }
        }
        map.end()
    }
}

impl<N: AsRef<str>> EventArgs for SliceArgs<'_, N> {
    fn is_empty(&self) -> bool {
        self.fields().next().is_none()
    }
}

#[derive(Serialize)]
struct NameArg<'a> {
    name: &'a str,
}

/// A poll's facts beyond its name, thread and times: the context polled, how the poll
/// ended unless it returned `Pending` (most do), and a start that was not seen.
#[derive(Serialize)]
struct PollArgs {
    ctx: Integer<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ended: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    start_exact: Option<bool>,
}

impl<T: EventArgs + ?Sized> EventArgs for &T {
    fn is_empty(&self) -> bool {
        (**self).is_empty()
    }
}

impl<N: AsRef<str>> EventArgs for Payload<N> {
    fn is_empty(&self) -> bool {
        matches!(self, Payload::Fields(fields) if fields.is_empty())
    }
}

impl EventArgs for NameArg<'_> {
    fn is_empty(&self) -> bool {
        false
    }
}

impl EventArgs for PollArgs {
    fn is_empty(&self) -> bool {
        false
    }
}

/// A begin waiting for its end.
struct Open {
    ts: i64,
    pid: u64,
    tid: u64,
    /// `Provider/EventName` of the begin, for when it ends up an instant.
    qualified: Rc<str>,
    /// The interval's name.
    label: Rc<str>,
    /// Whether `label` is the begin's `Name` field.
    named_by_field: bool,
    /// The value of the rule's `same` field, which the end must carry too.
    same: Option<Value>,
    /// The `SpanId` of a tracing-layer span the begin enters.
    span: Option<u64>,
    args: StartArgs,
}

/// An event of `row` with payload `bytes` and nothing else: how a payload held as bytes
/// ([`StartArgs::Raw`]) is decoded.
fn held_payload<'a>(trace: &'a TraceInfo, row: &'a EventMetadata, bytes: &'a [u8]) -> Event<'a> {
    Event {
        header: EventHeader::default(),
        metadata: row,
        payload: bytes,
        stack: None,
        thread: None,
        capture_thread: None,
        labels: None,
        offset: Default::default(),
        trace,
    }
}

/// What every plain instant of a metadata row starts with, `{"name":"Provider/Event"`, and
/// its top-level fields' keys, `"Field":`, in order: written once a row, copied per event.
struct RowJson {
    head: Vec<u8>,
    keys: Vec<Vec<u8>>,
    /// The row's events are begins that nothing in the trace can end ([`Ends`]).
    endless_begins: bool,
}

/// The (provider, base name) of every end the trace's metadata rows define: a begin whose
/// pair is not among them can never end, whatever follows it.
struct Ends(std::collections::HashSet<(String, String)>);

impl Ends {
    fn of(rows: &[EventMetadata]) -> Ends {
        let ends = rows.iter().filter_map(|md| {
            let base = match intervals::pair_rule(&md.provider, &md.display_name) {
                Some((rule, false)) => rule.name,
                Some((_, true)) => return None,
                None if intervals::opcode(md) == 2 => intervals::base_name(&md.display_name, 2),
                None => return None,
            };
            Some((md.provider.clone(), base.to_owned()))
        });
        Ends(ends.collect())
    }

    /// Whether the begins of `md`, held as bytes ([`RawBegin`]), can never end.
    fn never_end(&self, md: &EventMetadata) -> bool {
        let base = intervals::base_name(&md.display_name, 1);
        !self.0.contains(&(md.provider.clone(), base.to_owned()))
    }
}

impl RowJson {
    fn of(md: &EventMetadata) -> RowJson {
        let mut head = b"{\"name\":".to_vec();
        json::qualified_name(&mut head, md);
        let keys = md
            .fields
            .iter()
            .map(|f| {
                let mut key = Vec::with_capacity(f.name.len() + 3);
                json::string(&mut key, &f.name);
                key.push(b':');
                key
            })
            .collect();
        RowJson {
            head,
            keys,
            endless_begins: false,
        }
    }
}

/// A held begin's payload: decoded, or (a begin of a [`RawBegin`] row) its bytes, decoded
/// only if an end comes. Most begins that never end are of such rows, and a trace can hold
/// millions of them: each is written as an instant straight from its bytes.
enum StartArgs {
    Decoded(Payload<FieldName>),
    Raw {
        row: Arc<EventMetadata>,
        bytes: Box<[u8]>,
    },
}

impl StartArgs {
    /// The field `name`. A raw begin's row has no field the converter looks up by name
    /// (`Name`, `SpanId`, `ParentSpanId`: [`RawBegin::of`]), so it has none to give.
    fn field(&self, name: &str) -> Option<&Value> {
        match self {
            StartArgs::Decoded(payload) => payload.field(name),
            StartArgs::Raw { .. } => None,
        }
    }
}

/// A metadata row whose begins are held as bytes ([`StartArgs::Raw`]): a begin by its
/// opcode (no pair rule) of a row with no `Name`, `SpanId` or `ParentSpanId` field, none
/// of the rows that name threads or processes, and not the async profiler's. Every begin
/// of such a row has the same role, made once: its label is its base name, it carries no
/// value an end must match, and it enters no span.
struct RawBegin {
    /// The base name's number ([`IntervalNames`]).
    name: u32,
    label: Rc<str>,
    qualified: Rc<str>,
}

impl RawBegin {
    fn of(md: &EventMetadata, names: &mut IntervalNames) -> Option<RawBegin> {
        let looked_up = md
            .fields
            .iter()
            .any(|f| matches!(f.name.as_str(), "Name" | "SpanId" | "ParentSpanId"));
        let special = matches!(
            md.provider.as_str(),
            RUNDOWN_PROVIDER
                | "Microsoft-DotNETCore-EventPipe"
                | "Universal.System"
                | crate::async_trace::PROVIDER
        );
        if looked_up
            || special
            || intervals::opcode(md) != 1
            || intervals::pair_rule(&md.provider, &md.display_name).is_some()
        {
            return None;
        }
        let base = intervals::base_name(&md.display_name, 1);
        Some(RawBegin {
            name: names.id(&md.provider, base),
            label: Rc::from(base),
            qualified: Rc::from(md.qualified_name()),
        })
    }
}

/// The slice of a tracing-layer span entered once so far, ended, held until the span
/// closes: only then is it known whether anything written refers to its `SpanId`.
struct Ended {
    open: Open,
    end: i64,
    stop: Payload<FieldName>,
    /// `ParentSpanId` is left out: the parent's slice lies around this one.
    omit_parent: bool,
}

/// The open intervals of one thread, provider and base name ([`IntervalNames`] numbers
/// the provider and base name).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    pid: u64,
    tid: u64,
    name: u32,
}

/// The (provider, base name) pairs of begins and ends, numbered as first seen, so that
/// the key looked up for every begin and end holds a number instead of two new strings.
#[derive(Default)]
struct IntervalNames {
    ids: HashMap<String, HashMap<String, u32, FastHash>, FastHash>,
    providers: Vec<String>,
}

impl IntervalNames {
    fn id(&mut self, provider: &str, base: &str) -> u32 {
        if let Some(&id) = self.ids.get(provider).and_then(|bases| bases.get(base)) {
            return id;
        }
        let id = u32::try_from(self.providers.len()).unwrap_or(u32::MAX);
        self.providers.push(provider.to_owned());
        self.ids
            .entry(provider.to_owned())
            .or_default()
            .insert(base.to_owned(), id);
        id
    }

    fn provider(&self, id: u32) -> &str {
        self.providers.get(id as usize).map_or("", String::as_str)
    }
}

/// The role of `event`, whose decoded payload is `payload`.
fn role<'a, N: AsRef<str>>(event: &'a Event<'_>, payload: &Payload<N>) -> Role<'a> {
    intervals::role(event.metadata, |name| payload.field(name))
}

fn lifecycle<N: AsRef<str>>(event: &Event<'_>, payload: &Payload<N>) -> Option<Lifecycle> {
    intervals::lifecycle(event.metadata, |name| payload.field(name))
}

/// A span of the tracing layer between its `SpanNew` and its `SpanClose`.
struct LiveSpan {
    ts: i64,
    tid: u64,
    qualified: String,
    /// `SpanNew`'s payload: SpanId, ParentSpanId, Name, the span's fields.
    new: Payload<FieldName>,
    /// Slices begun for it (each `SpanStart`).
    entered: u32,
    /// Its one slice so far, ended.
    ended: Option<Ended>,
    /// Something written names it by its `SpanId` (as a `ParentSpanId`).
    referenced: bool,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct SpanKey {
    pid: u64,
    provider: String,
    span: u64,
}

/// A slice's begin args for a span of the tracing layer: the span's `SpanNew` fields
/// (without a root's `ParentSpanId` of 0), else the `SpanStart` payload.
fn span_slice_args(live: Option<&LiveSpan>, start: Payload<FieldName>) -> Payload<FieldName> {
    match live.map(|l| &l.new) {
        Some(Payload::Fields(fields)) => Payload::Fields(
            fields
                .iter()
                .filter(|(n, v)| !(&**n == "ParentSpanId" && v.as_u64() == Some(0)))
                .cloned()
                .collect(),
        ),
        _ => start,
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

/// The poll slices' names: each frame's path without the leading segments that no other
/// frame of the trace needs to tell it apart (`app::server::handle` is `handle`, unless
/// another frame's name ends in `::handle` too: then one of them is `server::handle`).
/// Segments are split at `::` outside `<...>`, so `<app::Conn as Service>::call` is `call`.
#[derive(Default)]
struct ShortNames {
    /// Short name → the full name it stands for.
    taken: HashMap<String, String>,
}

impl ShortNames {
    fn name(&mut self, id: AsyncFrameId, full: &str) -> String {
        let mut depth = 0i32;
        let mut starts = vec![0];
        let bytes = full.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'<' => depth += 1,
                b'>' => depth -= 1,
                b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                    starts.push(i + 2);
                    i += 1;
                }
                _ => {}
            }
            i += 1;
        }
        for &start in starts.iter().rev() {
            let short = &full[start..];
            if short.is_empty() {
                continue;
            }
            match self.taken.get(short) {
                Some(owner) if owner == full => return short.to_owned(),
                Some(_) => {}
                None => {
                    self.taken.insert(short.to_owned(), full.to_owned());
                    return short.to_owned();
                }
            }
        }
        // Every suffix, the full name too, stands for another frame already.
        let name = format!("{full} ({id})");
        self.taken.insert(name.clone(), full.to_owned());
        name
    }
}

/// The document's bytes, gathered in one buffer and handed to `out` in large writes.
struct Writer<W: Write> {
    out: W,
    buf: Vec<u8>,
    first: bool,
}

/// The buffer is handed on once it holds this much.
const FLUSH_AT: usize = 256 * 1024;

impl<W: Write> Writer<W> {
    fn new(out: W) -> Self {
        Writer {
            out,
            buf: Vec::with_capacity(FLUSH_AT + 64 * 1024),
            first: true,
        }
    }

    /// Starts the next event of the array.
    fn separator(&mut self) {
        if self.first {
            self.first = false;
        } else {
            self.buf.extend_from_slice(b",\n");
        }
    }

    /// Hands the buffer on when it is full enough.
    fn written(&mut self) -> Result<()> {
        if self.buf.len() >= FLUSH_AT {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn event<A: EventArgs>(&mut self, e: &JsonEvent<'_, A>) -> Result<()> {
        self.separator();
        serde_json::to_writer(&mut self.buf, e)?;
        self.written()
    }

    /// Writes what is left and flushes `out`.
    fn finish(mut self) -> Result<()> {
        self.out.write_all(&self.buf)?;
        self.out.flush()?;
        Ok(())
    }
}

struct Converter<W: Write> {
    w: Writer<W>,
    open: HashMap<Key, VecDeque<Open>, FastHash>,
    interval_names: IntervalNames,
    field_names: FieldNames,
    qualified_names: QualifiedNames,
    live_spans: HashMap<SpanKey, LiveSpan>,
    /// [`Converter::plain_instant`]'s answer by metadata id and row: the row's index in
    /// `plain_json`, or `None` when its events are not plain instants.
    plain_rows: HashMap<(u32, usize), Option<usize>, FastHash>,
    /// The JSON every plain instant of a row starts with, and its fields' keys.
    plain_json: Vec<RowJson>,
    /// The ends the trace defines, when told its rows up front.
    ends: Option<Ends>,
    /// [`Converter::raw_begin`]'s answer by shared row.
    raw_begins: HashMap<usize, Option<RawBegin>, FastHash>,
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
    short_names: ShortNames,
    /// The process of each thread that wrote async-profiler buffers.
    poll_pids: HashMap<u64, u64>,
}

impl<W: Write> Converter<W> {
    fn new(w: W, trace: &TraceInfo) -> Result<Self> {
        let mut w = Writer::new(w);
        w.buf.extend_from_slice(b"{\"traceEvents\":[\n");
        Ok(Converter {
            w,
            open: HashMap::default(),
            interval_names: IntervalNames::default(),
            field_names: FieldNames::default(),
            qualified_names: QualifiedNames::default(),
            live_spans: HashMap::new(),
            plain_rows: HashMap::default(),
            plain_json: Vec::new(),
            ends: None,
            raw_begins: HashMap::default(),
            thread_names: HashMap::new(),
            process_names: HashMap::new(),
            summary: ChromeSummary::default(),
            default_pid: trace.process_id.unwrap_or(0),
            trace: trace.clone(),
            last_ticks: None,
            polls: Decoder::default(),
            facts: Vec::new(),
            frame_names: HashMap::new(),
            short_names: ShortNames::default(),
            poll_pids: HashMap::new(),
        })
    }

    /// Writes the poll spans and learns the frame names of the decoder's latest facts.
    fn write_facts(&mut self) -> Result<()> {
        let mut facts = std::mem::take(&mut self.facts);
        for fact in facts.drain(..) {
            match fact {
                Fact::Frame(id, frame) => {
                    let name = self.short_names.name(id, &frame.name);
                    self.frame_names.insert(id, name);
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
        // The name is the frame's short name (or `frame#N` before its AsyncFrame event):
        // the frame id is not repeated in args, the full name is the AsyncFrame instant's.
        let name = match self.frame_names.get(&span.frame) {
            Some(name) => name.clone(),
            None => span.frame.to_string(),
        };
        let start = ticks_to_ns(&self.trace, span.start);
        let end = ticks_to_ns(&self.trace, span.end);
        self.w.event(&JsonEvent {
            name: &name,
            // No category: a poll is known by its `ctx`.
            cat: None,
            ph: "X",
            ts: Some(Micros(start)),
            dur: Some(Duration { start, end }),
            pid: self
                .poll_pids
                .get(&span.thread)
                .copied()
                .unwrap_or(self.default_pid),
            tid: span.thread,
            args: PollArgs {
                ctx: Integer(span.ctx.0),
                ended: (span.ended != SpanEnd::Suspend).then(|| span.ended.as_str()),
                start_exact: (!span.start_exact).then_some(false),
            },
        })
    }

    fn instant<N: AsRef<str>>(
        &mut self,
        name: &str,
        cat: &str,
        ts: i64,
        pid: u64,
        tid: u64,
        args: &Payload<N>,
    ) -> Result<()> {
        self.summary.instants += 1;
        debug_assert!(name.starts_with(cat));
        self.refer(pid, cat, args);
        // What serde_json writes for `JsonEvent { name, cat: None, ph: "I", ts, dur: None,
        // pid, tid, args }`, written by hand: `Provider/EventName` (the provider is not
        // repeated as the category); upper-case `I`, since the DevTools trace engine knows
        // instants only by Chrome's own phase letter (Perfetto and chrome://tracing read
        // both); thread scoped, the format's default (no `s`).
        let w = &mut self.w;
        w.separator();
        let buf = &mut w.buf;
        buf.extend_from_slice(b"{\"name\":");
        json::string(buf, name);
        json::instant_times(buf, ts, pid, tid);
        match args {
            Payload::Fields(fields) if fields.is_empty() => {}
            Payload::Fields(fields) => {
                buf.extend_from_slice(b",\"args\":{");
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        buf.push(b',');
                    }
                    json::string(buf, name.as_ref());
                    buf.push(b':');
                    json::owned_value(buf, value);
                }
                buf.push(b'}');
            }
            Payload::Error(e) => {
                buf.extend_from_slice(b",\"args\":{\"decode_error\":");
                json::string(buf, e);
                buf.push(b'}');
            }
        }
        buf.push(b'}');
        w.written()
    }

    /// Notes that `args`, about to be written, name a live span as their `ParentSpanId`.
    fn refer<N: AsRef<str>>(&mut self, pid: u64, provider: &str, args: &Payload<N>) {
        // No live span (every trace without the tracing layer's): nothing to look up.
        if self.live_spans.is_empty() {
            return;
        }
        let Some(span) = args.field("ParentSpanId").and_then(Value::as_u64) else {
            return;
        };
        if span == 0 {
            return;
        }
        let key = SpanKey {
            pid,
            provider: provider.to_owned(),
            span,
        };
        if let Some(live) = self.live_spans.get_mut(&key) {
            live.referenced = true;
        }
    }

    /// A begin and its end as one complete event.
    fn slice<N: AsRef<str>>(
        &mut self,
        start: &Open,
        end: i64,
        cat: &str,
        stop: &Payload<N>,
        omit: Omit,
    ) -> Result<()> {
        self.summary.complete += 1;
        let decoded;
        let start_args = match &start.args {
            StartArgs::Decoded(args) => args,
            StartArgs::Raw { row, bytes } => {
                decoded = self.decode_raw(row, bytes);
                &decoded
            }
        };
        self.w.event(&JsonEvent {
            name: &start.label,
            cat: Some(cat),
            ph: "X",
            ts: Some(Micros(start.ts)),
            dur: Some(Duration {
                start: start.ts,
                end,
            }),
            pid: start.pid,
            tid: start.tid,
            args: SliceArgs {
                start: start_args,
                stop,
                named_by: start.named_by_field.then_some(&*start.label),
                omit,
            },
        })
    }

    /// A held span slice, with its `SpanId` unless `unnamed`.
    fn write_ended(&mut self, ended: &Ended, cat: &str, unnamed: bool) -> Result<()> {
        let omit = Omit {
            span_id: unnamed,
            parent: ended.omit_parent,
        };
        self.slice(&ended.open, ended.end, cat, &ended.stop, omit)
    }

    /// A Start that will never be closed.
    fn give_up(&mut self, o: &Open, cat: &str) -> Result<()> {
        self.summary.unmatched_starts += 1;
        match &o.args {
            StartArgs::Decoded(args) => self.instant(&o.qualified, cat, o.ts, o.pid, o.tid, args),
            StartArgs::Raw { row, bytes } => {
                self.raw_instant(&o.qualified, o.ts, o.pid, o.tid, row, bytes)
            }
        }
    }

    /// An instant of a payload held as bytes ([`StartArgs::Raw`]): what [`Converter::instant`]
    /// writes for it decoded, written as [`Converter::plain_event`] writes, from the bytes.
    fn raw_instant(
        &mut self,
        name: &str,
        ts: i64,
        pid: u64,
        tid: u64,
        row: &EventMetadata,
        bytes: &[u8],
    ) -> Result<()> {
        self.summary.instants += 1;
        let event = held_payload(&self.trace, row, bytes);
        let w = &mut self.w;
        w.separator();
        let buf = &mut w.buf;
        buf.extend_from_slice(b"{\"name\":");
        json::string(buf, name);
        json::instant_times(buf, ts, pid, tid);
        let mut args = json::Args::begin(buf);
        let decoded = event.for_each_field(|desc, value| args.field(buf, desc, value));
        args.end(buf, decoded);
        buf.push(b'}');
        w.written()
    }

    /// A held payload's bytes, decoded.
    fn decode_raw(&mut self, row: &EventMetadata, bytes: &[u8]) -> Payload<FieldName> {
        let event = held_payload(&self.trace, row, bytes);
        let payload = match event.decode_payload() {
            Ok(fields) => Payload::Fields(fields),
            Err(e) => Payload::Error(e.to_string()),
        };
        payload.into_owned(&mut self.field_names)
    }

    /// Holds `open` until its end comes; the oldest of its key's begins is given up when
    /// there are too many.
    fn open_begin(&mut self, key: Key, open: Open, cat: &str) -> Result<()> {
        let stack = self.open.entry(key).or_default();
        stack.push_back(open);
        if stack.len() > MAX_OPEN_PER_KEY {
            if let Some(oldest) = stack.pop_front() {
                self.give_up(&oldest, cat)?;
            }
        }
        Ok(())
    }

    /// Row `row`'s [`RawBegin`], if its begins are held as bytes; decided once a row.
    fn raw_begin(&mut self, row: &Arc<EventMetadata>) -> Option<&RawBegin> {
        // Keyed by the shared row's address: [`HeldInOrder`] keeps every row it shares
        // for the whole conversion, so no other row can take the address.
        let key = Arc::as_ptr(row) as usize;
        let names = &mut self.interval_names;
        self.raw_begins
            .entry(key)
            .or_insert_with(|| RawBegin::of(row, names))
            .as_ref()
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
            pid,
            tid,
            args: NameArg { name },
        })
    }

    /// A tracing-layer span's `SpanNew` or `SpanClose`: held, folded or written.
    fn span_lifecycle(
        &mut self,
        event: &Event<'_>,
        which: Lifecycle,
        ts: i64,
        pid: u64,
        tid: u64,
        payload: Payload<&str>,
    ) -> Result<()> {
        let provider = &event.metadata.provider;
        match which {
            Lifecycle::New(span) => {
                if self.live_spans.len() >= MAX_LIVE_SPANS {
                    return self.instant(&event.qualified_name(), provider, ts, pid, tid, &payload);
                }
                let key = SpanKey {
                    pid,
                    provider: provider.clone(),
                    span,
                };
                let live = LiveSpan {
                    ts,
                    tid,
                    qualified: event.qualified_name(),
                    new: payload.into_owned(&mut self.field_names),
                    entered: 0,
                    ended: None,
                    referenced: false,
                };
                // A reused id whose close was lost: the earlier span's slice and creation
                // are facts of their own.
                if let Some(earlier) = self.live_spans.insert(key, live) {
                    if let Some(ended) = &earlier.ended {
                        self.write_ended(ended, provider, false)?;
                    }
                    self.instant(
                        &earlier.qualified,
                        provider,
                        earlier.ts,
                        pid,
                        earlier.tid,
                        &earlier.new,
                    )?;
                }
                Ok(())
            }
            Lifecycle::Close(span) => {
                let key = SpanKey {
                    pid,
                    provider: provider.clone(),
                    span,
                };
                match self.live_spans.remove(&key) {
                    // Created, entered once, exited, closed: the slice says it all, and names
                    // the span by its id only if something written refers to it.
                    Some(live) if live.entered == 1 => {
                        self.summary.folded_span_events += 2;
                        match &live.ended {
                            Some(ended) => self.write_ended(ended, provider, !live.referenced),
                            None => Ok(()),
                        }
                    }
                    // Never entered, or entered several times (an async span): its
                    // lifetime is not one slice, so its creation and close are written.
                    Some(live) => {
                        self.instant(&live.qualified, provider, live.ts, pid, live.tid, &live.new)?;
                        self.instant(&event.qualified_name(), provider, ts, pid, tid, &payload)
                    }
                    None => self.instant(&event.qualified_name(), provider, ts, pid, tid, &payload),
                }
            }
        }
    }

    /// A plain instant ([`Converter::plain_instant`]), written straight from its borrowed
    /// fields.
    fn plain_event(&mut self, event: &EventRef<'_>, row: usize) -> Result<()> {
        self.summary.events += 1;
        let pid = event.process_id().unwrap_or(self.default_pid);
        let tid = event.thread_id();
        let ticks = event.header().timestamp;
        let ts = ticks_to_ns(&self.trace, ticks);
        self.last_ticks = Some(self.last_ticks.map_or(ticks, |t| t.max(ticks)));
        if let Some(name) = event.thread_name() {
            self.thread_name(pid, tid, name)?;
        }
        self.summary.instants += 1;
        let row = &self.plain_json[row];
        self.summary.unmatched_starts += u64::from(row.endless_begins);
        let w = &mut self.w;
        w.separator();
        let buf = &mut w.buf;
        buf.extend_from_slice(&row.head);
        json::instant_times(buf, ts, pid, tid);
        let mut args = json::Args::begin(buf);
        let mut at = 0;
        let decoded = event.for_each_field(|desc, value| {
            match row.keys.get(at) {
                Some(key) => args.field_with_key(buf, key, value),
                None => args.field(buf, desc, value),
            }
            at += 1;
        });
        args.end(buf, decoded);
        buf.push(b'}');
        w.written()
    }

    /// Whether every event of `md` (metadata row `id`) is an instant whose payload the
    /// converter does not look into: not the async profiler's, not one naming a thread or
    /// process, not a span's lifecycle, no begin or end, and no `ParentSpanId` (which may
    /// name a span). Decided once a row.
    fn plain_instant(&mut self, id: u32, md: &EventMetadata) -> Option<usize> {
        let key = (id, md as *const EventMetadata as usize);
        if let Some(&plain) = self.plain_rows.get(&key) {
            return plain;
        }
        // A begin that can never end is an instant from the start.
        let endless = self.ends.as_ref().is_some_and(|ends| {
            RawBegin::of(md, &mut self.interval_names).is_some() && ends.never_end(md)
        });
        let plain = (Self::plain_row(md) || endless).then(|| {
            let mut row = RowJson::of(md);
            row.endless_begins = endless;
            self.plain_json.push(row);
            self.plain_json.len() - 1
        });
        self.plain_rows.insert(key, plain);
        plain
    }

    fn plain_row(md: &EventMetadata) -> bool {
        let names = match md.provider.as_str() {
            RUNDOWN_PROVIDER => md.display_name == "Thread" || md.event_name == "Thread",
            "Microsoft-DotNETCore-EventPipe" => md.display_name == "ProcessInfo",
            "Universal.System" => {
                md.display_name == "ExistingProcess" || md.display_name == "ProcessCreate"
            }
            crate::async_trace::PROVIDER => true,
            _ => false,
        };
        let lifecycle = md.opcode.unwrap_or(0) == 0
            && (md.event_name == "SpanNew" || md.event_name == "SpanClose");
        let refers = md.fields.iter().any(|f| f.name == "ParentSpanId");
        !names
            && !lifecycle
            && !refers
            && intervals::pair_rule(&md.provider, &md.display_name).is_none()
            && !matches!(intervals::opcode(md), 1 | 2)
    }

    /// Takes one held event; `row` is its metadata, shared.
    fn event(&mut self, event: &Event<'_>, row: &Arc<EventMetadata>) -> Result<()> {
        self.summary.events += 1;
        let md = event.metadata;
        let pid = event.process_id().unwrap_or(self.default_pid);
        let tid = event.thread_id();
        let ticks = event.header.timestamp;
        let ts = ticks_to_ns(&self.trace, ticks);
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
        if let Some(begin) = self.raw_begin(row) {
            let key = Key {
                pid,
                tid,
                name: begin.name,
            };
            let open = Open {
                ts,
                pid,
                tid,
                qualified: Rc::clone(&begin.qualified),
                label: Rc::clone(&begin.label),
                named_by_field: false,
                same: None,
                span: None,
                args: StartArgs::Raw {
                    row: Arc::clone(row),
                    bytes: event.payload.into(),
                },
            };
            return self.open_begin(key, open, &md.provider);
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

        if let Some(which) = lifecycle(event, &payload) {
            return self.span_lifecycle(event, which, ts, pid, tid, payload);
        }

        let (base, is_begin, label, named_by_field, same_field) = match role(event, &payload) {
            Role::Instant => {
                return self.instant(
                    &event.qualified_name(),
                    &md.provider,
                    ts,
                    pid,
                    tid,
                    &payload,
                )
            }
            Role::Begin {
                base,
                label,
                named_by_field,
                same,
            } => (base, true, label, named_by_field, same),
            Role::End { base, same } => (base, false, String::new(), false, same),
        };
        let key = Key {
            pid,
            tid,
            name: self.interval_names.id(&md.provider, base),
        };
        let same = same_field.and_then(|f| payload.field(f)).cloned();
        if is_begin {
            let span = payload.field("SpanId").and_then(Value::as_u64);
            let span_key = span.map(|span| SpanKey {
                pid,
                provider: md.provider.clone(),
                span,
            });
            let live = span_key.as_ref().and_then(|k| self.live_spans.get_mut(k));
            let mut again = None;
            let args = match live {
                Some(live) => {
                    live.entered = live.entered.saturating_add(1);
                    // Entered again: its first slice is one of several, named by its id.
                    again = live.ended.take();
                    span_slice_args(Some(live), payload.into_owned(&mut self.field_names))
                }
                None => payload.into_owned(&mut self.field_names),
            };
            if let Some(ended) = again {
                self.write_ended(&ended, &md.provider, false)?;
            }
            let open = Open {
                ts,
                pid,
                tid,
                qualified: self.qualified_names.get(md),
                label: Rc::from(label),
                named_by_field,
                same,
                span,
                args: StartArgs::Decoded(args),
            };
            return self.open_begin(key, open, &md.provider);
        }
        let start = match self.open.get_mut(&key) {
            Some(stack) => {
                // The innermost open begin; for a rule with a `same` field, the innermost
                // one carrying the end's value.
                let at = match same_field {
                    None => stack.len().checked_sub(1),
                    Some(_) => stack.iter().rposition(|o| same.is_some() && o.same == same),
                };
                let start = at.and_then(|i| stack.remove(i));
                // The innermost begin still open around it.
                let around = stack.back().and_then(|o| o.span);
                if stack.is_empty() {
                    self.open.remove(&key);
                }
                start.map(|s| (s, around))
            }
            None => None,
        };
        match start {
            Some((start, around)) => {
                // A span's parent that is the span around it on its thread is shown by the
                // nesting.
                let parent = start.args.field("ParentSpanId").and_then(Value::as_u64);
                let omit_parent = start.span.is_some() && parent.is_some() && parent == around;
                if let (false, StartArgs::Decoded(args)) = (omit_parent, &start.args) {
                    self.refer(start.pid, &md.provider, args);
                }
                let live = start.span.and_then(|span| {
                    self.live_spans.get_mut(&SpanKey {
                        pid: start.pid,
                        provider: md.provider.clone(),
                        span,
                    })
                });
                match live {
                    Some(live) if live.entered == 1 && live.ended.is_none() => {
                        live.ended = Some(Ended {
                            open: start,
                            end: ts,
                            stop: payload.into_owned(&mut self.field_names),
                            omit_parent,
                        });
                        Ok(())
                    }
                    _ => {
                        let omit = Omit {
                            span_id: false,
                            parent: omit_parent,
                        };
                        self.slice(&start, ts, &md.provider, &payload, omit)
                    }
                }
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

    /// Writes the starts never closed and the spans never closed (in time order), and the
    /// end of the document.
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
        let mut left: Vec<(u32, Open)> = self
            .open
            .drain()
            .flat_map(|(key, stack)| stack.into_iter().map(move |o| (key.name, o)))
            .collect();
        left.sort_by_key(|(_, o)| o.ts);
        let names = std::mem::take(&mut self.interval_names);
        for (name, open) in left {
            self.give_up(&open, names.provider(name))?;
        }
        let mut live: Vec<(SpanKey, LiveSpan)> = self.live_spans.drain().collect();
        live.sort_by_key(|(_, l)| l.ts);
        for (key, span) in live {
            // Never closed: its slice keeps its id, as its creation does.
            if let Some(ended) = &span.ended {
                self.write_ended(ended, &key.provider, false)?;
            }
            self.instant(
                &span.qualified,
                &key.provider,
                span.ts,
                key.pid,
                span.tid,
                &span.new,
            )?;
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
        let mut w = self.w;
        w.buf
            .extend_from_slice(b"\n],\"displayTimeUnit\":\"ms\",\"otherData\":");
        serde_json::to_writer(&mut w.buf, &other)?;
        w.buf.extend_from_slice(b"}\n");
        w.finish()?;
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
    convert(reader, w, None)
}

/// [`write_chrome_trace`], told every metadata row of the trace first
/// ([`nettrace::scan_metadata`] of a trace in memory): a begin that no row of the trace can
/// end is then written as an instant at once, where it would otherwise be held until given
/// up. The same events, in another order in the array.
///
/// # Errors
/// As [`write_chrome_trace`].
pub fn write_chrome_trace_knowing_rows<I: Input, W: Write>(
    reader: &mut TraceReader<I>,
    w: W,
    rows: &[EventMetadata],
) -> Result<ChromeSummary> {
    convert(reader, w, Some(Ends::of(rows)))
}

fn convert<I: Input, W: Write>(
    reader: &mut TraceReader<I>,
    w: W,
    ends: Option<Ends>,
) -> Result<ChromeSummary> {
    let trace = reader.trace().clone();
    let mut conv = Converter::new(w, &trace)?;
    conv.ends = ends;
    let mut held = HeldInOrder::default();
    let mut sequence_points = reader.stats().sequence_points;
    let error = loop {
        let event = match reader.next_event_ref() {
            Ok(Some(event)) => event,
            Ok(None) => break None,
            Err(e) => break Some(e),
        };
        let header = *event.header();
        if let Some(row) = conv.plain_instant(header.metadata_id, event.metadata()) {
            conv.plain_event(&event, row)?;
        } else {
            held.hold(&event);
        }
        let passed = reader.stats().sequence_points;
        if passed != sequence_points {
            // Everything before a sequence point is older than everything after it.
            sequence_points = passed;
            held.release(&mut conv, &trace, None)?;
        } else if header.is_sorted {
            held.release(&mut conv, &trace, Some(header.timestamp))?;
        }
    };
    held.release(&mut conv, &trace, None)?;
    let summary = conv.finish(&trace, reader.stats().lost_events, error.as_ref())?;
    match error {
        Some(e) => Err(e.into()),
        None => Ok(summary),
    }
}

/// The events the converter pairs or relates (begins and ends, span lifecycles, async
/// buffers, thread names: all but the plain instants), held and handed to it in timestamp
/// order ([`TimeOrder`]): a span may begin on one thread and end on another. Plain instants
/// go straight through: their order in the output does not matter.
#[derive(Default)]
struct HeldInOrder {
    events: TimeOrder<OwnedEvent>,
    /// Each metadata row shared once, by id and where the reader keeps it.
    metadata: HashMap<(u32, usize), Arc<EventMetadata>>,
}

impl HeldInOrder {
    fn hold(&mut self, event: &EventRef<'_>) {
        let md = event.metadata();
        let key = (
            event.header().metadata_id,
            md as *const EventMetadata as usize,
        );
        let shared = self
            .metadata
            .entry(key)
            .or_insert_with(|| Arc::new(md.clone()));
        // Everything but the stack, which no view of the timeline shows.
        let owned = OwnedEvent {
            header: *event.header(),
            metadata: Arc::clone(shared),
            payload: event.payload().to_vec(),
            stack: None,
            thread: event.thread().cloned(),
            capture_thread: event.capture_thread().cloned(),
            labels: event.labels().map(<[nettrace::Label]>::to_vec),
            offset: event.offset(),
        };
        self.events.hold(owned.header.timestamp, owned);
    }

    /// Hands the events stamped at or before `bound` (all when `None`) to `conv`.
    fn release<W: Write>(
        &mut self,
        conv: &mut Converter<W>,
        trace: &TraceInfo,
        bound: Option<i64>,
    ) -> Result<()> {
        self.events
            .release(bound)
            .try_for_each(|e| conv.event(&e.as_event(trace), &e.metadata))
    }
}

/// JSON written by hand for the plain instants, the bulk of most traces: byte for byte
/// what serde_json writes for the same values through [`JsonEvent`] and [`crate::json::Json`]
/// (numbers through its own formatter; strings with nothing to escape copied as they are,
/// any other through its escaper; rare value types through [`crate::json::Json`] itself).
mod json {
    use nettrace::{EventMetadata, FieldDesc, Value, ValueRef};
    use serde_json::ser::{CompactFormatter, Formatter};

    use super::{json_value, Micros, MAX_SAFE_INTEGER};

    /// Whether `byte` goes into a JSON string as it is (serde_json escapes `"`, `\\` and
    /// control characters; everything else, non-ASCII included, is copied).
    fn plain(byte: u8) -> bool {
        byte >= 0x20 && byte != b'"' && byte != b'\\'
    }

    /// Writes `text` as a JSON string.
    pub(super) fn string(buf: &mut Vec<u8>, text: &str) {
        if text.bytes().all(plain) {
            buf.push(b'"');
            buf.extend_from_slice(text.as_bytes());
            buf.push(b'"');
        } else {
            let _ = serde_json::to_writer(buf, text);
        }
    }

    /// `Provider/EventName` as a JSON string, without building it first.
    pub(super) fn qualified_name(buf: &mut Vec<u8>, md: &EventMetadata) {
        let (provider, event) = (md.provider.as_bytes(), md.display_name.as_bytes());
        if provider.iter().chain(event).copied().all(plain) {
            buf.push(b'"');
            buf.extend_from_slice(provider);
            buf.push(b'/');
            buf.extend_from_slice(event);
            buf.push(b'"');
        } else {
            string(buf, &md.qualified_name());
        }
    }

    /// Writes `,"args":{...}` from the fields a payload's decoder visits: nothing when it
    /// has none, the error's text instead when it does not decode.
    pub(super) struct Args {
        at: usize,
        first: bool,
    }

    impl Args {
        pub(super) fn begin(buf: &mut Vec<u8>) -> Args {
            let at = buf.len();
            buf.extend_from_slice(b",\"args\":{");
            Args { at, first: true }
        }

        pub(super) fn field(&mut self, buf: &mut Vec<u8>, desc: &FieldDesc, value: ValueRef<'_>) {
            if !std::mem::take(&mut self.first) {
                buf.push(b',');
            }
            string(buf, &desc.name);
            buf.push(b':');
            super::json::value(buf, value);
        }

        /// A field whose key, `"Name":`, is written already.
        pub(super) fn field_with_key(
            &mut self,
            buf: &mut Vec<u8>,
            key: &[u8],
            value: ValueRef<'_>,
        ) {
            if !std::mem::take(&mut self.first) {
                buf.push(b',');
            }
            buf.extend_from_slice(key);
            super::json::value(buf, value);
        }

        pub(super) fn end(self, buf: &mut Vec<u8>, decoded: nettrace::Result<usize>) {
            match decoded {
                Ok(0) => buf.truncate(self.at),
                Ok(_) => buf.push(b'}'),
                Err(e) => {
                    buf.truncate(self.at);
                    buf.extend_from_slice(b",\"args\":{\"decode_error\":");
                    string(buf, &e.to_string());
                    buf.push(b'}');
                }
            }
        }
    }

    fn unsigned(buf: &mut Vec<u8>, n: u64) {
        buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    }

    /// An instant's fields after its name: `"ph":"I"`, `ts`, `pid` and `tid`.
    pub(super) fn instant_times(buf: &mut Vec<u8>, ts: i64, pid: u64, tid: u64) {
        buf.extend_from_slice(b",\"ph\":\"I\",\"ts\":");
        micros(buf, ts);
        buf.extend_from_slice(b",\"pid\":");
        unsigned(buf, pid);
        buf.extend_from_slice(b",\"tid\":");
        unsigned(buf, tid);
    }

    /// A GUID as its text, quoted (what `collect_str` makes of it).
    fn guid(buf: &mut Vec<u8>, guid: &nettrace::Guid) {
        let b = &guid.0;
        buf.push(b'"');
        hex(buf, u32::from_le_bytes([b[0], b[1], b[2], b[3]]).into(), 8);
        buf.push(b'-');
        hex(buf, u16::from_le_bytes([b[4], b[5]]).into(), 4);
        buf.push(b'-');
        hex(buf, u16::from_le_bytes([b[6], b[7]]).into(), 4);
        buf.push(b'-');
        for (i, byte) in b[8..].iter().enumerate() {
            if i == 2 {
                buf.push(b'-');
            }
            hex(buf, u64::from(*byte), 2);
        }
        buf.push(b'"');
    }

    /// A pointer as its text, `"0x…"` (lower-case hex, no leading zeros).
    fn pointer(buf: &mut Vec<u8>, p: u64) {
        buf.extend_from_slice(b"\"0x");
        hex(buf, p, (16 - p.leading_zeros() as usize / 4).max(1));
        buf.push(b'"');
    }

    /// `digits` lower-case hex digits of `value`, zero-padded.
    fn hex(buf: &mut Vec<u8>, value: u64, digits: usize) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for i in (0..digits).rev() {
            buf.push(HEX[(value >> (i * 4)) as usize & 0xf]);
        }
    }

    /// An owned payload value as [`crate::json::Json`] writes it.
    pub(super) fn owned_value(buf: &mut Vec<u8>, value: &Value) {
        let mut number = itoa::Buffer::new();
        let digits = match *value {
            Value::I8(n) => number.format(n),
            Value::U8(n) => number.format(n),
            Value::I16(n) => number.format(n),
            Value::U16(n) => number.format(n),
            Value::I32(n) => number.format(n),
            Value::U32(n) => number.format(n),
            Value::I64(n) if n.unsigned_abs() <= MAX_SAFE_INTEGER => number.format(n),
            Value::U64(n) if n <= MAX_SAFE_INTEGER => number.format(n),
            Value::Bool(b) => {
                if b {
                    "true"
                } else {
                    "false"
                }
            }
            Value::F64(x) if x.is_finite() => {
                let _ = CompactFormatter.write_f64(buf, x);
                return;
            }
            Value::String(ref text) => return string(buf, text),
            Value::Guid(ref g) => return guid(buf, g),
            Value::Pointer(p) => return pointer(buf, p),
            _ => {
                let _ = serde_json::to_writer(buf, &json_value(value));
                return;
            }
        };
        buf.extend_from_slice(digits.as_bytes());
    }

    /// A time in nanoseconds as [`Micros`] writes it.
    pub(super) fn micros(buf: &mut Vec<u8>, ns: i64) {
        // Below 10^15 ns, `ns / 1000` has at most 15 significant digits, so it is the
        // shortest decimal that reads back as the double nearest to it: what serde_json's
        // formatter (Ryū) writes for `ns as f64 / 1000.0`, here with no float arithmetic.
        // Its style: `1.0` for whole numbers, no exponent below 10^16.
        const EXACT_BELOW: u64 = 1_000_000_000_000_000;
        let magnitude = ns.unsigned_abs();
        if magnitude < EXACT_BELOW {
            if ns < 0 {
                buf.push(b'-');
            }
            buf.extend_from_slice(itoa::Buffer::new().format(magnitude / 1000).as_bytes());
            let thousandths = (magnitude % 1000) as usize;
            let digits = [
                b'0' + (thousandths / 100) as u8,
                b'0' + (thousandths / 10 % 10) as u8,
                b'0' + (thousandths % 10) as u8,
            ];
            let kept = 3 - digits.iter().rev().take_while(|&&d| d == b'0').count();
            buf.push(b'.');
            buf.extend_from_slice(&digits[..kept.max(1)]);
            return;
        }
        if magnitude <= MAX_SAFE_INTEGER {
            let _ = CompactFormatter.write_f64(buf, ns as f64 / 1000.0);
        } else {
            let _ = serde_json::to_writer(buf, &Micros(ns));
        }
    }

    /// A payload value as [`crate::json::Json`] writes its owned form.
    pub(super) fn value(buf: &mut Vec<u8>, value: ValueRef<'_>) {
        let mut number = itoa::Buffer::new();
        let digits = match value {
            ValueRef::I8(n) => number.format(n),
            ValueRef::U8(n) => number.format(n),
            ValueRef::I16(n) => number.format(n),
            ValueRef::U16(n) => number.format(n),
            ValueRef::I32(n) => number.format(n),
            ValueRef::U32(n) => number.format(n),
            ValueRef::I64(n) if n.unsigned_abs() <= MAX_SAFE_INTEGER => number.format(n),
            ValueRef::U64(n) if n <= MAX_SAFE_INTEGER => number.format(n),
            ValueRef::Bool(b) => {
                if b {
                    "true"
                } else {
                    "false"
                }
            }
            ValueRef::F64(x) if x.is_finite() => {
                let _ = CompactFormatter.write_f64(buf, x);
                return;
            }
            ValueRef::Guid(g) => return guid(buf, &g),
            ValueRef::Pointer(p) => return pointer(buf, p),
            ValueRef::Utf16(s) => {
                let bytes = s.as_bytes();
                // Plain ASCII, the usual case, is its own UTF-8.
                if bytes.len() % 2 == 0
                    && bytes
                        .chunks_exact(2)
                        .all(|u| u[1] == 0 && u[0] < 0x80 && plain(u[0]))
                {
                    buf.push(b'"');
                    buf.extend(bytes.chunks_exact(2).map(|u| u[0]));
                    buf.push(b'"');
                } else {
                    string(buf, &s.to_string_lossy());
                }
                return;
            }
            other => {
                let owned: Value = other.to_value();
                let _ = serde_json::to_writer(buf, &json_value(&owned));
                return;
            }
        };
        buf.extend_from_slice(digits.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nettrace::ValueRef;

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
    fn short_names_keep_frames_apart() {
        let mut names = ShortNames::default();
        let mut name = |id: u32, full: &str| names.name(AsyncFrameId(id), full);
        assert_eq!(name(1, "app::server::handle"), "handle");
        // Seen again: the same short name.
        assert_eq!(name(1, "app::server::handle"), "handle");
        assert_eq!(name(2, "app::client::handle"), "client::handle");
        assert_eq!(name(3, "<app::Conn as tower::Service>::call"), "call");
        assert_eq!(name(4, "GET /users"), "GET /users");
        // Every suffix taken by other frames.
        assert_eq!(name(5, "client::handle"), "client::handle (frame#5)");
        assert_eq!(name(6, "handle"), "handle (frame#6)");
    }

    fn dur(start: i64, end: i64) -> String {
        serde_json::to_string(&Duration { start, end }).unwrap()
    }

    #[test]
    fn durations_add_up_to_the_written_end_with_the_fewest_digits() {
        assert_eq!(dur(1_000, 2_500), "1.5");
        assert_eq!(dur(13_720_846, 13_770_694), "49.848");
        // 2004.698 + 40.275 is not 2044.973 in doubles: more digits, as few as add up.
        let text = dur(2_004_698, 2_044_973);
        assert_eq!(text, "40.2749999999999");
        let d: f64 = text.parse().unwrap();
        assert_eq!(2004.698 + d, 2044.973);
        assert_eq!(2004.698 + 40.275, 2044.9730000000002);
    }

    /// `json::micros` writes what serde_json writes for the same time as a double, across
    /// the digit counts, the signs, trailing zeros and the edge of its integer path.
    #[test]
    fn micros_are_what_serde_json_writes_for_the_double() {
        let mut times: Vec<i64> = vec![
            0,
            1,
            -1,
            5,
            50,
            500,
            1_000,
            1_050,
            -1_500,
            13_720_846,
            999_999_999_999_999,
            -999_999_999_999_999,
            1_000_000_000_000_000,
            MAX_SAFE_INTEGER as i64,
            i64::MAX,
            i64::MIN,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Every magnitude from 1 to 10^18, both signs.
            let digits = x % 19;
            let value = (x >> 8) % 10u64.pow(digits as u32).max(1);
            times.push(if x & 1 == 0 {
                value as i64
            } else {
                -(value as i64)
            });
        }
        for ns in times {
            let mut ours = Vec::new();
            json::micros(&mut ours, ns);
            let expected = serde_json::to_string(&Micros(ns)).unwrap();
            assert_eq!(String::from_utf8(ours).unwrap(), expected, "{ns} ns");
        }
    }

    fn json(v: Value) -> String {
        serde_json::to_string(&json_value(&v)).unwrap()
    }

    #[test]
    fn values_map_to_json_types() {
        assert_eq!(json(Value::F32(0.1)), "0.1");
        assert_eq!(json(Value::F64(f64::NAN)), r#""NaN""#);
        assert_eq!(json(Value::F64(f64::NEG_INFINITY)), r#""-inf""#);
        // Beyond 2^53 - 1 JavaScript rounds: such integers are strings.
        assert_eq!(json(Value::U64(u64::MAX)), r#""18446744073709551615""#);
        assert_eq!(json(Value::U64(MAX_SAFE_INTEGER)), "9007199254740991");
        assert_eq!(json(Value::I64(-(1 << 53))), r#""-9007199254740992""#);
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

    #[test]
    fn hand_written_json_is_what_serde_json_writes() {
        let mut values = vec![
            Value::Bool(true),
            Value::Bool(false),
            Value::I8(-128),
            Value::U8(255),
            Value::I16(-300),
            Value::U16(65535),
            Value::I32(i32::MIN),
            Value::U32(u32::MAX),
            Value::I64(i64::MIN),
            Value::I64(-(1 << 53) + 1),
            Value::U64(MAX_SAFE_INTEGER + 1),
            Value::U64(42),
            Value::F32(0.1),
            Value::F64(0.1),
            Value::F64(1e300),
            Value::F64(-0.0),
            Value::F64(252045.0),
            Value::F64(f64::NAN),
            Value::Char('x'),
            Value::String("plain /v2/orders".into()),
            Value::String("quote \" back \\ tab \t ctl \u{1} del \u{7f} é 😀".into()),
            Value::String(String::new()),
            Value::Guid(nettrace::Guid([
                0xa5, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9, 0xa, 0xb, 0xc, 0xd, 0xe, 0xff,
            ])),
            Value::Pointer(0),
            Value::Pointer(0x7fff_1234_abcd),
            Value::Pointer(u64::MAX),
            Value::Bytes(vec![0, 0xfe]),
            Value::Array(vec![Value::U8(1)]),
        ];
        values.extend(
            (0..2000u64).map(|i| Value::F64(f64::from_bits(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))),
        );
        for value in &values {
            let mut buf = Vec::new();
            json::owned_value(&mut buf, value);
            assert_eq!(
                String::from_utf8(buf).unwrap(),
                json(value.clone()),
                "{value:?}"
            );
        }
        let borrowed = [
            ValueRef::Bool(true),
            ValueRef::I8(-1),
            ValueRef::U16(7),
            ValueRef::I64(i64::MAX),
            ValueRef::U64(MAX_SAFE_INTEGER),
            ValueRef::F64(87281.5),
            ValueRef::F64(f64::INFINITY),
            ValueRef::Pointer(0xdead),
            ValueRef::Guid(nettrace::Guid([7; 16])),
            ValueRef::Str8(b"a\"b"),
            ValueRef::Bytes(&[1, 2]),
        ];
        for value in borrowed {
            let mut buf = Vec::new();
            json::value(&mut buf, value);
            assert_eq!(
                String::from_utf8(buf).unwrap(),
                json(value.to_value()),
                "{value:?}"
            );
        }
        for text in ["Bench-Provider/Counter", "a\"b", "tab\t", "é"] {
            let mut buf = Vec::new();
            json::string(&mut buf, text);
            assert_eq!(
                String::from_utf8(buf).unwrap(),
                serde_json::to_string(text).unwrap()
            );
        }
        for ns in [
            0,
            1,
            999,
            1_000_001,
            -5,
            MAX_SAFE_INTEGER as i64 + 1,
            i64::MIN,
        ] {
            let mut buf = Vec::new();
            json::instant_times(&mut buf, ns, 1, u64::MAX);
            let expected = format!(
                ",\"ph\":\"I\",\"ts\":{},\"pid\":1,\"tid\":{}",
                serde_json::to_string(&Micros(ns)).unwrap(),
                u64::MAX
            );
            assert_eq!(String::from_utf8(buf).unwrap(), expected);
        }
    }
}
