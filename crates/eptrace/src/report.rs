//! `eptrace report`: what a trace holds, in one read.
//!
//! The analysis is [`eventpipe_insight::report`]'s; this module reads the trace for it and
//! prints the result. Passes run side by side on their own threads. The file-order pass
//! ([`FileOrderPass`]) reads events as stored and tallies everything the report shows,
//! checking that each capture thread's timestamps never decrease. The sorted pass reads the
//! same bytes through [`nettrace::check_sorted_order`] and checks that sorted output never
//! goes back in time and that it yields as many events. A mapped file is simply read three
//! times: the profile (most of the work) is built by a third pass
//! ([`eventpipe_insight::report::read_profile`]) beside the tallies. Standard input is read
//! once and its bytes are teed over a bounded channel to the sorted pass, and the
//! file-order pass builds the profile too; memory stays bounded by a few blocks either way.
//!
//! The JSON output is [`TraceReport`] serialized; the text output is [`render_text`]'s.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{self, BufWriter, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result};
use eventpipe_analysis::Sections;
use eventpipe_insight::report::{AsyncProfile, FileOrderPass, HotSpots, TraceReport};
use nettrace::source::Input;
use nettrace::{OrderCheck, TraceReader};

use crate::input::{self, InputSpec, Opened, PageRelease, PagedInput};
use crate::numbers::plural;
use crate::progress::Progress;

/// What `report` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The trace to read.
    pub(crate) input: InputSpec,
    /// Print JSON instead of text.
    pub(crate) json: bool,
    /// How many rows each text table shows.
    pub(crate) top: usize,
    /// Whether a cut-off trace is read.
    pub(crate) cut: crate::cut::CutTraces,
}

/// Runs `eptrace report`.
pub(crate) fn do_report(config: &Config) -> Result<()> {
    let name = config.input.display_name();
    let opened = input::open(&config.input)?;
    let report =
        gather(opened, &name, config.cut).with_context(|| format!("cannot read {name}"))?;
    let text = if config.json {
        let mut s = serde_json::to_string_pretty(&report).context("cannot serialize the report")?;
        s.push('\n');
        s
    } else {
        render_text(&report, config.top)
    };
    let mut out = BufWriter::new(io::stdout().lock());
    out.write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    out.flush().context("cannot write to stdout")?;
    let cut = report.truncated.as_ref().map(|t| nettrace::Truncation {
        offset: t.at_byte,
        what: t.reading,
    });
    crate::cut::verdict(&name, cut.as_ref(), report.total_events)
}

// ---------------------------------------------------------------------------------------
// Reading.

