//! `eptrace collect`: attach to (or start) a process, record a session, stop cleanly.
//!
//! The trace flows from the process's socket through a tee: every byte goes to the file
//! as it arrives, and the same bytes feed a streaming reader that counts events and
//! losses for the status line and the summary. Stopping (duration, Enter, Ctrl-C, or the
//! process ending) sends `StopTracing` and reads on until the process ends the stream, so
//! the file ends the way the format requires.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use eventpipe_ipc::command::CollectTracing;

use eventpipe_client::request::{silent_profilers, silent_providers, TraceRequest};
use eventpipe_client::{Target, TargetSpec, TraceSession, STOP_GRACE};

/// Everything `collect` was asked to do.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) target: TargetSpec,
    /// Providers, presets, buffering and format.
    pub(crate) request: TraceRequest,
    pub(crate) duration: Option<Duration>,
    pub(crate) output: Option<PathBuf>,
    /// Formats to convert the trace to once it is complete.
    pub(crate) convert: Vec<crate::convert::ConvertFormat>,
}

/// What the stream held, counted as it arrived.
#[derive(Debug, Default)]
struct Counters {
    bytes: AtomicU64,
    events: AtomicU64,
    lost: AtomicU64,
    /// Microseconds from `collect` starting to the first event read (0: none yet).
    first_event_us: AtomicU64,
}

/// The reader thread's verdict.
#[derive(Debug, Default)]
struct StreamSummary {
    by_provider: BTreeMap<String, u64>,
    /// The reader's complaint, if the bytes stopped making a valid trace.
    problem: Option<String>,
    /// The stream ended with the format's end marker.
    complete: bool,
    /// Why the process aborted the session, when its trace says so
    /// (`EventPipeRs-Session/SessionAborted`).
    aborted: Option<String>,
}

/// Copies what it reads into the trace file, counting bytes.
struct Tee<R> {
    inner: R,
    file: BufWriter<File>,
    counters: Arc<Counters>,
    write_error: Option<std::io::Error>,
}

impl<R: Read> Read for Tee<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if self.write_error.is_none() {
            // A short read means the stream has caught up: put what we have on disk, so a
            // quiet trace is never held back in the buffer.
            let written = self.file.write_all(&buf[..n]).and_then(|()| {
                if n < buf.len() {
                    self.file.flush()
                } else {
                    Ok(())
                }
            });
            if let Err(e) = written {
                self.write_error = Some(e);
            }
        }
        self.counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

fn read_stream<R: Read>(mut tee: Tee<R>, began: Instant) -> (StreamSummary, Result<()>) {
    let mut summary = StreamSummary::default();
    let counters = Arc::clone(&tee.counters);
    match nettrace::TraceReader::from_read(&mut tee) {
        Ok(mut reader) => loop {
            // The borrowed view: only the provider is needed here, per event.
            match reader.next_event_ref() {
                Ok(Some(e)) => {
                    // A lookup by &str first: no allocation per event.
                    let provider = e.metadata().provider.as_str();
                    if provider == "EventPipeRs-Session" {
                        let why = e.to_event().decode_payload().ok().and_then(|fields| {
                            fields.into_iter().find_map(|(name, value)| {
                                (name == "Reason").then(|| value.to_string())
                            })
                        });
                        summary.aborted = why;
                    }
                    match summary.by_provider.get_mut(provider) {
                        Some(count) => *count += 1,
                        None => {
                            summary.by_provider.insert(provider.to_string(), 1);
                        }
                    }
                    let n = counters.events.fetch_add(1, Ordering::Relaxed) + 1;
                    if n == 1 {
                        let us = began.elapsed().as_micros().max(1);
                        counters
                            .first_event_us
                            .store(u64::try_from(us).unwrap_or(u64::MAX), Ordering::Relaxed);
                    }
                    if n % 4096 == 0 {
                        counters
                            .lost
                            .store(reader.stats().lost_events, Ordering::Relaxed);
                    }
                }
                Ok(None) => {
                    summary.complete = true;
                    counters
                        .lost
                        .store(reader.stats().lost_events, Ordering::Relaxed);
                    break;
                }
                Err(e) => {
                    summary.problem = Some(eventpipe_client::with_causes(&e));
                    break;
                }
            }
        },
        Err(e) => summary.problem = Some(eventpipe_client::with_causes(&e)),
    }
    // Whatever follows (after a parse problem) still goes to the file.
    let _ = std::io::copy(&mut tee, &mut std::io::sink());
    let flushed = match tee.write_error.take() {
        Some(e) => Err(e),
        None => tee.file.flush(),
    };
    (summary, flushed.context("writing the trace file"))
}

