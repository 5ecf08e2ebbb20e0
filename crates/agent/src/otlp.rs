//! OpenTelemetry export: every target's spans, events and counters to a collector over
//! OTLP/HTTP (protobuf), converted by `eventpipe_export::otlp`.
//!
//! * Per target, a standing event session (its own thread) records the configured
//!   providers; its events are converted as they stream, and what each read completes
//!   (spans, log records) joins the shared batch. The counters watcher adds each counter
//!   value as a metric.
//! * One batching thread sends the batch every `batch_seconds`, or as soon as it holds
//!   `batch_items`: one request per signal (`/v1/traces`, `/v1/logs`, `/v1/metrics`),
//!   each to the delivery queue (bounded; retries with backoff; refusals dropped and
//!   logged with the collector's URL and what it refused).
//! * The event session is restarted after a pause if it fails while the process lives.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;
use eventpipe_counters::CounterValue;
use eventpipe_export::delivery::{Delivery, Options, Stats, Store};
use eventpipe_export::otlp::{Batch, CounterConverter, Endpoint, EventConverter, Signals, Target};

use super::processes::Process;
use super::processes::RuntimeKind;
use super::settings::OtlpSettings;
use super::{lock, log, sessions, Agent};

/// The exporter the agent shares between its threads.
pub(crate) struct Exporter {
    endpoint: Endpoint,
    delivery: Mutex<Option<Delivery>>,
    batch: Mutex<Batch>,
    wake: Condvar,
    stopping: AtomicBool,
    batch_every: Duration,
    batch_items: usize,
    /// Spans the converters could not hold (over their bound).
    pub(crate) over_bound: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("endpoint", &self.endpoint.base)
            .finish()
    }
}

/// The host's name, for `host.name`.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The resource of `process`.
pub(crate) fn target_of(process: &Process) -> Target {
    Target {
        service_name: process.name.clone(),
        pid: process.pid,
        host_name: host_name(),
        runtime: match process.kind {
            Some(RuntimeKind::Rust) => "rust",
            Some(RuntimeKind::Dotnet) => "dotnet",
            None => "unknown",
        }
        .to_owned(),
    }
}

impl Exporter {
    /// Starts the delivery and the batching thread.
    pub(crate) fn start(
        endpoint: Endpoint,
        settings: &OtlpSettings,
    ) -> Result<(Arc<Exporter>, std::thread::JoinHandle<()>)> {
        let mut options = Options::new("otlp");
        options.max_bytes = settings.queue_mb << 20;
        options.max_requests = settings.queue_requests;
        options.max_backoff = Duration::from_secs_f64(settings.retry_max_seconds);
        options.min_backoff = options.min_backoff.min(options.max_backoff);
        if let Some(dir) = &settings.queue_dir {
            options.store = Store::Disk(dir.clone());
        }
        let delivery = Delivery::start(options, log)?;
        let exporter = Arc::new(Exporter {
            endpoint,
            delivery: Mutex::new(Some(delivery)),
            batch: Mutex::new(Batch::default()),
            wake: Condvar::new(),
            stopping: AtomicBool::new(false),
            batch_every: Duration::from_secs_f64(settings.batch_seconds),
            batch_items: settings.batch_items,
            over_bound: std::sync::atomic::AtomicU64::new(0),
        });
        let thread_exporter = Arc::clone(&exporter);
        let thread = std::thread::Builder::new()
            .name("eptrace-agent-otlp".into())
            .spawn(move || thread_exporter.run())?;
        Ok((exporter, thread))
    }

    /// The collector's base URL.
    pub(crate) fn url(&self) -> &str {
        &self.endpoint.base
    }

    /// Adds what `target` recorded to the batch.
    pub(crate) fn add(&self, target: &Target, signals: Signals) {
        if signals.is_empty() {
            return;
        }
        let full = {
            let mut batch = lock(&self.batch);
            batch.add(target, signals);
            batch.len() >= self.batch_items
        };
        if full {
            self.wake.notify_one();
        }
    }

    /// The delivery's counts (zero once it has shut down).
    pub(crate) fn stats(&self) -> Stats {
        lock(&self.delivery)
            .as_ref()
            .map(Delivery::stats)
            .unwrap_or_default()
    }

    fn flush(&self) {
        let requests = lock(&self.batch).take_requests(&self.endpoint);
        if let Some(delivery) = lock(&self.delivery).as_ref() {
            for r in requests {
                delivery.submit(r);
            }
        }
    }

    fn run(&self) {
        let mut next = Instant::now() + self.batch_every;
        while !self.stopping.load(Ordering::Relaxed) {
            {
                let batch = lock(&self.batch);
                let wait = next.saturating_duration_since(Instant::now());
                let _ = self.wake.wait_timeout_while(batch, wait, |b| {
                    b.len() < self.batch_items && !self.stopping.load(Ordering::Relaxed)
                });
            }
            self.flush();
            if Instant::now() >= next {
                next = Instant::now() + self.batch_every;
            }
        }
    }

    /// Sends what is batched, then gives the queue `grace` to drain; returns the final
    /// counts. Called once every session has ended.
    pub(crate) fn shutdown(&self, grace: Duration) -> Stats {
        self.stopping.store(true, Ordering::Relaxed);
        self.wake.notify_all();
        self.flush();
        match lock(&self.delivery).take() {
            Some(d) => d.shutdown(grace),
            None => Stats::default(),
        }
    }
}

/// A `Read` over the chunks a trace stream delivers through a channel; `idle` is called
/// each time it is about to wait for the next chunk.
struct ChunkReader<F: FnMut()> {
    chunks: mpsc::Receiver<Vec<u8>>,
    current: Vec<u8>,
    at: usize,
    idle: F,
}

