//! What a trace holds, in one read: the analysis behind `eptrace report`.
//!
//! A report combines two passes over the same trace. The file-order pass
//! ([`FileOrderPass::read`], or [`ReportBuilder`] for events read elsewhere) reads events
//! as stored and tallies everything the report shows: events per provider, name and
//! thread, lost events, stacks, the first and last timestamps, a symbolized profile's hot
//! spots and, when the trace has async-profiler data, what the instrumented futures did.
//! It also checks that each capture thread's timestamps never decrease. The sorted pass is
//! [`nettrace::check_sorted_order`] on a second reader of the same bytes; its
//! [`OrderCheck`] says whether sorted output would go back in time and how many events it
//! would yield. [`FileOrderPass::into_report`] combines both into a [`TraceReport`].
//!
//! The profile is most of the file-order pass's work, so it may be built apart:
//! [`read_profile`] on a third reader, with [`FileOrderPass::read_tallies`] and
//! [`FileOrderPass::into_report_with_profile`], and the report is the same.
//!
//! Neither pass prints or decides how they are scheduled: a caller runs them on their own
//! threads (as `eptrace report` does: three for a mapped file) or one after the other. [`TraceReport`] serializes to
//! the JSON `eptrace report --json` prints; its field names and order are that document's.

use std::collections::{BTreeMap, HashMap, HashSet};

use nettrace::source::Input;
use nettrace::{Event, EventMetadata, OrderCheck, ReadStats, TraceInfo, TraceReader};
use serde::Serialize;

use crate::{AsyncTrace, BuiltProfile, ProfileBuilder, SampleSelection};

use crate::hash::FastHash;

/// How many events pass between two calls of a pass's progress callback: often enough for
/// a progress bar and a cancellation check, rarely enough to cost nothing.
pub const PROGRESS_EVERY: u64 = 4096;

// ---------------------------------------------------------------------------------------
// The report itself (its JSON form is the documented output).

/// What a trace holds.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct TraceReport {
    /// The trace's name as the caller gave it (a path, or `-` for standard input).
    pub file: String,
    /// The nettrace format version (`V5`, `V6`, ...).
    pub format_version: String,
    /// The traced process, when the trace header states it.
    pub process_id: Option<u64>,
    /// The traced process's pointer size in bytes.
    pub pointer_size: u32,
    /// The traced machine's processors, when the trace header states them.
    pub processor_count: Option<u32>,
    /// The trace's start (its sync time) in UTC, ISO 8601; `None` when it has no clock.
    pub start_time_utc: Option<String>,
    /// First to last event timestamp; `None` without events.
    pub duration_ms: Option<f64>,
    /// Bytes read.
    pub file_bytes: u64,
    /// Events read in file order.
    pub total_events: u64,
    /// Where a cut-off trace ends; `None` for a whole trace.
    pub truncated: Option<Truncated>,
    /// Events per provider.
    pub events_by_provider: BTreeMap<String, u64>,
    /// Events per `Provider/EventName`.
    pub event_counts: BTreeMap<String, u64>,
    /// Most events first.
    pub threads: Vec<ThreadRow>,
    /// Events the trace says it lost.
    pub lost_events: Lost,
    /// Events with stacks.
    pub stacks: Stacks,
    /// Whether the timestamps keep the format's ordering guarantees.
    pub time_order: TimeOrder,
    /// Where the samples (CPU, allocation, or stack-carrying events) fall.
    pub profile: HotSpots,
    /// What instrumented futures did, when the trace has async-profiler data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub async_profile: Option<AsyncProfile>,
    /// What is wrong, by `eventpipe_analysis`'s rules, most severe first (`eptrace analyze`
    /// has the detail); empty for a healthy trace, or when the caller ran no analysis.
    pub findings: Vec<eventpipe_analysis::Finding>,
}

/// Where a cut-off trace ends.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Truncated {
    /// The offset of the incomplete block (or missing block header).
    pub at_byte: u64,
    /// What was being read when the input ended.
    pub reading: &'static str,
}

/// The async profiler's view of a trace.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct AsyncProfile {
    /// One row per instrumented site (future), most running time first.
    pub frames: Vec<AsyncFrameRow>,
    /// Root futures (tasks) created with no parent and still pending at the end of the
    /// trace, the oldest first.
    pub pending_roots: Vec<PendingRoot>,
    /// What went wrong reading the async profiler's data.
    pub diagnostics: AsyncDiagnostics,
}

