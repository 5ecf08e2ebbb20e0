//! One event per line, as text or as JSON lines: what `eptrace dump` prints.
//!
//! A text line is `msec ms  tid N  Provider/Event  field=value ...  [stack: N frames]`,
//! written straight into a byte buffer (integers, floats and times by hand, to the digit
//! what the formatter writes): printing is the cost of dumping a large trace. A JSON line
//! is one object with the event's header, its stack's addresses and its payload
//! ([`crate::json`], integers exact).
//!
//! The per-line and per-value helpers are `#[inline]`: `text_line` is instantiated in the
//! caller's crate (it is generic over the reader's kind of event), and a call per value
//! across the crate boundary would cost what the hand-written formatting saves.

use std::io::Write;

use nettrace::{Event, EventMetadata, EventRef};
use serde::Serialize;

use crate::json::{Fields, Numbers};

/// What a line reads of an event, from either reader's kind of event ([`EventRef`] from
/// the file-order reader, [`Event`] from the sorted one).
pub trait LineEvent<'r> {
    /// The event's metadata.
    fn metadata(&self) -> &'r EventMetadata;
    /// The OS thread that wrote it.
    fn thread_id(&self) -> u64;
    /// Its time, in milliseconds from the trace's start.
    fn timestamp_msec(&self) -> f64;
    /// Visits its decoded payload fields in order; how many there were.
    ///
    /// # Errors
    /// When the payload does not decode by its metadata.
    fn for_each_field(
        &self,
        visit: impl FnMut(&'r nettrace::FieldDesc, nettrace::ValueRef<'r>),
    ) -> nettrace::Result<usize>;
    /// The number of instruction pointers in the stack (a partial trailing one not counted).
    fn stack_frames(&self) -> usize;
    /// The event with every reference resolved, for JSON lines.
    fn event(&self) -> Event<'r>;
}

/// Frames in a stack of `bytes`, as `stack_ips` walks it: 4-byte pointers, else 8.
#[inline]
fn frames_in(bytes: &[u8], pointer_size: u32) -> usize {
    bytes.len() / if pointer_size == 4 { 4 } else { 8 }
}

impl<'r> LineEvent<'r> for EventRef<'r> {
    fn metadata(&self) -> &'r EventMetadata {
        EventRef::metadata(self)
    }
    fn thread_id(&self) -> u64 {
        EventRef::thread_id(self)
    }
    fn timestamp_msec(&self) -> f64 {
        EventRef::timestamp_msec(self)
    }
    fn for_each_field(
        &self,
        visit: impl FnMut(&'r nettrace::FieldDesc, nettrace::ValueRef<'r>),
    ) -> nettrace::Result<usize> {
        EventRef::for_each_field(self, visit)
    }
    fn stack_frames(&self) -> usize {
        frames_in(self.stack().unwrap_or(&[]), self.trace().pointer_size)
    }
    fn event(&self) -> Event<'r> {
        self.to_event()
    }
}

impl<'r> LineEvent<'r> for Event<'r> {
    fn metadata(&self) -> &'r EventMetadata {
        self.metadata
    }
    fn thread_id(&self) -> u64 {
        Event::thread_id(self)
    }
    fn timestamp_msec(&self) -> f64 {
        Event::timestamp_msec(self)
    }
    fn for_each_field(
        &self,
        visit: impl FnMut(&'r nettrace::FieldDesc, nettrace::ValueRef<'r>),
    ) -> nettrace::Result<usize> {
        Event::for_each_field(self, visit)
    }
    fn stack_frames(&self) -> usize {
        frames_in(self.stack.unwrap_or(&[]), self.trace.pointer_size)
    }
    fn event(&self) -> Event<'r> {
        *self
    }
}

// ---------------------------------------------------------------------------------------
// Text lines.

/// Appends `e` as a text line (no newline) to `line`: its time (`msec`), thread, provider
/// and name, its payload fields as `name=value` when `payload`, and its stack's size.
pub fn text_line<'r>(line: &mut Vec<u8>, e: &impl LineEvent<'r>, msec: f64, payload: bool) {
    let md = e.metadata();
    write_msec(line, msec);
    line.extend_from_slice(b" ms  tid ");
    line.extend_from_slice(itoa::Buffer::new().format(e.thread_id()).as_bytes());
    line.extend_from_slice(b"  ");
    line.extend_from_slice(md.provider.as_bytes());
    line.push(b'/');
    line.extend_from_slice(md.display_name.as_bytes());
    if payload {
        let start = line.len();
        line.push(b' ');
        let decoded = e.for_each_field(|desc, value| {
            line.push(b' ');
            line.extend_from_slice(desc.name.as_bytes());
            line.push(b'=');
            write_text_value(line, &value);
        });
        match decoded {
            Ok(0) => line.truncate(start),
            Ok(_) => {}
            Err(err) => {
                line.truncate(start);
                let _ = write!(line, "  payload_error={:?}", err.to_string());
            }
        }
    }
    let frames = e.stack_frames();
    if frames > 0 {
        line.extend_from_slice(b"  [stack: ");
        line.extend_from_slice(itoa::Buffer::new().format(frames).as_bytes());
        line.extend_from_slice(if frames == 1 { b" frame]" } else { b" frames]" });
    }
}

