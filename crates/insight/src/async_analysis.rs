//! The async section of an analysis (`eventpipe_analysis::AsyncSection`), from the decoded
//! async-profiler data: polls long enough to block an executor thread, by future and the
//! longest of them, with the CPU stack sampled inside each future's polls; and the tasks
//! that never finished; and how long tasks waited to run after a wake.
//!
//! A poll of an outermost future (depth 0) is one an executor ran directly: its length is
//! how long it kept that thread. Nested polls run inside their parent's, so only outermost
//! ones count toward [`AsyncSection::long_polls`] and the finding; per future, every poll
//! of the future counts (a long inner poll shows which future inside the task was slow).

use std::collections::HashMap;

use eventpipe_analysis::async_polls::{FuturePolls, LongPoll, PendingTask, WakeToPoll};
use eventpipe_analysis::AsyncSection;

use crate::async_trace::{AsyncFrameId, AsyncTrace, PollSpan, SpanEnd};
use crate::profile::{FrameKind, Profile, StackId};

/// Frames of a CPU stack kept, from the leaf.
const FRAMES: usize = 10;
/// Long polls listed, at most.
const LONGEST: usize = 20;

/// The async section of `trace` for polls of `threshold_ms` or longer; `cpu` (a CPU profile
/// of the same trace, with async callstacks spliced in) gives each slow future's CPU stack;
/// `start_ticks` is the trace's first timestamp, from which poll times are counted.
pub fn async_section(
    trace: &AsyncTrace,
    cpu: Option<&Profile>,
    threshold_ms: f64,
    start_ticks: i64,
) -> AsyncSection {
    let mut section = AsyncSection::new(threshold_ms);
    section.futures = trace.contexts.len() as u64;
    section.polls = trace.spans.len() as u64;
    let mut by_frame: HashMap<AsyncFrameId, FuturePolls> = HashMap::new();
    let mut longest: Vec<LongPoll> = Vec::new();
    let mut long_spans: Vec<&PollSpan> = Vec::new();
    for span in &trace.spans {
        let ms = trace.ticks_to_ms(span.duration_ticks());
        let long = ms >= threshold_ms;
        let row = by_frame
            .entry(span.frame)
            .or_insert_with(|| FuturePolls::new(trace.frame_name(span.frame).into_owned()));
        row.polls += 1;
        row.unfinished_polls += u64::from(matches!(span.ended, SpanEnd::Lost | SpanEnd::OpenAtEnd));
        row.max_poll_ms = row.max_poll_ms.max(ms);
        if long {
            row.long_polls += 1;
            row.long_poll_ms += ms;
        }
        if span.depth == 0 {
            section.longest_poll_ms = section.longest_poll_ms.max(ms);
            section.long_polls += u64::from(long);
        }
        if long {
            long_spans.push(span);
        }
    }
    // Each long outermost poll by the innermost long poll inside it: which future in the
    // task kept the thread.
    for span in innermost(&long_spans) {
        let at = span.start.saturating_sub(start_ticks).max(0) as u64;
        // Innermost first, as stacks are shown.
        let callstack = trace
            .callstack(span.stack)
            .into_iter()
            .rev()
            .map(|f| trace.frame_name(f).into_owned())
            .collect();
        longest.push(LongPoll::new(
            trace.frame_name(span.frame).into_owned(),
            span.thread,
            trace.ticks_to_ms(at),
            trace.ticks_to_ms(span.duration_ticks()),
            callstack,
        ));
    }
    longest.sort_by(|a, b| b.ms.total_cmp(&a.ms).then(a.at_ms.total_cmp(&b.at_ms)));
    longest.truncate(LONGEST);
    section.longest = longest;
    let mut slow: Vec<FuturePolls> = by_frame
        .into_values()
        .filter(|row| row.long_polls > 0)
        .collect();
    slow.sort_by(|a, b| {
        b.long_poll_ms
            .total_cmp(&a.long_poll_ms)
            .then_with(|| a.future.cmp(&b.future))
    });
    if let Some(cpu) = cpu {
        for row in &mut slow {
            row.cpu_stack = heaviest_stack_under(cpu, &format!("async {}", row.future));
        }
    }
    section.by_future = slow;
    section.never_completed = trace
        .pending_roots()
        .into_iter()
        .map(|c| {
            let future = c
                .frame
                .map_or_else(|| c.id.to_string(), |f| trace.frame_name(f).into_owned());
            PendingTask::new(future, trace.ticks_to_ms(trace.alive_ticks(c)), c.polls)
        })
        .collect();
    section.wake_to_poll = wake_to_poll(trace);
    section
}

/// The wake-to-poll delays, by the woken context's future, the longest first.
fn wake_to_poll(trace: &AsyncTrace) -> Vec<WakeToPoll> {
    let mut by_future: HashMap<String, (Vec<f64>, u64)> = HashMap::new();
    for wake in &trace.wakes {
        let future = trace
            .contexts
            .get(&wake.ctx)
            .and_then(|c| c.frame)
            .map_or_else(
                || wake.ctx.to_string(),
                |f| trace.frame_name(f).into_owned(),
            );
        let entry = by_future.entry(future).or_default();
        match wake.polled {
            Some(polled) => {
                let ticks = u64::try_from(polled.saturating_sub(wake.woken)).unwrap_or(0);
                entry.0.push(trace.ticks_to_ms(ticks));
            }
            None => entry.1 += 1,
        }
    }
    let mut rows: Vec<WakeToPoll> = by_future
        .into_iter()
        .map(|(future, (delays, waiting))| WakeToPoll::new(future, delays, waiting))
        .collect();
    rows.sort_by(|a, b| {
        b.delay_ms
            .max
            .total_cmp(&a.delay_ms.max)
            .then_with(|| a.future.cmp(&b.future))
    });
    rows
}

/// The long polls with no long poll nested inside them (on their thread, deeper, within
/// their time).
fn innermost<'t>(long: &[&'t PollSpan]) -> Vec<&'t PollSpan> {
    long.iter()
        .filter(|outer| {
            !long.iter().any(|inner| {
                inner.thread == outer.thread
                    && inner.depth > outer.depth
                    && inner.start >= outer.start
                    && inner.end <= outer.end
            })
        })
        .copied()
        .collect()
}

/// The CPU stack with the most weight among the samples whose async callstack has the
/// frame named `async_frame`, leaf first.
fn heaviest_stack_under(cpu: &Profile, async_frame: &str) -> Vec<String> {
    let mut weights: HashMap<StackId, u64> = HashMap::new();
    for sample in &cpu.samples {
        let under = cpu.stacks[sample.stack].iter().any(|&f| {
            let frame = &cpu.frames[f];
            frame.kind == FrameKind::Async && frame.function == async_frame
        });
        if under {
            *weights.entry(sample.stack).or_default() += sample.weight;
        }
    }
    let Some((&stack, _)) = weights
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
    else {
        return Vec::new();
    };
    // Profiles keep stacks root first.
    cpu.stacks[stack]
        .iter()
        .rev()
        .take(FRAMES)
        .map(|&f| cpu.frames[f].function.clone())
        .collect()
}