/// One instrumented site: what its futures did.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct AsyncFrameRow {
    /// The site's id in the trace.
    pub frame_id: u32,
    /// The site's name (`frame#N` when the trace does not describe it).
    pub name: String,
    /// The source file of the site, when the trace describes it.
    pub file: Option<String>,
    /// The source line of the site, when the trace describes it.
    pub line: Option<u32>,
    /// Futures whose creation the trace shows.
    pub created: u64,
    /// Polls of its futures.
    pub polls: u64,
    /// Futures that completed.
    pub completed: u64,
    /// Dropped before completing.
    pub cancelled: u64,
    /// A poll panicked.
    pub panicked: u64,
    /// Still pending at the end of the trace.
    pub pending: u64,
    /// The sum of their polls (nested polls included).
    pub running_ms: f64,
    /// From each one's first poll to its end (or the trace's), minus its running time.
    pub suspended_ms: f64,
    /// Running time per poll, in microseconds (0 without polls).
    pub mean_poll_us: f64,
}

/// A task (a root future) still pending when the trace ended: running on, or stuck; the
/// trace cannot tell which.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct PendingRoot {
    /// The future's context id.
    pub context: u64,
    /// Its site's name (`?` when the trace does not say).
    pub frame: String,
    /// From its creation to the end of the trace.
    pub alive_ms: f64,
    /// Times it was polled.
    pub polls: u64,
}

/// Problems in the async profiler's data.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct AsyncDiagnostics {
    /// `AsyncBuffer` events read.
    pub buffers: u64,
    /// Buffers missing from the per-thread sequence.
    pub lost_buffers: u64,
    /// Lost buffers per thread.
    pub lost_by_thread: Vec<LostRow>,
    /// Poll ends met with no poll open (their start was in lost data).
    pub empty_pops: u64,
    /// Buffers that did not decode (skipped).
    pub malformed: Vec<MalformedRow>,
    /// Buffers older than what was already read (skipped).
    pub out_of_order: u64,
    /// Stack records that disagreed with the polls open although nothing was lost.
    pub stack_mismatches: u64,
    /// Async-profiler events whose payload did not decode.
    pub undecodable_events: u64,
}

/// An async-profiler buffer that did not decode.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct MalformedRow {
    /// The thread that wrote it.
    pub thread_id: u64,
    /// Its place in that thread's sequence.
    pub sequence: u32,
    /// Why it did not decode.
    pub error: String,
}

/// Where the samples fall: the top of a symbolized profile.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct HotSpots {
    /// What a sample is: `CPU samples`, `Allocations`, `Events with stacks`.
    pub kind: String,
    /// Captures: one per event that became a sample.
    pub samples: u64,
    /// What the samples stand for, summed, in `weight_unit`.
    pub total_weight: u64,
    /// `nanoseconds of CPU time`, `nanoseconds of thread time`, `bytes allocated`, ...
    pub weight_unit: String,
    /// `total_weight` in words: `5.790 s of CPU time`.
    pub total: String,
    /// Heaviest self weight first.
    pub functions: Vec<HotFunction>,
    /// Heaviest first; frames root first, joined by `;`.
    pub stacks: Vec<HotStack>,
    /// Modules that could not be symbolized, and why.
    pub notes: Vec<String>,
}

/// A function's share of the samples.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct HotFunction {
    /// The function's name.
    pub function: String,
    /// Its module, when known.
    pub module: Option<String>,
    /// Weight of samples whose leaf is this function.
    pub self_weight: u64,
    /// Weight of samples with this function anywhere on the stack.
    pub total_weight: u64,
}

/// A stack's share of the samples.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct HotStack {
    /// Function names, root first, joined by `;`.
    pub stack: String,
    /// Weight of samples with exactly this stack.
    pub weight: u64,
}

/// One thread's events.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ThreadRow {
    /// OS process id; in a multi-process (V6) trace thread ids repeat across processes.
    pub process_id: Option<u64>,
    /// OS thread id.
    pub thread_id: u64,
    /// The thread's name, from V6 thread blocks or this project's rundown.
    pub name: Option<String>,
    /// Events of the thread.
    pub events: u64,
    /// Milliseconds since the trace's first event of the thread's first event.
    pub first_ms: f64,
    /// Milliseconds since the trace's first event of the thread's last event.
    pub last_ms: f64,
}

/// Events the trace says it lost.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Lost {
    /// All of them.
    pub total: u64,
    /// Per thread, as the trace states them.
    pub by_thread: Vec<LostRow>,
}

/// What one thread lost.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct LostRow {
    /// OS thread id.
    pub thread_id: u64,
    /// Events (or async-profiler buffers) lost.
    pub lost: u64,
}

