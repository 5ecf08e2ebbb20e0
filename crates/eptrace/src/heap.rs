//! `eptrace heap`: a Rust program's live heap, from the allocation profiler's sampled live
//! set, taken on request and read back per allocation site.
//!
//! Collecting is [`eventpipe_client::capture::heap`]'s; the snapshot file is that
//! session's nettrace.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Result};
pub(crate) use eventpipe_client::capture::heap::CaptureOptions;
use eventpipe_client::capture::heap::{capture, check, summary};
use eventpipe_heap::live_heap::{
    diff_live_heaps, Grouping, LiveHeap, LiveHeapBuilder, SiteGrowth, ALLOCATION_PROVIDER,
};
use eventpipe_insight::{ProfileBuilder, SampleSelection};

use crate::numbers::{signed, thousands};
use crate::stream_file::{CollectConfig, ConvertConfig, DiffConfig, ReportConfig};

pub(crate) fn do_collect(config: &CollectConfig<CaptureOptions>) -> Result<()> {
    crate::stream_file::do_collect(config, "heap", ".heap.nettrace", capture, summary)
}

/// Reads a snapshot file.
fn load(path: &Path, grouping: Grouping) -> Result<LiveHeap> {
    let mut builder = LiveHeapBuilder::new().grouping(grouping);
    let lost = crate::stream_file::read_file(path, |event| {
        builder.observe(event);
        Ok(())
    })?;
    let heap = builder.finish();
    if heap.samples == 0 && !heap.complete {
        bail!(
            "no heap snapshot in {} (no LiveAllocation or HeapSnapshot events of {ALLOCATION_PROVIDER})",
            path.display()
        );
    }
    check(&heap, lost, path)?;
    Ok(heap)
}

pub(crate) fn do_report(config: &ReportConfig) -> Result<()> {
    let grouping = if config.by_caller {
        Grouping::Caller
    } else {
        Grouping::Site
    };
    let heap = load(&config.file, grouping)?;
    if config.json {
        return crate::print_json(&heap);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "Live heap (snapshot {}, one sample per {} bytes allocated on average): about {} bytes \
         ± {} (95%) in about {} allocations, from {} samples",
        heap.snapshot,
        heap.sample_interval,
        thousands(heap.bytes),
        thousands(heap.bytes_error),
        thousands(heap.count),
        heap.samples
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:>15}  {:>13}  {:>10}  {:>7}  {}",
        "Live bytes",
        "± 95%",
        "Count",
        "Samples",
        if config.by_caller {
            "Caller in the program (its site when the program allocated itself)"
        } else {
            "Site  <- its caller in the program, when the site is a library's"
        }
    )?;
    for row in heap.sites.iter().take(config.top) {
        let caller = row
            .caller
            .as_ref()
            .map(|c| format!("  <- {}", c.label()))
            .unwrap_or_default();
        writeln!(
            out,
            "{:>15}  {:>13}  {:>10}  {:>7}  {}{caller}",
            thousands(row.bytes),
            thousands(row.bytes_error),
            thousands(row.count),
            row.samples,
            row.site.label()
        )?;
    }
    if heap.sites.len() > config.top {
        writeln!(
            out,
            "  ... and {} more sites (--top N)",
            heap.sites.len() - config.top
        )?;
    }
    for note in &heap.notes {
        writeln!(out, "note: {note}")?;
    }
    Ok(())
}

pub(crate) fn do_diff(config: &DiffConfig) -> Result<()> {
    let old = load(&config.old, Grouping::Site)?;
    let new = load(&config.new, Grouping::Site)?;
    let rows = diff_live_heaps(&old, &new);
    if config.json {
        return crate::print_json(&rows);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "Live heap: about {} -> {} bytes ({})",
        thousands(old.bytes),
        thousands(new.bytes),
        signed(i128::from(new.bytes) - i128::from(old.bytes))
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:>15}  {:>13}  {:>10}  Site (most growth first)",
        "Live bytes Δ", "± 95%", "Count Δ"
    )?;
    // A diff lists what changed; the JSON keeps every site of either snapshot.
    let (changed, unchanged): (Vec<&SiteGrowth>, Vec<&SiteGrowth>) =
        rows.iter().partition(|row| !row.is_unchanged());
    for row in changed.iter().take(config.top) {
        writeln!(
            out,
            "{:>15}  {:>13}  {:>10}  {}",
            signed(row.delta()),
            thousands(row.error),
            signed(i128::from(row.count.1) - i128::from(row.count.0)),
            row.site.label()
        )?;
    }
    crate::stream_file::write_diff_tail(
        &mut out,
        changed.len(),
        unchanged.len(),
        config.top,
        "site",
    )?;
    Ok(())
}

pub(crate) fn do_convert(config: &ConvertConfig) -> Result<()> {
    let mut builder = ProfileBuilder::new(SampleSelection::LiveHeap);
    crate::stream_file::read_file(&config.file, |event| {
        builder.observe(event);
        Ok(())
    })?;
    let profile = builder.finish().profile;
    if profile.samples.is_empty() {
        bail!(
            "no heap snapshot in {}: nothing to convert",
            config.file.display()
        );
    }
    crate::stream_file::write_profiles(
        &config.file,
        &profile,
        &config.formats,
        config.output.as_ref(),
        "live heap",
    )
}
