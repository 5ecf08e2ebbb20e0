//! The decoded async-profiler data of a trace: frames, contexts, poll spans, diagnostics,
//! and the queries the profile builder, `report` and the Chrome converter ask of it.
//!
//! Timestamps are ticks of the trace's own clock (`i64`, like every event header's), so
//! spans place directly on the trace's timeline; durations are unsigned ticks, converted
//! with [`AsyncTrace::ticks_to_ms`].

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use super::records::RecordError;

pub use super::ids::{AsyncFrameId, ContextId};

/// What an `AsyncFrame` event says about a site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncFrame {
    /// The function's path (`my_crate::server::handle`) or the name given to `.profiled`.
    pub name: String,
    /// The source file, when the event names one.
    pub file: Option<String>,
    /// The source line, when nonzero.
    pub line: Option<u32>,
}

/// The `AsyncProfilerMetadata` event: how buffered ticks map to wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockReference {
    /// The format version the writer speaks (1).
    pub version: u32,
    /// A timestamp in the trace's clock...
    pub reference_timestamp: u64,
    /// ...ticks per second...
    pub timestamp_frequency: u64,
    /// ...and the wall-clock time at `reference_timestamp`, in nanoseconds since the Unix
    /// epoch.
    pub reference_utc_unix_nanos: i64,
}

impl ClockReference {
    /// Nanoseconds since the Unix epoch at tick `ts`; `None` with a zero frequency.
    pub fn to_unix_nanos(&self, ts: i64) -> Option<i128> {
        if self.timestamp_frequency == 0 {
            return None;
        }
        let delta = i128::from(ts) - i128::from(self.reference_timestamp);
        Some(
            i128::from(self.reference_utc_unix_nanos)
                + delta * 1_000_000_000 / i128::from(self.timestamp_frequency),
        )
    }
}

/// How a poll span ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpanEnd {
    /// The poll returned `Pending`.
    Suspend,
    /// The poll returned `Ready`; its context is done.
    Complete,
    /// The poll panicked; its context is done.
    Unwind,
    /// The records that ended it were lost (a sequence gap, a malformed buffer, or a Stack
    /// record that no longer lists it); `end` is the last time it was known open.
    Lost,
    /// Still open when the trace ended; `end` is the trace's last timestamp.
    OpenAtEnd,
}

impl SpanEnd {
    /// A short lowercase name (`suspend`, `complete`, `unwind`, `lost`, `open at end`).
    pub fn as_str(self) -> &'static str {
        match self {
            SpanEnd::Suspend => "suspend",
            SpanEnd::Complete => "complete",
            SpanEnd::Unwind => "unwind",
            SpanEnd::Lost => "lost",
            SpanEnd::OpenAtEnd => "open at end",
        }
    }
}

/// An interned async callstack (see [`AsyncTrace::callstack`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AsyncStackId(pub(crate) usize);

/// One poll: from a Resume (or a Stack record listing it) to the record that ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollSpan {
    /// The OS thread it ran on.
    pub thread: u64,
    /// The context polled.
    pub ctx: ContextId,
    /// Its frame.
    pub frame: AsyncFrameId,
    /// When it began (ticks).
    pub start: i64,
    /// When it ended (ticks); see [`SpanEnd`] for the inexact cases.
    pub end: i64,
    /// False when the span was first seen in a Stack record after lost data: its Resume
    /// was not seen, so it began at or before `start`.
    pub start_exact: bool,
    /// How it ended.
    pub ended: SpanEnd,
    /// The poll stack while it ran, this poll innermost.
    pub stack: AsyncStackId,
    /// Its place on the poll stack: 0 for a task's outermost poll.
    pub depth: usize,
}

