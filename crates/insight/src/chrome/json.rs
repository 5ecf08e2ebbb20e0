//! The timeline's JSON: its event records and arguments through serde, and the hand-written
//! writer of the plain instants (the bulk of most traces), byte for byte what serde_json
//! writes for the same values.

use super::names::{FieldName, FieldNames};
use super::*;

/// A time or duration in nanoseconds, written in microseconds (the format's unit) with at
/// most three decimals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Micros(pub(super) i64);

impl Serialize for Micros {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        if self.0.unsigned_abs() <= MAX_SAFE_INTEGER {
            // The quotient is the double nearest the exact decimal, and the shortest text
            // that reads back as that double is that decimal: three decimals at most.
            ser.serialize_f64(self.0 as f64 / 1000.0)
        } else {
            ser.collect_str(&format_args!(
                "{}{}.{:03}",
                if self.0 < 0 { "-" } else { "" },
                self.0.unsigned_abs() / 1000,
                self.0.unsigned_abs() % 1000
            ))
        }
    }
}

/// A slice's duration, from its start and end in nanoseconds: in microseconds with at most
/// three decimals when `ts + dur`, added as JavaScript adds, gives exactly the end's
/// written time; else the difference of the two written times, which does. Viewers find a
/// slice's end as `ts + dur` and nest slices by comparing ends: rounding in that sum would
/// make a child that ends with its parent seem to end after it (the DevTools trace engine
/// then drops the child).
#[derive(Debug, Clone, Copy)]
pub(super) struct Duration {
    pub(super) start: i64,
    pub(super) end: i64,
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        let dur = self.end.saturating_sub(self.start).max(0);
        let exact = self.start.unsigned_abs() <= MAX_SAFE_INTEGER
            && self.end.unsigned_abs() <= MAX_SAFE_INTEGER;
        if !exact {
            return Micros(dur).serialize(ser);
        }
        let (ts, end) = (self.start as f64 / 1000.0, self.end as f64 / 1000.0);
        let decimal = dur as f64 / 1000.0;
        if ts + decimal == end {
            return ser.serialize_f64(decimal);
        }
        let difference = end - ts;
        if !(difference >= 0.0 && ts + difference == end) {
            return ser.serialize_f64(decimal);
        }
        // The difference rounded to the fewest decimals that still add up to the end: a
        // few more than three, where the difference itself takes up to seventeen digits.
        let mut text = String::with_capacity(32);
        for decimals in 4..17 {
            text.clear();
            let _ = write!(text, "{difference:.decimals$}");
            if let Ok(shorter) = text.parse::<f64>() {
                if shorter >= 0.0 && ts + shorter == end {
                    return ser.serialize_f64(shorter);
                }
            }
        }
        ser.serialize_f64(difference)
    }
}

#[derive(Serialize)]
pub(super) struct JsonEvent<'a, A: EventArgs> {
    pub(super) name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cat: Option<&'a str>,
    pub(super) ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ts: Option<Micros>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) dur: Option<Duration>,
    pub(super) pid: u64,
    pub(super) tid: u64,
    #[serde(skip_serializing_if = "EventArgs::is_empty")]
    pub(super) args: A,
}

/// An event's `args`, left out when it holds nothing.
pub(super) trait EventArgs: Serialize {
    fn is_empty(&self) -> bool;
}

/// An integer as JSON: a number when JavaScript holds it exactly, else its decimal text.
pub(super) struct Integer<T>(pub(super) T);

impl Serialize for Integer<u64> {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        if self.0 <= MAX_SAFE_INTEGER {
            ser.serialize_u64(self.0)
        } else {
            ser.collect_str(&self.0)
        }
    }
}

impl Serialize for Integer<i64> {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        if self.0.unsigned_abs() <= MAX_SAFE_INTEGER {
            ser.serialize_i64(self.0)
        } else {
            ser.collect_str(&self.0)
        }
    }
}

