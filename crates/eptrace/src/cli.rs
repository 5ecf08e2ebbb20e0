//! The command line, as clap sees it.
//!
//! These types mirror the flags and nothing else. [`Cli::into_action`] validates them and
//! turns them into the plain config structs each subcommand takes ([`report::Config`],
//! [`dump::Config`], [`counters::SessionConfig`]), so no clap type reaches the code that
//! does the work.

use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use eventpipe_insight::SampleSelection;

use crate::convert::ConvertFormat;
use crate::input::InputSpec;
use crate::{collect, convert, counters, demo, dump, gcdump, heap, ps, report, stream_file};
use eventpipe_client::request::{Preset, TraceRequest};
use eventpipe_client::TargetSpec;

const AFTER_HELP: &str = "\
Examples:
  eptrace demo
  eptrace ps
  eptrace collect -p 1234 --providers Demo --duration 5s
  eptrace collect -n traced-app --buffering block -o demo.nettrace
  eptrace collect --profile gc -- dotnet App.dll
  eptrace report app.nettrace
  eptrace report --json app.nettrace | jq .event_counts
  eptrace dump --event GC/Start --json app.nettrace
  eptrace convert --format speedscope,flamegraph app.nettrace
  eptrace convert --format collapsed --no-async-stacks app.nettrace
  cat app.nettrace | eptrace dump --sorted --from 100 --to 200 -
  eptrace gcdump -p 1234 -o before.gcdump.nettrace
  eptrace gcdump report before.gcdump.nettrace
  eptrace gcdump diff before.gcdump.nettrace after.gcdump.nettrace
  eptrace heap -n my-service -o now.heap.nettrace
  eptrace counters monitor -p 1234 --counters System.Runtime,MyMeter[requests]
  eptrace counters collect -n my-service --format json -o counters.json --duration 1m
  eptrace heap diff then.heap.nettrace now.heap.nettrace
  eptrace diff --fail-if 'total > +10%' base.nettrace new.nettrace
  eptrace stack -n my-service --merge

Exit status:
  0  success (also when stdout is closed early, as by `| head`)
  1  the trace could not be read or the output could not be written
  2  the command line is wrong
  4  `diff --fail-if`: a change crossed its threshold";

/// Collect and inspect NetTrace (EventPipe) traces of Rust and .NET processes.
#[derive(Debug, Parser)]
#[command(name = "eptrace", version, about, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the processes that can be traced (.NET, or Rust using eventpipe).
    Ps(PsArgs),
    /// Trace a running process, or start one and trace it from its first event.
    Collect(CollectArgs),
    /// Profile any Linux program as it is, from its first instruction or attached to it
    /// (perf events): CPU samples of every thread and child with kernel and user frames,
    /// into a NetTrace V6 trace.
    Record(RecordArgs),
    /// Summarize a trace: facts, event counts, threads, lost events, stacks, time order.
    Report(ReportArgs),
    /// Diagnose a trace: findings first (GC pauses, induced and blocking gen2 GCs, thread
    /// pool starvation, lock contention, exception rates), then GC, allocations, JIT,
    /// contention, exceptions and thread pool sections (.NET) and off-CPU time (Rust).
    Analyze(AnalyzeArgs),
    /// Print events, one per line, as text or JSON lines.
    Dump(DumpArgs),
    /// Convert a trace to speedscope, Chrome/Perfetto JSON, pprof, a flame graph SVG or
    /// collapsed stacks.
    Convert(ConvertArgs),
    /// Print what every thread of a running process is doing now: its stack, its state, its
    /// name (Rust with the CPU sampler, or .NET).
    Stack(StackArgs),
    /// Compare two traces' profiles (CPU, thread time, allocations, off-CPU): the
    /// functions whose time or bytes changed beyond sampling noise; a differential flame
    /// graph, a pprof of the difference; `--fail-if` for CI.
    Diff(DiffArgs),
    /// Snapshot a .NET process's GC heap (as dotnet-gcdump does), and read snapshots: the
    /// heap per type with retained bytes, the growth between two, the retention view.
    Gcdump(GcdumpArgs),
    /// Watch a process's counters live (EventCounters and Meters; Rust or .NET), or collect
    /// them to CSV or JSON as dotnet-counters does.
    #[command(subcommand)]
    Counters(CountersCommand),
    /// Snapshot a Rust program's live heap (the allocation profiler's sampled live set),
    /// and read snapshots: live bytes per allocation site, the growth between two.
    Heap(HeapArgs),
    /// Run unattended: find every attachable process, serve traces, heap snapshots,
    /// counters and Prometheus metrics over HTTP, and collect when a rule fires (as
    /// dotnet-monitor does). `eptrace agent key` makes an API key.
    Agent(AgentArgs),
    /// Start a demo workload, trace it for a few seconds, and show what the trace holds:
    /// trace.nettrace, a flame graph, a speedscope profile, a Chrome timeline, the report.
    Demo(DemoArgs),
    /// The demo's traced program (started by `eptrace demo`).
    #[command(hide = true)]
    DemoWorkload(DemoWorkloadArgs),
}

/// The trace to read; shared by every subcommand.
#[derive(Debug, Args)]
struct InputArgs {
    /// Trace file, or `-` for standard input.
    #[arg(value_name = "FILE")]
    file: PathBuf,
}

/// What to do with a trace that was cut off; `report`, `dump` and `convert`.
#[derive(Debug, Args)]
struct CutArgs {
    /// A trace that was cut off (its collector killed, its disk full) is an error, rather
    /// than read up to its last whole block with a warning and exit status 3.
    #[arg(long)]
    require_complete: bool,
}

