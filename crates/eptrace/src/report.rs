//! `eptrace report`: what a trace holds, in one read.
//!
//! Two passes run side by side on two threads. The file-order pass reads events as stored
//! and tallies everything the report shows, checking that each capture thread's timestamps
//! never decrease. The sorted pass reads the same bytes through [`SortedReader`] and checks
//! that its output never goes back in time and that it yields as many events. A mapped file
//! is simply read twice; standard input is read once and its bytes are teed over a bounded
//! channel to the sorted pass, so memory stays bounded by a few blocks either way.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet};

/// A fast hasher for the maps touched once per event (keys from the trace itself).
type FastHash = foldhash::fast::RandomState;
use std::io::{self, BufWriter, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result};
use eventpipe_insight::{AsyncTrace, BuiltProfile, ProfileBuilder, SampleSelection};
use nettrace::source::Input;
use nettrace::{EventMetadata, ReadStats, TraceInfo, TraceReader};
use serde::Serialize;

use crate::input::{self, InputSpec, Opened, PageRelease, PagedInput};
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

/// How many events pass between progress updates and cancellation checks.
const CHECK_EVERY: u64 = 4096;

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
// The report itself (its JSON form is the documented output).

/// Where a cut-off trace ends.
#[derive(Debug, Serialize)]
struct Truncated {
    /// The offset of the incomplete block (or missing block header).
    at_byte: u64,
    /// What was being read when the input ended.
    reading: &'static str,
}

#[derive(Debug, Serialize)]
struct Report {
    file: String,
    format_version: String,
    process_id: Option<u64>,
    pointer_size: u32,
    processor_count: Option<u32>,
    start_time_utc: Option<String>,
    /// First to last event timestamp; `None` without events.
    duration_ms: Option<f64>,
    file_bytes: u64,
    total_events: u64,
    /// Where a cut-off trace ends; `None` for a whole trace.
    truncated: Option<Truncated>,
    events_by_provider: BTreeMap<String, u64>,
    event_counts: BTreeMap<String, u64>,
    /// Most events first.
    threads: Vec<ThreadRow>,
    lost_events: Lost,
    stacks: Stacks,
    time_order: TimeOrder,
    /// Where the samples (CPU, allocation, or stack-carrying events) fall.
    profile: HotSpots,
    /// What instrumented futures did, when the trace has async-profiler data.
    #[serde(skip_serializing_if = "Option::is_none")]
    async_profile: Option<AsyncProfile>,
}

#[derive(Debug, Serialize)]
struct AsyncProfile {
    /// One row per instrumented site (future), most running time first.
    frames: Vec<AsyncFrameRow>,
    /// Root futures (tasks) created with no parent and still pending at the end of the
    /// trace, the oldest first.
    pending_roots: Vec<PendingRoot>,
    diagnostics: AsyncDiagnostics,
}

#[derive(Debug, Serialize)]
struct AsyncFrameRow {
    frame_id: u32,
    /// The site's name (`frame#N` when the trace does not describe it).
    name: String,
    file: Option<String>,
    line: Option<u32>,
    /// Futures whose creation the trace shows.
    created: u64,
    polls: u64,
    completed: u64,
    /// Dropped before completing.
    cancelled: u64,
    /// A poll panicked.
    panicked: u64,
    /// Still pending at the end of the trace.
    pending: u64,
    /// The sum of their polls (nested polls included).
    running_ms: f64,
    /// From each one's first poll to its end (or the trace's), minus its running time.
    suspended_ms: f64,
    mean_poll_us: f64,
}

#[derive(Debug, Serialize)]
struct PendingRoot {
    context: u64,
    frame: String,
    /// From its creation to the end of the trace.
    alive_ms: f64,
    polls: u64,
}

#[derive(Debug, Serialize)]
struct AsyncDiagnostics {
    /// `AsyncBuffer` events read.
    buffers: u64,
    /// Buffers missing from the per-thread sequence.
    lost_buffers: u64,
    lost_by_thread: Vec<LostRow>,
    /// Poll ends met with no poll open (their start was in lost data).
    empty_pops: u64,
    /// Buffers that did not decode (skipped).
    malformed: Vec<MalformedRow>,
    /// Buffers older than what was already read (skipped).
    out_of_order: u64,
    /// Stack records that disagreed with the polls open although nothing was lost.
    stack_mismatches: u64,
    /// Async-profiler events whose payload did not decode.
    undecodable_events: u64,
}