/// A payload value as the timeline writes it ([`crate::json`], integers beyond
/// ±(2^53 − 1) as text).
pub(super) fn json_value(value: &Value) -> Json<'_> {
    Json::new(value, Numbers::JavaScript)
}

/// An event's `args`: its decoded payload, or why it did not decode.
pub(super) enum Payload<N> {
    Fields(Vec<(N, Value)>),
    Error(String),
}

impl<N: AsRef<str>> Serialize for Payload<N> {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Payload::Fields(fields) => Fields::new(fields, Numbers::JavaScript).serialize(ser),
            Payload::Error(e) => {
                let mut map = ser.serialize_map(Some(1))?;
                map.serialize_entry("decode_error", e)?;
                map.end()
            }
        }
    }
}

impl<N: AsRef<str>> Payload<N> {
    pub(super) fn field(&self, name: &str) -> Option<&Value> {
        match self {
            Payload::Fields(fields) => eventpipe_symbols::fields::field(fields, name),
            Payload::Error(_) => None,
        }
    }

    /// The payload, held past its event: field names come from `names`, shared.
    pub(super) fn into_owned(self, names: &mut FieldNames) -> Payload<FieldName> {
        match self {
            Payload::Fields(fields) => Payload::Fields(
                fields
                    .into_iter()
                    .map(|(n, v)| (names.get(n.as_ref()), v))
                    .collect(),
            ),
            Payload::Error(e) => Payload::Error(e),
        }
    }
}

/// A slice's `args`: one object holding each fact of its begin and end once. The begin's
/// fields first; then the end's fields that the begin does not already hold with the same
/// value (under `stop.<name>` when the begin holds that name with another value). The
/// `Name` field that names the slice is not repeated, nor what [`Omit`] says the document
/// shows otherwise.
pub(super) struct SliceArgs<'a, N> {
    pub(super) start: &'a Payload<FieldName>,
    pub(super) stop: &'a Payload<N>,
    /// The slice's name when it came from a `Name` field.
    pub(super) named_by: Option<&'a str>,
    pub(super) omit: Omit,
}

/// Fields of a tracing-layer span's slice that the document shows otherwise.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Omit {
    /// `SpanId`: nothing in the document refers to the span.
    pub(super) span_id: bool,
    /// `ParentSpanId`: the parent is the slice around this one.
    pub(super) parent: bool,
}

/// A field of [`SliceArgs`]: its name (`stop.` prefixed or not) and value, or a decode error.
pub(super) enum SliceField<'a> {
    Value(&'a str, bool, &'a Value),
    Error(&'static str, &'a str),
}

impl<'a, N: AsRef<str>> SliceArgs<'a, N> {
    /// Each field to write, in order.
    pub(super) fn fields(&self) -> impl Iterator<Item = SliceField<'a>> + '_ {
        let named_by = self.named_by;
        let omit = self.omit;
        let keep = move |name: &str, value: &Value| {
            !(name == "Name" && named_by.is_some() && value.as_str() == named_by
                || omit.span_id && name == "SpanId"
                || omit.parent && name == "ParentSpanId")
        };
        let start: Box<dyn Iterator<Item = SliceField<'a>>> = match self.start {
            Payload::Fields(fields) => Box::new(
                fields
                    .iter()
                    .filter(move |(n, v)| keep(n, v))
                    .map(|(n, v)| SliceField::Value(n, false, v)),
            ),
            Payload::Error(e) => Box::new(std::iter::once(SliceField::Error("decode_error", e))),
        };
        let begin = self.start;
        let stop: Box<dyn Iterator<Item = SliceField<'a>>> = match self.stop {
            Payload::Fields(fields) => {
                Box::new(fields.iter().filter_map(move |(n, v)| {
                    let n = n.as_ref();
                    match begin.field(n) {
                        // The begin's value, written (or omitted) there.
                        Some(same) if same == v => None,
                        Some(_) => Some(SliceField::Value(n, true, v)),
                        None => keep(n, v).then_some(SliceField::Value(n, false, v)),
                    }
                }))
            }
            Payload::Error(e) => {
                Box::new(std::iter::once(SliceField::Error("stop.decode_error", e)))
            }
        };
        start.chain(stop)
    }
}

