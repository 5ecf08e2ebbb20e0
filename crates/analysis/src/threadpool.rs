//! The thread pool analysis: worker counts over time from
//! `ThreadPoolWorkerThread/Start` and `/Stop` (ids 50, 51: `ActiveWorkerThreadCount`), and
//! each hill-climbing adjustment, `ThreadPoolWorkerThreadAdjustment/Adjustment` (id 55),
//! with its reason (the runtime's `ThreadAdjustmentReasonMap`: 6 is Starvation, a worker
//! added because queued work made no progress). Keyword: Threading (0x10000).

use serde::Serialize;

use crate::fields::Fields;

pub(crate) mod id {
    pub(crate) const WORKER_START: u32 = 50;
    pub(crate) const WORKER_STOP: u32 = 51;
    pub(crate) const ADJUSTMENT: u32 = 55;
}

/// `ThreadPoolWorkerThreadAdjustment/Adjustment`'s reason for a worker added because
/// queued work made no progress.
pub(crate) const STARVATION: u64 = 6;

/// Starvation adjustments closer than this belong to one starvation span.
const SPAN_GAP_MS: f64 = 1000.0;

/// One hill-climbing adjustment.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Adjustment {
    /// When, ms from the trace's start.
    pub at_ms: f64,
    /// The worker count it set.
    pub new_worker_count: u64,
    /// Why: `Warmup`, `Initializing`, `RandomMove`, `ClimbingMove`, `ChangePointMove`,
    /// `Stabilizing`, `Starvation`, `ThreadTimedOut`.
    pub reason: &'static str,
}

/// The thread pool section.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ThreadPoolSection {
    /// Active workers over time: (ms, count), one point per worker start or stop.
    pub workers: Vec<(f64, u64)>,
    /// The most active workers at once.
    pub max_workers: u64,
    /// Every adjustment, in time order.
    pub adjustments: Vec<Adjustment>,
    /// Adjustments for starvation.
    pub starvation_adjustments: u64,
    /// When the pool was starved: (from ms, to ms), adjustments less than a second apart
    /// joined.
    pub starvation_spans: Vec<(f64, f64)>,
}

#[derive(Debug, Default)]
pub(crate) struct ThreadPoolAnalyzer {
    workers: Vec<(f64, u64)>,
    adjustments: Vec<Adjustment>,
    pub(crate) events: u64,
}

impl ThreadPoolAnalyzer {
    pub(crate) fn observe(&mut self, event_id: u32, at_ms: f64, fields: &Fields<'_>) {
        self.events += 1;
        match event_id {
            id::WORKER_START | id::WORKER_STOP => {
                if let Some(active) = fields.u64("ActiveWorkerThreadCount") {
                    self.workers.push((at_ms, active));
                }
            }
            id::ADJUSTMENT => self.adjustments.push(Adjustment {
                at_ms,
                new_worker_count: fields.u64("NewWorkerThreadCount").unwrap_or(0),
                reason: reason_name(fields.u64("Reason")),
            }),
            _ => {}
        }
    }

    pub(crate) fn finish(self) -> ThreadPoolSection {
        let mut spans: Vec<(f64, f64)> = Vec::new();
        for a in self.adjustments.iter().filter(|a| a.reason == "Starvation") {
            match spans.last_mut() {
                Some(span) if a.at_ms - span.1 <= SPAN_GAP_MS => span.1 = a.at_ms,
                _ => spans.push((a.at_ms, a.at_ms)),
            }
        }
        let max_workers = self
            .workers
            .iter()
            .map(|w| w.1)
            .chain(self.adjustments.iter().map(|a| a.new_worker_count))
            .max()
            .unwrap_or(0);
        ThreadPoolSection {
            max_workers,
            starvation_adjustments: self
                .adjustments
                .iter()
                .filter(|a| a.reason == "Starvation")
                .count() as u64,
            starvation_spans: spans,
            workers: self.workers,
            adjustments: self.adjustments,
        }
    }
}

/// The runtime's `ThreadAdjustmentReasonMap` (ClrEtwAll.man).
fn reason_name(reason: Option<u64>) -> &'static str {
    match reason {
        Some(0) => "Warmup",
        Some(1) => "Initializing",
        Some(2) => "RandomMove",
        Some(3) => "ClimbingMove",
        Some(4) => "ChangePointMove",
        Some(5) => "Stabilizing",
        Some(STARVATION) => "Starvation",
        Some(7) => "ThreadTimedOut",
        _ => "Unknown",
    }
}
