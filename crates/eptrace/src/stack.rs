//! `eptrace stack -p PID`: what every thread of a process is doing now, by its stack.
//!
//! A short session samples the process: a Rust program's CPU sampler with off-CPU stacks
//! (each running thread's stack from its CPU samples, each waiting thread's from the probe
//! the collector sends it), a .NET runtime's sample profiler (every managed thread's stack,
//! waiting or running, as `dotnet-stack` reads it). Each thread's latest sample is its
//! stack now. The whole of it runs within `--timeout`: a process that does not answer (one
//! stopped with SIGSTOP, one that exits meanwhile) is an error within that time, and is
//! left as it was.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use eventpipe_client::request::{Preset, TraceRequest};
use eventpipe_client::{Runtime, Target, TargetSpec, TraceSession, STOP_GRACE};
use eventpipe_insight::{ProfileBuilder, SampleSelection};
use serde::Serialize;

/// What `stack` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) target: TargetSpec,
    pub(crate) merge: bool,
    pub(crate) json: bool,
    pub(crate) timeout: Duration,
}

/// How long the process is sampled: long enough for the collector to probe every waiting
/// thread (two a visit, a visit every 10 ms) and for the sample profiler's walks.
const WINDOW: Duration = Duration::from_millis(400);

/// One thread's stack now.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ThreadStack {
    pub(crate) thread_id: u64,
    pub(crate) name: Option<String>,
    /// `running`, `waiting`, or for .NET `managed code` / `outside managed code`.
    pub(crate) state: &'static str,
    /// Its frames, the innermost first.
    pub(crate) frames: Vec<String>,
}

/// The process's threads.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Stacks {
    pub(crate) pid: u32,
    pub(crate) process: String,
    pub(crate) runtime: String,
    pub(crate) threads: Vec<ThreadStack>,
}

