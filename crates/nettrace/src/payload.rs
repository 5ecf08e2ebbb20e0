//! Decoding event payloads into typed values, driven by the event's field descriptions.
//!
//! Decoding is on demand: iterating events never touches payload bytes; only
//! [`crate::Event::decode_payload`] does. Every length read from the payload is checked
//! against the bytes that remain before anything is allocated or looped over.

use std::fmt;

use crate::model::{FieldDesc, FieldType, Guid, SystemTime};

/// A decoded payload value.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // variants are named after their types
pub enum Value {
    Bool(bool),
    I8(i8),
    U8(u8),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
    /// A single character (a UTF-16 or UTF-8 code unit that maps to one).
    Char(char),
    Guid(Guid),
    String(String),
    /// A .NET `DateTime` written by EventSource: FILETIME ticks (100 ns since 1601, UTC).
    DateTime(i64),
    /// A manifest FILETIME.
    FileTime(u64),
    /// A manifest SYSTEMTIME.
    SystemTime(SystemTime),
    /// A System.Decimal's 16 raw bytes.
    Decimal([u8; 16]),
    /// A pointer-sized unsigned value.
    Pointer(u64),
    Bytes(Vec<u8>),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

impl Value {
    /// The value as an unsigned integer, when it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(u64::from(v)),
            Value::U16(v) => Some(u64::from(v)),
            Value::U32(v) => Some(u64::from(v)),
            Value::U64(v) | Value::Pointer(v) | Value::FileTime(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            Value::Bool(b) => Some(u64::from(b)),
            _ => None,
        }
    }

    /// The value as a signed integer, when it is an integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(i64::from(v)),
            Value::I16(v) => Some(i64::from(v)),
            Value::I32(v) => Some(i64::from(v)),
            Value::I64(v) | Value::DateTime(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// The value as a float, for any numeric value.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(f64::from(v)),
            Value::F64(v) => Some(v),
            _ => self
                .as_i64()
                .map(|v| v as f64)
                .or_else(|| self.as_u64().map(|v| v as f64)),
        }
    }

    /// The value as a string slice, when it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U8(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::Char(v) => write!(f, "{v}"),
            Value::Guid(v) => write!(f, "{v}"),
            Value::String(v) => write!(f, "{v}"),
            Value::DateTime(v) => write!(f, "{}", filetime_to_rfc3339(*v)),
            Value::FileTime(v) => write!(f, "{}", filetime_to_rfc3339(*v as i64)),
            Value::SystemTime(t) => write!(
                f,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}",
                t.year, t.month, t.day, t.hour, t.minute, t.second, t.millisecond
            ),
            Value::Decimal(b) => write!(f, "decimal({b:02x?})"),
            Value::Pointer(v) => write!(f, "0x{v:x}"),
            Value::Bytes(b) => {
                for byte in b {
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
            Value::Array(items) => write_array(f, items.iter()),
            Value::Object(fields) => write_object(f, fields.iter().map(|(n, v)| (n.as_str(), v))),
        }
    }
}

/// `[a,b,c]`: how [`Value`] and [`ValueRef`] print arrays.
fn write_array<T: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    items: impl Iterator<Item = T>,
) -> fmt::Result {
    write!(f, "[")?;
    for (i, item) in items.enumerate() {
        if i > 0 {
            write!(f, ",")?;
        }
        write!(f, "{item}")?;
    }
    write!(f, "]")
}

/// `{a=1, b=2}`: how [`Value`] and [`ValueRef`] print objects.
fn write_object<'n, T: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    members: impl Iterator<Item = (&'n str, T)>,
) -> fmt::Result {
    write!(f, "{{")?;
    for (i, (name, v)) in members.enumerate() {
        if i > 0 {
            write!(f, ", ")?;
        }
        write!(f, "{name}={v}")?;
    }
    write!(f, "}}")
}

fn filetime_to_rfc3339(ticks: i64) -> String {
    // FILETIME epoch 1601-01-01 is 11644473600 s before the Unix epoch.
    let nanos = i128::from(ticks) * 100 - 11_644_473_600i128 * 1_000_000_000;
    crate::time::format_unix_nanos(nanos)
}

/// A UTF-16LE string borrowed from a payload, decoded only when asked.
///
/// Unpaired surrogates decode to U+FFFD, as in [`Value::String`]; an odd trailing byte (a
/// string cut off by the end of the payload) is ignored.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Utf16Str<'a> {
    bytes: &'a [u8],
}

impl<'a> Utf16Str<'a> {
    /// The raw little-endian bytes, without the terminator.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of UTF-16 code units.
    pub fn len_units(&self) -> usize {
        self.bytes.len() / 2
    }

    /// Whether the string is empty.
    pub fn is_empty(&self) -> bool {
        self.len_units() == 0
    }

    /// The code units.
    pub fn units(&self) -> impl Iterator<Item = u16> + 'a {
        self.bytes
            .chunks_exact(2)
            .map(|p| u16::from_le_bytes([p[0], p[1]]))
    }

    /// The characters; unpaired surrogates become U+FFFD.
    pub fn chars(&self) -> impl Iterator<Item = char> + 'a {
        char::decode_utf16(self.units()).map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
    }

    /// The string, decoded into a `String` (what [`Value::String`] holds).
    pub fn to_string_lossy(&self) -> String {
        utf16_to_string(self.bytes)
    }
}

impl fmt::Display for Utf16Str<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        self.chars().try_for_each(|c| f.write_char(c))
    }
}

impl fmt::Debug for Utf16Str<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string_lossy())
    }
}