impl<N: AsRef<str>> Serialize for SliceArgs<'_, N> {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(None)?;
        for field in self.fields() {
            match field {
                SliceField::Value(name, false, value) => {
                    map.serialize_entry(name, &json_value(value))?
                }
                SliceField::Value(name, true, value) => {
                    map.serialize_entry(&format_args!("stop.{name}"), &json_value(value))?
                }
                SliceField::Error(name, e) => map.serialize_entry(name, e)?,
            }
        }
        map.end()
    }
}

impl<N: AsRef<str>> EventArgs for SliceArgs<'_, N> {
    fn is_empty(&self) -> bool {
        self.fields().next().is_none()
    }
}

#[derive(Serialize)]
pub(super) struct NameArg<'a> {
    pub(super) name: &'a str,
}

/// A poll's facts beyond its name, thread and times: the context polled, how the poll
/// ended unless it returned `Pending` (most do), and a start that was not seen.
#[derive(Serialize)]
pub(super) struct PollArgs {
    pub(super) ctx: Integer<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ended: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) start_exact: Option<bool>,
}

impl<T: EventArgs + ?Sized> EventArgs for &T {
    fn is_empty(&self) -> bool {
        (**self).is_empty()
    }
}

impl<N: AsRef<str>> EventArgs for Payload<N> {
    fn is_empty(&self) -> bool {
        matches!(self, Payload::Fields(fields) if fields.is_empty())
    }
}

impl EventArgs for NameArg<'_> {
    fn is_empty(&self) -> bool {
        false
    }
}

impl EventArgs for PollArgs {
    fn is_empty(&self) -> bool {
        false
    }
}

// JSON written by hand for the plain instants, the bulk of most traces: byte for byte
// what serde_json writes for the same values through [`JsonEvent`] and [`crate::json::Json`]
// (numbers through its own formatter; strings with nothing to escape copied as they are,
// any other through its escaper; rare value types through [`crate::json::Json`] itself).
use nettrace::{EventMetadata, FieldDesc, Value, ValueRef};
use serde_json::ser::{CompactFormatter, Formatter};

/// Whether `byte` goes into a JSON string as it is (serde_json escapes `"`, `\\` and
/// control characters; everything else, non-ASCII included, is copied).
fn plain(byte: u8) -> bool {
    byte >= 0x20 && byte != b'"' && byte != b'\\'
}

/// Writes `text` as a JSON string.
pub(super) fn string(buf: &mut Vec<u8>, text: &str) {
    if text.bytes().all(plain) {
        buf.push(b'"');
        buf.extend_from_slice(text.as_bytes());
        buf.push(b'"');
    } else {
        let _ = serde_json::to_writer(buf, text);
    }
}

/// `Provider/EventName` as a JSON string, without building it first.
pub(super) fn qualified_name(buf: &mut Vec<u8>, md: &EventMetadata) {
    let (provider, event) = (md.provider.as_bytes(), md.display_name.as_bytes());
    if provider.iter().chain(event).copied().all(plain) {
        buf.push(b'"');
        buf.extend_from_slice(provider);
        buf.push(b'/');
        buf.extend_from_slice(event);
        buf.push(b'"');
    } else {
        string(buf, &md.qualified_name());
    }
}

/// Writes `,"args":{...}` from the fields a payload's decoder visits: nothing when it
/// has none, the error's text instead when it does not decode.
pub(super) struct Args {
    at: usize,
    first: bool,
}

impl Args {
    pub(super) fn begin(buf: &mut Vec<u8>) -> Args {
        let at = buf.len();
        buf.extend_from_slice(b",\"args\":{");
        Args { at, first: true }
    }

