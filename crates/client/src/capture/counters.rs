//! A counters session, as `dotnet-counters` runs one: each named provider enabled with
//! `EventCounterIntervalSec=N` (the EventCounters every .NET runtime and this project's
//! runtime publish) and, for .NET targets, `System.Diagnostics.Metrics` listening to the
//! same names (Meters, .NET 6+). Values are decoded as they stream in
//! ([`eventpipe_counters`]) and handed to a [`Sink`].
//!
//! A .NET target's session can also carry the runtime's GC, exception and thread pool
//! events ([`SessionConfig::runtime_events`]): read in time order, they reach the sink as
//! [`RuntimeNews`] (a GC complete with its pause, an exception, a starvation adjustment).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

pub use eventpipe_analysis::live::{CompletedGc, RuntimeNews};
use eventpipe_analysis::live::{RuntimeWatch, RUNTIME_KEYWORDS, RUNTIME_LEVEL};
use eventpipe_counters::{
    decode_counter_event, meters_filter_args, CounterEvent, CounterValue, METERS_PROVIDER,
};
use eventpipe_ipc::command::CollectTracing;
use eventpipe_ipc::ProviderRequest;
use nettrace::{Event, SortedReader, TraceReader};

use super::CaptureError;

use crate::{Target, TargetSpec, TraceSession};
/// What a [`Sink`] is handed: one published value, decoded.
pub use eventpipe_counters::CounterValue as Value;

/// A `--counters` list that does not parse; the message quotes it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CounterSpecError(String);

/// The providers and counters to show: `System.Runtime`, `MyMeter[requests,latency]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSpec {
    /// The EventSource or Meter.
    pub provider: String,
    /// Counter names; empty: all of the provider's.
    pub names: Vec<String>,
}

/// `--counters`: providers separated by commas, each optionally followed by its counters in
/// brackets (commas inside brackets separate counters).
///
/// # Errors
/// A provider name missing, or a `[` without its `]`.
pub fn parse_counter_specs(text: &str) -> Result<Vec<CounterSpec>, CounterSpecError> {
    let mut specs = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let end = rest.find([',', '[']).unwrap_or(rest.len());
        let provider = rest[..end].trim();
        if provider.is_empty() {
            return Err(CounterSpecError(format!(
                "`{text}`: a provider name is missing"
            )));
        }
        rest = &rest[end..];
        let mut names = Vec::new();
        if let Some(inner) = rest.strip_prefix('[') {
            let close = inner
                .find(']')
                .ok_or_else(|| CounterSpecError(format!("`{text}`: `[` without its `]`")))?;
            names = inner[..close]
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect();
            rest = &inner[close + 1..];
        }
        rest = rest
            .trim_start()
            .strip_prefix(',')
            .unwrap_or(rest)
            .trim_start();
        specs.push(CounterSpec {
            provider: provider.to_owned(),
            names,
        });
    }
    if specs.is_empty() {
        return Err(CounterSpecError("no provider named".to_owned()));
    }
    Ok(specs)
}

/// What a counters session is asked for; shared by `monitor` and `collect`.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The process.
    pub target: TargetSpec,
    /// `None`: the target's defaults (`System.Runtime`; `EventPipeRs-Runtime` for Rust).
    pub counters: Option<Vec<CounterSpec>>,
    /// How often the target publishes, in seconds.
    pub refresh_sec: f64,
    /// How long the session runs; `None`: until stopped.
    pub duration: Option<Duration>,
    /// The most time series a .NET Meter listener keeps.
    pub max_time_series: u32,
    /// The most histograms a .NET Meter listener keeps.
    pub max_histograms: u32,
    /// For a .NET target, also the runtime's GC, exception and thread pool events, told
    /// to [`Sink::runtime`] (a Rust target has none: ignored there).
    pub runtime_events: bool,
}

/// The default counters of a runtime.
pub fn default_specs(is_rust: bool) -> Vec<CounterSpec> {
    let provider = if is_rust {
        "EventPipeRs-Runtime"
    } else {
        "System.Runtime"
    };
    vec![CounterSpec {
        provider: provider.to_owned(),
        names: Vec::new(),
    }]
}

/// A running counters session and what it delivers.
struct Live {
    target: Target,
    name: String,
    session: TraceSession<()>,
    events: Receiver<Delivery>,
    specs: Vec<CounterSpec>,
    /// The EventCounters interval asked for, in ms.
    series_ms: u64,
}

