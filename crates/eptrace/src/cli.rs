//! The command line, as clap sees it.
//!
//! These types mirror the flags and nothing else. [`Cli::into_action`] validates them and
//! turns them into the plain config structs each subcommand takes ([`report::Config`],
//! [`dump::Config`], [`stress::Config`]), so no clap type reaches the code that does the
//! work.

use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::input::InputSpec;
use crate::{dump, report, stress};

const AFTER_HELP: &str = "\
Examples:
  eptrace report app.nettrace
  eptrace report --json app.nettrace | jq .event_counts
  eptrace dump --event GC/Start --json app.nettrace
  cat app.nettrace | eptrace dump --sorted --from 100 --to 200 -
  eptrace stress --threads 1,8 --events 1000 --output file --mode block

Exit status:
  0  success (also when stdout is closed early, as by `| head`)
  1  the trace could not be read or the output could not be written;
     for `stress`, a cell lost or miscounted events
  2  the command line is wrong";

/// Inspect NetTrace (EventPipe) trace files.
#[derive(Debug, Parser)]
#[command(name = "eptrace", version, about, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Summarize a trace: facts, event counts, threads, lost events, stacks, time order.
    Report(ReportArgs),
    /// Print events, one per line, as text or JSON lines.
    Dump(DumpArgs),
    /// Run EventPipe's stress matrix in-process and check that no event goes missing.
    Stress(StressArgs),
}

/// The trace to read; shared by every subcommand.
#[derive(Debug, Args)]
struct InputArgs {
    /// Trace file, or `-` for standard input.
    #[arg(value_name = "FILE")]
    file: PathBuf,
}

/// Output format; shared by every subcommand.
#[derive(Debug, Args)]
struct FormatArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ReportArgs {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    format: FormatArgs,
    /// Rows shown in each text table (JSON always has all of them).
    #[arg(long, value_name = "N", default_value_t = 20)]
    top: usize,
}

#[derive(Debug, Args)]
struct DumpArgs {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    format: FormatArgs,
    /// Only events of this provider (case-insensitive; repeatable).
    #[arg(long = "provider", value_name = "P")]
    providers: Vec<String>,
    /// Only events named NAME or Provider/NAME (case-insensitive; repeatable).
    #[arg(long = "event", value_name = "NAME")]
    events: Vec<String>,
    /// Only events of this OS thread id (repeatable).
    #[arg(long = "thread", value_name = "TID")]
    threads: Vec<u64>,
    /// Only events at or after MS milliseconds from the trace's start.
    #[arg(long, value_name = "MS", value_parser = finite_ms)]
    from: Option<f64>,
    /// Only events at or before MS milliseconds from the trace's start.
    #[arg(long, value_name = "MS", value_parser = finite_ms)]
    to: Option<f64>,
    /// Stop after N events.
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
    /// Print in timestamp order rather than file order.
    #[arg(long)]
    sorted: bool,
    /// Do not decode payloads.
    #[arg(long)]
    no_payload: bool,
}

#[derive(Debug, Args)]
struct StressArgs {
    /// Writer thread counts (comma list) [default: 1,8,16,50,100,1000].
    #[arg(long, value_name = "N,..", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..))]
    threads: Vec<u32>,
    /// Events per thread (comma list) [default: 1,2,100,1000,100000].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    events: Vec<u64>,
    /// Outputs: file, listener (comma list) [default: both].
    #[arg(long = "output", value_name = "OUT,..", value_delimiter = ',')]
    outputs: Vec<stress::OutputKind>,
    /// Buffering modes: drop, block (comma list) [default: both].
    #[arg(long = "mode", value_name = "MODE,..", value_delimiter = ',')]
    modes: Vec<stress::Mode>,
    /// Each session's buffer budget, in MiB.
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    budget_mb: u32,
    /// Bytes in each event's byte-slice field (after its u64 counter).
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u16))]
    payload_bytes: u16,
    /// Trace format: v5 or v6.
    #[arg(long, value_name = "V", default_value = "v5", value_parser = stress::parse_format)]
    format: nettrace::FormatVersion,
    #[command(flatten)]
    print: FormatArgs,
    /// Directory for trace files [default: a temporary directory].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Keep the trace files instead of deleting each after its cell.
    #[arg(long)]
    keep: bool,
}

/// `list` without repeats, in order; `default` when empty.
fn or_default<T: PartialEq + Copy>(list: Vec<T>, default: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for v in if list.is_empty() {
        default.to_vec()
    } else {
        list
    } {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

fn finite_ms(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("`{s}` is not a number of milliseconds")),
    }
}

/// A validated command, ready to run.
#[derive(Debug)]
pub(crate) enum Action {
    /// `eptrace report`.
    Report(report::Config),
    /// `eptrace dump`.
    Dump(dump::Config),
    /// `eptrace stress`.
    Stress(stress::Config),
}

impl Cli {
    /// Checks what clap cannot and converts to the subcommand's config. The error is a
    /// usage error (exit status 2).
    pub(crate) fn into_action(self) -> Result<Action, clap::Error> {
        Ok(match self.command {
            Command::Report(a) => Action::Report(report::Config {
                input: InputSpec::from_arg(a.input.file),
                json: a.format.json,
                top: a.top,
            }),
            Command::Dump(a) => {
                if let (Some(from), Some(to)) = (a.from, a.to) {
                    if from > to {
                        return Err(usage_error(
                            "dump",
                            format!("--from {from} is after --to {to}"),
                        ));
                    }
                }
                Action::Dump(dump::Config {
                    input: InputSpec::from_arg(a.input.file),
                    json: a.format.json,
                    providers: a.providers,
                    events: a.events,
                    threads: a.threads,
                    from_ms: a.from,
                    to_ms: a.to,
                    limit: a.limit,
                    sorted: a.sorted,
                    payload: !a.no_payload,
                })
            }
            Command::Stress(a) => Action::Stress(stress::Config {
                threads: or_default(a.threads, stress::MATRIX_THREADS),
                events: or_default(a.events, stress::MATRIX_EVENTS),
                outputs: or_default(
                    a.outputs,
                    &[stress::OutputKind::File, stress::OutputKind::Listener],
                ),
                modes: or_default(a.modes, &[stress::Mode::Drop, stress::Mode::Block]),
                budget_bytes: (a.budget_mb as usize) << 20,
                payload_bytes: usize::from(a.payload_bytes),
                format: a.format,
                json: a.print.json,
                dir: a.dir,
                keep: a.keep,
            }),
        })
    }
}

/// A usage error (exit status 2) whose usage line is the subcommand's.
fn usage_error(subcommand: &str, message: String) -> clap::Error {
    let mut cmd = Cli::command();
    cmd.build();
    match cmd.find_subcommand_mut(subcommand) {
        Some(sub) => sub.error(ErrorKind::ArgumentConflict, message),
        None => cmd.error(ErrorKind::ArgumentConflict, message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn dash_is_stdin() {
        let cli = Cli::try_parse_from(["eptrace", "report", "-"]).unwrap();
        match cli.into_action().unwrap() {
            Action::Report(c) => assert_eq!(c.input, InputSpec::Stdin),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn from_after_to_is_a_usage_error() {
        let cli =
            Cli::try_parse_from(["eptrace", "dump", "--from", "5", "--to", "1", "x"]).unwrap();
        let err = cli.into_action().unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }
}