    pub(super) fn field(&mut self, buf: &mut Vec<u8>, desc: &FieldDesc, value: ValueRef<'_>) {
        if !std::mem::take(&mut self.first) {
            buf.push(b',');
        }
        string(buf, &desc.name);
        buf.push(b':');
        super::json::value(buf, value);
    }

    /// A field whose key, `"Name":`, is written already.
    pub(super) fn field_with_key(&mut self, buf: &mut Vec<u8>, key: &[u8], value: ValueRef<'_>) {
        if !std::mem::take(&mut self.first) {
            buf.push(b',');
        }
        buf.extend_from_slice(key);
        super::json::value(buf, value);
    }

    pub(super) fn end(self, buf: &mut Vec<u8>, decoded: nettrace::Result<usize>) {
        match decoded {
            Ok(0) => buf.truncate(self.at),
            Ok(_) => buf.push(b'}'),
            Err(e) => {
                buf.truncate(self.at);
                buf.extend_from_slice(b",\"args\":{\"decode_error\":");
                string(buf, &e.to_string());
                buf.push(b'}');
            }
        }
    }
}

fn unsigned(buf: &mut Vec<u8>, n: u64) {
    buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// An instant's fields after its name: `"ph":"I"`, `ts`, `pid` and `tid`.
pub(super) fn instant_times(buf: &mut Vec<u8>, ts: i64, pid: u64, tid: u64) {
    buf.extend_from_slice(b",\"ph\":\"I\",\"ts\":");
    micros(buf, ts);
    buf.extend_from_slice(b",\"pid\":");
    unsigned(buf, pid);
    buf.extend_from_slice(b",\"tid\":");
    unsigned(buf, tid);
}

/// A GUID as its text, quoted (what `collect_str` makes of it).
fn guid(buf: &mut Vec<u8>, guid: &nettrace::Guid) {
    let b = &guid.0;
    buf.push(b'"');
    hex(buf, u32::from_le_bytes([b[0], b[1], b[2], b[3]]).into(), 8);
    buf.push(b'-');
    hex(buf, u16::from_le_bytes([b[4], b[5]]).into(), 4);
    buf.push(b'-');
    hex(buf, u16::from_le_bytes([b[6], b[7]]).into(), 4);
    buf.push(b'-');
    for (i, byte) in b[8..].iter().enumerate() {
        if i == 2 {
            buf.push(b'-');
        }
        hex(buf, u64::from(*byte), 2);
    }
    buf.push(b'"');
}

/// A pointer as its text, `"0x…"` (lower-case hex, no leading zeros).
fn pointer(buf: &mut Vec<u8>, p: u64) {
    buf.extend_from_slice(b"\"0x");
    hex(buf, p, (16 - p.leading_zeros() as usize / 4).max(1));
    buf.push(b'"');
}

/// `digits` lower-case hex digits of `value`, zero-padded.
fn hex(buf: &mut Vec<u8>, value: u64, digits: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for i in (0..digits).rev() {
        buf.push(HEX[(value >> (i * 4)) as usize & 0xf]);
    }
}

/// An owned payload value as [`crate::json::Json`] writes it.
pub(super) fn owned_value(buf: &mut Vec<u8>, value: &Value) {
    let mut number = itoa::Buffer::new();
    let digits = match *value {
        Value::I8(n) => number.format(n),
        Value::U8(n) => number.format(n),
        Value::I16(n) => number.format(n),
        Value::U16(n) => number.format(n),
        Value::I32(n) => number.format(n),
        Value::U32(n) => number.format(n),
        Value::I64(n) if n.unsigned_abs() <= MAX_SAFE_INTEGER => number.format(n),
        Value::U64(n) if n <= MAX_SAFE_INTEGER => number.format(n),
        Value::Bool(b) => {
            if b {
                "true"
            } else {
                "false"
            }
        }
        Value::F64(x) if x.is_finite() => {
            let _ = CompactFormatter.write_f64(buf, x);
            return;
        }
        Value::String(ref text) => return string(buf, text),
        Value::Guid(ref g) => return guid(buf, g),
        Value::Pointer(p) => return pointer(buf, p),
        _ => {
            let _ = serde_json::to_writer(buf, &json_value(value));
            return;
        }
    };
    buf.extend_from_slice(digits.as_bytes());
}

/// A time in nanoseconds as [`Micros`] writes it.
pub(super) fn micros(buf: &mut Vec<u8>, ns: i64) {
    // Below 10^15 ns, `ns / 1000` has at most 15 significant digits, so it is the
    // shortest decimal that reads back as the double nearest to it: what serde_json's
    // formatter (Ryū) writes for `ns as f64 / 1000.0`, here with no float arithmetic.
    // Its style: `1.0` for whole numbers, no exponent below 10^16.
    const EXACT_BELOW: u64 = 1_000_000_000_000_000;
    let magnitude = ns.unsigned_abs();
    if magnitude < EXACT_BELOW {
        if ns < 0 {
            buf.push(b'-');
        }
        buf.extend_from_slice(itoa::Buffer::new().format(magnitude / 1000).as_bytes());
        let thousandths = (magnitude % 1000) as usize;
        let digits = [
            b'0' + (thousandths / 100) as u8,
            b'0' + (thousandths / 10 % 10) as u8,
            b'0' + (thousandths % 10) as u8,
        ];
        let kept = 3 - digits.iter().rev().take_while(|&&d| d == b'0').count();
        buf.push(b'.');
        buf.extend_from_slice(&digits[..kept.max(1)]);
        return;
    }
    if magnitude <= MAX_SAFE_INTEGER {
        let _ = CompactFormatter.write_f64(buf, ns as f64 / 1000.0);
    } else {
        let _ = serde_json::to_writer(buf, &Micros(ns));
    }
}

/// A payload value as [`crate::json::Json`] writes its owned form.
pub(super) fn value(buf: &mut Vec<u8>, value: ValueRef<'_>) {
    let mut number = itoa::Buffer::new();
    let digits = match value {
        ValueRef::I8(n) => number.format(n),
        ValueRef::U8(n) => number.format(n),
        ValueRef::I16(n) => number.format(n),
        ValueRef::U16(n) => number.format(n),
        ValueRef::I32(n) => number.format(n),
        ValueRef::U32(n) => number.format(n),
        ValueRef::I64(n) if n.unsigned_abs() <= MAX_SAFE_INTEGER => number.format(n),
        ValueRef::U64(n) if n <= MAX_SAFE_INTEGER => number.format(n),
        ValueRef::Bool(b) => {
            if b {
                "true"
            } else {
                "false"
            }
        }
        ValueRef::F64(x) if x.is_finite() => {
            let _ = CompactFormatter.write_f64(buf, x);
            return;
        }
        ValueRef::Guid(g) => return guid(buf, &g),
        ValueRef::Pointer(p) => return pointer(buf, p),
        ValueRef::Utf16(s) => {
            let bytes = s.as_bytes();
            // Plain ASCII, the usual case, is its own UTF-8.
            if bytes.len() % 2 == 0
                && bytes
                    .chunks_exact(2)
                    .all(|u| u[1] == 0 && u[0] < 0x80 && plain(u[0]))
            {
                buf.push(b'"');
                buf.extend(bytes.chunks_exact(2).map(|u| u[0]));
                buf.push(b'"');
            } else {
                string(buf, &s.to_string_lossy());
            }
            return;
        }
        other => {
            let owned: Value = other.to_value();
            let _ = serde_json::to_writer(buf, &json_value(&owned));
            return;
        }
    };
    buf.extend_from_slice(digits.as_bytes());
}