/// What the stream thread hands over.
enum Delivery {
    /// An event, and when the target wrote it.
    Event(Box<(CounterEvent, SystemTime)>),
    /// The runtime's news, and when.
    Runtime(Box<(RuntimeNews, SystemTime)>),
    /// The stream ended; why, if it was not the end of the trace.
    Ended(Option<String>),
}

fn start(config: &SessionConfig) -> Result<Live, CaptureError> {
    let mut target = Target::open(&config.target)?;
    let runtime = crate::Runtime::of(&target.process_info());
    let is_rust = runtime.is_rust();
    let specs = config
        .counters
        .clone()
        .unwrap_or_else(|| default_specs(is_rust));
    let interval = format!("EventCounterIntervalSec={}", config.refresh_sec);
    let mut providers: Vec<ProviderRequest> = specs
        .iter()
        .map(|s| ProviderRequest {
            keywords: 0xFFFF_FFFF,
            level: 5,
            name: s.provider.clone(),
            arguments: interval.clone(),
            filter: None,
        })
        .collect();
    let meters_session = format!("eptrace-{}-{}", std::process::id(), target.pid());
    let runtime_events = config.runtime_events && !is_rust;
    if runtime_events {
        providers.push(ProviderRequest {
            keywords: RUNTIME_KEYWORDS,
            level: RUNTIME_LEVEL,
            name: eventpipe_analysis::RUNTIME_PROVIDER.to_owned(),
            arguments: String::new(),
            filter: None,
        });
    }
    if !is_rust {
        let metrics: Vec<String> = specs
            .iter()
            .flat_map(|s| {
                if s.names.is_empty() {
                    vec![s.provider.clone()]
                } else {
                    s.names
                        .iter()
                        .map(|n| format!("{}\\{n}", s.provider))
                        .collect()
                }
            })
            .collect();
        providers.push(ProviderRequest {
            keywords: 0x2,
            level: 5,
            name: METERS_PROVIDER.to_owned(),
            arguments: meters_filter_args(
                &meters_session,
                &metrics,
                config.refresh_sec,
                config.max_time_series,
                config.max_histograms,
            ),
            filter: None,
        });
    }
    let request = CollectTracing {
        rundown_keyword: 0,
        stackwalk: false,
        circular_buffer_mb: 16,
        ..CollectTracing::new(2, providers)
    };
    let stream = target
        .collect(&request)
        .map_err(|source| CaptureError::Start {
            what: "counters",
            source,
        })?;
    let (tx, events) = mpsc::channel();
    let wanted_session = meters_session;
    let session = TraceSession::spawn(stream, "counters-reader", move |stream| {
        let ended = (|| -> Result<(), String> {
            let reader = TraceReader::from_read(stream).map_err(|e| crate::with_causes(&e))?;
            if runtime_events {
                // A GC's events come from several threads: its pause follows their order.
                // .NET writes its stream in time order, so sorting holds nothing back.
                let mut watch = Some(RuntimeWatch::new());
                pump(SortedReader::new(reader), &wanted_session, &mut watch, &tx)
            } else {
                pump(reader, &wanted_session, &mut None, &tx)
            }
        })();
        let _ = tx.send(Delivery::Ended(ended.err()));
    })?;
    target.resume()?;
    let name = target.name();
    Ok(Live {
        target,
        name,
        session,
        events,
        specs,
        series_ms: (config.refresh_sec * 1000.0).round() as u64,
    })
}

/// A reader of events, in file order or in time order.
trait Events {
    fn next(&mut self) -> nettrace::Result<Option<Event<'_>>>;
}

impl<I: nettrace::source::Input> Events for TraceReader<I> {
    fn next(&mut self) -> nettrace::Result<Option<Event<'_>>> {
        self.next_event()
    }
}

impl<I: nettrace::source::Input> Events for SortedReader<I> {
    fn next(&mut self) -> nettrace::Result<Option<Event<'_>>> {
        self.next_event()
    }
}