/// Events with stacks.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Stacks {
    /// Events that carry a stack.
    pub events_with_stack: u64,
    /// Distinct instruction-pointer sequences.
    pub distinct: u64,
    /// Events whose stack id named no stack the trace defined.
    pub unresolved: u64,
}

/// Whether the timestamps keep the format's ordering guarantees.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct TimeOrder {
    /// No violation either way, and the sorted reader yielded every event.
    pub ok: bool,
    /// Events earlier than the previous event of their capture thread, in file order.
    pub file_order_violations: u64,
    /// Capture threads with at least one such event.
    pub file_order_violating_threads: u64,
    /// Events the sorted reader yielded earlier than the event before them.
    pub sorted_violations: u64,
    /// Events the sorted reader yielded (must equal `total_events`).
    pub sorted_events: u64,
}

// ---------------------------------------------------------------------------------------
// The file-order pass.

/// The file-order pass's tallies, fed one event at a time.
#[derive(Debug)]
pub struct ReportBuilder {
    tally: Tally,
    /// `None` when the profile is built beside the tallies ([`read_profile`]).
    profile: Option<ProfileBuilder>,
}

impl Default for ReportBuilder {
    fn default() -> Self {
        ReportBuilder::new()
    }
}

impl ReportBuilder {
    /// An empty tally; its profile takes its samples as [`SampleSelection::Auto`] chooses.
    pub fn new() -> ReportBuilder {
        ReportBuilder {
            tally: Tally::default(),
            profile: Some(ProfileBuilder::new(SampleSelection::Auto)),
        }
    }

    /// The tallies alone: the report's profile is built by [`read_profile`], on another
    /// reader of the same trace, and handed to [`ReportBuilder::finish_with_profile`].
    pub fn without_profile() -> ReportBuilder {
        ReportBuilder {
            tally: Tally::default(),
            profile: None,
        }
    }

    /// Events observed so far.
    pub fn events(&self) -> u64 {
        self.tally.events
    }

    /// Takes one event, in file order.
    #[inline]
    pub fn observe(&mut self, event: &Event<'_>) {
        if let Some(profile) = &mut self.profile {
            profile.observe(event);
        }
        let tally = &mut self.tally;
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
        } else if let Some((tid, name)) = eventpipe_symbols::rundown_thread(event) {
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
    }

    /// The report: these tallies, with the reader's `trace` header and `stats` and the
    /// sorted pass's `sorted` check; `file` names the trace, which had `file_bytes` bytes.
    pub fn finish(
        mut self,
        trace: &TraceInfo,
        stats: &ReadStats,
        sorted: &OrderCheck,
        file_bytes: u64,
        file: &str,
    ) -> TraceReport {
        let profile = self
            .profile
            .take()
            .unwrap_or_else(|| ProfileBuilder::new(SampleSelection::Auto))
            .finish();
        self.finish_with_profile(profile, trace, stats, sorted, file_bytes, file)
    }

    /// The report, as [`ReportBuilder::finish`], with the profile built beside these
    /// tallies ([`read_profile`]) instead of by them.
    pub fn finish_with_profile(
        self,
        profile: BuiltProfile,
        trace: &TraceInfo,
        stats: &ReadStats,
        sorted: &OrderCheck,
        file_bytes: u64,
        file: &str,
    ) -> TraceReport {
        let tally = self.tally;
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
            ok: file_order_violations == 0
                && sorted.violations == 0
                && sorted.events == tally.events,
            file_order_violations,
            file_order_violating_threads: tally.violations_by_capture.len() as u64,
            sorted_violations: sorted.violations,
            sorted_events: sorted.events,
        };
        let duration_ms = match (tally.min_ts, tally.max_ts) {
            (Some(lo), Some(hi)) => Some(trace.ticks_to_msec(hi) - trace.ticks_to_msec(lo)),
            _ => None,
        };
        TraceReport {
            file: file.to_owned(),
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
                by_thread: lost_rows(&stats.lost_by_thread),
            },
            stacks: Stacks {
                events_with_stack: tally.events_with_stack,
                distinct: tally.stacks.len() as u64,
                unresolved: stats.unresolved_stacks,
            },
            time_order,
            async_profile: profile.async_trace.as_ref().map(async_profile),
            findings: Vec::new(),
            profile: hot_spots(profile),
        }
    }
}

/// A file-order pass read to the end of its trace, waiting for the sorted pass's check.
#[derive(Debug)]
pub struct FileOrderPass {
    builder: ReportBuilder,
    trace: TraceInfo,
    stats: ReadStats,
}

