//! Field values: the type signature of one recording, and the encoder that writes the values
//! in that signature's layout.
//!
//! `tracing` values carry no static type: a callsite's field is whatever its value's
//! `Value::record` calls on the visitor (`record_i64`, `record_str`, `record_debug`...), and
//! an `Option` that is `None` or a field left `Empty` records nothing at all. So each
//! recording is visited twice: once by [`SigVisitor`] to learn the layout (cheap: nothing is
//! formatted), which picks the event descriptor, and once by [`Encode`] to write the values.

use std::fmt;

use eventpipe_core::{FieldKind, UncheckedPayloadWriter};
use tracing_core::field::{Field, Visit};

/// At most this many recorded fields go into an event; later ones are left out. `tracing`'s
/// macros accept 32 fields per callsite.
pub(crate) const MAX_FIELDS: usize = 32;

/// The payload type a recorded value is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    I64,
    U64,
    F64,
    Bool,
    /// `record_str`, `record_debug` (so `?x`, `%x` and the message), `record_error`, and
    /// 128-bit integers, which have no payload type of their own.
    Str,
    Bytes,
}

impl Kind {
    pub(crate) fn field_kind(self) -> FieldKind {
        match self {
            Kind::I64 => FieldKind::I64,
            Kind::U64 => FieldKind::U64,
            Kind::F64 => FieldKind::F64,
            Kind::Bool => FieldKind::Bool,
            Kind::Str => FieldKind::Str,
            Kind::Bytes => FieldKind::Bytes,
        }
    }
}

/// The layout of one recording: for each recorded field in visiting order, its index in the
/// callsite's field set and its kind. Fields that recorded nothing are absent.
#[derive(Clone, Copy)]
pub(crate) struct Sig {
    len: u8,
    slots: [(u16, Kind); MAX_FIELDS],
}

impl PartialEq for Sig {
    fn eq(&self, other: &Sig) -> bool {
        self.slots() == other.slots()
    }
}

impl fmt::Debug for Sig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.slots()).finish()
    }
}

impl Sig {
    pub(crate) const EMPTY: Sig = Sig {
        len: 0,
        slots: [(0, Kind::I64); MAX_FIELDS],
    };

    pub(crate) fn slots(&self) -> &[(u16, Kind)] {
        &self.slots[..usize::from(self.len)]
    }

    fn push(&mut self, field: &Field, kind: Kind) {
        let n = usize::from(self.len);
        if n < MAX_FIELDS {
            // Field sets beyond u16::MAX fields do not occur; the index only tells apart
            // recordings of the same callsite that leave different fields out.
            self.slots[n] = (field.index() as u16, kind);
            self.len += 1;
        }
    }

    /// The same fields, every one written as a string: the layout a callsite falls back to
    /// once it has used up its signatures.
    pub(crate) fn all_strings(&self) -> Sig {
        let mut s = *self;
        for slot in &mut s.slots[..usize::from(s.len)] {
            slot.1 = Kind::Str;
        }
        s
    }
}

/// Learns the [`Sig`] of a recording without formatting anything.
#[derive(Debug)]
pub(crate) struct SigVisitor(pub(crate) Sig);

impl SigVisitor {
    pub(crate) fn new() -> Self {
        SigVisitor(Sig::EMPTY)
    }
}

impl Visit for SigVisitor {
    fn record_f64(&mut self, field: &Field, _: f64) {
        self.0.push(field, Kind::F64);
    }
    fn record_i64(&mut self, field: &Field, _: i64) {
        self.0.push(field, Kind::I64);
    }
    fn record_u64(&mut self, field: &Field, _: u64) {
        self.0.push(field, Kind::U64);
    }
    fn record_i128(&mut self, field: &Field, _: i128) {
        self.0.push(field, Kind::Str);
    }
    fn record_u128(&mut self, field: &Field, _: u128) {
        self.0.push(field, Kind::Str);
    }
    fn record_bool(&mut self, field: &Field, _: bool) {
        self.0.push(field, Kind::Bool);
    }
    fn record_str(&mut self, field: &Field, _: &str) {
        self.0.push(field, Kind::Str);
    }
    fn record_bytes(&mut self, field: &Field, _: &[u8]) {
        self.0.push(field, Kind::Bytes);
    }
    fn record_error(&mut self, field: &Field, _: &(dyn std::error::Error + 'static)) {
        self.0.push(field, Kind::Str);
    }
    fn record_debug(&mut self, field: &Field, _: &dyn fmt::Debug) {
        self.0.push(field, Kind::Str);
    }
}

/// Writes a recording's values in the layout of `sig`.
///
/// The payload always matches the descriptor, whatever the second visit does: a value whose
/// kind differs from the slot's (only a `Value` that records differently each time could do
/// that, or the all-strings fallback layout) is written as its text when the slot is a
/// string, else as the slot type's zero; values past the layout are skipped; slots the visit
/// did not reach are written as zeros by [`finish`](Encode::finish).
pub(crate) struct Encode<'a, 'w> {
    w: &'a mut UncheckedPayloadWriter<'w>,
    sig: &'a Sig,
    pos: usize,
}

impl<'a, 'w> Encode<'a, 'w> {
    pub(crate) fn new(w: &'a mut UncheckedPayloadWriter<'w>, sig: &'a Sig) -> Self {
        Encode { w, sig, pos: 0 }
    }

