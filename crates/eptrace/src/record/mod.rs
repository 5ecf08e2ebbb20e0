//! `eptrace record -- CMD` (or `-p PID`, `-n NAME`): a program profiled as it is, from its
//! first instruction (or from now, for a running one), with
//! perf events (`eventpipe_perf`): CPU-time samples of every thread and child it starts,
//! their kernel and user frames, its mappings and thread names, in a NetTrace V6 trace
//! `report`, `convert` and `analyze` read as they read one-collect's.
//!
//! The program is forked and held before its exec while one sampling event per CPU is set
//! up on it, enabled by the exec itself. Each pass reads every CPU's ring, then writes the
//! records older than the pass's start (no CPU can still hold an earlier one), so the file
//! grows as the program runs. Where the program serves the diagnostics protocol, its own
//! EventPipe session's events join the samples (`events`); the session's runtime hands
//! its events over in blocks, so while it runs, a pass writes only what is older than
//! [`EVENTS_LAG`].

#[cfg(target_os = "linux")]
mod events;

use std::ffi::OsString;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
#[cfg(target_os = "linux")]
use eventpipe_perf::{
    existing_process, monotonic_ns, spawn_held, PerfTrace, Sampler, SamplerConfig,
};

/// What to record.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// Start this program and record it from its first instruction.
    Launch(Vec<OsString>),
    /// Attach to this running process.
    Pid(i32),
    /// Attach to the one running process of this name.
    Name(String),
}

/// What `record` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) target: Target,
    pub(crate) output: Option<PathBuf>,
    pub(crate) rate_hz: u32,
    pub(crate) duration: Option<Duration>,
    pub(crate) kernel: bool,
    /// Bytes of each sample's user stack copied for unwinding (0: frame pointers only).
    pub(crate) user_stack_bytes: u32,
    /// Also record each wait off CPU with its stack.
    pub(crate) off_cpu: bool,
    /// Formats to convert the trace to once recorded.
    pub(crate) convert: Vec<crate::convert::ConvertFormat>,
    /// The program's own EventPipe session, where it serves one (`None`: samples only).
    pub(crate) events: Option<eventpipe_client::request::TraceRequest>,
}

/// Each CPU's ring, in pages: room for a pass (100 ms) of samples of a busy thread per CPU,
/// four times over, with or without the stack copies.
fn ring_pages(user_stack_bytes: u32, rate_hz: u32) -> usize {
    let per_sample = 1024 + user_stack_bytes as usize;
    let per_pass = per_sample * rate_hz as usize / 10;
    (per_pass * 4 / 4096).clamp(64, 4096).next_power_of_two()
}

/// How long a pass waits for a ring to fill before reading anyway.
const PASS: Duration = Duration::from_millis(100);

/// How far behind the samples a running EventPipe session's events may come: a runtime
/// hands over its threads' buffers every few hundred ms at most.
const EVENTS_LAG: u64 = 1_500_000_000;

/// Runs `eptrace record`.
#[cfg(not(target_os = "linux"))]
pub(crate) fn do_record(_config: &Config) -> Result<()> {
    bail!("eptrace record uses Linux perf events; this system has none")
}

