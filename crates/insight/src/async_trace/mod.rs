//! The reading side of the async profiler (`eventpipe_profiler::futures`): its
//! `EventPipeRs-AsyncProfiler` events decoded into frames, contexts (future instances),
//! poll spans per thread, and what could not be trusted.
//!
//! The format is specified in `docs/async-profiler-format.md`; this module is its reader.
//!
//! ```text
//! AsyncProfilerMetadata ─▶ ClockReference (ticks ↔ wall clock)
//! AsyncFrame            ─▶ frames: FrameId → name, file, line
//! AsyncBuffer           ─▶ records::decode_records (bytes → Record, all or nothing)
//!                       ─▶ decode::Decoder (per-thread poll stack → PollSpan, Create, Drop;
//!                          gaps, malformed buffers and stray pops become Diagnostics)
//!                       ─▶ AsyncTraceBuilder (contexts: polls, running and suspended time)
//!                       ─▶ AsyncTrace
//! ```
//!
//! The decoder streams (it holds only each thread's open polls), so the Chrome converter
//! writes poll spans as they close; [`AsyncTraceBuilder`] keeps everything for the profile
//! builder (which places CPU samples in their polls) and `eptrace report`.
//!
//! Hostile input: a buffer that does not decode is reported with its thread and sequence
//! and skipped whole; no count or length from the input is trusted before it is checked
//! against the bytes that remain; nothing panics.
//!
//! ```no_run
//! let bytes = std::fs::read("trace.nettrace")?;
//! let mut reader = nettrace::TraceReader::from_slice(&bytes)?;
//! if let Some(trace) = eventpipe_insight::async_trace::read_async_trace(&mut reader)? {
//!     for s in trace.frame_stats() {
//!         println!("{}: {} polls", trace.frame_name(s.frame), s.polls);
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod decode;
mod ids;
mod model;
mod records;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};

use nettrace::source::Input;
use nettrace::{Event, TraceReader};

pub(crate) use decode::{AsyncEvent, Decoder, Fact};
pub use model::{
    AsyncFrame, AsyncFrameId, AsyncStackId, AsyncTrace, ClockReference, Context, ContextEnd,
    ContextId, Diagnostics, FrameStats, MalformedBuffer, PollSpan, SpanEnd, Wake,
};
pub use records::{decode_records, encode_records, Record, RecordError, RecordErrorKind};

/// The async profiler's provider.
pub const PROVIDER: &str = "EventPipeRs-AsyncProfiler";

/// Collects an [`AsyncTrace`] from events fed one at a time (every event of the trace: the
/// others only extend its time range).
#[derive(Debug, Default)]
pub struct AsyncTraceBuilder {
    decoder: Decoder,
    facts: Vec<Fact>,
    /// Whether any event of the provider was seen.
    seen: bool,
    reference: Option<ClockReference>,
    frames: BTreeMap<AsyncFrameId, AsyncFrame>,
    contexts: BTreeMap<ContextId, Context>,
    spans: Vec<PollSpan>,
    /// (context, when) of each wake.
    woken: Vec<(ContextId, i64)>,
    first_ts: Option<i64>,
    last_ts: Option<i64>,
    trace_frequency: i64,
}

impl AsyncTraceBuilder {
    /// An empty builder.
    pub fn new() -> AsyncTraceBuilder {
        AsyncTraceBuilder::default()
    }

    /// Feeds one event; returns whether it was the async profiler's.
    pub fn observe(&mut self, event: &Event<'_>) -> bool {
        let ts = event.header.timestamp;
        self.first_ts = Some(self.first_ts.map_or(ts, |t| t.min(ts)));
        self.last_ts = Some(self.last_ts.map_or(ts, |t| t.max(ts)));
        self.trace_frequency = event.trace.tick_frequency;
        if self.decoder.observe(event, &mut self.facts).is_none() {
            return false;
        }
        self.seen = true;
        self.apply_facts();
        true
    }

    /// Applies one buffer directly, as if from an `AsyncBuffer` event (the unit tests).
    #[cfg(test)]
    pub(crate) fn buffer(&mut self, thread: u64, sequence: u32, base_ts: i64, records: &[u8]) {
        self.seen = true;
        self.decoder
            .buffer(thread, sequence, base_ts, records, &mut self.facts);
        self.apply_facts();
    }

    fn context(&mut self, ctx: ContextId) -> &mut Context {
        self.contexts
            .entry(ctx)
            .or_insert_with(|| Context::new(ctx))
    }