/// Reads the whole trace twice (file order and sorted) and builds the report.
fn gather(opened: Opened, name: &str, cut: crate::cut::CutTraces) -> Result<TraceReport> {
    let stop = AtomicBool::new(false);
    // Shared with the sorted pass's filter, which the reader owns.
    let sorted_pos = Arc::new(AtomicU64::new(0));
    match opened {
        Opened::Mapped(_) => {
            let bytes = opened.bytes().unwrap_or(&[]);
            let total = bytes.len() as u64;
            let mut progress = Progress::new(Some(total));
            let profile_pos = AtomicU64::new(0);
            // Three readers of the map: pages all have passed are given back.
            let pages = PageRelease::new(bytes, 3);
            thread::scope(|s| {
                let sorted = s.spawn(|| {
                    let input = PagedInput::new(bytes, &pages, 1);
                    sorted_pass(cut.apply(TraceReader::new(input)?), &sorted_pos, name)
                });
                // The profile (its events' stacks, then their symbols) is most of the
                // work: it gets its own reader and thread, beside the tallies.
                let profile = s.spawn(|| {
                    let input = PagedInput::new(bytes, &pages, 2);
                    let reader = cut.apply(TraceReader::new(input)?);
                    let built = eventpipe_insight::report::read_profile(reader, |offset| {
                        // Relaxed: progress display and an early-exit hint.
                        profile_pos.fetch_max(offset, Ordering::Relaxed);
                        !stop.load(Ordering::Relaxed)
                    });
                    profile_pos.store(u64::MAX, Ordering::Relaxed);
                    built
                });
                let behind = || {
                    // Relaxed: display values only.
                    sorted_pos
                        .load(Ordering::Relaxed)
                        .min(profile_pos.load(Ordering::Relaxed))
                };
                let main = TraceReader::new(PagedInput::new(bytes, &pages, 0)).and_then(|r| {
                    FileOrderPass::read_tallies(cut.apply(r), |offset| {
                        progress.set(offset.min(behind()));
                    })
                });
                let main = match main {
                    Ok(main) => main,
                    Err(e) => {
                        // Relaxed: only asks the other passes to stop early.
                        stop.store(true, Ordering::Relaxed);
                        return Err(e.into());
                    }
                };
                while !profile.is_finished() {
                    progress.set(behind());
                    thread::sleep(Duration::from_millis(50));
                }
                let profile = match profile.join() {
                    Ok(result) => result.context("profile pass")?,
                    Err(panic) => std::panic::resume_unwind(panic),
                };
                let (sorted_check, findings) = wait_sorted(sorted, &mut progress, &sorted_pos)?;
                progress.finish();
                let mut report = main.into_report_with_profile(profile, &sorted_check, total, name);
                report.findings = findings;
                Ok(report)
            })
        }
        Opened::Stream(stream) => {
            let (tx, rx) = mpsc::sync_channel(16);
            let read = Cell::new(0u64);
            let tee = Tee {
                inner: stream,
                tx: Some(tx),
                read: &read,
            };
            let mut progress = Progress::new(None);
            thread::scope(|s| {
                let sorted = s.spawn(|| {
                    let reader = ChannelReader {
                        rx,
                        chunk: Vec::new(),
                        pos: 0,
                    };
                    sorted_pass(
                        cut.apply(TraceReader::from_read(reader)?),
                        &sorted_pos,
                        name,
                    )
                });
                // The file-order reader owns the tee; it is dropped when the pass returns,
                // which closes the channel and lets the sorted pass reach its end.
                let main = TraceReader::from_read(tee)
                    .and_then(|r| file_pass(cut.apply(r), &mut progress, &sorted_pos));
                let total = read.get();
                finish(main, sorted, total, name, &mut progress, &sorted_pos, &stop)
            })
        }
    }
}

/// Waits for the sorted pass and combines both passes; the file-order error wins.
fn finish(
    main: nettrace::Result<FileOrderPass>,
    sorted: thread::ScopedJoinHandle<'_, nettrace::Result<SortedPass>>,
    file_bytes: u64,
    name: &str,
    progress: &mut Progress,
    sorted_pos: &AtomicU64,
    stop: &AtomicBool,
) -> Result<TraceReport> {
    let main = match main {
        Ok(m) => m,
        Err(e) => {
            // Relaxed: only asks the other pass to stop early; nothing is published.
            stop.store(true, Ordering::Relaxed);
            return Err(e.into());
        }
    };
    let (sorted, findings) = wait_sorted(sorted, progress, sorted_pos)?;
    progress.finish();
    let mut report = main.into_report(&sorted, file_bytes, name);
    report.findings = findings;
    Ok(report)
}

