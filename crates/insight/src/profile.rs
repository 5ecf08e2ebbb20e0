//! The profile model every converter reads: symbolized frames, interned root-first stacks,
//! threads and weighted, timestamped samples.
//!
//! It is deliberately independent of nettrace: building it (symbolization, choosing which
//! events are samples) is one job, rendering it (speedscope, pprof, flame graphs) another.
//! Its frames are `eventpipe-symbols`' [`Frame`]s, re-exported here; the notes saying what
//! share of a profile's samples have unnamed or truncated stacks are read from it here.

use std::collections::{BTreeMap, HashMap};

use crate::hash::FastHash;

use eventpipe_symbols::TRUNCATED_FRAME_NAME;
pub use eventpipe_symbols::{Frame, FrameKind};

/// What makes a frame one function: (function, module, file, kind).
type FrameKey = (String, Option<String>, Option<String>, FrameKind);

/// Index into [`Profile::frames`].
pub type FrameId = usize;
/// Index into [`Profile::stacks`].
pub type StackId = usize;
/// Index into [`Profile::lines`].
pub type LinesId = usize;

/// What a sample's weight counts.
///
/// A sample is one capture of a stack; its weight is what that capture stands for. The two
/// are different numbers: a CPU capture that stands for three sampling periods is one
/// sample weighing 3 ms, and a .NET sample taken 4 ms after the thread's previous one weighs
/// 4 ms. Every view names both apart: "samples" counts captures, the unit names the weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleUnit {
    /// Nanoseconds the thread spent running on a CPU (this project's CPU sampler, one
    /// weighing its periods × the sampling interval; one-collect's `cpu` samples, one
    /// interval each).
    CpuTime,
    /// Nanoseconds of thread time: the time each sample stands for on its thread, whether
    /// the thread was running or waiting (.NET's sample profiler, weighed as TraceEvent's
    /// thread-time computer does: see [`crate::thread_time`]).
    ThreadTime,
    /// Nanoseconds a thread spent off the CPU, waiting, by the stack it waited in (this
    /// project's CPU sampler with off-CPU stacks, `OffCpu=1`: `State` 3, periods × the
    /// sampling interval of wall time each).
    OffCpuTime,
    /// Nanoseconds threads waited for locks (.NET's `Contention` events, each wait on the
    /// stack it began in).
    LockWait,
    /// Allocation samples whose weight is an estimate of bytes allocated.
    Bytes,
    /// Live-heap samples whose weight is an estimate of bytes still allocated (pprof's
    /// `inuse_space`).
    LiveBytes,
    /// Objects of a heap snapshot, each weighing its own bytes, on the stack of its
    /// dominators: a frame's total is what it retains.
    HeapBytes,
    /// Events that carried a stack; each weighs one.
    Events,
}

impl SampleUnit {
    /// Every unit.
    pub const ALL: [SampleUnit; 8] = [
        SampleUnit::CpuTime,
        SampleUnit::ThreadTime,
        SampleUnit::OffCpuTime,
        SampleUnit::LockWait,
        SampleUnit::Bytes,
        SampleUnit::LiveBytes,
        SampleUnit::HeapBytes,
        SampleUnit::Events,
    ];

    /// Whether weights are nanoseconds.
    pub fn is_time(self) -> bool {
        matches!(
            self,
            SampleUnit::CpuTime
                | SampleUnit::ThreadTime
                | SampleUnit::OffCpuTime
                | SampleUnit::LockWait
        )
    }

    /// What the weight measures, in words: `CPU time`, `thread time`, `bytes allocated`.
    pub fn describe(self) -> &'static str {
        match self {
            SampleUnit::CpuTime => "CPU time",
            SampleUnit::ThreadTime => "thread time",
            SampleUnit::OffCpuTime => "off-CPU time",
            SampleUnit::LockWait => "time waiting on locks",
            SampleUnit::Bytes => "bytes allocated",
            SampleUnit::LiveBytes => "bytes still allocated",
            SampleUnit::HeapBytes => "heap bytes retained",
            SampleUnit::Events => "events",
        }
    }
}

/// One thread that has samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    /// The OS thread id.
    pub id: u64,
    /// The thread's name, when the trace names it.
    pub name: Option<String>,
    /// The process id, when the trace says it (V6 threads, process info).
    pub process_id: Option<u64>,
}

impl Thread {
    /// `name (tid)` or `Thread tid`.
    pub fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("{name} ({})", self.id),
            None => format!("Thread {}", self.id),
        }
    }
}

