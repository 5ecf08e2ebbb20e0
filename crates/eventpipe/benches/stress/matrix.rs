//! EventPipe's stress matrix, run in-process against the `eventpipe` crate: the `stress`
//! bench's engine (`cargo bench -p eventpipe --bench stress -- FLAGS`), and what
//! `tests/stress.rs` runs on a corner of the matrix.
//!
//! The matrix is threads {1, 8, 16, 50, 100, 1000} × events per thread {1, 2, 100, 1000,
//! 100000} × output {file, listener} × mode {drop, block}; flags pick a subset. Each cell
//! runs on its own:
//!
//! 1. start a session that enables only [`PROVIDER`] (one provider for the whole run: cells
//!    run one after another and each cell's session is stopped before the next starts);
//! 2. spawn the writer threads and hold them at a start gate until all are ready, then
//!    release them together; thread `t` writes events with the counters
//!    `t * events .. (t + 1) * events` and a fixed byte-slice payload;
//! 3. join the writers and stop the session; the clock runs from the release to `stop()`
//!    returning;
//! 4. count the cell's events read back: from the trace file with
//!    [`nettrace::TraceReader`], or in the listener's callback.
//!
//! A cell passes when Block mode lost nothing (`dropped == 0`, `read == written`) and Drop
//! mode accounts for every event (`read + dropped == written`). Two further checks catch
//! miscounts that the totals alone could hide: the reader must see exactly the events the
//! session says it wrote, and in Block mode the counters read back must sum to the sum of
//! the counters written (a duplicate cannot cancel a loss).

// The bench and the test each use part of this module.
#![allow(dead_code)]

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use eventpipe::{
    define_event, write_event, BufferingMode, Level, Output, Provider, ProviderConfig, Session,
    SessionConfig, SessionStats,
};
use indicatif::{ProgressBar, ProgressStyle};
use nettrace::{EventMetadata, FormatVersion, TraceReader};
use serde::Serialize;

/// Thread counts of the full matrix.
pub(crate) const MATRIX_THREADS: &[u32] = &[1, 8, 16, 50, 100, 1000];
/// Events per thread of the full matrix.
pub(crate) const MATRIX_EVENTS: &[u64] = &[1, 2, 100, 1000, 100_000];

/// The provider every cell's session enables.
const PROVIDER_NAME: &str = "Eptrace-Stress";
static PROVIDER: Provider = Provider::new(PROVIDER_NAME);

define_event! {
    /// Written by threads whose index is 0 mod 3.
    static WRITE_A = PROVIDER { id: 1, name: "WriteA", level: Level::Informational, keywords: 0x1 }
        (counter: u64, data: &[u8]);
}
define_event! {
    /// Written by threads whose index is 1 mod 3.
    static WRITE_B = PROVIDER { id: 2, name: "WriteB", level: Level::Verbose, keywords: 0x2 }
        (counter: u64, data: &[u8]);
}
define_event! {
    /// Written by threads whose index is 2 mod 3.
    static WRITE_C = PROVIDER { id: 3, name: "WriteC", level: Level::Informational, keywords: 0 }
        (counter: u64, data: &[u8]);
}

/// Stack size of a writer thread: the write path needs about 2 KiB, and 1000 threads at the
/// default 2 MiB would reserve 2 GiB of address space for nothing.
const WRITER_STACK: usize = 256 << 10;

/// Where a cell's session sends its trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutputKind {
    /// A nettrace file in the run's directory.
    File,
    /// An in-process listener callback.
    Listener,
}

impl OutputKind {
    fn name(self) -> &'static str {
        match self {
            OutputKind::File => "file",
            OutputKind::Listener => "listener",
        }
    }
}

impl FromStr for OutputKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "file" => Ok(OutputKind::File),
            "listener" => Ok(OutputKind::Listener),
            _ => Err(format!("`{s}` is not an output (file, listener)")),
        }
    }
}

