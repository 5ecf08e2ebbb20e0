//! Diagnoses from a trace: the questions people open PerfView's GCStats, JITStats and
//! event views for, answered from any nettrace file on any OS.
//!
//! [`Analyzer`] reads a trace's events once, in time order ([`nettrace::SortedReader`]:
//! a GC's events come from several threads, and its pause and completion follow their
//! order), and keeps only what its sections need: per-GC rows, per-method compiles, open waits, counts by exception type.
//! [`Analyzer::finish`] gives an [`Analysis`]: one section per kind of event the trace has
//! ([`gc`], [`allocations`](AllocationSection), [`jit`], [`contention`], [`exceptions`],
//! [`threadpool`]), a hint for each section it has no events for (what to collect), and
//! findings ([`Finding`]): what is wrong, by documented [`RULES`], most severe first.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bytes = std::fs::read("trace.nettrace")?;
//! let reader = nettrace::TraceReader::from_slice(&bytes)?;
//! let mut reader = nettrace::SortedReader::new(reader);
//! let mut analyzer = eventpipe_analysis::Analyzer::new(eventpipe_analysis::Sections::ALL);
//! while let Some(event) = reader.next_event()? {
//!     analyzer.observe(&event);
//! }
//! let analysis = analyzer.finish("trace.nettrace");
//! for finding in &analysis.findings {
//!     println!("{}", finding.summary);
//! }
//! # Ok(()) }
//! ```

mod alloc;
pub mod async_polls;
pub mod contention;
pub mod exceptions;
mod fields;
mod findings;
pub mod gc;
pub mod jit;
pub mod live;
pub mod offcpu;
mod stats;
pub mod threadpool;

pub use alloc::{AllocationRow, AllocationSection};
pub use async_polls::AsyncSection;
pub use contention::ContentionSection;
pub use exceptions::ExceptionSection;
pub use findings::{
    Finding, Rule, CONTENTION_PERCENT, EXCEPTIONS_PER_SECOND, GC_PAUSE_PERCENT, RULES,
};
pub use gc::GcSection;
pub use jit::JitSection;
pub use offcpu::OffCpuSection;
pub use stats::Distribution;
pub use threadpool::ThreadPoolSection;

use nettrace::{Event, EventRef};
use serde::Serialize;

use fields::Fields;

/// Which analysis a runtime event (by id) goes to: the one table both
/// [`Sections::reads`] and the [`Analyzer`] follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// `GC/AllocationTick`: the GC section's and the allocations section's.
    AllocationTick,
    Gc,
    Jit,
    Contention,
    Exceptions,
    ThreadPool,
    /// The CPU sampler's `Sample`.
    Sample,
    /// A perf CPU sample (`Universal.Events/cpu`, `eptrace record`, one-collect).
    PerfSample,
    /// A wait off CPU as `eptrace record --off-cpu` writes it (`Universal.Events/offcpu`).
    PerfWait,
    /// The rundown's `Thread`: a thread's name.
    ThreadName,
    /// Any of the async profiler's events (counted: decoding them is the caller's).
    AsyncProfiler,
}

impl Route {
    fn of(metadata: &nettrace::EventMetadata) -> Option<Route> {
        match metadata.provider.as_str() {
            RUNTIME_PROVIDER => Route::of_runtime(metadata.event_id),
            offcpu::CPU_SAMPLER_PROVIDER if metadata.event_id == offcpu::id::SAMPLE => {
                Some(Route::Sample)
            }
            offcpu::RUNDOWN_PROVIDER if metadata.event_name == "Thread" => Some(Route::ThreadName),
            offcpu::PERF_PROVIDER if metadata.event_name == "cpu" => Some(Route::PerfSample),
            offcpu::PERF_PROVIDER if metadata.event_name == "offcpu" => Some(Route::PerfWait),
            async_polls::ASYNC_PROFILER_PROVIDER => Some(Route::AsyncProfiler),
            _ => None,
        }
    }

    fn of_runtime(event_id: u32) -> Option<Route> {
        Some(match event_id {
            gc::id::ALLOCATION_TICK => Route::AllocationTick,
            gc::id::START
            | gc::id::END
            | gc::id::RESTART_EE_STOP
            | gc::id::RESTART_EE_START
            | gc::id::HEAP_STATS
            | gc::id::SUSPEND_EE_STOP
            | gc::id::SUSPEND_EE_START => Route::Gc,
            jit::id::JITTING_STARTED
            | jit::id::METHOD_LOAD_VERBOSE
            | jit::id::R2R_GET_ENTRY_POINT => Route::Jit,
            contention::id::START | contention::id::STOP => Route::Contention,
            exceptions::id::THROWN
            | exceptions::id::CATCH_START
            | exceptions::id::FINALLY_START => Route::Exceptions,
            threadpool::id::WORKER_START
            | threadpool::id::WORKER_STOP
            | threadpool::id::ADJUSTMENT => Route::ThreadPool,
            _ => return None,
        })
    }
}