impl PollSpan {
    /// `end - start`, never negative.
    pub fn duration_ticks(&self) -> u64 {
        i128::from(self.end)
            .saturating_sub(i128::from(self.start))
            .clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// How a context ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextEnd {
    /// Not ended by the end of the trace.
    Pending,
    /// A poll returned `Ready`, at this tick.
    Complete(i64),
    /// A poll panicked, at this tick.
    Unwind(i64),
    /// Dropped before completing (cancelled), at this tick.
    Drop(i64),
}

impl ContextEnd {
    /// When it ended, if it did.
    pub fn time(self) -> Option<i64> {
        match self {
            ContextEnd::Pending => None,
            ContextEnd::Complete(t) | ContextEnd::Unwind(t) | ContextEnd::Drop(t) => Some(t),
        }
    }
}

/// One instrumented future instance, from everything the records say about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// Its id.
    pub id: ContextId,
    /// Its frame, from its Create, a poll, or a Stack record (`None` if only its Drop was
    /// seen).
    pub frame: Option<AsyncFrameId>,
    /// The context whose poll created it, per its Create record.
    pub parent: Option<ContextId>,
    /// When it was created, if its Create record was seen. A context is a root only when
    /// this is known and `parent` is `None`: a missing Create says nothing of its parent.
    pub created_at: Option<i64>,
    /// The start of its first poll seen.
    pub first_resume: Option<i64>,
    /// How it ended.
    pub end: ContextEnd,
    /// Polls seen.
    pub polls: u64,
    /// The sum of its polls' durations (nested polls included: they run inside it).
    pub running_ticks: u64,
    /// From its first poll to its end (or the trace's end), minus `running_ticks`.
    pub suspended_ticks: u64,
}

impl Context {
    pub(crate) fn new(id: ContextId) -> Context {
        Context {
            id,
            frame: None,
            parent: None,
            created_at: None,
            first_resume: None,
            end: ContextEnd::Pending,
            polls: 0,
            running_ticks: 0,
            suspended_ticks: 0,
        }
    }

    /// Whether it is known to have no logical caller (a task's outermost future).
    pub fn is_root(&self) -> bool {
        self.created_at.is_some() && self.parent.is_none()
    }
}

/// A buffer that did not decode; its records were skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedBuffer {
    /// The OS thread whose records it held.
    pub thread: u64,
    /// Its `Sequence`.
    pub sequence: u32,
    /// Why it did not decode.
    pub error: RecordError,
}

/// What the decoder could not take at face value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics {
    /// `AsyncBuffer` events read.
    pub buffers: u64,
    /// Buffers missing from sequence gaps. `Sequence` counts for the process, so the first
    /// buffer seen of a thread counts from its own number (a session may start late).
    pub lost_buffers: u64,
    /// Lost buffers per OS thread, in order of first loss.
    pub lost_by_thread: Vec<(u64, u64)>,
    /// Suspend/Complete/Unwind records met with an empty poll stack (their Resume was in
    /// lost data), ignored.
    pub empty_pops: u64,
    /// Buffers that did not decode, skipped.
    pub malformed: Vec<MalformedBuffer>,
    /// Buffers whose sequence number was below the thread's next (not a restart at 0),
    /// skipped: their records are older than what was already applied.
    pub out_of_order: u64,
    /// Buffers whose Stack record (or its absence) disagreed with the open polls although
    /// no data was lost.
    pub stack_mismatches: u64,
    /// Async-profiler events whose payload did not decode or lacked a field.
    pub undecodable_events: u64,
}

impl Diagnostics {
    /// Whether nothing went wrong.
    pub fn is_clean(&self) -> bool {
        self.lost_buffers == 0
            && self.empty_pops == 0
            && self.malformed.is_empty()
            && self.out_of_order == 0
            && self.stack_mismatches == 0
            && self.undecodable_events == 0
    }

    pub(crate) fn add_lost(&mut self, thread: u64, n: u64) {
        self.lost_buffers = self.lost_buffers.saturating_add(n);
        match self.lost_by_thread.iter_mut().find(|(t, _)| *t == thread) {
            Some((_, total)) => *total = total.saturating_add(n),
            None => self.lost_by_thread.push((thread, n)),
        }
    }
}

/// Poll stacks as a tree of (parent, frame) nodes: a span names its node, so a stack is
/// stored once however many polls share it, and memory grows with distinct stacks, not
/// with depth × polls (a hostile buffer can nest thousands of polls).
#[derive(Debug, Clone, Default)]
pub(crate) struct StackTable {
    /// (parent node, frame); a parent's index is always below its child's.
    nodes: Vec<(Option<usize>, AsyncFrameId)>,
    index: HashMap<(Option<usize>, AsyncFrameId), usize>,
}

