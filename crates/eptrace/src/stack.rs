//! `eptrace stack -p PID`: what every thread of a process is doing now, by its stack. A
//! short session samples it (`eventpipe_client::capture::stacks`), and each thread's latest
//! sample is its stack now (`eventpipe_insight::thread_stacks`). Only the process's part is
//! timed by `--timeout`: a process that does not answer (one stopped with SIGSTOP, one hung
//! so that its diagnostics server no longer serves) is an error within that time, and is
//! left as it was; symbolizing is this program's own work.

use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use eventpipe_client::capture::stacks::{sample, Sampled, WINDOW};
use eventpipe_client::TargetSpec;
use eventpipe_insight::ThreadStacks;

/// What `stack` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) target: TargetSpec,
    pub(crate) merge: bool,
    pub(crate) json: bool,
    pub(crate) timeout: Duration,
}

/// Runs `eptrace stack`.
pub(crate) fn do_stack(config: &Config) -> Result<()> {
    let sampled = sample_within(&config.target, config.timeout)?;
    let stacks = stacks_of(sampled)?;
    let text = if config.json {
        let mut s = serde_json::to_string_pretty(&stacks).context("cannot serialize")?;
        s.push('\n');
        s
    } else {
        stacks.text(config.merge)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    out.flush().context("cannot write to stdout")
}

/// Samples the process on a thread of its own, waiting at most `timeout` for it.
fn sample_within(target: &TargetSpec, timeout: Duration) -> Result<Sampled> {
    let (tx, rx) = mpsc::channel();
    let spec = target.clone();
    std::thread::Builder::new()
        .name("eptrace-stack".to_owned())
        .spawn(move || {
            let _ = tx.send(sample(&spec, WINDOW));
        })
        .context("cannot start a thread")?;
    match rx.recv_timeout(timeout) {
        Ok(sampled) => sampled.map_err(|e| anyhow!(eventpipe_client::with_causes(&e))),
        Err(_) => bail!(
            "{} did not answer within {:.1} s (stopped, or too busy to serve its diagnostics \
             port?); it was left as it is (--timeout sets the wait)",
            describe(target),
            timeout.as_secs_f64()
        ),
    }
}

fn describe(target: &TargetSpec) -> String {
    match target {
        TargetSpec::Pid(pid) => format!("process {pid}"),
        TargetSpec::Name(name) => format!("process `{name}`"),
        TargetSpec::Launch(argv) => format!("{argv:?}"),
    }
}

fn stacks_of(sampled: Sampled) -> Result<ThreadStacks> {
    Ok(ThreadStacks::read(
        sampled.pid,
        sampled.name,
        sampled.runtime.to_string(),
        sampled.runtime.is_rust(),
        &sampled.trace,
        Some(sampled.asked_to_stop),
    )?)
}