impl PartialEq<str> for Utf16Str<'_> {
    fn eq(&self, other: &str) -> bool {
        self.units().eq(other.encode_utf16())
    }
}

/// A decoded payload value that borrows strings and byte arrays from the payload instead of
/// copying them; see [`crate::Event::for_each_field`].
///
/// Scalars are decoded as in [`Value`]. Strings and byte arrays stay borrowed, and so do
/// arrays of other element types and nested objects ([`ArrayRef`], [`ObjectRef`]): they
/// were checked when the field was decoded and are decoded again, element by element, as
/// they are iterated, so a payload is decoded without allocating. [`ValueRef::to_value`]
/// gives exactly what [`crate::Event::decode_payload`] gives for the same field.
#[derive(Debug, Clone, Copy, PartialEq)]
#[allow(missing_docs)] // scalar variants are named after their types, as in `Value`
pub enum ValueRef<'a> {
    Bool(bool),
    I8(i8),
    U8(u8),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
    /// A single character (a UTF-16 or UTF-8 code unit that maps to one).
    Char(char),
    Guid(Guid),
    /// A UTF-16 string: a `Utf16String` field or an array of `Char16`.
    Utf16(Utf16Str<'a>),
    /// 8-bit text, as stored (an `AnsiString`, a `Utf8U16Len` string or an array of
    /// `Char8`); [`ValueRef::to_value`] converts it with `String::from_utf8_lossy`.
    Str8(&'a [u8]),
    /// A .NET `DateTime` written by EventSource: FILETIME ticks (100 ns since 1601, UTC).
    DateTime(i64),
    /// A manifest FILETIME.
    FileTime(u64),
    /// A manifest SYSTEMTIME.
    SystemTime(SystemTime),
    /// A System.Decimal's 16 raw bytes.
    Decimal([u8; 16]),
    /// A pointer-sized unsigned value.
    Pointer(u64),
    /// A byte array.
    Bytes(&'a [u8]),
    /// An array of any other element type.
    Array(ArrayRef<'a>),
    /// A nested object.
    Object(ObjectRef<'a>),
}

impl ValueRef<'_> {
    /// The owned value, as [`crate::Event::decode_payload`] returns it.
    pub fn to_value(&self) -> Value {
        self.into_value()
    }

    /// The owned value, as [`crate::Event::decode_payload`] returns it.
    pub fn into_value(self) -> Value {
        match self {
            ValueRef::Bool(v) => Value::Bool(v),
            ValueRef::I8(v) => Value::I8(v),
            ValueRef::U8(v) => Value::U8(v),
            ValueRef::I16(v) => Value::I16(v),
            ValueRef::U16(v) => Value::U16(v),
            ValueRef::I32(v) => Value::I32(v),
            ValueRef::U32(v) => Value::U32(v),
            ValueRef::I64(v) => Value::I64(v),
            ValueRef::U64(v) => Value::U64(v),
            ValueRef::F32(v) => Value::F32(v),
            ValueRef::F64(v) => Value::F64(v),
            ValueRef::Char(v) => Value::Char(v),
            ValueRef::Guid(v) => Value::Guid(v),
            ValueRef::Utf16(s) => Value::String(s.to_string_lossy()),
            ValueRef::Str8(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
            ValueRef::DateTime(v) => Value::DateTime(v),
            ValueRef::FileTime(v) => Value::FileTime(v),
            ValueRef::SystemTime(v) => Value::SystemTime(v),
            ValueRef::Decimal(v) => Value::Decimal(v),
            ValueRef::Pointer(v) => Value::Pointer(v),
            ValueRef::Bytes(b) => Value::Bytes(b.to_vec()),
            ValueRef::Array(a) => Value::Array(a.iter().map(ValueRef::into_value).collect()),
            ValueRef::Object(o) => Value::Object(
                o.fields()
                    .map(|(f, v)| (f.name.clone(), v.into_value()))
                    .collect(),
            ),
        }
    }

    /// The value as an unsigned integer, when it is a non-negative integer of any width
    /// (as [`Value::as_u64`]).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            ValueRef::U8(v) => Some(u64::from(v)),
            ValueRef::U16(v) => Some(u64::from(v)),
            ValueRef::U32(v) => Some(u64::from(v)),
            ValueRef::U64(v) | ValueRef::Pointer(v) | ValueRef::FileTime(v) => Some(v),
            ValueRef::I8(v) => u64::try_from(v).ok(),
            ValueRef::I16(v) => u64::try_from(v).ok(),
            ValueRef::I32(v) => u64::try_from(v).ok(),
            ValueRef::I64(v) => u64::try_from(v).ok(),
            ValueRef::Bool(b) => Some(u64::from(b)),
            _ => None,
        }
    }
}

impl fmt::Display for ValueRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueRef::Utf16(s) => write!(f, "{s}"),
            ValueRef::Str8(b) => write!(f, "{}", String::from_utf8_lossy(b)),
            ValueRef::Array(a) => write_array(f, a.iter()),
            ValueRef::Object(o) => write_object(f, o.fields().map(|(d, v)| (d.name.as_str(), v))),
            other => write!(f, "{}", other.to_value()),
        }
    }
}

// Handed to the caller's closure for every field: keep it five words.
const _: () = assert!(std::mem::size_of::<ValueRef<'static>>() <= 40);

/// An array in a payload, borrowed: its element type, its length and its bytes, checked when
/// the field was decoded; [`ArrayRef::iter`] decodes the elements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArrayRef<'a> {
    elem: &'a FieldType,
    bytes: &'a [u8],
    // Small fields, so that a `ValueRef` stays five words: it is handed to the caller's
    // closure for every field. `len` fits: every element takes at least a byte, or the
    // count is at most `u16::MAX` (`decode_elements`).
    len: u32,
    pointer_size: u8,
    depth: u8,
}