/// One stack a section's events happened on, and how much of the section it holds: filled
/// in by a caller that symbolizes (this crate reads no symbols), from the profile of the
/// same events (`eptrace convert --samples ...`).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct TopStack {
    /// The section's measure on this stack: ms (off-CPU, contention), MB (allocations) or
    /// a count (exceptions).
    pub value: f64,
    /// The threads it happened on, by name (or `thread ID`).
    pub threads: Vec<String>,
    /// The stack's functions, leaf first.
    pub frames: Vec<String>,
}

impl TopStack {
    /// `value` on the stack `frames` (leaf first), by `threads`.
    pub fn new(value: f64, threads: Vec<String>, frames: Vec<String>) -> TopStack {
        TopStack {
            value,
            threads,
            frames,
        }
    }
}

/// The .NET runtime's provider, whose events every section reads.
pub const RUNTIME_PROVIDER: &str = "Microsoft-Windows-DotNETRuntime";

/// The sections an analysis computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sections {
    /// GC pauses and heap sizes.
    pub gc: bool,
    /// Allocations by type.
    pub allocations: bool,
    /// JIT compiles.
    pub jit: bool,
    /// Lock contention.
    pub contention: bool,
    /// Exceptions.
    pub exceptions: bool,
    /// The thread pool.
    pub threadpool: bool,
    /// Off-CPU time (Rust's CPU sampler).
    pub offcpu: bool,
    /// Async polls and futures (Rust's async profiler).
    pub async_polls: bool,
}

impl Sections {
    /// Whether any of these sections reads events of `metadata`: a sorted reader can leave
    /// the rest unsorted ([`nettrace::SortedReader::with_filter`], [`Skipped`]).
    pub fn reads(&self, metadata: &nettrace::EventMetadata) -> bool {
        match Route::of(metadata) {
            Some(Route::AllocationTick) => self.gc || self.allocations,
            Some(Route::Gc) => self.gc,
            Some(Route::Jit) => self.jit,
            Some(Route::Contention) => self.contention,
            Some(Route::Exceptions) => self.exceptions,
            Some(Route::ThreadPool) => self.threadpool,
            Some(Route::Sample | Route::ThreadName | Route::PerfSample | Route::PerfWait) => {
                self.offcpu
            }
            Some(Route::AsyncProfiler) => self.async_polls,
            None => false,
        }
    }

    /// Every section.
    pub const ALL: Sections = Sections {
        gc: true,
        allocations: true,
        jit: true,
        contention: true,
        exceptions: true,
        threadpool: true,
        offcpu: true,
        async_polls: true,
    };
    /// No section (add some with the fields).
    pub const NONE: Sections = Sections {
        gc: false,
        allocations: false,
        jit: false,
        contention: false,
        exceptions: false,
        threadpool: false,
        offcpu: false,
        async_polls: false,
    };
}

/// The events a filtered read passed over ([`Sections::reads`] said no): counted, and
/// their timestamps spanned, for the trace's totals ([`Analyzer::add_skipped`]). Shared
/// with the filter, which runs inside the reader: its counters are atomics, each touched
/// by the reading thread alone.
#[derive(Debug, Default)]
pub struct Skipped {
    events: std::sync::atomic::AtomicU64,
    first_ticks: std::sync::atomic::AtomicI64,
    last_ticks: std::sync::atomic::AtomicI64,
}

impl Skipped {
    /// Notes one event passed over, stamped `ticks`.
    #[inline]
    pub fn note(&self, ticks: i64) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.events.fetch_add(1, Relaxed) == 0 {
            self.first_ticks.store(ticks, Relaxed);
            self.last_ticks.store(ticks, Relaxed);
        } else {
            self.first_ticks.fetch_min(ticks, Relaxed);
            self.last_ticks.fetch_max(ticks, Relaxed);
        }
    }
}

/// What a section needs collected, for a trace that has none of its events.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Missing {
    /// The section: `gc`, `allocations`, `jit`, `contention`, `exceptions`, `threadpool`,
    /// `offcpu`, `async`.
    pub section: &'static str,
    /// What to collect: an `eptrace collect` option.
    pub collect: &'static str,
}

