//! `eptrace counters`: live counters of a .NET or Rust process, as `dotnet-counters` shows
//! them, on the same protocol.
//!
//! A session enables each named provider with `EventCounterIntervalSec=N` (the
//! EventCounters every .NET runtime and this project's runtime publish) and, for .NET
//! targets, `System.Diagnostics.Metrics` listening to the same names (Meters, .NET 6+).
//! Values are decoded as they stream in ([`eventpipe_counters`]); `monitor` shows
//! them refreshing in place, `collect` writes them as `dotnet-counters collect` does (CSV or
//! JSON), and `report` reads them back from a trace file.

pub(crate) mod export;
mod screen;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use eventpipe_client::capture::counters::run;
pub(crate) use eventpipe_client::capture::counters::{parse_counter_specs, SessionConfig};
use eventpipe_client::TargetSpec;
use eventpipe_counters::{decode_counter_event, CounterEvent, CounterValue};
use nettrace::TraceReader;

pub(crate) use export::ExportFormat;

/// `eptrace counters monitor`.
#[derive(Debug)]
pub(crate) struct MonitorConfig {
    pub(crate) session: SessionConfig,
}

/// `eptrace counters collect`.
#[derive(Debug)]
pub(crate) struct CollectConfig {
    pub(crate) session: SessionConfig,
    pub(crate) format: ExportFormat,
    pub(crate) output: PathBuf,
}

/// `eptrace counters report`.
#[derive(Debug)]
pub(crate) struct ReportConfig {
    pub(crate) file: PathBuf,
    pub(crate) json: bool,
}

/// A flag raised by Ctrl-C (and SIGTERM).
fn stop_flag() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    let on_signal = Arc::clone(&flag);
    ctrlc::set_handler(move || on_signal.store(true, Ordering::Relaxed))
        .context("installing the Ctrl-C handler")?;
    Ok(flag)
}

pub(crate) fn do_monitor(config: &MonitorConfig) -> Result<()> {
    let stop = stop_flag()?;
    let mut screen = screen::Screen::new(config.session.refresh_sec)?;
    let result = run(&config.session, &mut screen, &stop).map_err(anyhow::Error::from);
    screen.close();
    result
}

pub(crate) fn do_collect(config: &CollectConfig) -> Result<()> {
    let stop = stop_flag()?;
    let mut writer = export::Writer::create(
        &config.output,
        config.format,
        &target_label(&config.session.target),
    )?;
    let result = run(&config.session, &mut writer, &stop).map_err(anyhow::Error::from);
    let values = writer.finish()?;
    if result.is_err() && values == 0 {
        // Nothing was collected: leave no empty file behind.
        let _ = std::fs::remove_file(&config.output);
        return result;
    }
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "{} values written to {}",
        values,
        config.output.display()
    );
    result
}

fn target_label(target: &TargetSpec) -> String {
    match target {
        TargetSpec::Pid(pid) => format!("pid {pid}"),
        TargetSpec::Name(name) => name.clone(),
        TargetSpec::Launch(argv) => argv
            .first()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

/// One counter's values over a trace.
#[derive(Debug, serde::Serialize)]
struct Summary {
    provider: String,
    name: String,
    display: String,
    kind: &'static str,
    values: u64,
    last: f64,
    min: f64,
    max: f64,
    mean: f64,
}

pub(crate) fn do_report(config: &ReportConfig) -> Result<()> {
    let bytes = std::fs::read(&config.file)
        .with_context(|| format!("cannot read {}", config.file.display()))?;
    let mut reader = TraceReader::from_slice(&bytes)
        .with_context(|| format!("cannot read {}", config.file.display()))?;
    let mut by_counter: BTreeMap<(String, String), (Summary, f64)> = BTreeMap::new();
    let mut problems = Vec::new();
    while let Some(event) = reader
        .next_event()
        .with_context(|| format!("cannot read {}", config.file.display()))?
    {
        match decode_counter_event(&event, None) {
            Some(CounterEvent::Value(v)) => {
                let key = (v.provider.clone(), format!("{}{}", v.name, tag_suffix(&v)));
                let entry = by_counter.entry(key).or_insert_with(|| {
                    (
                        Summary {
                            provider: v.provider.clone(),
                            name: v.name.clone(),
                            display: v.display(),
                            kind: v.kind.dotnet_name(),
                            values: 0,
                            last: v.value,
                            min: f64::INFINITY,
                            max: f64::NEG_INFINITY,
                            mean: 0.0,
                        },
                        0.0,
                    )
                });
                let (s, sum) = entry;
                s.values += 1;
                s.last = v.value;
                s.min = s.min.min(v.value);
                s.max = s.max.max(v.value);
                *sum += v.value;
                s.mean = *sum / s.values as f64;
            }
            Some(CounterEvent::Problem(p)) => problems.push(p),
            _ => {}
        }
    }
    let rows: Vec<Summary> = by_counter.into_values().map(|(s, _)| s).collect();
    if rows.is_empty() && problems.is_empty() {
        bail!(
            "no counter values in {}: collect them with `eptrace counters collect`, or a \
             session whose providers have EventCounterIntervalSec=N",
            config.file.display()
        );
    }
    let mut out = std::io::stdout().lock();
    if config.json {
        serde_json::to_writer_pretty(
            &mut out,
            &serde_json::json!({"counters": rows, "problems": problems}),
        )?;
        writeln!(out)?;
        return Ok(());
    }
    let mut provider = "";
    for r in &rows {
        if r.provider != provider {
            writeln!(out, "[{}]", r.provider)?;
            provider = &r.provider;
        }
        writeln!(
            out,
            "    {:<50} {:>7} values  last {:>14}  min {:>14}  max {:>14}  mean {:>14}",
            r.display,
            r.values,
            screen::format_value(r.last),
            screen::format_value(r.min),
            screen::format_value(r.max),
            screen::format_value(r.mean)
        )?;
    }
    for p in &problems {
        writeln!(out, "note: {p}")?;
    }
    Ok(())
}

/// ` [k=v;k=v]` for a value with tags, as `dotnet-counters` prints them.
fn tag_suffix(v: &CounterValue) -> String {
    if v.tags.is_empty() {
        String::new()
    } else {
        format!("[{}]", v.tags.replace(',', ";"))
    }
}
