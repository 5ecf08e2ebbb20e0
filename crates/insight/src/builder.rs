//! Turning a trace into a [`Profile`]: which events are samples, on which thread, with what
//! weight, and their stacks symbolized.
//!
//! One pass over the trace: events that describe code feed the [`Symbolizer`]; events with
//! a stack are kept as samples of raw addresses (distinct stacks interned, so memory grows
//! with distinct stacks, not samples). Rundown arrives at the end of a trace, so addresses
//! are resolved only in [`ProfileBuilder::finish`], once per distinct address.
//!
//! The async profiler's events feed an [`AsyncTraceBuilder`]. When the trace has them, a
//! CPU sample taken inside an instrumented future's poll (a nonzero `AsyncContext`) gets
//! that poll's async callstack spliced into its native stack (`async_stacks.rs` says
//! where); [`ProfileBuilder::async_stacks`] turns that off. Poll spans arrive in buffers
//! written after the samples they contain, so this too happens in `finish`.

use std::collections::HashMap;

use crate::hash::FastHash;

/// Raw stack ids by the stack's bytes.
type StackIds = HashMap<Box<[u8]>, u32, FastHash>;

use nettrace::source::Input;
use nettrace::{Event, TraceInfo, TraceReader};

use crate::async_stacks;
use crate::async_trace::{AsyncFrameId, AsyncTrace, AsyncTraceBuilder, ContextId};
use crate::profile::{Frame, FrameKind, LinesId, Profile, Sample, SampleUnit, StackId};
use crate::runtime_samples::RuntimeSample;
use crate::thread_time;
use eventpipe_symbols::{rundown_thread, Symbolizer};

/// .NET's sample profiler: one stack per managed thread per millisecond.
pub const DOTNET_SAMPLE_PROFILER: &str = "Microsoft-DotNETCore-SampleProfiler";
/// This project's CPU sampler provider.
pub const CPU_SAMPLER_PROVIDER: &str = "EventPipeRs-CpuSampler";
pub use eventpipe_heap::live_heap::ALLOCATION_PROVIDER;

/// Which events a profile is made of.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SampleSelection {
    /// CPU samples if the trace has any, else .NET thread time, else allocation samples,
    /// else every event with a stack.
    #[default]
    Auto,
    /// CPU samples (this project's sampler, `Universal.Events/cpu`). A trace with only
    /// .NET samples, which measure thread time and not CPU time, gives its thread time,
    /// named so, with a note.
    Cpu,
    /// .NET's sample profiler as thread time: every sample, running managed code or outside
    /// it (waiting, or in native code), each weighing the time it stands for on its thread
    /// (PerfView's "Thread Time" view); the samples outside managed code end in the frame
    /// [`EXTERNAL_CODE_FRAME`].
    ThreadTime,
    /// .NET's sample profiler, only the samples taken while the thread ran managed code,
    /// each weighing the time it stands for.
    ManagedCode,
    /// Off-CPU time: where threads waited, each sample weighing the wall time its thread
    /// spent waiting in its stack (this project's CPU sampler with `OffCpu=1`).
    OffCpu,
    /// Allocation samples only, weighted by the bytes each stands for: this project's
    /// allocation profiler's `AllocationSample`s, or the .NET runtime's
    /// `GC/AllocationTick`s (about 100 KB each), ending in the type allocated.
    Allocations,
    /// .NET lock contention: each `Contention/Start`'s stack, weighted by how long the
    /// thread waited (to its `Contention/Stop`, or its `DurationNs` on .NET 8+).
    Contention,
    /// .NET exceptions: each `Exception/Start`'s throw stack, one each, ending in the type
    /// thrown.
    Exceptions,
    /// The live heap: the `LiveAllocation` events of the trace's last heap profile (highest
    /// `Snapshot`), weighted by the bytes each stands for; in a trace without one, the
    /// allocation samples that no `FreeSample` of their address ended.
    LiveHeap,
    /// Every event that carries a stack, one each.
    EventsWithStacks,
    /// Events with a stack named `Provider/Event` or `Event` (case-insensitive).
    Event(String),
}

impl SampleSelection {
    /// What the selected samples are, in words: `CPU samples`, `allocation samples`.
    pub fn describe(&self) -> String {
        match self {
            SampleSelection::Auto => "samples".into(),
            SampleSelection::Cpu => "CPU samples".into(),
            SampleSelection::ThreadTime => ".NET thread-time samples".into(),
            SampleSelection::ManagedCode => ".NET samples in managed code".into(),
            SampleSelection::OffCpu => "off-CPU samples".into(),
            SampleSelection::Contention => "lock contentions".into(),
            SampleSelection::Exceptions => "exceptions".into(),
            SampleSelection::Allocations => "allocation samples".into(),
            SampleSelection::LiveHeap => "live-heap samples".into(),
            SampleSelection::EventsWithStacks => "events with a stack".into(),
            SampleSelection::Event(name) => format!("{name} events with a stack"),
        }
    }

    /// The `--samples` word that selects this.
    pub fn keyword(&self) -> String {
        match self {
            SampleSelection::Auto => "auto".into(),
            SampleSelection::Cpu => "cpu".into(),
            SampleSelection::ThreadTime => "thread-time".into(),
            SampleSelection::ManagedCode => "managed".into(),
            SampleSelection::OffCpu => "offcpu".into(),
            SampleSelection::Contention => "contention".into(),
            SampleSelection::Exceptions => "exceptions".into(),
            SampleSelection::Allocations => "alloc".into(),
            SampleSelection::LiveHeap => "live-heap".into(),
            SampleSelection::EventsWithStacks => "events".into(),
            SampleSelection::Event(name) => name.clone(),
        }
    }
}

/// The leaf frame of a .NET sample taken while its thread was outside managed code:
/// waiting, or running native code the runtime cannot see into.
pub const EXTERNAL_CODE_FRAME: &str = "[outside managed code: waiting or native]";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Cpu,
    /// .NET's sample profiler.
    DotnetSamples,
    /// The CPU sampler's off-CPU samples with the stack waited in.
    OffCpu,
    Allocations,
    LiveHeap,
    /// .NET lock waits.
    Contention,
    /// .NET exceptions thrown.
    Exceptions,
    Events,
}

/// A value per [`Kind`], looked up by index: the builder touches two of these for every
/// sample, where a hash map cost a hash and a probe each time.
#[derive(Debug)]
struct PerKind<T>([Option<T>; 8]);

impl<T> Default for PerKind<T> {
    fn default() -> Self {
        PerKind([None, None, None, None, None, None, None, None])
    }
}