/// `msec` as `{:>12.4}` writes it (the same digits, by the same rounding: the exact
/// value of the double, ties to even), without the float formatter's slow exact path.
#[inline]
fn write_msec(line: &mut Vec<u8>, msec: f64) {
    let Some(v) = ten_thousandths(msec) else {
        let _ = write!(line, "{msec:>12.4}");
        return;
    };
    let mut whole = itoa::Buffer::new();
    let whole = whole.format(v.unsigned_abs() / 10_000);
    let frac = v.unsigned_abs() % 10_000;
    let negative = v < 0 || (v == 0 && msec.is_sign_negative());
    let width = usize::from(negative) + whole.len() + 5;
    line.extend(std::iter::repeat_n(b' ', 12usize.saturating_sub(width)));
    if negative {
        line.push(b'-');
    }
    line.extend_from_slice(whole.as_bytes());
    line.push(b'.');
    let digits = [
        b'0' + (frac / 1000) as u8,
        b'0' + (frac / 100 % 10) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ];
    line.extend_from_slice(&digits);
}

/// `x × 10⁴` rounded to an integer exactly as the formatter rounds (the double's exact
/// value, ties to even); `None` when it is not finite or too large for this path.
#[inline]
fn ten_thousandths(x: f64) -> Option<i64> {
    if !x.is_finite() || x.abs() >= 1e12 {
        return None;
    }
    let bits = x.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    // x = mantissa × 2^power exactly.
    let (mantissa, power) = if exponent == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1 << 52), exponent - 1075)
    };
    let scaled = i128::from(mantissa) * 10_000;
    let rounded = if power >= 0 {
        scaled << power
    } else if -power >= 127 {
        0
    } else {
        let shift = -power;
        let quotient = scaled >> shift;
        let rest = scaled - (quotient << shift);
        let half = 1i128 << (shift - 1);
        if rest > half || (rest == half && quotient & 1 == 1) {
            quotient + 1
        } else {
            quotient
        }
    };
    let value = i64::try_from(rounded).ok()?;
    Some(if x < 0.0 { -value } else { value })
}

/// A value as text, written into `line`; quoted (with Rust escapes) when it would not read
/// as one token.
#[inline]
fn write_text_value(line: &mut Vec<u8>, v: &nettrace::ValueRef<'_>) {
    use nettrace::ValueRef;
    let start = line.len();
    // Numbers are one token as written: no check needed.
    let mut number = itoa::Buffer::new();
    let digits = match *v {
        ValueRef::I8(n) => Some(number.format(n)),
        ValueRef::U8(n) => Some(number.format(n)),
        ValueRef::I16(n) => Some(number.format(n)),
        ValueRef::U16(n) => Some(number.format(n)),
        ValueRef::I32(n) => Some(number.format(n)),
        ValueRef::U32(n) => Some(number.format(n)),
        ValueRef::I64(n) => Some(number.format(n)),
        ValueRef::U64(n) => Some(number.format(n)),
        _ => None,
    };
    if let Some(digits) = digits {
        line.extend_from_slice(digits.as_bytes());
        return;
    }
    match v {
        ValueRef::F64(x) => return write_f64(line, *x),
        ValueRef::Guid(guid) => return write_guid(line, guid),
        ValueRef::Pointer(p) => {
            line.extend_from_slice(b"0x");
            return write_hex(line, *p);
        }
        ValueRef::Utf16(s) if write_ascii_utf16(line, s) => return,
        _ => {}
    }
    let _ = match v {
        ValueRef::Decimal(raw) => write!(line, "{}", crate::json::decimal_to_string(raw)),
        other => write!(line, "{other}"),
    };
    let written = &line[start..];
    let plain = !written.is_empty()
        && match std::str::from_utf8(written) {
            Ok(text) => !text
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '"'),
            Err(_) => false,
        };
    if !plain {
        let text = String::from_utf8_lossy(&line[start..]).into_owned();
        line.truncate(start);
        let _ = write!(line, "{text:?}");
    }
}