/// What a cell's writers do when the buffer budget runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Drop and count.
    Drop,
    /// Wait for the drain.
    Block,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Drop => "drop",
            Mode::Block => "block",
        }
    }

    fn buffering(self) -> BufferingMode {
        match self {
            Mode::Drop => BufferingMode::Drop,
            Mode::Block => BufferingMode::Block,
        }
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "drop" => Ok(Mode::Drop),
            "block" => Ok(Mode::Block),
            _ => Err(format!("`{s}` is not a mode (drop, block)")),
        }
    }
}

/// Parses `v5` or `v6`.
pub(crate) fn parse_format(s: &str) -> Result<FormatVersion, String> {
    match s.to_ascii_lowercase().as_str() {
        "v5" | "5" => Ok(FormatVersion::V5),
        "v6" | "6" => Ok(FormatVersion::V6),
        _ => Err(format!("`{s}` is not a format a session writes (v5, v6)")),
    }
}

/// What `stress` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Thread counts, in the order given, without repeats.
    pub(crate) threads: Vec<u32>,
    /// Events per thread, in the order given, without repeats.
    pub(crate) events: Vec<u64>,
    /// Outputs to try.
    pub(crate) outputs: Vec<OutputKind>,
    /// Modes to try.
    pub(crate) modes: Vec<Mode>,
    /// Each session's buffer budget in bytes.
    pub(crate) budget_bytes: usize,
    /// Length of each event's byte-slice field.
    pub(crate) payload_bytes: usize,
    /// The trace format sessions write.
    pub(crate) format: FormatVersion,
    /// JSON lines instead of a table.
    pub(crate) json: bool,
    /// Where trace files go; a fresh temporary directory when `None`.
    pub(crate) dir: Option<PathBuf>,
    /// Keep the trace files.
    pub(crate) keep: bool,
}

/// One cell of the matrix.
#[derive(Debug, Clone, Copy)]
struct Cell {
    threads: u32,
    events: u64,
    output: OutputKind,
    mode: Mode,
}

impl Cell {
    fn written(&self) -> u64 {
        u64::from(self.threads) * self.events
    }

    fn describe(&self) -> String {
        format!(
            "{} threads × {} events, {}, {}",
            self.threads,
            self.events,
            self.output.name(),
            self.mode.name()
        )
    }
}

/// One cell's outcome; the JSON form is the documented output, one object per line.
#[derive(Debug, Serialize)]
struct Row {
    threads: u32,
    events_per_thread: u64,
    output: &'static str,
    mode: &'static str,
    written: u64,
    read: u64,
    dropped: u64,
    events_per_sec: u64,
    peak_rss_bytes: u64,
    rss_bytes: u64,
}

/// Events of [`PROVIDER`] seen on the way back, and their counters' sum.
#[derive(Debug, Default)]
struct Tally {
    events: AtomicU64,
    counter_sum: AtomicU64,
}

/// Runs the cells of `config`, writing a table (or JSON lines) to `out` as they finish.
pub(crate) fn do_stress(config: &Config, out: &mut impl Write) -> Result<()> {
    let cells = matrix(config);
    let dir = if config.outputs.contains(&OutputKind::File) {
        Some(TraceDir::open(config.dir.as_deref(), config.keep)?)
    } else {
        None
    };
    let progress = progress_bar(cells.len());
    if !config.json {
        write_out(&progress, out, &table_header())?;
    }
    let mut failures = Vec::new();
    for (i, cell) in cells.iter().enumerate() {
        if let Some(bar) = &progress {
            bar.set_position(i as u64);
            bar.set_message(cell.describe());
        }
        let (row, problems) = run_cell(cell, config, dir.as_ref())
            .with_context(|| format!("stress cell {} failed to run", cell.describe()))?;
        let line = if config.json {
            let mut s = serde_json::to_string(&row).context("cannot serialize a row")?;
            s.push('\n');
            s
        } else {
            table_row(&row, problems.is_empty())
        };
        write_out(&progress, out, &line)?;
        if !problems.is_empty() {
            failures.push(format!("{}: {}", cell.describe(), problems.join("; ")));
        }
    }
    if let Some(bar) = &progress {
        bar.finish_and_clear();
    }
    if !config.json {
        write_out(
            &progress,
            out,
            "peak RSS is the process's high-water mark (VmHWM): process-wide, it never \
             decreases;\nRSS is VmRSS at the end of the cell.\n",
        )?;
    }
    if let Some(dir) = dir {
        dir.finish()?;
    }
    if !failures.is_empty() {
        let mut msg = format!(
            "{} of {} stress cells failed their checks:",
            failures.len(),
            cells.len()
        );
        for f in &failures {
            let _ = write!(msg, "\n  {f}");
        }
        bail!(msg);
    }
    Ok(())
}