impl<T> PerKind<T> {
    fn get(&self, kind: Kind) -> Option<&T> {
        self.0[kind as usize].as_ref()
    }

    fn contains_key(&self, kind: Kind) -> bool {
        self.0[kind as usize].is_some()
    }

    fn or_default(&mut self, kind: Kind) -> &mut T
    where
        T: Default,
    {
        self.0[kind as usize].get_or_insert_with(T::default)
    }

    fn remove(&mut self, kind: Kind) -> Option<T> {
        self.0[kind as usize].take()
    }

    /// Every value, in the kinds' order, leaving none.
    fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.0.iter_mut().filter_map(Option::take)
    }
}

#[derive(Debug, Clone, Copy)]
/// Kept for every sample until `finish`, millions of them: its time is kept once, as
/// ticks, and its stack as a 32-bit index.
struct RawSample {
    thread: u64,
    /// The event's timestamp, in the trace's ticks (the async profiler's clock).
    ticks: i64,
    weight: u64,
    /// Index into `raw_stack_list`.
    stack: u32,
    /// A CPU sample's `AsyncContext` (0: none, or a trace that predates the field).
    async_ctx: u64,
    /// The frame after the stack's leaf: [`LEAF_NONE`], [`LEAF_EXTERNAL`] (a .NET sample
    /// taken outside managed code), or a name in `leaf_names` (at `leaf - 2`): the type a
    /// runtime sample allocated or threw.
    leaf: u32,
}

/// [`RawSample::leaf`]: nothing after the leaf.
const LEAF_NONE: u32 = 0;
/// [`RawSample::leaf`]: [`EXTERNAL_CODE_FRAME`].
const LEAF_EXTERNAL: u32 = 1;

/// Builds a [`Profile`] from events fed one at a time.
#[derive(Debug)]
pub struct ProfileBuilder {
    selection: SampleSelection,
    symbolizer: Symbolizer,
    /// Distinct (process, leaf-first addresses): addresses mean different code in
    /// different processes.
    /// Keyed by the stack's bytes as the trace holds them (no per-event decoding or
    /// allocation), per process.
    raw_stacks: HashMap<Option<u64>, StackIds, FastHash>,
    raw_stack_list: Vec<(Option<u64>, Vec<u64>)>,
    samples: PerKind<Vec<RawSample>>,
    /// Samples of each kind in the trace, wanted or not.
    seen: PerKind<usize>,
    thread_names: HashMap<u64, String>,
    thread_pids: HashMap<u64, u64, FastHash>,
    /// The thread of the last event whose process was noted in `thread_pids`.
    last_thread: Option<u64>,
    cpu_interval_ns: u64,
    /// The trace's ticks per second (0 until an event is seen).
    tick_frequency: i64,
    first_ms: Option<f64>,
    /// The trace's clock (its first event's), for the samples' times in `finish`.
    clock: Option<TraceInfo>,
    last_ms: f64,
    /// Allocation samples (their index in `samples[Allocations]`) and `FreeSample`s (`None`)
    /// by address and timestamp, in file order. Matched in time order at the end: a trace
    /// orders only each thread's own events, and memory is often freed on another thread
    /// than the one that allocated it.
    address_events: Vec<(u64, i64, Option<usize>)>,
    /// The `Snapshot` of the `LiveAllocation` samples kept.
    live_snapshot: u64,
    /// The async profiler's events.
    async_trace: AsyncTraceBuilder,
    /// Whether CPU samples get their async callstacks.
    async_stacks: bool,
    /// The names [`RawSample::leaf`] points at, and their ids.
    leaf_names: Vec<String>,
    leaf_ids: HashMap<String, u32>,
    /// Each thread's lock wait in progress: its `Contention/Start`'s stack and time.
    contention_starts: HashMap<u64, (u32, i64), FastHash>,
}

/// A profile and what could not be symbolized.
#[derive(Debug)]
pub struct BuiltProfile {
    /// The profile.
    pub profile: Profile,
    /// One line per module that could not be symbolized, and why; then how many samples
    /// have frames that could not be named.
    pub notes: Vec<String>,
    /// The number of native modules and .NET methods the trace described.
    pub modules: usize,
    /// The number of .NET methods the trace described.
    pub methods: usize,
    /// The async profiler's data, when the trace has any.
    pub async_trace: Option<AsyncTrace>,
    /// Each selection that has samples in the trace, with how many: what to ask for
    /// when the profile chosen is empty.
    pub available: Vec<(SampleSelection, usize)>,
    /// The binaries opened to symbolize it, for the next builder
    /// ([`ProfileBuilder::with_binaries`]).
    pub binaries: eventpipe_symbols::BinaryCache,
}

/// A distinct symbolized stack: the raw stack, the async callstack spliced in, and the
/// frame after its leaf ([`RawSample::leaf`]).
type StackKey = (u32, Option<Vec<AsyncFrameId>>, u32);

impl ProfileBuilder {
    /// A builder selecting samples by `selection`.
    pub fn new(selection: SampleSelection) -> ProfileBuilder {
        ProfileBuilder {
            selection,
            symbolizer: Symbolizer::new(),
            raw_stacks: HashMap::default(),
            raw_stack_list: Vec::new(),
            samples: PerKind::default(),
            seen: PerKind::default(),
            thread_names: HashMap::new(),
            thread_pids: HashMap::default(),
            last_thread: None,
            cpu_interval_ns: 1_000_000,
            tick_frequency: 0,
            first_ms: None,
            clock: None,
            last_ms: 0.0,
            address_events: Vec::new(),
            live_snapshot: 0,
            async_trace: AsyncTraceBuilder::new(),
            async_stacks: true,
            leaf_names: Vec::new(),
            leaf_ids: HashMap::new(),
            contention_starts: HashMap::default(),
        }
    }

    /// Symbolizes with `cache`'s opened binaries (and adds to it); [`BuiltProfile::binaries`]
    /// hands it back.
    pub fn with_binaries(mut self, cache: eventpipe_symbols::BinaryCache) -> ProfileBuilder {
        self.symbolizer = std::mem::take(&mut self.symbolizer).with_binaries(cache);
        self
    }

    /// Whether CPU samples taken inside an instrumented future's poll show its async
    /// callstack (the default; it applies only to traces with async-profiler data).
    pub fn async_stacks(mut self, on: bool) -> ProfileBuilder {
        self.async_stacks = on;
        self
    }