/// One weighted observation of a stack on a thread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Index into [`Profile::threads`].
    pub thread: usize,
    /// Milliseconds since the trace's start.
    pub time_ms: f64,
    /// How much the sample counts, in the profile's [`SampleUnit`].
    pub weight: u64,
    /// Index into [`Profile::stacks`].
    pub stack: StackId,
    /// Index into [`Profile::lines`]: the source line of each of the stack's frames; `None`
    /// when no frame has one.
    pub lines: Option<LinesId>,
}

/// A symbolized profile: frames, stacks, threads, samples.
///
/// Invariants (kept by the `intern_*` methods and [`Profile::push_sample`]): every
/// `FrameId` in `stacks` indexes `frames`; every sample's `stack` indexes `stacks` and its
/// `thread` indexes `threads`; stacks are root first; equal frames and equal stacks are
/// stored once.
#[derive(Debug, Clone)]
pub struct Profile {
    /// What the profile shows: `CPU samples`, `Allocations`, `GC/Start stacks`.
    pub name: String,
    /// What a sample's weight counts.
    pub unit: SampleUnit,
    /// Distinct frames.
    pub frames: Vec<Frame>,
    /// Distinct stacks, each root (outermost caller) first.
    pub stacks: Vec<Vec<FrameId>>,
    /// Distinct line tables: for a sample's stack, each frame's source line (0: unknown),
    /// root first like the stack.
    pub lines: Vec<Vec<u32>>,
    /// Threads that have samples.
    pub threads: Vec<Thread>,
    /// Samples in time order.
    pub samples: Vec<Sample>,
    /// Milliseconds since the trace's start of its first event.
    pub start_ms: f64,
    /// Milliseconds since the trace's start of its last event.
    pub end_ms: f64,
    /// Nanoseconds between two samples of a thread, when the sampler had a fixed interval
    /// (pprof's `period`).
    pub sampling_interval_ns: Option<u64>,
    /// GNU build ids (lowercase hex) of the modules frames name, by module (the file name
    /// in [`Frame::module`]), as the trace stated them: what a backend that symbolizes
    /// later needs to find the binary.
    pub build_ids: BTreeMap<String, String>,
    /// The program's own binary (the file name frames give as their module), when the
    /// trace says which it is: pprof lists its mapping first, where readers look for the
    /// main binary.
    pub main_module: Option<String>,
    /// Frames by their function: (function, module, file, kind).
    frame_index: HashMap<FrameKey, FrameId, FastHash>,
    stack_index: HashMap<Vec<FrameId>, StackId, FastHash>,
    lines_index: HashMap<Vec<u32>, LinesId, FastHash>,
    thread_index: HashMap<u64, usize, FastHash>,
}

impl Profile {
    /// An empty profile.
    pub fn new(name: impl Into<String>, unit: SampleUnit) -> Profile {
        Profile {
            name: name.into(),
            unit,
            frames: Vec::new(),
            stacks: Vec::new(),
            lines: Vec::new(),
            threads: Vec::new(),
            samples: Vec::new(),
            start_ms: 0.0,
            end_ms: 0.0,
            sampling_interval_ns: None,
            build_ids: BTreeMap::new(),
            main_module: None,
            frame_index: HashMap::default(),
            stack_index: HashMap::default(),
            lines_index: HashMap::default(),
            thread_index: HashMap::default(),
        }
    }

    /// When the program was seen at work, ms (as [`Sample::time_ms`]): from one sampling
    /// interval before its first sample (which stands for the interval before it), or the
    /// sample itself when the interval is unknown, to its last sample; `None` when that
    /// spans no time. A trace's first and last events can lie far outside it (a program
    /// traced from its start waits for the session to resume it; the session's end comes
    /// after a rundown, which takes a .NET runtime long), so rates per second use this span.
    pub fn sample_span_ms(&self) -> Option<(f64, f64)> {
        let lead = self.sampling_interval_ns.map_or(0.0, |ns| ns as f64 / 1e6);
        let times = self.samples.iter().map(|s| s.time_ms);
        let first = times.clone().fold(f64::INFINITY, f64::min) - lead;
        let last = times.fold(f64::NEG_INFINITY, f64::max);
        (last > first).then_some((first, last))
    }

