//! What an untyped write's `fill` gets ([`EventDescriptor::write_with`](crate::EventDescriptor::write_with)):
//! a writer that puts fields in the order the descriptor declares them and checks each
//! value's kind against the declared field's. A payload that breaks the layout (a value of
//! another kind, one too many, one missing) would have readers misparse every field after
//! it, so such an event is not written. Typed events ([`TypedEvent`](crate::TypedEvent)) are checked
//! by the compiler instead and bypass this.

use std::fmt;

use crate::payload::{PayloadBuffer, PayloadField};
use crate::provider::{FieldKind, FieldSpec};

/// Puts an untyped event's payload fields, in declaration order, each checked against the
/// declared field's kind. A struct field's members are put one after the other.
pub struct PayloadWriter<'a> {
    buffer: &'a mut PayloadBuffer,
    expected: Expected,
    mismatch: Option<Mismatch>,
}

impl fmt::Debug for PayloadWriter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PayloadWriter")
            .field("bytes", &self.buffer.as_bytes())
            .field("mismatch", &self.mismatch)
            .finish()
    }
}

/// How a payload broke its declared layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// Field `index` (counting struct members) is declared `declared` but was put as `put`.
    Kind {
        index: usize,
        declared: FieldKind,
        put: FieldKind,
    },
    /// A value was put after the last declared field.
    TooMany { declared: usize },
    /// The fill returned with field `index` onwards not put.
    Missing { index: usize },
    /// Structs nest deeper than the writer follows.
    TooDeep,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Kind {
                index,
                declared,
                put,
            } => write!(
                f,
                "field {index} is declared {declared:?} but was put as {put:?}"
            ),
            Mismatch::TooMany { declared } => {
                write!(f, "a value was put after the {declared} declared fields")
            }
            Mismatch::Missing { index } => write!(f, "fields from {index} on were not put"),
            Mismatch::TooDeep => write!(f, "structs nest more than {MAX_DEPTH} deep"),
        }
    }
}

impl<'a> PayloadWriter<'a> {
    pub(crate) fn new(buffer: &'a mut PayloadBuffer, fields: &'static [FieldSpec]) -> Self {
        PayloadWriter {
            buffer,
            expected: Expected::new(fields),
            mismatch: None,
        }
    }

    /// Puts the next field. A value whose kind is not the declared field's (or one past the
    /// last field) spoils the payload: the event is not written.
    #[inline]
    pub fn put<T: PayloadField + ?Sized>(&mut self, value: &T) {
        if self.expect(T::KIND) {
            value.encode(self.buffer);
        }
    }

    /// Puts the next field, a string, as `text` with each NUL character written as U+FFFD
    /// (a reader would end the string at a NUL and read the rest as the following fields).
    pub fn put_text(&mut self, text: &str) {
        if self.expect(FieldKind::Str) {
            put_utf16(self.buffer, text);
            self.buffer.bytes(&[0, 0]);
        }
    }

    /// Puts the next field, a string, as the formatted `args` (NUL characters as U+FFFD, as
    /// [`put_text`](Self::put_text)), without building a `String`.
    pub fn put_fmt(&mut self, args: fmt::Arguments<'_>) {
        if !self.expect(FieldKind::Str) {
            return;
        }
        match args.as_str() {
            Some(text) => put_utf16(self.buffer, text),
            None => {
                // A failing Debug or Display impl leaves what it wrote so far; the string is
                // terminated either way.
                let _ = fmt::Write::write_fmt(&mut Utf16(self.buffer), args);
            }
        }
        self.buffer.bytes(&[0, 0]);
    }

    /// Whether the next declared field is of `kind`; records the mismatch if not.
    #[inline]
    fn expect(&mut self, kind: FieldKind) -> bool {
        if self.mismatch.is_some() {
            return false;
        }
        let index = self.expected.index;
        match self.expected.next() {
            Ok(Some(declared))
                if std::mem::discriminant(&declared) == std::mem::discriminant(&kind) =>
            {
                true
            }
            Ok(Some(declared)) => {
                self.mismatch = Some(Mismatch::Kind {
                    index,
                    declared,
                    put: kind,
                });
                false
            }
            Ok(None) => {
                self.mismatch = Some(Mismatch::TooMany { declared: index });
                false
            }
            Err(too_deep) => {
                self.mismatch = Some(too_deep);
                false
            }
        }
    }

    /// Whether every declared field was put, and each as its declared kind.
    pub(crate) fn finish(mut self) -> Result<(), Mismatch> {
        if let Some(mismatch) = self.mismatch {
            return Err(mismatch);
        }
        let index = self.expected.index;
        match self.expected.next()? {
            None => Ok(()),
            Some(_) => Err(Mismatch::Missing { index }),
        }
    }
}

/// How deep structs may nest in a checked payload (the runtime's own counters nest two).
const MAX_DEPTH: usize = 4;

/// The declared fields still to be put, struct members flattened in order. Small, and
/// without a stack: most events declare no struct, and their check is an index and one byte
/// compared per field; a struct's next member is found by walking it again (a few fields,
/// in events written about once a second).
struct Expected {
    /// The event's declared fields, and the next position in them.
    top: &'static [FieldSpec],
    at: usize,
    /// Inside the struct at `at`: how many of its (flattened) members were taken.
    member: usize,
    /// How many fields have been taken, counting struct members.
    index: usize,
}

/// The `n`th leaf of `fields`, structs flattened; or how many leaves there are, when fewer.
fn nth_leaf(
    fields: &[FieldSpec],
    mut n: usize,
    depth: usize,
) -> Result<Result<FieldKind, usize>, Mismatch> {
    let mut counted = 0;
    for field in fields {
        match field.kind {
            FieldKind::Struct(members) => {
                if depth + 1 >= MAX_DEPTH {
                    return Err(Mismatch::TooDeep);
                }
                match nth_leaf(members, n, depth + 1)? {
                    Ok(kind) => return Ok(Ok(kind)),
                    Err(leaves) => {
                        n -= leaves;
                        counted += leaves;
                    }
                }
            }
            kind if n == 0 => return Ok(Ok(kind)),
            _ => {
                n -= 1;
                counted += 1;
            }
        }
    }
    Ok(Err(counted))
}

impl Expected {
    #[inline]
    fn new(fields: &'static [FieldSpec]) -> Expected {
        Expected {
            top: fields,
            at: 0,
            member: 0,
            index: 0,
        }
    }

    /// The next declared field's kind, entering structs; `None` past the last.
    #[inline]
    fn next(&mut self) -> Result<Option<FieldKind>, Mismatch> {
        loop {
            let Some(field) = self.top.get(self.at) else {
                return Ok(None);
            };
            let FieldKind::Struct(members) = field.kind else {
                self.at += 1;
                self.index += 1;
                return Ok(Some(field.kind));
            };
            match nth_leaf(members, self.member, 1)? {
                Ok(kind) => {
                    self.member += 1;
                    self.index += 1;
                    return Ok(Some(kind));
                }
                Err(_) => {
                    self.at += 1;
                    self.member = 0;
                }
            }
        }
    }
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