    /// Feeds one event.
    pub fn observe(&mut self, event: &Event<'_>) {
        let time_ms = event.timestamp_msec();
        if self.first_ms.is_none() {
            let trace = event.trace;
            self.clock = Some(trace.clone());
            self.tick_frequency = trace.tick_frequency;
            // The sampling interval the trace states (nanoseconds, in .NET's and
            // one-collect's traces), else 1 ms.
            if let Some(ns) = trace.expected_cpu_sampling_rate.filter(|&ns| ns > 0) {
                self.cpu_interval_ns = ns;
            }
        }
        self.first_ms.get_or_insert(time_ms);
        self.last_ms = self.last_ms.max(time_ms);
        let tid = event.thread_id();
        if let Some(name) = event.thread_name() {
            self.thread_names
                .entry(tid)
                .or_insert_with(|| name.to_owned());
        }
        if let Some(pid) = event.process_id() {
            // Consecutive events often come from one thread: its entry is then there already.
            if self.last_thread != Some(tid) {
                self.thread_pids.entry(tid).or_insert(pid);
                self.last_thread = Some(tid);
            }
        }
        if self.async_trace.observe(event) {
            return;
        }
        let md = event.metadata;
        if let Some((id, name)) = rundown_thread(event) {
            self.thread_names.insert(id, name);
            return;
        }
        if self.symbolizer.observe(event) {
            return;
        }
        if md.provider == ALLOCATION_PROVIDER && md.event_name == "FreeSample" {
            if let Some(address) = AllocFields::of(event).address {
                self.address_events
                    .push((address, event.header.timestamp, None));
            }
            return;
        }
        let runtime = self.runtime_sample(event);
        if let Some(RuntimeSample::ContentionStop { duration_ns }) = runtime {
            self.end_contention(event, duration_ns);
            return;
        }
        let stack_bytes = event.stack.unwrap_or(&[]);
        if stack_bytes.len() < event.trace.pointer_size.max(1) as usize {
            return;
        }
        let (kind, weight, alloc) = match &runtime {
            Some(RuntimeSample::Allocation { bytes, .. }) => {
                (Kind::Allocations, *bytes, AllocFields::default())
            }
            Some(RuntimeSample::ContentionStart) => (Kind::Contention, 0, AllocFields::default()),
            Some(RuntimeSample::Exception { .. }) => (Kind::Exceptions, 1, AllocFields::default()),
            _ => self.classify(event),
        };
        let cpu = CpuFields::of(event);
        let kind = if cpu.waiting { Kind::OffCpu } else { kind };
        let weight = if matches!(kind, Kind::Cpu | Kind::OffCpu) && !is_perf_wait(event) {
            // Nanoseconds: the periods the capture stands for.
            let period_ns = cpu.period_ns.unwrap_or(self.cpu_interval_ns);
            if cpu.period_ns.is_some() {
                self.cpu_interval_ns = period_ns;
            }
            period_ns.saturating_mul(cpu.periods)
        } else {
            weight
        };
        if cpu.blocked {
            return;
        }
        *self.seen.or_default(kind) += 1;
        if !self.wanted(kind, event) {
            return;
        }
        if kind == Kind::LiveHeap {
            // Keep only the last heap profile.
            let snapshot = alloc.snapshot.unwrap_or(0);
            if snapshot < self.live_snapshot {
                return;
            }
            if snapshot > self.live_snapshot {
                self.live_snapshot = snapshot;
                self.samples.remove(Kind::LiveHeap);
            }
        }
        if kind == Kind::Allocations {
            if let Some(address) = alloc.address {
                let index = self.samples.get(kind).map_or(0, Vec::len);
                self.address_events
                    .push((address, event.header.timestamp, Some(index)));
            }
        }
        let pid = event.process_id();
        let known = self.raw_stacks.entry(pid).or_default();
        let stack = match known.get(stack_bytes) {
            Some(&id) => id,
            None => {
                // More distinct stacks than a u32 counts would not fit in memory anyway.
                let Ok(id) = u32::try_from(self.raw_stack_list.len()) else {
                    return;
                };
                self.raw_stack_list.push((pid, event.stack_ips().collect()));
                known.insert(stack_bytes.into(), id);
                id
            }
        };
        if kind == Kind::Contention {
            // Weighed, and kept, when the wait ends.
            self.contention_starts
                .insert(tid, (stack, event.header.timestamp));
            return;
        }
        let leaf = if kind == Kind::DotnetSamples && dotnet_sample_is_external(event) {
            LEAF_EXTERNAL
        } else {
            runtime
                .and_then(|r| r.leaf())
                .map_or(LEAF_NONE, |name| self.leaf_id(name))
        };
        self.samples.or_default(kind).push(RawSample {
            thread: tid,
            ticks: event.header.timestamp,
            weight,
            stack,
            async_ctx: cpu.async_context,
            leaf,
        });
    }

    /// The runtime sample `event` is, unless the selection takes events by name (or all
    /// events with stacks), one each.
    fn runtime_sample(&self, event: &Event<'_>) -> Option<RuntimeSample> {
        match self.selection {
            SampleSelection::Event(_) | SampleSelection::EventsWithStacks => None,
            _ => RuntimeSample::of(event),
        }
    }

    /// A `Contention/Stop`: the thread's wait, begun at its `Contention/Start`, becomes a
    /// sample weighing its length (the runtime's `DurationNs` where it writes one).
    fn end_contention(&mut self, event: &Event<'_>, duration_ns: Option<f64>) {
        let tid = event.thread_id();
        let Some((stack, start_ticks)) = self.contention_starts.remove(&tid) else {
            return;
        };
        let ns = duration_ns
            .filter(|d| d.is_finite() && *d >= 0.0)
            .map_or_else(
                || {
                    let ticks = event.header.timestamp.saturating_sub(start_ticks).max(0);
                    (ticks as f64 * 1e9 / self.tick_frequency.max(1) as f64) as u64
                },
                |d| d as u64,
            );
        self.samples.or_default(Kind::Contention).push(RawSample {
            thread: tid,
            ticks: start_ticks,
            weight: ns,
            stack,
            async_ctx: 0,
            leaf: LEAF_NONE,
        });
    }

    /// The id of the leaf frame named `name`.
    fn leaf_id(&mut self, name: String) -> u32 {
        if let Some(&id) = self.leaf_ids.get(&name) {
            return id;
        }
        let id = self.leaf_names.len() as u32 + 2;
        self.leaf_names.push(name.clone());
        self.leaf_ids.insert(name, id);
        id
    }