/// Runs `eptrace record`.
#[cfg(target_os = "linux")]
pub(crate) fn do_record(config: &Config) -> Result<()> {
    let sampling = SamplerConfig {
        kernel: config.kernel,
        user_stack_bytes: config.user_stack_bytes,
        ring_pages: ring_pages(config.user_stack_bytes, config.rate_hz),
        off_cpu: config.off_cpu,
        ..SamplerConfig::at_rate(config.rate_hz)
    };
    // Launched: held before its exec until the sampling is set up (a failure drops `held`,
    // and the child sees the pipe close and exits unrun). Attached: its threads now, and
    // what it already is (name, threads' names, mappings) as records at the attach.
    let attach_time = monotonic_ns();
    let tsc_start = eventpipe_perf::clock::tsc_reading();
    let (pid, name, mut sampler, held, existing) = match &config.target {
        Target::Launch(command) => {
            let name = Path::new(&command[0])
                .file_name()
                .map_or_else(|| "program".into(), |n| n.to_string_lossy().into_owned());
            let held = spawn_held(command)?;
            let pid = held.pid();
            let launch = SamplerConfig {
                enable_on_exec: true,
                ..sampling
            };
            let sampler = Sampler::open(pid, &launch)?;
            (pid, name, sampler, Some(held), Vec::new())
        }
        Target::Pid(pid) => {
            let sampler = Sampler::attach(*pid, &sampling)?;
            (
                *pid,
                process_name(*pid),
                sampler,
                None,
                existing_process(*pid, attach_time),
            )
        }
        Target::Name(name) => {
            let pid = pid_by_name(name)?;
            let sampler = Sampler::attach(pid, &sampling)?;
            (
                pid,
                name.clone(),
                sampler,
                None,
                existing_process(pid, attach_time),
            )
        }
    };
    let kernel = sampler.kernel_frames().is_ok();
    if config.kernel {
        if let Err(why) = sampler.kernel_frames() {
            eprintln!("eptrace: {why}; recording user frames only");
        }
    }
    if let Some(why) = sampler.smaller_rings() {
        eprintln!("eptrace: {why}");
    }
    let path = config
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{name}_{pid}.nettrace")));
    let file = std::fs::File::create(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let processors = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let mut trace = PerfTrace::new(
        BufWriter::with_capacity(1 << 20, file),
        u32::try_from(pid).ok(),
        std::time::SystemTime::now(),
        monotonic_ns(),
        sampling.period_ns,
        processors,
        kernel,
    )
    .with_context(|| format!("cannot write {}", path.display()))?;
    if let Some(kallsyms) = kernel
        .then(|| std::fs::read_to_string("/proc/kallsyms").ok())
        .flatten()
    {
        trace.name_kernel_with(&kallsyms);
    }
    let interactive = std::io::stderr().is_terminal();
    let stop = crate::collect::watch_for_stop(interactive)?;
    for record in existing {
        trace.add(Ok(record));
    }
    let mut child = match held.map(|h| h.release()).transpose() {
        Ok(child) => child,
        Err(e) => {
            drop(trace);
            std::fs::remove_file(&path).ok();
            return Err(e.into());
        }
    };
    eprintln!(
        "Recording {name} (pid {pid}) at {} Hz into {}",
        config.rate_hz,
        path.display()
    );
    let mut events = config
        .events
        .clone()
        .map(|request| events::EventSession::start(pid, request, child.is_some(), tsc_start));
    let started = Instant::now();
    let mut samples = 0u64;
    let status = interactive.then(indicatif::ProgressBar::new_spinner);
    let exit = loop {
        let pass_start = monotonic_ns();
        sampler.read(|r| {
            samples += u64::from(matches!(r, Ok(eventpipe_perf::Record::Sample(_))));
            trace.add(r);
        });
        let mut written_before = pass_start;
        if let Some(events) = &mut events {
            if let Some(line) = events.forward(&mut trace) {
                match &status {
                    Some(bar) => bar.println(line),
                    None => eprintln!("{line}"),
                }
            }
            if events.is_live() {
                written_before = pass_start.saturating_sub(EVENTS_LAG);
            }
        }
        trace
            .flush_before(written_before)
            .with_context(|| format!("cannot write {}", path.display()))?;
        match &mut child {
            Some(child) => {
                if let Some(code) = child.try_wait() {
                    break Some(format!("{name} exited with status {code}"));
                }
            }
            None if !Path::new(&format!("/proc/{pid}")).exists() => {
                break Some(format!("{name} (pid {pid}) ended"));
            }
            None => {}
        }
        if stop.load(Ordering::Relaxed) || config.duration.is_some_and(|d| started.elapsed() >= d) {
            break None;
        }
        if let Some(bar) = &status {
            bar.set_message(format!(
                "{:>6.1}s  {samples:>8} samples   (Enter or Ctrl-C to stop)",
                started.elapsed().as_secs_f64()
            ));
            bar.tick();
        }
        sampler.wait(PASS);
    };
    let recorded_for = started.elapsed();
    let event_notes = events.map(|e| e.finish(&mut trace)).unwrap_or_default();
    sampler.read(|r| trace.add(r));
    drop(sampler);
    if let Some(bar) = &status {
        bar.finish_and_clear();
    }
    let (out, summary) = trace
        .finish(|pid| std::fs::read_to_string(format!("/tmp/perf-{pid}.map")).ok())
        .with_context(|| format!("cannot write {}", path.display()))?;
    out.into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    let mut err = std::io::stderr().lock();
    let ended = match exit {
        Some(ended) => ended,
        None => format!(
            "stopped after {:.1} s; {name} goes on",
            recorded_for.as_secs_f64()
        ),
    };
    let _ = writeln!(
        err,
        "{ended}. Wrote {}: {} CPU samples ({} in the kernel, {} unwound from their stack \
         copies), {} threads, {} processes, {} mappings; {} lost",
        path.display(),
        summary.samples,
        summary.kernel_samples,
        summary.unwound,
        summary.threads,
        summary.processes,
        summary.mappings,
        summary.lost
    );
    if summary.jit_symbols > 0 {
        let _ = writeln!(
            err,
            "{} JIT functions named from the program's perf map (/tmp/perf-PID.map)",
            summary.jit_symbols
        );
    }
    if config.off_cpu {
        let _ = writeln!(
            err,
            "{} waits off CPU, {:.1} s in all, each with the stack it waited in",
            summary.waits,
            summary.waited_ns as f64 / 1e9
        );
    }
    for note in &event_notes {
        let _ = writeln!(err, "{note}");
    }
    if summary.malformed > 0 {
        let _ = writeln!(
            err,
            "eptrace: {} perf records did not parse",
            summary.malformed
        );
    }
    if summary.samples == 0 {
        bail!(
            "no CPU samples: {name} used less CPU time than one sampling period ({} ms); \
             a higher --rate samples more often",
            sampling.period_ns as f64 / 1e6
        );
    }
    drop(err);
    crate::convert::convert_and_say(&path, &config.convert)?;
    Ok(())
}

/// Process `pid`'s name (`/proc/PID/comm`).
#[cfg(target_os = "linux")]
fn process_name(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_owned())
        .unwrap_or_else(|_| format!("process {pid}"))
}

/// The one running process named `name` (its `comm`, or its executable's file name).
#[cfg(target_os = "linux")]
fn pid_by_name(name: &str) -> Result<i32> {
    let me = std::process::id() as i32;
    let mut found: Vec<i32> = std::fs::read_dir("/proc")
        .context("cannot list /proc")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
            process_name(pid) == name
                || exe.is_some_and(|e| e.file_name().is_some_and(|f| f == name))
        })
        .collect();
    found.sort_unstable();
    match found.as_slice() {
        [pid] => Ok(*pid),
        [] => bail!("no running process is named `{name}`"),
        many => bail!(
            "{} processes are named `{name}` (pids {}); choose one with -p PID",
            many.len(),
            many.iter()
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
