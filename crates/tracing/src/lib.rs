//! # eventpipe-tracing
//!
//! A [`tracing_subscriber::Layer`] that records `tracing` spans and events as eventpipe
//! events, so a program that already uses `tracing` becomes attachable (`eptrace collect`,
//! any `eventpipe::Session`) by adding one line:
//!
//! ```no_run
//! use tracing_subscriber::prelude::*;
//!
//! tracing_subscriber::registry()
//!     .with(eventpipe_tracing::EventPipeLayer::new())
//!     .init();
//! ```
//!
//! It composes with other layers (`fmt`, filters...) and never filters for them.
//!
//! ## Providers
//!
//! Each `tracing` target is a provider named by [`provider_name`]: the target with every
//! `::` replaced by `-` (`demo::worker` → `demo-worker`), because `:` separates the parts of a
//! provider spec (`Name:Keywords:Level`). So `eptrace collect --providers demo-worker:*:4`
//! records the `demo::worker` target at Informational and above. Targets that differ only in
//! ASCII case, or only in `::` against `-`, share one provider (named after the first seen).
//!
//! ## Events
//!
//! | id | name | opcode | keywords | fields | written on |
//! |---|---|---|---|---|---|
//! | 1 | `SpanStart` | 1 (Start) | [`KEYWORD_SPANS`] | `SpanId: u64`, `Name: str` | span enter |
//! | 2 | `SpanStop` | 2 (Stop) | [`KEYWORD_SPANS`] | `SpanId: u64`, `Name: str` | span exit |
//! | 3 | `SpanClose` | 0 | [`KEYWORD_SPANS`] | `SpanId: u64` | span close |
//! | 16.. | `SpanNew` | 0 | [`KEYWORD_SPANS`] | `SpanId: u64`, `ParentSpanId: u64`, `Name: str`, then the span's fields | span creation |
//! | 16.. | see below | 0 | [`KEYWORD_EVENTS`] | the event's fields | `tracing` event |
//!
//! Ids 1–3 are the same in every provider; id 4 ([`EVENTS_PROBE_ID`]) is reserved and never
//! written. Ids from [`FIRST_CALLSITE_ID`] on are given per provider, in order of first
//! use, to each callsite and field-type signature (below): they are not stable from one run
//! to the next; match events by name and fields.
//!
//! - `SpanId` is the span's [`Id::into_u64`](tracing_core::span::Id::into_u64).
//!   Subscribers reuse ids once a span closes (`SpanClose` says when).
//! - `ParentSpanId` is the explicit parent, else the current span when the span is
//!   contextual, else 0 (a root).
//! - `Name` is the span's name; `SpanStart`/`SpanStop` are written on the thread that enters
//!   and exits the span (each time: an async span may enter many times).
//! - A `tracing` event's name is the `name:` given in the macro, else
//!   `Event <file name>:<line>` (`Event main.rs:12`): tracing's default (`event
//!   src/main.rs:12`) would put `/` into `Provider/Event` names.
//! - Every event has the level of its span or event: ERROR → [`Level::Error`], WARN →
//!   [`Level::Warning`], INFO → [`Level::Informational`], DEBUG and TRACE →
//!   [`Level::Verbose`]. The span events exist once per level in every provider (same id,
//!   name and fields), so a session's level filters spans like events.
//!
//! [`Level::Error`]: eventpipe_core::Level::Error
//! [`Level::Warning`]: eventpipe_core::Level::Warning
//! [`Level::Informational`]: eventpipe_core::Level::Informational
//! [`Level::Verbose`]: eventpipe_core::Level::Verbose
//!
//! ## Fields
//!
//! `tracing` values have no static type: a value says what it is by the `Visit` method it
//! calls. Each one becomes a typed payload field:
//!
//! | recorded with | payload type |
//! |---|---|
//! | `record_i64` | `i64` |
//! | `record_u64` | `u64` |
//! | `record_f64` | `f64` |
//! | `record_bool` | `bool` |
//! | `record_str` | string |
//! | `record_debug` (`?x`, `%x`, the message), `record_error` (its `Display`), `record_i128`, `record_u128` | string |
//! | `record_bytes` | byte array (at most 65535 bytes) |
//!
//! The `message` field is named `Message`; other fields keep their names. A field that
//! records nothing (`Empty`, an `Option` that is `None`) is left out. So one callsite can
//! produce several layouts; each distinct one (its *signature*) is its own event id with
//! the same name. A callsite that shows more than 16 signatures writes further ones with
//! every field as a string. At most 32 fields are recorded per event. Strings are written
//! without allocating; a NUL inside one is written as U+FFFD. Values recorded later with
//! `Span::record` are not written.
//!
//! ## Cost
//!
//! With no session recording any provider of this layer, each hook (`on_event`,
//! `on_new_span`, `on_enter`, `on_exit`, `on_close`) is one relaxed atomic load and a
//! branch, on top of `tracing`'s own dispatch. The flag is kept by the providers' enable
//! callbacks: eventpipe calls them when a session starts or stops, after updating its
//! masks.
//!
//! The layer answers [`Interest::always`](tracing_core::subscriber::Interest::always) and
//! never disables a callsite: a plain `Layer`'s `register_callsite` / `enabled` filter
//! for the whole subscriber, so answering `never` while no session listens would also
//! silence every other layer (the `fmt` output...), and interest would then have to be
//! rebuilt (`tracing_core::callsite::rebuild_interest_cache`) on every session start and
//! stop. A program that wants tracing's callsite cache to skip the layer entirely can wrap it
//! in a per-layer filter of its own (`.with_filter(...)`).
//!
//! When a session listens, a recording takes a thread-local re-entrancy check, a
//! lookup of the callsite in a small thread-local cache (a shared read lock when it misses),
//! one more relaxed load (is this provider and level recorded?), a pass over the fields to
//! learn their types and one to write them straight into eventpipe's stack buffer (strings
//! and `Debug` output are encoded as they are formatted): no heap allocation once a callsite
//! and signature have been seen (the first time declares and registers the eventpipe
//! event, under a lock). Span hooks also look the span up in the registry
//! ([`LookupSpan`]).
//!
//! ## Re-entrancy
//!
//! A tracing event emitted while the layer is recording on the same thread (by eventpipe,
//! or by a `Debug` impl being formatted) is not recorded, and nothing is recorded on
//! eventpipe's own threads (named `eventpipe-...`: drain, in-process listener, diagnostics
//! server), so a listener that logs what it receives does not feed on itself. Other layers
//! still see those events.
// The one `unsafe` here is the promise `EventDescriptor::write_unchecked` asks for: the
// payloads of the events declared from a recording's layout keep that layout.
#![deny(unsafe_code)]

