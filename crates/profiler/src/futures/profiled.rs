//! The instrumented future: a wrapper that records its inner future's life.
//!
//! An outermost instrumented future (none of its callers' polls is running: it is a task, or
//! the first instrumented future in one) also records when it is woken: it polls its inner
//! future with a waker of its own that records a Wake, at most one per poll (the first
//! wake from the poll's start on), and wakes the executor's. The time from that Wake to the
//! next poll is the time the task waited to be run. A wake from inside the future's own
//! poll (it asks to be polled again at once) is not recorded, and ends the wait for a first
//! wake: the task waits for nothing but its turn. (tokio defers a yield's wake to after the
//! poll: that one is recorded.)

use std::future::Future;
use std::panic::Location;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use super::encode::Event;
use super::pending::{self, TaskSlot};
use super::site::{self, Site};
use super::thread_buffer::{current_context, next_context_id, record, StackEffect};
use super::{config, now};

pin_project_lite::pin_project! {
    /// A future whose creation, polls, completion, panics and cancellation are recorded
    /// while a session enables `EventPipeRs-AsyncProfiler`. Build one with
    /// [`FutureExt::profiled`] or the [`profiled`](super::profiled) attribute.
    ///
    /// While no session records, a poll costs one relaxed load, a thread-local flag and a
    /// branch more than the inner future's; an outermost one (a task's) also keeps its
    /// executor's waker for the pending-task stacks (`pending`).
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct Profiled<F> {
        #[pin]
        inner: F,
        site: &'static Site,
        // The context id, 0 until first recorded.
        ctx: u64,
        // The configuration epoch its Create was recorded in: a session that began since
        // has not seen it, and gets it again at its next poll.
        announced: u64,
        // Completed or unwound: its end is recorded, so dropping it is not a cancellation.
        ended: bool,
        // The waker that records wakes (and its recorder), while the executor's waker
        // stays the same one.
        wake: Option<(Arc<WakeRecorder>, Waker)>,
        // An outermost future's registration as a pending task (`pending`), and the
        // executor's waker it holds.
        task: Option<(Arc<TaskSlot>, Waker)>,
    }

    impl<F> PinnedDrop for Profiled<F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if *this.ctx != 0 && !*this.ended && config::is_recording(config::current()) {
                record(now(), Event::Drop { ctx: *this.ctx }, StackEffect::None);
            }
        }
    }
}

impl<F> Profiled<F> {
    /// Instruments `inner` as a future of `site`.
    pub fn new(inner: F, site: &'static Site) -> Self {
        let config = config::current();
        let ctx = if config::is_recording(config) {
            create(site)
        } else {
            0
        };
        Profiled {
            inner,
            site,
            ctx,
            announced: config::epoch(config),
            ended: false,
            wake: None,
            task: None,
        }
    }

    /// The site this future belongs to.
    pub fn site(&self) -> &'static Site {
        self.site
    }
}

/// Records a new context of `site`, child of the poll running on this thread.
fn create(site: &'static Site) -> u64 {
    let ctx = next_context_id();
    announce(ctx, site);
    ctx
}

/// Records context `ctx` of `site` as created by the poll running on this thread.
fn announce(ctx: u64, site: &'static Site) {
    let event = Event::Create {
        ctx,
        frame: site.id(),
        parent: current_context(),
    };
    record(now(), event, StackEffect::None);
}