impl<'a> ArrayRef<'a> {
    /// The elements' type.
    pub fn element_type(&self) -> &'a FieldType {
        self.elem
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes the elements occupy in the payload.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The elements, decoded one by one.
    pub fn iter(&self) -> ArrayIter<'a> {
        let depth = u32::from(self.depth);
        ArrayIter {
            elem: self.elem,
            elem_size: fixed_size(self.elem, u32::from(self.pointer_size), depth),
            remaining: self.len as usize,
            cursor: PayloadCursor {
                data: self.bytes,
                pos: 0,
                pointer_size: u32::from(self.pointer_size),
            },
            depth,
        }
    }
}

impl<'a> IntoIterator for ArrayRef<'a> {
    type Item = ValueRef<'a>;
    type IntoIter = ArrayIter<'a>;
    fn into_iter(self) -> ArrayIter<'a> {
        self.iter()
    }
}

/// The elements of an [`ArrayRef`].
#[derive(Debug, Clone)]
pub struct ArrayIter<'a> {
    elem: &'a FieldType,
    elem_size: Option<usize>,
    remaining: usize,
    cursor: PayloadCursor<'a>,
    depth: u32,
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = ValueRef<'a>;

    fn next(&mut self) -> Option<ValueRef<'a>> {
        self.remaining = self.remaining.checked_sub(1)?;
        // The array was decoded in full when its field was, so this cannot fail; if it
        // did, the iteration would end rather than yield something else.
        let item = match self.elem {
            FieldType::Object(fields) => {
                object_ref(fields, &mut self.cursor, self.elem_size, self.depth)
            }
            elem => decode_ref(elem, &mut self.cursor, &NoSiblings, self.depth),
        };
        match item {
            Ok(v) => Some(v),
            Err(_) => {
                self.remaining = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
}

/// A nested object in a payload, borrowed: its fields' descriptions and its bytes, checked
/// when the field was decoded; [`ObjectRef::fields`] decodes the members.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ObjectRef<'a> {
    // A thin reference, for the size of `ValueRef` (see `ArrayRef`).
    fields: &'a Vec<FieldDesc>,
    bytes: &'a [u8],
    pointer_size: u8,
    depth: u8,
}

impl<'a> ObjectRef<'a> {
    /// The members' descriptions.
    pub fn descriptions(&self) -> &'a [FieldDesc] {
        self.fields
    }

    /// The bytes the object occupies in the payload.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The members with their values, decoded one by one.
    pub fn fields(&self) -> ObjectFields<'a> {
        ObjectFields {
            cursor: PayloadCursor {
                data: self.bytes,
                pos: 0,
                pointer_size: u32::from(self.pointer_size),
            },
            counts: Counts::new(self.fields),
            depth: u32::from(self.depth),
        }
    }

    /// The value of the first member named `name`.
    pub fn get(&self, name: &str) -> Option<ValueRef<'a>> {
        self.fields().find(|(f, _)| f.name == name).map(|(_, v)| v)
    }
}

/// The members of an [`ObjectRef`].
#[derive(Debug, Clone)]
pub struct ObjectFields<'a> {
    cursor: PayloadCursor<'a>,
    counts: Counts<'a>,
    depth: u32,
}

impl<'a> Iterator for ObjectFields<'a> {
    type Item = (&'a FieldDesc, ValueRef<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let f = self.counts.fields.get(self.counts.decoded)?;
        // Cannot fail (see `ArrayIter::next`).
        match decode_ref(&f.ty, &mut self.cursor, &self.counts, self.depth) {
            Ok(v) => {
                self.counts.push(v.as_u64());
                Some((f, v))
            }
            Err(_) => {
                self.counts.decoded = self.counts.fields.len();
                None
            }
        }
    }
}

/// Why a payload did not match its field descriptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError {
    pub(crate) field: String,
    pub(crate) detail: String,
}

#[derive(Debug, Clone)]
struct PayloadCursor<'a> {
    data: &'a [u8],
    pos: usize,
    pointer_size: u32,
}

type Decoded<T> = std::result::Result<T, String>;

impl<'a> PayloadCursor<'a> {
    #[inline]
    fn take(&mut self, n: usize) -> Decoded<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        match end.and_then(|end| self.data.get(self.pos..end).map(|b| (end, b))) {
            Some((end, out)) => {
                self.pos = end;
                Ok(out)
            }
            None => Err(self.short(n)),
        }
    }
    #[cold]
    #[inline(never)]
    fn short(&self, n: usize) -> String {
        format!(
            "needs {n} bytes at payload offset {}, only {} remain",
            self.pos,
            self.remaining()
        )
    }
    #[inline]
    fn arr<const N: usize>(&mut self) -> Decoded<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    #[inline]
    fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or(&[])
    }
    #[inline]
    fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }
    fn varu64(&mut self) -> Decoded<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let b = self.arr::<1>()?[0];
            value |= u64::from(b & 0x7f).checked_shl(7 * i).unwrap_or(0);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint longer than 10 bytes".into())
    }
}

/// Earlier fields at the same level, which counted arrays take their length from.
trait Siblings {
    /// The value of field `index` as an element count.
    fn count(&self, index: usize) -> Decoded<usize>;
}

/// Array elements have no siblings.
struct NoSiblings;

