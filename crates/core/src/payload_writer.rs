//! What an untyped write's `fill` gets ([`EventDescriptor::write_with`](crate::EventDescriptor::write_with)):
//! a writer that puts fields in the order the descriptor declares them and checks each
//! value's kind against the declared field's (`payload_check.rs`). A payload that breaks
//! the layout (a value of another kind, one too many, one missing) would have readers
//! misparse every field after it, so such an event is not written. Typed events
//! ([`TypedEvent`](crate::TypedEvent)) are checked by the compiler instead and bypass this.
//! Code that declares a layout at run time and writes from the same description (the
//! `tracing` layer) may take the `unsafe`
//! [`EventDescriptor::write_unchecked`](crate::EventDescriptor::write_unchecked) and its
//! [`UncheckedPayloadWriter`]: the same encodings, checked only in debug builds.

use std::fmt;

use crate::payload::{PayloadBuffer, PayloadField};
use crate::payload_check::{Check, Mismatch};
use crate::provider::{FieldKind, FieldSpec};

/// Puts an untyped event's payload fields, in declaration order, each checked against the
/// declared field's kind. A struct field's members are put one after the other.
pub struct PayloadWriter<'a> {
    buffer: &'a mut PayloadBuffer,
    check: Check,
}

impl fmt::Debug for PayloadWriter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PayloadWriter")
            .field("bytes", &self.buffer.as_bytes())
            .field("mismatch", &self.check.mismatch())
            .finish()
    }
}

impl<'a> PayloadWriter<'a> {
    #[inline]
    pub(crate) fn new(buffer: &'a mut PayloadBuffer, fields: &'static [FieldSpec]) -> Self {
        PayloadWriter {
            buffer,
            check: Check::new(fields),
        }
    }

    /// Puts the next field. A value whose kind is not the declared field's (or one past the
    /// last field) spoils the payload: the event is not written.
    #[inline]
    pub fn put<T: PayloadField + ?Sized>(&mut self, value: &T) {
        if self.check.expect(T::KIND) {
            value.encode(self.buffer);
        }
    }

    /// Puts the next field, a string, as `text` with each NUL character written as U+FFFD
    /// (a reader would end the string at a NUL and read the rest as the following fields).
    #[inline]
    pub fn put_text(&mut self, text: &str) {
        if self.check.expect(FieldKind::Str) {
            put_text(self.buffer, text);
        }
    }

    /// Puts the next field, a string, as the formatted `args` (NUL characters as U+FFFD, as
    /// [`put_text`](Self::put_text)), without building a `String`.
    pub fn put_fmt(&mut self, args: fmt::Arguments<'_>) {
        if self.check.expect(FieldKind::Str) {
            put_fmt(self.buffer, args);
        }
    }

    /// Whether every declared field was put, and each as its declared kind.
    #[inline]
    pub(crate) fn finish(self) -> Result<(), Mismatch> {
        self.check.finish()
    }
}

/// Puts an event's payload fields with no check against its declared layout in release
/// builds: what [`EventDescriptor::write_unchecked`](crate::EventDescriptor::write_unchecked)
/// gives its fill, whose caller promises the layout. The encodings are [`PayloadWriter`]'s.
/// A debug build checks as [`PayloadWriter`] does, and panics at a break.
pub struct UncheckedPayloadWriter<'a> {
    buffer: &'a mut PayloadBuffer,
    #[cfg(debug_assertions)]
    check: Check,
}

impl fmt::Debug for UncheckedPayloadWriter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UncheckedPayloadWriter")
            .field("bytes", &self.buffer.as_bytes())
            .finish()
    }
}

impl<'a> UncheckedPayloadWriter<'a> {
    #[inline]
    pub(crate) fn new(buffer: &'a mut PayloadBuffer, fields: &'static [FieldSpec]) -> Self {
        #[cfg(not(debug_assertions))]
        let _ = fields;
        UncheckedPayloadWriter {
            buffer,
            #[cfg(debug_assertions)]
            check: Check::new(fields),
        }
    }

    /// In debug builds, notes a value of `kind` put (the break shows at [`finish`](Self::finish)).
    #[inline(always)]
    fn expect(&mut self, kind: FieldKind) {
        #[cfg(debug_assertions)]
        self.check.expect(kind);
        #[cfg(not(debug_assertions))]
        let _ = kind;
    }

    /// Puts the next field (see [`PayloadWriter::put`]).
    #[inline]
    pub fn put<T: PayloadField + ?Sized>(&mut self, value: &T) {
        self.expect(T::KIND);
        value.encode(self.buffer);
    }

    /// Puts the next field, a string (see [`PayloadWriter::put_text`]).
    #[inline]
    pub fn put_text(&mut self, text: &str) {
        self.expect(FieldKind::Str);
        put_text(self.buffer, text);
    }

    /// Puts the next field, a string, as the formatted `args` (see
    /// [`PayloadWriter::put_fmt`]).
    #[inline]
    pub fn put_fmt(&mut self, args: fmt::Arguments<'_>) {
        self.expect(FieldKind::Str);
        put_fmt(self.buffer, args);
    }

    /// Release builds: `Ok`, unchecked. Debug builds: as [`PayloadWriter`]'s finish.
    #[inline]
    pub(crate) fn finish(self) -> Result<(), Mismatch> {
        #[cfg(debug_assertions)]
        return self.check.finish();
        #[cfg(not(debug_assertions))]
        Ok(())
    }
}

/// `text` as a NUL-terminated string.
#[inline]
fn put_text(buffer: &mut PayloadBuffer, text: &str) {
    put_utf16(buffer, text);
    buffer.bytes(&[0, 0]);
}

/// The formatted `args` as a NUL-terminated string.
#[inline]
fn put_fmt(buffer: &mut PayloadBuffer, args: fmt::Arguments<'_>) {
    match args.as_str() {
        Some(text) => put_utf16(buffer, text),
        None => {
            // A failing Debug or Display impl leaves what it wrote so far; the string is
            // terminated either way.
            let _ = fmt::Write::write_fmt(&mut Utf16(buffer), args);
        }
    }
    buffer.bytes(&[0, 0]);
}

/// `text` as UTF-16 code units, NUL as U+FFFD, without a terminator.
fn put_utf16(buffer: &mut PayloadBuffer, text: &str) {
    let mut units = [0u8; 128];
    if text.is_ascii() {
        // The common case, without decoding UTF-8: each byte is one code unit.
        for chunk in text.as_bytes().chunks(units.len() / 2) {
            for (pair, &b) in units.chunks_exact_mut(2).zip(chunk) {
                pair.copy_from_slice(&if b == 0 { [0xFD, 0xFF] } else { [b, 0] });
            }
            buffer.bytes(&units[..2 * chunk.len()]);
        }
        return;
    }
    let mut n = 0;
    for unit in text.encode_utf16() {
        if n == units.len() {
            buffer.bytes(&units);
            n = 0;
        }
        let unit = if unit == 0 { 0xFFFD } else { unit };
        units[n..n + 2].copy_from_slice(&unit.to_le_bytes());
        n += 2;
    }
    buffer.bytes(&units[..n]);
}

/// Formatted text streamed into the payload as UTF-16.
struct Utf16<'a>(&'a mut PayloadBuffer);

impl fmt::Write for Utf16<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        put_utf16(self.0, s);
        Ok(())
    }
}