    /// The allocation samples not ended by a `FreeSample`: those whose address has no later
    /// event, in time order (a later allocation at the address means its free was missed).
    fn unfreed(&mut self) -> Vec<usize> {
        let mut events = std::mem::take(&mut self.address_events);
        // Stable: equal timestamps keep file order.
        events.sort_by_key(|&(address, ticks, _)| (address, ticks));
        events
            .iter()
            .enumerate()
            .filter_map(|(i, &(address, _, alloc))| {
                let last = events.get(i + 1).is_none_or(|next| next.0 != address);
                alloc.filter(|_| last)
            })
            .collect()
    }

    fn classify(&self, event: &Event<'_>) -> (Kind, u64, AllocFields) {
        let md = event.metadata;
        let provider = md.provider.as_str();
        if provider == DOTNET_SAMPLE_PROFILER {
            // Weighed in `finish`, from the time to the thread's next sample.
            return (Kind::DotnetSamples, 0, AllocFields::default());
        }
        if provider == CPU_SAMPLER_PROVIDER
            || (provider == "Universal.Events" && md.event_name == "cpu")
        {
            return (Kind::Cpu, 1, AllocFields::default());
        }
        if is_perf_wait(event) {
            // `eptrace record --off-cpu`: a wait's length in ns.
            let waited = event
                .decode_payload()
                .unwrap_or_default()
                .into_iter()
                .find(|(name, _)| *name == "Value")
                .and_then(|(_, v)| v.as_u64())
                .unwrap_or(0);
            return (Kind::OffCpu, waited, AllocFields::default());
        }
        if provider == ALLOCATION_PROVIDER && md.fields.iter().any(|f| f.name == "Weight") {
            let alloc = AllocFields::of(event);
            let weight = alloc.weight.unwrap_or(0);
            if md.event_name == "LiveAllocation" {
                return (Kind::LiveHeap, weight, alloc);
            }
            return (Kind::Allocations, weight, alloc);
        }
        (Kind::Events, 1, AllocFields::default())
    }

    fn wanted(&self, kind: Kind, event: &Event<'_>) -> bool {
        match &self.selection {
            SampleSelection::Auto => true,
            SampleSelection::Cpu => matches!(kind, Kind::Cpu | Kind::DotnetSamples),
            SampleSelection::ThreadTime | SampleSelection::ManagedCode => {
                kind == Kind::DotnetSamples
            }
            SampleSelection::OffCpu => kind == Kind::OffCpu,
            SampleSelection::Contention => kind == Kind::Contention,
            SampleSelection::Exceptions => kind == Kind::Exceptions,
            SampleSelection::Allocations => kind == Kind::Allocations,
            // Allocation samples too, for a trace without a heap profile.
            SampleSelection::LiveHeap => matches!(kind, Kind::LiveHeap | Kind::Allocations),
            SampleSelection::EventsWithStacks => true,
            SampleSelection::Event(name) => {
                let md = event.metadata;
                name.eq_ignore_ascii_case(&md.qualified_name())
                    || name.eq_ignore_ascii_case(&md.event_name)
                    || name.eq_ignore_ascii_case(&md.display_name)
            }
        }
    }

    /// Which samples the selection takes, and what the profile is called and counts.
    fn choose(&self) -> (Option<Kind>, SampleUnit, String) {
        let has = |kind| self.samples.contains_key(kind);
        let cpu = (
            Some(Kind::Cpu),
            SampleUnit::CpuTime,
            "CPU samples".to_owned(),
        );
        let thread_time = (
            Some(Kind::DotnetSamples),
            SampleUnit::ThreadTime,
            ".NET thread time (managed code, and outside it: waiting or native)".to_owned(),
        );
        let allocations = (
            Some(Kind::Allocations),
            SampleUnit::Bytes,
            "Allocations".to_owned(),
        );
        match &self.selection {
            SampleSelection::Auto if has(Kind::Cpu) => cpu,
            SampleSelection::Auto if has(Kind::DotnetSamples) => thread_time,
            SampleSelection::Auto if has(Kind::Allocations) => allocations,
            SampleSelection::Auto => (
                Some(Kind::Events),
                SampleUnit::Events,
                "Events with stacks".to_owned(),
            ),
            SampleSelection::Cpu if !has(Kind::Cpu) && has(Kind::DotnetSamples) => thread_time,
            SampleSelection::Cpu => cpu,
            SampleSelection::ThreadTime => thread_time,
            SampleSelection::ManagedCode => (
                Some(Kind::DotnetSamples),
                SampleUnit::ThreadTime,
                ".NET thread time in managed code".to_owned(),
            ),
            SampleSelection::OffCpu => (
                Some(Kind::OffCpu),
                SampleUnit::OffCpuTime,
                "Off-CPU time (where threads waited)".to_owned(),
            ),
            SampleSelection::Contention => (
                Some(Kind::Contention),
                SampleUnit::LockWait,
                "Lock contention (time waiting)".to_owned(),
            ),
            SampleSelection::Exceptions => (
                Some(Kind::Exceptions),
                SampleUnit::Events,
                "Exceptions thrown".to_owned(),
            ),
            SampleSelection::Allocations => allocations,
            SampleSelection::LiveHeap => (
                Some(Kind::LiveHeap),
                SampleUnit::LiveBytes,
                "Live heap".to_owned(),
            ),
            SampleSelection::EventsWithStacks => {
                (None, SampleUnit::Events, "Events with stacks".to_owned())
            }
            SampleSelection::Event(name) => (None, SampleUnit::Events, format!("{name} stacks")),
        }
    }

    /// The other selections that would give samples, and how many.
    fn available(&self) -> Vec<(SampleSelection, usize)> {
        let count = |kind| self.seen.get(kind).copied().unwrap_or(0);
        [
            (SampleSelection::Cpu, count(Kind::Cpu)),
            (SampleSelection::ThreadTime, count(Kind::DotnetSamples)),
            (SampleSelection::OffCpu, count(Kind::OffCpu)),
            (SampleSelection::Contention, count(Kind::Contention)),
            (SampleSelection::Exceptions, count(Kind::Exceptions)),
            (SampleSelection::Allocations, count(Kind::Allocations)),
            (SampleSelection::LiveHeap, count(Kind::LiveHeap)),
            (SampleSelection::EventsWithStacks, count(Kind::Events)),
        ]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .collect()
    }