    /// The id of `frame`'s function, adding it if new. Frames that differ only in their
    /// line are one function: it keeps the lowest line.
    pub fn intern_frame(&mut self, frame: Frame) -> FrameId {
        let key = (
            frame.function.clone(),
            frame.module.clone(),
            frame.file.clone(),
            frame.kind,
        );
        if let Some(&id) = self.frame_index.get(&key) {
            let known = &mut self.frames[id].line;
            *known = match (*known, frame.line) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            return id;
        }
        let id = self.frames.len();
        self.frames.push(frame);
        self.frame_index.insert(key, id);
        id
    }

    /// The id of a stack's line table (each frame's line, 0: unknown, root first), adding it
    /// if new; `None` when no frame has a line.
    pub fn intern_lines(&mut self, lines: Vec<u32>) -> Option<LinesId> {
        if lines.iter().all(|&l| l == 0) {
            return None;
        }
        if let Some(&id) = self.lines_index.get(&lines) {
            return Some(id);
        }
        let id = self.lines.len();
        self.lines.push(lines.clone());
        self.lines_index.insert(lines, id);
        Some(id)
    }

    /// The id of the root-first stack `frames`, adding it if new.
    ///
    /// # Panics
    /// If a frame id is out of range (a bug in the caller, not bad input).
    pub fn intern_stack(&mut self, frames: Vec<FrameId>) -> StackId {
        assert!(frames.iter().all(|&f| f < self.frames.len()));
        if let Some(&id) = self.stack_index.get(&frames) {
            return id;
        }
        let id = self.stacks.len();
        self.stacks.push(frames.clone());
        self.stack_index.insert(frames, id);
        id
    }

    /// The index of thread `id`, adding it if new; a later name fills in a missing one.
    pub fn intern_thread(&mut self, id: u64, name: Option<&str>, process_id: Option<u64>) -> usize {
        if let Some(&index) = self.thread_index.get(&id) {
            let thread = &mut self.threads[index];
            if thread.name.is_none() {
                thread.name = name.map(str::to_owned);
            }
            if thread.process_id.is_none() {
                thread.process_id = process_id;
            }
            return index;
        }
        let index = self.threads.len();
        self.threads.push(Thread {
            id,
            name: name.map(str::to_owned),
            process_id,
        });
        self.thread_index.insert(id, index);
        index
    }

    /// Names thread `id` if it is in the profile and still unnamed (names often arrive in
    /// rundown, after the samples).
    pub fn name_thread(&mut self, id: u64, name: &str) {
        if let Some(&index) = self.thread_index.get(&id) {
            let thread = &mut self.threads[index];
            if thread.name.is_none() {
                thread.name = Some(name.to_owned());
            }
        }
    }

    /// Appends a sample.
    ///
    /// # Panics
    /// If `thread`, `stack` or `lines` is out of range, or the line table's length is not
    /// the stack's (a bug in the caller, not bad input).
    pub fn push_sample(&mut self, sample: Sample) {
        assert!(sample.thread < self.threads.len() && sample.stack < self.stacks.len());
        assert!(sample.lines.is_none_or(
            |l| self.lines.get(l).map(Vec::len) == Some(self.stacks[sample.stack].len())
        ));
        self.samples.push(sample);
    }

    /// The total weight of all samples.
    pub fn total_weight(&self) -> u64 {
        self.samples
            .iter()
            .map(|s| s.weight)
            .fold(0, u64::saturating_add)
    }

    /// `weight` in words, in the profile's unit: `5.790 s of CPU time`, `12.5 MiB
    /// allocated`, `42 events`.
    pub fn weight_text(&self, weight: u64) -> String {
        let w = weight as f64;
        match self.unit {
            SampleUnit::CpuTime
            | SampleUnit::ThreadTime
            | SampleUnit::OffCpuTime
            | SampleUnit::LockWait => {
                let time = if w >= 1e9 {
                    format!("{:.3} s", w / 1e9)
                } else {
                    format!("{:.3} ms", w / 1e6)
                };
                format!("{time} of {}", self.unit.describe())
            }
            SampleUnit::Bytes | SampleUnit::LiveBytes | SampleUnit::HeapBytes => {
                let still = match self.unit {
                    SampleUnit::LiveBytes => "still allocated",
                    SampleUnit::HeapBytes => "on the heap",
                    _ => "allocated",
                };
                if w >= (1u64 << 20) as f64 {
                    format!("{:.1} MiB {still}", w / (1u64 << 20) as f64)
                } else {
                    format!("{weight} bytes {still}")
                }
            }
            SampleUnit::Events => format!("{weight} events"),
        }
    }

