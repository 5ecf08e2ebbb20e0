//! The GC analysis: one row per garbage collection, and the totals PerfView's GCStats view
//! shows, from the runtime's `GC/*` events (keyword 0x1).
//!
//! Definitions are TraceEvent's (microsoft/perfview, `src/TraceEvent/Computers/
//! TraceManagedProcess.cs`: `TraceGC`, the GC callbacks of `SetupCallbacks`, `GCStats`):
//! * only suspensions for a GC count: `GC/SuspendEEStart` reason 1 (SuspendForGC) or 6
//!   (SuspendForGCPrep, a background GC's final mark), ended by the suspending thread's
//!   own `SuspendEEStop` and `RestartEEStop`; other suspensions (reason 0, tiered
//!   compilation's, on their own thread, and overlapping) are ignored;
//! * a GC opens at `GC/Start` (`Depth` is its generation, with `Reason` and `Type`); its
//!   pause runs from that suspension's start to the `GC/RestartEEStop` that ends it
//!   (`PauseDurationMSec`), its suspension to the `GC/SuspendEEStop`
//!   (`SuspendDurationMSec`), its restart from the `GC/RestartEEStart` (not TraceEvent's:
//!   the runtime's own accounting, `GC.GetTotalPauseDuration`, stops before it, and a
//!   loaded machine can preempt the GC thread there as it wakes the others); a blocking GC is complete at that restart once its
//!   `GC/HeapStats` has come, a background GC (`Type` 1) at its `GC/HeapStats`;
//! * a background GC's pause is its initial suspension plus each SuspendForGCPrep pause
//!   (`AddConcurrentPauseTime`); a gen0/1 GC opened at its start pauses from its own
//!   `GC/Start`; foreground GCs (`Type` 2) during it have pauses of their own;
//! * the sizes after come from `GC/HeapStats`; the size before is TraceEvent's estimate
//!   from the previous GC's (`GenSizeBeforeMB` without per-heap history);
//! * totals are over complete GCs; induced means reason 1 or 7 (`NumInduced`); the share
//!   paused is the pauses over the time from the first complete GC's pause start to the
//!   last `GC/HeapStats` (`GetGCPauseTimePercentage`'s `ProcessDuration`); the share of
//!   the whole trace is given beside it.
//!
//! Two departures, each where TraceEvent's numbers would not add up to the runtime's own
//! (`GC.GetTotalPauseDuration`):
//! * a background GC that finishes inside the suspension that started it (its
//!   `GC/HeapStats` before the `GC/RestartEEStop`) ran, in effect, as a blocking one: that
//!   restart ends its pause, where TraceEvent, having closed it at its `GC/HeapStats`,
//!   leaves it with its suspension alone;
//! * a `GC/Start` with no GC suspension before it (a trace that starts in the middle of a
//!   GC) is kept, without a pause, where TraceEvent drops it; it is never complete, so it
//!   counts in no total.

use serde::Serialize;

use crate::fields::Fields;
use crate::stats::Distribution;

/// The runtime's event ids of the `GC/*` events this section reads (its manifest).
pub mod id {
    /// `GC/Start`.
    pub const START: u32 = 1;
    /// `GC/Stop`.
    pub const END: u32 = 2;
    /// `GC/RestartEEStop`.
    pub const RESTART_EE_STOP: u32 = 3;
    /// `GC/RestartEEStart`.
    pub const RESTART_EE_START: u32 = 7;
    /// `GC/HeapStats`.
    pub const HEAP_STATS: u32 = 4;
    /// `GC/SuspendEEStop`.
    pub const SUSPEND_EE_STOP: u32 = 8;
    /// `GC/SuspendEEStart`.
    pub const SUSPEND_EE_START: u32 = 9;
    /// `GC/AllocationTick`.
    pub const ALLOCATION_TICK: u32 = 10;
}

