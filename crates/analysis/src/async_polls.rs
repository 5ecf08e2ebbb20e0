//! Async (Rust): polls that blocked an executor thread, and futures that never finished,
//! from the async profiler's records (`EventPipeRs-AsyncProfiler`).
//!
//! The records need decoding (`eventpipe_insight::async_trace`) and the long polls' CPU
//! stacks need symbols, neither of which this crate reads: it counts the profiler's events
//! and holds the section's shape; `eventpipe_insight::async_section` fills it in and
//! [`Analysis::set_async`](crate::Analysis::set_async) adds it, with its finding. The
//! records say when each poll began and ended, and when a task's outermost future was
//! woken: the time from a wake to the poll it led to is how long the task waited to run.

use serde::Serialize;

use crate::Distribution;

/// The async profiler's provider.
pub const ASYNC_PROFILER_PROVIDER: &str = "EventPipeRs-AsyncProfiler";

/// A poll this long or longer blocks its executor thread too long (ms): the default of
/// `eptrace analyze --long-poll`.
pub const LONG_POLL_MS: f64 = 10.0;

/// Polls and futures of one future's kind (its `#[profiled]` site).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct FuturePolls {
    /// The future's function path (or `.profiled` name).
    pub future: String,
    /// Its polls.
    pub polls: u64,
    /// Its polls whose end the records do not hold (still running when the trace ended,
    /// or their records lost): their length is a lower bound.
    pub unfinished_polls: u64,
    /// Its polls of `threshold_ms` or longer.
    pub long_polls: u64,
    /// Their time added up (ms).
    pub long_poll_ms: f64,
    /// Its longest poll (ms).
    pub max_poll_ms: f64,
    /// The heaviest CPU stack sampled inside its polls, leaf first (empty without CPU
    /// samples).
    pub cpu_stack: Vec<String>,
}

/// One long poll.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct LongPoll {
    /// The future polled.
    pub future: String,
    /// The OS thread it ran on.
    pub thread: u64,
    /// When it began, ms from the trace's first event.
    pub at_ms: f64,
    /// How long it ran (ms).
    pub ms: f64,
    /// The async callstack: the future and the futures awaiting it, innermost first.
    pub callstack: Vec<String>,
}

/// A task that had not finished when the trace ended.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct PendingTask {
    /// Its outermost future.
    pub future: String,
    /// How long it had been alive (ms).
    pub alive_ms: f64,
    /// Its polls seen.
    pub polls: u64,
}

/// How long the tasks of one outermost future waited to be run after being woken.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct WakeToPoll {
    /// The tasks' outermost future.
    pub future: String,
    /// Wakes followed by a poll.
    pub wakes: u64,
    /// From each such wake to the poll it led to (ms).
    pub delay_ms: Distribution,
    /// Those delays added up (ms).
    pub total_ms: f64,
    /// Wakes with no poll after them when the trace ended.
    pub waiting_at_end: u64,
}

impl WakeToPoll {
    /// `future`'s wake-to-poll delays (ms), and its wakes still waiting at the end.
    pub fn new(future: String, delays_ms: Vec<f64>, waiting_at_end: u64) -> WakeToPoll {
        WakeToPoll {
            future,
            wakes: delays_ms.len() as u64,
            total_ms: delays_ms.iter().sum(),
            delay_ms: Distribution::of(delays_ms),
            waiting_at_end,
        }
    }
}

/// The async section.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct AsyncSection {
    /// The long-poll threshold (ms).
    pub threshold_ms: f64,
    /// Futures seen.
    pub futures: u64,
    /// Polls seen.
    pub polls: u64,
    /// Outermost polls (those an executor ran directly, which block its thread) of
    /// `threshold_ms` or longer.
    pub long_polls: u64,
    /// The longest outermost poll (ms).
    pub longest_poll_ms: f64,
    /// By future, for the futures with long polls, most long-poll time first.
    pub by_future: Vec<FuturePolls>,
    /// The longest polls, longest first: each long outermost poll by the innermost long
    /// poll inside it (the future in the task that kept the thread).
    pub longest: Vec<LongPoll>,
    /// Tasks (outermost futures) not finished when the trace ended, the oldest first: ones
    /// that never finish, and requests still in flight.
    pub never_completed: Vec<PendingTask>,
    /// By outermost future, how long its tasks waited to run after a wake, the longest
    /// wait first.
    pub wake_to_poll: Vec<WakeToPoll>,
}

impl AsyncSection {
    /// An empty section for polls of `threshold_ms` or longer.
    pub fn new(threshold_ms: f64) -> AsyncSection {
        AsyncSection {
            threshold_ms,
            futures: 0,
            polls: 0,
            long_polls: 0,
            longest_poll_ms: 0.0,
            by_future: Vec::new(),
            longest: Vec::new(),
            never_completed: Vec::new(),
            wake_to_poll: Vec::new(),
        }
    }
}

impl FuturePolls {
    /// The polls of `future`, none yet.
    pub fn new(future: String) -> FuturePolls {
        FuturePolls {
            future,
            polls: 0,
            unfinished_polls: 0,
            long_polls: 0,
            long_poll_ms: 0.0,
            max_poll_ms: 0.0,
            cpu_stack: Vec::new(),
        }
    }
}

impl LongPoll {
    /// A poll of `future` on `thread` at `at_ms`, `ms` long, under `callstack`.
    pub fn new(future: String, thread: u64, at_ms: f64, ms: f64, callstack: Vec<String>) -> Self {
        LongPoll {
            future,
            thread,
            at_ms,
            ms,
            callstack,
        }
    }
}

impl PendingTask {
    /// `future`, alive `alive_ms`, polled `polls` times.
    pub fn new(future: String, alive_ms: f64, polls: u64) -> PendingTask {
        PendingTask {
            future,
            alive_ms,
            polls,
        }
    }
}