impl Siblings for NoSiblings {
    fn count(&self, index: usize) -> Decoded<usize> {
        Err(format!("count field #{index} is missing"))
    }
}

/// The fields of one level (the payload's or an object's) decoded so far, kept as counts
/// only (a counted array needs nothing else), on the stack for the first few fields.
#[derive(Debug, Clone)]
struct Counts<'m> {
    fields: &'m [FieldDesc],
    decoded: usize,
    small: [Option<u64>; 16],
    spill: Vec<Option<u64>>,
}

impl<'m> Counts<'m> {
    fn new(fields: &'m [FieldDesc]) -> Self {
        Counts {
            fields,
            decoded: 0,
            small: [None; 16],
            spill: Vec::new(),
        }
    }

    #[inline]
    fn push(&mut self, count: Option<u64>) {
        match self.small.get_mut(self.decoded) {
            Some(slot) => *slot = count,
            None => self.spill.push(count),
        }
        self.decoded += 1;
    }
}

impl Siblings for Counts<'_> {
    fn count(&self, index: usize) -> Decoded<usize> {
        if index >= self.decoded {
            return Err(format!("count field #{index} is missing"));
        }
        let n = match self.small.get(index) {
            Some(n) => *n,
            None => self.spill.get(index - self.small.len()).copied().flatten(),
        };
        let name = self.fields.get(index).map_or("?", |f| f.name.as_str());
        n.and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| format!("count field `{name}` is not a count"))
    }
}

/// Decodes `payload` against `fields`, handing each top-level field to `visit` with its
/// value borrowed from `payload`; returns how many fields were decoded. A payload that ends
/// cleanly between two top-level fields yields the fields decoded so far: older event
/// versions write fewer fields.
#[inline]
pub(crate) fn for_each_field<'m, 'a>(
    fields: &'m [FieldDesc],
    payload: &'a [u8],
    pointer_size: u32,
    visit: impl FnMut(&'m FieldDesc, ValueRef<'a>),
) -> std::result::Result<usize, DecodeError>
where
    'm: 'a,
{
    let counted = fields.iter().any(|f| {
        matches!(
            f.ty,
            FieldType::CountedArray(..) | FieldType::CountedBytes(_)
        )
    });
    if counted {
        return for_each_counted(fields, payload, pointer_size, visit);
    }
    for_each_from(fields, payload, pointer_size, 0, 0, visit)
}

/// [`for_each_field`] for field lists without counted arrays, from top-level field `first`
/// at payload offset `pos` on (the fields before it were decoded already): a field plan
/// hands over here what it does not decode itself.
#[inline]
pub(crate) fn for_each_from<'m, 'a>(
    fields: &'m [FieldDesc],
    payload: &'a [u8],
    pointer_size: u32,
    first: usize,
    pos: usize,
    mut visit: impl FnMut(&'m FieldDesc, ValueRef<'a>),
) -> std::result::Result<usize, DecodeError>
where
    'm: 'a,
{
    // No field takes its length from another, so nothing needs to be remembered.
    let mut c = PayloadCursor {
        data: payload,
        pos: pos.min(payload.len()),
        pointer_size,
    };
    let mut decoded = first;
    for f in fields.get(first..).unwrap_or(&[]) {
        if c.remaining() == 0 && decoded > 0 {
            break;
        }
        match decode_ref(&f.ty, &mut c, &NoSiblings, 0) {
            Ok(v) => visit(f, v),
            Err(detail) => return Err(field_error(f, detail)),
        }
        decoded += 1;
    }
    Ok(decoded)
}

/// [`for_each_field`] for field lists with counted arrays: keeps each field's count.
#[inline(never)]
fn for_each_counted<'m, 'a>(
    fields: &'m [FieldDesc],
    payload: &'a [u8],
    pointer_size: u32,
    mut visit: impl FnMut(&'m FieldDesc, ValueRef<'a>),
) -> std::result::Result<usize, DecodeError>
where
    'm: 'a,
{
    let mut c = PayloadCursor {
        data: payload,
        pos: 0,
        pointer_size,
    };
    let mut top = Counts::new(fields);
    for f in fields {
        if c.remaining() == 0 && top.decoded > 0 {
            break;
        }
        let value = match decode_ref(&f.ty, &mut c, &top, 0) {
            Ok(v) => v,
            Err(detail) => return Err(field_error(f, detail)),
        };
        top.push(value.as_u64());
        visit(f, value);
    }
    Ok(top.decoded)
}

#[cold]
fn field_error(f: &FieldDesc, detail: String) -> DecodeError {
    DecodeError {
        field: f.name.clone(),
        detail,
    }
}