impl StackTable {
    /// The node for `frame` polled inside `parent`.
    pub(crate) fn push(
        &mut self,
        parent: Option<AsyncStackId>,
        frame: AsyncFrameId,
    ) -> AsyncStackId {
        let key = (parent.map(|p| p.0), frame);
        if let Some(&id) = self.index.get(&key) {
            return AsyncStackId(id);
        }
        let id = self.nodes.len();
        self.nodes.push(key);
        self.index.insert(key, id);
        AsyncStackId(id)
    }

    /// The frames of `id`, outermost first.
    pub(crate) fn frames(&self, id: AsyncStackId) -> Vec<AsyncFrameId> {
        let mut out = Vec::new();
        let mut at = Some(id.0);
        while let Some(&(parent, frame)) = at.and_then(|i| self.nodes.get(i)) {
            out.push(frame);
            // Parents have lower indices, so this ends.
            at = parent.filter(|&p| Some(p) < at);
        }
        out.reverse();
        out
    }
}

/// Per-frame totals over its contexts, as `report` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameStats {
    /// The frame.
    pub frame: AsyncFrameId,
    /// Contexts whose Create was seen.
    pub created: u64,
    /// Polls.
    pub polls: u64,
    /// Contexts that completed.
    pub completed: u64,
    /// Contexts dropped before completing.
    pub cancelled: u64,
    /// Contexts whose poll panicked.
    pub panicked: u64,
    /// Contexts still pending at the end of the trace.
    pub pending: u64,
    /// Running time of its contexts.
    pub running_ticks: u64,
    /// Suspended time of its contexts.
    pub suspended_ticks: u64,
}

impl FrameStats {
    /// Mean poll duration in ticks (0 without polls).
    pub fn mean_poll_ticks(&self) -> f64 {
        if self.polls == 0 {
            0.0
        } else {
            self.running_ticks as f64 / self.polls as f64
        }
    }
}

/// A wake of a task's outermost future, and the poll it led to: the time between is the
/// time the task waited to be run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    /// The context woken.
    pub ctx: ContextId,
    /// When it was woken.
    pub woken: i64,
    /// When its next poll began; `None` when none did before the trace ended.
    pub polled: Option<i64>,
}

/// Everything the async profiler's events of one trace say.
#[derive(Debug, Clone)]
pub struct AsyncTrace {
    /// The `AsyncProfilerMetadata` event (the last one, if several sessions wrote one).
    pub reference: Option<ClockReference>,
    /// Frames by id, from `AsyncFrame` events.
    pub frames: BTreeMap<AsyncFrameId, AsyncFrame>,
    /// Every context the records mention.
    pub contexts: BTreeMap<ContextId, Context>,
    /// Poll spans, by thread, then start (an outer poll before the polls nested in it).
    pub spans: Vec<PollSpan>,
    /// Wakes of outermost futures, in time order, each with the poll it led to.
    pub wakes: Vec<Wake>,
    /// What the decoder could not take at face value.
    pub diagnostics: Diagnostics,
    /// The trace's first and last timestamps (events and records), in ticks.
    pub start_ts: i64,
    /// See `start_ts`.
    pub end_ts: i64,
    /// Ticks per second: the metadata event's `TimestampFrequency`, else the trace's.
    pub tick_frequency: u64,
    pub(crate) stacks: StackTable,
    /// (thread, context) → indices into `spans`, by start.
    pub(crate) span_index: HashMap<(u64, ContextId), Vec<usize>>,
}

