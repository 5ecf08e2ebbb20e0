//! `eptrace`: find, trace, watch and snapshot Rust and .NET processes, and read, report
//! and convert their NetTrace (EventPipe) traces, from the command line.
//!
//! This crate is glue, like ripgrep's `core`: [`cli`] defines the flags and converts them
//! into plain config structs, one module per subcommand (`ps`, `collect`, `report`, `dump`,
//! `convert`, `counters`, `gcdump`, `heap`, `agent`, ...) does the work through the
//! libraries (`eventpipe-client` reaches the processes, `eventpipe-agent` runs unattended,
//! `nettrace` and `eventpipe-insight` read and analyse), and [`run`] maps the outcome to an exit status:
//!
//! * 0: success, including a closed stdout (`eptrace dump … | head`);
//! * 1: the trace could not be read, the output could not be written, or the work failed;
//!   the message is printed as `eptrace: {error:#}`, naming the file and, for bad bytes,
//!   the offset;
//! * 2: a usage error (clap's own exit status);
//! * 3: `report`, `dump` or `convert` read a trace that was cut off, up to its last whole
//!   block, and wrote what that covers ([`cut`]).

mod agent;
mod analyze;
mod analyze_stacks;
mod analyze_text;
mod cli;
mod collect;
mod convert;
mod counters;
mod cut;
mod demo;
mod diff;
mod dump;
mod gcdump;
mod heap;
mod input;
mod numbers;
mod progress;
mod ps;
mod record;
mod report;
mod stack;
mod stream_file;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    run()
}

/// Turns off glibc's fast bins for the commands that build a profile. They allocate and
/// free millions of small objects (symbol caches, interned frames and stacks) between
/// large allocations (growing maps and sample lists), and glibc consolidates every fast
/// bin on each large free: 15 % of `convert -f pprof` on an event-dense trace. The
/// thread cache still serves small allocations.
fn tune_allocator_for_reading() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before this process
    // starts any thread of its own.
    unsafe {
        libc::mallopt(libc::M_MXFAST, 0);
    }
}

/// Parses the command line, runs the subcommand and reports its outcome.
fn run() -> ExitCode {
    let action = match cli::Cli::parse().into_action() {
        Ok(action) => action,
        Err(usage) => usage.exit(),
    };
    let result = match action {
        cli::Action::Ps(config) => ps::do_ps(&config),
        cli::Action::Agent(config) => agent::do_agent(&config),
        cli::Action::AgentKey => agent::do_key(),
        cli::Action::Collect(config) => collect::do_collect(&config),
        cli::Action::Report(config) => {
            tune_allocator_for_reading();
            report::do_report(&config)
        }
        cli::Action::Dump(config) => dump::do_dump(&config),
        cli::Action::Analyze(config) => {
            tune_allocator_for_reading();
            analyze::do_analyze(&config)
        }
        cli::Action::Convert(config) => {
            tune_allocator_for_reading();
            convert::do_convert(&config)
        }
        cli::Action::Stack(config) => stack::do_stack(&config),
        cli::Action::Record(config) => record::do_record(&config),
        cli::Action::Diff(config) => {
            tune_allocator_for_reading();
            diff::do_diff(&config)
        }
        cli::Action::Demo(config) => demo::do_demo(&config),
        cli::Action::DemoWorkload(seconds) => demo::workload::run(seconds),
        cli::Action::GcdumpCollect(config) => gcdump::do_collect(&config),
        cli::Action::GcdumpReport(config) => gcdump::do_report(&config),
        cli::Action::GcdumpDiff(config) => gcdump::do_diff(&config),
        cli::Action::GcdumpConvert(config) => gcdump::do_convert(&config),
        cli::Action::CountersMonitor(config) => counters::do_monitor(&config),
        cli::Action::CountersCollect(config) => counters::do_collect(&config),
        cli::Action::CountersReport(config) => counters::do_report(&config),
        cli::Action::HeapCollect(config) => heap::do_collect(&config),
        cli::Action::HeapReport(config) => heap::do_report(&config),
        cli::Action::HeapDiff(config) => heap::do_diff(&config),
        cli::Action::HeapConvert(config) => heap::do_convert(&config),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) if err.downcast_ref::<diff::ThresholdCrossed>().is_some() => {
            let _ = writeln!(io::stderr().lock(), "eptrace: --fail-if: {err}");
            ExitCode::from(diff::FAIL_IF_STATUS)
        }
        Err(err) if err.downcast_ref::<cut::CutTrace>().is_some() => {
            let _ = writeln!(io::stderr().lock(), "eptrace: warning: {err}");
            ExitCode::from(cut::EXIT_STATUS)
        }
        Err(err) => {
            // Not `eprintln!`: it panics when stderr itself is closed.
            let _ = writeln!(io::stderr().lock(), "eptrace: {err:#}");
            ExitCode::from(1)
        }
    }
}

/// Prints `value` on stdout as pretty JSON and a newline: what `--json` prints.
pub(crate) fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// Whether the error is a write to a closed pipe: the reader went away, which is not a
/// failure of ours.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}