/// The analysis of one trace.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Analysis {
    /// The trace's name as the caller gave it.
    pub file: String,
    /// First to last event, ms.
    pub duration_ms: f64,
    /// Events read.
    pub events: u64,
    /// What is wrong, most severe first; empty for a healthy trace.
    pub findings: Vec<Finding>,
    /// GC pauses and heap sizes, when the trace has GC events.
    pub gc: Option<GcSection>,
    /// Allocations by type, when the trace has `GC/AllocationTick` events.
    pub allocations: Option<AllocationSection>,
    /// JIT compiles, when the trace has JIT events.
    pub jit: Option<JitSection>,
    /// Lock contention, when the trace has contention events.
    pub contention: Option<ContentionSection>,
    /// Exceptions, when the trace has exception events.
    pub exceptions: Option<ExceptionSection>,
    /// The thread pool, when the trace has its events.
    pub threadpool: Option<ThreadPoolSection>,
    /// Off-CPU time per thread, when the trace has the CPU sampler's samples.
    pub offcpu: Option<OffCpuSection>,
    /// Long polls and unfinished futures: added by a caller that decodes the async
    /// profiler's records ([`Analysis::set_async`]); `None` until then.
    #[serde(rename = "async")]
    pub async_polls: Option<AsyncSection>,
    /// The async profiler's events read (what [`Analysis::set_async`] decodes).
    pub async_events: u64,
    /// The selected sections the trace has no events for, and what to collect for them.
    pub missing: Vec<Missing>,
}

impl Analysis {
    /// Adds the async section, which a caller that decodes the async profiler's records
    /// computes (`eventpipe_insight::async_section`), and the findings it brings.
    pub fn set_async(&mut self, section: AsyncSection) {
        self.async_polls = Some(section);
        self.findings = findings::find(self);
    }
}

/// Reads a trace's events and builds its [`Analysis`].
#[derive(Debug)]
pub struct Analyzer {
    sections: Sections,
    gc: gc::GcAnalyzer,
    allocations: alloc::AllocationAnalyzer,
    jit: jit::JitAnalyzer,
    contention: contention::ContentionAnalyzer,
    exceptions: exceptions::ExceptionAnalyzer,
    threadpool: threadpool::ThreadPoolAnalyzer,
    offcpu: offcpu::OffCpuAnalyzer,
    async_events: u64,
    events: u64,
    first_ms: Option<f64>,
    last_ms: f64,
}

impl Analyzer {
    /// An analyzer computing `sections`.
    pub fn new(sections: Sections) -> Analyzer {
        Analyzer {
            sections,
            gc: Default::default(),
            allocations: Default::default(),
            jit: Default::default(),
            contention: Default::default(),
            exceptions: Default::default(),
            threadpool: Default::default(),
            offcpu: Default::default(),
            async_events: 0,
            events: 0,
            first_ms: None,
            last_ms: 0.0,
        }
    }

    /// Takes the trace's next event, in time order.
    pub fn observe(&mut self, event: &Event<'_>) {
        let thread = || event.thread_id();
        let has_stack = event.stack.is_some_and(|s| !s.is_empty());
        self.offcpu.interval_ns = event.trace.expected_cpu_sampling_rate;
        self.take(
            event.metadata,
            event.timestamp_msec(),
            (thread, || event.thread_name()),
            has_stack,
            || Fields::of(event),
        );
    }

    /// Takes the trace's next event, in time order, as an [`EventRef`] (for a trace whose
    /// file order is its time order, as the file-order reader's
    /// [`next_event_ref`](nettrace::TraceReader::next_event_ref) yields it).
    pub fn observe_ref(&mut self, event: &EventRef<'_>) {
        let thread = || event.thread_id();
        let has_stack = event.stack().is_some_and(|s| !s.is_empty());
        self.offcpu.interval_ns = event.trace().expected_cpu_sampling_rate;
        self.take(
            event.metadata(),
            event.timestamp_msec(),
            (thread, || event.thread_name()),
            has_stack,
            || Fields::of_ref(event),
        );
    }