    /// The kind of the next slot, if any is left.
    fn next(&mut self) -> Option<Kind> {
        let kind = self.sig.slots().get(self.pos).map(|s| s.1);
        self.pos += 1;
        kind
    }

    fn value(
        &mut self,
        have: Kind,
        put: impl FnOnce(&mut UncheckedPayloadWriter<'w>),
        text: impl FnOnce(&mut UncheckedPayloadWriter<'w>),
    ) {
        match self.next() {
            None => {}
            Some(want) if want == have => put(self.w),
            Some(Kind::Str) => text(self.w),
            Some(want) => put_zero(self.w, want),
        }
    }

    /// Fills the slots the visit did not reach.
    pub(crate) fn finish(mut self) {
        while let Some(kind) = self.next() {
            put_zero(self.w, kind);
        }
    }
}

impl Visit for Encode<'_, '_> {
    fn record_f64(&mut self, _: &Field, v: f64) {
        self.value(Kind::F64, |w| w.put(&v), |w| w.put_fmt(format_args!("{v}")));
    }
    fn record_i64(&mut self, _: &Field, v: i64) {
        self.value(Kind::I64, |w| w.put(&v), |w| w.put_fmt(format_args!("{v}")));
    }
    fn record_u64(&mut self, _: &Field, v: u64) {
        self.value(Kind::U64, |w| w.put(&v), |w| w.put_fmt(format_args!("{v}")));
    }
    fn record_i128(&mut self, _: &Field, v: i128) {
        let text = |w: &mut UncheckedPayloadWriter<'_>| w.put_fmt(format_args!("{v}"));
        self.value(Kind::Str, text, text);
    }
    fn record_u128(&mut self, _: &Field, v: u128) {
        let text = |w: &mut UncheckedPayloadWriter<'_>| w.put_fmt(format_args!("{v}"));
        self.value(Kind::Str, text, text);
    }
    fn record_bool(&mut self, _: &Field, v: bool) {
        self.value(
            Kind::Bool,
            |w| w.put(&v),
            |w| w.put_fmt(format_args!("{v}")),
        );
    }
    fn record_str(&mut self, _: &Field, v: &str) {
        let text = |w: &mut UncheckedPayloadWriter<'_>| w.put_text(v);
        self.value(Kind::Str, text, text);
    }
    fn record_bytes(&mut self, _: &Field, v: &[u8]) {
        self.value(
            Kind::Bytes,
            |w| w.put(v),
            |w| w.put_fmt(format_args!("{v:?}")),
        );
    }
    fn record_error(&mut self, _: &Field, v: &(dyn std::error::Error + 'static)) {
        let text = |w: &mut UncheckedPayloadWriter<'_>| w.put_fmt(format_args!("{v}"));
        self.value(Kind::Str, text, text);
    }
    fn record_debug(&mut self, _: &Field, v: &dyn fmt::Debug) {
        let text = |w: &mut UncheckedPayloadWriter<'_>| w.put_fmt(format_args!("{v:?}"));
        self.value(Kind::Str, text, text);
    }
}

/// The zero of a kind (an empty string, an empty byte array).
fn put_zero(w: &mut UncheckedPayloadWriter<'_>, kind: Kind) {
    match kind {
        Kind::I64 => w.put(&0i64),
        Kind::U64 => w.put(&0u64),
        Kind::F64 => w.put(&0f64),
        Kind::Bool => w.put(&false),
        Kind::Str => w.put(""),
        Kind::Bytes => w.put(&[][..] as &[u8]),
    }
}
