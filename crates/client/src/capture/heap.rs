//! A Rust program's live heap, from the allocation profiler's sampled live set.
//!
//! A Block-mode session (`CollectTracing6`) enabling `EventPipeRs-Allocations` with
//! `Snapshot=1` asks the program for its live set; the profiler writes it once the session
//! streams and ends it with a `HeapSnapshot` event carrying the count it wrote, so the
//! snapshot is known to be whole; then the session is stopped (its rundown lists the
//! modules, for symbols). Block mode paces the snapshot through any budget: nothing is
//! lost. The snapshot file is that session's nettrace.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use eventpipe_heap::live_heap::{LiveHeap, LiveHeapBuilder, ALLOCATION_PROVIDER};
use eventpipe_ipc::command::CollectTracing;
use eventpipe_ipc::ProviderRequest;

use super::{read_into_file, CaptureError, Report, SessionReader};
use crate::Target;

/// What a program needs for `eptrace heap`, said when it does not answer.
pub(crate) const WHAT_IT_NEEDS: &str = "a program answers heap snapshots when it installs \
    `#[global_allocator] static A: eventpipe_profiler::alloc::ProfiledAllocator<std::alloc::System> = \
    ProfiledAllocator::new(std::alloc::System);`, calls `eventpipe_profiler::alloc::register()` \
    and tracks its heap (`eventpipe_profiler::alloc::track_heap(interval)`, or \
    EVENTPIPE_HEAP_TRACKING=1 in its environment)";

/// How a heap snapshot is taken.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// How long the program has to send its whole snapshot.
    pub timeout: Duration,
    /// The session's buffer, in MB (Block mode: it paces, it does not drop).
    pub buffer_mb: u32,
}

impl Default for CaptureOptions {
    /// 10 s and a 16 MB buffer.
    fn default() -> Self {
        CaptureOptions {
            timeout: Duration::from_secs(10),
            buffer_mb: 16,
        }
    }
}

/// What a snapshot holds, in one clause.
pub fn summary(heap: &LiveHeap) -> String {
    format!(
        "snapshot {}: {} live allocations sampled, about {} live bytes ± {} in about {} \
         allocations; Block mode, nothing lost",
        heap.snapshot, heap.samples, heap.bytes, heap.bytes_error, heap.count,
    )
}

/// Asks `target` for its live heap and writes the snapshot session into `file` (named
/// `path` in messages), telling `report` how far it is; `cancel` ends it early.
///
/// # Errors
/// The target is not a Rust program using eventpipe, the session could not start, the
/// program sent no whole snapshot in time, or the capture was cancelled.
pub fn capture(
    target: &mut Target,
    file: File,
    path: &Path,
    options: &CaptureOptions,
    cancel: &AtomicBool,
    report: &mut dyn FnMut(Report<'_>),
) -> Result<LiveHeap, CaptureError> {
    let began = Instant::now();
    let runtime = crate::Runtime::of(&target.process_info());
    if !runtime.is_rust() {
        return Err(CaptureError::WrongRuntime {
            pid: target.pid(),
            what: "is not a Rust program using eventpipe: `eptrace heap` reads the \
                   allocation profiler's live set; for a .NET process's heap use `eptrace gcdump`",
        });
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
        .map_err(|source| CaptureError::Start {
            what: "heap snapshot",
            source,
        })?;
    let reader = SessionReader::start(stream, file, "heap-reader", read_snapshot)?;
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
            report(Report::Progress(&format!(
                "{:5.1}s  {} live allocations received",
                began.elapsed().as_secs_f64(),
                shared.samples.load(Ordering::Relaxed)
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (heap, lost) = reader.join()?;
    if cancel.load(Ordering::Relaxed) {
        return Err(CaptureError::Cancelled);
    }
    if gave_up || heap.samples == 0 && heap.sample_interval == 0 && !heap.complete {
        return Err(CaptureError::NoHeapSnapshot {
            pid: target.pid(),
            seconds: options.timeout.as_secs_f64(),
        });
    }
    check(&heap, lost, path)?;
    Ok(heap)
}

/// A snapshot is usable when the program tracked a heap, every allocation it listed
/// arrived, and the trace lost nothing; `path` names the snapshot file.
///
/// # Errors
/// [`CaptureError::NoHeapTracked`] or [`CaptureError::IncompleteHeap`].
pub fn check(heap: &LiveHeap, lost: u64, path: &Path) -> Result<(), CaptureError> {
    if heap.sample_interval == 0 && heap.samples == 0 && heap.complete {
        return Err(CaptureError::NoHeapTracked {
            path: path.to_owned(),
        });
    }
    if !heap.complete || lost > 0 {
        return Err(CaptureError::IncompleteHeap {
            path: path.to_owned(),
            samples: heap.samples,
            marker_missing: !heap.complete,
            lost,
        });
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
) -> Result<(LiveHeap, u64), CaptureError> {
    let mut builder = LiveHeapBuilder::new();
    let lost = read_into_file(stream, file, "the heap snapshot stream", |event| {
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