/// Output format; shared by every subcommand.
#[derive(Debug, Args)]
struct FormatArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
struct AgentArgs {
    #[command(subcommand)]
    command: Option<AgentCommand>,
    /// The agent's configuration (TOML: listen, api_keys, egress, metrics, rules,
    /// profiling).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Where the API listens: HOST:PORT, or unix:PATH (owner-only) [default:
    /// 127.0.0.1:52323]. An address other than loopback needs an API key.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Profile every target continuously and push each period's profiles to this Grafana
    /// Pyroscope server (`http[s]://HOST:PORT`; the config's `[profiling]` says more).
    #[arg(long, value_name = "URL")]
    pyroscope: Option<String>,
    /// The length of one continuous profile [default: 10s].
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    profile_period: Option<std::time::Duration>,
    /// Export every target's spans, events and counters to this OpenTelemetry collector
    /// (OTLP/HTTP base URL, e.g. `http://127.0.0.1:4318`); the config's `[otlp]` table sets the
    /// rest.
    #[arg(long, value_name = "URL")]
    otlp: Option<String>,
}

#[derive(Debug, Subcommand)]
enum AgentCommand {
    /// Print a new API key, and the hash its config line holds.
    Key,
}

#[derive(Debug, Args)]
struct PsArgs {
    #[command(flatten)]
    format: FormatArgs,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("target").required(true).args(["pid", "name", "command"]))]
struct CollectArgs {
    /// The process id to attach to.
    #[arg(short = 'p', long = "process-id", value_name = "PID")]
    pid: Option<u32>,
    /// The name of the process to attach to (as `eptrace ps` shows it).
    #[arg(short = 'n', long, value_name = "NAME")]
    name: Option<String>,
    /// Providers: `Name[:Keywords[:Level[:FilterArgs]]],...` (keywords hex or `*`, level
    /// 0-5 or a name). `*` as a Rust provider name stands for every provider.
    #[arg(long, value_name = "SPEC,..", value_delimiter = ',')]
    providers: Vec<String>,
    /// Presets of providers, merged before --providers (`cpu-sampling,tracing`)
    /// [default: default, when no --providers are given].
    #[arg(long, value_enum, value_name = "PROFILE,..", value_delimiter = ',')]
    profile: Vec<Preset>,
    /// Drop (bounded memory, losses counted) or block (lossless; needs an eventpipe-rs
    /// process or .NET 11+).
    #[arg(long, value_name = "MODE", default_value = "drop", value_parser = ["drop", "block"])]
    buffering: String,
    /// The session's buffer budget in MB.
    #[arg(long = "buffersize", value_name = "MB", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    buffer_mb: u32,
    /// Stop after this long (5s, 500ms, 2m, 1.5 or hh:mm:ss); otherwise on Enter, Ctrl-C
    /// or when the process ends.
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    duration: Option<std::time::Duration>,
    /// Ask for rundown (module and method lists) at the end (the default).
    #[arg(long, overrides_with = "no_rundown")]
    rundown: bool,
    /// Do not ask for rundown.
    #[arg(long)]
    no_rundown: bool,
    /// Capture a stack with every event (always on for .NET, whose CollectTracing2 has no
    /// choice; off by default for Rust, where each capture costs microseconds).
    #[arg(long)]
    stacks: bool,
    /// The trace file [default: NAME_PID.nettrace].
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// NetTrace version: v5 (readable by every NetTrace reader) or v6 (eventpipe-rs only).
    #[arg(long = "nettrace-version", value_name = "V", default_value = "v5",
          value_parser = ["v5", "v6"])]
    trace_format: String,
    /// Also convert the trace, once collected (comma list; see `eptrace convert`).
    #[arg(
        short = 'f',
        long = "format",
        value_name = "FORMAT,..",
        value_delimiter = ',',
        value_enum
    )]
    formats: Vec<ConvertFormat>,
    /// The program to start and trace, after `--`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct GcdumpArgs {
    #[command(subcommand)]
    command: Option<GcdumpCommand>,
    #[command(flatten)]
    collect: GcdumpCollectArgs,
}

#[derive(Debug, Subcommand)]
enum GcdumpCommand {
    /// Snapshot a running .NET process's heap (the default: `eptrace gcdump -p PID`).
    Collect(GcdumpCollectArgs),
    /// The heap per type: bytes, count and retained bytes, largest first.
    Report(GcdumpReportArgs),
    /// Per type, what changed from OLD to NEW: largest growth in retained bytes first.
    Diff(GcdumpDiffArgs),
    /// The retention view (each object on the stack of its dominators) as a profile:
    /// speedscope, pprof, a flame graph or collapsed stacks.
    Convert(GcdumpConvertArgs),
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("gcdump_target").required(true).args(["pid", "name"]))]
struct GcdumpCollectArgs {
    /// The process id of the .NET process.
    #[arg(short = 'p', long = "process-id", value_name = "PID")]
    pid: Option<u32>,
    /// The name of the .NET process (as `eptrace ps` shows it).
    #[arg(short = 'n', long, value_name = "NAME")]
    name: Option<String>,
    /// The snapshot file [default: NAME_PID.gcdump.nettrace].
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Give up when the dump has not finished after this long.
    #[arg(long, value_name = "TIME", default_value = "30s", value_parser = parse_duration)]
    timeout: std::time::Duration,
    /// Keep going with a dump that lost part of the heap (it is reported as incomplete).
    #[arg(long)]
    allow_partial: bool,
    /// The Drop-mode buffer in MB, for runtimes without Block mode (before .NET 11).
    #[arg(long = "buffersize", value_name = "MB", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    buffer_mb: u32,
}