/// Writes `x` as `{x}` does (the shortest digits that read back as `x`, never an
/// exponent). Ryū finds the same shortest digits whenever they are at most 15 significant
/// ones: two decimals of 15 digits never read as the same double, so there is only one.
/// Beyond that, two may tie, and Ryū and the formatter break ties differently; those, and
/// the exponents Ryū writes for very large and small numbers, are left to the formatter.
#[inline]
fn write_f64(line: &mut Vec<u8>, x: f64) {
    if write_short_f64(line, x) {
        return;
    }
    if x.is_finite() {
        let mut buffer = ryu::Buffer::new();
        let text = buffer.format_finite(x).as_bytes();
        let text = text.strip_suffix(b".0").unwrap_or(text);
        let significant = text
            .iter()
            .filter(|b| b.is_ascii_digit())
            .skip_while(|&&b| b == b'0')
            .count();
        if significant <= 15 && !text.contains(&b'e') {
            line.extend_from_slice(text);
            return;
        }
    }
    let _ = write!(line, "{x}");
}

/// Writes `x` when its exact decimal value has at most 15 significant digits (whole
/// numbers below 10¹⁵, halves, fractions of a power of two such as 0.0009765625): that
/// value is then the shortest text that reads back as `x` (no other decimal of 15 digits
/// reads as the same double), so it is what `{x}` writes. Returns false, having written
/// nothing, for any other `x`.
#[inline]
fn write_short_f64(line: &mut Vec<u8>, x: f64) -> bool {
    const LIMIT: u64 = 1_000_000_000_000_000; // 10^15
    if !x.is_finite() {
        return false;
    }
    let negative = x.is_sign_negative();
    let bits = x.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    if exponent == 0 && fraction == 0 {
        line.extend_from_slice(if negative { b"-0" } else { b"0" });
        return true;
    }
    if exponent == 0 {
        return false; // subnormal: far more than 15 digits
    }
    // |x| = mantissa × 2^power exactly, with the mantissa odd (the fewest binary places).
    let mut mantissa = fraction | (1 << 52);
    let mut power = exponent - 1075;
    let zeros = mantissa.trailing_zeros();
    mantissa >>= zeros;
    power += zeros as i32;
    // The exact value as digits × 10^-places: mantissa × 5^places when power < 0.
    let (digits, places) = if power >= 0 {
        // Shifted only when it stays below 10^15, so nothing is shifted out.
        if power >= 64 || mantissa >= LIMIT >> power {
            return false;
        }
        (mantissa << power, 0usize)
    } else {
        let places = (-power) as usize;
        let mut digits = mantissa;
        for _ in 0..places {
            digits = match digits.checked_mul(5) {
                Some(d) if d < LIMIT => d,
                _ => return false,
            };
        }
        (digits, places)
    };
    if negative {
        line.push(b'-');
    }
    let mut text = itoa::Buffer::new();
    let text = text.format(digits).as_bytes();
    if places == 0 {
        line.extend_from_slice(text);
    } else if text.len() > places {
        let (whole, decimals) = text.split_at(text.len() - places);
        line.extend_from_slice(whole);
        line.push(b'.');
        line.extend_from_slice(decimals);
    } else {
        line.extend_from_slice(b"0.");
        line.extend(std::iter::repeat_n(b'0', places - text.len()));
        line.extend_from_slice(text);
    }
    true
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `{:x}`: lower-case hex without leading zeros.
#[inline]
fn write_hex(line: &mut Vec<u8>, value: u64) {
    let digits = (16 - value.leading_zeros() as usize / 4).max(1);
    for i in (0..digits).rev() {
        line.push(HEX_DIGITS[(value >> (i * 4)) as usize & 0xf]);
    }
}

/// `width` lower-case hex digits of `value`, zero-padded.
#[inline]
fn write_hex_fixed(line: &mut Vec<u8>, value: u64, width: usize) {
    for i in (0..width).rev() {
        line.push(HEX_DIGITS[(value >> (i * 4)) as usize & 0xf]);
    }
}

/// A GUID as its `Display` writes it: `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
#[inline]
fn write_guid(line: &mut Vec<u8>, guid: &nettrace::Guid) {
    let b = &guid.0;
    write_hex_fixed(line, u32::from_le_bytes([b[0], b[1], b[2], b[3]]).into(), 8);
    line.push(b'-');
    write_hex_fixed(line, u16::from_le_bytes([b[4], b[5]]).into(), 4);
    line.push(b'-');
    write_hex_fixed(line, u16::from_le_bytes([b[6], b[7]]).into(), 4);
    line.push(b'-');
    for (i, byte) in b[8..].iter().enumerate() {
        if i == 2 {
            line.push(b'-');
        }
        write_hex_fixed(line, u64::from(*byte), 2);
    }
}

/// A UTF-16 string of printable ASCII only, written as [`write_text_value`] writes any
/// string: as is when it reads as one token, else quoted with `"` and `\\` escaped (all
/// that `{:?}` escapes in printable ASCII). Returns false, having written nothing, for
/// any other string.
#[inline]
fn write_ascii_utf16(line: &mut Vec<u8>, s: &nettrace::Utf16Str<'_>) -> bool {
    let bytes = s.as_bytes();
    let units = bytes.chunks_exact(2);
    let printable = |u: &[u8]| u[1] == 0 && (0x20..0x7f).contains(&u[0]);
    if bytes.len() < 2 || !units.clone().all(printable) {
        return false;
    }
    if units.clone().all(|u| u[0] != b' ' && u[0] != b'"') {
        line.extend(units.map(|u| u[0]));
        return true;
    }
    line.push(b'"');
    for u in units {
        if u[0] == b'"' || u[0] == b'\\' {
            line.push(b'\\');
        }
        line.push(u[0]);
    }
    line.push(b'"');
    true
}

// ---------------------------------------------------------------------------------------
// JSON lines.

/// One event as a JSON object; field order is the documented key order.
#[derive(Debug, Serialize)]
struct JsonEvent<'a> {
    msec: f64,
    timestamp: i64,
    provider: &'a str,
    event: &'a str,
    name: String,
    event_id: u32,
    version: u32,
    thread_id: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    thread_name: Option<&'a str>,
    process_id: Option<u64>,
    capture_thread_id: u64,
    processor: u32,
    sequence: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    activity_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stack: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<Fields<'a, &'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_error: Option<String>,
}

