//! Stacks for the analysis's sections: the analyses read events without symbols
//! ([`eventpipe_analysis`]); where a section has stacks (allocations, contention,
//! exceptions, off-CPU waits), a profile of the same events ([`eventpipe_insight`], as
//! `convert --samples ...` draws it) names their frames. The async section needs the async
//! profiler's records decoded, with a CPU profile for the slow futures' stacks. The profiles
//! are built in one more pass over the file, only for the sections the trace has.

use std::collections::{BTreeSet, HashMap};

use anyhow::Result;
use eventpipe_analysis::{Analysis, TopStack};
use eventpipe_insight::{Profile, ProfileBuilder, SampleSelection, StackId};
use nettrace::source::Input;
use nettrace::TraceReader;

/// Frames of each stack shown, from the leaf: enough to reach the program's own function
/// through the runtime's, the standard library's and libc's.
const FRAMES: usize = 10;

/// Which section a profile's stacks go to, and the unit they are shown in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Allocations,
    Contention,
    Exceptions,
    OffCpu,
    /// Long polls and unfinished futures: the async trace, and CPU samples.
    Async,
}

impl Section {
    fn selection(self) -> SampleSelection {
        match self {
            Section::Allocations => SampleSelection::Allocations,
            Section::Contention => SampleSelection::Contention,
            Section::Exceptions => SampleSelection::Exceptions,
            Section::OffCpu => SampleSelection::OffCpu,
            Section::Async => SampleSelection::Cpu,
        }
    }

    /// A profile weight in the section's unit: MB as PerfView counts them, ms, or a count.
    fn value(self, weight: u64) -> f64 {
        match self {
            Section::Allocations => weight as f64 / 1e6,
            Section::Contention | Section::OffCpu => weight as f64 / 1e6,
            Section::Exceptions | Section::Async => weight as f64,
        }
    }
}

/// The sections of `analysis` that have stacks to show.
fn with_stacks(analysis: &Analysis) -> Vec<Section> {
    let mut sections = Vec::new();
    if analysis.allocations.is_some() {
        sections.push(Section::Allocations);
    }
    if analysis.contention.as_ref().is_some_and(|c| c.measured > 0) {
        sections.push(Section::Contention);
    }
    if analysis.exceptions.as_ref().is_some_and(|e| e.thrown > 0) {
        sections.push(Section::Exceptions);
    }
    if analysis
        .offcpu
        .as_ref()
        .is_some_and(|o| o.off_cpu_with_stack_ms > 0.0)
    {
        sections.push(Section::OffCpu);
    }
    if analysis.async_events > 0 {
        sections.push(Section::Async);
    }
    sections
}

/// Whether any section of `analysis` has stacks that [`add_stacks`] would add.
pub(crate) fn has_stacks(analysis: &Analysis) -> bool {
    !with_stacks(analysis).is_empty()
}

/// Fills in the `top` stacks of each section of `analysis` that has them, and its async
/// section (polls of `long_poll_ms` or longer), from one pass over `reader`.
pub(crate) fn add_stacks<I: Input>(
    analysis: &mut Analysis,
    mut reader: TraceReader<I>,
    top: usize,
    long_poll_ms: f64,
) -> Result<()> {
    let sections = with_stacks(analysis);
    if sections.is_empty() {
        return Ok(());
    }
    let mut builders: Vec<ProfileBuilder> = sections
        .iter()
        .map(|s| ProfileBuilder::new(s.selection()))
        .collect();
    let mut start_ticks = i64::MAX;
    while let Some(event) = reader.next_event_ref()? {
        let event = event.to_event();
        start_ticks = start_ticks.min(event.header.timestamp);
        for builder in &mut builders {
            builder.observe(&event);
        }
    }
    for (section, builder) in sections.into_iter().zip(builders) {
        let built = builder.finish();
        if section == Section::Async {
            if let Some(trace) = &built.async_trace {
                let cpu = Some(&built.profile).filter(|p| !p.samples.is_empty());
                analysis.set_async(eventpipe_insight::async_section(
                    trace,
                    cpu,
                    long_poll_ms,
                    start_ticks,
                ));
            }
            continue;
        }
        let stacks = top_stacks(&built.profile, top, |w| section.value(w));
        match section {
            Section::Allocations => {
                if let Some(a) = analysis.allocations.as_mut() {
                    a.stacks = stacks;
                }
            }
            Section::Contention => {
                if let Some(c) = analysis.contention.as_mut() {
                    c.stacks = stacks;
                }
            }
            Section::Exceptions => {
                if let Some(e) = analysis.exceptions.as_mut() {
                    e.stacks = stacks;
                }
            }
            Section::OffCpu => {
                if let Some(o) = analysis.offcpu.as_mut() {
                    o.waits = stacks;
                }
            }
            Section::Async => {}
        }
    }
    Ok(())
}

/// The `top` stacks of `profile`, most weight first: each with its weight over every
/// thread (as `value` gives it), the threads, and its frames from the leaf.
fn top_stacks(profile: &Profile, top: usize, value: impl Fn(u64) -> f64) -> Vec<TopStack> {
    let mut by_stack: HashMap<StackId, (u64, BTreeSet<usize>)> = HashMap::new();
    for sample in &profile.samples {
        let entry = by_stack.entry(sample.stack).or_default();
        entry.0 += sample.weight;
        entry.1.insert(sample.thread);
    }
    let mut ranked: Vec<(StackId, (u64, BTreeSet<usize>))> = by_stack.into_iter().collect();
    ranked.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    ranked
        .into_iter()
        .take(top)
        .map(|(stack, (weight, threads))| {
            let threads = threads
                .into_iter()
                .map(|t| {
                    let thread = &profile.threads[t];
                    thread
                        .name
                        .clone()
                        .unwrap_or_else(|| format!("thread {}", thread.id))
                })
                .collect();
            // Profiles keep stacks root first.
            let frames = profile.stacks[stack]
                .iter()
                .rev()
                .take(FRAMES)
                .map(|&f| profile.frames[f].function.clone())
                .collect();
            TopStack::new(value(weight), threads, frames)
        })
        .collect()
}