/// Decodes `payload` against `fields` into owned values; see [`for_each_field`].
pub(crate) fn decode<'m>(
    fields: &'m [FieldDesc],
    payload: &[u8],
    pointer_size: u32,
) -> std::result::Result<Vec<(&'m str, Value)>, DecodeError> {
    let mut out: Vec<(&'m str, Value)> = Vec::with_capacity(fields.len());
    for_each_field(fields, payload, pointer_size, |f, v| {
        out.push((&f.name, v.into_value()))
    })?;
    Ok(out)
}

/// UTF-16LE code units to a String in one pass; unpaired surrogates become U+FFFD.
fn utf16_to_string(bytes: &[u8]) -> String {
    let units = bytes
        .chunks_exact(2)
        .map(|p| u16::from_le_bytes([p[0], p[1]]));
    let mut out = String::with_capacity(bytes.len() / 2);
    for ch in char::decode_utf16(units) {
        out.push(ch.unwrap_or(char::REPLACEMENT_CHARACTER));
    }
    out
}

const MAX_DEPTH: u32 = 32;

/// A `Char16` field's value.
#[inline]
pub(crate) fn char16(b: [u8; 2]) -> char {
    char::from_u32(u32::from(u16::from_le_bytes(b))).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// A manifest SYSTEMTIME's value.
#[inline]
pub(crate) fn system_time(b: [u8; 16]) -> SystemTime {
    let w = |i: usize| i16::from_le_bytes([b[2 * i], b[2 * i + 1]]);
    SystemTime {
        year: w(0),
        month: w(1),
        day_of_week: w(2),
        day: w(3),
        hour: w(4),
        minute: w(5),
        second: w(6),
        millisecond: w(7),
    }
}

/// The NUL-terminated UTF-16 string at the start of `rest` and the bytes it occupies. The
/// terminator is the first aligned zero unit; like TraceEvent, a string cut off by the end
/// of the payload is accepted (it then runs to the end).
#[inline]
pub(crate) fn utf16_field(rest: &[u8]) -> (Utf16Str<'_>, usize) {
    match find_zero_unit(rest) {
        Some(n) => (
            Utf16Str {
                bytes: rest.get(..2 * n).unwrap_or(&[]),
            },
            2 * n + 2,
        ),
        None => (Utf16Str { bytes: rest }, rest.len()),
    }
}

/// Index of the first aligned zero 16-bit unit of `bytes`, four units per step.
#[inline]
fn find_zero_unit(bytes: &[u8]) -> Option<usize> {
    const LOW15: u64 = 0x7fff_7fff_7fff_7fff;
    const HIGH: u64 = 0x8000_8000_8000_8000;
    let mut chunks = bytes.chunks_exact(8);
    let mut units = 0;
    for chunk in chunks.by_ref() {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        // A unit's bit 15 in `t` is set iff its low 15 bits are not all zero; no carry
        // crosses into the next unit (0x7fff + 0x7fff < 0x10000). So a unit is zero iff
        // bit 15 is clear in both `t` and `x`.
        let t = (x & LOW15).wrapping_add(LOW15);
        let zero = !(t | x) & HIGH;
        if zero != 0 {
            return Some(units + zero.trailing_zeros() as usize / 16);
        }
        units += 4;
    }
    chunks
        .remainder()
        .chunks_exact(2)
        .position(|p| p == [0, 0])
        .map(|n| units + n)
}

/// Decodes one value of type `ty`, borrowing strings and byte arrays.
#[inline]
fn decode_ref<'a>(
    ty: &'a FieldType,
    c: &mut PayloadCursor<'a>,
    siblings: &dyn Siblings,
    depth: u32,
) -> Decoded<ValueRef<'a>> {
    if depth > MAX_DEPTH {
        return Err("nesting too deep".into());
    }
    Ok(match ty {
        FieldType::Boolean32 => ValueRef::Bool(u32::from_le_bytes(c.arr()?) != 0),
        FieldType::Boolean8 => ValueRef::Bool(c.arr::<1>()?[0] != 0),
        FieldType::Char16 => ValueRef::Char(char16(c.arr()?)),
        FieldType::Char8 => ValueRef::Char(char::from(c.arr::<1>()?[0])),
        FieldType::SByte => ValueRef::I8(i8::from_le_bytes(c.arr()?)),
        FieldType::Byte => ValueRef::U8(c.arr::<1>()?[0]),
        FieldType::Int16 => ValueRef::I16(i16::from_le_bytes(c.arr()?)),
        FieldType::UInt16 => ValueRef::U16(u16::from_le_bytes(c.arr()?)),
        FieldType::Int32 => ValueRef::I32(i32::from_le_bytes(c.arr()?)),
        FieldType::UInt32 => ValueRef::U32(u32::from_le_bytes(c.arr()?)),
        FieldType::Int64 => ValueRef::I64(i64::from_le_bytes(c.arr()?)),
        FieldType::UInt64 => ValueRef::U64(u64::from_le_bytes(c.arr()?)),
        FieldType::Single => ValueRef::F32(f32::from_le_bytes(c.arr()?)),
        FieldType::Double => ValueRef::F64(f64::from_le_bytes(c.arr()?)),
        FieldType::Decimal => ValueRef::Decimal(c.arr()?),
        FieldType::DateTime => ValueRef::DateTime(i64::from_le_bytes(c.arr()?)),
        FieldType::FileTime => ValueRef::FileTime(u64::from_le_bytes(c.arr()?)),
        FieldType::SystemTime => ValueRef::SystemTime(system_time(c.arr()?)),
        FieldType::Guid => ValueRef::Guid(Guid(c.arr()?)),
        FieldType::Pointer => match c.pointer_size {
            4 => ValueRef::Pointer(u64::from(u32::from_le_bytes(c.arr()?))),
            _ => ValueRef::Pointer(u64::from_le_bytes(c.arr()?)),
        },
        FieldType::VarInt => ValueRef::I64(crate::cursor::zigzag_decode(c.varu64()?)),
        FieldType::VarUInt => ValueRef::U64(c.varu64()?),
        FieldType::Utf16String => {
            let (s, used) = utf16_field(c.rest());
            c.pos = c.pos.saturating_add(used).min(c.data.len());
            ValueRef::Utf16(s)
        }
        FieldType::AnsiString => {
            let rest = c.rest();
            let len = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            let bytes = rest.get(..len).unwrap_or(&[]);
            c.pos = c.pos.saturating_add(len + 1).min(c.data.len());
            ValueRef::Str8(bytes)
        }
        FieldType::Utf8U16Len => {
            let n = usize::from(u16::from_le_bytes(c.arr()?));
            ValueRef::Str8(c.take(n)?)
        }
        FieldType::Object(_)
        | FieldType::Array(_)
        | FieldType::FixedArray(..)
        | FieldType::CountedArray(..)
        | FieldType::CountedBytes(_)
        | FieldType::RelLoc(_)
        | FieldType::DataLoc(_) => decode_compound(ty, c, siblings, depth)?,
    })
}

