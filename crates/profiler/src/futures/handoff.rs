//! Who may touch a per-thread buffer: its owner thread on every record, or, rarely, one
//! other thread (the flusher, a stopping session). [`Handoff`] holds the contents and the two
//! flags that decide: `writing` (only the owner sets it) and `outside` (set by the one outside
//! thread at a time that wants the buffer, won by CAS among outsiders).
//!
//! ```text
//! owner:   writing = true; light fence; if outside { writing = false; wait; retry }
//!          ...record...; writing = false (Release)
//! outside: CAS outside false→true; heavy fence; wait until !writing (Acquire)
//!          ...emit...; outside = false (Release)
//! ```
//!
//! The two fences (`barrier.rs`: a compiler fence for the owner, `membarrier(2)` for the
//! outsider) order each side's store before its load, so at least one side sees the other's
//! flag: they never both proceed (the store-buffering litmus test, forbidden under SeqCst
//! fences). The owner's record then costs two plain stores and a load instead of a locked
//! read-modify-write. Acquire/Release on the flags publish the contents from one holder to
//! the next. An outsider holds the buffer across its event write, so the owner's next buffer
//! (higher `Sequence`) cannot reach the trace first; the owner waits (spinning, then
//! yielding) as it would for its own write of a full buffer. An outsider that finds the
//! owner writing either gives up (the idle flusher: a writing thread is not idle, and
//! flushes its own buffer when full) or waits for the record to finish (a stopping session,
//! which must collect every record).
//!
//! `exited` is the owner's last word: set after its last record, it tells the flusher that
//! waiting for a record cannot block, and that one more flush collects everything.
//!
//! `tests/loom.rs` model-checks this type (`cfg(eventpipe_profiler_loom)`, where the two
//! fences are SeqCst fences, which is what they are when the kernel lacks `membarrier`);
//! its unit tests below also run under Miri (`ci/miri.sh`).

use crate::sync::{spin_loop, yield_now, AtomicBool, Ordering, UnsafeCell};

use super::barrier;

/// A value owned by one thread and lent, now and then, to one outside thread at a time.
#[derive(Debug)]
pub(crate) struct Handoff<T> {
    /// Set by the owner around each access.
    writing: AtomicBool,
    /// Set by the outside thread that holds the value.
    outside: AtomicBool,
    /// Set by the owner once it will never access the value again.
    exited: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: `value` is only accessed by the owner while it holds `writing` with `outside`
// clear, or by the outsider holding `outside` with `writing` clear (module docs), so it is
// never accessed from two threads at once; it moves between threads, hence `T: Send`.
// Everything else is atomic.
unsafe impl<T: Send> Sync for Handoff<T> {}

impl<T> Handoff<T> {
    pub(crate) fn new(value: T) -> Self {
        Handoff {
            writing: AtomicBool::new(false),
            outside: AtomicBool::new(false),
            exited: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// The owner's access: claims the value (waiting out an outsider that holds it), runs
    /// `f` on it, and releases it.
    ///
    /// # Safety
    /// Only one thread, the owner, ever calls this on a given `Handoff` (the flag it sets is
    /// not exclusive among owners), and not from within `f`.
    #[inline]
    pub(crate) unsafe fn as_owner<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        self.claim_as_owner();
        let result = self.value.with_mut(|value| {
            // SAFETY: the one owner (caller's promise), holding `writing` and having seen
            // `outside` clear after its fence, has the value alone until it clears `writing`.
            f(unsafe { &mut *value })
        });
        // Release: publishes this access to the next outsider (its Acquire load of
        // `writing`).
        self.writing.store(false, Ordering::Release);
        result
    }

    fn claim_as_owner(&self) {
        loop {
            // Relaxed: ordered before the load of `outside` by the fence below, not by this
            // store's own ordering.
            self.writing.store(true, Ordering::Relaxed);
            // Pairs with the outsider's heavy fence: our store above and its store of
            // `outside` cannot both go unseen by the loads after the fences.
            barrier::light();
            // Acquire: an outsider that has finished published its changes to the value
            // with its Release store of `outside`.
            if !self.outside.load(Ordering::Acquire) {
                return;
            }
            // Someone is emitting this buffer: one event write. Step back and wait it out.
            // Release: nothing was touched, but a store that un-claims must not appear
            // before earlier accesses of ours.
            self.writing.store(false, Ordering::Release);
            let mut spins = 0u32;
            // Acquire: as above.
            while self.outside.load(Ordering::Acquire) {
                spins += 1;
                if spins < 64 {
                    spin_loop();
                } else {
                    yield_now();
                }
            }
        }
    }

    /// An outside thread's access: takes the value from its owner, runs `f` on it and gives
    /// it back. With `wait`, a record in progress is waited for; without, a value being
    /// written is left alone and `None` returned.
    pub(crate) fn as_outsider<R>(&self, wait: bool, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        // One outsider at a time (the flusher and a stopping session may meet here).
        // Acquire: the previous outsider's changes, published by its Release store of
        // `outside`.
        while self
            .outside
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            yield_now();
        }
        // Pairs with the owner's light fence (module docs).
        barrier::heavy();
        // Acquire: the owner's last access, published by its Release store of `writing`.
        while self.writing.load(Ordering::Acquire) {
            if !wait {
                // Release: hands back what we acquired, untouched.
                self.outside.store(false, Ordering::Release);
                return None;
            }
            yield_now();
        }
        let result = self.value.with_mut(|value| {
            // SAFETY: holding `outside` (won by CAS) and having seen `writing` clear after its
            // fence, this thread has the value alone until it clears `outside` (module docs).
            f(unsafe { &mut *value })
        });
        // Release: the owner's next claim (its Acquire load of `outside`) sees our changes.
        self.outside.store(false, Ordering::Release);
        Some(result)
    }

