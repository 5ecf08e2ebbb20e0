//! `eptrace dump`: one line per event, as text or JSON lines, with filters.
//!
//! Events stream from the reader straight to a buffered stdout: nothing is held beyond the
//! reader's own block (and, with `--sorted`, one sequence-point region). Payloads are decoded
//! only for events that pass the filters, and not at all with `--no-payload`.

use std::io::{self, BufWriter, Write};

use anyhow::{Context, Result};
use eventpipe_insight::lines::{json_line, text_line, LineEvent};
use nettrace::source::Input;
use nettrace::{Event, EventMetadata, EventRef, SortedReader, TraceReader};

use crate::input::{self, InputSpec, Opened};

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

/// Both readers yield events the same way; this lets one loop drive either. The file-order
/// reader hands out [`EventRef`]s (no copy of the header, the payload decoded by the
/// metadata's precompiled field plan); the sorted one, [`Event`]s.
trait Events {
    type Event<'a>: LineEvent<'a>
    where
        Self: 'a;
    fn next_event(&mut self) -> nettrace::Result<Option<Self::Event<'_>>>;
    fn stats(&self) -> nettrace::ReadStats;
}

impl<I: Input> Events for TraceReader<I> {
    type Event<'a>
        = EventRef<'a>
    where
        Self: 'a;
    fn next_event(&mut self) -> nettrace::Result<Option<EventRef<'_>>> {
        TraceReader::next_event_ref(self)
    }
    fn stats(&self) -> nettrace::ReadStats {
        TraceReader::stats(self)
    }
}

impl<I: Input> Events for SortedReader<I> {
    type Event<'a>
        = Event<'a>
    where
        Self: 'a;
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
    // Lines are written straight into one buffer, handed to `out` whenever it holds more
    // than `FLUSH_AT`: no per-line copy.
    const FLUSH_AT: usize = 256 * 1024;
    let mut buf: Vec<u8> = Vec::with_capacity(FLUSH_AT + 4096);
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
        if config.json {
            json_line(&mut buf, &event.event(), msec, config.payload)
                .context("cannot serialize an event")?;
        } else {
            text_line(&mut buf, &event, msec, config.payload);
        }
        buf.push(b'\n');
        if buf.len() >= FLUSH_AT {
            out.write_all(&buf).context("cannot write to stdout")?;
            buf.clear();
        }
        printed += 1;
        if config.limit == Some(printed) {
            break;
        }
    }
    out.write_all(&buf).context("cannot write to stdout")?;
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

    fn matches<'r>(&self, e: &impl LineEvent<'r>, msec: f64) -> bool {
        let md = e.metadata();
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
}