/// The part of [`decode_ref`] for arrays and objects: each is checked in full here (so that
/// the next field's position is known and a malformed one is an error now), and handed out
/// borrowed.
#[inline(never)]
fn decode_compound<'a>(
    ty: &'a FieldType,
    c: &mut PayloadCursor<'a>,
    siblings: &dyn Siblings,
    depth: u32,
) -> Decoded<ValueRef<'a>> {
    Ok(match ty {
        FieldType::Object(fields) => {
            object_ref(fields, c, fixed_size(ty, c.pointer_size, depth), depth)?
        }
        FieldType::Array(elem) => {
            let n = usize::from(u16::from_le_bytes(c.arr()?));
            decode_elements(elem, n, c, depth)?
        }
        FieldType::FixedArray(elem, n) => decode_elements(elem, usize::from(*n), c, depth)?,
        FieldType::CountedArray(elem, index) => {
            let n = siblings.count(*index)?;
            decode_elements(elem, n, c, depth)?
        }
        FieldType::CountedBytes(index) => {
            let n = siblings.count(*index)?;
            ValueRef::Bytes(c.take(n)?)
        }
        FieldType::RelLoc(elem) | FieldType::DataLoc(elem) => {
            let loc = u32::from_le_bytes(c.arr()?);
            let size = (loc >> 16) as usize;
            let offset = (loc & 0xffff) as usize;
            let start = if matches!(ty, FieldType::RelLoc(_)) {
                c.pos.saturating_add(offset)
            } else {
                offset
            };
            let region = start
                .checked_add(size)
                .and_then(|end| c.data.get(start..end))
                .ok_or_else(|| format!("location {offset}+{size} lies outside the payload"))?;
            let elem_size = min_size(elem, c.pointer_size).max(1);
            let mut sub = PayloadCursor {
                data: region,
                pos: 0,
                pointer_size: c.pointer_size,
            };
            decode_elements(elem, size / elem_size, &mut sub, depth)?
        }
        _ => decode_ref(ty, c, siblings, depth)?,
    })
}

/// An object of `fields` at nesting `depth`: `size` bytes when its size is fixed
/// ([`fixed_size`]), else as far as its members reach, each checked.
fn object_ref<'a>(
    fields: &'a Vec<FieldDesc>,
    c: &mut PayloadCursor<'a>,
    size: Option<usize>,
    depth: u32,
) -> Decoded<ValueRef<'a>> {
    if depth > MAX_DEPTH {
        return Err("nesting too deep".into());
    }
    let start = c.pos;
    match size {
        Some(size) => {
            c.take(size)?;
        }
        None => {
            let mut members = Counts::new(fields);
            for f in fields {
                let v = decode_ref(&f.ty, c, &members, depth + 1)
                    .map_err(|e| format!("{}: {e}", f.name))?;
                members.push(v.as_u64());
            }
        }
    }
    Ok(ValueRef::Object(ObjectRef {
        fields,
        bytes: c.data.get(start..c.pos).unwrap_or(&[]),
        pointer_size: c.pointer_size as u8,
        // At most MAX_DEPTH + 1.
        depth: (depth + 1) as u8,
    }))
}

fn decode_elements<'a>(
    elem: &'a FieldType,
    n: usize,
    c: &mut PayloadCursor<'a>,
    depth: u32,
) -> Decoded<ValueRef<'a>> {
    let least = min_size(elem, c.pointer_size);
    if least > 0 && n.saturating_mul(least) > c.remaining() {
        return Err(format!(
            "{n} elements cannot fit in the {} bytes that remain",
            c.remaining()
        ));
    }
    if least == 0 && n > usize::from(u16::MAX) {
        return Err(format!("{n} elements of a zero-size type"));
    }
    match elem {
        FieldType::Byte => return Ok(ValueRef::Bytes(c.take(n)?)),
        FieldType::Char16 => {
            let bytes = c.take(n.saturating_mul(2))?;
            return Ok(ValueRef::Utf16(Utf16Str { bytes }));
        }
        FieldType::Char8 => return Ok(ValueRef::Str8(c.take(n)?)),
        _ => {}
    }
    let start = c.pos;
    let elem_size = fixed_size(elem, c.pointer_size, depth + 1);
    match (elem_size, elem) {
        // Checked above to fit.
        (Some(size), _) => {
            c.take(n.saturating_mul(size))?;
        }
        (None, FieldType::Object(fields)) => {
            for _ in 0..n {
                object_ref(fields, c, None, depth + 1)?;
            }
        }
        (None, _) => {
            for _ in 0..n {
                decode_ref(elem, c, &NoSiblings, depth + 1)?;
            }
        }
    }
    Ok(ValueRef::Array(ArrayRef {
        elem,
        bytes: c.data.get(start..c.pos).unwrap_or(&[]),
        len: u32::try_from(n).map_err(|_| format!("{n} elements are too many"))?,
        pointer_size: c.pointer_size as u8,
        // At most MAX_DEPTH + 1.
        depth: (depth + 1) as u8,
    }))
}