    /// The owner's goodbye, after its last access.
    pub(crate) fn mark_exited(&self) {
        // Release: an outsider's Acquire load of `exited` then sees the owner's last
        // accesses (also published by its Release store of `writing`).
        self.exited.store(true, Ordering::Release);
    }

    /// Whether the owner said goodbye: no access of its is in progress or to come, so
    /// [`as_outsider`](Self::as_outsider) with `wait` cannot block on it.
    pub(crate) fn has_exited(&self) -> bool {
        // Acquire: pairs with the Release in `mark_exited`.
        self.exited.load(Ordering::Acquire)
    }
}

#[cfg(all(test, not(eventpipe_profiler_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Records per writer: small under Miri, which runs this some 100× slower.
    const RECORDS: u32 = if cfg!(miri) { 200 } else { 20_000 };

    /// The model's buffer: records not yet emitted, and a check that nobody else is inside.
    #[derive(Debug, Default)]
    struct Buf {
        pending: Vec<u32>,
        inside: bool,
    }

    impl Buf {
        fn enter(&mut self) {
            assert!(!self.inside, "two holders at once");
            self.inside = true;
        }
        fn leave(&mut self) {
            self.inside = false;
        }
    }

    #[test]
    fn handoff_outsiders_take_every_record_exactly_once_and_in_order() {
        let handoff = Arc::new(Handoff::new(Buf::default()));
        let emitted = Arc::new(std::sync::Mutex::new(Vec::<u32>::new()));
        let owner = {
            let (handoff, emitted) = (Arc::clone(&handoff), Arc::clone(&emitted));
            std::thread::spawn(move || {
                for record in 0..RECORDS {
                    // SAFETY: this thread is the only owner.
                    unsafe {
                        handoff.as_owner(|b| {
                            b.enter();
                            b.pending.push(record);
                            // A full buffer: the owner emits it itself.
                            if b.pending.len() == 8 {
                                emitted.lock().unwrap().append(&mut b.pending);
                            }
                            b.leave();
                        })
                    };
                }
                handoff.mark_exited();
            })
        };
        // Two outsiders: an idle flusher that gives up on a writing owner, and one that
        // waits (a stopping session).
        let outsiders: Vec<_> = [false, true]
            .into_iter()
            .map(|wait| {
                let (handoff, emitted) = (Arc::clone(&handoff), Arc::clone(&emitted));
                std::thread::spawn(move || {
                    while !handoff.has_exited() {
                        handoff.as_outsider(wait, |b| {
                            b.enter();
                            emitted.lock().unwrap().append(&mut b.pending);
                            b.leave();
                        });
                        std::thread::yield_now();
                    }
                })
            })
            .collect();
        owner.join().unwrap();
        for o in outsiders {
            o.join().unwrap();
        }
        // The flusher's visit after the owner exited collects the rest.
        assert!(handoff.has_exited());
        let taken = handoff.as_outsider(true, |b| std::mem::take(&mut b.pending));
        let mut all = emitted.lock().unwrap().clone();
        all.extend(taken.unwrap());
        assert_eq!(all, (0..RECORDS).collect::<Vec<_>>());
    }

    #[test]
    fn handoff_an_outsider_that_does_not_wait_leaves_a_writing_owner_alone() {
        let handoff = Handoff::new(Buf::default());
        // The owner is mid-record: an outsider without `wait` gives up, one with it would
        // wait, and afterwards both get the value.
        // SAFETY: this thread is the only owner; `f` does not re-enter.
        unsafe {
            handoff.as_owner(|b| {
                b.pending.push(1);
                assert!(handoff.as_outsider(false, |_| ()).is_none());
            })
        };
        assert_eq!(handoff.as_outsider(false, |b| b.pending.len()), Some(1));
        assert_eq!(
            handoff.as_outsider(true, |b| b.pending.pop()),
            Some(Some(1))
        );
        assert!(!handoff.has_exited());
        handoff.mark_exited();
        assert!(handoff.has_exited());
    }
}