use tracing_core::span::{Attributes, Id};
use tracing_core::subscriber::Interest;
use tracing_core::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

mod fields;
mod state;

use fields::{Encode, SigVisitor};
use state::ACTIVE;

/// Event id of `SpanStart` (opcode 1) in every provider of this layer.
pub const SPAN_START_ID: u32 = 1;
/// Event id of `SpanStop` (opcode 2) in every provider of this layer.
pub const SPAN_STOP_ID: u32 = 2;
/// Event id of `SpanClose` in every provider of this layer.
pub const SPAN_CLOSE_ID: u32 = 3;
/// Reserved: an internal descriptor per provider and level, never written.
pub const EVENTS_PROBE_ID: u32 = 4;
/// The first id given to a per-callsite event (`SpanNew`, `tracing` events).
pub const FIRST_CALLSITE_ID: u32 = 16;

/// Keyword of the span events (`SpanNew`, `SpanStart`, `SpanStop`, `SpanClose`).
pub const KEYWORD_SPANS: u64 = 0x1;
/// Keyword of the events made from `tracing` events.
pub const KEYWORD_EVENTS: u64 = 0x2;

/// The eventpipe provider name of a `tracing` target: every `::` replaced by `-`.
///
/// ```
/// assert_eq!(eventpipe_tracing::provider_name("demo::worker"), "demo-worker");
/// assert_eq!(eventpipe_tracing::provider_name("hyper::proto::h1"), "hyper-proto-h1");
/// ```
pub fn provider_name(target: &str) -> String {
    target.replace("::", "-")
}

/// Whether some session records at least one event of this layer's providers now: the
/// one atomic load every hook makes first.
pub fn is_recording() -> bool {
    ACTIVE.load(std::sync::atomic::Ordering::Relaxed)
}