    fn apply_facts(&mut self) {
        let mut facts = std::mem::take(&mut self.facts);
        for fact in facts.drain(..) {
            match fact {
                Fact::Reference(r) => self.reference = Some(r),
                Fact::Frame(id, frame) => {
                    self.frames.insert(id, frame);
                }
                Fact::Created {
                    ctx,
                    frame,
                    parent,
                    ts,
                } => {
                    let c = self.context(ctx);
                    if c.created_at.is_none() {
                        c.created_at = Some(ts);
                        c.parent = parent;
                    }
                    c.frame.get_or_insert(frame);
                }
                Fact::Dropped { ctx, ts } => {
                    let c = self.context(ctx);
                    if c.end == ContextEnd::Pending {
                        c.end = ContextEnd::Drop(ts);
                    }
                }
                Fact::Woken { ctx, ts } => self.woken.push((ctx, ts)),
                Fact::Span(span) => {
                    let c = self.context(span.ctx);
                    c.frame.get_or_insert(span.frame);
                    c.polls += 1;
                    c.running_ticks = c.running_ticks.saturating_add(span.duration_ticks());
                    c.first_resume = Some(c.first_resume.map_or(span.start, |t| t.min(span.start)));
                    if c.end == ContextEnd::Pending {
                        match span.ended {
                            SpanEnd::Complete => c.end = ContextEnd::Complete(span.end),
                            SpanEnd::Unwind => c.end = ContextEnd::Unwind(span.end),
                            _ => {}
                        }
                    }
                    self.spans.push(span);
                }
            }
        }
        self.facts = facts;
    }

    /// The async trace, or `None` when the trace has no event of the provider.
    pub fn finish(mut self) -> Option<AsyncTrace> {
        if !self.seen {
            return None;
        }
        let end_ts = match (self.last_ts, self.decoder.last_record_ts) {
            (Some(a), Some(b)) => a.max(b),
            (a, b) => a.or(b).unwrap_or(0),
        };
        self.decoder.finish(end_ts, &mut self.facts);
        self.apply_facts();
        for c in self.contexts.values_mut() {
            let Some(first) = c.first_resume else {
                continue;
            };
            let end = c.end.time().unwrap_or(end_ts);
            let lifetime = (i128::from(end) - i128::from(first)).max(0);
            c.suspended_ticks =
                (lifetime - i128::from(c.running_ticks)).clamp(0, i128::from(u64::MAX)) as u64;
        }
        self.spans.sort_by_key(|s| (s.thread, s.start, s.depth));
        let mut span_index: HashMap<(u64, ContextId), Vec<usize>> = HashMap::new();
        for (i, s) in self.spans.iter().enumerate() {
            span_index.entry((s.thread, s.ctx)).or_default().push(i);
        }
        let wakes = pair_wakes(std::mem::take(&mut self.woken), &self.spans);
        let tick_frequency = match self.reference {
            Some(r) if r.timestamp_frequency > 0 => r.timestamp_frequency,
            _ => u64::try_from(self.trace_frequency).unwrap_or(0),
        };
        Some(AsyncTrace {
            reference: self.reference,
            frames: self.frames,
            contexts: self.contexts,
            spans: self.spans,
            wakes,
            diagnostics: std::mem::take(&mut self.decoder.diagnostics),
            start_ts: self.first_ts.unwrap_or(end_ts).min(end_ts),
            end_ts,
            tick_frequency,
            stacks: std::mem::take(&mut self.decoder.stacks),
            span_index,
        })
    }
}

/// Each wake with the first poll of its context that began at or after it. A wake is
/// written by the thread that woke, the poll by the one that ran it, so the two are matched
/// here, by time, and not in the order their buffers were read.
fn pair_wakes(mut woken: Vec<(ContextId, i64)>, spans: &[PollSpan]) -> Vec<Wake> {
    let mut starts: HashMap<ContextId, Vec<i64>> = HashMap::new();
    for (ctx, _) in &woken {
        starts.entry(*ctx).or_default();
    }
    for span in spans {
        if let Some(list) = starts.get_mut(&span.ctx) {
            list.push(span.start);
        }
    }
    for list in starts.values_mut() {
        list.sort_unstable();
    }
    woken.sort_by_key(|&(ctx, ts)| (ts, ctx));
    woken
        .into_iter()
        .map(|(ctx, ts)| {
            let list = &starts[&ctx];
            let next = list.partition_point(|&start| start < ts);
            Wake {
                ctx,
                woken: ts,
                polled: list.get(next).copied(),
            }
        })
        .collect()
}

/// Reads every event `reader` has left into an [`AsyncTrace`]; `None` when the trace has no
/// async-profiler event.
///
/// # Errors
/// When the trace itself cannot be read.
pub fn read_async_trace<I: Input>(
    reader: &mut TraceReader<I>,
) -> nettrace::Result<Option<AsyncTrace>> {
    let mut builder = AsyncTraceBuilder::new();
    while let Some(event) = reader.next_event()? {
        builder.observe(&event);
    }
    Ok(builder.finish())
}