    /// Symbolizes and assembles the profile.
    pub fn finish(mut self) -> BuiltProfile {
        let available = self.available();
        let (kind, unit, name) = self.choose();
        let mut notes = Vec::new();
        if self.selection == SampleSelection::Cpu && kind == Some(Kind::DotnetSamples) {
            notes.push(
                ".NET's sample profiler records thread time, not CPU time: a sample stands for \
                 the time to its thread's next one, running or waiting; this is that thread \
                 time (--samples managed keeps only the time in managed code)"
                    .to_owned(),
            );
        }
        let mut raw: Vec<RawSample> = match kind {
            Some(Kind::LiveHeap) if !self.samples.contains_key(Kind::LiveHeap) => {
                // No heap profile in the trace: the allocation samples never freed.
                let allocations = self.samples.remove(Kind::Allocations).unwrap_or_default();
                let mut live = self.unfreed();
                live.sort_unstable();
                live.into_iter()
                    .filter_map(|i| allocations.get(i).copied())
                    .collect()
            }
            Some(Kind::DotnetSamples) => {
                let mut samples = self.samples.remove(Kind::DotnetSamples).unwrap_or_default();
                let times: Vec<(u64, i64)> = samples.iter().map(|s| (s.thread, s.ticks)).collect();
                let weights = thread_time::weights(&times, self.tick_frequency);
                for (sample, weight) in samples.iter_mut().zip(weights) {
                    sample.weight = weight;
                }
                if self.selection == SampleSelection::ManagedCode {
                    samples.retain(|s| s.leaf != LEAF_EXTERNAL);
                }
                samples
            }
            Some(kind) => self.samples.remove(kind).unwrap_or_default(),
            None => self.samples.drain().flatten().collect(),
        };
        // Stable: samples of one tick keep the order they came in.
        raw.sort_by_key(|s| s.ticks);
        let trim = match unit {
            SampleUnit::Events => Trim::Runtime,
            SampleUnit::Bytes | SampleUnit::LiveBytes => Trim::Allocator,
            _ => Trim::Nothing,
        };
        let mut profile = Profile::new(name, unit);
        if kind == Some(Kind::Cpu) {
            profile.sampling_interval_ns = Some(self.cpu_interval_ns);
        }
        profile.start_ms = self.first_ms.unwrap_or(0.0);
        profile.end_ms = self.last_ms;
        let async_trace = std::mem::take(&mut self.async_trace).finish();
        let splice_from = async_trace.as_ref().filter(|_| self.async_stacks);
        let mut unplaced = 0u64;
        // A native stack with (or without) an async callstack spliced in.
        let mut stack_ids: HashMap<StackKey, (StackId, Option<LinesId>), FastHash> =
            HashMap::default();
        // The ids of each raw stack without an async callstack or a named leaf, at
        // `2 × raw id + leaf`.
        let mut plain_ids: Vec<Option<(StackId, Option<LinesId>)>> =
            vec![None; self.raw_stack_list.len() * 2];
        // Each thread's index in the profile: its name and process are known by now, so
        // one look-up per sample instead of three.
        let mut thread_ids: HashMap<u64, usize, FastHash> = HashMap::default();
        fn thread_index(
            profile: &mut Profile,
            thread_ids: &mut HashMap<u64, usize, FastHash>,
            builder: &ProfileBuilder,
            thread: u64,
        ) -> usize {
            *thread_ids.entry(thread).or_insert_with(|| {
                profile.intern_thread(
                    thread,
                    builder.thread_names.get(&thread).map(String::as_str),
                    builder.thread_pids.get(&thread).copied(),
                )
            })
        }
        for sample in raw {
            let async_frames = match splice_from {
                Some(t) if sample.async_ctx != 0 => {
                    let found =
                        t.callstack_at(sample.thread, ContextId(sample.async_ctx), sample.ticks);
                    unplaced += u64::from(found.is_none());
                    found
                }
                _ => None,
            };
            // Without an async callstack (most samples), the ids are found by index.
            let plain_slot = (async_frames.is_none() && sample.leaf <= LEAF_EXTERNAL)
                .then(|| sample.stack as usize * 2 + sample.leaf as usize);
            if let Some(&Some(ids)) = plain_slot.and_then(|slot| plain_ids.get(slot)) {
                let thread = thread_index(&mut profile, &mut thread_ids, &self, sample.thread);
                profile.push_sample(Sample {
                    thread,
                    time_ms: self.time_ms(sample.ticks) - profile.start_ms,
                    weight: sample.weight,
                    stack: ids.0,
                    lines: ids.1,
                });
                continue;
            }
            let key = (sample.stack, async_frames, sample.leaf);
            let (stack, lines) = match stack_ids.get(&key) {
                Some(&ids) => ids,
                None => {
                    let mut frames = self.symbolize_stack(sample.stack as usize, trim);
                    match sample.leaf {
                        LEAF_NONE => {}
                        LEAF_EXTERNAL => {
                            frames.push(Frame::named(EXTERNAL_CODE_FRAME, FrameKind::ThreadState))
                        }
                        named => frames.push(Frame::named(
                            self.leaf_names[named as usize - 2].clone(),
                            FrameKind::HeapType,
                        )),
                    }
                    if let (Some(t), Some(ids)) = (splice_from, &key.1) {
                        let spliced = ids.iter().map(|&id| async_stacks::async_frame(t, id));
                        frames = async_stacks::splice(frames, spliced.collect());
                    }
                    let lines: Vec<u32> = frames.iter().map(|f| f.line.unwrap_or(0)).collect();
                    let frame_ids: Vec<usize> = frames
                        .into_iter()
                        .map(|f| profile.intern_frame(f))
                        .collect();
                    let ids = (profile.intern_stack(frame_ids), profile.intern_lines(lines));
                    match plain_slot.and_then(|slot| plain_ids.get_mut(slot)) {
                        Some(slot) => *slot = Some(ids),
                        None => {
                            stack_ids.insert(key, ids);
                        }
                    }
                    ids
                }
            };
            let thread = thread_index(&mut profile, &mut thread_ids, &self, sample.thread);
            profile.push_sample(Sample {
                thread,
                time_ms: self.time_ms(sample.ticks) - profile.start_ms,
                weight: sample.weight,
                stack,
                lines,
            });
        }
        profile.end_ms -= profile.start_ms;
        profile.start_ms = 0.0;
        let named: std::collections::HashSet<&str> = profile
            .frames
            .iter()
            .filter_map(|f| f.module.as_deref())
            .collect();
        let build_ids = self
            .symbolizer
            .build_ids()
            .into_iter()
            .filter(|(module, _)| named.contains(module.as_str()))
            .collect();
        profile.build_ids = build_ids;
        profile.main_module = self
            .symbolizer
            .main_module()
            .filter(|module| named.contains(module.as_str()));
        notes.extend(self.symbolizer.notes());
        notes.extend(crate::profile::unnamed_frames_note(&profile));
        notes.extend(crate::profile::truncated_stacks_note(&profile));
        if unplaced > 0 {
            notes.push(format!(
                "{unplaced} CPU samples name an async context none of whose polls the async \
                 profiler's data shows (lost buffers?); they keep their native stacks"
            ));
        }
        BuiltProfile {
            notes,
            available,
            modules: self.symbolizer.modules().len(),
            methods: self.symbolizer.method_count(),
            async_trace,
            profile,
            binaries: self.symbolizer.take_binaries(),
        }
    }

