//! What every thread of a process is doing now, from a short session's samples
//! (`eventpipe_client::capture::stacks`): each thread's latest sample is its stack now.
//! A Rust program's session has CPU samples (the thread was running) and off-CPU samples
//! (waiting, in the stack the collector's probe found); a .NET runtime's sample profiler
//! gives every managed thread's stack, its leaf [`EXTERNAL_CODE_FRAME`] when the thread was
//! outside managed code (waiting, or in native code); its GC events say whether the
//! program is suspended for a GC at the session's end: then the thread running the GC is
//! `in a GC` and the threads last seen in managed code are `suspended for a GC`.
//!
//! A Rust program's async tasks that are not running have no thread to show them: its
//! async profiler, asked to wake every pending task once (`WakePending=1`), records each
//! one's next poll, and the await chain that poll suspends in is the task's stack now
//! ([`pending_tasks`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use eventpipe_analysis::live::{GcInProgress, RuntimeWatch};
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
    /// Rust: `running`, or what a waiting thread waits in, read from its innermost frames
    /// ([`waiting_state`]): `sleeping`, `blocked in futex`, `blocked in epoll_wait`, ...,
    /// else `waiting`. .NET: `managed code` or `outside managed code`; during a GC, `in a
    /// GC` (the thread running it) and `suspended for a GC` (one last seen in managed
    /// code).
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
    /// .NET: the GC the program is suspended for at the session's end, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gc: Option<GcInProgress>,
    /// Rust with the async profiler: where the tasks not running are suspended, grouped by
    /// await chain, the most tasks first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending_tasks: Vec<PendingTasks>,
}

/// Tasks suspended in one await chain.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingTasks {
    /// How many.
    pub tasks: usize,
    /// The instrumented futures of the chain, the innermost (where it waits) first.
    pub frames: Vec<String>,
}

impl ThreadStacks {
    /// The threads of process `pid` (`process`, its runtime as `eptrace ps` names it) in
    /// `trace`, a sampling session of it (`rust`: a Rust program's, else a .NET one's), as
    /// they were at `at` (when the session was asked to stop; `None`: the trace's end).
    ///
    /// # Errors
    /// The trace does not read, or holds no thread's samples ([`crate::Error::NoThreadSamples`]).
    pub fn read(
        pid: u32,
        process: String,
        runtime: String,
        rust: bool,
        trace: &[u8],
        at: Option<std::time::SystemTime>,
    ) -> Result<ThreadStacks> {
        let mut threads = thread_stacks(trace, rust)?;
        if threads.is_empty() {
            return Err(crate::Error::NoThreadSamples { process, pid });
        }
        let gc = if rust { None } else { gc_at(trace, at)? };
        let pending_tasks = if rust {
            pending_tasks(trace)?
        } else {
            Vec::new()
        };
        if let Some(gc) = &gc {
            for t in &mut threads {
                if t.thread_id == gc.thread_id {
                    t.state = "in a GC";
                } else if t.state == "managed code" {
                    t.state = "suspended for a GC";
                }
            }
        }
        Ok(ThreadStacks {
            pid,
            process,
            runtime,
            threads,
            gc,
            pending_tasks,
        })
    }

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
        if let Some(gc) = &self.gc {
            let _ = writeln!(
                s,
                "suspended for GC #{} (gen {}, {}, {}), run by thread {}",
                gc.number, gc.generation, gc.kind, gc.reason, gc.thread_id
            );
        }
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
        if !self.pending_tasks.is_empty() {
            let total: usize = self.pending_tasks.iter().map(|p| p.tasks).sum();
            let _ = writeln!(
                s,
                "\npending tasks: {total}, each where it is suspended (its instrumented futures, \
                 innermost first)"
            );
            for p in &self.pending_tasks {
                let _ = writeln!(
                    s,
                    "\n{} task{}:",
                    p.tasks,
                    if p.tasks == 1 { "" } else { "s" }
                );
                for f in &p.frames {
                    let _ = writeln!(s, "    {f}");
                }
            }
        }
        s
    }
}

