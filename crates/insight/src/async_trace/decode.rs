//! From the provider's events to facts, one event at a time: the per-thread poll-stack
//! machine that pairs each poll's beginning with its end.
//!
//! # The scheme
//!
//! Each OS thread has a poll stack. Resume pushes; Suspend, Complete and Unwind pop and
//! close a [`PollSpan`]. The records of one thread arrive in time order, buffer after
//! buffer (in `Sequence` order), so the stack carries over from one buffer to the next.
//!
//! Data can go missing between two buffers (a sequence gap, a malformed buffer skipped),
//! and the format makes that recoverable: a buffer begun while polls were open starts with
//! a Stack record, and one begun with none open does not. So after missing data, the first
//! record of the next buffer *reconciles*:
//!
//! * the polls open here that lead the new stack (same context and frame, outermost
//!   first) continue;
//! * the other open polls ended somewhere in the missing data: they close as
//!   [`SpanEnd::Lost`] at the last time they were known open (the thread's previous
//!   record);
//! * entries of the new stack not open here began in the missing data: they open now,
//!   marked `start_exact: false`.
//!
//! When nothing is missing, the decoder's own stack is exact (it saw every record since the
//! thread's first buffer), so it is kept whenever the record agrees with it as far as the
//! record goes: the profiler's writer lists at most the 64 outermost polls in a Stack
//! record. A Stack record that contradicts it is applied as above and counted
//! (`stack_mismatches`), and so is a buffer that begins without one while polls are open
//! (the writer leaves it out when it does not fit the buffer), though the stack is kept.
//!
//! `Sequence` counts a thread's buffers for the process, so the first buffer a trace has
//! of a thread may have any number, and only later gaps are losses. A restart at 0 is a new
//! thread reusing the OS id. A buffer numbered below the thread's next is skipped: its
//! records are older than what was applied. A pop with an empty stack is counted and
//! ignored. At the end of the trace every poll still open closes as [`SpanEnd::OpenAtEnd`].
//!
//! The decoder holds only each thread's open polls and the interned stacks, so the Chrome
//! converter can stream through it; [`super::AsyncTraceBuilder`] keeps the facts.

use std::collections::BTreeMap;

use nettrace::{Event, TimeOrder, Value};

use super::model::{
    AsyncFrame, AsyncFrameId, AsyncStackId, ClockReference, ContextId, Diagnostics,
    MalformedBuffer, PollSpan, SpanEnd, StackTable,
};
use super::records::{decode_records, Record};
use super::PROVIDER;
use eventpipe_symbols::fields::field;

/// Which of the provider's events an event was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AsyncEvent {
    /// `AsyncProfilerMetadata`.
    Metadata,
    /// `AsyncFrame`.
    Frame,
    /// `AsyncBuffer`.
    Buffer,
    /// Another event of the provider (a later version's).
    Other,
}

/// What the decoder learned from an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fact {
    Reference(ClockReference),
    Frame(AsyncFrameId, AsyncFrame),
    Created {
        ctx: ContextId,
        frame: AsyncFrameId,
        parent: Option<ContextId>,
        ts: i64,
    },
    Dropped {
        ctx: ContextId,
        ts: i64,
    },
    Woken {
        ctx: ContextId,
        ts: i64,
    },
    Span(PollSpan),
}

/// A poll that has begun and not ended.
#[derive(Debug, Clone, Copy)]
struct OpenPoll {
    ctx: ContextId,
    frame: AsyncFrameId,
    start: i64,
    start_exact: bool,
    stack: AsyncStackId,
}

/// Buffers of one thread held at most while an earlier one has not arrived.
const MAX_AHEAD: usize = 64;

#[derive(Debug, Default)]
struct ThreadState {
    /// The `Sequence` the next buffer should have.
    next_sequence: Option<u32>,
    /// Buffers that arrived before the next one expected, by `Sequence`: their base
    /// timestamp and records.
    ahead: BTreeMap<u32, (i64, Vec<u8>)>,
    open: Vec<OpenPoll>,
    /// The latest record's timestamp.
    last_ts: Option<i64>,
    /// The previous buffer was applied whole and nothing is missing since: the next
    /// buffer's first record must agree with `open`.
    continuous: bool,
}

/// An `AsyncBuffer` event not yet applied.
#[derive(Debug)]
struct WrittenBuffer {
    thread: u64,
    sequence: u32,
    base_ts: i64,
    records: Vec<u8>,
}