impl<F: FnMut()> Read for ChunkReader<F> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at >= self.current.len() {
            let chunk = match self.chunks.try_recv() {
                Ok(chunk) => Ok(chunk),
                Err(mpsc::TryRecvError::Empty) => {
                    (self.idle)();
                    self.chunks.recv()
                }
                Err(mpsc::TryRecvError::Disconnected) => return Ok(0),
            };
            match chunk {
                Ok(chunk) => {
                    self.current = chunk;
                    self.at = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len() - self.at);
        buf[..n].copy_from_slice(&self.current[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// The providers recorded in `process`, if any.
pub(crate) fn providers_for(settings: &OtlpSettings, process: &Process) -> Vec<String> {
    match process.kind {
        Some(RuntimeKind::Dotnet) => settings.dotnet_providers.clone(),
        _ => settings.providers.clone(),
    }
}

/// A standing event session in `process` exported to the collector, restarted (after a
/// pause) if it fails while the process lives; ends when `stop` is raised.
pub(crate) fn start_events(
    agent: &Arc<Agent>,
    exporter: &Arc<Exporter>,
    process: Process,
    stop: Arc<AtomicBool>,
) {
    let providers = providers_for(&agent.settings.otlp, &process);
    if providers.is_empty() {
        return;
    }
    let thread_agent = Arc::clone(agent);
    let exporter = Arc::clone(exporter);
    let spawned = std::thread::Builder::new()
        .name(format!("eptrace-agent-otlp-{}", process.pid))
        .spawn(move || {
            let agent = thread_agent;
            let target = target_of(&process);
            let mut reported = false;
            while !stop.load(Ordering::Relaxed) {
                let outcome = stream_events(&process, &providers, &stop, &exporter, &target);
                if stop.load(Ordering::Relaxed) || agent.processes.get(process.pid).is_none() {
                    break;
                }
                agent.session_errors.fetch_add(1, Ordering::Relaxed);
                if !reported {
                    let why = match outcome {
                        Err(e) => format!("{e:#}"),
                        Ok(()) => "the session ended".to_owned(),
                    };
                    log(&format!(
                        "otlp events of {} ({}): {why}; trying again in 5 s",
                        process.name, process.pid
                    ));
                    reported = true;
                }
                super::retry_pause(&stop);
            }
        });
    super::keep_thread(agent, spawned, "an otlp events thread");
}

/// How often a stream's converted signals join the batch while events keep coming (they
/// also join it whenever the stream has nothing more to read for now).
const HAND_OVER_EVERY: Duration = Duration::from_millis(200);

/// One event session: streamed until `stop`, the process's end or an error.
fn stream_events(
    process: &Process,
    providers: &[String],
    stop: &AtomicBool,
    exporter: &Exporter,
    target: &Target,
) -> Result<()> {
    let ask = sessions::TraceAsk {
        profile: Vec::new(),
        providers: providers.to_vec(),
        // Standing: until stopped.
        duration: Duration::from_secs(100 * 365 * 24 * 3600),
        buffer_mb: 64,
        rundown: false,
    };
    let request = sessions::trace_request(process, &ask)?;
    let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(64);
    std::thread::scope(|scope| -> Result<()> {
        let converter = scope.spawn(move || -> Result<()> {
            // What the events completed, until handed to the batch: when the stream has
            // nothing more for now (so the last events of a burst do not wait for the
            // next one), and every HAND_OVER_EVERY while events keep coming.
            let pending = Mutex::new(Signals::default());
            let hand_over = || exporter.add(target, std::mem::take(&mut *lock(&pending)));
            let reader = ChunkReader {
                chunks: rx,
                current: Vec::new(),
                at: 0,
                idle: hand_over,
            };
            // In timestamp order: a span may begin on one thread and end on another.
            let mut reader = nettrace::SortedReader::new(
                nettrace::TraceReader::from_read(reader)?.accept_truncation(true),
            );
            let mut converter = EventConverter::new(process.pid);
            let mut handed = Instant::now();
            let mut over_bound = 0;
            loop {
                let event = match reader.next_event() {
                    Ok(Some(event)) => event,
                    Ok(None) => break,
                    Err(e) => {
                        converter.finish(&mut lock(&pending));
                        hand_over();
                        return Err(e.into());
                    }
                };
                converter.event(&event, &mut lock(&pending));
                if handed.elapsed() >= HAND_OVER_EVERY {
                    hand_over();
                    handed = Instant::now();
                }
                let now = converter.stats().over_bound;
                if now > over_bound {
                    exporter
                        .over_bound
                        .fetch_add(now - over_bound, Ordering::Relaxed);
                    over_bound = now;
                }
            }
            converter.finish(&mut lock(&pending));
            hand_over();
            Ok(())
        });
        let mut write = |bytes: &[u8]| {
            tx.send(bytes.to_vec())
                .map_err(|_| std::io::Error::other("the converter stopped"))
        };
        let streamed =
            sessions::run_trace(process, &request, ask.duration, stop, |_| {}, &mut write);
        drop(tx);
        let converted = converter
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the converter panicked")));
        streamed?;
        converted
    })
}

/// Turns a target's counter values into metrics for the batch.
pub(crate) struct CounterExport {
    exporter: Arc<Exporter>,
    target: Target,
    converter: CounterConverter,
}

impl CounterExport {
    pub(crate) fn new(exporter: Arc<Exporter>, process: &Process) -> CounterExport {
        CounterExport {
            exporter,
            target: target_of(process),
            converter: CounterConverter::new(),
        }
    }

    pub(crate) fn value(&mut self, value: &CounterValue, at: SystemTime) {
        let at_ns = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let mut out = Signals::default();
        self.converter.value(value, at_ns, &mut out);
        self.exporter.add(&self.target, out);
    }
}