/// Where each pending task of `trace` is suspended: for each root future the trace saw
/// created and not ended, the await chain of its last poll (the nested poll that began last
/// inside it, then the one that began last inside that, ...), grouped by chain.
///
/// # Errors
/// The trace does not read.
pub fn pending_tasks(trace: &[u8]) -> Result<Vec<PendingTasks>> {
    let mut reader = nettrace::TraceReader::from_slice(trace)?;
    let Some(async_trace) = crate::read_async_trace(&mut reader)? else {
        return Ok(Vec::new());
    };
    let mut chains: BTreeMap<Vec<String>, usize> = BTreeMap::new();
    for context in async_trace.contexts.values() {
        if !context.is_root() || context.end != crate::async_trace::ContextEnd::Pending {
            continue;
        }
        let Some(innermost) = last_poll_chain(&async_trace, context.id) else {
            continue;
        };
        let frames: Vec<String> = async_trace
            .callstack(innermost.stack)
            .into_iter()
            .rev()
            .map(|f| async_trace.frame_name(f).into_owned())
            .collect();
        *chains.entry(frames).or_default() += 1;
    }
    let mut out: Vec<PendingTasks> = chains
        .into_iter()
        .map(|(frames, tasks)| PendingTasks { tasks, frames })
        .collect();
    out.sort_by(|a, b| b.tasks.cmp(&a.tasks).then_with(|| a.frames.cmp(&b.frames)));
    Ok(out)
}

/// The innermost poll of the chain `root`'s last poll suspended in.
fn last_poll_chain(
    trace: &crate::AsyncTrace,
    root: crate::async_trace::ContextId,
) -> Option<&crate::async_trace::PollSpan> {
    // The root's last poll: the latest start over the threads it ran on.
    let (index, root_span) = trace
        .spans
        .iter()
        .enumerate()
        .filter(|(_, s)| s.ctx == root && s.depth == 0)
        .max_by_key(|(_, s)| s.start)?;
    // Spans are by thread, then start, an outer poll before those nested in it: the ones
    // after it on its thread until the next outermost poll are nested in it. The latest
    // at each depth, each discarding what was deeper under an earlier sibling.
    let mut chain: Vec<&crate::async_trace::PollSpan> = vec![root_span];
    for span in trace.spans[index + 1..]
        .iter()
        .take_while(|s| s.thread == root_span.thread && s.depth > 0)
    {
        chain.truncate(span.depth);
        if chain.len() == span.depth {
            chain.push(span);
        }
    }
    chain.last().copied()
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
                ("waiting", _) => waiting_state(&frames),
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

/// The GC the program was suspended for at `at` (else at the end of `trace`), from its
/// runtime's GC events read in time order up to then. The runtime ends a session only
/// once a GC in progress is over: the trace's end is never inside one, the moment the
/// session was asked to stop can be.
fn gc_at(trace: &[u8], at: Option<std::time::SystemTime>) -> Result<Option<GcInProgress>> {
    let mut reader = nettrace::SortedReader::new(nettrace::TraceReader::from_slice(trace)?);
    let info = reader.trace().clone();
    let cutoff_ms = at.and_then(|at| {
        let at = i128::try_from(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos()).ok()?;
        let sync = info.ticks_to_unix_nanos(info.sync_time_ticks)?;
        Some((at - sync) as f64 / 1e6)
    });
    let mut watch = RuntimeWatch::new();
    let mut news = Vec::new();
    while let Some(event) = reader.next_event()? {
        if cutoff_ms.is_some_and(|cutoff| event.timestamp_msec() > cutoff) {
            break;
        }
        watch.observe(&event, &mut news);
        news.clear();
    }
    Ok(watch.suspended_for_gc())
}

/// How deep into a waiting stack the blocking call is looked for: past the libc wrapper
/// and std's own layers (`syscall` < `futex_wait` < `Mutex::lock_contended` < ...).
const WAIT_FRAMES: usize = 6;

/// What a waiting thread waits in, from its innermost frames (`frames`, innermost first):
/// the first that names a blocking call (a libc wrapper, std's `futex_wait`,
/// `thread::sleep`) says it. `waiting` when none does.
pub fn waiting_state(frames: &[String]) -> &'static str {
    for frame in frames.iter().take(WAIT_FRAMES) {
        // The function's own name: after its path, without glibc's internal prefixes.
        let name = frame.rsplit("::").next().unwrap_or(frame);
        let name = name.split('@').next().unwrap_or(name);
        let name = name.trim_start_matches('_');
        let name = name
            .strip_prefix("libc_")
            .or_else(|| name.strip_prefix("GI_"))
            .unwrap_or(name)
            .trim_start_matches('_');
        let name = name.strip_suffix("_nocancel").unwrap_or(name);
        let state = match name {
            n if n.contains("futex") => "blocked in futex",
            n if n.contains("nanosleep") || n == "sleep" || n == "usleep" => "sleeping",
            "epoll_wait" | "epoll_pwait" | "epoll_pwait2" => "blocked in epoll_wait",
            "poll" | "ppoll" => "blocked in poll",
            "select" | "pselect" | "pselect6" => "blocked in select",
            "read" | "pread" | "pread64" | "readv" => "blocked in read",
            "recv" | "recvfrom" | "recvmsg" => "blocked in recv",
            "accept" | "accept4" => "blocked in accept",
            "wait4" | "waitpid" | "waitid" => "blocked in waitpid",
            _ => continue,
        };
        return state;
    }
    "waiting"
}

