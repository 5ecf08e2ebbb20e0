//! The runtime's news as it happens, for a watcher attached to a live .NET process (the
//! agent's rules and `/metrics`): each GC once it is complete, with its pause; each
//! exception thrown; each thread pool adjustment for starvation.
//!
//! The definitions are the analysis's own ([`gc`], [`exceptions`],
//! [`threadpool`]), fed the same events; what differs is that nothing
//! is kept once reported, so a watch can last as long as its target.

use nettrace::Event;

use crate::fields::Fields;
use crate::gc::{Gc, GcAnalyzer};
use crate::{exceptions, gc, threadpool, RUNTIME_PROVIDER};

/// The runtime keywords a watch needs: GC (0x1), Exception (0x8000), Threading (0x10000).
pub const RUNTIME_KEYWORDS: u64 = 0x1 | 0x8000 | 0x10000;

/// The level a watch needs: Informational, which leaves out the per-allocation
/// `GC/AllocationTick` and the thread pool's per-item events (Verbose).
pub const RUNTIME_LEVEL: u32 = 4;

/// A GC, complete: its row's numbers a watcher acts on (the definitions are [`Gc`]'s).
#[derive(Debug, Clone, PartialEq)]
pub struct CompletedGc {
    /// The runtime's GC number.
    pub number: u64,
    /// The generation collected.
    pub generation: u32,
    /// `NonConcurrent`, `Background` or `Foreground`.
    pub kind: &'static str,
    /// Why it ran (`AllocSmall`, `Induced`, ...).
    pub reason: &'static str,
    /// How long the program was paused for it, ms.
    pub pause_ms: Option<f64>,
    /// Of that, restarting the program's threads, ms.
    pub restart_ms: Option<f64>,
    /// Heap size after it, bytes.
    pub heap_after_bytes: Option<u64>,
}

impl From<&Gc> for CompletedGc {
    fn from(gc: &Gc) -> CompletedGc {
        CompletedGc {
            number: gc.number,
            generation: gc.generation,
            kind: gc.kind,
            reason: gc.reason,
            pause_ms: gc.pause_ms,
            restart_ms: gc.restart_ms,
            heap_after_bytes: gc.heap_after_bytes,
        }
    }
}

impl CompletedGc {
    /// The pause as the runtime accounts for it (`GC.GetTotalPauseDuration`, the
    /// `System.Runtime` counter `time-paused-by-gc`): to the GC's end, before the
    /// program's threads restart.
    pub fn runtime_pause_ms(&self) -> Option<f64> {
        self.pause_ms
            .map(|pause| pause - self.restart_ms.unwrap_or(0.0))
    }
}

/// The GC a program is suspended for, now.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GcInProgress {
    /// The runtime's GC number.
    pub number: u64,
    /// The generation it collects.
    pub generation: u32,
    /// `NonConcurrent`, `Background` (its final mark) or `Foreground`.
    pub kind: &'static str,
    /// Why it runs (`AllocSmall`, `Induced`, ...).
    pub reason: &'static str,
    /// The thread running it: the one that suspended the program.
    pub thread_id: u64,
    /// When it started, ms from the trace's start.
    pub start_ms: f64,
}

/// One piece of news.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RuntimeNews {
    /// A GC completed (its pause is over and its heap sizes are known).
    Gc(CompletedGc),
    /// An exception was thrown.
    Exception {
        /// Its type, e.g. `System.TimeoutException`.
        exception_type: String,
    },
    /// The thread pool added a worker because queued work made no progress (hill
    /// climbing's reason 6, Starvation).
    Starvation {
        /// The worker count it set.
        new_worker_count: u64,
    },
}

/// Reads a live stream's runtime events, in time order, and tells what happened.
#[derive(Debug, Default)]
pub struct RuntimeWatch {
    gc: GcAnalyzer,
}

impl RuntimeWatch {
    /// A watch that has seen nothing.
    pub fn new() -> RuntimeWatch {
        RuntimeWatch::default()
    }

    /// The GC rows held now: the ones still open and the one before them (what bounds a
    /// watch's memory).
    pub fn held(&self) -> usize {
        self.gc.held()
    }

    /// The GC the program is suspended for as of the events seen so far, if it is.
    pub fn suspended_for_gc(&self) -> Option<GcInProgress> {
        self.gc.suspended_for().map(|(gc, thread_id)| GcInProgress {
            number: gc.number,
            generation: gc.generation,
            kind: gc.kind,
            reason: gc.reason,
            thread_id,
            start_ms: gc.start_ms,
        })
    }

    /// Takes the stream's next event (in time order: a GC's events come from several
    /// threads) and appends what it completes to `news`.
    pub fn observe(&mut self, event: &Event<'_>, news: &mut Vec<RuntimeNews>) {
        if event.metadata.provider != RUNTIME_PROVIDER {
            return;
        }
        let id = event.metadata.event_id;
        match id {
            gc::id::START
            | gc::id::END
            | gc::id::RESTART_EE_STOP
            | gc::id::RESTART_EE_START
            | gc::id::HEAP_STATS
            | gc::id::SUSPEND_EE_STOP
            | gc::id::SUSPEND_EE_START => {
                let fields = Fields::of(event);
                self.gc
                    .observe(id, event.timestamp_msec(), event.thread_id(), &fields);
                news.extend(
                    self.gc
                        .take_completed()
                        .into_iter()
                        .map(|gc| RuntimeNews::Gc(CompletedGc::from(&gc))),
                );
            }
            exceptions::id::THROWN => news.push(RuntimeNews::Exception {
                exception_type: Fields::of(event).text("ExceptionType").unwrap_or_default(),
            }),
            threadpool::id::ADJUSTMENT => {
                let fields = Fields::of(event);
                if fields.u64("Reason") == Some(threadpool::STARVATION) {
                    news.push(RuntimeNews::Starvation {
                        new_worker_count: fields.u64("NewWorkerThreadCount").unwrap_or(0),
                    });
                }
            }
            _ => {}
        }
    }
}