/// One garbage collection.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Gc {
    /// The runtime's GC number (`GC.CollectionCount` counts these).
    pub number: u64,
    /// The generation collected (0, 1 or 2).
    pub generation: u32,
    /// `NonConcurrent` (blocking), `Background` or `Foreground` (a blocking ephemeral GC
    /// during a background one).
    pub kind: &'static str,
    /// Why it ran: `AllocSmall`, `Induced`, `LowMemory`, `AllocLarge`, ...
    pub reason: &'static str,
    /// When it started, in ms from the trace's start.
    pub start_ms: f64,
    /// `GC/Start` to `GC/End`; `None` when the trace ends first.
    pub duration_ms: Option<f64>,
    /// How long the program was paused for it; `None` when the trace has no suspension
    /// events around it.
    pub pause_ms: Option<f64>,
    /// The part of the pause spent suspending the program's threads.
    pub suspend_ms: Option<f64>,
    /// The part of the pause spent restarting them (`GC/RestartEEStart` to
    /// `GC/RestartEEStop`, over all of its suspensions). The runtime's own pause
    /// accounting (`GC.GetTotalPauseDuration`) stops before the restart: the pause less
    /// this is what it counts.
    pub restart_ms: Option<f64>,
    /// Heap size after the GC (all generations, from `GC/HeapStats`), bytes.
    pub heap_after_bytes: Option<u64>,
    /// Heap size before the GC, estimated from the previous GC's sizes and the allocations
    /// since (TraceEvent's `HeapSizeBeforeMB` without per-heap history), bytes.
    pub heap_before_bytes: Option<u64>,
    /// Bytes that survived the GC (promoted), from `GC/HeapStats`.
    pub promoted_bytes: Option<u64>,
    /// Generation sizes after the GC: gen0, gen1, gen2, LOH, POH (.NET 5+), bytes.
    pub generation_sizes_after: Option<[u64; 5]>,
    /// Bytes allocated since the previous GC, from `GC/AllocationTick` (each tick stands
    /// for about 100 KB allocated), taken at its `GC/HeapStats`.
    pub allocated_since_previous_bytes: u64,
}

impl Gc {
    /// Whether it stopped the program for its whole run: not a background GC.
    pub fn is_blocking(&self) -> bool {
        self.kind != "Background"
    }

    /// Whether the program asked for it (`GC.Collect`): reason Induced or
    /// InducedNotForced, as TraceEvent's `NumInduced` counts.
    pub fn is_induced(&self) -> bool {
        matches!(self.reason, "Induced" | "InducedNotForced")
    }
}

/// Totals for one generation.
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct GenerationSummary {
    /// The generation.
    pub generation: u32,
    /// GCs of it.
    pub count: u64,
    /// Of those, induced.
    pub induced: u64,
    /// Of those, blocking (not background).
    pub blocking: u64,
    /// Their pauses: total, mean and longest, ms.
    pub total_pause_ms: f64,
    /// Mean pause, ms.
    pub mean_pause_ms: f64,
    /// Longest pause, ms.
    pub max_pause_ms: f64,
}

/// The GC section.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct GcSection {
    /// Every GC, in the order they started (the last may be incomplete: the trace ended
    /// during it).
    pub gcs: Vec<Gc>,
    /// GCs complete in the trace: the totals count these.
    pub complete: u64,
    /// Per generation (0, 1, 2).
    pub generations: Vec<GenerationSummary>,
    /// All pauses added up, ms.
    pub total_pause_ms: f64,
    /// Of that, restarting the program's threads ([`Gc::restart_ms`]): `total_pause_ms`
    /// less this is the pause as the runtime accounts for it.
    pub total_restart_ms: f64,
    /// `total_pause_ms` as a percentage of the time from the first GC's pause to the last
    /// GC's end (TraceEvent's `GetGCPauseTimePercentage`, PerfView's "% Time paused for
    /// Garbage Collection").
    pub paused_percent: f64,
    /// `total_pause_ms` as a percentage of the trace's duration, first event to last (what
    /// the `gc-pause-time` finding measures: with few GCs, PerfView's share can pass 100 %).
    pub paused_percent_of_trace: f64,
    /// The pauses' distribution.
    pub pauses: Distribution,
    /// GCs the program induced.
    pub induced: u64,
    /// Blocking gen2 GCs (the expensive kind).
    pub blocking_gen2: u64,
    /// Bytes allocated on the large object heap, from `GC/AllocationTick`.
    pub loh_allocated_bytes: u64,
    /// Bytes allocated on the pinned object heap, from `GC/AllocationTick`.
    pub poh_allocated_bytes: u64,
}