#[cfg(test)]
mod tests {
    use super::waiting_state;

    fn state(frames: &[&str]) -> &'static str {
        waiting_state(&frames.iter().map(|f| f.to_string()).collect::<Vec<_>>())
    }

    /// A session that brought no samples is an error that names the process, for
    /// `eptrace stack` and the agent's `/stacks` alike.
    #[test]
    fn a_trace_with_no_samples_is_an_error_naming_the_process() {
        use nettrace::write::TraceWriter;
        use nettrace::{FormatVersion, TraceInfo};
        let w = TraceWriter::new(Vec::new(), &TraceInfo::new(FormatVersion::V5, 8)).unwrap();
        let trace = w.finish().unwrap();
        let err = super::ThreadStacks::read(42, "server".into(), "rust".into(), true, &trace, None)
            .unwrap_err();
        assert!(
            matches!(&err, crate::Error::NoThreadSamples { process, pid: 42 } if process == "server"),
            "{err}"
        );
        assert!(
            err.to_string().starts_with("server (42) wrote no samples"),
            "{err}"
        );
    }

    #[test]
    fn the_blocking_call_is_named_through_wrappers_and_std() {
        assert_eq!(
            state(&["syscall", "std::sys::pal::unix::futex::futex_wait", "main"]),
            "blocked in futex"
        );
        assert_eq!(
            state(&["__GI___clock_nanosleep", "nanosleep", "std::thread::sleep"]),
            "sleeping"
        );
        assert_eq!(
            state(&["epoll_wait", "mio::poll::Poll::poll"]),
            "blocked in epoll_wait"
        );
        assert_eq!(
            state(&["__libc_read", "std::io::Read::read"]),
            "blocked in read"
        );
        assert_eq!(state(&["accept4@@GLIBC_2.10"]), "blocked in accept");
        assert_eq!(state(&["__poll_nocancel"]), "blocked in poll");
        // Not a blocking call anywhere near the leaf: no guess.
        assert_eq!(state(&["app::compute", "main"]), "waiting");
        assert_eq!(state(&["a", "b", "c", "d", "e", "f", "read"]), "waiting");
    }
}