/// The streaming decoder (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    threads: BTreeMap<u64, ThreadState>,
    /// Buffers read and not yet applied, by their event's timestamp: up to the next IsSorted
    /// event.
    written: TimeOrder<WrittenBuffer>,
    pub(crate) stacks: StackTable,
    pub(crate) diagnostics: Diagnostics,
    /// The latest record timestamp seen.
    pub(crate) last_record_ts: Option<i64>,
}

fn bytes(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::Bytes(b) => Some(b.clone()),
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::U8(b) => Some(*b),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// Which of the provider's events `event` is, by name (or by id when the metadata has no
/// name); `None` for other providers.
pub(crate) fn classify(event: &Event<'_>) -> Option<AsyncEvent> {
    let md = event.metadata;
    if md.provider != PROVIDER {
        return None;
    }
    Some(match (md.event_name.as_str(), md.event_id) {
        ("AsyncProfilerMetadata", _) | ("", 1) => AsyncEvent::Metadata,
        ("AsyncFrame", _) | ("", 2) => AsyncEvent::Frame,
        ("AsyncBuffer", _) | ("", 3) => AsyncEvent::Buffer,
        _ => AsyncEvent::Other,
    })
}

impl Decoder {
    /// Feeds one event; `None` when it is not the async profiler's. Facts go to `out`.
    pub(crate) fn observe(&mut self, event: &Event<'_>, out: &mut Vec<Fact>) -> Option<AsyncEvent> {
        let which = self.classify_and_take(event, out);
        if event.header.is_sorted {
            // Nothing after this event in the file is older: the buffers written before it
            // can go, in time order.
            self.release_written(Some(event.header.timestamp), out);
        }
        which
    }

    fn classify_and_take(&mut self, event: &Event<'_>, out: &mut Vec<Fact>) -> Option<AsyncEvent> {
        let which = classify(event)?;
        if which == AsyncEvent::Other {
            return Some(which);
        }
        let Ok(fields) = event.decode_payload() else {
            self.diagnostics.undecodable_events += 1;
            return Some(which);
        };
        let num = |n| field(&fields, n).and_then(Value::as_u64);
        let text = |n| field(&fields, n).and_then(Value::as_str);
        let ok = match which {
            AsyncEvent::Metadata => match (num("ReferenceTimestamp"), num("TimestampFrequency")) {
                (Some(reference_timestamp), Some(timestamp_frequency)) => {
                    out.push(Fact::Reference(ClockReference {
                        version: num("Version")
                            .and_then(|v| u32::try_from(v).ok())
                            .unwrap_or(0),
                        reference_timestamp,
                        timestamp_frequency,
                        reference_utc_unix_nanos: field(&fields, "ReferenceUtcUnixNanos")
                            .and_then(Value::as_i64)
                            .unwrap_or(0),
                    }));
                    true
                }
                _ => false,
            },
            AsyncEvent::Frame => match (
                num("FrameId").and_then(|v| u32::try_from(v).ok()),
                text("Name"),
            ) {
                (Some(id), Some(name)) => {
                    out.push(Fact::Frame(
                        AsyncFrameId(id),
                        AsyncFrame {
                            name: name.to_owned(),
                            file: text("File").filter(|f| !f.is_empty()).map(str::to_owned),
                            line: num("Line")
                                .and_then(|l| u32::try_from(l).ok())
                                .filter(|&l| l != 0),
                        },
                    ));
                    true
                }
                _ => false,
            },
            AsyncEvent::Buffer => {
                let sequence = num("Sequence").and_then(|v| u32::try_from(v).ok());
                let records = field(&fields, "Records").and_then(bytes);
                match (sequence, num("BufferTimestamp"), records) {
                    (Some(sequence), Some(base), Some(records)) => {
                        let thread = num("OsThreadId").unwrap_or_else(|| event.thread_id());
                        // The trace's ticks are signed; a base above i64::MAX is nonsense
                        // that wraps like the deltas do.
                        let buffer = WrittenBuffer {
                            thread,
                            sequence,
                            base_ts: base as i64,
                            records,
                        };
                        self.written.hold(event.header.timestamp, buffer);
                        true
                    }
                    _ => false,
                }
            }
            AsyncEvent::Other => true,
        };
        if !ok {
            self.diagnostics.undecodable_events += 1;
        }
        Some(which)
    }

    /// Takes one thread's buffer. Buffers of one thread may reach the trace through
    /// different writing threads (a thread's last buffer is written for it as it exits),
    /// and the format orders only each writer's own events: a buffer that is not the next
    /// one expected (or, before the thread's first, not its buffer 0) is held, at most
    /// `MAX_AHEAD` a thread, until the ones before it arrive; what is missing counts as
    /// lost only when too many are held or the trace ends.
    pub(crate) fn buffer(
        &mut self,
        thread: u64,
        sequence: u32,
        base_ts: i64,
        records: &[u8],
        out: &mut Vec<Fact>,
    ) {
        self.diagnostics.buffers += 1;
        let state = self.threads.entry(thread).or_default();
        if state.next_sequence.is_none() && sequence == 0 && state.ahead.contains_key(&u32::MAX) {
            // Buffer 0 after a held `u32::MAX`: the numbers wrapped.
            self.release_ahead(thread, usize::MAX, out);
        }
        let state = self.threads.entry(thread).or_default();
        let applies = match state.next_sequence {
            // Nothing comes before a thread's buffer 0.
            None => sequence == 0,
            Some(next) if sequence == next => true,
            Some(_) if sequence == 0 => {
                // A new thread that reuses the OS id: its predecessor's held buffers are
                // all it will have.
                self.release_ahead(thread, usize::MAX, out);
                true
            }
            Some(next) if sequence < next => {
                // Older than what was applied: a repeat.
                self.diagnostics.out_of_order += 1;
                return;
            }
            Some(_) => false,
        };
        if applies {
            self.apply_buffer(thread, sequence, base_ts, records, out);
        } else {
            let state = self.threads.entry(thread).or_default();
            state.ahead.insert(sequence, (base_ts, records.to_vec()));
            if state.ahead.len() > MAX_AHEAD {
                // The earliest held one is next, after whatever is missing before it.
                self.release_ahead(thread, 1, out);
            }
        }
        self.release_ahead(thread, 0, out);
    }

    /// Applies `thread`'s held buffers that follow on from what was applied, and besides,
    /// the first `force` held ones whatever the gap before them (which counts as lost).
    fn release_ahead(&mut self, thread: u64, mut force: usize, out: &mut Vec<Fact>) {
        loop {
            let Some(state) = self.threads.get_mut(&thread) else {
                return;
            };
            let Some(entry) = state.ahead.first_entry() else {
                return;
            };
            let follows = state.next_sequence == Some(*entry.key());
            if !follows && force == 0 {
                return;
            }
            if !follows {
                force -= 1;
            }
            let (sequence, (base_ts, records)) = entry.remove_entry();
            if state.next_sequence.is_some_and(|next| sequence < next) {
                // Overtaken by a buffer 0 of a new thread with this id.
                self.diagnostics.out_of_order += 1;
                continue;
            }
            self.apply_buffer(thread, sequence, base_ts, &records, out);
        }
    }

    /// Applies one thread's buffer, numbered at or past the next one expected.
    fn apply_buffer(
        &mut self,
        thread: u64,
        sequence: u32,
        base_ts: i64,
        records: &[u8],
        out: &mut Vec<Fact>,
    ) {
        let state = self.threads.entry(thread).or_default();
        let expected = state.next_sequence.unwrap_or(sequence);
        if sequence > expected {
            self.diagnostics
                .add_lost(thread, u64::from(sequence - expected));
            state.continuous = false;
        } else if sequence == 0 && expected != 0 {
            // A new thread that reuses the OS id.
            state.continuous = false;
        }
        state.next_sequence = Some(sequence.wrapping_add(1));
        let records = match decode_records(records, base_ts) {
            Ok(records) => records,
            Err(error) => {
                self.diagnostics.malformed.push(MalformedBuffer {
                    thread,
                    sequence,
                    error,
                });
                state.continuous = false;
                return;
            }
        };
        let mut machine = Machine {
            thread,
            state,
            stacks: &mut self.stacks,
            diagnostics: &mut self.diagnostics,
            out,
        };
        // An empty buffer reconciles nothing: continuity stays as it was.
        let reconciled = !records.is_empty();
        for (i, record) in records.into_iter().enumerate() {
            let ts = record.ts();
            self.last_record_ts = Some(self.last_record_ts.map_or(ts, |t| t.max(ts)));
            machine.apply(record, i == 0);
        }
        if reconciled {
            machine.state.continuous = true;
        }
    }

    /// Takes the buffers written up to `until` (all without it), in the order they were
    /// written: the file gives each writing thread's events in order, but one thread's
    /// buffers may be written by several (its own, an outside flush, its last as it
    /// exits), so events of different writers are ordered by timestamp, as a reader sorts
    /// a sequence-point region, up to the latest IsSorted event.
    fn release_written(&mut self, until: Option<i64>, out: &mut Vec<Fact>) {
        let released: Vec<WrittenBuffer> = self.written.release(until).collect();
        for b in released {
            self.buffer(b.thread, b.sequence, b.base_ts, &b.records, out);
        }
    }

    /// Applies the buffers still held (what they waited for is lost), then closes every
    /// poll still open, at `end_ts`.
    pub(crate) fn finish(&mut self, end_ts: i64, out: &mut Vec<Fact>) {
        self.release_written(None, out);
        let threads: Vec<u64> = self.threads.keys().copied().collect();
        for thread in threads {
            self.release_ahead(thread, usize::MAX, out);
        }
        for (&thread, state) in &mut self.threads {
            while let Some(open) = state.open.pop() {
                let depth = state.open.len();
                out.push(Fact::Span(close(
                    open,
                    thread,
                    depth,
                    end_ts.max(open.start),
                    SpanEnd::OpenAtEnd,
                )));
            }
        }
    }
}

fn close(open: OpenPoll, thread: u64, depth: usize, end: i64, ended: SpanEnd) -> PollSpan {
    PollSpan {
        thread,
        ctx: open.ctx,
        frame: open.frame,
        start: open.start,
        end,
        start_exact: open.start_exact,
        ended,
        stack: open.stack,
        depth,
    }
}

/// One thread's state with what applying a record touches.
struct Machine<'a> {
    thread: u64,
    state: &'a mut ThreadState,
    stacks: &'a mut StackTable,
    diagnostics: &'a mut Diagnostics,
    out: &'a mut Vec<Fact>,
}