#[derive(Debug, Serialize)]
struct MalformedRow {
    thread_id: u64,
    sequence: u32,
    error: String,
}

#[derive(Debug, Serialize)]
struct HotSpots {
    /// What a sample is: `CPU samples`, `Allocations`, `Events with stacks`.
    kind: String,
    /// Captures: one per event that became a sample.
    samples: u64,
    /// What the samples stand for, summed, in `weight_unit`.
    total_weight: u64,
    /// `nanoseconds of CPU time`, `nanoseconds of thread time`, `bytes allocated`, ...
    weight_unit: String,
    /// `total_weight` in words: `5.790 s of CPU time`.
    total: String,
    /// Heaviest self weight first.
    functions: Vec<HotFunction>,
    /// Heaviest first; frames root first, joined by `;`.
    stacks: Vec<HotStack>,
    /// Modules that could not be symbolized, and why.
    notes: Vec<String>,
}

#[derive(Debug, Serialize)]
struct HotFunction {
    function: String,
    module: Option<String>,
    /// Weight of samples whose leaf is this function.
    self_weight: u64,
    /// Weight of samples with this function anywhere on the stack.
    total_weight: u64,
}

#[derive(Debug, Serialize)]
struct HotStack {
    stack: String,
    weight: u64,
}

#[derive(Debug, Serialize)]
struct ThreadRow {
    /// OS process id; in a multi-process (V6) trace thread ids repeat across processes.
    process_id: Option<u64>,
    thread_id: u64,
    /// The thread's name, from V6 thread blocks or this project's rundown.
    name: Option<String>,
    events: u64,
    /// Milliseconds since the trace's start of the thread's first and last events.
    first_ms: f64,
    last_ms: f64,
}

#[derive(Debug, Serialize)]
struct Lost {
    total: u64,
    by_thread: Vec<LostRow>,
}

#[derive(Debug, Serialize)]
struct LostRow {
    thread_id: u64,
    lost: u64,
}

#[derive(Debug, Serialize)]
struct Stacks {
    events_with_stack: u64,
    /// Distinct instruction-pointer sequences.
    distinct: u64,
    /// Events whose stack id named no stack the trace defined.
    unresolved: u64,
}

#[derive(Debug, Serialize)]
struct TimeOrder {
    ok: bool,
    /// Events earlier than the previous event of their capture thread, in file order.
    file_order_violations: u64,
    /// Capture threads with at least one such event.
    file_order_violating_threads: u64,
    /// Events the sorted reader yielded earlier than the event before them.
    sorted_violations: u64,
    /// Events the sorted reader yielded (must equal `total_events`).
    sorted_events: u64,
}

// ---------------------------------------------------------------------------------------
// Reading.