/// Why collection stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Duration,
    User,
    StreamEnded,
    ProcessExited,
}

pub(crate) fn do_collect(config: &Config) -> Result<()> {
    let began = Instant::now();
    let mut target = Target::open(&config.target)?;
    let info = target.process_info();
    let runtime = eventpipe_client::Runtime::of(&info);
    let is_rust = runtime.is_rust();
    let providers = config.request.providers(is_rust)?;
    let requested: Vec<String> = providers.iter().map(|p| p.name.clone()).collect();
    let request = config.request.collect_tracing(is_rust, providers)?;
    let path = config
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}_{}.nettrace", target.name(), target.pid())));
    let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;

    let stream = target
        .collect(&request)
        .map_err(|e| explain_refusal(e, &request))?;
    let counters = Arc::new(Counters::default());
    let reader = {
        let counters = Arc::clone(&counters);
        TraceSession::spawn(stream, "eptrace-stream", move |stream| {
            let tee = Tee {
                inner: stream,
                file: BufWriter::with_capacity(1 << 20, file),
                counters,
                write_error: None,
            };
            read_stream(tee, began)
        })?
    };
    target.resume()?;
    let started = Instant::now();
    let interactive = std::io::stderr().is_terminal();
    let stop_requested = watch_for_stop(interactive)?;
    let status = Status::new(interactive, &target, &runtime, &path);

    let reason = loop {
        if reader.is_finished() {
            break StopReason::StreamEnded;
        }
        if stop_requested.load(Ordering::Relaxed) {
            break StopReason::User;
        }
        if config.duration.is_some_and(|d| started.elapsed() >= d) {
            break StopReason::Duration;
        }
        if target.exited() {
            break StopReason::ProcessExited;
        }
        status.update(started.elapsed(), &counters);
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut notes = Vec::new();
    if matches!(reason, StopReason::Duration | StopReason::User) {
        status.say("stopping: the process is flushing the session...");
        if let Err(e) = reader.stop(&mut target) {
            let e = anyhow::Error::new(e);
            notes.push(format!("StopTracing failed ({e:#}); the stream was cut"));
        }
    }
    // The process ends the stream after flushing; give it a bounded time.
    let deadline = Instant::now() + STOP_GRACE;
    while !reader.is_finished() {
        if Instant::now() >= deadline {
            notes.push(format!(
                "the process did not end the stream within {} s; it was cut",
                STOP_GRACE.as_secs()
            ));
            reader.cancel();
            break;
        }
        status.update(started.elapsed(), &counters);
        std::thread::sleep(Duration::from_millis(20));
    }
    let (summary, written) = reader.join()?;
    status.clear();
    written?;
    if let Some(why) = &summary.aborted {
        notes.push(format!("the process aborted the session: {why}"));
    } else if matches!(reason, StopReason::StreamEnded) && !target.exited() {
        // Nobody asked it to stop and the process runs on: it ended the session itself.
        notes.push(if is_rust {
            "the process ended the session while running: an eventpipe-rs process does so \
             when the stream is not read for its stall limit (10 s, or StallLimitMs=N on the \
             EventPipeRs-Session provider), ending the trace after its last whole block"
                .to_owned()
        } else {
            "the process ended the session while running (another tool stopped it, or the \
             runtime could not write it)"
                .to_owned()
        });
    }
    if let Some(exit) = target.finish() {
        notes.push(format!("the program exited ({exit})"));
    }
    if is_rust {
        notes.extend(silent_profilers(&requested, &summary.by_provider));
        notes.extend(silent_providers(&requested, &summary.by_provider));
    }
    if !summary.complete {
        let why = summary
            .problem
            .as_deref()
            .unwrap_or("the stream ended early");
        notes.push(
            end_cut_trace(&path)
                .with_context(|| format!("the trace in {} is unusable ({why})", path.display()))?,
        );
    }
    print_summary(
        &path,
        started.elapsed(),
        &counters,
        &summary,
        reason,
        &notes,
    );
    crate::convert::convert_and_say(&path, &config.convert)?;
    Ok(())
}