/// The layer: records spans and events as eventpipe events (see the crate docs).
///
/// All instances share the providers, which are process-wide like eventpipe's; install one
/// per subscriber.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventPipeLayer {
    _private: (),
}

impl EventPipeLayer {
    /// The layer.
    pub fn new() -> Self {
        eventpipe_core::server::warn_if_unserved("eventpipe-tracing's layer");
        EventPipeLayer { _private: () }
    }
}

impl<S> Layer<S> for EventPipeLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        // Declare the target's provider now, so that its enable callback hears of sessions
        // that name it before anything from it is recorded.
        if let Some(_busy) = state::enter() {
            state::callsite(meta);
        }
        Interest::always()
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if ACTIVE.load(std::sync::atomic::Ordering::Relaxed) {
            record_new_span(attrs, id, &ctx);
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if ACTIVE.load(std::sync::atomic::Ordering::Relaxed) {
            record_event(event);
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if ACTIVE.load(std::sync::atomic::Ordering::Relaxed) {
            record_span_edge(id, &ctx, SpanEdge::Start);
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if ACTIVE.load(std::sync::atomic::Ordering::Relaxed) {
            record_span_edge(id, &ctx, SpanEdge::Stop);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if ACTIVE.load(std::sync::atomic::Ordering::Relaxed) {
            record_span_edge(&id, &ctx, SpanEdge::Close);
        }
    }
}

#[derive(Clone, Copy)]
enum SpanEdge {
    Start,
    Stop,
    Close,
}

#[inline(never)]
fn record_event(event: &Event<'_>) {
    let Some(_busy) = state::enter() else { return };
    let meta = event.metadata();
    let callsite = state::callsite(meta);
    if !callsite.level_events().events_probe.is_enabled() {
        return;
    }
    let mut sig = SigVisitor::new();
    event.record(&mut sig);
    let (desc, layout) = callsite.descriptor(&sig.0, meta);
    #[allow(unsafe_code)]
    // SAFETY: `desc` declares exactly `layout`'s slots (`Callsite::descriptor`), and
    // `Encode` puts each slot once, as its kind, whatever the visit does (see `Encode`).
    unsafe {
        desc.write_unchecked(|w| {
            let mut enc = Encode::new(w, layout);
            event.record(&mut enc);
            enc.finish();
        });
    }
}

#[inline(never)]
fn record_new_span<S>(attrs: &Attributes<'_>, id: &Id, ctx: &Context<'_, S>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(_busy) = state::enter() else { return };
    let meta = attrs.metadata();
    let callsite = state::callsite(meta);
    // SpanNew has SpanStart's level and keyword, so SpanStart's mask answers for it.
    if !callsite.level_events().span_start.is_enabled() {
        return;
    }
    let parent = match attrs.parent() {
        Some(parent) => parent.into_u64(),
        None if attrs.is_contextual() => ctx.current_span().id().map_or(0, Id::into_u64),
        None => 0,
    };
    let mut sig = SigVisitor::new();
    attrs.record(&mut sig);
    let (desc, layout) = callsite.descriptor(&sig.0, meta);
    #[allow(unsafe_code)]
    // SAFETY: a span's descriptor declares the id, the parent, the name and then exactly
    // `layout`'s slots (`Callsite::descriptor`); `Encode` puts each slot once, as its kind.
    unsafe {
        desc.write_unchecked(|w| {
            w.put(&id.into_u64());
            w.put(&parent);
            w.put_text(meta.name());
            let mut enc = Encode::new(w, layout);
            attrs.record(&mut enc);
            enc.finish();
        });
    }
}

#[inline(never)]
fn record_span_edge<S>(id: &Id, ctx: &Context<'_, S>, edge: SpanEdge)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(_busy) = state::enter() else { return };
    let Some(meta) = ctx.metadata(id) else { return };
    let events = state::callsite(meta).level_events();
    let span_id = id.into_u64();
    match edge {
        SpanEdge::Start | SpanEdge::Stop => {
            let desc = match edge {
                SpanEdge::Start => &events.span_start,
                _ => &events.span_stop,
            };
            desc.write_with(|w| {
                w.put(&span_id);
                w.put_text(meta.name());
            });
        }
        SpanEdge::Close => events.span_close.write_with(|w| w.put(&span_id)),
    }
}