/// Reads the GC events of a trace, one at a time.
#[derive(Debug, Default)]
pub(crate) struct GcAnalyzer {
    gcs: Vec<Gc>,
    /// Per GC (by index): whether it is complete, and its pause start.
    state: Vec<GcState>,
    /// The open GC suspension.
    suspension: Option<Suspension>,
    /// The background GC in progress, by index.
    background: Option<usize>,
    /// Allocation ticks' bytes by heap (small, large, pinned): in all, and at the last
    /// `GC/HeapStats`.
    allocated: [u64; 3],
    allocated_at_last_gc: [u64; 3],
    last_heap_stats_ms: Option<f64>,
    pub(crate) events: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct GcState {
    complete: bool,
    pause_start_ms: Option<f64>,
    /// Handed to a live watcher already ([`GcAnalyzer::take_completed`]).
    taken: bool,
}

#[derive(Debug, Clone, Copy)]
struct Suspension {
    start_ms: f64,
    stop_ms: Option<f64>,
    /// 1: SuspendForGC; 6: SuspendForGCPrep.
    reason: u64,
    /// The thread that suspends: only its `SuspendEEStop` and `RestartEEStop` end this
    /// suspension (another thread's are of a suspension not for a GC, which can overlap).
    thread: u64,
    /// Its `RestartEEStart`, once the program's threads are being restarted.
    restart_start_ms: Option<f64>,
}

impl GcAnalyzer {
    /// Takes one GC event (an [`id`]) at `at_ms`, written on `thread`.
    pub(crate) fn observe(&mut self, event_id: u32, at_ms: f64, thread: u64, fields: &Fields<'_>) {
        self.events += 1;
        match event_id {
            id::SUSPEND_EE_START => {
                if let Some(reason @ (1 | 6)) = fields.u64("Reason") {
                    self.suspension = Some(Suspension {
                        start_ms: at_ms,
                        stop_ms: None,
                        reason,
                        thread,
                        restart_start_ms: None,
                    });
                }
            }
            id::SUSPEND_EE_STOP => {
                if let Some(s) = self.suspension.as_mut().filter(|s| s.thread == thread) {
                    if s.reason == 6 {
                        if let Some(bgc) = self.background {
                            *self.gcs[bgc].suspend_ms.get_or_insert(0.0) += at_ms - s.start_ms;
                        }
                    }
                    s.stop_ms = Some(at_ms);
                }
            }
            id::START => self.start(at_ms, fields),
            id::END => {
                if let Some(index) = self.current() {
                    let gc = &mut self.gcs[index];
                    gc.duration_ms = Some(at_ms - gc.start_ms);
                }
            }
            id::HEAP_STATS => self.heap_stats(at_ms, fields),
            id::RESTART_EE_START => {
                if let Some(s) = self.suspension.as_mut().filter(|s| s.thread == thread) {
                    s.restart_start_ms = Some(at_ms);
                }
            }
            id::RESTART_EE_STOP if self.suspension.is_some_and(|s| s.thread == thread) => {
                self.restart(at_ms);
            }
            id::ALLOCATION_TICK => {
                let amount = fields
                    .u64("AllocationAmount64")
                    .filter(|&a| a > 0)
                    .or_else(|| fields.u64("AllocationAmount"))
                    .unwrap_or(0);
                let heap = match fields.u64("AllocationKind") {
                    Some(0) => 0,
                    Some(1) => 1,
                    _ => 2,
                };
                self.allocated[heap] += amount;
            }
            _ => {}
        }
    }

    /// TraceEvent's `GetCurrentGC`: the last GC while it is incomplete, else the
    /// background GC in progress.
    fn current(&self) -> Option<usize> {
        match self.state.last() {
            Some(last) if !last.complete => Some(self.state.len() - 1),
            _ => self.background,
        }
    }

    fn start(&mut self, at_ms: f64, fields: &Fields<'_>) {
        let number = fields.u64("Count").unwrap_or(self.gcs.len() as u64 + 1);
        if self.gcs.last().is_some_and(|g| g.number == number) {
            return; // a repeated GC/Start
        }
        let kind = match fields.u64("Type") {
            Some(1) => "Background",
            Some(2) => "Foreground",
            _ => "NonConcurrent",
        };
        let reason = fields.u64("Reason");
        let at_background_start = kind == "NonConcurrent"
            && self.background.is_some()
            && self.state.last().is_some_and(|s| !s.complete)
            && self.background == Some(self.gcs.len() - 1);
        let (pause_start_ms, suspend_ms) = if at_background_start || reason == Some(0xc) {
            (Some(at_ms), None)
        } else {
            match self.suspension {
                Some(s) => (
                    Some(s.start_ms),
                    Some(s.stop_ms.unwrap_or(at_ms) - s.start_ms),
                ),
                None => (None, None),
            }
        };
        let index = self.gcs.len();
        self.gcs.push(Gc {
            number,
            generation: fields.u64("Depth").unwrap_or(0) as u32,
            kind,
            reason: reason_name(reason),
            start_ms: at_ms,
            duration_ms: None,
            // A background GC's pause starts as its suspension; restarts add to it.
            pause_ms: if kind == "Background" {
                suspend_ms
            } else {
                None
            },
            suspend_ms,
            restart_ms: None,
            heap_after_bytes: None,
            heap_before_bytes: None,
            promoted_bytes: None,
            generation_sizes_after: None,
            allocated_since_previous_bytes: 0,
        });
        self.state.push(GcState {
            complete: false,
            pause_start_ms,
            taken: false,
        });
        if kind == "Background" {
            self.background = Some(index);
        }
    }

