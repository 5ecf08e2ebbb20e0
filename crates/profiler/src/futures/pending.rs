//! Pending tasks, for "where is each task suspended now" (`eptrace stack`): a suspended
//! task records nothing until it is polled again, so a session that asks for the stacks of
//! pending tasks (`WakePending=1`) has every task woken once. Each is then polled while the
//! session records, suspends again where it waits, and its Suspend records carry the whole
//! await chain. A spurious wake is allowed by `Future`'s contract: the executor polls the
//! task, whose futures return `Pending` again.
//!
//! To wake a task, its waker is needed while no session records: so the outermost
//! instrumented future of each task (no instrumented poll runs around it on its thread)
//! registers, at its first poll, a slot holding its executor's waker, renewed only when
//! `Waker::will_wake` says the executor's changed. The registry keeps weak references: a
//! future that ends or is dropped frees its slot by dropping the one strong reference, with
//! no lock; dead entries are swept when a shard has doubled since its last sweep.
//!
//! The cost while no session records: a thread-local flag set and cleared around each
//! outermost poll (and read by the polls nested in it), and a `will_wake` comparison.

use std::cell::Cell;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::Waker;

/// A registered task: the waker that polls it again.
#[derive(Debug)]
pub(crate) struct TaskSlot {
    waker: Mutex<Waker>,
}

impl TaskSlot {
    /// The executor's waker changed (the task moved, or the executor renews wakers).
    pub(crate) fn renew(&self, waker: &Waker) {
        waker.clone_into(&mut self.waker.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

const SHARDS: usize = 16;

/// Weak references to the slots, in shards a thread picks by its own index.
struct Shard {
    slots: Vec<Weak<TaskSlot>>,
    /// The length after the last sweep.
    swept: usize,
}

static REGISTRY: [Mutex<Shard>; SHARDS] = [const {
    Mutex::new(Shard {
        slots: Vec::new(),
        swept: 0,
    })
}; SHARDS];

thread_local! {
    /// Whether an outermost instrumented poll runs on this thread.
    static IN_POLL: Cell<bool> = const { Cell::new(false) };
    /// This thread's shard.
    static SHARD: usize = next_shard();
}

fn next_shard() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    // Relaxed: only spreads threads over the shards.
    NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS
}

/// Whether an instrumented poll already runs on this thread (this one is nested in it).
#[inline]
pub(crate) fn in_poll() -> bool {
    IN_POLL.with(Cell::get)
}

/// Marks this thread as inside an outermost instrumented poll until dropped (also when the
/// poll panics), then restores what it was.
pub(crate) struct OuterPoll(bool);

impl OuterPoll {
    #[inline]
    pub(crate) fn enter() -> OuterPoll {
        OuterPoll(IN_POLL.with(|p| p.replace(true)))
    }
}

impl Drop for OuterPoll {
    #[inline]
    fn drop(&mut self) {
        IN_POLL.with(|p| p.set(self.0));
    }
}

/// Registers a task whose executor wakes it with `waker`; the slot lives while the returned
/// reference does.
pub(crate) fn register(waker: &Waker) -> Arc<TaskSlot> {
    let slot = Arc::new(TaskSlot {
        waker: Mutex::new(waker.clone()),
    });
    let index = SHARD.try_with(|s| *s).unwrap_or(0);
    let mut shard = REGISTRY[index]
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if shard.slots.len() >= 2 * shard.swept.max(32) {
        shard.slots.retain(|w| w.strong_count() > 0);
        shard.swept = shard.slots.len();
    }
    shard.slots.push(Arc::downgrade(&slot));
    slot
}

/// Wakes every registered task once; how many.
pub(crate) fn wake_all() -> usize {
    let mut wakers = Vec::new();
    for shard in &REGISTRY {
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        shard.slots.retain(|w| match w.upgrade() {
            Some(slot) => {
                wakers.push(
                    slot.waker
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone(),
                );
                true
            }
            None => false,
        });
        shard.swept = shard.slots.len();
    }
    // Outside the locks: a waker may run the task here (a local executor).
    let woken = wakers.len();
    for waker in wakers {
        waker.wake();
    }
    woken
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Counting(AtomicUsize);

    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// `wake_all` wakes every test's tasks: one such test at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn registered_tasks_are_woken_once_each_and_dropped_ones_not_at_all() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let live = Arc::new(Counting(AtomicUsize::new(0)));
        let gone = Arc::new(Counting(AtomicUsize::new(0)));
        let kept: Vec<Arc<TaskSlot>> = (0..100)
            .map(|_| register(&Waker::from(Arc::clone(&live))))
            .collect();
        let dropped: Vec<Arc<TaskSlot>> = (0..50)
            .map(|_| register(&Waker::from(Arc::clone(&gone))))
            .collect();
        drop(dropped);
        assert!(wake_all() >= 100);
        assert_eq!(live.0.load(Ordering::SeqCst), 100);
        assert_eq!(gone.0.load(Ordering::SeqCst), 0);
        // A dropped slot's waker (the executor's task reference) is released with it.
        drop(kept);
        assert_eq!(Arc::strong_count(&live), 1);
        assert_eq!(Arc::strong_count(&gone), 1);
    }

    #[test]
    fn a_renewed_waker_is_the_one_woken() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let first = Arc::new(Counting(AtomicUsize::new(0)));
        let second = Arc::new(Counting(AtomicUsize::new(0)));
        let slot = register(&Waker::from(Arc::clone(&first)));
        slot.renew(&Waker::from(Arc::clone(&second)));
        wake_all();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_outer_poll_flag_is_cleared_even_by_a_panic() {
        assert!(!in_poll());
        let r = std::panic::catch_unwind(|| {
            let _outer = OuterPoll::enter();
            assert!(in_poll());
            panic!("in the poll");
        });
        assert!(r.is_err());
        assert!(!in_poll());
    }
}