#[derive(Debug, Args)]
struct GcdumpReportArgs {
    /// The snapshot (a nettrace written by `eptrace gcdump` or `dotnet-trace` with the heap
    /// dump keywords).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    #[command(flatten)]
    format: FormatArgs,
    /// Types shown (JSON has all of them).
    #[arg(long, value_name = "N", default_value_t = 30)]
    top: usize,
    /// Report a dump that lost part of the heap, marked incomplete.
    #[arg(long)]
    allow_partial: bool,
}

#[derive(Debug, Args)]
struct GcdumpDiffArgs {
    #[command(flatten)]
    snapshots: SnapshotPairArgs,
    #[command(flatten)]
    format: FormatArgs,
    /// Types shown (JSON has all of them).
    #[arg(long, value_name = "N", default_value_t = 30)]
    top: usize,
    /// Compare dumps that lost part of the heap, marked incomplete.
    #[arg(long)]
    allow_partial: bool,
}

#[derive(Debug, Args)]
struct GcdumpConvertArgs {
    #[command(flatten)]
    snapshot: SnapshotConvertArgs,
    /// Convert a dump that lost part of the heap, marked incomplete.
    #[arg(long)]
    allow_partial: bool,
}

#[derive(Debug, Subcommand)]
enum CountersCommand {
    /// Show the counters live, refreshing in place (p pauses, r resumes, q quits).
    Monitor(CountersSessionArgs),
    /// Write the counters to a CSV or JSON file as they arrive.
    Collect(CountersCollectArgs),
    /// Summarize the counter values a trace file holds.
    Report(CountersReportArgs),
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("counters_target").required(true).args(["pid", "name", "command"]))]
struct CountersSessionArgs {
    /// The process id.
    #[arg(short = 'p', long = "process-id", value_name = "PID")]
    pid: Option<u32>,
    /// The process name (as `eptrace ps` shows it).
    #[arg(short = 'n', long, value_name = "NAME")]
    name: Option<String>,
    /// Providers and counters: `System.Runtime,MyMeter[requests,latency]` [default:
    /// System.Runtime for .NET, EventPipeRs-Runtime for Rust].
    #[arg(long, value_name = "LIST")]
    counters: Option<String>,
    /// Seconds between two values of a counter.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    refresh_interval: f64,
    /// Stop after this long (5s, 2m, hh:mm:ss).
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    duration: Option<std::time::Duration>,
    /// Meters: the most time series (tag combinations) the target tracks.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    max_time_series: u32,
    /// Meters: the most histograms the target tracks.
    #[arg(long, value_name = "N", default_value_t = 10)]
    max_histograms: u32,
    /// The program to start and watch, after `--`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
struct CountersCollectArgs {
    #[command(flatten)]
    session: CountersSessionArgs,
    /// The file's format.
    #[arg(long, value_enum, default_value = "csv")]
    format: counters::ExportFormat,
    /// The file [default: counter.csv or counter.json].
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct CountersReportArgs {
    /// A trace with counter values.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    #[command(flatten)]
    format: FormatArgs,
}

impl CountersSessionArgs {
    fn into_config(self) -> Result<counters::SessionConfig, clap::Error> {
        let target = match (self.pid, self.name, self.command.is_empty()) {
            (Some(pid), _, _) => TargetSpec::Pid(pid),
            (None, Some(name), _) => TargetSpec::Name(name),
            (None, None, false) => TargetSpec::Launch(self.command),
            (None, None, true) => {
                return Err(usage_error(
                    "counters",
                    "name the process: -p PID, -n NAME or -- CMD".into(),
                ))
            }
        };
        let counters = match self.counters {
            Some(text) => Some(
                counters::parse_counter_specs(&text)
                    .map_err(|e| usage_error("counters", format!("--counters {e}")))?,
            ),
            None => None,
        };
        if !(self.refresh_interval.is_finite() && self.refresh_interval >= 0.1) {
            return Err(usage_error(
                "counters",
                format!(
                    "--refresh-interval {} is not a number of seconds of at least 0.1",
                    self.refresh_interval
                ),
            ));
        }
        Ok(counters::SessionConfig {
            target,
            counters,
            refresh_sec: self.refresh_interval,
            duration: self.duration,
            max_time_series: self.max_time_series,
            max_histograms: self.max_histograms,
            runtime_events: false,
        })
    }
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct HeapArgs {
    #[command(subcommand)]
    command: Option<HeapCommand>,
    #[command(flatten)]
    collect: HeapCollectArgs,
}

#[derive(Debug, Subcommand)]
enum HeapCommand {
    /// Snapshot a running Rust program's live heap (the default: `eptrace heap -p PID`).
    Collect(HeapCollectArgs),
    /// Live bytes and allocations per allocation site, with their sampling error.
    Report(HeapReportArgs),
    /// Per site, the growth from OLD to NEW: most growth first.
    Diff(HeapDiffArgs),
    /// The live heap as a profile: speedscope, pprof, a flame graph or collapsed stacks.
    Convert(HeapConvertArgs),
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("heap_target").required(true).args(["pid", "name"]))]
struct HeapCollectArgs {
    /// The process id of the Rust program.
    #[arg(short = 'p', long = "process-id", value_name = "PID")]
    pid: Option<u32>,
    /// The name of the Rust program (as `eptrace ps` shows it).
    #[arg(short = 'n', long, value_name = "NAME")]
    name: Option<String>,
    /// The snapshot file [default: NAME_PID.heap.nettrace].
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Give up when no snapshot has come after this long.
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = parse_duration)]
    timeout: std::time::Duration,
    /// The session's buffer budget in MB (Block mode: a small one slows the snapshot,
    /// never loses it).
    #[arg(long = "buffersize", value_name = "MB", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    buffer_mb: u32,
}