/// Appends `e` as one JSON object (no newline) to `line`, in the documented key order; its
/// payload too when `payload`.
///
/// # Errors
/// When serde_json fails to write (it does not for these types).
pub fn json_line(
    line: &mut Vec<u8>,
    e: &Event<'_>,
    msec: f64,
    payload: bool,
) -> Result<(), serde_json::Error> {
    let decoded = if payload {
        Some(e.decode_payload())
    } else {
        None
    };
    let (fields, payload_error) = match &decoded {
        None => (None, None),
        Some(Ok(fields)) => (Some(Fields::new(fields, Numbers::Exact)), None),
        Some(Err(err)) => (None, Some(err.to_string())),
    };
    let md = e.metadata;
    let activity = e.activity_id();
    let record = JsonEvent {
        msec,
        timestamp: e.header.timestamp,
        provider: &md.provider,
        event: &md.display_name,
        name: md.qualified_name(),
        event_id: md.event_id,
        version: md.version,
        thread_id: e.thread_id(),
        thread_name: e.thread_name(),
        process_id: e.process_id(),
        capture_thread_id: e.capture_thread_id(),
        processor: e.header.processor,
        sequence: e.header.sequence_number,
        activity_id: (!activity.is_zero()).then(|| activity.to_string()),
        stack: e
            .stack
            .map(|_| e.stack_ips().map(|ip| format!("0x{ip:x}")).collect()),
        payload: fields,
        payload_error,
    };
    serde_json::to_writer(line, &record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventpipe_test_support::trace::md;

    fn text_value(v: nettrace::ValueRef<'_>) -> String {
        let mut line = b"x=".to_vec();
        write_text_value(&mut line, &v);
        String::from_utf8(line).unwrap()
    }

    #[test]
    fn text_values() {
        use nettrace::ValueRef;
        assert_eq!(text_value(ValueRef::Str8(b"plain")), "x=plain");
        assert_eq!(text_value(ValueRef::Str8(b"two words")), "x=\"two words\"");
        assert_eq!(text_value(ValueRef::Str8(b"")), "x=\"\"");
        assert_eq!(text_value(ValueRef::Str8(b"a\nb")), "x=\"a\\nb\"");
        assert_eq!(text_value(ValueRef::U32(7)), "x=7");
        assert_eq!(text_value(ValueRef::I64(-3)), "x=-3");
        assert_eq!(text_value(ValueRef::F64(0.5)), "x=0.5");
        assert_eq!(text_value(ValueRef::Pointer(255)), "x=0xff");
    }

    #[test]
    fn fast_text_values_match_the_formatter() {
        use nettrace::ValueRef;
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut floats = vec![
            0.0,
            -0.0,
            1.0,
            0.5,
            252045.0,
            87281.5,
            0.0009765625,
            1e15,
            1e16,
            1.5e-7,
            1e-5,
            123456.789,
            0.1,
            0.3,
            -2.5,
            1e300,
            5e-324,
            f64::MAX,
            f64::NAN,
            f64::INFINITY,
        ];
        for _ in 0..200_000 {
            floats.push(f64::from_bits(next()));
            floats.push((next() % 1_000_000_000) as f64 / (1u64 << (next() % 40)) as f64);
        }
        let mut short = 0;
        for x in floats {
            assert_eq!(text_value(ValueRef::F64(x)), format!("x={x}"), "{x:e}");
            short += usize::from(write_short_f64(&mut Vec::new(), x));
        }
        // The dyadic fractions above take the exact path.
        assert!(short > 20_000, "{short}");
        for _ in 0..10_000 {
            let guid = nettrace::Guid(std::array::from_fn(|_| next() as u8));
            assert_eq!(text_value(ValueRef::Guid(guid)), format!("x={guid}"));
            let p = next() >> (next() % 64);
            assert_eq!(text_value(ValueRef::Pointer(p)), format!("x=0x{p:x}"));
        }
        for text in [
            "plain",
            "/v2/orders/42",
            "two words",
            "",
            "q\"uote",
            "back\\slash",
            " ",
            "a\tb",
            "é",
            "x\u{1b}",
        ] {
            let bytes: Vec<u8> = text.encode_utf16().flat_map(u16::to_le_bytes).collect();
            let value = nettrace::ValueRef::Utf16(utf16(&bytes));
            let expected = {
                let mut line = b"x=".to_vec();
                let start = line.len();
                let _ = write!(line, "{value}");
                let written = String::from_utf8(line[start..].to_vec()).unwrap();
                let plain = !written.is_empty()
                    && !written
                        .chars()
                        .any(|c| c.is_whitespace() || c.is_control() || c == '"');
                if plain {
                    format!("x={written}")
                } else {
                    format!("x={written:?}")
                }
            };
            assert_eq!(text_value(value), expected, "{text:?}");
        }
    }

    /// A UTF-16 string value over `bytes` (without terminator), as a payload holds it.
    fn utf16(bytes: &[u8]) -> nettrace::Utf16Str<'static> {
        // Leaked so that the borrowed value can outlive this function: it is a test.
        let md: &'static EventMetadata = Box::leak(Box::new(md(
            0,
            "P",
            "E",
            &[("S", nettrace::FieldType::Utf16String)],
        )));
        let mut payload = bytes.to_vec();
        payload.extend_from_slice(&[0, 0]);
        let payload: &'static [u8] = Box::leak(payload.into_boxed_slice());
        let trace: &'static nettrace::TraceInfo = Box::leak(Box::new(nettrace::TraceInfo {
            version: nettrace::FormatVersion::V5,
            sync_time_utc: Default::default(),
            sync_time_ticks: 0,
            tick_frequency: 1,
            pointer_size: 8,
            process_id: None,
            processor_count: None,
            expected_cpu_sampling_rate: None,
            key_values: Vec::new(),
        }));
        let event = Event {
            header: Default::default(),
            metadata: md,
            payload,
            stack: None,
            thread: None,
            capture_thread: None,
            labels: None,
            offset: Default::default(),
            trace,
        };
        let mut found = None;
        event
            .for_each_field(|_, v| {
                if let nettrace::ValueRef::Utf16(s) = v {
                    found = Some(s);
                }
            })
            .expect("the payload decodes");
        found.expect("a UTF-16 string")
    }

    #[test]
    fn times_are_written_as_the_float_formatter_writes_them() {
        let mut values = vec![
            0.0,
            0.00004,
            0.00005,
            0.03125,
            0.09375,
            1.23456,
            1.36395,
            13720.846,
            99999999.99995,
            -2.5,
            -0.00001,
            1234567.0001,
            5e-324,
        ];
        // And a sweep of times as traces give them: ticks over a frequency.
        values.extend((0..200_000u64).map(|t| (t * 7919) as f64 / 2_595_733.609));
        for msec in values {
            let mut line = Vec::new();
            write_msec(&mut line, msec);
            assert_eq!(
                String::from_utf8(line).unwrap(),
                format!("{msec:>12.4}"),
                "{msec}"
            );
        }
    }
}