impl FileOrderPass {
    /// Reads `reader` to its end through a [`ReportBuilder`], calling `progress` with the
    /// current event's offset every [`PROGRESS_EVERY`] events.
    ///
    /// # Errors
    /// The reader's error, when the trace does not read (a cut-off trace is one unless
    /// the reader was told otherwise, [`TraceReader::accept_truncation`]).
    pub fn read<I: Input>(
        reader: TraceReader<I>,
        progress: impl FnMut(u64),
    ) -> nettrace::Result<FileOrderPass> {
        FileOrderPass::read_with(ReportBuilder::new(), reader, progress)
    }

    /// [`FileOrderPass::read`] without the profile, which [`read_profile`] builds on
    /// another reader of the trace (another thread); [`FileOrderPass::into_report_with_profile`]
    /// joins the two.
    ///
    /// # Errors
    /// As [`FileOrderPass::read`].
    pub fn read_tallies<I: Input>(
        reader: TraceReader<I>,
        progress: impl FnMut(u64),
    ) -> nettrace::Result<FileOrderPass> {
        FileOrderPass::read_with(ReportBuilder::without_profile(), reader, progress)
    }

    fn read_with<I: Input>(
        mut builder: ReportBuilder,
        mut reader: TraceReader<I>,
        mut progress: impl FnMut(u64),
    ) -> nettrace::Result<FileOrderPass> {
        // `EventRef`s made into `Event`s in place: cheaper than moving the reader's
        // `Event` out through its `Result`.
        while let Some(event) = reader.next_event_ref()? {
            builder.observe(&event.to_event());
            if builder.events() % PROGRESS_EVERY == 0 {
                progress(event.offset().0);
            }
        }
        Ok(FileOrderPass {
            builder,
            trace: reader.trace().clone(),
            stats: reader.stats(),
        })
    }

    /// Events read.
    pub fn events(&self) -> u64 {
        self.builder.events()
    }

    /// The report: this pass with the sorted pass's `sorted` check; `file` names the trace,
    /// which had `file_bytes` bytes.
    pub fn into_report(self, sorted: &OrderCheck, file_bytes: u64, file: &str) -> TraceReport {
        self.builder
            .finish(&self.trace, &self.stats, sorted, file_bytes, file)
    }

    /// The report of a pass read by [`FileOrderPass::read_tallies`], with the `profile`
    /// [`read_profile`] built.
    pub fn into_report_with_profile(
        self,
        profile: BuiltProfile,
        sorted: &OrderCheck,
        file_bytes: u64,
        file: &str,
    ) -> TraceReport {
        self.builder.finish_with_profile(
            profile,
            &self.trace,
            &self.stats,
            sorted,
            file_bytes,
            file,
        )
    }
}

/// The report's profile, read from its own reader of the trace so that it can be built
/// on another thread than the tallies ([`FileOrderPass::read_tallies`]): the reader is
/// dropped as soon as the last event is read, before the profile is symbolized. `progress`
/// is called with the current event's offset every [`PROGRESS_EVERY`] events; returning
/// `false` stops the pass early (the caller's other pass failed).
///
/// # Errors
/// As [`FileOrderPass::read`].
pub fn read_profile<I: Input>(
    mut reader: TraceReader<I>,
    mut progress: impl FnMut(u64) -> bool,
) -> nettrace::Result<BuiltProfile> {
    let mut builder = ProfileBuilder::new(SampleSelection::Auto);
    let mut events = 0u64;
    while let Some(event) = reader.next_event_ref()? {
        builder.observe(&event.to_event());
        events += 1;
        if events % PROGRESS_EVERY == 0 && !progress(event.offset().0) {
            break;
        }
    }
    drop(reader);
    Ok(builder.finish())
}