    /// Total weight per distinct root-first stack, heaviest first: the collapsed-stack view
    /// flame graphs and `report` use.
    pub fn weight_by_stack(&self) -> Vec<(StackId, u64)> {
        let mut totals = vec![0u64; self.stacks.len()];
        for s in &self.samples {
            totals[s.stack] += s.weight;
        }
        let mut rows: Vec<(StackId, u64)> = totals
            .into_iter()
            .enumerate()
            .filter(|&(_, w)| w > 0)
            .collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        rows
    }

    /// Per frame: (self weight: the frame is the leaf, total weight: the frame is anywhere
    /// in the stack, counted once per sample even under recursion), heaviest self first.
    pub fn weight_by_function(&self) -> Vec<(FrameId, u64, u64)> {
        let mut self_w = vec![0u64; self.frames.len()];
        let mut total_w = vec![0u64; self.frames.len()];
        let mut seen = vec![usize::MAX; self.frames.len()];
        for (stack_id, weight) in self.weight_by_stack() {
            let stack = &self.stacks[stack_id];
            if let Some(&leaf) = stack.last() {
                self_w[leaf] += weight;
            }
            for &f in stack {
                if seen[f] != stack_id {
                    seen[f] = stack_id;
                    total_w[f] += weight;
                }
            }
        }
        let mut rows: Vec<(FrameId, u64, u64)> = (0..self.frames.len())
            .map(|f| (f, self_w[f], total_w[f]))
            .filter(|&(_, _, t)| t > 0)
            .collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
        rows
    }
}

/// Checks the converters run before they index anything.
impl Profile {
    /// The first broken invariant, if any: a stack naming a frame that does not exist, or a
    /// sample naming a thread or stack that does not exist. The fields are public, so a
    /// profile built by hand can break what the `intern_*` methods keep.
    pub(crate) fn validate(&self) -> Result<(), crate::Error> {
        self.check().map_err(crate::Error::InvalidProfile)
    }