    fn take<'r, 'n>(
        &mut self,
        metadata: &nettrace::EventMetadata,
        at_ms: f64,
        (thread, thread_name): (impl FnOnce() -> u64, impl FnOnce() -> Option<&'n str>),
        has_stack: bool,
        fields: impl FnOnce() -> Fields<'r>,
    ) {
        self.events += 1;
        self.first_ms = Some(self.first_ms.map_or(at_ms, |f| f.min(at_ms)));
        self.last_ms = self.last_ms.max(at_ms);
        let id = metadata.event_id;
        let s = self.sections;
        // `reads` checks the provider and the selected sections.
        let Some(route) = Route::of(metadata).filter(|_| s.reads(metadata)) else {
            return;
        };
        match route {
            Route::AllocationTick => {
                let fields = fields();
                if s.gc {
                    self.gc.observe(id, at_ms, 0, &fields);
                }
                if s.allocations {
                    self.allocations.observe(&fields);
                }
            }
            Route::Gc => self.gc.observe(id, at_ms, thread(), &fields()),
            Route::Jit => self.jit.observe(id, at_ms, thread(), &fields()),
            Route::Contention => self.contention.observe(id, at_ms, thread(), &fields()),
            Route::Exceptions => self.exceptions.observe(id, &fields()),
            Route::ThreadPool => self.threadpool.observe(id, at_ms, &fields()),
            Route::Sample => self.offcpu.observe(thread(), has_stack, &fields()),
            Route::ThreadName => self.offcpu.observe_name(&fields()),
            Route::PerfSample => self.offcpu.observe_perf(thread(), thread_name(), None),
            Route::PerfWait => {
                let waited = fields().u64("Value");
                self.offcpu.observe_perf(thread(), thread_name(), waited);
            }
            Route::AsyncProfiler => self.async_events += 1,
        }
    }

    /// Counts the events a filtered read passed over ([`Skipped`]) in the trace's totals;
    /// `trace` converts their timestamps.
    pub fn add_skipped(&mut self, skipped: &Skipped, trace: &nettrace::TraceInfo) {
        use std::sync::atomic::Ordering::Relaxed;
        let events = skipped.events.load(Relaxed);
        if events == 0 {
            return;
        }
        self.events += events;
        let first = trace.ticks_to_msec(skipped.first_ticks.load(Relaxed));
        let last = trace.ticks_to_msec(skipped.last_ticks.load(Relaxed));
        self.first_ms = Some(self.first_ms.map_or(first, |f| f.min(first)));
        self.last_ms = self.last_ms.max(last);
    }

    /// The analysis of the events taken, for the trace named `file`.
    pub fn finish(self, file: &str) -> Analysis {
        let duration_ms = self.first_ms.map_or(0.0, |first| self.last_ms - first);
        let s = self.sections;
        let mut missing = Vec::new();
        let mut section = |wanted: bool, events: u64, name: &'static str, collect: &'static str| {
            if wanted && events == 0 {
                missing.push(Missing {
                    section: name,
                    collect,
                });
            }
            wanted && events > 0
        };
        let gc = section(s.gc, self.gc.events, "gc", "--profile gc");
        let allocations = section(
            s.allocations,
            self.allocations.events,
            "allocations",
            "--profile gc (GC/AllocationTick is written at Verbose)",
        );
        let jit = section(
            s.jit,
            self.jit.events,
            "jit",
            "--providers Microsoft-Windows-DotNETRuntime:0x10:Verbose",
        );
        let contention = section(
            s.contention,
            self.contention.events,
            "contention",
            "--providers Microsoft-Windows-DotNETRuntime:0x4000:Informational",
        );
        let exceptions = section(
            s.exceptions,
            self.exceptions.events,
            "exceptions",
            "--providers Microsoft-Windows-DotNETRuntime:0x8000:Informational",
        );
        let threadpool = section(
            s.threadpool,
            self.threadpool.events,
            "threadpool",
            "--providers Microsoft-Windows-DotNETRuntime:0x10000:Informational",
        );
        let offcpu = section(
            s.offcpu,
            self.offcpu.events,
            "offcpu",
            "--profile off-cpu (Rust programs that register eventpipe_profiler::cpu), or \
             eptrace record --off-cpu (any Linux program)",
        );
        section(
            s.async_polls,
            self.async_events,
            "async",
            "--profile async (Rust programs with futures marked #[profiled])",
        );
        let mut analysis = Analysis {
            file: file.to_owned(),
            duration_ms,
            events: self.events,
            findings: Vec::new(),
            gc: gc.then(|| self.gc.finish(duration_ms)),
            allocations: allocations.then(|| self.allocations.finish()),
            jit: jit.then(|| self.jit.finish()),
            contention: contention.then(|| self.contention.finish(duration_ms)),
            exceptions: exceptions.then(|| self.exceptions.finish(duration_ms)),
            threadpool: threadpool.then(|| self.threadpool.finish()),
            offcpu: offcpu.then(|| self.offcpu.finish()),
            async_polls: None,
            async_events: if s.async_polls { self.async_events } else { 0 },
            missing,
        };
        analysis.findings = findings::find(&analysis);
        analysis
    }
}