impl AsyncTrace {
    /// The frame's name, or `frame#N` when no `AsyncFrame` event described it.
    pub fn frame_name(&self, id: AsyncFrameId) -> Cow<'_, str> {
        match self.frames.get(&id) {
            Some(f) => Cow::Borrowed(&f.name),
            None => Cow::Owned(id.to_string()),
        }
    }

    /// The frames of a poll stack, outermost (the task's root future) first.
    pub fn callstack(&self, stack: AsyncStackId) -> Vec<AsyncFrameId> {
        self.stacks.frames(stack)
    }

    /// The poll of `ctx` on `thread` a CPU sample taken at `ts` fell in: the last one that
    /// began at or before `ts`. Its end is not checked: a sample's timestamp is when the
    /// sampler wrote it, just after the capture that named `ctx`, by which time that poll
    /// may have returned.
    pub fn span_at(&self, thread: u64, ctx: ContextId, ts: i64) -> Option<&PollSpan> {
        let spans = self.span_index.get(&(thread, ctx))?;
        let n = spans.partition_point(|&i| self.spans.get(i).is_some_and(|s| s.start <= ts));
        spans
            .get(n.checked_sub(1)?)
            .and_then(|&i| self.spans.get(i))
    }

    /// The async callstack (outermost first) of a sample of `thread` at `ts` whose
    /// innermost poll was `ctx`; `None` when no poll of it was seen.
    pub fn callstack_at(&self, thread: u64, ctx: ContextId, ts: i64) -> Option<Vec<AsyncFrameId>> {
        self.span_at(thread, ctx, ts)
            .map(|span| self.callstack(span.stack))
    }

    /// A duration in ticks as milliseconds.
    pub fn ticks_to_ms(&self, ticks: u64) -> f64 {
        if self.tick_frequency == 0 {
            0.0
        } else {
            ticks as f64 * 1000.0 / self.tick_frequency as f64
        }
    }

    /// Wall-clock nanoseconds since the Unix epoch at tick `ts`, from the metadata event.
    pub fn to_unix_nanos(&self, ts: i64) -> Option<i128> {
        self.reference?.to_unix_nanos(ts)
    }

    /// Per-frame totals over the contexts whose frame is known, most running time first.
    pub fn frame_stats(&self) -> Vec<FrameStats> {
        let mut by_frame: BTreeMap<AsyncFrameId, FrameStats> = BTreeMap::new();
        for c in self.contexts.values() {
            let Some(frame) = c.frame else { continue };
            let s = by_frame.entry(frame).or_insert(FrameStats {
                frame,
                created: 0,
                polls: 0,
                completed: 0,
                cancelled: 0,
                panicked: 0,
                pending: 0,
                running_ticks: 0,
                suspended_ticks: 0,
            });
            s.created += u64::from(c.created_at.is_some());
            s.polls = s.polls.saturating_add(c.polls);
            match c.end {
                ContextEnd::Pending => s.pending += 1,
                ContextEnd::Complete(_) => s.completed += 1,
                ContextEnd::Unwind(_) => s.panicked += 1,
                ContextEnd::Drop(_) => s.cancelled += 1,
            }
            s.running_ticks = s.running_ticks.saturating_add(c.running_ticks);
            s.suspended_ticks = s.suspended_ticks.saturating_add(c.suspended_ticks);
        }
        let mut rows: Vec<FrameStats> = by_frame.into_values().collect();
        rows.sort_by(|a, b| {
            b.running_ticks
                .cmp(&a.running_ticks)
                .then(b.polls.cmp(&a.polls))
                .then(a.frame.cmp(&b.frame))
        });
        rows
    }

    /// Root contexts (created with no parent) still pending at the end of the trace, the
    /// oldest first: tasks that never finished.
    pub fn pending_roots(&self) -> Vec<&Context> {
        let mut roots: Vec<&Context> = self
            .contexts
            .values()
            .filter(|c| c.is_root() && c.end == ContextEnd::Pending)
            .collect();
        roots.sort_by_key(|c| (c.created_at, c.id));
        roots
    }

    /// How long `c` had been alive at the end of the trace (or at its end), in ticks.
    pub fn alive_ticks(&self, c: &Context) -> u64 {
        let end = c.end.time().unwrap_or(self.end_ts);
        let start = c.created_at.or(c.first_resume).unwrap_or(end);
        i128::from(end)
            .saturating_sub(i128::from(start))
            .clamp(0, i128::from(u64::MAX)) as u64
    }
}