/// The sorted pass's check and findings, once it is done.
fn wait_sorted(
    sorted: thread::ScopedJoinHandle<'_, nettrace::Result<SortedPass>>,
    progress: &mut Progress,
    sorted_pos: &AtomicU64,
) -> Result<SortedPass> {
    while !sorted.is_finished() {
        // Relaxed: a display value only.
        progress.set(sorted_pos.load(Ordering::Relaxed));
        thread::sleep(Duration::from_millis(50));
    }
    match sorted.join() {
        Ok(result) => Ok(result.context("sorted pass")?),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The file-order pass, showing how far both passes have come.
fn file_pass<I: Input>(
    reader: TraceReader<I>,
    progress: &mut Progress,
    sorted_pos: &AtomicU64,
) -> nettrace::Result<FileOrderPass> {
    FileOrderPass::read(reader, |offset| {
        // Relaxed: a display value only.
        progress.set(offset.min(sorted_pos.load(Ordering::Relaxed)));
    })
}

/// What the sorted pass gives: the trace's order check and the findings.
type SortedPass = (OrderCheck, Vec<eventpipe_analysis::Finding>);

/// The sorted pass: the whole trace's time order is checked by timestamps alone, and the
/// runtime events the analyses read are sorted and analyzed for the findings
/// ([`crate::analyze::pass`]); nothing else is held.
fn sorted_pass<I: Input>(
    reader: TraceReader<I>,
    pos: &Arc<AtomicU64>,
    name: &str,
) -> nettrace::Result<SortedPass> {
    let at = Arc::clone(pos);
    // The findings' sections: no rule reads off-CPU time, whose samples would only add sorting.
    let sections = Sections {
        offcpu: false,
        ..Sections::ALL
    };
    let pass = crate::analyze::pass(reader, sections, name, true, move |offset| {
        // Relaxed: a progress display value only.
        at.fetch_max(offset, Ordering::Relaxed);
    })?;
    pos.store(u64::MAX, Ordering::Relaxed);
    Ok((pass.order.unwrap_or_default(), pass.analysis.findings))
}

// ---------------------------------------------------------------------------------------
// Standard input, read once for two passes.

/// Passes reads through and sends a copy of every chunk to the sorted pass.
struct Tee<'a> {
    inner: Box<dyn Read>,
    /// `None` once the receiver has gone (the sorted pass ended early).
    tx: Option<SyncSender<Vec<u8>>>,
    read: &'a Cell<u64>,
}

impl Read for Tee<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.read.set(self.read.get() + n as u64);
            if let (Some(tx), Some(chunk)) = (&self.tx, buf.get(..n)) {
                if tx.send(chunk.to_vec()).is_err() {
                    self.tx = None;
                }
            }
        }
        Ok(n)
    }
}

