//! `eptrace heap`: a Rust program's live heap, from the allocation profiler's sampled live
//! set, taken on request and read back per allocation site.
//!
//! Collecting: a Block-mode session (`CollectTracing6`) enabling `EventPipeRs-Allocations`
//! with `Snapshot=1` asks the program for its live set; the profiler writes it once the
//! session streams and ends it with a `HeapSnapshot` event carrying the count it wrote, so
//! the snapshot is known to be whole; then the session is stopped (its rundown lists the
//! modules, for symbols). Block mode paces the snapshot through any budget: nothing is lost.
//! The snapshot file is that session's nettrace.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use eventpipe_insight::builder::ALLOCATION_PROVIDER;
use eventpipe_insight::live_heap::{
    diff_live_heaps, Grouping, LiveHeap, LiveHeapBuilder, SiteGrowth,
};
use eventpipe_insight::{ProfileBuilder, SampleSelection};
use eventpipe_ipc::command::CollectTracing;
use eventpipe_ipc::ProviderRequest;

use crate::numbers::{signed, thousands};
use crate::stream_file::{CollectConfig, ConvertConfig, DiffConfig, ReportConfig, SessionReader};
use eventpipe_client::Target;

/// What a program needs for `eptrace heap`, said when it does not answer.
const WHAT_IT_NEEDS: &str = "a program answers heap snapshots when it installs \
    `#[global_allocator] static A: eventpipe_profiler::alloc::ProfiledAllocator<std::alloc::System> = \
    ProfiledAllocator::new(std::alloc::System);`, calls `eventpipe_profiler::alloc::register()` \
    and tracks its heap (`eventpipe_profiler::alloc::track_heap(interval)`, or \
    EVENTPIPE_HEAP_TRACKING=1 in its environment)";

pub(crate) fn do_collect(config: &CollectConfig<CaptureOptions>) -> Result<()> {
    crate::stream_file::do_collect(config, "heap", ".heap.nettrace", capture, summary)
}

/// How a heap snapshot is taken.
#[derive(Debug, Clone)]
pub(crate) struct CaptureOptions {
    pub(crate) timeout: Duration,
    pub(crate) buffer_mb: u32,
}

/// What a snapshot holds, in one clause.
pub(crate) fn summary(heap: &LiveHeap) -> String {
    format!(
        "snapshot {}: {} live allocations sampled, about {} live bytes ± {} in about {} \
         allocations; Block mode, nothing lost",
        heap.snapshot, heap.samples, heap.bytes, heap.bytes_error, heap.count,
    )
}

/// Asks `target` for its live heap and writes the snapshot session into `file` (named
/// `path` in messages), telling `report` how far it is; `cancel` ends it early.
pub(crate) fn capture(
    target: &mut Target,
    file: File,
    path: &Path,
    options: &CaptureOptions,
    cancel: &AtomicBool,
    report: &mut dyn FnMut(crate::progress::Report<'_>),
) -> Result<LiveHeap> {
    let began = Instant::now();
    let runtime = eventpipe_client::Runtime::of(&target.process_info());
    if !runtime.is_rust() {
        bail!(
            "process {} is not a Rust program using eventpipe: `eptrace heap` reads the \
             allocation profiler's live set; for a .NET process's heap use `eptrace gcdump`",
            target.pid()
        );
    }
    let request = CollectTracing {
        buffering_mode: 1,
        circular_buffer_mb: options.buffer_mb,
        stackwalk: false,
        ..CollectTracing::new(
            6,
            vec![ProviderRequest {
                keywords: 0,
                level: 4,
                name: ALLOCATION_PROVIDER.to_owned(),
                arguments: "Snapshot=1".to_owned(),
                filter: None,
            }],
        )
    };
    let stream = target
        .collect(&request)
        .context("starting the heap snapshot session")?;
    let reader = SessionReader::start(stream, file, "eptrace-heap", read_snapshot)?;
    let shared = &reader.shared;
    let mut last_line = Instant::now() - Duration::from_secs(1);
    let mut stopped: Option<Instant> = None;
    let mut gave_up = false;
    while !reader.is_finished() {
        match stopped {
            Some(at) => reader.cut_after_grace(at),
            None if shared.ended.load(Ordering::Acquire) => {
                stopped = Some(Instant::now());
                reader.stop_whole(target, report);
            }
            None => {}
        }
        if stopped.is_none()
            && (began.elapsed() > options.timeout || cancel.load(Ordering::Relaxed))
        {
            gave_up = true;
            reader.give_up(target, report);
            break;
        }
        if last_line.elapsed() >= Duration::from_millis(250) {
            last_line = Instant::now();
            report(crate::progress::Report::Progress(&format!(
                "{:5.1}s  {} live allocations received",
                began.elapsed().as_secs_f64(),
                shared.samples.load(Ordering::Relaxed)
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (heap, lost) = reader.join()?;
    if cancel.load(Ordering::Relaxed) {
        bail!("cancelled before the snapshot was complete");
    }
    if gave_up || heap.samples == 0 && heap.sample_interval == 0 && !heap.complete {
        bail!(
            "process {} sent no heap snapshot within {:.0} s; {WHAT_IT_NEEDS}",
            target.pid(),
            options.timeout.as_secs_f64()
        );
    }
    check(&heap, lost, path)?;
    Ok(heap)
}

/// A snapshot is usable when the program tracked a heap, every allocation it listed
/// arrived, and the trace lost nothing.
fn check(heap: &LiveHeap, lost: u64, path: &Path) -> Result<()> {
    if heap.sample_interval == 0 && heap.samples == 0 && heap.complete {
        bail!(
            "the program in {} tracks no heap, so its snapshot is empty; {WHAT_IT_NEEDS}",
            path.display()
        );
    }
    if !heap.complete || lost > 0 {
        bail!(
            "{} holds an incomplete heap snapshot ({} live allocations read{}{}); it is not \
             a smaller heap",
            path.display(),
            heap.samples,
            if heap.complete {
                String::new()
            } else {
                ", the end marker missing or its count different".to_owned()
            },
            if lost > 0 {
                format!(", {lost} events lost")
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

#[derive(Debug, Default)]
struct Shared {
    /// Release: set once the snapshot's end marker has been read.
    ended: AtomicBool,
    samples: AtomicU64,
}

fn read_snapshot(
    stream: eventpipe_ipc::TraceStream,
    file: File,
    shared: &Shared,
) -> Result<(LiveHeap, u64)> {
    let mut builder = LiveHeapBuilder::new();
    let lost =
        crate::stream_file::read_into_file(stream, file, "the heap snapshot stream", |event| {
            builder.observe(event);
            shared
                .samples
                .store(builder.samples() as u64, Ordering::Relaxed);
            if builder.has_ended() {
                shared.ended.store(true, Ordering::Release);
            }
            Ok(())
        })?;
    Ok((builder.finish(), lost))
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