/// The size of a fixed-size scalar type (every value the same size); `None` for the others.
fn scalar_size(ty: &FieldType, pointer_size: u32) -> Option<usize> {
    Some(match ty {
        FieldType::Boolean8 | FieldType::SByte | FieldType::Byte | FieldType::Char8 => 1,
        FieldType::Char16 | FieldType::Int16 | FieldType::UInt16 => 2,
        FieldType::Boolean32 | FieldType::Int32 | FieldType::UInt32 | FieldType::Single => 4,
        FieldType::Int64
        | FieldType::UInt64
        | FieldType::Double
        | FieldType::DateTime
        | FieldType::FileTime => 8,
        FieldType::Decimal | FieldType::Guid | FieldType::SystemTime => 16,
        FieldType::Pointer => pointer_size as usize,
        _ => return None,
    })
}

/// The size of every value of `ty`, decoded at nesting `depth`, when it is always the same
/// and any bytes of that size decode without error (so an array or object of such values is
/// checked by its length). `None` also when the nesting is too deep, so that the value is
/// walked and the error reported.
fn fixed_size(ty: &FieldType, pointer_size: u32, depth: u32) -> Option<usize> {
    if depth > MAX_DEPTH {
        return None;
    }
    if let Some(size) = scalar_size(ty, pointer_size) {
        return Some(size);
    }
    Some(match ty {
        FieldType::Object(fields) => fields.iter().try_fold(0usize, |sum, f| {
            sum.checked_add(fixed_size(&f.ty, pointer_size, depth + 1)?)
        })?,
        FieldType::FixedArray(elem, n) => {
            fixed_size(elem, pointer_size, depth + 1)?.checked_mul(usize::from(*n))?
        }
        _ => return None,
    })
}