/// Reads the whole trace twice (file order and sorted) and builds the report.
fn gather(opened: Opened, name: &str, cut: crate::cut::CutTraces) -> Result<Report> {
    let stop = AtomicBool::new(false);
    let sorted_pos = AtomicU64::new(0);
    match opened {
        Opened::Mapped(_) => {
            let bytes = opened.bytes().unwrap_or(&[]);
            let total = bytes.len() as u64;
            let mut progress = Progress::new(Some(total));
            // Two readers of the map: pages both have passed are given back.
            let pages = PageRelease::new(bytes, 2);
            thread::scope(|s| {
                let sorted = s.spawn(|| {
                    let input = PagedInput::new(bytes, &pages, 1);
                    sorted_pass(cut.apply(TraceReader::new(input)?), &sorted_pos, &stop)
                });
                let main = TraceReader::new(PagedInput::new(bytes, &pages, 0))
                    .and_then(|r| file_pass(cut.apply(r), &mut progress, &sorted_pos));
                finish(main, sorted, total, name, &mut progress, &sorted_pos, &stop)
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
                        &stop,
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
    main: nettrace::Result<FilePass>,
    sorted: thread::ScopedJoinHandle<'_, nettrace::Result<SortedCheck>>,
    file_bytes: u64,
    name: &str,
    progress: &mut Progress,
    sorted_pos: &AtomicU64,
    stop: &AtomicBool,
) -> Result<Report> {
    let main = match main {
        Ok(m) => m,
        Err(e) => {
            // Relaxed: only asks the other pass to stop early; nothing is published.
            stop.store(true, Ordering::Relaxed);
            return Err(e.into());
        }
    };
    while !sorted.is_finished() {
        progress.set(sorted_pos.load(Ordering::Relaxed));
        thread::sleep(Duration::from_millis(50));
    }
    let sorted = match sorted.join() {
        Ok(result) => result.context("sorted pass")?,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    progress.finish();
    Ok(build(main, sorted, file_bytes, name))
}

/// The top of a symbolized profile of the trace.
fn hot_spots(built: BuiltProfile) -> HotSpots {
    let p = &built.profile;
    let functions = p
        .weight_by_function()
        .into_iter()
        .map(|(f, self_weight, total_weight)| HotFunction {
            function: p.frames[f].function.clone(),
            module: p.frames[f].module.clone(),
            self_weight,
            total_weight,
        })
        .collect();
    let stacks = p
        .weight_by_stack()
        .into_iter()
        .map(|(id, weight)| HotStack {
            stack: p.stacks[id]
                .iter()
                .map(|&f| p.frames[f].function.as_str())
                .collect::<Vec<_>>()
                .join(";"),
            weight,
        })
        .collect();
    HotSpots {
        kind: p.name.clone(),
        samples: p.samples.len() as u64,
        total_weight: p.total_weight(),
        weight_unit: if p.unit.is_time() {
            format!("nanoseconds of {}", p.unit.describe())
        } else {
            p.unit.describe().to_owned()
        },
        total: p.weight_text(p.total_weight()),
        functions,
        stacks,
        notes: built.notes.clone(),
    }
}

/// The async section, from the async profiler's decoded data.
fn async_profile(t: &AsyncTrace) -> AsyncProfile {
    let frames = t
        .frame_stats()
        .into_iter()
        .map(|s| {
            let described = t.frames.get(&s.frame);
            AsyncFrameRow {
                frame_id: s.frame.0,
                name: t.frame_name(s.frame).into_owned(),
                file: described.and_then(|f| f.file.clone()),
                line: described.and_then(|f| f.line),
                created: s.created,
                polls: s.polls,
                completed: s.completed,
                cancelled: s.cancelled,
                panicked: s.panicked,
                pending: s.pending,
                running_ms: t.ticks_to_ms(s.running_ticks),
                suspended_ms: t.ticks_to_ms(s.suspended_ticks),
                mean_poll_us: if s.polls == 0 {
                    0.0
                } else {
                    t.ticks_to_ms(s.running_ticks) * 1000.0 / s.polls as f64
                },
            }
        })
        .collect();
    let pending_roots = t
        .pending_roots()
        .into_iter()
        .map(|c| PendingRoot {
            context: c.id.0,
            frame: c
                .frame
                .map_or_else(|| "?".to_owned(), |f| t.frame_name(f).into_owned()),
            alive_ms: t.ticks_to_ms(t.alive_ticks(c)),
            polls: c.polls,
        })
        .collect();
    let d = &t.diagnostics;
    AsyncProfile {
        frames,
        pending_roots,
        diagnostics: AsyncDiagnostics {
            buffers: d.buffers,
            lost_buffers: d.lost_buffers,
            lost_by_thread: d
                .lost_by_thread
                .iter()
                .map(|&(thread_id, lost)| LostRow { thread_id, lost })
                .collect(),
            empty_pops: d.empty_pops,
            malformed: d
                .malformed
                .iter()
                .map(|m| MalformedRow {
                    thread_id: m.thread,
                    sequence: m.sequence,
                    error: m.error.to_string(),
                })
                .collect(),
            out_of_order: d.out_of_order,
            stack_mismatches: d.stack_mismatches,
            undecodable_events: d.undecodable_events,
        },
    }
}

/// The file-order pass's results.
#[derive(Debug)]
struct FilePass {
    tally: Tally,
    trace: TraceInfo,
    stats: ReadStats,
    profile: BuiltProfile,
}

fn file_pass<I: Input>(
    mut reader: TraceReader<I>,
    progress: &mut Progress,
    sorted_pos: &AtomicU64,
) -> nettrace::Result<FilePass> {
    let mut tally = Tally::default();
    let mut profile = ProfileBuilder::new(SampleSelection::Auto);
    while let Some(event) = reader.next_event()? {
        profile.observe(&event);
        tally.events += 1;
        tally.names.add(event.metadata);
        let ts = event.header.timestamp;
        let thread = tally
            .threads
            .entry((event.process_id(), event.thread_id()))
            .or_insert(ThreadTally {
                events: 0,
                first_ts: ts,
                last_ts: ts,
            });
        thread.events += 1;
        thread.first_ts = thread.first_ts.min(ts);
        thread.last_ts = thread.last_ts.max(ts);
        if let Some(name) = event.thread_name() {
            tally
                .thread_names
                .entry(event.thread_id())
                .or_insert_with(|| name.to_owned());
        } else if let Some((tid, name)) = eventpipe_insight::symbolize::rundown_thread(&event) {
            tally.thread_names.insert(tid, name);
        }
        tally.min_ts = Some(tally.min_ts.map_or(ts, |m| m.min(ts)));
        tally.max_ts = Some(tally.max_ts.map_or(ts, |m| m.max(ts)));
        // The raw capture thread (V6: its thread-table index), not the OS id: in a V6
        // trace of several processes two capture threads can share an OS id (0, say).
        let capture = event.header.capture_thread;
        if let Some(prev) = tally.last_ts_by_capture.insert(capture, ts) {
            if ts < prev {
                *tally.violations_by_capture.entry(capture).or_default() += 1;
            }
        }
        if let Some(stack) = event.stack {
            tally.events_with_stack += 1;
            if !tally.stacks.contains(stack) {
                tally.stacks.insert(stack.into());
            }
        }
        if tally.events % CHECK_EVERY == 0 {
            // Relaxed: a display value only.
            progress.set(event.offset.0.min(sorted_pos.load(Ordering::Relaxed)));
        }
    }
    Ok(FilePass {
        tally,
        trace: reader.trace().clone(),
        stats: reader.stats().clone(),
        profile: profile.finish(),
    })
}

/// What the sorted pass saw.
#[derive(Debug, Default)]
struct SortedCheck {
    events: u64,
    violations: u64,
}

fn sorted_pass<I: Input>(
    mut reader: TraceReader<I>,
    pos: &AtomicU64,
    stop: &AtomicBool,
) -> nettrace::Result<SortedCheck> {
    // Only the order is checked, so only timestamps are held, not the events.
    let check = nettrace::check_sorted_order(&mut reader, CHECK_EVERY, |_, offset| {
        // Relaxed: progress display and an early-exit hint; nothing is published.
        pos.fetch_max(offset, Ordering::Relaxed);
        !stop.load(Ordering::Relaxed)
    })?;
    pos.store(u64::MAX, Ordering::Relaxed);
    Ok(SortedCheck {
        events: check.events,
        violations: check.violations,
    })
}

/// Counters of the file-order pass.
#[derive(Debug, Default)]
struct ThreadTally {
    events: u64,
    first_ts: i64,
    last_ts: i64,
}

#[derive(Debug, Default)]
struct Tally {
    events: u64,
    names: NameCounter,
    threads: HashMap<(Option<u64>, u64), ThreadTally, FastHash>,
    thread_names: HashMap<u64, String>,
    last_ts_by_capture: HashMap<u64, i64, FastHash>,
    violations_by_capture: HashMap<u64, u64>,
    min_ts: Option<i64>,
    max_ts: Option<i64>,
    events_with_stack: u64,
    stacks: HashSet<Box<[u8]>, FastHash>,
}

/// Counts events per `Provider/EventName` without building the name for every event.
///
/// Metadata ids are cached, but a V6 trace may reuse an id after a metadata flush, so a
/// cached row is trusted only when its provider and name still match.
#[derive(Debug, Default)]
struct NameCounter {
    by_id: HashMap<u32, usize, FastHash>,
    by_name: HashMap<(String, String), usize>,
    rows: Vec<NameRow>,
}

#[derive(Debug)]
struct NameRow {
    provider: String,
    display: String,
    qualified: String,
    count: u64,
}

impl NameCounter {
    fn add(&mut self, md: &EventMetadata) {
        let cached = self.by_id.get(&md.metadata_id).copied().filter(|&i| {
            self.rows
                .get(i)
                .is_some_and(|r| r.provider == md.provider && r.display == md.display_name)
        });
        let slot = match cached {
            Some(i) => i,
            None => {
                let rows = &mut self.rows;
                let i = *self
                    .by_name
                    .entry((md.provider.clone(), md.display_name.clone()))
                    .or_insert_with(|| {
                        rows.push(NameRow {
                            provider: md.provider.clone(),
                            display: md.display_name.clone(),
                            qualified: md.qualified_name(),
                            count: 0,
                        });
                        rows.len() - 1
                    });
                self.by_id.insert(md.metadata_id, i);
                i
            }
        };
        if let Some(row) = self.rows.get_mut(slot) {
            row.count += 1;
        }
    }
}

fn build(main: FilePass, sorted: SortedCheck, file_bytes: u64, name: &str) -> Report {
    let FilePass {
        tally,
        trace,
        stats,
        profile,
    } = main;
    let mut events_by_provider = BTreeMap::new();
    let mut event_counts = BTreeMap::new();
    for row in &tally.names.rows {
        *events_by_provider.entry(row.provider.clone()).or_default() += row.count;
        *event_counts.entry(row.qualified.clone()).or_default() += row.count;
    }
    let mut threads: Vec<ThreadRow> = tally
        .threads
        .iter()
        .map(|(&(process_id, thread_id), t)| ThreadRow {
            process_id,
            thread_id,
            name: tally.thread_names.get(&thread_id).cloned(),
            events: t.events,
            first_ms: tally.min_ts.map_or(0.0, |lo| {
                trace.ticks_to_msec(t.first_ts) - trace.ticks_to_msec(lo)
            }),
            last_ms: tally.min_ts.map_or(0.0, |lo| {
                trace.ticks_to_msec(t.last_ts) - trace.ticks_to_msec(lo)
            }),
        })
        .collect();
    threads.sort_by(|a, b| {
        b.events
            .cmp(&a.events)
            .then(a.process_id.cmp(&b.process_id))
            .then(a.thread_id.cmp(&b.thread_id))
    });
    let file_order_violations = tally.violations_by_capture.values().sum();
    let time_order = TimeOrder {
        ok: file_order_violations == 0 && sorted.violations == 0 && sorted.events == tally.events,
        file_order_violations,
        file_order_violating_threads: tally.violations_by_capture.len() as u64,
        sorted_violations: sorted.violations,
        sorted_events: sorted.events,
    };
    let duration_ms = match (tally.min_ts, tally.max_ts) {
        (Some(lo), Some(hi)) => Some(trace.ticks_to_msec(hi) - trace.ticks_to_msec(lo)),
        _ => None,
    };
    Report {
        file: name.to_owned(),
        format_version: trace.version.to_string(),
        process_id: trace.process_id,
        pointer_size: trace.pointer_size,
        processor_count: trace.processor_count,
        start_time_utc: trace
            .ticks_to_unix_nanos(trace.sync_time_ticks)
            .map(nettrace::format_unix_nanos),
        duration_ms,
        file_bytes,
        total_events: tally.events,
        truncated: stats.truncation.as_ref().map(|t| Truncated {
            at_byte: t.offset,
            reading: t.what,
        }),
        events_by_provider,
        event_counts,
        threads,
        lost_events: Lost {
            total: stats.lost_events,
            by_thread: stats
                .lost_by_thread
                .iter()
                .map(|&(thread_id, lost)| LostRow { thread_id, lost })
                .collect(),
        },
        stacks: Stacks {
            events_with_stack: tally.events_with_stack,
            distinct: tally.stacks.len() as u64,
            unresolved: stats.unresolved_stacks,
        },
        time_order,
        async_profile: profile.async_trace.as_ref().map(async_profile),
        profile: hot_spots(profile),
    }
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

fn render_text(r: &Report, top: usize) -> String {
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
            "\nasync tasks never completed (root futures pending at the end) ({}):",
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
fn plural(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

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