    /// The root-first frames of raw stack `id`.
    /// Milliseconds since the trace's sync time, as [`Event::timestamp_msec`] gives them.
    fn time_ms(&self, ticks: i64) -> f64 {
        self.clock.as_ref().map_or(0.0, |t| t.ticks_to_msec(ticks))
    }

    fn symbolize_stack(&mut self, id: usize, trim: Trim) -> Vec<Frame> {
        let (pid, ips) = std::mem::take(&mut self.raw_stack_list[id]);
        let mut leaf_first: Vec<Frame> = Vec::with_capacity(ips.len());
        for (i, &ip) in ips.iter().enumerate() {
            let frames = self.symbolizer.resolve_in(pid, ip, i > 0);
            // A run of `[unknown]` becomes one below; its repeats are not copied first.
            // (Never a runtime frame either, so trimming below is unchanged.)
            if let [frame] = frames {
                if frame.kind == FrameKind::Unknown && leaf_first.last() == Some(frame) {
                    continue;
                }
            }
            leaf_first.extend(frames.iter().cloned());
        }
        self.raw_stack_list[id] = (pid, ips);
        match trim {
            Trim::Runtime => {
                // The stack of an ordinary event starts inside the tracing runtime that
                // captured it; those frames say nothing about the program.
                if let Some(last_runtime) = leaf_first.iter().rposition(is_runtime_frame) {
                    if last_runtime + 1 < leaf_first.len() {
                        leaf_first.drain(..=last_runtime);
                    }
                }
            }
            Trim::Allocator => {
                // An allocation's stack starts in the allocator and the container code
                // that called it; the allocation's site is the first frame past them.
                let machinery = leaf_first
                    .iter()
                    .take_while(|f| is_allocator_frame(f))
                    .count();
                if machinery < leaf_first.len() {
                    leaf_first.drain(..machinery);
                }
            }
            Trim::Nothing => {}
        }
        // Runs of `[unknown]` say one thing: "code we cannot name"; bare addresses stay.
        leaf_first.dedup_by(|a, b| a.kind == FrameKind::Unknown && a == b);
        leaf_first.reverse();
        if leaf_first.is_empty() {
            leaf_first.push(Frame::named("[unknown]", FrameKind::Unknown));
        }
        leaf_first
    }
}

/// Whether a .NET sample-profiler event says its thread was outside managed code (`Type`
/// 1, External; 2 is Managed).
fn dotnet_sample_is_external(event: &Event<'_>) -> bool {
    const EXTERNAL: u64 = 1;
    event
        .decode_payload()
        .ok()
        .and_then(|fields| fields.into_iter().find(|(name, _)| *name == "Type"))
        .and_then(|(_, value)| value.as_u64())
        == Some(EXTERNAL)
}

/// The fields of an allocation-provider event the builder uses, decoded once.
#[derive(Debug, Default, Clone, Copy)]
struct AllocFields {
    weight: Option<u64>,
    address: Option<u64>,
    snapshot: Option<u64>,
}

impl AllocFields {
    fn of(event: &Event<'_>) -> AllocFields {
        let mut out = AllocFields::default();
        for (name, value) in event.decode_payload().unwrap_or_default() {
            let slot = match name {
                "Weight" => &mut out.weight,
                "Address" => &mut out.address,
                "Snapshot" => &mut out.snapshot,
                _ => continue,
            };
            *slot = value.as_u64();
        }
        out
    }
}

/// Whether `event` is a wait off CPU as `eptrace record --off-cpu` writes it
/// (`Universal.Events/offcpu`, its length in ns as `Value`).
fn is_perf_wait(event: &Event<'_>) -> bool {
    event.metadata.provider == "Universal.Events" && event.metadata.event_name == "offcpu"
}

/// The fields of this project's CPU sampler's `Sample` the builder uses, decoded once.
#[derive(Debug, Clone, Copy)]
struct CpuFields {
    /// The thread was waiting, not running (`State` 2): not CPU time.
    blocked: bool,
    /// Off-CPU time with the stack waited in (`State` 3).
    waiting: bool,
    /// The innermost instrumented future being polled (`AsyncContext`; absent before the
    /// async profiler, which reads as 0: none).
    async_context: u64,
    /// Sampling periods the sample stands for (`Periods`; absent before the field, when
    /// every event stood for one, and 1 for other providers' samples).
    periods: u64,
    /// The length of one period in nanoseconds (`PeriodNs`; absent before the field, when
    /// the trace's stated interval or 1 ms applies).
    period_ns: Option<u64>,
}

impl Default for CpuFields {
    fn default() -> Self {
        CpuFields {
            blocked: false,
            waiting: false,
            async_context: 0,
            periods: 1,
            period_ns: None,
        }
    }
}

impl CpuFields {
    fn of(event: &Event<'_>) -> CpuFields {
        const STATE_BLOCKED: u64 = 2;
        const STATE_WAITING: u64 = 3;
        let mut out = CpuFields::default();
        if event.metadata.provider != CPU_SAMPLER_PROVIDER {
            return out;
        }
        for (name, value) in event.decode_payload().unwrap_or_default() {
            match name {
                "State" => {
                    out.blocked = value.as_u64() == Some(STATE_BLOCKED);
                    out.waiting = value.as_u64() == Some(STATE_WAITING);
                }
                "AsyncContext" => out.async_context = value.as_u64().unwrap_or(0),
                // A sample of no period would weigh nothing: read it as one.
                "Periods" => out.periods = value.as_u64().unwrap_or(1).max(1),
                "PeriodNs" => out.period_ns = value.as_u64().filter(|&ns| ns > 0),
                _ => {}
            }
        }
        out
    }
}

/// The frames a profile's stacks leave out at their leaf end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trim {
    Nothing,
    /// The tracing runtime's, which captured an ordinary event's stack.
    Runtime,
    /// The allocation machinery's, between an allocation's site and the allocator.
    Allocator,
}

