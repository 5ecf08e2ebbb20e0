//! The tracing layer's spans: held from `SpanNew` to `SpanClose`, one slice per span
//! entered once.

use super::json::Payload;
use super::names::FieldName;
use super::pairs::Ended;
use super::*;

/// A span of the tracing layer between its `SpanNew` and its `SpanClose`.
pub(super) struct LiveSpan {
    pub(super) ts: i64,
    pub(super) tid: u64,
    pub(super) qualified: String,
    /// `SpanNew`'s payload: SpanId, ParentSpanId, Name, the span's fields.
    pub(super) new: Payload<FieldName>,
    /// Slices begun for it (each `SpanStart`).
    pub(super) entered: u32,
    /// Its one slice so far, ended.
    pub(super) ended: Option<Ended>,
    /// Something written names it by its `SpanId` (as a `ParentSpanId`).
    pub(super) referenced: bool,
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct SpanKey {
    pub(super) pid: u64,
    pub(super) provider: String,
    pub(super) span: u64,
}

/// A slice's begin args for a span of the tracing layer: the span's `SpanNew` fields
/// (without a root's `ParentSpanId` of 0), else the `SpanStart` payload.
pub(super) fn span_slice_args(
    live: Option<&LiveSpan>,
    start: Payload<FieldName>,
) -> Payload<FieldName> {
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

impl<W: Write> Converter<W> {
    /// A tracing-layer span's `SpanNew` or `SpanClose`: held, folded or written.
    pub(super) fn span_lifecycle(
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
}