    /// The program runs again after a GC suspension.
    fn restart(&mut self, at_ms: f64) {
        let Some(s) = self.suspension.take() else {
            return;
        };
        // A background GC that finished inside the suspension that started it ran, in
        // effect, as a blocking one: this restart ends its pause.
        let finished_inside = || {
            let last = self.gcs.len().checked_sub(1)?;
            let started_here = self.state[last].pause_start_ms == Some(s.start_ms);
            (self.gcs[last].kind == "Background" && started_here).then_some(last)
        };
        let Some(index) = self.current().or_else(finished_inside) else {
            return;
        };
        let gc = &mut self.gcs[index];
        let state = &mut self.state[index];
        if let Some(begun) = s.restart_start_ms {
            *gc.restart_ms.get_or_insert(0.0) += at_ms - begun;
        }
        if gc.kind == "Background" {
            if s.reason == 6 {
                *gc.pause_ms.get_or_insert(0.0) += at_ms - s.start_ms;
            } else if let Some(start) = state.pause_start_ms {
                gc.pause_ms = Some(at_ms - start);
            }
        } else {
            if let Some(start) = state.pause_start_ms {
                gc.pause_ms = Some(at_ms - start);
            }
            if gc.heap_after_bytes.is_some() && state.pause_start_ms.is_some() {
                state.complete = true;
            }
        }
    }

    fn heap_stats(&mut self, at_ms: f64, fields: &Fields<'_>) {
        if let Some(index) = self.current() {
            let size = |n: u32| fields.u64(&format!("GenerationSize{n}")).unwrap_or(0);
            let promoted = |n: u32| fields.u64(&format!("TotalPromotedSize{n}")).unwrap_or(0);
            let sizes = [size(0), size(1), size(2), size(3), size(4)];
            let since: [u64; 3] =
                std::array::from_fn(|k| self.allocated[k] - self.allocated_at_last_gc[k]);
            let before = self.size_before(index, &sizes, since[0]);
            let gc = &mut self.gcs[index];
            gc.generation_sizes_after = Some(sizes);
            gc.heap_after_bytes = Some(sizes.iter().sum());
            gc.promoted_bytes = Some((0..5).map(promoted).sum());
            gc.allocated_since_previous_bytes = since.iter().sum();
            gc.heap_before_bytes = Some(before);
            if gc.kind == "Background" {
                if self.state[index].pause_start_ms.is_some() {
                    self.state[index].complete = true;
                }
                self.background = None;
            }
        }
        self.allocated_at_last_gc = self.allocated;
        self.last_heap_stats_ms = Some(at_ms);
    }

    /// TraceEvent's `GenSizeBeforeMB` without per-heap history: from the latest earlier GC
    /// with sizes (never the first GC's, as TraceEvent's search stops before it), gen0 at
    /// least the small allocations since, LOH and POH at least this GC's.
    fn size_before(&self, index: usize, after: &[u64; 5], small_allocated: u64) -> u64 {
        let previous = (1..index)
            .rev()
            .find_map(|j| self.gcs[j].generation_sizes_after);
        match previous {
            None => small_allocated,
            Some(p) => {
                p[0].max(small_allocated) + p[1] + p[2] + p[3].max(after[3]) + p[4].max(after[4])
            }
        }
    }