/// Runs `eptrace stack`.
pub(crate) fn do_stack(config: &Config) -> Result<()> {
    let (tx, rx) = mpsc::channel();
    let target = config.target.clone();
    std::thread::Builder::new()
        .name("eptrace-stack".to_owned())
        .spawn(move || {
            let _ = tx.send(capture(&target));
        })
        .context("cannot start a thread")?;
    // Only the process's part is timed: symbolizing the samples is this program's work.
    let sampled = match rx.recv_timeout(config.timeout) {
        Ok(result) => result?,
        Err(_) => bail!(
            "{} did not answer within {:.1} s (stopped, or too busy to serve its diagnostics \
             port?); it was left as it is (--timeout sets the wait)",
            describe(&config.target),
            config.timeout.as_secs_f64()
        ),
    };
    let stacks = stacks(sampled)?;
    let text = if config.json {
        let mut s = serde_json::to_string_pretty(&stacks).context("cannot serialize")?;
        s.push('\n');
        s
    } else {
        render(&stacks, config.merge)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    out.flush().context("cannot write to stdout")
}

fn describe(target: &TargetSpec) -> String {
    match target {
        TargetSpec::Pid(pid) => format!("process {pid}"),
        TargetSpec::Name(name) => format!("process `{name}`"),
        TargetSpec::Launch(argv) => format!("{argv:?}"),
    }
}

/// What the session brought back.
struct Sampled {
    pid: u32,
    name: String,
    runtime: Runtime,
    bytes: Vec<u8>,
}

/// Samples the process for [`WINDOW`].
fn capture(spec: &TargetSpec) -> Result<Sampled> {
    let mut target = Target::open(spec).map_err(|e| anyhow!(eventpipe_client::with_causes(&e)))?;
    let runtime = Runtime::of(&target.process_info());
    let is_rust = runtime.is_rust();
    let request = TraceRequest {
        presets: vec![if is_rust {
            Preset::OffCpu
        } else {
            Preset::CpuSampling
        }],
        rundown: true,
        buffer_mb: 64,
        ..TraceRequest::default()
    };
    let providers = request.providers(is_rust)?;
    let tracing = request.collect_tracing(is_rust, providers)?;
    let stream = target.collect(&tracing).map_err(|e| {
        anyhow!(
            "cannot start the session: {}",
            eventpipe_client::with_causes(&e)
        )
    })?;
    let session = TraceSession::spawn(stream, "eptrace-stack-reader", |mut stream| {
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        bytes
    })?;
    std::thread::sleep(WINDOW);
    let _ = session.stop(&mut target);
    session.wait_within(STOP_GRACE);
    let bytes = session.join()?;
    Ok(Sampled {
        pid: target.pid(),
        name: target.name(),
        runtime,
        bytes,
    })
}

/// Each thread's latest stack in what the session brought back.
fn stacks(sampled: Sampled) -> Result<Stacks> {
    let Sampled {
        pid,
        name,
        runtime,
        bytes,
    } = sampled;
    let threads = if runtime.is_rust() {
        latest(
            &bytes,
            &[
                (SampleSelection::Cpu, "running"),
                (SampleSelection::OffCpu, "waiting"),
            ],
        )?
    } else {
        latest(&bytes, &[(SampleSelection::ThreadTime, "")])?
    };
    if threads.is_empty() {
        bail!(
            "{name} ({pid}) wrote no samples in {:.1} s: a Rust program needs its CPU sampler \
             registered (eventpipe_profiler::cpu::register)",
            WINDOW.as_secs_f64()
        );
    }
    Ok(Stacks {
        pid,
        process: name,
        runtime: runtime.to_string(),
        threads,
    })
}

/// Each thread's latest sample among the profiles of `kinds` (each with the state its
/// samples mean), by thread id.
fn latest(bytes: &[u8], kinds: &[(SampleSelection, &'static str)]) -> Result<Vec<ThreadStack>> {
    let mut by_thread: BTreeMap<u64, (f64, ThreadStack)> = BTreeMap::new();
    for (selection, state) in kinds {
        let mut reader =
            nettrace::TraceReader::from_slice(bytes).context("cannot read the session")?;
        let mut builder = ProfileBuilder::new(selection.clone());
        while let Some(event) = reader.next_event().context("cannot read the session")? {
            builder.observe(&event);
        }
        let profile = builder.finish().profile;
        for s in &profile.samples {
            let thread = &profile.threads[s.thread];
            if by_thread
                .get(&thread.id)
                .is_some_and(|(t, _)| *t > s.time_ms)
            {
                continue;
            }
            let frames: Vec<String> = profile.stacks[s.stack]
                .iter()
                .rev()
                .map(|&f| profile.frames[f].function.clone())
                .collect();
            let state = if state.is_empty() {
                dotnet_state(&frames)
            } else {
                state
            };
            by_thread.insert(
                thread.id,
                (
                    s.time_ms,
                    ThreadStack {
                        thread_id: thread.id,
                        name: thread.name.clone(),
                        state,
                        frames,
                    },
                ),
            );
        }
    }
    Ok(by_thread.into_values().map(|(_, t)| t).collect())
}

/// A .NET sample's state: its leaf is the external-code frame when the thread was outside
/// managed code (waiting, or in native code).
fn dotnet_state(frames: &[String]) -> &'static str {
    match frames.first() {
        Some(leaf) if leaf == eventpipe_insight::EXTERNAL_CODE_FRAME => "outside managed code",
        _ => "managed code",
    }
}

fn render(stacks: &Stacks, merge: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} ({}), {}: {} threads",
        stacks.process,
        stacks.pid,
        stacks.runtime,
        stacks.threads.len()
    );
    if merge {
        let mut groups: BTreeMap<(&[String], &str), Vec<&ThreadStack>> = BTreeMap::new();
        for t in &stacks.threads {
            groups.entry((&t.frames, t.state)).or_default().push(t);
        }
        let mut groups: Vec<_> = groups.into_iter().collect();
        groups.sort_by_key(|(_, ts)| std::cmp::Reverse(ts.len()));
        for ((frames, state), threads) in groups {
            let names: Vec<String> = threads.iter().map(|t| label(t)).collect();
            let _ = writeln!(
                s,
                "\n{} thread{} ({state}): {}",
                threads.len(),
                if threads.len() == 1 { "" } else { "s" },
                names.join(", ")
            );
            for f in frames {
                let _ = writeln!(s, "    {f}");
            }
        }
    } else {
        for t in &stacks.threads {
            let _ = writeln!(s, "\n{} ({})", label(t), t.state);
            for f in &t.frames {
                let _ = writeln!(s, "    {f}");
            }
        }
    }
    s
}

fn label(t: &ThreadStack) -> String {
    match &t.name {
        Some(name) => format!("{name} ({})", t.thread_id),
        None => format!("thread {}", t.thread_id),
    }
}
