//! `eptrace dump`: one line per event, as text or JSON lines, with filters.
//!
//! Events stream from the reader straight to a buffered stdout: nothing is held beyond the
//! reader's own block (and, with `--sorted`, one sequence-point region). Payloads are decoded
//! only for events that pass the filters, and not at all with `--no-payload`.

use std::io::{self, BufWriter, Write};

use anyhow::{Context, Result};
use nettrace::source::Input;
use nettrace::{Event, EventMetadata, SortedReader, TraceReader};
use serde::Serialize;

use crate::input::{self, InputSpec, Opened};
use crate::value_json::{decimal_to_string, Fields};

/// What `dump` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The trace to read.
    pub(crate) input: InputSpec,
    /// Whether a cut-off trace is read.
    pub(crate) cut: crate::cut::CutTraces,
    /// JSON lines instead of text.
    pub(crate) json: bool,
    /// Keep events of these providers (case-insensitive); empty keeps all.
    pub(crate) providers: Vec<String>,
    /// Keep events with these names, as `EventName` or `Provider/EventName`
    /// (case-insensitive); empty keeps all.
    pub(crate) events: Vec<String>,
    /// Keep events of these OS threads; empty keeps all.
    pub(crate) threads: Vec<u64>,
    /// Keep events at or after this many milliseconds.
    pub(crate) from_ms: Option<f64>,
    /// Keep events at or before this many milliseconds.
    pub(crate) to_ms: Option<f64>,
    /// Stop after this many events.
    pub(crate) limit: Option<u64>,
    /// Timestamp order instead of file order.
    pub(crate) sorted: bool,
    /// Decode and print payloads.
    pub(crate) payload: bool,
}

/// Runs `eptrace dump`.
pub(crate) fn do_dump(config: &Config) -> Result<()> {
    let name = config.input.display_name();
    let opened = input::open(&config.input)?;
    let mut out = BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    let stats = match opened {
        Opened::Mapped(_) => {
            let bytes = opened.bytes().unwrap_or(&[]);
            dump_from(crate::input::paged_reader(bytes), config, &name, &mut out)?
        }
        Opened::Stream(stream) => {
            dump_from(TraceReader::from_read(stream), config, &name, &mut out)?
        }
    };
    out.flush().context("cannot write to stdout")?;
    crate::cut::verdict(&name, stats.truncation.as_ref(), stats.events)
}

/// Both readers yield events the same way; this lets one loop drive either.
trait Events {
    fn next_event(&mut self) -> nettrace::Result<Option<Event<'_>>>;
    fn stats(&self) -> nettrace::ReadStats;
}

impl<I: Input> Events for TraceReader<I> {
    fn next_event(&mut self) -> nettrace::Result<Option<Event<'_>>> {
        TraceReader::next_event(self)
    }
    fn stats(&self) -> nettrace::ReadStats {
        TraceReader::stats(self)
    }
}

impl<I: Input> Events for SortedReader<I> {
    fn next_event(&mut self) -> nettrace::Result<Option<Event<'_>>> {
        SortedReader::next_event(self)
    }
    fn stats(&self) -> nettrace::ReadStats {
        SortedReader::stats(self)
    }
}

fn dump_from<I: Input>(
    reader: nettrace::Result<TraceReader<I>>,
    config: &Config,
    name: &str,
    out: &mut impl Write,
) -> Result<nettrace::ReadStats> {
    let reader = config
        .cut
        .apply(reader.with_context(|| format!("cannot read {name}"))?);
    if config.sorted {
        pump(SortedReader::new(reader), config, name, out)
    } else {
        pump(reader, config, name, out)
    }
}

fn pump(
    mut events: impl Events,
    config: &Config,
    name: &str,
    out: &mut impl Write,
) -> Result<nettrace::ReadStats> {
    if config.limit == Some(0) {
        return Ok(events.stats());
    }
    let filter = Filter::new(config);
    let mut printed = 0u64;
    let mut line = Vec::with_capacity(512);
    while let Some(event) = events
        .next_event()
        .with_context(|| format!("cannot read {name}"))?
    {
        let msec = event.timestamp_msec();
        if config.sorted && config.to_ms.is_some_and(|to| msec > to) {
            break; // sorted: every later event is later still
        }
        if !filter.matches(&event, msec) {
            continue;
        }
        line.clear();
        if config.json {
            json_line(&mut line, &event, msec, config.payload)?;
        } else {
            text_line(&mut line, &event, msec, config.payload);
        }
        line.push(b'\n');
        out.write_all(&line).context("cannot write to stdout")?;
        printed += 1;
        if config.limit == Some(printed) {
            break;
        }
    }
    Ok(events.stats())
}