/// Reads `events` until the stream ends or the receiver goes: counter events decoded, the
/// runtime's through `watch`, each sent with the time the target wrote it.
fn pump(
    mut events: impl Events,
    meters_session: &str,
    watch: &mut Option<RuntimeWatch>,
    tx: &mpsc::Sender<Delivery>,
) -> Result<(), String> {
    let mut news = Vec::new();
    while let Some(event) = events.next().map_err(|e| crate::with_causes(&e))? {
        // The event's own time, not when it reached us: delivery comes in bursts.
        let at = event
            .trace
            .ticks_to_unix_nanos(event.header.timestamp)
            .and_then(|ns| u64::try_from(ns).ok())
            .map_or_else(SystemTime::now, |ns| {
                SystemTime::UNIX_EPOCH + Duration::from_nanos(ns)
            });
        if let Some(decoded) = decode_counter_event(&event, Some(meters_session)) {
            if tx.send(Delivery::Event(Box::new((decoded, at)))).is_err() {
                return Ok(());
            }
        } else if let Some(watch) = watch {
            watch.observe(&event, &mut news);
            for item in news.drain(..) {
                if tx.send(Delivery::Runtime(Box::new((item, at)))).is_err() {
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

impl Live {
    /// Whether `value` is one of the counters asked for, in the series this session asked
    /// for (another session's interval, or the extra payloads some runtimes send as a
    /// session starts, are another series).
    fn wanted(&self, value: &CounterValue) -> bool {
        if value.series_ms.is_some_and(|ms| ms != self.series_ms) {
            return false;
        }
        // .NET Core 3.1 publishes each counter a second time a few ms after the first; a
        // value covering less than half its interval is that stray second publication.
        if value
            .interval_sec
            .is_some_and(|s| s * 1000.0 < self.series_ms as f64 / 2.0)
        {
            return false;
        }
        self.specs.iter().any(|s| {
            s.provider.eq_ignore_ascii_case(&value.provider)
                && (s.names.is_empty() || s.names.iter().any(|n| n == &value.name))
        })
    }

    /// Stops the session (the process may already be gone), and ends a program `counters`
    /// started.
    fn stop(mut self) {
        // Values after the stop are not wanted: no grace, the stream is cut at once.
        let _ = self.session.stop(&mut self.target);
        self.session.cancel();
        self.target.finish();
    }
}

/// What the caller of [`run`] does with each delivery, and whether to go on.
///
/// A sink's error ends the session, and [`run`] returns it as [`CaptureError::Sink`].
pub trait Sink {
    /// The session runs (called once, before any value).
    fn started(&mut self) -> SinkResult<()> {
        Ok(())
    }
    /// A value the target published at `at`.
    fn value(&mut self, value: CounterValue, at: SystemTime) -> SinkResult<()>;
    /// The runtime's news, of the event at `at` that completed it (only with
    /// [`SessionConfig::runtime_events`]).
    fn runtime(&mut self, news: RuntimeNews, at: SystemTime) -> SinkResult<()> {
        let _ = (news, at);
        Ok(())
    }
    /// Something the session noticed: a provider that stays silent, a Meter listener's
    /// complaint.
    fn problem(&mut self, problem: String) -> SinkResult<()>;
    /// Called every tick (every [`Sink::tick_interval`] at least); `Ok(false)` ends the
    /// session.
    fn tick(&mut self) -> SinkResult<bool>;
    /// The longest wait between two ticks: short for a screen that answers keys, long for
    /// a watcher that only checks a stop flag (fewer wakeups).
    fn tick_interval(&self) -> Duration {
        Duration::from_millis(50)
    }
    /// The target ended the session, or its stream broke.
    fn ended(&mut self, why: &SessionEnd) -> SinkResult<()>;
}

/// What a [`Sink`]'s methods return: its own error ends the session.
pub type SinkResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How a session ended that neither the caller nor its duration stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEnd {
    /// The target exited (its stream stops wherever it was when it did).
    Exited {
        /// The process's name.
        name: String,
        /// The process.
        pid: u32,
    },
    /// The target lives, but its stream ended or broke.
    Broke {
        /// The process's name.
        name: String,
        /// The process.
        pid: u32,
        /// What was wrong with the stream, when it was not simply ended.
        problem: Option<String>,
    },
}

impl std::fmt::Display for SessionEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionEnd::Exited { name, pid } => {
                write!(f, "{name} ({pid}) ended the session: it exited")
            }
            SessionEnd::Broke {
                name,
                pid,
                problem: Some(problem),
            } => write!(f, "the stream from {name} ({pid}) broke: {problem}"),
            SessionEnd::Broke { name, pid, .. } => {
                write!(f, "{name} ({pid}) ended the session")
            }
        }
    }
}

/// Whether process `pid` has exited (or is exiting), waiting up to `patience` for it: a
/// process's sockets close as it exits, a moment before it leaves the process table.
fn has_exited(pid: u32, patience: Duration) -> bool {
    let gone = || match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis: Z (zombie), X (dead).
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
        Err(_) => true,
    };
    let deadline = Instant::now() + patience;
    loop {
        if gone() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a session until the duration passes, the sink ends it or `stop` is raised, or the
/// process ends the stream (then the sink hears why, [`Sink::ended`]).
///
/// # Errors
/// The target cannot be opened or its session started, or the sink failed.
pub fn run(
    config: &SessionConfig,
    sink: &mut dyn Sink,
    stop: &AtomicBool,
) -> Result<(), CaptureError> {
    let live = start(config)?;
    sink.started().map_err(CaptureError::Sink)?;
    let began = Instant::now();
    // A provider that has published nothing after a few intervals is probably misnamed.
    let patience = Duration::from_secs_f64((3.0 * config.refresh_sec).max(3.0));
    let mut heard: Vec<bool> = vec![false; live.specs.len()];
    let mut warned = false;
    let outcome = loop {
        if stop.load(Ordering::Relaxed) {
            break None;
        }
        if config.duration.is_some_and(|d| began.elapsed() >= d) {
            break None;
        }
        match live.events.recv_timeout(sink.tick_interval()) {
            Ok(Delivery::Event(event)) => match *event {
                (CounterEvent::Value(v), at) => {
                    for (spec, heard) in live.specs.iter().zip(heard.iter_mut()) {
                        *heard |= spec.provider.eq_ignore_ascii_case(&v.provider);
                    }
                    if live.wanted(&v) {
                        sink.value(v, at).map_err(CaptureError::Sink)?;
                    }
                }
                (CounterEvent::Problem(p), _) => sink.problem(p).map_err(CaptureError::Sink)?,
                (CounterEvent::Instrument { .. }, _) => {}
            },
            Ok(Delivery::Runtime(news)) => {
                let (news, at) = *news;
                sink.runtime(news, at).map_err(CaptureError::Sink)?;
            }
            Ok(Delivery::Ended(why)) => break Some(why),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break Some(None),
        }
        if !warned && began.elapsed() >= patience {
            warned = true;
            for (spec, _) in live.specs.iter().zip(&heard).filter(|(_, h)| !**h) {
                sink.problem(format!(
                    "no values from {} after {:.0} s: is the name right? (EventSource and \
                     Meter names as the program declares them; `eptrace ps` shows the runtime)",
                    spec.provider,
                    patience.as_secs_f64()
                ))
                .map_err(CaptureError::Sink)?;
            }
        }
        if !sink.tick().map_err(CaptureError::Sink)? {
            break None;
        }
    };
    match outcome {
        // Stopped while the stream was ending: the stop is why it ended.
        Some(_) if stop.load(Ordering::Relaxed) => {
            live.stop();
            Ok(())
        }
        Some(problem) => {
            let name = live.name.clone();
            let pid = live.target.pid();
            live.stop();
            sink.ended(&if has_exited(pid, Duration::from_secs(1)) {
                SessionEnd::Exited { name, pid }
            } else {
                SessionEnd::Broke { name, pid, problem }
            })
            .map_err(CaptureError::Sink)
        }
        None => {
            live.stop();
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_specs_read_as_dotnet_counters_reads_them() {
        let specs =
            parse_counter_specs("System.Runtime, MyMeter[requests, latency],Other").unwrap();
        assert_eq!(
            specs,
            vec![
                CounterSpec {
                    provider: "System.Runtime".into(),
                    names: vec![]
                },
                CounterSpec {
                    provider: "MyMeter".into(),
                    names: vec!["requests".into(), "latency".into()]
                },
                CounterSpec {
                    provider: "Other".into(),
                    names: vec![]
                },
            ]
        );
        assert!(parse_counter_specs("A[b").is_err());
        assert!(parse_counter_specs(",A").is_err());
        assert!(parse_counter_specs("").is_err());
    }
}
