//! tokio's task hooks as async-profiler records: every task is a root context, whether or
//! not its future is instrumented, so instrumented futures inside tasks get the task (and its
//! spawn location) at the root of their async callstacks.
//!
//! tokio offers these hooks only when built with `--cfg tokio_unstable`; this module exists
//! only then (and with this crate's `tokio` feature).

use std::cell::Cell;
use std::hash::{Hash, Hasher};

use tokio::runtime::{Builder, TaskMeta};

use super::encode::Event;
use super::site;
use super::thread_buffer::{current_context, record, StackEffect};
use super::{config, now};

/// Task contexts live in their own id space: the task id with the top bit set.
const TASK_CONTEXT_BIT: u64 = 1 << 63;

thread_local! {
    /// The task whose terminate hook ran during the current poll: its poll completed.
    static COMPLETED_IN_POLL: Cell<u64> = const { Cell::new(0) };
}

/// Installs the hooks on `builder`: task spawn, poll start and end, termination.
pub fn install(builder: &mut Builder) -> &mut Builder {
    builder
        .on_task_spawn(on_spawn)
        .on_before_task_poll(on_poll_start)
        .on_after_task_poll(on_poll_end)
        .on_task_terminate(on_terminate)
}

fn context_of(meta: &TaskMeta<'_>) -> u64 {
    /// tokio's task id exposes its number only through `Hash` (one `write_u64`).
    #[derive(Default)]
    struct TakeU64(u64);
    impl Hasher for TakeU64 {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.0 = self.0.rotate_left(8) ^ u64::from(b);
            }
        }
        fn write_u64(&mut self, v: u64) {
            self.0 = v;
        }
    }
    let mut id = TakeU64::default();
    meta.id().hash(&mut id);
    TASK_CONTEXT_BIT | id.finish()
}

fn frame_of(meta: &TaskMeta<'_>) -> u32 {
    site::named("tokio task", meta.spawned_at()).id()
}

fn on_spawn(meta: &TaskMeta<'_>) {
    if config::is_recording(config::current()) {
        let event = Event::Create {
            ctx: context_of(meta),
            frame: frame_of(meta),
            parent: current_context(),
        };
        record(now(), event, StackEffect::None);
    }
}

fn on_poll_start(meta: &TaskMeta<'_>) {
    // Pushed whether or not recording, so that the end hook's pop always has its push.
    let (ctx, frame) = (context_of(meta), frame_of(meta));
    record(
        now(),
        Event::Resume { ctx, frame },
        StackEffect::Push(ctx, frame),
    );
}

fn on_poll_end(meta: &TaskMeta<'_>) {
    let ctx = context_of(meta);
    let completed = COMPLETED_IN_POLL.with(|c| c.replace(0)) == ctx;
    let end = if completed {
        Event::Complete
    } else {
        Event::Suspend
    };
    record(now(), end, StackEffect::Pop);
}

fn on_terminate(meta: &TaskMeta<'_>) {
    let ctx = context_of(meta);
    if current_context() == ctx {
        // Inside the task's own last poll: the end hook records the completion.
        COMPLETED_IN_POLL.with(|c| c.set(ctx));
    } else if config::is_recording(config::current()) {
        // Ended outside a poll: aborted, or dropped with its runtime.
        record(now(), Event::Drop { ctx }, StackEffect::None);
    }
}