/// Makes a cut-off trace file valid: keeps its whole blocks and ends the stream after them.
/// The file is mapped and scanned through a [`crate::input::PagedInput`], not read: however
/// much a process streamed, the scan holds a bounded part of it in memory.
fn end_cut_trace(path: &std::path::Path) -> Result<String> {
    let salvaged = {
        let opened = crate::input::open(&crate::input::InputSpec::Path(path.to_path_buf()))?;
        let bytes = opened.bytes().unwrap_or(&[]);
        let pages = crate::input::PageRelease::new(bytes, 1);
        let input = crate::input::PagedInput::new(bytes, &pages, 0);
        (nettrace::salvage::salvage_input(input)?, bytes.len())
    };
    let (s, total) = salvaged;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.set_len(s.valid_len as u64)?;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))?;
    file.write_all(s.end_marker)?;
    file.sync_data()?;
    Ok(format!(
        "the stream was cut off, so the file ends after its last whole block ({} of {} bytes \
         kept, {} blocks)",
        s.valid_len, total, s.blocks
    ))
}

fn explain_refusal(e: eventpipe_client::Error, request: &CollectTracing) -> anyhow::Error {
    let unknown = e.refusal() == Some(eventpipe_ipc::ServerError::UNKNOWN_COMMAND);
    let e = anyhow::Error::new(e);
    if unknown && request.version == 6 {
        e.context("--buffering block needs CollectTracing6 (.NET 11+ or an eventpipe-rs process)")
    } else {
        e.context("starting the session")
    }
}

/// A flag raised by Ctrl-C, or by Enter when stdin is a terminal.
pub(crate) fn watch_for_stop(interactive: bool) -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    let on_signal = Arc::clone(&flag);
    ctrlc::set_handler(move || on_signal.store(true, Ordering::Relaxed))
        .context("installing the Ctrl-C handler")?;
    if interactive && std::io::stdin().is_terminal() {
        let on_enter = Arc::clone(&flag);
        std::thread::spawn(move || {
            let mut line = String::new();
            if std::io::stdin().read_line(&mut line).is_ok() {
                on_enter.store(true, Ordering::Relaxed);
            }
        });
    }
    Ok(flag)
}

/// The live status line (only on a terminal).
struct Status {
    bar: Option<indicatif::ProgressBar>,
}

impl Status {
    fn new(
        interactive: bool,
        target: &Target,
        runtime: &eventpipe_client::Runtime,
        path: &std::path::Path,
    ) -> Status {
        let header = format!(
            "Tracing {} (pid {}, {runtime}) into {}",
            target.name(),
            target.pid(),
            path.display()
        );
        if !interactive {
            let _ = writeln!(std::io::stderr(), "{header}");
            return Status { bar: None };
        }
        let bar = indicatif::ProgressBar::new_spinner();
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg}") {
            bar.set_style(style);
        }
        bar.println(header);
        Status { bar: Some(bar) }
    }

    fn update(&self, elapsed: Duration, c: &Counters) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!(
                "{:>6.1}s  {:>10}  {:>10} events  {} lost   (Enter or Ctrl-C to stop)",
                elapsed.as_secs_f64(),
                human_bytes(c.bytes.load(Ordering::Relaxed)),
                c.events.load(Ordering::Relaxed),
                c.lost.load(Ordering::Relaxed),
            ));
            bar.tick();
        }
    }

    fn say(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(line.to_string()),
            None => {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
        }
    }

    fn clear(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn print_summary(
    path: &std::path::Path,
    elapsed: Duration,
    c: &Counters,
    s: &StreamSummary,
    reason: StopReason,
    notes: &[String],
) {
    let why = match reason {
        StopReason::Duration => "the duration elapsed",
        StopReason::User => "you asked",
        StopReason::StreamEnded => "the process ended the stream",
        StopReason::ProcessExited => "the process exited",
    };
    let events = c.events.load(Ordering::Relaxed);
    let top: Vec<String> = {
        let mut by: Vec<_> = s.by_provider.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1));
        by.iter()
            .take(5)
            .map(|(p, n)| format!("{p} ({n})"))
            .collect()
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "Trace written to {}", path.display());
    let _ = writeln!(
        out,
        "Collected {events} events ({}) over {:.1} s from {} provider(s){}; {} events lost. \
         Stopped because {why}.{}{} Inspect it with `eptrace report {}`.",
        human_bytes(c.bytes.load(Ordering::Relaxed)),
        elapsed.as_secs_f64(),
        s.by_provider.len(),
        if top.is_empty() {
            String::new()
        } else {
            format!(": {}", top.join(", "))
        },
        c.lost.load(Ordering::Relaxed),
        match c.first_event_us.load(Ordering::Relaxed) {
            0 => String::new(),
            us => format!(
                " The first event arrived {:.0} ms after collect started.",
                us as f64 / 1000.0
            ),
        },
        if notes.is_empty() {
            String::new()
        } else {
            format!(" Note: {}.", notes.join("; "))
        },
        path.display()
    );
}