impl<F: Future> Future for Profiled<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let config = config::current();
        if !config::is_recording(config) {
            if pending::in_poll() {
                return this.inner.poll(cx);
            }
            let _outer = pending::OuterPoll::enter();
            keep_registered(this.task, cx.waker());
            let result = this.inner.poll(cx);
            if result.is_ready() {
                *this.task = None;
            }
            return result;
        }
        if *this.ctx == 0 {
            // Created before recording began: it enters the trace at its first poll.
            *this.ctx = create(this.site);
            *this.announced = config::epoch(config);
        } else if *this.announced != config::epoch(config) {
            // Recorded before, for a session that may be gone: announced again, with the
            // poll it runs in as its parent (readers keep a context's first Create).
            announce(*this.ctx, this.site);
            *this.announced = config::epoch(config);
        }
        let (ctx, frame) = (*this.ctx, this.site.id());
        let outermost = current_context() == 0;
        record(
            now(),
            Event::Resume { ctx, frame },
            StackEffect::Push(ctx, frame),
        );
        let unwind = UnwindGuard { ended: this.ended };
        if outermost {
            // (Not marked as the outer poll, as `current_context` says so while recording:
            // should recording stop within it, a nested future may register too, which
            // costs only its slot.)
            keep_registered(this.task, cx.waker());
        }
        let result = if outermost {
            if this
                .wake
                .as_ref()
                .is_some_and(|(recorder, _)| !recorder.inner.will_wake(cx.waker()))
            {
                *this.wake = None;
            }
            let (recorder, waker) = this.wake.get_or_insert_with(|| {
                let recorder = Arc::new(WakeRecorder {
                    ctx,
                    inner: cx.waker().clone(),
                    armed: AtomicBool::new(false),
                });
                let waker = Waker::from(Arc::clone(&recorder));
                (recorder, waker)
            });
            // Relaxed: the flag only decides which wake is recorded, and orders nothing.
            recorder.armed.store(true, Ordering::Relaxed);
            this.inner.poll(&mut Context::from_waker(waker))
        } else {
            this.inner.poll(cx)
        };
        let ended = unwind.defuse();
        let end = if result.is_ready() {
            *ended = true;
            *this.task = None;
            Event::Complete
        } else {
            Event::Suspend
        };
        // The pop happens even if recording stopped meanwhile: the poll stack must unwind.
        record(now(), end, StackEffect::Pop);
        result
    }
}

/// Keeps an outermost future registered as a pending task with its executor's `waker`.
#[inline]
fn keep_registered(task: &mut Option<(Arc<TaskSlot>, Waker)>, waker: &Waker) {
    match task {
        Some((_, held)) if held.will_wake(waker) => {}
        _ => register_anew(task, waker),
    }
}

#[cold]
#[inline(never)]
fn register_anew(task: &mut Option<(Arc<TaskSlot>, Waker)>, waker: &Waker) {
    match task {
        Some((slot, held)) => {
            slot.renew(waker);
            waker.clone_into(held);
        }
        None => *task = Some((pending::register(waker), waker.clone())),
    }
}

/// The waker an outermost instrumented future polls with: records its first wake since the
/// last poll began, then wakes the executor's waker.
#[derive(Debug)]
struct WakeRecorder {
    ctx: u64,
    inner: Waker,
    armed: AtomicBool,
}

impl Wake for WakeRecorder {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.armed.swap(false, Ordering::Relaxed)
            && current_context() != self.ctx
            && config::is_recording(config::current())
        {
            record(now(), Event::Wake { ctx: self.ctx }, StackEffect::None);
        }
        self.inner.wake_by_ref();
    }
}

/// Records Unwind (and pops the poll) if the inner poll panics.
struct UnwindGuard<'a> {
    ended: &'a mut bool,
}

impl<'a> UnwindGuard<'a> {
    fn defuse(self) -> &'a mut bool {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped (ManuallyDrop) and never used again, so moving the
        // reference out of it leaves no second owner of it.
        unsafe { std::ptr::read(&this.ended) }
    }
}

impl Drop for UnwindGuard<'_> {
    fn drop(&mut self) {
        *self.ended = true;
        record(now(), Event::Unwind, StackEffect::Pop);
    }
}

/// Instrumenting any future.
pub trait FutureExt: Future + Sized {
    /// Instruments this future as a frame called `name`; one frame per distinct name and
    /// source location of the call.
    #[track_caller]
    fn profiled(self, name: &'static str) -> Profiled<Self> {
        Profiled::new(self, site::named(name, Location::caller()))
    }

    /// Instruments this future as a frame of `site` (a `static`), with no lookup at all.
    fn profiled_at(self, site: &'static Site) -> Profiled<Self> {
        Profiled::new(self, site)
    }
}

impl<F: Future> FutureExt for F {}
