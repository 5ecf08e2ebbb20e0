//! Loom models of the async profiler's per-thread buffer hand-off (`futures/handoff.rs`),
//! through the real code (`eventpipe_profiler::loom_model` forwards to it under loom's
//! atomics, SeqCst fences and tracked cell): the owner thread recording, an idle flusher
//! that gives up on a writing owner, a stopping session that waits, and the owner's exit.
//!
//! Every model checks that no record is lost or emitted twice and that records reach the
//! trace in order; the buffer lives in a loom-tracked cell, so the owner and an outsider
//! touching it at once (a flush while writing) is loom's causality report, and each access
//! also asserts that nobody else is inside.
//!
//! Run with `ci/loom.sh`; in a normal build this file is empty.
#![cfg(eventpipe_profiler_loom)]

use eventpipe_profiler::loom_model::Handoff;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::{Arc, Mutex};

/// The model's buffer: records not yet emitted.
#[derive(Debug, Default)]
struct Buf {
    pending: Vec<u32>,
}

/// The shared state of one model run: the hand-off, the trace (records in the order they
/// were emitted) and a flag that is set while someone holds the buffer.
#[derive(Debug)]
struct World {
    handoff: Handoff<Buf>,
    trace: Mutex<Vec<u32>>,
    inside: AtomicBool,
}

impl World {
    fn new() -> Arc<Self> {
        Arc::new(World {
            handoff: Handoff::new(Buf::default()),
            trace: Mutex::new(Vec::new()),
            inside: AtomicBool::new(false),
        })
    }

    /// Runs `f` as the holder of the buffer, checking that nobody else is.
    fn hold<R>(&self, f: impl FnOnce() -> R) -> R {
        // Relaxed: a check of the model that must add no synchronisation to the protocol
        // under test; a read-modify-write reads the latest value whatever its ordering, so
        // two overlapping holders cannot both read `false`.
        assert!(
            !self.inside.swap(true, Ordering::Relaxed),
            "two holders of the buffer at once"
        );
        let r = f();
        // Relaxed: as above.
        self.inside.store(false, Ordering::Relaxed);
        r
    }

    /// The owner records `records`, emitting its buffer itself when it holds `capacity`.
    fn owner_writes(&self, records: std::ops::Range<u32>, capacity: usize) {
        for record in records {
            // SAFETY: each model has exactly one owner thread, which calls this.
            unsafe {
                self.handoff.as_owner(|b| {
                    self.hold(|| {
                        b.pending.push(record);
                        if b.pending.len() == capacity {
                            self.trace.lock().unwrap().append(&mut b.pending);
                        }
                    })
                })
            };
        }
    }

    /// An outsider's flush: emits what the buffer holds. `None` when it did not wait and
    /// the owner was writing.
    fn flush(&self, wait: bool) -> Option<usize> {
        self.handoff.as_outsider(wait, |b| {
            self.hold(|| {
                let n = b.pending.len();
                self.trace.lock().unwrap().append(&mut b.pending);
                n
            })
        })
    }

    /// After every thread is done: the trace plus what is left is every record, once each,
    /// in order.
    fn check_all(&self, records: u32) {
        let left = self
            .flush(true)
            .expect("a waiting flush always gets the buffer");
        let trace = self.trace.lock().unwrap();
        assert_eq!(
            *trace,
            (0..records).collect::<Vec<_>>(),
            "records lost, duplicated or out of order ({left} in the final flush)"
        );
    }
}

/// The owner writes two records (the second fills the buffer, which it then emits itself)
/// while the idle flusher, which gives up on a writing owner, flushes once.
#[test]
fn an_idle_flush_racing_the_owner_neither_loses_nor_duplicates_records() {
    loom::model(|| {
        let world = World::new();
        let owner = {
            let world = Arc::clone(&world);
            loom::thread::spawn(move || world.owner_writes(0..3, 2))
        };
        world.flush(false);
        owner.join().unwrap();
        world.check_all(3);
    });
}

/// A stopping session waits for a record in progress, so its one flush always gets the
/// buffer, and takes every record written before it won it.
#[test]
fn a_waiting_flush_always_gets_the_buffer() {
    loom::model(|| {
        let world = World::new();
        let owner = {
            let world = Arc::clone(&world);
            loom::thread::spawn(move || world.owner_writes(0..2, 8))
        };
        assert!(world.flush(true).is_some(), "a waiting flush gave up");
        owner.join().unwrap();
        world.check_all(2);
    });
}

/// The idle flusher and a stopping session meet on the same buffer while its owner
/// records: the outsiders take turns (CAS on `outside`), and the owner waits out whichever
/// holds the buffer. Three threads that wait on each other make a large model: one record,
/// and a preemption bound of 2 (loom's own default is unbounded; `LOOM_MAX_PREEMPTIONS`
/// sets the other models').
#[test]
fn two_outsiders_and_the_owner_take_turns() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(1);
    builder.max_branches = 20_000;
    builder.check(|| {
        let world = World::new();
        let owner = {
            let world = Arc::clone(&world);
            loom::thread::spawn(move || world.owner_writes(0..1, 8))
        };
        let session = {
            let world = Arc::clone(&world);
            loom::thread::spawn(move || assert!(world.flush(true).is_some()))
        };
        world.flush(false);
        owner.join().unwrap();
        session.join().unwrap();
        world.check_all(1);
    });
}

/// The owner records and exits (its thread-local destructor marks the buffer exited); the
/// flusher that sees it exited flushes with `wait`, which cannot block, and collects every
/// record; one that does not see it yet may flush or skip.
#[test]
fn once_the_flusher_sees_the_owner_exited_one_flush_takes_every_record() {
    loom::model(|| {
        let world = World::new();
        let owner = {
            let world = Arc::clone(&world);
            loom::thread::spawn(move || {
                world.owner_writes(0..2, 8);
                world.handoff.mark_exited();
            })
        };
        if world.handoff.has_exited() {
            world
                .flush(true)
                .expect("a waiting flush always gets the buffer");
            assert_eq!(*world.trace.lock().unwrap(), [0, 1]);
        } else {
            world.flush(false);
        }
        owner.join().unwrap();
        world.check_all(2);
    });
}
