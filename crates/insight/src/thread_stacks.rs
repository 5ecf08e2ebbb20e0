//! What every thread of a process is doing now, from a short session's samples
//! (`eventpipe_client::capture::stacks`): each thread's latest sample is its stack now.
//! A Rust program's session has CPU samples (the thread was running) and off-CPU samples
//! (waiting, in the stack the collector's probe found); a .NET runtime's sample profiler
//! gives every managed thread's stack, its leaf [`EXTERNAL_CODE_FRAME`] when the thread was
//! outside managed code (waiting, or in native code).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::builder::{ProfileBuilder, SampleSelection, EXTERNAL_CODE_FRAME};
use crate::Result;

/// One thread's stack now.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ThreadStack {
    /// The OS thread id.
    pub thread_id: u64,
    /// Its name, when the trace names it.
    pub name: Option<String>,
    /// `running` or `waiting` (Rust); `managed code` or `outside managed code` (.NET).
    pub state: &'static str,
    /// Its frames, the innermost first.
    pub frames: Vec<String>,
}

impl ThreadStack {
    /// `name (id)`, or `thread id`.
    pub fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("{name} ({})", self.thread_id),
            None => format!("thread {}", self.thread_id),
        }
    }
}

/// A process's threads now.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadStacks {
    /// The process id.
    pub pid: u32,
    /// Its name.
    pub process: String,
    /// Its runtime, as `eptrace ps` names it.
    pub runtime: String,
    /// Its threads, by id.
    pub threads: Vec<ThreadStack>,
}

impl ThreadStacks {
    /// As text: each thread and its stack, or with `merge` each distinct stack once with
    /// the threads in it, the most threads first.
    pub fn text(&self, merge: bool) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} ({}), {}: {} threads",
            self.process,
            self.pid,
            self.runtime,
            self.threads.len()
        );
        if merge {
            let mut groups: BTreeMap<(&[String], &str), Vec<&ThreadStack>> = BTreeMap::new();
            for t in &self.threads {
                groups.entry((&t.frames, t.state)).or_default().push(t);
            }
            let mut groups: Vec<_> = groups.into_iter().collect();
            groups.sort_by_key(|(_, ts)| std::cmp::Reverse(ts.len()));
            for ((frames, state), threads) in groups {
                let names: Vec<String> = threads.iter().map(|t| t.label()).collect();
                let _ = writeln!(
                    s,
                    "\n{} thread{} ({state}): {}",
                    threads.len(),
                    if threads.len() == 1 { "" } else { "s" },
                    names.join(", ")
                );
                for f in frames {
                    let _ = writeln!(s, "    {f}");
                }
            }
        } else {
            for t in &self.threads {
                let _ = writeln!(s, "\n{} ({})", t.label(), t.state);
                for f in &t.frames {
                    let _ = writeln!(s, "    {f}");
                }
            }
        }
        s
    }
}

/// Each thread's latest stack in `trace`, a sampling session of a Rust program (`rust`) or
/// a .NET one.
///
/// # Errors
/// The trace does not read.
pub fn thread_stacks(trace: &[u8], rust: bool) -> Result<Vec<ThreadStack>> {
    let kinds: &[(SampleSelection, &'static str)] = if rust {
        &[
            (SampleSelection::Cpu, "running"),
            (SampleSelection::OffCpu, "waiting"),
        ]
    } else {
        &[(SampleSelection::ThreadTime, "")]
    };
    let mut by_thread: BTreeMap<u64, (f64, ThreadStack)> = BTreeMap::new();
    for (selection, state) in kinds {
        let mut reader = nettrace::TraceReader::from_slice(trace)?;
        let mut builder = ProfileBuilder::new(selection.clone());
        while let Some(event) = reader.next_event()? {
            builder.observe(&event);
        }
        let profile = builder.finish().profile;
        for s in &profile.samples {
            let thread = &profile.threads[s.thread];
            if by_thread
                .get(&thread.id)
                .is_some_and(|(t, _)| *t > s.time_ms)
            {
                continue;
            }
            let frames: Vec<String> = profile.stacks[s.stack]
                .iter()
                .rev()
                .map(|&f| profile.frames[f].function.clone())
                .collect();
            let state = match (*state, frames.first()) {
                ("", Some(leaf)) if leaf == EXTERNAL_CODE_FRAME => "outside managed code",
                ("", _) => "managed code",
                (state, _) => state,
            };
            let stack = ThreadStack {
                thread_id: thread.id,
                name: thread.name.clone(),
                state,
                frames,
            };
            by_thread.insert(thread.id, (s.time_ms, stack));
        }
    }
    Ok(by_thread.into_values().map(|(_, t)| t).collect())
}