/// The cells to run, threads outermost.
fn matrix(config: &Config) -> Vec<Cell> {
    let mut cells = Vec::new();
    for &threads in &config.threads {
        for &events in &config.events {
            for &output in &config.outputs {
                for &mode in &config.modes {
                    cells.push(Cell {
                        threads,
                        events,
                        output,
                        mode,
                    });
                }
            }
        }
    }
    cells
}

/// Runs one cell; returns its row and what its checks found wrong.
fn run_cell(cell: &Cell, config: &Config, dir: Option<&TraceDir>) -> Result<(Row, Vec<String>)> {
    let tally = Arc::new(Tally::default());
    let path = dir.filter(|_| cell.output == OutputKind::File).map(|d| {
        d.path.join(format!(
            "stress-{}t-{}e-{}.nettrace",
            cell.threads,
            cell.events,
            cell.mode.name()
        ))
    });
    let output = match (cell.output, &path) {
        (OutputKind::File, Some(path)) => Output::File(path.clone()),
        (OutputKind::File, None) => bail!("no directory for trace files"),
        (OutputKind::Listener, _) => {
            let tally = Arc::clone(&tally);
            let mut ours = OursCache::default();
            Output::Listener(Box::new(move |event: &nettrace::Event<'_>| {
                if ours.check(event.metadata) {
                    tally.events.fetch_add(1, Ordering::Relaxed);
                    tally
                        .counter_sum
                        .fetch_add(counter_of(event.payload), Ordering::Relaxed);
                }
            }))
        }
    };
    let session_config = SessionConfig::new(vec![ProviderConfig::new(PROVIDER_NAME)], output)
        .buffer_budget(config.budget_bytes)
        .mode(cell.mode.buffering())
        .format(config.format);
    let session = Session::start(session_config).context("cannot start the session")?;
    let payload = vec![0xA5u8; config.payload_bytes];
    let start = write_all(cell, &payload)?;
    let stats = session.stop().context("the session failed")?;
    let elapsed = start.elapsed();
    if let Some(path) = &path {
        let (events, sum) = count_file(path)?;
        tally.events.store(events, Ordering::Relaxed);
        tally.counter_sum.store(sum, Ordering::Relaxed);
        if !config.keep {
            std::fs::remove_file(path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
        }
    }
    let (peak_rss_bytes, rss_bytes) = memory();
    let written = cell.written();
    let read = tally.events.load(Ordering::Relaxed);
    let row = Row {
        threads: cell.threads,
        events_per_thread: cell.events,
        output: cell.output.name(),
        mode: cell.mode.name(),
        written,
        read,
        dropped: stats.events_dropped,
        events_per_sec: (written as f64 / elapsed.as_secs_f64().max(1e-9)).round() as u64,
        peak_rss_bytes,
        rss_bytes,
    };
    let problems = check(
        cell,
        &row,
        &stats,
        tally.counter_sum.load(Ordering::Relaxed),
    );
    Ok((row, problems))
}