    /// For a watcher that reads as long as its target runs: the GCs complete since the
    /// last call, once no GC suspension is open (a background GC completes after the
    /// foreground ones it let run), and the
    /// rows no event can change any more are dropped, so memory stays bounded. The row
    /// kept before the oldest still open is what the next `GC/HeapStats` estimates its size
    /// before from (with the first rows dropped, that can be the first row, which the
    /// whole-trace estimate never uses).
    pub(crate) fn take_completed(&mut self) -> Vec<Gc> {
        // While a GC suspension is open, a complete GC's pause can still grow: a background
        // GC that finished inside the suspension that started it is paused to its restart
        // (the first departure above). What completes is handed over once the program runs.
        if self.suspension.is_some() {
            return Vec::new();
        }
        let mut done = Vec::new();
        for (gc, state) in self.gcs.iter().zip(self.state.iter_mut()) {
            if state.complete && !state.taken {
                state.taken = true;
                done.push(gc.clone());
            }
        }
        let settled = self
            .state
            .iter()
            .take(self.gcs.len().saturating_sub(1))
            .enumerate()
            .take_while(|(i, s)| s.taken && Some(*i) != self.background)
            .count();
        if settled > 0 {
            self.gcs.drain(..settled);
            self.state.drain(..settled);
            self.background = self.background.map(|b| b - settled);
        }
        done
    }

    /// The GC the program is suspended for, with the thread that suspended it (the one
    /// running the GC): a GC suspension is open, and the GC it is for has started in it
    /// (a blocking GC after the suspension began, or a background GC's final mark).
    pub(crate) fn suspended_for(&self) -> Option<(&Gc, u64)> {
        let s = self.suspension?;
        let index = self.current()?;
        let gc = &self.gcs[index];
        let in_it = gc.start_ms >= s.start_ms || (s.reason == 6 && gc.kind == "Background");
        in_it.then_some((gc, s.thread))
    }

    /// The GC rows held.
    pub(crate) fn held(&self) -> usize {
        self.gcs.len()
    }