impl Machine<'_> {
    fn apply(&mut self, record: Record, first_of_buffer: bool) {
        let ts = record.ts();
        if first_of_buffer && !matches!(record, Record::Stack { .. }) {
            // No Stack record: no poll was open when the buffer began.
            self.reconcile(&[], ts);
        }
        match record {
            Record::Create {
                ctx,
                frame,
                parent,
                ts,
            } => self.out.push(Fact::Created {
                ctx,
                frame,
                parent,
                ts,
            }),
            Record::Resume { ctx, frame, ts } => self.push(ctx, frame, ts, true),
            Record::Suspend { ts } => self.pop(ts, SpanEnd::Suspend),
            Record::Complete { ts } => self.pop(ts, SpanEnd::Complete),
            Record::Unwind { ts } => self.pop(ts, SpanEnd::Unwind),
            Record::Stack { ts, entries } => self.reconcile(&entries, ts),
            Record::Drop { ctx, ts } => self.out.push(Fact::Dropped { ctx, ts }),
            Record::Wake { ctx, ts } => self.out.push(Fact::Woken { ctx, ts }),
        }
        self.state.last_ts = Some(ts);
    }

    fn push(&mut self, ctx: ContextId, frame: AsyncFrameId, start: i64, start_exact: bool) {
        let parent = self.state.open.last().map(|o| o.stack);
        let stack = self.stacks.push(parent, frame);
        self.state.open.push(OpenPoll {
            ctx,
            frame,
            start,
            start_exact,
            stack,
        });
    }

    fn pop(&mut self, ts: i64, ended: SpanEnd) {
        match self.state.open.pop() {
            Some(open) => {
                let depth = self.state.open.len();
                self.out
                    .push(Fact::Span(close(open, self.thread, depth, ts, ended)));
            }
            None => self.diagnostics.empty_pops += 1,
        }
    }

    /// Makes the open polls agree with `entries` (outermost first), as the module doc
    /// says.
    fn reconcile(&mut self, entries: &[(ContextId, AsyncFrameId)], ts: i64) {
        let keep = self
            .state
            .open
            .iter()
            .zip(entries)
            .take_while(|(o, &(ctx, frame))| o.ctx == ctx && o.frame == frame)
            .count();
        if self.state.continuous {
            if keep == entries.len() {
                // Agrees as far as it goes (or is the outermost part): the own stack stands.
                // No record at all while polls are open is the writer's omission.
                if entries.is_empty() && !self.state.open.is_empty() {
                    self.diagnostics.stack_mismatches += 1;
                }
                return;
            }
            self.diagnostics.stack_mismatches += 1;
        }
        let lost_at = self.state.last_ts.unwrap_or(ts);
        while self.state.open.len() > keep {
            let Some(open) = self.state.open.pop() else {
                break;
            };
            let depth = self.state.open.len();
            let end = lost_at.max(open.start);
            self.out.push(Fact::Span(close(
                open,
                self.thread,
                depth,
                end,
                SpanEnd::Lost,
            )));
        }
        for &(ctx, frame) in entries.get(keep..).unwrap_or(&[]) {
            self.push(ctx, frame, ts, false);
        }
    }
}
