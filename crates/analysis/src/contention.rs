//! The lock contention analysis: `Contention/Start` (id 81) and `Contention/Stop` (id 91)
//! of the same thread make one wait; its length is the stop's `DurationNs` where the
//! runtime writes it (.NET 8+), else the time between the two. The runtime's
//! `Monitor.LockContentionCount` counts the starts. Keyword: Contention (0x4000).

use std::collections::HashMap;

use serde::Serialize;

use crate::fields::Fields;
use crate::stats::Distribution;

/// The runtime's event ids of the `Contention/*` events this section reads (its manifest).
pub mod id {
    /// `Contention/Start`.
    pub const START: u32 = 81;
    /// `Contention/Stop`.
    pub const STOP: u32 = 91;
}

/// The waits of one thread.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ThreadWaits {
    /// The waiting thread's OS id.
    pub thread_id: u64,
    /// Waits.
    pub count: u64,
    /// Their time, ms.
    pub wait_ms: f64,
    /// `wait_ms` as a percentage of the trace's duration.
    pub percent_of_time: f64,
}

/// The contention section.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ContentionSection {
    /// Contentions (`Contention/Start` events).
    pub count: u64,
    /// Waits measured (a start with its stop).
    pub measured: u64,
    /// Their time added up, ms.
    pub total_wait_ms: f64,
    /// The waits' distribution, ms.
    pub waits: Distribution,
    /// By waiting thread, most wait first.
    pub threads: Vec<ThreadWaits>,
    /// By the thread that held the lock (.NET 8+'s `LockOwnerThreadID`), most wait first:
    /// (owner's managed thread pointer, waits, ms).
    pub owners: Vec<(u64, u64, f64)>,
    /// By waiting stack, most ms first (empty until a caller that symbolizes fills it in).
    pub stacks: Vec<crate::TopStack>,
}

#[derive(Debug, Default)]
pub(crate) struct ContentionAnalyzer {
    /// Waits under way, by thread: when, and the owner.
    open: HashMap<u64, (f64, Option<u64>)>,
    waits: Vec<(u64, Option<u64>, f64)>,
    starts: u64,
    pub(crate) events: u64,
}

impl ContentionAnalyzer {
    pub(crate) fn observe(&mut self, event_id: u32, at_ms: f64, thread: u64, fields: &Fields<'_>) {
        self.events += 1;
        match event_id {
            id::START => {
                self.starts += 1;
                let owner = fields.u64("LockOwnerThreadID").filter(|&o| o != 0);
                self.open.insert(thread, (at_ms, owner));
            }
            id::STOP => {
                if let Some((start, owner)) = self.open.remove(&thread) {
                    let ms = match fields.f64("DurationNs") {
                        Some(ns) if ns > 0.0 => ns / 1e6,
                        _ => at_ms - start,
                    };
                    self.waits.push((thread, owner, ms));
                }
            }
            _ => {}
        }
    }

    pub(crate) fn finish(self, duration_ms: f64) -> ContentionSection {
        let mut threads: HashMap<u64, (u64, f64)> = HashMap::new();
        let mut owners: HashMap<u64, (u64, f64)> = HashMap::new();
        for &(thread, owner, ms) in &self.waits {
            let t = threads.entry(thread).or_default();
            t.0 += 1;
            t.1 += ms;
            if let Some(owner) = owner {
                let o = owners.entry(owner).or_default();
                o.0 += 1;
                o.1 += ms;
            }
        }
        let mut threads: Vec<ThreadWaits> = threads
            .into_iter()
            .map(|(thread_id, (count, wait_ms))| ThreadWaits {
                thread_id,
                count,
                wait_ms,
                percent_of_time: crate::stats::percent(wait_ms, duration_ms),
            })
            .collect();
        threads.sort_by(|a, b| {
            b.wait_ms
                .total_cmp(&a.wait_ms)
                .then(a.thread_id.cmp(&b.thread_id))
        });
        let mut owners: Vec<(u64, u64, f64)> =
            owners.into_iter().map(|(o, (n, ms))| (o, n, ms)).collect();
        owners.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        let times: Vec<f64> = self.waits.iter().map(|w| w.2).collect();
        ContentionSection {
            count: self.starts,
            measured: self.waits.len() as u64,
            total_wait_ms: times.iter().fold(0.0, |a, b| a + b),
            waits: Distribution::of(times),
            threads,
            owners,
            stacks: Vec::new(),
        }
    }
}
