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
use eventpipe_symbols::RUNDOWN_PROVIDER;

mod json;
mod names;
mod pairs;
mod polls;
mod spans;
#[cfg(test)]
mod tests;

use json::{EventArgs, JsonEvent, NameArg, Omit, Payload};
use names::{program_name, FieldNames, IntervalNames, QualifiedNames, ShortNames};
use pairs::{lifecycle, role, Ended, Ends, Key, Open, RawBegin, RowJson, StartArgs};
use spans::{span_slice_args, LiveSpan, SpanKey};

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

/// Nanoseconds from the trace's start (its sync time) to `ticks`, exactly.
fn ticks_to_ns(trace: &TraceInfo, ticks: i64) -> i64 {
    if trace.tick_frequency <= 0 {
        return 0;
    }
    let delta = i128::from(ticks) - i128::from(trace.sync_time_ticks);
    let ns = delta * 1_000_000_000 / i128::from(trace.tick_frequency);
    i64::try_from(ns).unwrap_or(if ns < 0 { i64::MIN } else { i64::MAX })
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
                Fact::Reference(_)
                | Fact::Created { .. }
                | Fact::Dropped { .. }
                | Fact::Woken { .. } => {}
            }
        }
        self.facts = facts;
        Ok(())
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
