//! Continuous profiling: every target the `[profiling]` filter accepts is profiled period
//! after period, and each period's profiles go to Grafana Pyroscope.
//!
//! One thread per target runs back-to-back sessions of one period each (CPU sampler at
//! the configured rate and the allocation sampler for a Rust program, the sample profiler
//! for .NET; rundown on, so each period's trace names its own code). When a session ends,
//! its trace goes to the one builder thread, which turns each trace into pprof profiles on
//! the host (`eventpipe_export::continuous`), keeping the binaries it opened for the next
//! periods and targets (a program's symbols are parsed once, not per target and period,
//! and one trace at a time is symbolized), and hands them to the delivery queue, which is
//! on disk and bounded: a backend that is down, slow or refusing never holds the
//! profiling up nor grows memory. What it drops or the backend refuses is counted in
//! `/metrics`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use eventpipe_export::continuous::{period_profiles, Period};
use eventpipe_export::delivery::{Delivery, Options, Store};
use eventpipe_export::pyroscope::{Api, Server};
use eventpipe_insight::ThreadLabels;
use eventpipe_symbols::BinaryCache;

use super::processes::Process;
use super::processes::RuntimeKind;
use super::sessions::{self, TraceAsk};
use super::settings::{ProfilingSettings, PyroscopeApi};
use super::{lock, log, Agent};

/// A period's trace larger than this is cut (the session stopped): a runaway provider
/// must not make the agent hold gigabytes.
const MAX_PERIOD_TRACE: usize = 64 << 20;

/// Period traces waiting for the builder; a target's thread waits beyond that.
const WAITING_TRACES: usize = 2;

/// One period's trace, for the builder.
struct Job {
    process: Process,
    period: Period,
    trace: Vec<u8>,
}

/// The profiler side of the agent: the Pyroscope queue and the per-target threads' flags.
pub(crate) struct Profiling {
    pub(crate) settings: ProfilingSettings,
    server: Server,
    delivery: Delivery,
    host: String,
    stops: Mutex<HashMap<u32, Arc<AtomicBool>>>,
    jobs: Mutex<Option<SyncSender<Job>>>,
    waiting: Mutex<Option<Receiver<Job>>>,
    builder: Mutex<Option<JoinHandle<()>>>,
    periods: AtomicU64,
    failed_periods: AtomicU64,
    profiles: AtomicU64,
}

impl std::fmt::Debug for Profiling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiling")
            .field("server", &self.server.url)
            .finish()
    }
}

impl Profiling {
    /// The queue to Pyroscope, when the settings name a server.
    pub(crate) fn start(settings: &ProfilingSettings) -> Result<Option<Profiling>> {
        let Some(url) = &settings.pyroscope else {
            return Ok(None);
        };
        let server = Server {
            url: url.clone(),
            api: match settings.api {
                PyroscopeApi::Push => Api::Push,
                PyroscopeApi::Ingest => Api::Ingest,
            },
            headers: settings
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            max_age: settings.max_profile_age(),
        };
        let options = Options {
            store: Store::Disk(settings.queue_folder()),
            max_bytes: settings.queue_max_mb << 20,
            max_requests: settings.queue_max_profiles,
            // Pyroscope gives every push an ID of its own: one it stored whose answer was
            // lost would be stored twice if sent again, doubling that period's samples.
            // A gap is the better loss.
            retry_unanswered: false,
            ..Options::new("pyroscope")
        };
        let delivery = Delivery::start(options, log).context("starting the Pyroscope queue")?;
        let (jobs, waiting) = sync_channel(WAITING_TRACES);
        Ok(Some(Profiling {
            settings: settings.clone(),
            server,
            delivery,
            host: host_name(),
            stops: Mutex::new(HashMap::new()),
            jobs: Mutex::new(Some(jobs)),
            waiting: Mutex::new(Some(waiting)),
            builder: Mutex::new(None),
            periods: AtomicU64::new(0),
            failed_periods: AtomicU64::new(0),
            profiles: AtomicU64::new(0),
        }))
    }

