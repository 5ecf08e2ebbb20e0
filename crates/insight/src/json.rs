//! Decoded payload values ([`nettrace::Value`]) as JSON: the one rendering every JSON this
//! project writes of payloads goes through (`eptrace dump --json`, the Chrome timeline's
//! `args`).
//!
//! The conversion is a [`Serialize`] adapter rather than a `serde_json::Value` builder so
//! that payload fields and nested objects keep their trace order (a `serde_json::Map`
//! sorts its keys unless the workspace-wide `preserve_order` feature is on).
//!
//! | value | JSON |
//! | --- | --- |
//! | integers of any width | numbers; with [`Numbers::JavaScript`], those beyond ±(2^53 − 1) as their decimal text |
//! | floats | numbers; NaN and ±infinity as the strings `"NaN"`, `"inf"`, `"-inf"` |
//! | bool | bool |
//! | char, string | string |
//! | GUID | string, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` |
//! | pointer | string, `0x…` (like stack addresses) |
//! | bytes | string of lowercase hex digits |
//! | DateTime, FILETIME, SYSTEMTIME | RFC 3339 string |
//! | decimal | its exact decimal digits, as a string |
//! | array, object | array, object (recursively) |

use std::fmt::Write as _;

use nettrace::Value;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

/// The largest integer a JavaScript number (an IEEE double) holds exactly, 2^53 − 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// How integers are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbers {
    /// Every integer as a number: a `u64` stays exact for readers that keep 64-bit
    /// integers (serde, jq 1.7, Python).
    Exact,
    /// Integers beyond ±(2^53 − 1) as their decimal text, which a JavaScript viewer would
    /// otherwise round (the Chrome timeline's).
    JavaScript,
}

/// Serializes one value as described in the module docs.
#[derive(Debug, Clone, Copy)]
pub struct Json<'a> {
    value: &'a Value,
    numbers: Numbers,
}

impl<'a> Json<'a> {
    /// `value`, its integers written as `numbers` says.
    pub fn new(value: &'a Value, numbers: Numbers) -> Self {
        Json { value, numbers }
    }
}

/// Serializes decoded fields as one JSON object, in field order.
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a, N> {
    fields: &'a [(N, Value)],
    numbers: Numbers,
}

impl<'a, N> Fields<'a, N> {
    /// `fields`, their integers written as `numbers` says.
    pub fn new(fields: &'a [(N, Value)], numbers: Numbers) -> Self {
        Fields { fields, numbers }
    }
}

impl<N: AsRef<str>> Serialize for Fields<'_, N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.fields.len()))?;
        for (name, value) in self.fields {
            map.serialize_entry(name.as_ref(), &Json::new(value, self.numbers))?;
        }
        map.end()
    }
}

impl Serialize for Json<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let safe = self.numbers == Numbers::JavaScript;
        match self.value {
            Value::Bool(v) => s.serialize_bool(*v),
            Value::I8(v) => s.serialize_i8(*v),
            Value::U8(v) => s.serialize_u8(*v),
            Value::I16(v) => s.serialize_i16(*v),
            Value::U16(v) => s.serialize_u16(*v),
            Value::I32(v) => s.serialize_i32(*v),
            Value::U32(v) => s.serialize_u32(*v),
            Value::I64(v) if safe && v.unsigned_abs() > MAX_SAFE_INTEGER => s.collect_str(v),
            Value::U64(v) if safe && *v > MAX_SAFE_INTEGER => s.collect_str(v),
            Value::I64(v) => s.serialize_i64(*v),
            Value::U64(v) => s.serialize_u64(*v),
            Value::F32(v) if v.is_finite() => s.serialize_f32(*v),
            Value::F64(v) if v.is_finite() => s.serialize_f64(*v),
            Value::F32(v) => s.serialize_str(non_finite(f64::from(*v))),
            Value::F64(v) => s.serialize_str(non_finite(*v)),
            Value::Char(c) => s.serialize_char(*c),
            Value::String(v) => s.serialize_str(v),
            Value::Pointer(v) => s.collect_str(&format_args!("0x{v:x}")),
            Value::Bytes(b) => s.serialize_str(&hex(b)),
            Value::Decimal(raw) => s.serialize_str(&decimal_to_string(raw)),
            Value::Guid(_) | Value::DateTime(_) | Value::FileTime(_) | Value::SystemTime(_) => {
                s.collect_str(self.value)
            }
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Json::new(item, self.numbers))?;
                }
                seq.end()
            }
            Value::Object(fields) => Fields::new(fields, self.numbers).serialize(s),
        }
    }
}

/// Converts a value to a `serde_json::Value` (objects then sort their keys).
#[cfg(test)]
fn to_json(value: &Value) -> serde_json::Value {
    serde_json::to_value(Json::new(value, Numbers::Exact)).unwrap_or(serde_json::Value::Null)
}

fn non_finite(v: f64) -> &'static str {
    if v.is_nan() {
        "NaN"
    } else if v > 0.0 {
        "inf"
    } else {
        "-inf"
    }
}