/// What is wrong with a finished cell, if anything.
fn check(cell: &Cell, row: &Row, stats: &SessionStats, counter_sum: u64) -> Vec<String> {
    let mut problems = Vec::new();
    match cell.mode {
        Mode::Block => {
            if row.dropped != 0 {
                problems.push(format!(
                    "Block mode dropped {} events (must drop none)",
                    row.dropped
                ));
            }
            if row.read != row.written {
                problems.push(format!(
                    "Block mode read back {} of {} events written",
                    row.read, row.written
                ));
            } else if counter_sum != expected_counter_sum(row.written) {
                problems.push(format!(
                    "the counters read back sum to {counter_sum}, not {} (duplicated or \
                     corrupted events)",
                    expected_counter_sum(row.written)
                ));
            }
        }
        Mode::Drop => {
            if row.read + row.dropped != row.written {
                problems.push(format!(
                    "read {} + dropped {} = {}, not the {} written",
                    row.read,
                    row.dropped,
                    row.read + row.dropped,
                    row.written
                ));
            }
        }
    }
    if row.read != stats.events_written {
        problems.push(format!(
            "read back {} events but the session reports writing {}",
            row.read, stats.events_written
        ));
    }
    problems
}

/// The sum of the counters `0..written`, wrapping like the tally does.
pub(crate) fn expected_counter_sum(written: u64) -> u64 {
    let n = u128::from(written);
    (n * n.saturating_sub(1) / 2) as u64
}

/// A start gate: writers report ready and wait; the main thread waits for all of them and
/// opens the gate (or aborts it, when a thread could not be spawned).
#[derive(Debug, Default)]
struct Gate {
    /// (threads waiting, gate state)
    state: Mutex<(u32, GateState)>,
    changed: Condvar,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum GateState {
    #[default]
    Closed,
    Open,
    Aborted,
}

impl Gate {
    /// Writer side: waits for the gate; true when it opened, false when it was aborted.
    fn arrive(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 += 1;
        self.changed.notify_all();
        while s.1 == GateState::Closed {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        s.1 == GateState::Open
    }

    /// Main side: waits until `n` writers have arrived, then opens the gate.
    fn open_when(&self, n: u32) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.0 < n {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        s.1 = GateState::Open;
        self.changed.notify_all();
    }

    fn abort(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.1 = GateState::Aborted;
        self.changed.notify_all();
    }
}

/// Spawns the cell's writers, releases them together and joins them; returns the moment
/// of release.
fn write_all(cell: &Cell, payload: &[u8]) -> Result<Instant> {
    let gate = Gate::default();
    std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(cell.threads as usize);
        for t in 0..cell.threads {
            let gate = &gate;
            let spawned = std::thread::Builder::new()
                .name(format!("stress-{t}"))
                .stack_size(WRITER_STACK)
                .spawn_scoped(s, move || {
                    if gate.arrive() {
                        write_events(t, cell.events, payload);
                    }
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    gate.abort();
                    return Err(e).with_context(|| {
                        format!("cannot spawn writer thread {} of {}", t + 1, cell.threads)
                    });
                }
            }
        }
        gate.open_when(cell.threads);
        let start = Instant::now();
        for h in handles {
            if h.join().is_err() {
                bail!("a writer thread panicked");
            }
        }
        Ok(start)
    })
}

/// One writer's work: `events` events with the counters `t * events ..`.
fn write_events(t: u32, events: u64, payload: &[u8]) {
    let base = u64::from(t) * events;
    match t % 3 {
        0 => {
            for i in 0..events {
                write_event!(WRITE_A, base + i, payload);
            }
        }
        1 => {
            for i in 0..events {
                write_event!(WRITE_B, base + i, payload);
            }
        }
        _ => {
            for i in 0..events {
                write_event!(WRITE_C, base + i, payload);
            }
        }
    }
}

/// Remembers whether the last metadata row seen is [`PROVIDER`]'s, so the provider name is
/// compared once per row change rather than once per event.
#[derive(Debug, Default)]
struct OursCache {
    last: Option<(u32, bool)>,
}

impl OursCache {
    fn check(&mut self, md: &EventMetadata) -> bool {
        match self.last {
            Some((id, ours)) if id == md.metadata_id => ours,
            _ => {
                let ours = md.provider == PROVIDER_NAME;
                self.last = Some((md.metadata_id, ours));
                ours
            }
        }
    }
}