    /// The section.
    pub(crate) fn finish(self, trace_ms: f64) -> GcSection {
        let complete: Vec<&Gc> = self
            .gcs
            .iter()
            .zip(&self.state)
            .filter(|(_, s)| s.complete)
            .map(|(g, _)| g)
            .collect();
        let pauses: Vec<f64> = complete.iter().filter_map(|g| g.pause_ms).collect();
        let total_pause_ms = pauses.iter().fold(0.0, |a, b| a + b);
        let total_restart_ms = complete
            .iter()
            .filter_map(|g| g.restart_ms)
            .fold(0.0, |a, b| a + b);
        let generations = (0..=2)
            .map(|generation| summarize(generation, &complete))
            .collect();
        let first_pause = self
            .state
            .iter()
            .find(|s| s.complete)
            .and_then(|s| s.pause_start_ms);
        let span = match (first_pause, self.last_heap_stats_ms) {
            (Some(from), Some(to)) => to - from,
            _ => 0.0,
        };
        GcSection {
            complete: complete.len() as u64,
            induced: complete.iter().filter(|g| g.is_induced()).count() as u64,
            blocking_gen2: complete
                .iter()
                .filter(|g| g.generation == 2 && g.is_blocking())
                .count() as u64,
            generations,
            total_pause_ms,
            total_restart_ms,
            paused_percent: crate::stats::percent(total_pause_ms, span),
            paused_percent_of_trace: crate::stats::percent(total_pause_ms, trace_ms),
            pauses: Distribution::of(pauses),
            loh_allocated_bytes: self.allocated[1],
            poh_allocated_bytes: self.allocated[2],
            gcs: self.gcs,
        }
    }
}

fn summarize(generation: u32, complete: &[&Gc]) -> GenerationSummary {
    let of: Vec<&&Gc> = complete
        .iter()
        .filter(|g| g.generation == generation)
        .collect();
    let pauses: Vec<f64> = of.iter().filter_map(|g| g.pause_ms).collect();
    let total = pauses.iter().fold(0.0, |a, b| a + b);
    GenerationSummary {
        generation,
        count: of.len() as u64,
        induced: of.iter().filter(|g| g.is_induced()).count() as u64,
        blocking: of.iter().filter(|g| g.is_blocking()).count() as u64,
        total_pause_ms: total,
        mean_pause_ms: if pauses.is_empty() {
            0.0
        } else {
            total / pauses.len() as f64
        },
        max_pause_ms: pauses.iter().copied().fold(0.0, f64::max),
    }
}

/// The runtime's `GCReasonMap` (ClrEtwAll.man).
fn reason_name(reason: Option<u64>) -> &'static str {
    match reason {
        Some(0) => "AllocSmall",
        Some(1) => "Induced",
        Some(2) => "LowMemory",
        Some(3) => "Empty",
        Some(4) => "AllocLarge",
        Some(5) => "OutOfSpaceSOH",
        Some(6) => "OutOfSpaceLOH",
        Some(7) => "InducedNotForced",
        Some(8) => "Internal",
        Some(9) => "InducedLowMemory",
        Some(10) => "InducedCompacting",
        Some(11) => "LowMemoryHost",
        Some(12) => "PMFullGC",
        Some(13) => "LowMemoryHostBlocking",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nettrace::ValueRef;

    fn fields(values: &[(&'static str, u64)]) -> Fields<'static> {
        Fields::from_values(
            values
                .iter()
                .map(|&(name, v)| (name, ValueRef::U64(v)))
                .collect(),
        )
    }

    /// A background GC that finishes inside the suspension that started it is paused to
    /// that suspension's restart; a live watch hands it over only then, with that pause.
    #[test]
    fn a_background_gc_finished_inside_its_suspension_is_taken_with_its_whole_pause() {
        let mut gc = GcAnalyzer::default();
        let none = fields(&[]);
        gc.observe(id::SUSPEND_EE_START, 0.0, 1, &fields(&[("Reason", 1)]));
        gc.observe(id::SUSPEND_EE_STOP, 1.0, 1, &none);
        gc.observe(
            id::START,
            2.0,
            1,
            &fields(&[("Count", 3), ("Depth", 2), ("Type", 1), ("Reason", 1)]),
        );
        assert!(gc.take_completed().is_empty());
        gc.observe(id::HEAP_STATS, 3.0, 1, &fields(&[("GenerationSize0", 100)]));
        // Complete, but its suspension is still open: not yet.
        assert!(gc.take_completed().is_empty());
        gc.observe(id::RESTART_EE_STOP, 10.0, 1, &none);
        let taken = gc.take_completed();
        assert_eq!(taken.len(), 1);
        assert_eq!((taken[0].number, taken[0].kind), (3, "Background"));
        assert_eq!(taken[0].pause_ms, Some(10.0));
        assert!(gc.take_completed().is_empty());
    }

    /// A blocking GC's pause runs to its `RestartEEStop`; the restart (from its
    /// `RestartEEStart`) is the part of it the runtime's own accounting leaves out. A
    /// background GC's restarts add up over its suspensions.
    #[test]
    fn restarts_are_the_part_of_each_pause_after_restart_ee_start() {
        let mut gc = GcAnalyzer::default();
        let none = fields(&[]);
        let suspend = |gc: &mut GcAnalyzer, at: f64, reason: u64| {
            gc.observe(id::SUSPEND_EE_START, at, 1, &fields(&[("Reason", reason)]));
            gc.observe(id::SUSPEND_EE_STOP, at + 0.5, 1, &none);
        };
        suspend(&mut gc, 0.0, 1);
        gc.observe(id::START, 1.0, 1, &fields(&[("Count", 1), ("Depth", 0)]));
        gc.observe(id::END, 5.0, 1, &none);
        gc.observe(id::HEAP_STATS, 5.5, 1, &none);
        gc.observe(id::RESTART_EE_START, 6.0, 1, &none);
        // Another thread's restart is not this suspension's.
        gc.observe(id::RESTART_EE_START, 6.5, 2, &none);
        gc.observe(id::RESTART_EE_STOP, 9.0, 1, &none);

        suspend(&mut gc, 20.0, 1);
        gc.observe(
            id::START,
            21.0,
            1,
            &fields(&[("Count", 2), ("Depth", 2), ("Type", 1)]),
        );
        gc.observe(id::RESTART_EE_START, 22.0, 1, &none);
        gc.observe(id::RESTART_EE_STOP, 23.0, 1, &none);
        suspend(&mut gc, 30.0, 6);
        gc.observe(id::RESTART_EE_START, 31.0, 1, &none);
        gc.observe(id::RESTART_EE_STOP, 33.0, 1, &none);
        gc.observe(id::END, 40.0, 1, &none);
        gc.observe(id::HEAP_STATS, 40.5, 1, &none);

        let section = gc.finish(50.0);
        let blocking = &section.gcs[0];
        assert_eq!(
            (blocking.pause_ms, blocking.restart_ms),
            (Some(9.0), Some(3.0))
        );
        let background = &section.gcs[1];
        assert_eq!(background.pause_ms, Some(3.0 + 3.0));
        assert_eq!(background.restart_ms, Some(1.0 + 2.0));
        assert_eq!(section.total_pause_ms, 15.0);
        assert_eq!(section.total_restart_ms, 6.0);
    }
}