/// The event filters, ready to test.
#[derive(Debug)]
struct Filter<'a> {
    providers: &'a [String],
    events: &'a [String],
    threads: &'a [u64],
    from_ms: Option<f64>,
    to_ms: Option<f64>,
}

impl<'a> Filter<'a> {
    fn new(c: &'a Config) -> Self {
        Filter {
            providers: &c.providers,
            events: &c.events,
            threads: &c.threads,
            from_ms: c.from_ms,
            to_ms: c.to_ms,
        }
    }

    fn matches(&self, e: &Event<'_>, msec: f64) -> bool {
        let md = e.metadata;
        (self.providers.is_empty()
            || self
                .providers
                .iter()
                .any(|p| p.eq_ignore_ascii_case(&md.provider)))
            && (self.events.is_empty() || self.events.iter().any(|n| event_name_matches(n, md)))
            && (self.threads.is_empty() || self.threads.contains(&e.thread_id()))
            && !self.from_ms.is_some_and(|from| msec < from)
            && !self.to_ms.is_some_and(|to| msec > to)
    }
}

/// Whether `wanted` names the event: its `EventName` (as TraceEvent prints it, or as the
/// trace states it) or its full `Provider/EventName`, ignoring ASCII case.
fn event_name_matches(wanted: &str, md: &EventMetadata) -> bool {
    if wanted.eq_ignore_ascii_case(&md.display_name)
        || (!md.event_name.is_empty() && wanted.eq_ignore_ascii_case(&md.event_name))
    {
        return true;
    }
    // `Provider/EventName` without building it: the provider may itself contain no '/',
    // but the event name may (`GC/Start`), so split at the provider's length.
    let (w, p) = (wanted.as_bytes(), md.provider.as_bytes());
    w.len() == p.len() + 1 + md.display_name.len()
        && w[..p.len()].eq_ignore_ascii_case(p)
        && w[p.len()] == b'/'
        && w[p.len() + 1..].eq_ignore_ascii_case(md.display_name.as_bytes())
}

// ---------------------------------------------------------------------------------------
// Text lines.

fn text_line(line: &mut Vec<u8>, e: &Event<'_>, msec: f64, payload: bool) {
    let md = e.metadata;
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
    let frames = e.stack_ips().count();
    if frames > 0 {
        line.extend_from_slice(b"  [stack: ");
        line.extend_from_slice(itoa::Buffer::new().format(frames).as_bytes());
        line.extend_from_slice(if frames == 1 { b" frame]" } else { b" frames]" });
    }
}

/// `msec` as `{:>12.4}` writes it (the same digits, by the same rounding: the exact
/// value of the double, ties to even), without the float formatter's slow exact path.
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
    let _ = match v {
        ValueRef::Decimal(raw) => write!(line, "{}", decimal_to_string(raw)),
        ValueRef::F64(x) => {
            let _ = write!(line, "{x}");
            return;
        }
        ValueRef::Guid(_) | ValueRef::Pointer(_) => {
            let _ = write!(line, "{v}");
            return;
        }
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

fn json_line(line: &mut Vec<u8>, e: &Event<'_>, msec: f64, payload: bool) -> Result<()> {
    let decoded = if payload {
        Some(e.decode_payload())
    } else {
        None
    };
    let (fields, payload_error) = match &decoded {
        None => (None, None),
        Some(Ok(fields)) => (Some(Fields(fields)), None),
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
    serde_json::to_writer(line, &record).context("cannot serialize an event")
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventpipe_test_support::trace::{md, MetadataExt};

    #[test]
    fn event_names() {
        let m = md(0, "Microsoft-Windows-DotNETRuntime", "", &[]).with_display_name("GC/Start");
        assert!(event_name_matches("gc/start", &m));
        assert!(event_name_matches(
            "Microsoft-Windows-DotNETRuntime/GC/Start",
            &m
        ));
        assert!(event_name_matches(
            "microsoft-windows-dotnetruntime/gc/START",
            &m
        ));
        assert!(!event_name_matches("Start", &m));
        assert!(!event_name_matches(
            "Microsoft-Windows-DotNETRuntime/GC",
            &m
        ));
        assert!(!event_name_matches(
            "Microsoft-Windows-DotNETRuntimeXGC/Start",
            &m
        ));
    }

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