/// The fewest bytes any value of `ty` occupies; used to reject impossible element counts.
fn min_size(ty: &FieldType, pointer_size: u32) -> usize {
    if let Some(size) = scalar_size(ty, pointer_size) {
        return size;
    }
    match ty {
        FieldType::VarInt | FieldType::VarUInt | FieldType::AnsiString => 1,
        FieldType::Utf16String | FieldType::Array(_) | FieldType::Utf8U16Len => 2,
        FieldType::RelLoc(_) | FieldType::DataLoc(_) => 4,
        FieldType::Object(fields) => fields.iter().map(|f| min_size(&f.ty, pointer_size)).sum(),
        FieldType::FixedArray(elem, n) => {
            min_size(elem, pointer_size).saturating_mul(usize::from(*n))
        }
        // Counted arrays may be empty; scalars were answered above. 0 is always safe here:
        // it only gives up the early rejection of impossible counts.
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng;
    use eventpipe_test_support::trace::utf16;

    fn field(name: &str, ty: FieldType) -> FieldDesc {
        FieldDesc {
            name: name.into(),
            ty,
        }
    }

    fn decode_all(
        fields: &[FieldDesc],
        payload: &[u8],
    ) -> Result<Vec<(String, Value)>, DecodeError> {
        let mut out = Vec::new();
        for_each_field(fields, payload, 8, |f, v| {
            out.push((f.name.clone(), v.to_value()))
        })?;
        Ok(out)
    }

    /// `Count`, then that many `{Id, Name, Pairs: [{A, B}]}` objects, then a GUID: a counted
    /// array of objects with strings (walked to find its end) holding arrays of fixed-size
    /// objects (measured by length).
    fn nested_row() -> Vec<FieldDesc> {
        let pair = FieldType::Object(vec![
            field("A", FieldType::Byte),
            field("B", FieldType::Int64),
        ]);
        let item = FieldType::Object(vec![
            field("Id", FieldType::UInt32),
            field("Name", FieldType::Utf16String),
            field("Pairs", FieldType::Array(Box::new(pair))),
        ]);
        vec![
            field("Count", FieldType::UInt16),
            field("Items", FieldType::CountedArray(Box::new(item), 0)),
            field("Tail", FieldType::Guid),
        ]
    }

    fn nested_payload() -> Vec<u8> {
        let mut p = 2u16.to_le_bytes().to_vec();
        p.extend(7u32.to_le_bytes());
        p.extend(utf16("seven"));
        p.extend(2u16.to_le_bytes());
        p.extend([1u8]);
        p.extend((-1i64).to_le_bytes());
        p.extend([2u8]);
        p.extend(2i64.to_le_bytes());
        p.extend(8u32.to_le_bytes());
        p.extend(utf16(""));
        p.extend(0u16.to_le_bytes());
        p.extend([0xab; 16]);
        p
    }

    #[test]
    fn nested_arrays_and_objects_are_borrowed_and_decode_to_the_owned_values() {
        let fields = nested_row();
        let payload = nested_payload();
        let pair = |a: u8, b: i64| {
            Value::Object(vec![
                ("A".into(), Value::U8(a)),
                ("B".into(), Value::I64(b)),
            ])
        };
        let item = |id: u32, name: &str, pairs: Vec<Value>| {
            Value::Object(vec![
                ("Id".into(), Value::U32(id)),
                ("Name".into(), Value::String(name.into())),
                ("Pairs".into(), Value::Array(pairs)),
            ])
        };
        let expected = vec![
            ("Count".to_string(), Value::U16(2)),
            (
                "Items".to_string(),
                Value::Array(vec![
                    item(7, "seven", vec![pair(1, -1), pair(2, 2)]),
                    item(8, "", vec![]),
                ]),
            ),
            ("Tail".to_string(), Value::Guid(Guid([0xab; 16]))),
        ];
        assert_eq!(decode_all(&fields, &payload).unwrap(), expected);

        let mut items = None;
        for_each_field(&fields, &payload, 8, |f, v| {
            if f.name == "Items" {
                items = Some(v);
            }
        })
        .unwrap();
        let Some(ValueRef::Array(items)) = items else {
            panic!("Items is not an array: {items:?}");
        };
        assert_eq!(items.len(), 2);
        assert!(matches!(items.element_type(), FieldType::Object(_)));
        let first = items.iter().next().unwrap();
        let ValueRef::Object(first) = first else {
            panic!("{first:?}");
        };
        assert_eq!(first.get("Id"), Some(ValueRef::U32(7)));
        assert!(matches!(first.get("Name"), Some(ValueRef::Utf16(s)) if s == *"seven"));
        let Some(ValueRef::Array(pairs)) = first.get("Pairs") else {
            panic!("Pairs");
        };
        // Fixed-size elements: the array is exactly their bytes.
        assert_eq!(pairs.as_bytes().len(), 2 * 9);
        assert_eq!(pairs.iter().count(), 2);
        assert_eq!(first.get("Missing"), None);
        // The borrowed value prints as the owned one does.
        assert_eq!(
            ValueRef::Array(items).to_string(),
            expected[1].1.to_string()
        );
    }

    #[test]
    fn malformed_nested_values_fail_when_their_field_is_decoded() {
        let fields = nested_row();
        let payload = nested_payload();
        // Cut anywhere inside `Items`: the error names it at once (not when iterated).
        let items_end = payload.len() - 16;
        for cut in 3..items_end {
            let err = decode_all(&fields, &payload[..cut]).unwrap_err();
            assert_eq!(err.field, "Items", "cut at {cut}: {err:?}");
        }
        // A count larger than the bytes can hold.
        let mut too_many = payload.clone();
        too_many[0] = 200;
        let err = decode_all(&fields, &too_many).unwrap_err();
        assert_eq!(err.field, "Items");
        // Too deep, even where every level has a fixed size.
        let mut ty = FieldType::UInt32;
        for _ in 0..(MAX_DEPTH + 2) {
            ty = FieldType::Object(vec![field("x", ty)]);
        }
        let err = decode_all(&[field("deep", ty)], &[0; 4]).unwrap_err();
        assert!(err.detail.contains("nesting too deep"), "{err:?}");
    }

    fn random_type(x: &mut u64, depth: u32, siblings: usize) -> FieldType {
        let leaf = [
            FieldType::Boolean8,
            FieldType::Char16,
            FieldType::UInt16,
            FieldType::Int32,
            FieldType::UInt64,
            FieldType::Guid,
            FieldType::Pointer,
            FieldType::Utf16String,
            FieldType::AnsiString,
            FieldType::VarUInt,
        ];
        let r = test_rng::next(x);
        if depth >= 3 || r % 3 != 0 {
            return leaf[(r >> 8) as usize % leaf.len()].clone();
        }
        let elem = Box::new(random_type(x, depth + 1, 0));
        match (r >> 8) % 4 {
            0 => FieldType::Array(elem),
            1 => FieldType::FixedArray(elem, (r >> 16) as u16 % 4),
            2 if siblings > 0 => FieldType::CountedArray(elem, (r >> 16) as usize % siblings),
            _ => {
                let n = 1 + (r >> 16) as usize % 4;
                let mut members = Vec::new();
                for i in 0..n {
                    members.push(field(&format!("m{i}"), random_type(x, depth + 1, i)));
                }
                FieldType::Object(members)
            }
        }
    }

    /// Counts every value reachable from `v` by iterating it; panics if an array or object
    /// yields fewer items than it holds (the iterators stop on an error that checking the
    /// field beforehand rules out).
    fn walk(v: ValueRef<'_>) -> usize {
        match v {
            ValueRef::Array(a) => {
                let items: Vec<_> = a.iter().collect();
                assert_eq!(items.len(), a.len(), "{a:?}");
                1 + items.into_iter().map(walk).sum::<usize>()
            }
            ValueRef::Object(o) => {
                let members: Vec<_> = o.fields().collect();
                assert_eq!(members.len(), o.descriptions().len(), "{o:?}");
                1 + members.into_iter().map(|(_, v)| walk(v)).sum::<usize>()
            }
            _ => 1,
        }
    }

    /// On random nested rows and payloads, whatever decodes without error iterates in full.
    #[test]
    fn checked_compounds_always_iterate_in_full() {
        let mut x = 0x0ddc_0ffe_e15e_a5e5u64;
        let mut compounds = 0;
        for round in 0..20_000 {
            let n = 1 + test_rng::next(&mut x) as usize % 4;
            let fields: Vec<FieldDesc> = (0..n)
                .map(|i| field(&format!("f{i}"), random_type(&mut x, 0, i)))
                .collect();
            let len = test_rng::next(&mut x) as usize % 96;
            let payload: Vec<u8> = (0..len)
                .map(|_| {
                    let r = test_rng::next(&mut x);
                    // Small bytes, so that counts are small and strings end.
                    if r % 3 == 0 {
                        0
                    } else {
                        (r >> 8) as u8 % 4
                    }
                })
                .collect();
            let pointer_size = if round % 2 == 0 { 8 } else { 4 };
            let mut values = Vec::new();
            if for_each_field(&fields, &payload, pointer_size, |_, v| values.push(v)).is_ok() {
                for v in values {
                    if matches!(v, ValueRef::Array(_) | ValueRef::Object(_)) {
                        compounds += 1;
                    }
                    walk(v);
                }
            }
        }
        assert!(
            compounds > 1_000,
            "only {compounds} compound values decoded"
        );
    }
}