/// Reads the chunks a [`Tee`] sends; end of input when the sender is dropped.
struct ChannelReader {
    rx: Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos >= self.chunk.len() {
            match self.rx.recv() {
                Ok(chunk) => {
                    self.chunk = chunk;
                    self.pos = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let rest = self.chunk.get(self.pos..).unwrap_or(&[]);
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.pos += n;
        Ok(n)
    }
}

// ---------------------------------------------------------------------------------------
// Text output.

/// The report as text: a summary, then tables of at most `top` rows.
fn render_text(r: &TraceReport, top: usize) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let opt = |v: Option<u64>| v.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
    let _ = writeln!(s, "file:            {} ({} bytes)", r.file, r.file_bytes);
    let _ = writeln!(s, "format:          {}", r.format_version);
    let _ = writeln!(s, "process id:      {}", opt(r.process_id));
    let _ = writeln!(s, "pointer size:    {} bytes", r.pointer_size);
    let _ = writeln!(
        s,
        "processors:      {}",
        opt(r.processor_count.map(u64::from))
    );
    let _ = writeln!(
        s,
        "start time:      {}",
        r.start_time_utc.as_deref().unwrap_or("unknown")
    );
    match r.duration_ms {
        Some(ms) => {
            let _ = writeln!(s, "duration:        {ms:.3} ms");
        }
        None => {
            let _ = writeln!(s, "duration:        n/a (no events)");
        }
    }
    let _ = writeln!(
        s,
        "total events:    {} ({}, {}, {})",
        r.total_events,
        plural(r.events_by_provider.len(), "provider"),
        plural(r.event_counts.len(), "event type"),
        plural(r.threads.len(), "thread")
    );
    let _ = writeln!(s, "events lost:     {}", r.lost_events.total);
    if let Some(t) = &r.truncated {
        let _ = writeln!(
            s,
            "CUT OFF:         the trace ends early at byte {} (inside a {}); everything here \
             covers only what came before",
            t.at_byte, t.reading
        );
    }
    let _ = writeln!(
        s,
        "stacks:          {} events with a stack, {} distinct{}",
        r.stacks.events_with_stack,
        r.stacks.distinct,
        if r.stacks.unresolved > 0 {
            format!(", {} unresolved", r.stacks.unresolved)
        } else {
            String::new()
        }
    );
    let t = &r.time_order;
    if t.ok {
        let _ = writeln!(s, "time order:      ok");
    } else {
        let _ = writeln!(
            s,
            "time order:      NOT OK: {} file-order violations on {} capture threads; sorted reader: \
             {} violations, {} of {} events",
            t.file_order_violations, t.file_order_violating_threads, t.sorted_violations, t.sorted_events, r.total_events
        );
    }

    table(
        &mut s,
        "events by provider",
        &by_count(&r.events_by_provider),
        top,
    );
    table(&mut s, "events by name", &by_count(&r.event_counts), top);
    let processes: std::collections::HashSet<Option<u64>> =
        r.threads.iter().map(|t| t.process_id).collect();
    let threads: Vec<(String, u64)> = r
        .threads
        .iter()
        .map(|t| {
            let id = match t.process_id {
                Some(pid) if processes.len() > 1 => format!("pid {pid} tid {}", t.thread_id),
                _ => format!("tid {}", t.thread_id),
            };
            let name = t
                .name
                .as_deref()
                .map(|n| format!(" {n}"))
                .unwrap_or_default();
            (
                format!("{id}{name}  ({:.1}-{:.1} ms)", t.first_ms, t.last_ms),
                t.events,
            )
        })
        .collect();
    let threads: Vec<(&str, u64)> = threads.iter().map(|(k, n)| (k.as_str(), *n)).collect();
    table(&mut s, "events by thread", &threads, top);
    if !r.lost_events.by_thread.is_empty() {
        let lost: Vec<(String, u64)> = r
            .lost_events
            .by_thread
            .iter()
            .map(|l| (format!("tid {}", l.thread_id), l.lost))
            .collect();
        let mut lost: Vec<(&str, u64)> = lost.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        lost.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        table(&mut s, "events lost by thread", &lost, top);
    }
    render_hot_spots(&mut s, &r.profile, top);
    if let Some(a) = &r.async_profile {
        render_async(&mut s, a, top);
    }
    if !r.findings.is_empty() {
        let _ = writeln!(
            s,
            "\nfindings ({}; eptrace analyze has the detail):",
            r.findings.len()
        );
        for f in &r.findings {
            let _ = writeln!(s, "  - {}", f.summary);
        }
    }
    s
}

fn render_async(s: &mut String, a: &AsyncProfile, top: usize) {
    use std::fmt::Write as _;
    let _ = writeln!(
        s,
        "\nasync futures ({}; times in ms, mean poll in µs):",
        plural(a.frames.len(), "instrumented site")
    );
    let _ = writeln!(
        s,
        "  {:>8} {:>8} {:>9} {:>9} {:>8} {:>8} {:>10} {:>10} {:>9}  future",
        "created",
        "polls",
        "completed",
        "cancelled",
        "panicked",
        "pending",
        "running",
        "suspended",
        "mean poll"
    );
    for f in a.frames.iter().take(top) {
        let location = match (&f.file, f.line) {
            (Some(file), Some(line)) => format!("  ({file}:{line})"),
            (Some(file), None) => format!("  ({file})"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "  {:>8} {:>8} {:>9} {:>9} {:>8} {:>8} {:>10.3} {:>10.3} {:>9.1}  {}{location}",
            f.created,
            f.polls,
            f.completed,
            f.cancelled,
            f.panicked,
            f.pending,
            f.running_ms,
            f.suspended_ms,
            f.mean_poll_us,
            f.name
        );
    }
    if a.frames.len() > top {
        let _ = writeln!(s, "  ... and {} more", a.frames.len() - top);
    }
    if !a.pending_roots.is_empty() {
        let _ = writeln!(
            s,
            "\nasync tasks still pending when the trace ended (root futures not yet complete) ({}):",
            a.pending_roots.len()
        );
        for r in a.pending_roots.iter().take(top) {
            let _ = writeln!(
                s,
                "  alive {:>10.3} ms  {:<9}  ctx {}  {}",
                r.alive_ms,
                plural(r.polls as usize, "poll"),
                r.context,
                r.frame
            );
        }
        if a.pending_roots.len() > top {
            let _ = writeln!(s, "  ... and {} more", a.pending_roots.len() - top);
        }
    }
    let d = &a.diagnostics;
    let mut problems: Vec<String> = Vec::new();
    if d.lost_buffers > 0 {
        let by: Vec<String> = d
            .lost_by_thread
            .iter()
            .map(|l| format!("tid {}: {}", l.thread_id, l.lost))
            .collect();
        problems.push(format!(
            "{} lost ({}); polls they ended show as lost",
            plural(d.lost_buffers as usize, "buffer"),
            by.join(", ")
        ));
    }
    for m in &d.malformed {
        problems.push(format!(
            "malformed buffer (tid {} sequence {}), skipped: {}",
            m.thread_id, m.sequence, m.error
        ));
    }
    for (n, what) in [
        (d.empty_pops, "poll ends with no poll open (ignored)"),
        (d.out_of_order, "buffers out of sequence order (skipped)"),
        (
            d.stack_mismatches,
            "Stack records disagreeing with the open polls",
        ),
        (
            d.undecodable_events,
            "async-profiler events that did not decode",
        ),
    ] {
        if n > 0 {
            problems.push(format!("{n} {what}"));
        }
    }
    if !problems.is_empty() {
        let _ = writeln!(
            s,
            "\nasync profiler data problems ({} buffers read):",
            d.buffers
        );
        for p in problems {
            let _ = writeln!(s, "  {p}");
        }
    }
}

fn render_hot_spots(s: &mut String, hot: &HotSpots, top: usize) {
    use std::fmt::Write as _;
    if hot.samples == 0 {
        let _ = writeln!(
            s,
            "\nhot spots: none (no event carries a stack; collect with --stacks or a sampling profile)"
        );
        return;
    }
    let pct = |w: u64| 100.0 * w as f64 / hot.total_weight.max(1) as f64;
    let _ = writeln!(
        s,
        "\nhottest functions ({}: {} samples standing for {}; self% = as the leaf, total% = \
         anywhere on the stack):",
        hot.kind, hot.samples, hot.total
    );
    for f in hot.functions.iter().take(top) {
        let module = f
            .module
            .as_deref()
            .map(|m| format!("  [{m}]"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  {:>6.2}% {:>6.2}%  {}{module}",
            pct(f.self_weight),
            pct(f.total_weight),
            f.function
        );
    }
    let _ = writeln!(s, "\nhottest stacks (leaf last):");
    for st in hot.stacks.iter().take(top.min(10)) {
        let frames: Vec<&str> = st.stack.split(';').collect();
        let shown = if frames.len() > 6 {
            format!("... {}", frames[frames.len() - 6..].join(" > "))
        } else {
            frames.join(" > ")
        };
        let _ = writeln!(s, "  {:>6.2}%  {shown}", pct(st.weight));
    }
    for note in &hot.notes {
        let _ = writeln!(s, "  note: {note}");
    }
}

/// `n thing` or `n things`.
/// Rows of `m`, most events first, then by name.
fn by_count(m: &BTreeMap<String, u64>) -> Vec<(&str, u64)> {
    let mut v: Vec<(&str, u64)> = m.iter().map(|(k, &n)| (k.as_str(), n)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v
}

fn table(s: &mut String, title: &str, rows: &[(&str, u64)], top: usize) {
    use std::fmt::Write as _;
    let _ = writeln!(s, "\n{title} ({}):", rows.len());
    let width = rows
        .iter()
        .take(top)
        .map(|(_, n)| n.to_string().len())
        .max()
        .unwrap_or(1);
    for (name, n) in rows.iter().take(top) {
        let _ = writeln!(s, "  {n:>width$}  {name}");
    }
    if rows.len() > top {
        let rest: u64 = rows.iter().skip(top).map(|(_, n)| n).sum();
        let _ = writeln!(s, "  ... and {} more ({rest} events)", rows.len() - top);
    }
}
