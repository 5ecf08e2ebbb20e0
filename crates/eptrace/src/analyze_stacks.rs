//! Stacks for the analysis's sections: the analyses read events without symbols
//! ([`eventpipe_analysis`]); where a section has stacks, a profile of the same samples
//! ([`eventpipe_insight`]) names their frames.

use std::collections::{BTreeSet, HashMap};

use eventpipe_analysis::offcpu::WaitStack;
use eventpipe_insight::{Profile, StackId};

/// Frames of each wait stack shown, from the leaf: enough to reach the program's own
/// function through the standard library's and libc's.
const FRAMES: usize = 10;

/// The `top` stacks of an off-CPU profile, most time first: each with its time over every
/// thread, the threads that waited there, and its frames from the leaf.
pub(crate) fn wait_stacks(profile: &Profile, top: usize) -> Vec<WaitStack> {
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
        .map(|(stack, (ns, threads))| {
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
            WaitStack::new(ns as f64 / 1e6, threads, frames)
        })
        .collect()
}