#[derive(Debug, Args)]
struct HeapReportArgs {
    /// The snapshot (written by `eptrace heap`).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    #[command(flatten)]
    format: FormatArgs,
    /// Sites shown (JSON has all of them).
    #[arg(long, value_name = "N", default_value_t = 30)]
    top: usize,
    /// Sum the rows by `site` (the function that asked for memory) or by `caller` (the
    /// first frame in the program's own code on the way to it).
    #[arg(long, value_name = "WHAT", default_value = "site", value_parser = ["site", "caller"])]
    by: String,
}

#[derive(Debug, Args)]
struct HeapDiffArgs {
    #[command(flatten)]
    snapshots: SnapshotPairArgs,
    #[command(flatten)]
    format: FormatArgs,
    /// Sites shown (JSON has all of them).
    #[arg(long, value_name = "N", default_value_t = 30)]
    top: usize,
}

#[derive(Debug, Args)]
struct HeapConvertArgs {
    #[command(flatten)]
    snapshot: SnapshotConvertArgs,
}

/// `gcdump convert` and `heap convert`: a snapshot file as profiles.
#[derive(Debug, Args)]
struct SnapshotConvertArgs {
    /// The snapshot.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Output formats (comma list).
    #[arg(
        short = 'f',
        long = "format",
        value_name = "FORMAT,..",
        value_delimiter = ',',
        value_parser = profile_format(),
        default_value = "speedscope"
    )]
    formats: Vec<ConvertFormat>,
    /// Output file (`-`: standard output), for a single format.
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// `gcdump diff` and `heap diff`: the two snapshots.
#[derive(Debug, Args)]
struct SnapshotPairArgs {
    /// The earlier snapshot.
    #[arg(value_name = "OLD")]
    old: PathBuf,
    /// The later snapshot.
    #[arg(value_name = "NEW")]
    new: PathBuf,
}

/// A duration: `5s`, `250ms`, `2m`, `1h`, bare seconds (`1.5`) or `hh:mm:ss`.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("`{s}` is not a duration (try 5s, 250ms, 2m or 00:00:05)");
    let t = s.trim();
    let secs = if t.contains(':') {
        let parts: Vec<f64> = t
            .split(':')
            .map(|p| p.parse::<f64>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        match parts.as_slice() {
            [h, m, sec] => h * 3600.0 + m * 60.0 + sec,
            [m, sec] => m * 60.0 + sec,
            _ => return Err(bad()),
        }
    } else {
        let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
            (n, 0.001)
        } else if let Some(n) = t.strip_suffix('s') {
            (n, 1.0)
        } else if let Some(n) = t.strip_suffix('m') {
            (n, 60.0)
        } else if let Some(n) = t.strip_suffix('h') {
            (n, 3600.0)
        } else {
            (t, 1.0)
        };
        num.trim().parse::<f64>().map_err(|_| bad())? * scale
    };
    if !secs.is_finite() || secs <= 0.0 {
        return Err(bad());
    }
    std::time::Duration::try_from_secs_f64(secs).map_err(|_| bad())
}

#[derive(Debug, Args)]
struct ReportArgs {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    cut: CutArgs,
    #[command(flatten)]
    format: FormatArgs,
    /// Rows shown in each text table (JSON always has all of them).
    #[arg(long, value_name = "N", default_value_t = 20)]
    top: usize,
}

#[derive(Debug, Args)]
struct AnalyzeArgs {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    cut: CutArgs,
    #[command(flatten)]
    format: FormatArgs,
    /// Rows shown in each text table (JSON always has all of them).
    #[arg(long, value_name = "N", default_value_t = 10)]
    top: usize,
    /// The GC section: every GC's pause, reason, kind and heap sizes; totals per generation.
    /// With no section flag, every section is shown.
    #[arg(long)]
    gc: bool,
    /// The allocations section: GC/AllocationTick by type.
    #[arg(long)]
    allocations: bool,
    /// The JIT section: methods compiled, by tier, the slowest.
    #[arg(long)]
    jit: bool,
    /// The lock contention section: waits by thread and by lock owner.
    #[arg(long)]
    contention: bool,
    /// The exceptions section: thrown by type and message.
    #[arg(long)]
    exceptions: bool,
    /// The thread pool section: workers, adjustments, starvation.
    #[arg(long)]
    threadpool: bool,
    /// The off-CPU section (Rust's CPU sampler): each thread's CPU and off-CPU time, and,
    /// from `--profile off-cpu` traces, the stacks threads waited in.
    #[arg(long)]
    offcpu: bool,
    /// The async section (Rust's async profiler): polls that blocked an executor thread,
    /// by future with their CPU stacks, and tasks that never finished.
    #[arg(long = "async")]
    async_polls: bool,
    /// A poll this long or longer (ms) is a long poll: the async section's threshold and
    /// its finding's.
    #[arg(long, value_name = "MS", value_parser = positive_ms,
          default_value_t = eventpipe_analysis::async_polls::LONG_POLL_MS)]
    long_poll: f64,
}

