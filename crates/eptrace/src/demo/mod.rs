//! `eptrace demo`: the whole job in one command. It starts the bundled workload
//! ([`workload`]) as a child process, attaches to it over the diagnostics IPC from its
//! first event, collects a few seconds of CPU samples, `tracing` spans and events and the
//! async profiler's records,
//! writes the trace, a flame graph, a speedscope profile and a Chrome/Perfetto timeline,
//! and prints the report.

pub(crate) mod workload;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use eventpipe_client::request::{Preset, TraceRequest};

use crate::collect;
use crate::convert::ConvertFormat;
use crate::input::InputSpec;
use crate::report;

/// What `demo` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// How long to trace.
    pub(crate) seconds: f64,
    /// Where the files go.
    pub(crate) out_dir: PathBuf,
}

/// Runs `eptrace demo`.
pub(crate) fn do_demo(config: &Config) -> Result<()> {
    let exe = std::env::current_exe().context("finding eptrace's own executable")?;
    std::fs::create_dir_all(&config.out_dir)
        .with_context(|| format!("creating {}", config.out_dir.display()))?;
    let trace = config.out_dir.join("trace.nettrace");
    println!(
        "Starting the demo workload (`{} demo-workload`) and tracing it for {} s \
         (CPU samples at 1 kHz, tracing spans and events, async futures)...",
        exe.display(),
        config.seconds
    );
    collect::do_collect(&collect::Config {
        target: eventpipe_client::TargetSpec::Launch(vec![
            exe.into_os_string(),
            "demo-workload".into(),
            // The workload outlives the session; collect ends it afterwards.
            "--seconds".into(),
            format!("{}", config.seconds + 30.0).into(),
        ]),
        // The async profiler too: the workload's async worker is instrumented for it.
        request: TraceRequest {
            presets: vec![Preset::CpuSampling, Preset::Tracing],
            providers: vec!["EventPipeRs-AsyncProfiler:0:Informational".into()],
            buffer_mb: 64,
            ..TraceRequest::default()
        },
        duration: Some(Duration::from_secs_f64(config.seconds)),
        output: Some(trace.clone()),
        convert: vec![
            ConvertFormat::Flamegraph,
            ConvertFormat::Speedscope,
            ConvertFormat::Chrome,
        ],
    })?;
    println!();
    report::do_report(&report::Config {
        input: InputSpec::Path(trace.clone()),
        json: false,
        top: 10,
        cut: crate::cut::CutTraces::Refuse,
    })?;
    println!(
        "\nOpen {} in a browser, {} at https://www.speedscope.app and {} at \
         https://ui.perfetto.dev.",
        crate::convert::output_path(&trace, ConvertFormat::Flamegraph).display(),
        crate::convert::output_path(&trace, ConvertFormat::Speedscope).display(),
        crate::convert::output_path(&trace, ConvertFormat::Chrome).display(),
    );
    Ok(())
}