/// The counter field: the payload's first 8 bytes.
fn counter_of(payload: &[u8]) -> u64 {
    payload
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Counts [`PROVIDER`]'s events in a trace file and sums their counters.
///
/// The file is streamed a block at a time rather than mapped: a mapped multi-gigabyte trace
/// would count in this process's resident set and swamp the peak RSS the cells report.
fn count_file(path: &Path) -> Result<(u64, u64)> {
    let name = path.display();
    let file = File::open(path).with_context(|| format!("cannot open {name}"))?;
    let mut reader = TraceReader::from_read(BufReader::with_capacity(1 << 20, file))
        .with_context(|| format!("cannot read {name}"))?;
    let mut ours = OursCache::default();
    let (mut events, mut sum) = (0u64, 0u64);
    while let Some(event) = reader
        .next_event()
        .with_context(|| format!("cannot read {name}"))?
    {
        if ours.check(event.metadata) {
            events += 1;
            sum = sum.wrapping_add(counter_of(event.payload));
        }
    }
    if !reader.is_finished() {
        bail!("{name} ends without an end-of-stream marker");
    }
    Ok((events, sum))
}

/// (VmHWM, VmRSS) of this process in bytes; zeros where /proc is unavailable.
pub(crate) fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.trim().strip_suffix("kB"))
            .and_then(|kb| kb.trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// The directory trace files go to.
#[derive(Debug)]
struct TraceDir {
    path: PathBuf,
    /// We created it as a temporary directory: remove it at the end unless keeping.
    temporary: bool,
    keep: bool,
}

impl TraceDir {
    fn open(dir: Option<&Path>, keep: bool) -> Result<TraceDir> {
        let (path, temporary) = match dir {
            Some(d) => (d.to_path_buf(), false),
            None => (
                std::env::temp_dir().join(format!("eventpipe-stress-{}", std::process::id())),
                true,
            ),
        };
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(TraceDir {
            path,
            temporary,
            keep,
        })
    }

    fn finish(self) -> Result<()> {
        if self.keep {
            let _ = writeln!(
                io::stderr().lock(),
                "stress: trace files kept in {}",
                self.path.display()
            );
        } else if self.temporary {
            std::fs::remove_dir_all(&self.path)
                .with_context(|| format!("cannot remove {}", self.path.display()))?;
        }
        Ok(())
    }
}

/// A per-cell progress bar on stderr, only when stderr is a terminal.
fn progress_bar(cells: usize) -> Option<ProgressBar> {
    if !io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(cells as u64);
    if let Ok(style) = ProgressStyle::with_template("[{elapsed_precise}] cell {pos}/{len}: {msg}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(250));
    Some(bar)
}

/// Writes `text` to `out` (flushed, so rows appear as cells finish) without tearing the bar.
fn write_out(progress: &Option<ProgressBar>, out: &mut impl Write, text: &str) -> Result<()> {
    let mut write = || -> io::Result<()> {
        out.write_all(text.as_bytes())?;
        out.flush()
    };
    match progress {
        Some(bar) => bar.suspend(write),
        None => write(),
    }
    .context("cannot write the results")
}

fn table_header() -> String {
    format!(
        "{:>7} {:>13} {:>8} {:>5} {:>11} {:>11} {:>11} {:>10} {:>10} {:>10} {}\n",
        "threads",
        "events/thread",
        "output",
        "mode",
        "written",
        "read",
        "dropped",
        "events/s",
        "peak RSS",
        "RSS",
        "check"
    )
}

fn table_row(row: &Row, ok: bool) -> String {
    format!(
        "{:>7} {:>13} {:>8} {:>5} {:>11} {:>11} {:>11} {:>10} {:>10} {:>10} {}\n",
        row.threads,
        row.events_per_thread,
        row.output,
        row.mode,
        row.written,
        row.read,
        row.dropped,
        rate(row.events_per_sec),
        mib(row.peak_rss_bytes),
        mib(row.rss_bytes),
        if ok { "ok" } else { "FAIL" }
    )
}

fn rate(per_sec: u64) -> String {
    match per_sec {
        n if n >= 1_000_000 => format!("{:.2} M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1} k", n as f64 / 1e3),
        n => n.to_string(),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}