/// Lost counts per thread, as rows.
fn lost_rows(by_thread: &[(u64, u64)]) -> Vec<LostRow> {
    by_thread
        .iter()
        .map(|&(thread_id, lost)| LostRow { thread_id, lost })
        .collect()
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
            lost_by_thread: lost_rows(&d.lost_by_thread),
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

/// One thread's counters.
#[derive(Debug, Default)]
struct ThreadTally {
    events: u64,
    first_ts: i64,
    last_ts: i64,
}

/// Counters of the file-order pass.
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

#[cfg(test)]
mod tests {
    use super::*;
    use eventpipe::{EventDescriptor, FieldKind, FieldSpec, Level, Output, Provider};

    static PROVIDER: Provider = Provider::new("InsightReportTest");
    static TICK: EventDescriptor = EventDescriptor::new(
        &PROVIDER,
        1,
        0,
        "Tick",
        Level::Informational,
        0,
        0,
        &[FieldSpec {
            name: "N",
            kind: FieldKind::U64,
        }],
    );

    /// Five events from this thread (two with the same stack, one with another), three
    /// from a second thread, written by the runtime once and read back by every test.
    fn trace() -> &'static [u8] {
        static TRACE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        TRACE.get_or_init(write_trace)
    }

    fn write_trace() -> Vec<u8> {
        let path =
            std::env::temp_dir().join(format!("insight-report-{}.nettrace", std::process::id()));
        let session = eventpipe::Session::start(
            eventpipe::SessionConfig::new(
                vec![eventpipe::ProviderConfig::new("InsightReportTest")],
                Output::File(path.clone()),
            )
            .rundown(false),
        )
        .unwrap();
        for n in 0..2u64 {
            TICK.write_with(|p| p.put(&n));
        }
        TICK.write_with_stack(&[0x1000, 0x2000], |p| p.put(&2u64));
        TICK.write_with_stack(&[0x1000, 0x2000], |p| p.put(&3u64));
        TICK.write_with_stack(&[0x3000], |p| p.put(&4u64));
        std::thread::spawn(|| {
            for n in 0..3u64 {
                TICK.write_with(|p| p.put(&n));
            }
        })
        .join()
        .unwrap();
        session.stop().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        bytes
    }

    #[test]
    fn a_report_counts_events_threads_and_stacks_and_checks_the_order() {
        let bytes = trace();
        let mut offsets = Vec::new();
        let pass =
            FileOrderPass::read(TraceReader::from_slice(bytes).unwrap(), |o| offsets.push(o))
                .unwrap();
        assert!(offsets.is_empty(), "fewer events than PROGRESS_EVERY");
        let mut sorted_reader = TraceReader::from_slice(bytes).unwrap();
        let sorted =
            nettrace::check_sorted_order(&mut sorted_reader, PROGRESS_EVERY, |_, _| true).unwrap();
        let events = pass.events();
        assert!(events >= 8, "{events} events");
        let report = pass.into_report(&sorted, bytes.len() as u64, "t.nettrace");

        assert_eq!(report.file, "t.nettrace");
        assert_eq!(report.file_bytes, bytes.len() as u64);
        assert_eq!(report.total_events, events);
        assert_eq!(report.event_counts.get("InsightReportTest/Tick"), Some(&8));
        assert_eq!(report.events_by_provider.get("InsightReportTest"), Some(&8));
        let ours: Vec<u64> = report
            .threads
            .iter()
            .filter(|t| t.events >= 3)
            .map(|t| t.events)
            .collect();
        assert_eq!(
            ours.first(),
            Some(&5),
            "most events first: {:?}",
            report.threads
        );
        assert!(ours.contains(&3), "{:?}", report.threads);
        assert_eq!(report.stacks.events_with_stack, 3);
        assert_eq!(report.stacks.distinct, 2);
        assert_eq!(report.stacks.unresolved, 0);
        assert_eq!(report.lost_events.total, 0);
        assert!(report.truncated.is_none());
        assert!(report.duration_ms.is_some_and(|ms| ms >= 0.0));
        assert!(report.time_order.ok, "{:?}", report.time_order);
        assert_eq!(report.time_order.sorted_events, events);
    }

    #[test]
    fn a_sorted_pass_that_disagrees_makes_the_time_order_not_ok() {
        let bytes = trace();
        let pass = FileOrderPass::read(TraceReader::from_slice(bytes).unwrap(), |_| {}).unwrap();
        let short = OrderCheck {
            events: pass.events() - 1,
            violations: 0,
        };
        let report = pass.into_report(&short, 0, "-");
        assert!(!report.time_order.ok);
        assert_eq!(report.time_order.sorted_events, report.total_events - 1);
        assert_eq!(report.time_order.file_order_violations, 0);
    }

    #[test]
    fn an_empty_builder_has_no_duration_and_no_samples() {
        let bytes = trace();
        let reader = TraceReader::from_slice(bytes).unwrap();
        let report = ReportBuilder::new().finish(
            reader.trace(),
            &reader.stats(),
            &OrderCheck::default(),
            0,
            "-",
        );
        assert_eq!(report.total_events, 0);
        assert_eq!(report.duration_ms, None);
        assert!(report.threads.is_empty());
        assert_eq!(report.profile.samples, 0);
        assert!(report.async_profile.is_none());
        assert!(report.time_order.ok);
    }
}
