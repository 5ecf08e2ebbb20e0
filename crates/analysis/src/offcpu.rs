//! Off-CPU time: how long each thread ran and how long it waited, from this project's CPU
//! sampler (`EventPipeRs-CpuSampler`'s `Sample` events), or from perf events as `eptrace
//! record --off-cpu` writes them (`Universal.Events`: `cpu` samples, each standing for the
//! trace's sampling interval of CPU time, and `offcpu` waits, each its `Value` ns, with the
//! stack waited in).
//!
//! A sample's `State` says what its `Periods × PeriodNs` of the thread's time were:
//! 1 running (CPU time, with its stack); 2 with a stack: CPU time the timer caught in a
//! system call (left out of CPU profiles, as the sampler's docs say); 2 without a stack:
//! time off the CPU, where unknown; 3: time off the CPU waiting in the stack the sample
//! carries (sessions with off-CPU stacks, `--profile off-cpu`). Where the threads waited,
//! by stack, needs symbols: `eptrace analyze` adds it ([`OffCpuSection::waits`]), and
//! `eptrace convert --samples offcpu` draws it.

use std::collections::HashMap;

use serde::Serialize;

use crate::fields::Fields;
use crate::TopStack;

/// The CPU sampler's provider.
pub const CPU_SAMPLER_PROVIDER: &str = "EventPipeRs-CpuSampler";
/// The provider of perf events' samples in a V6 trace (one-collect's, `eptrace record`'s).
pub const PERF_PROVIDER: &str = "Universal.Events";
/// The rundown provider, whose `Thread` events name the process's threads.
pub const RUNDOWN_PROVIDER: &str = "EventPipeRs-Rundown";

/// Event ids.
pub mod id {
    /// The CPU sampler's `Sample`.
    pub const SAMPLE: u32 = 1;
}

const STATE_RUNNING: u64 = 1;
const STATE_BLOCKED: u64 = 2;
const STATE_WAITING: u64 = 3;

/// One thread's time, as its samples account it.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ThreadTime {
    /// The OS thread id.
    pub thread_id: u64,
    /// The thread's name, when the trace names it.
    pub name: Option<String>,
    /// CPU time, running (ms).
    pub cpu_ms: f64,
    /// CPU time the sampler caught in system calls (ms).
    pub in_syscalls_ms: f64,
    /// Time off the CPU (ms), with a stack or not.
    pub off_cpu_ms: f64,
    /// The part of `off_cpu_ms` whose stack is known.
    pub off_cpu_with_stack_ms: f64,
    /// `off_cpu_ms` as a share of all the thread's sampled time (%).
    pub off_cpu_percent: f64,
}

/// Off-CPU time per thread.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct OffCpuSection {
    /// `Sample` events read.
    pub samples: u64,
    /// Threads, most time off the CPU first.
    pub threads: Vec<ThreadTime>,
    /// Every thread's CPU time (ms).
    pub cpu_ms: f64,
    /// Every thread's time off the CPU (ms).
    pub off_cpu_ms: f64,
    /// The part of `off_cpu_ms` whose stack is known: 0 in a trace collected without
    /// off-CPU stacks.
    pub off_cpu_with_stack_ms: f64,
    /// Where threads waited, most time first, in ms (empty until a caller that
    /// symbolizes fills it in).
    pub waits: Vec<TopStack>,
}

#[derive(Debug, Default)]
struct Times {
    running_ns: u64,
    in_syscalls_ns: u64,
    unknown_wait_ns: u64,
    known_wait_ns: u64,
}

/// Accumulates the section.
#[derive(Debug, Default)]
pub(crate) struct OffCpuAnalyzer {
    pub(crate) events: u64,
    /// The trace's CPU sampling interval (ns), what a perf CPU sample stands for.
    pub(crate) interval_ns: Option<u64>,
    threads: HashMap<u64, Times>,
    names: HashMap<u64, String>,
}

impl OffCpuAnalyzer {
    /// A `Sample` of thread `thread`, with a stack or not.
    pub(crate) fn observe(&mut self, thread: u64, has_stack: bool, fields: &Fields<'_>) {
        self.events += 1;
        // The sampler's readers take a missing `Periods` as 1 and `PeriodNs` as 1 ms.
        let periods = fields.u64("Periods").unwrap_or(1).max(1);
        let period_ns = fields.u64("PeriodNs").filter(|&ns| ns > 0);
        let ns = periods.saturating_mul(period_ns.unwrap_or(1_000_000));
        let times = self.threads.entry(thread).or_default();
        let slot = match (fields.u64("State"), has_stack) {
            (Some(STATE_RUNNING), _) => &mut times.running_ns,
            (Some(STATE_BLOCKED), true) => &mut times.in_syscalls_ns,
            (Some(STATE_BLOCKED), false) => &mut times.unknown_wait_ns,
            (Some(STATE_WAITING), _) => &mut times.known_wait_ns,
            _ => return,
        };
        *slot = slot.saturating_add(ns);
    }

    /// A perf sample of thread `thread` (named `name` in the trace's thread table): CPU
    /// time (`waited_ns` None: one sampling interval) or a wait off CPU with its stack
    /// (`waited_ns`).
    pub(crate) fn observe_perf(&mut self, thread: u64, name: Option<&str>, waited_ns: Option<u64>) {
        self.events += 1;
        if let Some(name) = name {
            self.names.entry(thread).or_insert_with(|| name.to_owned());
        }
        let times = self.threads.entry(thread).or_default();
        match waited_ns {
            Some(ns) => times.known_wait_ns = times.known_wait_ns.saturating_add(ns),
            None => {
                let ns = self.interval_ns.filter(|&ns| ns > 0).unwrap_or(1_000_000);
                times.running_ns = times.running_ns.saturating_add(ns);
            }
        }
    }

    /// A rundown `Thread` event: a thread's name.
    pub(crate) fn observe_name(&mut self, fields: &Fields<'_>) {
        if let (Some(id), Some(name)) = (fields.u64("ThreadId"), fields.text("Name")) {
            self.names.insert(id, name);
        }
    }

    pub(crate) fn finish(mut self) -> OffCpuSection {
        let ms = |ns: u64| ns as f64 / 1e6;
        let mut threads: Vec<ThreadTime> = self
            .threads
            .into_iter()
            .map(|(thread_id, t)| {
                let off = t.unknown_wait_ns + t.known_wait_ns;
                let all = off + t.running_ns + t.in_syscalls_ns;
                ThreadTime {
                    thread_id,
                    name: self.names.remove(&thread_id),
                    cpu_ms: ms(t.running_ns),
                    in_syscalls_ms: ms(t.in_syscalls_ns),
                    off_cpu_ms: ms(off),
                    off_cpu_with_stack_ms: ms(t.known_wait_ns),
                    off_cpu_percent: if all == 0 {
                        0.0
                    } else {
                        off as f64 * 100.0 / all as f64
                    },
                }
            })
            .collect();
        threads.sort_by(|a, b| {
            b.off_cpu_ms
                .total_cmp(&a.off_cpu_ms)
                .then(a.thread_id.cmp(&b.thread_id))
        });
        OffCpuSection {
            samples: self.events,
            cpu_ms: threads.iter().map(|t| t.cpu_ms).sum(),
            off_cpu_ms: threads.iter().map(|t| t.off_cpu_ms).sum(),
            off_cpu_with_stack_ms: threads.iter().map(|t| t.off_cpu_with_stack_ms).sum(),
            threads,
            waits: Vec::new(),
        }
    }
}