/// Frames of the allocation machinery between an allocation's site and the allocator:
/// Rust's `alloc` crate (`Vec`, `String`, `Box` and `RawVec` growing, `Global`), the global
/// allocator's shims, `std`'s and `core`'s allocator traits, and this project's profiling
/// allocator. An allocation profile starts at the site, as Go's heap profiles do.
fn is_allocator_frame(frame: &Frame) -> bool {
    const PREFIXES: &[&str] = &[
        "alloc::",
        "core::alloc::",
        "std::alloc::",
        "__rust_",
        "__rdl_",
        "__rg_",
        "eventpipe_profiler::alloc::",
    ];
    if frame.kind != FrameKind::Native {
        return false;
    }
    let name = frame.function.trim_start_matches('<');
    let in_machinery = |name: &str| PREFIXES.iter().any(|p| name.starts_with(p));
    // Or a trait of theirs implemented there: `<u8 as alloc::vec::..::SpecFromElem>::from_elem`.
    in_machinery(name)
        || name
            .split_once(" as ")
            .is_some_and(|(_, implemented)| in_machinery(implemented))
}

/// Frames of the machinery that captures an event's stack: the unwinder, this project's
/// runtime and its `tracing` layer, and `tracing`'s dispatch.
fn is_runtime_frame(frame: &Frame) -> bool {
    const PREFIXES: &[&str] = &[
        "backtrace::",
        "eventpipe::",
        "eventpipe_core::",
        "eventpipe_tracing::",
        "tracing::",
        "tracing_core::",
        "tracing_subscriber::",
    ];
    // Only native frames can be the machinery's: the name is not looked at for others.
    if frame.kind != FrameKind::Native {
        return false;
    }
    // A span guard's drop glue runs the layer too: `core::ptr::drop_in_place<tracing::..>`.
    let name = frame
        .function
        .trim_start_matches("core::ptr::drop_in_place");
    let name = name.trim_start_matches('<');
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Reads a whole trace into a profile.
pub fn build_profile<I: Input>(
    reader: &mut TraceReader<I>,
    selection: SampleSelection,
) -> nettrace::Result<BuiltProfile> {
    let mut builder = ProfileBuilder::new(selection);
    while let Some(event) = reader.next_event_ref()? {
        builder.observe(&event.to_event());
    }
    Ok(builder.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventpipe::{EventDescriptor, FieldKind, FieldSpec, Level, Output, Provider};

    static ALLOCATIONS: Provider = Provider::new(ALLOCATION_PROVIDER);
    const fn u64_field(name: &'static str) -> FieldSpec {
        FieldSpec {
            name,
            kind: FieldKind::U64,
        }
    }
    static SAMPLE: EventDescriptor = EventDescriptor::new(
        &ALLOCATIONS,
        1,
        0,
        "AllocationSample",
        Level::Informational,
        0,
        0,
        &[u64_field("Size"), u64_field("Weight"), u64_field("Address")],
    );
    static FREE: EventDescriptor = EventDescriptor::new(
        &ALLOCATIONS,
        2,
        0,
        "FreeSample",
        Level::Informational,
        0,
        0,
        &[u64_field("Address")],
    );
    static LIVE: EventDescriptor = EventDescriptor::new(
        &ALLOCATIONS,
        3,
        0,
        "LiveAllocation",
        Level::Informational,
        0,
        0,
        &[
            u64_field("Size"),
            u64_field("Weight"),
            u64_field("Address"),
            u64_field("Snapshot"),
        ],
    );

    /// As the profiler writes them: about the allocating thread, from its own.
    fn sample(weight: u64, address: u64, thread: u64) {
        SAMPLE.write_about_thread(thread, &[0x1000, 0x2000], |p| {
            p.put(&weight);
            p.put(&weight);
            p.put(&address);
        });
    }

    fn live(weight: u64, address: u64, snapshot: u64) {
        LIVE.write_about_thread(7, &[0x3000], |p| {
            p.put(&weight);
            p.put(&weight);
            p.put(&address);
            p.put(&snapshot);
        });
    }

    /// Sessions record every test's events: one test at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Writes `events` as the allocation profiler would and reads them back as a profile.
    fn profiles(tag: &str, events: impl FnOnce()) -> Vec<(SampleSelection, Profile)> {
        profiles_of(&trace_of(tag, events))
    }

    /// The trace of what `events` writes, in one drain pass (at the stop): each thread's
    /// events one run, the runs in the order of their first events.
    fn trace_of(tag: &str, events: impl FnOnce()) -> Vec<u8> {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let path = std::env::temp_dir().join(format!(
            "insight-alloc-{tag}-{}.nettrace",
            std::process::id()
        ));
        let session = eventpipe::Session::start(
            eventpipe::SessionConfig::new(
                vec![eventpipe::ProviderConfig::new(ALLOCATION_PROVIDER)],
                Output::File(path.clone()),
            )
            .rundown(false)
            .flush_interval(std::time::Duration::from_secs(3600)),
        )
        .unwrap();
        events();
        session.stop().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        bytes
    }

    fn profiles_of(bytes: &[u8]) -> Vec<(SampleSelection, Profile)> {
        [
            SampleSelection::Auto,
            SampleSelection::Allocations,
            SampleSelection::LiveHeap,
        ]
        .into_iter()
        .map(|sel| {
            let mut reader = TraceReader::from_slice(bytes).unwrap();
            let built = build_profile(&mut reader, sel.clone()).unwrap();
            (sel, built.profile)
        })
        .collect()
    }

    fn total(p: &Profile) -> u64 {
        p.samples.iter().map(|s| s.weight).sum()
    }

    static CPU: Provider = Provider::new(CPU_SAMPLER_PROVIDER);
    const fn field(name: &'static str, kind: FieldKind) -> FieldSpec {
        FieldSpec { name, kind }
    }
    static CPU_SAMPLE: EventDescriptor = EventDescriptor::new(
        &CPU,
        1,
        0,
        "Sample",
        Level::Informational,
        0,
        0,
        &[
            field("State", FieldKind::U32),
            field("AsyncContext", FieldKind::U64),
            field("Periods", FieldKind::U32),
        ],
    );
    /// The sampler's event with the length of its period (`PeriodNs`).
    static CPU_SAMPLE_WITH_PERIOD: EventDescriptor = EventDescriptor::new(
        &CPU,
        3,
        0,
        "Sample",
        Level::Informational,
        0,
        0,
        &[
            field("State", FieldKind::U32),
            field("AsyncContext", FieldKind::U64),
            field("Periods", FieldKind::U32),
            field("PeriodNs", FieldKind::U32),
        ],
    );
    /// The sampler's event as it was before `Periods`: one event per period.
    static CPU_SAMPLE_WITHOUT_PERIODS: EventDescriptor = EventDescriptor::new(
        &CPU,
        2,
        0,
        "Sample",
        Level::Informational,
        0,
        0,
        &[
            field("State", FieldKind::U32),
            field("AsyncContext", FieldKind::U64),
        ],
    );

    #[test]
    fn cpu_samples_weigh_the_periods_they_stand_for() {
        const RUNNING: u32 = 1;
        const BLOCKED: u32 = 2;
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let path =
            std::env::temp_dir().join(format!("insight-periods-{}.nettrace", std::process::id()));
        let session = eventpipe::Session::start(
            eventpipe::SessionConfig::new(
                vec![eventpipe::ProviderConfig::new(CPU_SAMPLER_PROVIDER)],
                Output::File(path.clone()),
            )
            .rundown(false),
        )
        .unwrap();
        let periods_sample = |state: u32, periods: u32, stack: &[usize]| {
            CPU_SAMPLE.write_about_thread(5, stack, |p| {
                p.put(&state);
                p.put(&0u64);
                p.put(&periods);
            });
        };
        periods_sample(RUNNING, 3, &[0x1000, 0x2000]);
        periods_sample(RUNNING, 0, &[0x1000, 0x2000]); // read as one period
        periods_sample(BLOCKED, 50, &[0x1000, 0x3000]); // waiting: not CPU time
        CPU_SAMPLE_WITHOUT_PERIODS.write_about_thread(5, &[0x1000, 0x4000], |p| {
            p.put(&RUNNING);
            p.put(&0u64);
        });
        // Two periods of 4 ms (a 250 Hz session).
        CPU_SAMPLE_WITH_PERIOD.write_about_thread(5, &[0x1000, 0x5000], |p| {
            p.put(&RUNNING);
            p.put(&0u64);
            p.put(&2u32);
            p.put(&4_000_000u32);
        });
        session.stop().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let p = build_profile(&mut reader, SampleSelection::Cpu)
            .unwrap()
            .profile;
        // Nanoseconds of CPU time: periods × the period, 1 ms where the event does not say.
        let mut weights: Vec<u64> = p.samples.iter().map(|s| s.weight).collect();
        weights.sort_unstable();
        assert_eq!(
            weights,
            [1_000_000, 1_000_000, 3_000_000, 8_000_000],
            "{:?}",
            p.samples
        );
        assert_eq!(p.unit, SampleUnit::CpuTime);
        assert_eq!(total(&p), 13_000_000);
    }

    #[test]
    fn allocation_samples_and_the_live_heap_are_told_apart() {
        let out = profiles("split", || {
            sample(100, 0xA, 41);
            sample(200, 0xB, 42);
            FREE.write_with(|p| p.put(&0xAu64));
            live(1, 0xB, 1); // an older heap profile, superseded
            live(300, 0xB, 2);
            live(400, 0xC, 2);
        });
        for (sel, p) in &out {
            match sel {
                // Auto and Allocations: the AllocationSample events only, on the allocating
                // threads.
                SampleSelection::Auto | SampleSelection::Allocations => {
                    assert_eq!(p.unit, SampleUnit::Bytes);
                    assert_eq!(total(p), 300, "{sel:?}");
                    let mut tids: Vec<u64> =
                        p.samples.iter().map(|s| p.threads[s.thread].id).collect();
                    tids.sort_unstable();
                    assert_eq!(tids, [41, 42]);
                }
                // LiveHeap: the last heap profile only.
                _ => {
                    assert_eq!(p.name, "Live heap");
                    assert_eq!(p.unit, SampleUnit::LiveBytes);
                    assert_eq!(p.samples.len(), 2);
                    assert_eq!(total(p), 700);
                }
            }
        }
    }

    #[test]
    fn a_free_on_another_thread_ends_its_allocation_whatever_the_file_order() {
        let bytes = trace_of("cross-thread-free", || {
            let (started, wait_started) = std::sync::mpsc::channel();
            let (allocated, wait_allocated) = std::sync::mpsc::channel::<()>();
            // The freeing thread writes first, so its run comes first in the trace; its free
            // of 0xE comes after the allocation in time.
            let freer = std::thread::spawn(move || {
                FREE.write_with(|p| p.put(&0xFFu64));
                started.send(()).unwrap();
                wait_allocated.recv().unwrap();
                FREE.write_with(|p| p.put(&0xEu64));
            });
            wait_started.recv().unwrap();
            sample(100, 0xE, 1);
            sample(200, 0xB, 1);
            allocated.send(()).unwrap();
            freer.join().unwrap();
        });
        // The file has the free before the allocation it ends.
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let mut order = Vec::new();
        while let Some(e) = reader.next_event().unwrap() {
            if e.metadata.event_name == "FreeSample" || e.metadata.event_name == "AllocationSample"
            {
                order.push((e.metadata.event_name.clone(), e.header.timestamp));
            }
        }
        let last_free = order.iter().rposition(|(n, _)| n == "FreeSample").unwrap();
        let first_alloc = order
            .iter()
            .position(|(n, _)| n == "AllocationSample")
            .unwrap();
        assert!(last_free < first_alloc, "{order:?}");
        assert!(order[last_free].1 > order[first_alloc].1, "{order:?}");
        let out = profiles_of(&bytes);
        let (_, live) = out
            .iter()
            .find(|(s, _)| *s == SampleSelection::LiveHeap)
            .unwrap();
        assert_eq!(total(live), 200);
    }

    #[test]
    fn without_a_heap_profile_the_live_heap_is_what_was_not_freed() {
        let out = profiles("unfreed", || {
            sample(100, 0xA, 1);
            sample(200, 0xB, 1);
            FREE.write_with(|p| p.put(&0xAu64));
            sample(400, 0xA, 1); // the address reused
            sample(800, 0xD, 1);
            FREE.write_with(|p| p.put(&0xDu64));
        });
        let (_, live) = out
            .iter()
            .find(|(s, _)| *s == SampleSelection::LiveHeap)
            .unwrap();
        assert_eq!(total(live), 600);
        let (_, all) = out
            .iter()
            .find(|(s, _)| *s == SampleSelection::Allocations)
            .unwrap();
        assert_eq!(total(all), 1500);
    }
}
