//! `eptrace gcdump`: a .NET heap snapshot, collected as `dotnet-gcdump` collects it, and
//! read back: the heap per type with retained bytes, the difference of two snapshots, and
//! the retention view in the profile formats.
//!
//! Collecting is [`eventpipe_client::capture::gcdump`]'s; the snapshot file is the dump
//! session's nettrace, which `dotnet-gcdump convert` and PerfView also read.

use std::io::{IsTerminal, Write};
use std::path::Path;

use anyhow::{Context, Result};
pub(crate) use eventpipe_client::capture::gcdump::CaptureOptions;
use eventpipe_client::capture::gcdump::{accept, capture, Captured};
use eventpipe_heap::dominators;
use eventpipe_heap::gcdump::{
    diff_reports, heap_report, GcDump, GcDumpBuilder, HeapReport, TypeDiff,
};
use eventpipe_insight::retention::retention_profile;

use crate::numbers::{signed, thousands};
use crate::stream_file::{CollectConfig, ConvertConfig, DiffConfig, ReportConfig};

pub(crate) fn do_collect(config: &CollectConfig<CaptureOptions>) -> Result<()> {
    crate::stream_file::do_collect(
        config,
        "gcdump",
        ".gcdump.nettrace",
        capture,
        Captured::summary,
    )
}

/// Reads a snapshot file into a dump.
fn load(path: &Path, allow_partial: bool) -> Result<GcDump> {
    let mut builder = GcDumpBuilder::new();
    let lost = crate::stream_file::read_file(path, |event| {
        builder
            .observe(event)
            .with_context(|| format!("reading the heap dump in {}", path.display()))?;
        Ok(())
    })?;
    let interactive = std::io::stderr().is_terminal();
    Ok(accept(
        builder.finish(lost),
        allow_partial,
        path,
        &mut |report| crate::progress::say(report, interactive, &mut false),
    )?)
}

fn report_of(dump: &GcDump) -> HeapReport {
    let doms = dominators(&dump.graph);
    heap_report(&dump.graph, &doms, dump.first_object, dump.references)
}

pub(crate) fn do_report(config: &ReportConfig) -> Result<()> {
    let dump = load(&config.file, config.allow_partial)?;
    let report = report_of(&dump);
    if config.json {
        return crate::print_json(&report);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{:>15}  GC Heap bytes", thousands(report.bytes))?;
    writeln!(out, "{:>15}  GC Heap objects", thousands(report.objects))?;
    writeln!(
        out,
        "{:>15}  Total references",
        thousands(report.references)
    )?;
    if report.unreachable > 0 {
        writeln!(
            out,
            "{:>15}  Objects no root reaches",
            thousands(report.unreachable)
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:>15}  {:>8}  {:>15}  Type",
        "Object Bytes", "Count", "Retained Bytes"
    )?;
    for row in report.types.iter().take(config.top) {
        writeln!(
            out,
            "{:>15}  {:>8}  {:>15}  {}",
            thousands(row.bytes),
            thousands(row.count),
            thousands(row.retained),
            row.name
        )?;
    }
    if report.types.len() > config.top {
        writeln!(
            out,
            "  ... and {} more types (--top N)",
            report.types.len() - config.top
        )?;
    }
    Ok(())
}

pub(crate) fn do_diff(config: &DiffConfig) -> Result<()> {
    let old = report_of(&load(&config.old, config.allow_partial)?);
    let new = report_of(&load(&config.new, config.allow_partial)?);
    let rows = diff_reports(&old, &new);
    if config.json {
        return crate::print_json(&rows);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "GC heap: {} -> {} bytes ({}), {} -> {} objects",
        thousands(old.bytes),
        thousands(new.bytes),
        signed(i128::from(new.bytes) - i128::from(old.bytes)),
        thousands(old.objects),
        thousands(new.objects)
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:>15}  {:>15}  {:>10}  Type (largest growth in retained bytes first)",
        "Retained Δ", "Bytes Δ", "Count Δ"
    )?;
    // A diff lists what changed; the JSON keeps every type of either heap.
    let (changed, unchanged): (Vec<&TypeDiff>, Vec<&TypeDiff>) =
        rows.iter().partition(|row| !row.is_unchanged());
    for row in changed.iter().take(config.top) {
        writeln!(
            out,
            "{:>15}  {:>15}  {:>10}  {}",
            signed(row.retained_delta()),
            signed(row.bytes_delta()),
            signed(row.count_delta()),
            row.name
        )?;
    }
    crate::stream_file::write_diff_tail(
        &mut out,
        changed.len(),
        unchanged.len(),
        config.top,
        "type",
    )?;
    Ok(())
}

pub(crate) fn do_convert(config: &ConvertConfig) -> Result<()> {
    let dump = load(&config.file, config.allow_partial)?;
    let doms = dominators(&dump.graph);
    let profile = retention_profile(&dump.graph, &doms, dump.first_object);
    crate::stream_file::write_profiles(
        &config.file,
        &profile,
        &config.formats,
        config.output.as_ref(),
        "retention view",
    )
}