#[derive(Debug, Args)]
struct DumpArgs {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    cut: CutArgs,
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
struct ConvertArgs {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    cut: CutArgs,
    /// Output formats (comma list).
    #[arg(
        short = 'f',
        long = "format",
        value_name = "FORMAT,..",
        value_delimiter = ',',
        required = true,
        value_enum
    )]
    formats: Vec<ConvertFormat>,
    /// Output file (`-`: standard output), for a single format [default: the trace's name
    /// with the format's suffix: .speedscope.json, .timeline.json, .pb.gz, .svg, .folded].
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Which events are the samples: auto (CPU samples, else .NET thread time, else
    /// allocation samples, else every event with a stack), cpu, thread-time (.NET: time in
    /// and outside managed code), managed (.NET: time in managed code only), offcpu
    /// (Rust: where threads waited, from `--profile off-cpu`), alloc (Rust's allocation
    /// samples, or .NET's GC/AllocationTick by bytes), contention (.NET: lock waits by
    /// time), exceptions (.NET: by throw stack), live-heap (what was still allocated at the last heap profile), events, or an event
    /// name (Provider/Event).
    #[arg(long, value_name = "WHAT", default_value = "auto")]
    samples: String,
    /// One flame graph per thread, side by side, instead of all threads merged.
    #[arg(long)]
    by_thread: bool,
    /// Keep CPU samples' native stacks as they are. By default, in a trace with async
    /// profiler data, a sample taken inside an instrumented future's poll shows the
    /// future's async callstack (`async my_crate::handle`) in place of the executor's
    /// poll frames.
    #[arg(long)]
    no_async_stacks: bool,
}

#[derive(Debug, Args)]
struct StackArgs {
    /// The process id.
    #[arg(
        short = 'p',
        long = "process-id",
        value_name = "PID",
        conflicts_with = "name"
    )]
    pid: Option<u32>,
    /// The process's name (as `eptrace ps` shows it).
    #[arg(short = 'n', long, value_name = "NAME")]
    name: Option<String>,
    /// Group the threads with the same stack.
    #[arg(long)]
    merge: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// How long to wait for the process before giving up (it is left as it was).
    #[arg(long, value_name = "TIME", default_value = "5s", value_parser = parse_duration)]
    timeout: std::time::Duration,
}

#[derive(Debug, Args)]
struct RecordArgs {
    /// The running process to record (all its threads, and what they start).
    #[arg(
        short = 'p',
        long = "process-id",
        value_name = "PID",
        conflicts_with_all = ["name", "command"]
    )]
    pid: Option<i32>,
    /// The running process to record, by name (its `comm` or its executable's name).
    #[arg(short = 'n', long, value_name = "NAME", conflicts_with = "command")]
    name: Option<String>,
    /// Samples per second of each thread's CPU time.
    #[arg(long, value_name = "HZ", default_value_t = 999,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    rate: u32,
    /// Stop after this long (5s, 500ms, 2m); otherwise when the program ends, or on Enter
    /// or Ctrl-C.
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    duration: Option<std::time::Duration>,
    /// User frames only: ask for no kernel frames.
    #[arg(long)]
    no_kernel: bool,
    /// Also record every wait off CPU (each context switch away, with its stack, and when
    /// the thread came back): where the program waited and how long; `convert --samples
    /// offcpu` and `analyze --offcpu` read them.
    #[arg(long)]
    off_cpu: bool,
    /// How user stacks are walked: `dwarf` (a copy of each sample's stack, unwound with
    /// the binaries' .eh_frame: whole stacks through code without frame pointers) or `fp`
    /// (the kernel's frame-pointer walk only: less data, stacks end at the first function
    /// without one).
    #[arg(long = "call-graph", value_name = "HOW", default_value = "dwarf",
          value_parser = ["dwarf", "fp"])]
    call_graph: String,
    /// Providers of the program's own EventPipe session, when it serves the diagnostics
    /// protocol (.NET, Rust with eventpipe), as `collect` takes them; its events join the
    /// samples in the trace, on their clock.
    #[arg(long, value_name = "SPEC,..", value_delimiter = ',')]
    providers: Vec<String>,
    /// Presets of providers for that session, as `collect` has them [default: the runtime's
    /// default keywords for .NET, every provider for Rust; its own samplers left out, as
    /// perf samples].
    #[arg(long, value_enum, value_name = "PROFILE,..", value_delimiter = ',')]
    profile: Vec<Preset>,
    /// Samples only: open no EventPipe session, even where the program serves one.
    #[arg(long, conflicts_with_all = ["providers", "profile"])]
    no_events: bool,
    /// The trace file [default: NAME_PID.nettrace].
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Also convert the trace, once recorded (comma list; see `eptrace convert`).
    #[arg(
        short = 'f',
        long = "format",
        value_name = "FORMAT,..",
        value_delimiter = ',',
        value_enum
    )]
    formats: Vec<ConvertFormat>,
    /// The program to start and profile, after `--`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
struct DiffArgs {
    /// The trace (or converted profile: pprof, speedscope) before the change.
    #[arg(value_name = "BASE")]
    base: PathBuf,
    /// The trace (or converted profile) after it.
    #[arg(value_name = "NEW")]
    new: PathBuf,
    /// Which samples of a trace, as `convert --samples` takes them: auto, cpu,
    /// thread-time, managed, offcpu, alloc, contention, exceptions, ... (a converted
    /// profile holds one kind)
    #[arg(long, value_name = "WHAT", default_value = "auto")]
    samples: String,
    /// How the two are made comparable: per-second (each profile's weights per second of
    /// its duration), share (as shares of each profile's total) or raw (as recorded, what
    /// `go tool pprof -diff_base` subtracts). Default: per-second, or share when a profile
    /// keeps no duration (speedscope).
    #[arg(long, value_name = "HOW", value_parser = parse_normalize)]
    normalize: Option<eventpipe_insight::diff::Normalize>,
    /// Print JSON: every function, with its errors.
    #[arg(long)]
    json: bool,
    /// Functions shown, the largest change first.
    #[arg(long, value_name = "N", default_value_t = 20)]
    top: usize,
    /// Show functions whose change is within the noise too.
    #[arg(long)]
    all: bool,
    /// Also write a differential flame graph (SVG): the new profile, red where it grew,
    /// blue where it shrank.
    #[arg(long, value_name = "FILE")]
    flamegraph: Option<PathBuf>,
    /// Also write the new profile minus the base as pprof (gzipped protobuf).
    #[arg(long, value_name = "FILE")]
    pprof: Option<PathBuf>,
    /// Exit with status 4 when a function's total (or `total`) changed past a threshold,
    /// beyond noise: `'parse > +10%'`, `'total < -5%'`. Repeatable.
    #[arg(long, value_name = "'NAME > +N%'", value_parser = crate::diff::parse_threshold)]
    fail_if: Vec<crate::diff::Threshold>,
}