/// Lowercase hex digits of `bytes`, no separators.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The exact value of a `System.Decimal` from its 16 in-memory bytes: flags (scale in bits
/// 16..24, sign in bit 31), the high 32 bits of the 96-bit mantissa, then its low 64 bits.
/// A scale above 28 is not a valid decimal; those bytes come back as hex.
pub fn decimal_to_string(raw: &[u8; 16]) -> String {
    let flags = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
    let hi = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
    let lo = u64::from_le_bytes([
        raw[8], raw[9], raw[10], raw[11], raw[12], raw[13], raw[14], raw[15],
    ]);
    let scale = ((flags >> 16) & 0xff) as usize;
    if scale > 28 {
        return format!("decimal:{}", hex(raw));
    }
    let mantissa = (u128::from(hi) << 64) | u128::from(lo);
    let digits = format!("{mantissa:0>width$}", width = scale + 1);
    let (int, frac) = digits.split_at(digits.len() - scale);
    let sign = if flags & 0x8000_0000 != 0 && mantissa != 0 {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nettrace::Guid;
    use serde_json::json;

    #[test]
    fn scalars() {
        assert_eq!(to_json(&Value::U64(u64::MAX)), json!(u64::MAX));
        assert_eq!(to_json(&Value::I64(i64::MIN)), json!(i64::MIN));
        assert_eq!(to_json(&Value::I8(-3)), json!(-3));
        assert_eq!(to_json(&Value::Bool(true)), json!(true));
        assert_eq!(to_json(&Value::F32(0.5)), json!(0.5));
        assert_eq!(to_json(&Value::F64(f64::NAN)), json!("NaN"));
        assert_eq!(to_json(&Value::F64(f64::INFINITY)), json!("inf"));
        assert_eq!(to_json(&Value::F32(f32::NEG_INFINITY)), json!("-inf"));
        assert_eq!(to_json(&Value::Char('x')), json!("x"));
        assert_eq!(to_json(&Value::Pointer(0x7ff0)), json!("0x7ff0"));
        assert_eq!(to_json(&Value::Bytes(vec![0, 0xab, 0x10])), json!("00ab10"));
        let g = Guid::parse("01020304-0506-0708-090a-0b0c0d0e0f10").unwrap();
        assert_eq!(
            to_json(&Value::Guid(g)),
            json!("01020304-0506-0708-090a-0b0c0d0e0f10")
        );
    }

    #[test]
    fn javascript_numbers_keep_what_a_double_cannot_hold_as_text() {
        let js = |v: Value| serde_json::to_value(Json::new(&v, Numbers::JavaScript)).unwrap();
        assert_eq!(js(Value::U64(MAX_SAFE_INTEGER)), json!(MAX_SAFE_INTEGER));
        assert_eq!(
            js(Value::U64(MAX_SAFE_INTEGER + 1)),
            json!("9007199254740992")
        );
        assert_eq!(
            js(Value::I64(-(MAX_SAFE_INTEGER as i64))),
            json!(-9007199254740991i64)
        );
        assert_eq!(js(Value::I64(i64::MIN)), json!("-9223372036854775808"));
        // Nested values follow the same rule.
        assert_eq!(
            js(Value::Array(vec![Value::U64(u64::MAX), Value::U64(1)])),
            json!(["18446744073709551615", 1])
        );
    }

    #[test]
    fn nested_keeps_field_order() {
        let v = Value::Object(vec![
            (
                "z".into(),
                Value::Array(vec![Value::U8(1), Value::String("s".into())]),
            ),
            (
                "a".into(),
                Value::Object(vec![("inner".into(), Value::I32(-1))]),
            ),
        ]);
        assert_eq!(
            serde_json::to_string(&Json::new(&v, Numbers::Exact)).unwrap(),
            r#"{"z":[1,"s"],"a":{"inner":-1}}"#
        );
        let fields = vec![
            ("b".to_owned(), Value::U16(2)),
            ("a".to_owned(), Value::U16(1)),
        ];
        assert_eq!(
            serde_json::to_string(&Fields::new(&fields, Numbers::Exact)).unwrap(),
            r#"{"b":2,"a":1}"#
        );
    }

    #[test]
    fn decimals() {
        let dec = |flags: u32, hi: u32, lo: u64| {
            let mut raw = [0u8; 16];
            raw[0..4].copy_from_slice(&flags.to_le_bytes());
            raw[4..8].copy_from_slice(&hi.to_le_bytes());
            raw[8..16].copy_from_slice(&lo.to_le_bytes());
            decimal_to_string(&raw)
        };
        assert_eq!(dec(0, 0, 0), "0");
        assert_eq!(dec(2 << 16, 0, 12345), "123.45");
        assert_eq!(dec(0x8000_0000 | (3 << 16), 0, 5), "-0.005");
        assert_eq!(dec(0, 1, 0), "18446744073709551616");
        assert!(dec(29 << 16, 0, 1).starts_with("decimal:"));
        assert_eq!(to_json(&Value::Decimal([0; 16])), json!("0"));
    }
}