    fn check(&self) -> Result<(), String> {
        for (id, stack) in self.stacks.iter().enumerate() {
            if let Some(&f) = stack.iter().find(|&&f| f >= self.frames.len()) {
                return Err(format!(
                    "stack {id} names frame {f}, but there are {} frames",
                    self.frames.len()
                ));
            }
        }
        for (i, s) in self.samples.iter().enumerate() {
            if s.thread >= self.threads.len() {
                return Err(format!(
                    "sample {i} names thread {}, but there are {} threads",
                    s.thread,
                    self.threads.len()
                ));
            }
            if s.stack >= self.stacks.len() {
                return Err(format!(
                    "sample {i} names stack {}, but there are {} stacks",
                    s.stack,
                    self.stacks.len()
                ));
            }
            if let Some(l) = s.lines {
                let frames = self.stacks[s.stack].len();
                match self.lines.get(l) {
                    None => {
                        return Err(format!(
                            "sample {i} names line table {l}, but there are {}",
                            self.lines.len()
                        ))
                    }
                    Some(table) if table.len() != frames => {
                        return Err(format!(
                            "sample {i}'s line table {l} has {} lines for {frames} frames",
                            table.len()
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }
}

/// `1234567` as `1,234,567`: counts as the tables and titles meant for people print them.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A note saying what share of the samples have stacks the sampler could not finish (they
/// end in `[truncated]`), or `None` when none has.
pub fn truncated_stacks_note(profile: &Profile) -> Option<String> {
    let (samples, share) = samples_with_a_frame(profile, |f| {
        f.kind == FrameKind::ThreadState && f.function == TRUNCATED_FRAME_NAME
    })?;
    Some(format!(
        "{samples} of {} samples ({share:.1}% of the {}) have stacks cut short: the unwinder \
         could not go past a frame, or the stack was deeper than it keeps; they start at \
         {TRUNCATED_FRAME_NAME}",
        profile.samples.len(),
        profile.unit.describe(),
    ))
}

/// How many samples have a frame `is` holds for, and their share (%) of the profile's
/// weight; `None` when none has.
fn samples_with_a_frame(profile: &Profile, is: impl Fn(&Frame) -> bool) -> Option<(u64, f64)> {
    let (mut samples, mut weight) = (0u64, 0u64);
    for sample in &profile.samples {
        if profile.stacks[sample.stack]
            .iter()
            .any(|&f| is(&profile.frames[f]))
        {
            samples += 1;
            weight += sample.weight;
        }
    }
    (samples > 0).then(|| {
        let share = 100.0 * weight as f64 / profile.total_weight().max(1) as f64;
        (samples, share)
    })
}

/// A note saying how many samples have frames that could not be named (module+offset,
/// bare addresses, `[unknown]`), or `None` when every frame is named.
pub fn unnamed_frames_note(profile: &Profile) -> Option<String> {
    let unnamed = |f: usize| {
        matches!(
            profile.frames[f].kind,
            FrameKind::ModuleOffset | FrameKind::Unknown
        )
    };
    let mut frames: Vec<usize> = profile
        .stacks
        .iter()
        .flatten()
        .copied()
        .filter(|&f| unnamed(f))
        .collect();
    frames.sort_unstable();
    frames.dedup();
    if frames.is_empty() {
        return None;
    }
    let (samples, share) = samples_with_a_frame(profile, |f| {
        matches!(f.kind, FrameKind::ModuleOffset | FrameKind::Unknown)
    })?;
    Some(format!(
        "{samples} of {} samples ({share:.1}% of the {}) have frames that could not be named; \
         their {} distinct unnamed frames are shown as module+0xOFFSET, 0xADDRESS or [unknown] \
         (the notes above say why)",
        profile.samples.len(),
        profile.unit.describe(),
        frames.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_stack_profile() -> Profile {
        let mut p = Profile::new("test", SampleUnit::Events);
        let main = p.intern_frame(Frame::named("main", FrameKind::Native));
        let a = p.intern_frame(Frame::named("a", FrameKind::Native));
        let b = p.intern_frame(Frame::named("b", FrameKind::Native));
        let t = p.intern_thread(7, None, None);
        let sa = p.intern_stack(vec![main, a]);
        let sb = p.intern_stack(vec![main, a, b]);
        for (i, stack) in [sa, sb, sb, sb].into_iter().enumerate() {
            p.push_sample(Sample {
                thread: t,
                time_ms: i as f64,
                weight: 1,
                stack,
                lines: None,
            });
        }
        p
    }

    #[test]
    fn interning_stores_each_frame_and_stack_once() {
        let mut p = two_stack_profile();
        assert_eq!(p.intern_frame(Frame::named("a", FrameKind::Native)), 1);
        assert_eq!(p.intern_stack(vec![0, 1]), 0);
        assert_eq!((p.frames.len(), p.stacks.len()), (3, 2));
    }

    #[test]
    fn function_weights_split_self_from_total() {
        let p = two_stack_profile();
        let rows = p.weight_by_function();
        assert_eq!(rows[0], (2, 3, 3)); // b: leaf of 3 samples
        assert_eq!(rows[1], (1, 1, 4)); // a: leaf once, on every stack
        assert_eq!(rows[2], (0, 0, 4)); // main
        assert_eq!(p.weight_by_stack(), vec![(1, 3), (0, 1)]);
    }

    #[test]
    fn recursion_counts_a_frame_once_per_sample() {
        let mut p = Profile::new("rec", SampleUnit::Events);
        let f = p.intern_frame(Frame::named("f", FrameKind::Native));
        let t = p.intern_thread(1, None, None);
        let s = p.intern_stack(vec![f, f, f]);
        p.push_sample(Sample {
            thread: t,
            time_ms: 0.0,
            weight: 5,
            stack: s,
            lines: None,
        });
        assert_eq!(p.weight_by_function(), vec![(f, 5, 5)]);
    }

    #[test]
    fn a_function_sampled_at_several_lines_is_one_frame_keeping_its_lowest_line() {
        let mut p = Profile::new("lines", SampleUnit::Events);
        let at = |line| Frame {
            line: Some(line),
            file: Some("list.rs".into()),
            ..Frame::named("insert_tail", FrameKind::Native)
        };
        let a = p.intern_frame(at(40));
        let b = p.intern_frame(at(37));
        let c = p.intern_frame(Frame::named("insert_tail", FrameKind::Native));
        assert_eq!(a, b);
        assert_ne!(a, c, "another file is another function");
        assert_eq!(p.frames[a].line, Some(37));
        assert_eq!(p.intern_lines(vec![0, 0]), None);
        assert_eq!(p.intern_lines(vec![40, 0]), Some(0));
        assert_eq!(p.intern_lines(vec![40, 0]), Some(0));
    }

    #[test]
    fn late_thread_names_fill_in() {
        let mut p = two_stack_profile();
        p.name_thread(7, "worker");
        p.name_thread(8, "absent");
        assert_eq!(p.threads[0].label(), "worker (7)");
        assert_eq!(p.threads.len(), 1);
    }
}