fn parse_normalize(s: &str) -> Result<eventpipe_insight::diff::Normalize, String> {
    use eventpipe_insight::diff::Normalize;
    match s {
        "raw" => Ok(Normalize::Raw),
        "per-second" => Ok(Normalize::PerSecond),
        "share" => Ok(Normalize::Share),
        _ => Err(format!("`{s}`: expected per-second, share or raw")),
    }
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// How long to trace.
    #[arg(long, value_name = "TIME", default_value = "3s", value_parser = parse_duration)]
    duration: std::time::Duration,
    /// Directory for the files.
    #[arg(short = 'o', long, value_name = "DIR", default_value = "eptrace-demo")]
    out_dir: PathBuf,
}

#[derive(Debug, Args)]
struct DemoWorkloadArgs {
    /// Exit after this many seconds (0: run until killed).
    #[arg(long, default_value_t = 0.0)]
    seconds: f64,
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
    /// `eptrace ps`.
    Ps(ps::Config),
    /// `eptrace agent`.
    Agent(crate::agent::Options),
    /// `eptrace agent key`.
    AgentKey,
    /// `eptrace collect`.
    Collect(collect::Config),
    /// `eptrace report`.
    Report(report::Config),
    /// `eptrace analyze`.
    Analyze(crate::analyze::Config),
    /// `eptrace dump`.
    Dump(dump::Config),
    /// `eptrace convert`.
    Convert(convert::Config),
    /// `eptrace diff`.
    Diff(crate::diff::Config),
    /// `eptrace stack`.
    Stack(crate::stack::Config),
    /// `eptrace record`.
    Record(crate::record::Config),
    /// `eptrace demo`.
    Demo(demo::Config),
    /// The demo's workload, for this many seconds.
    DemoWorkload(f64),
    /// `eptrace gcdump [collect]`.
    GcdumpCollect(stream_file::CollectConfig<gcdump::CaptureOptions>),
    /// `eptrace gcdump report`.
    GcdumpReport(stream_file::ReportConfig),
    /// `eptrace gcdump diff`.
    GcdumpDiff(stream_file::DiffConfig),
    /// `eptrace gcdump convert`.
    GcdumpConvert(stream_file::ConvertConfig),
    /// `eptrace counters monitor`.
    CountersMonitor(counters::MonitorConfig),
    /// `eptrace counters collect`.
    CountersCollect(counters::CollectConfig),
    /// `eptrace counters report`.
    CountersReport(counters::ReportConfig),
    /// `eptrace heap [collect]`.
    HeapCollect(stream_file::CollectConfig<heap::CaptureOptions>),
    /// `eptrace heap report`.
    HeapReport(stream_file::ReportConfig),
    /// `eptrace heap diff`.
    HeapDiff(stream_file::DiffConfig),
    /// `eptrace heap convert`.
    HeapConvert(stream_file::ConvertConfig),
}