    /// Stops profiling `pid` (gone).
    pub(crate) fn forget(&self, pid: u32) {
        if let Some(flag) = lock(&self.stops).remove(&pid) {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Stops every target's profiling (the agent is stopping).
    pub(crate) fn stop_all(&self) {
        for flag in lock(&self.stops).values() {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Sends what is queued for a moment, then stops the queue (on disk, the rest waits
    /// for the next run). Called once the targets' threads have ended: the builder
    /// finishes the traces it was given first.
    pub(crate) fn shutdown(&self) {
        drop(lock(&self.jobs).take());
        if let Some(builder) = lock(&self.builder).take() {
            let _ = builder.join();
        }
        let stats = self.delivery.shutdown(Duration::from_secs(2));
        if stats.queued > 0 {
            log(&format!(
                "pyroscope: {} profile(s) stay queued on disk for the next run",
                stats.queued
            ));
        }
    }

    /// The profiling health series for `/metrics`.
    pub(crate) fn render(&self, out: &mut String) {
        super::prometheus::own(
            out,
            "eptrace_agent_profiling_periods_total",
            "counter",
            "Profiling periods recorded, and those that failed",
            &[
                (
                    "{outcome=\"ok\"}",
                    self.periods.load(Ordering::Relaxed) as f64,
                ),
                (
                    "{outcome=\"failed\"}",
                    self.failed_periods.load(Ordering::Relaxed) as f64,
                ),
            ],
        );
        super::prometheus::own(
            out,
            "eptrace_agent_profiles_total",
            "counter",
            "Profiles made from the periods and queued for the backend",
            &[("", self.profiles.load(Ordering::Relaxed) as f64)],
        );
    }

    /// The Pyroscope queue's counts.
    pub(crate) fn delivery_stats(&self) -> eventpipe_export::delivery::Stats {
        self.delivery.stats()
    }
}

/// The machine's name, for the `host` label.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The providers of one period's session.
fn providers(settings: &ProfilingSettings, kind: Option<RuntimeKind>) -> Vec<String> {
    match kind {
        Some(RuntimeKind::Dotnet) => vec![
            "Microsoft-DotNETCore-SampleProfiler:0xF00000000000:Informational".into(),
            // Method loads, so code compiled during the period is named.
            "Microsoft-Windows-DotNETRuntime:0x14C14FCCBD:Informational".into(),
        ],
        _ => {
            let mut p = vec![format!(
                "EventPipeRs-CpuSampler:0:Informational:Rate={}",
                settings.rate_hz
            )];
            if settings.allocations {
                p.push("EventPipeRs-Allocations:0:Informational:SampleInterval=524288".into());
            }
            p
        }
    }
}

/// Starts the builder thread, which makes and queues every period's profiles.
pub(crate) fn start_builder(agent: &Arc<Agent>) -> Result<()> {
    let Some(profiling) = &agent.profiling else {
        return Ok(());
    };
    let Some(waiting) = lock(&profiling.waiting).take() else {
        return Ok(());
    };
    let thread_agent = Arc::clone(agent);
    let handle = std::thread::Builder::new()
        .name("eptrace-agent-profiles".into())
        .spawn(move || build_loop(&thread_agent, &waiting))
        .context("starting the profile builder thread")?;
    *lock(&profiling.builder) = Some(handle);
    Ok(())
}

fn build_loop(agent: &Arc<Agent>, waiting: &Receiver<Job>) {
    let Some(profiling) = &agent.profiling else {
        return;
    };
    let mut binaries = BinaryCache::default();
    if !profiling.settings.debug_files {
        binaries = binaries.without_debug_files();
    }
    let mut said: HashSet<String> = HashSet::new();
    let mut say_once = |line: String| {
        if said.len() < 1024 && said.insert(line.clone()) {
            log(&line);
        }
    };
    for job in waiting {
        let who = format!("{} ({})", job.process.name, job.process.pid);
        match period_profiles(&job.trace, &job.period, &mut binaries) {
            Ok((profiles, notes)) => {
                for note in notes {
                    say_once(format!("profiling {who}: {note}"));
                }
                if profiles.is_empty() && job.process.kind == Some(RuntimeKind::Rust) {
                    say_once(format!(
                        "profiling {who}: no CPU samples; the program does not register the \
                         sampler (it needs `eventpipe_profiler::cpu::register();` at start-up)"
                    ));
                }
                profiling.periods.fetch_add(1, Ordering::Relaxed);
                profiling
                    .profiles
                    .fetch_add(profiles.len() as u64, Ordering::Relaxed);
                for p in profiles {
                    profiling.delivery.submit(p.request(&profiling.server));
                }
            }
            Err(e) => {
                profiling.failed_periods.fetch_add(1, Ordering::Relaxed);
                say_once(format!(
                    "profiling {who}: {}",
                    eventpipe_client::with_causes(&e)
                ));
            }
        }
    }
}

/// Starts profiling `process` if the settings' filter accepts it.
pub(crate) fn start_profiler(agent: &Arc<Agent>, process: Process) {
    let Some(profiling) = &agent.profiling else {
        return;
    };
    if !profiling.settings.filter.accepts(&process) {
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    lock(&profiling.stops).insert(process.pid, Arc::clone(&stop));
    let thread_agent = Arc::clone(agent);
    let spawned = std::thread::Builder::new()
        .name(format!("eptrace-agent-profile-{}", process.pid))
        .spawn(move || profile_loop(&thread_agent, &process, &stop));
    super::keep_thread(agent, spawned, "a profiling thread");
}

fn unix_nanos(t: SystemTime) -> i128 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

fn profile_loop(agent: &Arc<Agent>, process: &Process, stop: &AtomicBool) {
    let Some(profiling) = &agent.profiling else {
        return;
    };
    let settings = &profiling.settings;
    let ask = TraceAsk {
        profile: Vec::new(),
        providers: providers(settings, process.kind),
        duration: Duration::from_secs_f64(settings.period_seconds),
        buffer_mb: 32,
        rundown: true,
    };
    let runtime = match process.kind {
        Some(RuntimeKind::Rust) => "rust",
        Some(RuntimeKind::Dotnet) => "dotnet",
        None => "unknown",
    };
    let labels = vec![
        ("pid".to_owned(), process.pid.to_string()),
        ("host".to_owned(), profiling.host.clone()),
        ("runtime".to_owned(), runtime.to_owned()),
    ];
    let mut said: Vec<String> = Vec::new();
    let mut say_once = |line: String| {
        if !said.contains(&line) && said.len() < 32 {
            log(&line);
            said.push(line);
        }
    };
    log(&format!(
        "profiling {} ({}) every {} s{} for {}",
        process.name,
        process.pid,
        settings.period_seconds,
        if process.kind == Some(RuntimeKind::Dotnet) {
            " (.NET's sample profiler, ~1 kHz)".to_owned()
        } else {
            format!(" at {} Hz", settings.rate_hz)
        },
        profiling.server.url
    ));
    while !stop.load(Ordering::Relaxed) && !agent.stopping.load(Ordering::Relaxed) {
        let outcome = (|| -> Result<()> {
            let request = sessions::trace_request(process, &ask)?;
            let from = SystemTime::now();
            let mut trace = Vec::new();
            let end =
                sessions::run_trace(process, &request, ask.duration, stop, |_| {}, &mut |b| {
                    if trace.len() + b.len() > MAX_PERIOD_TRACE {
                        return Err(std::io::Error::other("the period's trace is over 64 MiB"));
                    }
                    trace.extend_from_slice(b);
                    Ok(())
                })?;
            let until = SystemTime::now();
            if !end.whole {
                anyhow::bail!("the period's trace stream broke after {} bytes", end.bytes);
            }
            let period = Period {
                service_name: process.name.clone(),
                labels: labels.clone(),
                from_unix_nanos: unix_nanos(from),
                until_unix_nanos: unix_nanos(until),
                sample_rate: settings.rate_hz,
                dotnet: process.kind == Some(RuntimeKind::Dotnet),
                thread_labels: if settings.thread_names {
                    ThreadLabels::NameOnly
                } else {
                    ThreadLabels::None
                },
            };
            let jobs = lock(&profiling.jobs).clone();
            if let Some(jobs) = jobs {
                // Waits while the builder is behind: the next period starts later.
                let _ = jobs.send(Job {
                    process: process.clone(),
                    period,
                    trace,
                });
            }
            Ok(())
        })();
        match outcome {
            Ok(()) => {}
            Err(e) => {
                if stop.load(Ordering::Relaxed) || agent.processes.get(process.pid).is_none() {
                    break;
                }
                profiling.failed_periods.fetch_add(1, Ordering::Relaxed);
                say_once(format!(
                    "profiling {} ({}): {e:#}; trying again in 5 s",
                    process.name, process.pid
                ));
                super::retry_pause(stop);
            }
        }
    }
}
