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
            Value::Array(items) => {
                write!(f, "[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ",")?;
                    }
                    write!(f, "{item}")?;
                }
                write!(f, "]")
            }
            Value::Object(fields) => {
                write!(f, "{{")?;
                for (i, (name, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{name}={v}")?;
                }
                write!(f, "}}")
            }
        }
    }
}

fn filetime_to_rfc3339(ticks: i64) -> String {
    // FILETIME epoch 1601-01-01 is 11644473600 s before the Unix epoch.
    let nanos = i128::from(ticks) * 100 - 11_644_473_600i128 * 1_000_000_000;
    crate::time::format_unix_nanos(nanos)
}

/// Why a payload did not match its field descriptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError {
    pub(crate) field: String,
    pub(crate) detail: String,
}

struct PayloadCursor<'a> {
    data: &'a [u8],
    pos: usize,
    pointer_size: u32,
}

type Decoded<T> = std::result::Result<T, String>;

impl<'a> PayloadCursor<'a> {
    fn take(&mut self, n: usize) -> Decoded<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(format!(
                "needs {n} bytes at payload offset {}, only {} remain",
                self.pos,
                self.data.len() - self.pos
            ));
        };
        let out = &self.data[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn arr<const N: usize>(&mut self) -> Decoded<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    fn remaining(&self) -> usize {
        self.data.len() - self.pos
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

/// Decodes `payload` against `fields`. A payload that ends cleanly between two top-level
/// fields yields the fields decoded so far: older event versions write fewer fields.
pub(crate) fn decode<'m>(
    fields: &'m [FieldDesc],
    payload: &[u8],
    pointer_size: u32,
) -> std::result::Result<Vec<(&'m str, Value)>, DecodeError> {
    let mut c = PayloadCursor {
        data: payload,
        pos: 0,
        pointer_size,
    };
    let mut out: Vec<(&'m str, Value)> = Vec::with_capacity(fields.len());
    for f in fields {
        if c.remaining() == 0 && !out.is_empty() {
            break;
        }
        let value = decode_value(&f.ty, &mut c, &out, 0).map_err(|detail| DecodeError {
            field: f.name.clone(),
            detail,
        })?;
        out.push((&f.name, value));
    }
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

fn decode_value<N: AsRef<str>>(
    ty: &FieldType,
    c: &mut PayloadCursor<'_>,
    siblings: &[(N, Value)],
    depth: u32,
) -> Decoded<Value> {
    if depth > MAX_DEPTH {
        return Err("nesting too deep".into());
    }
    Ok(match ty {
        FieldType::Boolean32 => Value::Bool(u32::from_le_bytes(c.arr()?) != 0),
        FieldType::Boolean8 => Value::Bool(c.arr::<1>()?[0] != 0),
        FieldType::Char16 => {
            let u = u16::from_le_bytes(c.arr()?);
            Value::Char(char::from_u32(u32::from(u)).unwrap_or(char::REPLACEMENT_CHARACTER))
        }
        FieldType::Char8 => Value::Char(char::from(c.arr::<1>()?[0])),
        FieldType::SByte => Value::I8(i8::from_le_bytes(c.arr()?)),
        FieldType::Byte => Value::U8(c.arr::<1>()?[0]),
        FieldType::Int16 => Value::I16(i16::from_le_bytes(c.arr()?)),
        FieldType::UInt16 => Value::U16(u16::from_le_bytes(c.arr()?)),
        FieldType::Int32 => Value::I32(i32::from_le_bytes(c.arr()?)),
        FieldType::UInt32 => Value::U32(u32::from_le_bytes(c.arr()?)),
        FieldType::Int64 => Value::I64(i64::from_le_bytes(c.arr()?)),
        FieldType::UInt64 => Value::U64(u64::from_le_bytes(c.arr()?)),
        FieldType::Single => Value::F32(f32::from_le_bytes(c.arr()?)),
        FieldType::Double => Value::F64(f64::from_le_bytes(c.arr()?)),
        FieldType::Decimal => Value::Decimal(c.arr()?),
        FieldType::DateTime => Value::DateTime(i64::from_le_bytes(c.arr()?)),
        FieldType::FileTime => Value::FileTime(u64::from_le_bytes(c.arr()?)),
        FieldType::SystemTime => {
            let b: [u8; 16] = c.arr()?;
            let w = |i: usize| i16::from_le_bytes([b[2 * i], b[2 * i + 1]]);
            Value::SystemTime(SystemTime {
                year: w(0),
                month: w(1),
                day_of_week: w(2),
                day: w(3),
                hour: w(4),
                minute: w(5),
                second: w(6),
                millisecond: w(7),
            })
        }
        FieldType::Guid => Value::Guid(Guid(c.arr()?)),
        FieldType::Pointer => match c.pointer_size {
            4 => Value::Pointer(u64::from(u32::from_le_bytes(c.arr()?))),
            _ => Value::Pointer(u64::from_le_bytes(c.arr()?)),
        },
        FieldType::VarInt => Value::I64(crate::cursor::zigzag_decode(c.varu64()?)),
        FieldType::VarUInt => Value::U64(c.varu64()?),
        FieldType::Utf16String => {
            let rest = &c.data[c.pos..];
            // The terminator is the first aligned zero unit; TraceEvent also accepts a string
            // cut off by the end of the payload.
            let len = rest
                .chunks_exact(2)
                .position(|p| p == [0, 0])
                .map(|units| 2 * units);
            match len {
                Some(n) => {
                    c.pos += n + 2;
                    Value::String(utf16_to_string(&rest[..n]))
                }
                None => {
                    c.pos = c.data.len();
                    Value::String(utf16_to_string(rest))
                }
            }
        }
        FieldType::AnsiString => {
            let rest = &c.data[c.pos..];
            let len = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            let s = String::from_utf8_lossy(&rest[..len]).into_owned();
            c.pos += (len + 1).min(rest.len());
            Value::String(s)
        }
        FieldType::Utf8U16Len => {
            let n = usize::from(u16::from_le_bytes(c.arr()?));
            Value::String(String::from_utf8_lossy(c.take(n)?).into_owned())
        }
        FieldType::Object(fields) => {
            let mut members: Vec<(String, Value)> = Vec::with_capacity(fields.len());
            for f in fields {
                let v = decode_value(&f.ty, c, &members, depth + 1)
                    .map_err(|e| format!("{}: {e}", f.name))?;
                members.push((f.name.clone(), v));
            }
            Value::Object(members)
        }
        FieldType::Array(elem) => {
            let n = usize::from(u16::from_le_bytes(c.arr()?));
            decode_elements(elem, n, c, depth)?
        }
        FieldType::FixedArray(elem, n) => decode_elements(elem, usize::from(*n), c, depth)?,
        FieldType::CountedArray(elem, index) => {
            let n = sibling_count(siblings, *index)?;
            decode_elements(elem, n, c, depth)?
        }
        FieldType::CountedBytes(index) => {
            let n = sibling_count(siblings, *index)?;
            Value::Bytes(c.take(n)?.to_vec())
        }
        FieldType::RelLoc(elem) | FieldType::DataLoc(elem) => {
            let loc = u32::from_le_bytes(c.arr()?);
            let size = (loc >> 16) as usize;
            let offset = (loc & 0xffff) as usize;
            let start = if matches!(ty, FieldType::RelLoc(_)) {
                c.pos + offset
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
    })
}

fn sibling_count<N: AsRef<str>>(siblings: &[(N, Value)], index: usize) -> Decoded<usize> {
    let (name, v) = siblings
        .get(index)
        .ok_or_else(|| format!("count field #{index} is missing"))?;
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("count field `{}` is not a count: {v}", name.as_ref()))
}

fn decode_elements(
    elem: &FieldType,
    n: usize,
    c: &mut PayloadCursor<'_>,
    depth: u32,
) -> Decoded<Value> {
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
        FieldType::Byte => return Ok(Value::Bytes(c.take(n)?.to_vec())),
        FieldType::Char16 => {
            let b = c.take(2 * n)?;
            let units: Vec<u16> = b
                .chunks_exact(2)
                .map(|p| u16::from_le_bytes([p[0], p[1]]))
                .collect();
            return Ok(Value::String(String::from_utf16_lossy(&units)));
        }
        FieldType::Char8 => {
            return Ok(Value::String(
                String::from_utf8_lossy(c.take(n)?).into_owned(),
            ))
        }
        _ => {}
    }
    let mut items = Vec::with_capacity(n.min(c.remaining().max(1)));
    let none: &[(&str, Value)] = &[];
    for _ in 0..n {
        items.push(decode_value(elem, c, none, depth + 1)?);
    }
    Ok(Value::Array(items))
}

/// The fewest bytes any value of `ty` occupies; used to reject impossible element counts.
fn min_size(ty: &FieldType, pointer_size: u32) -> usize {
    match ty {
        FieldType::Boolean8 | FieldType::SByte | FieldType::Byte | FieldType::Char8 => 1,
        FieldType::VarInt | FieldType::VarUInt | FieldType::AnsiString => 1,
        FieldType::Char16 | FieldType::Int16 | FieldType::UInt16 | FieldType::Utf16String => 2,
        FieldType::Array(_) | FieldType::Utf8U16Len => 2,
        FieldType::Boolean32 | FieldType::Int32 | FieldType::UInt32 | FieldType::Single => 4,
        FieldType::RelLoc(_) | FieldType::DataLoc(_) => 4,
        FieldType::Int64
        | FieldType::UInt64
        | FieldType::Double
        | FieldType::DateTime
        | FieldType::FileTime => 8,
        FieldType::Decimal | FieldType::Guid | FieldType::SystemTime => 16,
        FieldType::Pointer => pointer_size as usize,
        FieldType::Object(fields) => fields.iter().map(|f| min_size(&f.ty, pointer_size)).sum(),
        FieldType::FixedArray(elem, n) => {
            min_size(elem, pointer_size).saturating_mul(usize::from(*n))
        }
        FieldType::CountedArray(..) | FieldType::CountedBytes(_) => 0,
    }
}