impl Cli {
    /// Checks what clap cannot and converts to the subcommand's config. The error is a
    /// usage error (exit status 2).
    pub(crate) fn into_action(self) -> Result<Action, clap::Error> {
        Ok(match self.command {
            Command::Ps(a) => Action::Ps(ps::Config {
                json: a.format.json,
            }),
            Command::Agent(a) => match a.command {
                Some(AgentCommand::Key) => Action::AgentKey,
                None => Action::Agent(crate::agent::Options {
                    settings_file: a.config,
                    listen: a.listen,
                    pyroscope: a.pyroscope,
                    profile_period: a.profile_period,
                    otlp: a.otlp,
                }),
            },
            Command::Collect(a) => Action::Collect(collect::Config {
                target: match (a.pid, a.name) {
                    (Some(pid), _) => TargetSpec::Pid(pid),
                    (None, Some(name)) => TargetSpec::Name(name),
                    (None, None) => TargetSpec::Launch(a.command),
                },
                request: TraceRequest {
                    presets: a.profile,
                    providers: a.providers,
                    block: a.buffering == "block",
                    buffer_mb: a.buffer_mb,
                    rundown: !a.no_rundown || a.rundown,
                    v6: a.trace_format == "v6",
                    stacks: a.stacks,
                },
                duration: a.duration,
                output: a.output,
                convert: a.formats,
            }),
            Command::Report(a) => Action::Report(report::Config {
                input: InputSpec::from_arg(a.input.file),
                cut: crate::cut::CutTraces::from_flag(a.cut.require_complete),
                json: a.format.json,
                top: a.top,
            }),
            Command::Analyze(a) => {
                let chosen = eventpipe_analysis::Sections {
                    gc: a.gc,
                    allocations: a.allocations,
                    jit: a.jit,
                    contention: a.contention,
                    exceptions: a.exceptions,
                    threadpool: a.threadpool,
                    offcpu: a.offcpu,
                    async_polls: a.async_polls,
                };
                Action::Analyze(crate::analyze::Config {
                    long_poll_ms: a.long_poll,
                    input: InputSpec::from_arg(a.input.file),
                    cut: crate::cut::CutTraces::from_flag(a.cut.require_complete),
                    json: a.format.json,
                    top: a.top,
                    sections: if chosen == eventpipe_analysis::Sections::NONE {
                        eventpipe_analysis::Sections::ALL
                    } else {
                        chosen
                    },
                })
            }
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
                    cut: crate::cut::CutTraces::from_flag(a.cut.require_complete),
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
            Command::Convert(a) => {
                one_output("convert", a.output.as_ref(), &a.formats)?;
                Action::Convert(convert::Config {
                    input: InputSpec::from_arg(a.input.file),
                    cut: crate::cut::CutTraces::from_flag(a.cut.require_complete),
                    formats: a.formats,
                    output: a.output,
                    samples: parse_samples(&a.samples),
                    by_thread: a.by_thread,
                    async_stacks: !a.no_async_stacks,
                })
            }
            Command::Stack(a) => Action::Stack(crate::stack::Config {
                target: match (a.pid, a.name) {
                    (Some(pid), _) => eventpipe_client::TargetSpec::Pid(pid),
                    (None, Some(name)) => eventpipe_client::TargetSpec::Name(name),
                    (None, None) => {
                        return Err(Cli::command().error(
                            clap::error::ErrorKind::MissingRequiredArgument,
                            "stack needs the process: -p PID or -n NAME",
                        ))
                    }
                },
                merge: a.merge,
                json: a.json,
                timeout: a.timeout,
            }),
            Command::Record(a) => Action::Record(crate::record::Config {
                target: match (a.pid, a.name) {
                    (Some(pid), _) => crate::record::Target::Pid(pid),
                    (None, Some(name)) => crate::record::Target::Name(name),
                    (None, None) if !a.command.is_empty() => {
                        crate::record::Target::Launch(a.command)
                    }
                    (None, None) => {
                        return Err(Cli::command().error(
                            clap::error::ErrorKind::MissingRequiredArgument,
                            "record needs a program (-- CMD [ARGS]) or a process (-p PID, \
                             -n NAME)",
                        ))
                    }
                },
                output: a.output,
                rate_hz: a.rate,
                duration: a.duration,
                kernel: !a.no_kernel,
                off_cpu: a.off_cpu,
                convert: a.formats,
                user_stack_bytes: if a.call_graph == "dwarf" { 16 << 10 } else { 0 },
                events: (!a.no_events).then(|| eventpipe_client::request::TraceRequest {
                    presets: a.profile,
                    providers: a.providers,
                    ..eventpipe_client::request::TraceRequest::default()
                }),
            }),
            Command::Diff(a) => Action::Diff(crate::diff::Config {
                base: a.base,
                new: a.new,
                samples: parse_samples(&a.samples),
                normalize: a.normalize,
                json: a.json,
                top: a.top,
                all: a.all,
                flamegraph: a.flamegraph,
                pprof: a.pprof,
                fail_if: a.fail_if,
            }),
            Command::Demo(a) => Action::Demo(demo::Config {
                seconds: a.duration.as_secs_f64(),
                out_dir: a.out_dir,
            }),
            Command::DemoWorkload(a) => Action::DemoWorkload(a.seconds),
            Command::Counters(CountersCommand::Monitor(a)) => {
                Action::CountersMonitor(counters::MonitorConfig {
                    session: a.into_config()?,
                })
            }
            Command::Counters(CountersCommand::Collect(a)) => {
                let output = a.output.unwrap_or_else(|| {
                    PathBuf::from(match a.format {
                        counters::ExportFormat::Csv => "counter.csv",
                        counters::ExportFormat::Json => "counter.json",
                    })
                });
                Action::CountersCollect(counters::CollectConfig {
                    session: a.session.into_config()?,
                    format: a.format,
                    output,
                })
            }
            Command::Counters(CountersCommand::Report(a)) => {
                Action::CountersReport(counters::ReportConfig {
                    file: a.file,
                    json: a.format.json,
                })
            }
            Command::Heap(a) => match a.command {
                None | Some(HeapCommand::Collect(_)) => {
                    let c = match a.command {
                        Some(HeapCommand::Collect(c)) => c,
                        _ => a.collect,
                    };
                    Action::HeapCollect(stream_file::CollectConfig {
                        target: snapshot_target("heap", c.pid, c.name)?,
                        output: c.output,
                        options: heap::CaptureOptions {
                            timeout: c.timeout,
                            buffer_mb: c.buffer_mb,
                        },
                    })
                }
                Some(HeapCommand::Report(r)) => Action::HeapReport(stream_file::ReportConfig {
                    file: r.file,
                    json: r.format.json,
                    top: r.top,
                    allow_partial: false,
                    by_caller: r.by == "caller",
                }),
                Some(HeapCommand::Diff(d)) => Action::HeapDiff(stream_file::DiffConfig {
                    old: d.snapshots.old,
                    new: d.snapshots.new,
                    json: d.format.json,
                    top: d.top,
                    allow_partial: false,
                }),
                Some(HeapCommand::Convert(c)) => {
                    Action::HeapConvert(c.snapshot.into_config("heap", false)?)
                }
            },
            Command::Gcdump(a) => match a.command {
                None | Some(GcdumpCommand::Collect(_)) => {
                    let c = match a.command {
                        Some(GcdumpCommand::Collect(c)) => c,
                        _ => a.collect,
                    };
                    Action::GcdumpCollect(stream_file::CollectConfig {
                        target: snapshot_target("gcdump", c.pid, c.name)?,
                        output: c.output,
                        options: gcdump::CaptureOptions {
                            timeout: c.timeout,
                            allow_partial: c.allow_partial,
                            buffer_mb: c.buffer_mb,
                        },
                    })
                }
                Some(GcdumpCommand::Report(r)) => Action::GcdumpReport(stream_file::ReportConfig {
                    file: r.file,
                    json: r.format.json,
                    top: r.top,
                    allow_partial: r.allow_partial,
                    by_caller: false,
                }),
                Some(GcdumpCommand::Diff(d)) => Action::GcdumpDiff(stream_file::DiffConfig {
                    old: d.snapshots.old,
                    new: d.snapshots.new,
                    json: d.format.json,
                    top: d.top,
                    allow_partial: d.allow_partial,
                }),
                Some(GcdumpCommand::Convert(c)) => {
                    Action::GcdumpConvert(c.snapshot.into_config("gcdump", c.allow_partial)?)
                }
            },
        })
    }
}

/// A positive, finite number of milliseconds.
fn positive_ms(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(ms) if ms.is_finite() && ms > 0.0 => Ok(ms),
        _ => Err(format!(
            "expected a positive number of milliseconds, not `{s}`"
        )),
    }
}

/// `--samples`: a kind, or an event name.
fn parse_samples(s: &str) -> SampleSelection {
    match s.to_ascii_lowercase().as_str() {
        "auto" => SampleSelection::Auto,
        "cpu" => SampleSelection::Cpu,
        "thread-time" | "threadtime" => SampleSelection::ThreadTime,
        "managed" => SampleSelection::ManagedCode,
        "offcpu" | "off-cpu" => SampleSelection::OffCpu,
        "contention" => SampleSelection::Contention,
        "exceptions" => SampleSelection::Exceptions,
        "alloc" | "allocations" => SampleSelection::Allocations,
        "live-heap" | "heap" => SampleSelection::LiveHeap,
        "events" => SampleSelection::EventsWithStacks,
        _ => SampleSelection::Event(s.to_owned()),
    }
}

/// The formats a snapshot converts to: every profile format, not the timeline (a heap
/// snapshot has no time).
fn profile_format() -> impl clap::builder::TypedValueParser<Value = ConvertFormat> {
    use clap::builder::TypedValueParser as _;
    let values = ConvertFormat::value_variants()
        .iter()
        .filter(|f| **f != ConvertFormat::Chrome)
        .filter_map(ValueEnum::to_possible_value);
    clap::builder::PossibleValuesParser::new(values).map(|name: String| {
        ConvertFormat::from_str(&name, false).expect("the parser accepts only listed formats")
    })
}

impl SnapshotConvertArgs {
    /// The config of `subcommand convert`, after the usage check clap cannot make.
    fn into_config(
        self,
        subcommand: &str,
        allow_partial: bool,
    ) -> Result<stream_file::ConvertConfig, clap::Error> {
        one_output(subcommand, self.output.as_ref(), &self.formats)?;
        Ok(stream_file::ConvertConfig {
            file: self.file,
            formats: self.formats,
            output: self.output,
            allow_partial,
        })
    }
}

/// The process a snapshot command (`gcdump`, `heap`) names: `-p PID` or `-n NAME`.
fn snapshot_target(
    subcommand: &str,
    pid: Option<u32>,
    name: Option<String>,
) -> Result<TargetSpec, clap::Error> {
    match (pid, name) {
        (Some(pid), _) => Ok(TargetSpec::Pid(pid)),
        (None, Some(name)) => Ok(TargetSpec::Name(name)),
        (None, None) => Err(usage_error(
            subcommand,
            "name the process: -p PID or -n NAME".into(),
        )),
    }
}

/// `-o` names one file, so it takes one `--format`.
fn one_output(
    subcommand: &str,
    output: Option<&PathBuf>,
    formats: &[ConvertFormat],
) -> Result<(), clap::Error> {
    if output.is_some() && formats.len() > 1 {
        return Err(usage_error(
            subcommand,
            "-o names one file; give one --format with it".into(),
        ));
    }
    Ok(())
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
    fn durations_parse_in_every_form() {
        let secs = |s: &str| parse_duration(s).map(|d| d.as_secs_f64());
        assert_eq!(secs("5s"), Ok(5.0));
        assert_eq!(secs("250ms"), Ok(0.25));
        assert_eq!(secs("2m"), Ok(120.0));
        assert_eq!(secs("1.5"), Ok(1.5));
        assert_eq!(secs("00:01:05"), Ok(65.0));
        assert!(secs("0").is_err());
        assert!(secs("soon").is_err());
        assert!(secs("-3s").is_err());
    }

    #[test]
    fn collect_needs_exactly_one_target() {
        assert!(Cli::try_parse_from(["eptrace", "collect"]).is_err());
        assert!(Cli::try_parse_from(["eptrace", "collect", "-p", "1", "-n", "x"]).is_err());
        let cli = Cli::try_parse_from([
            "eptrace",
            "collect",
            "--providers",
            "A,B:0x2:4",
            "--",
            "app",
            "-v",
        ])
        .unwrap();
        match cli.into_action().unwrap() {
            Action::Collect(c) => {
                assert_eq!(
                    c.target,
                    TargetSpec::Launch(vec!["app".into(), "-v".into()])
                );
                assert_eq!(c.request.providers, ["A", "B:0x2:4"]);
                assert!(c.request.rundown && !c.request.block);
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn async_stacks_are_on_unless_turned_off() {
        let parse = |extra: &[&str]| {
            let mut args = vec!["eptrace", "convert", "-f", "collapsed"];
            args.extend_from_slice(extra);
            args.push("t.nettrace");
            match Cli::try_parse_from(args).unwrap().into_action().unwrap() {
                Action::Convert(c) => c.async_stacks,
                other => panic!("parsed as {other:?}"),
            }
        };
        assert!(parse(&[]));
        assert!(!parse(&["--no-async-stacks"]));
    }

    #[test]
    fn from_after_to_is_a_usage_error() {
        let cli =
            Cli::try_parse_from(["eptrace", "dump", "--from", "5", "--to", "1", "x"]).unwrap();
        let err = cli.into_action().unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }
}
