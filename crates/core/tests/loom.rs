//! Loom models of the runtime's concurrency-critical state machines, each through the real
//! code (`eventpipe_core::loom_model` forwards to it under loom's primitives):
//!
//! - the writer → drain buffer hand-off (`buffer.rs`; every data byte a tracked cell);
//! - per-thread state reclaim (`threads.rs`): a thread writing its last events and exiting
//!   while the drain snapshots, drains and removes it;
//! - Block-mode park/abort (`manager.rs`): writers parked on an exhausted budget, woken by
//!   the drain freeing a buffer or by the session stopping.
//!
//! Run with `ci/loom.sh`; in a normal build this file is empty. A lost wakeup shows up as
//! loom's deadlock report (every thread blocked); a leaked `Arc` (state or buffer) as its
//! leak report.
#![cfg(eventpipe_loom)]

use eventpipe_core::loom_model::{Buffer, BufferManager, NoBuffer};
use loom::sync::Arc;

/// The writer publishes two records and retires the buffer; the drain polls. Every chunk it
/// reads ends on a record boundary, the bytes are exactly what was written, and once it has
/// seen `retired` one more read returns everything that remained.
#[test]
fn published_records_are_whole_and_retire_publishes_the_rest() {
    loom::model(|| {
        let buf = Arc::new(Buffer::new(4));
        let writer = {
            let buf = Arc::clone(&buf);
            loom::thread::spawn(move || {
                // SAFETY: this thread is the only writer; 4 bytes fit.
                let end = unsafe { buf.append(0, &[&[1, 2]]) };
                // SAFETY: as above, `end` is the published end.
                unsafe { buf.append(end, &[&[3], &[4]]) };
                buf.retire();
            })
        };
        let mut got: Vec<u8> = Vec::new();
        loop {
            let retired = buf.is_retired();
            let chunk = buf.read(got.len());
            assert!(chunk.len() % 2 == 0, "a read split a record: {chunk:?}");
            got.extend(chunk);
            if retired {
                assert!(
                    buf.read(got.len()).is_empty(),
                    "bytes published after retire"
                );
                break;
            }
            loom::thread::yield_now();
        }
        assert_eq!(got, [1, 2, 3, 4]);
        writer.join().unwrap();
    });
}

/// A drain that reads while the writer is mid-append never sees unpublished bytes: it only
/// ever sees a prefix of the records, in order.
#[test]
fn a_concurrent_read_sees_a_prefix_of_whole_records() {
    loom::model(|| {
        let buf = Arc::new(Buffer::new(4));
        let writer = {
            let buf = Arc::clone(&buf);
            loom::thread::spawn(move || {
                // SAFETY: single writer; 4 bytes fit.
                let end = unsafe { buf.append(0, &[&[7, 8]]) };
                // SAFETY: as above.
                unsafe { buf.append(end, &[&[9, 10]]) };
            })
        };
        let seen = buf.read(0);
        assert!(
            seen.is_empty() || seen == [7, 8] || seen == [7, 8, 9, 10],
            "read {seen:?}"
        );
        writer.join().unwrap();
        assert_eq!(buf.read(0), [7, 8, 9, 10]);
    });
}

/// A thread writes its last events (sequence numbers 1–3) and exits while the drain runs
/// passes until it removes the thread's state. Buffers hold one record and the Drop-mode
/// budget two buffers, so the thread switches buffers under the drain's snapshots and each
/// event is committed or lost depending on whether the drain freed a buffer in time. Each
/// pass reads at most one record (as if the rest were past its cutoff), so an exited thread
/// can still have records to read. Checks: the state is removed only after its thread
/// exited and every committed event was read (no event lost), exactly once, carrying the
/// last sequence number (3, also when the last events were lost) and the loss count; no
/// sequence-point bound claims an event that a later pass reads; afterwards no state,
/// buffer or byte is held.
#[test]
fn an_exiting_thread_is_removed_once_after_its_last_event_is_drained() {
    exiting_thread_model(usize::MAX);
}

/// The same, with each pass listing only the thread's oldest buffer (the drain lists a
/// prefix of a long backlog): no removal while a buffer is unlisted, and no bound that
/// claims a record in an unlisted buffer or goes back.
#[test]
fn an_exiting_thread_is_removed_once_when_passes_list_one_buffer() {
    exiting_thread_model(1);
}

fn exiting_thread_model(max_buffers: usize) {
    loom::model(move || {
        let manager = Arc::new(BufferManager::new(2, false));
        let thread = manager.add_thread();
        let index = thread.index();
        let writer = {
            let manager = Arc::clone(&manager);
            loom::thread::spawn(move || {
                let mut lost = Vec::new();
                let mut current: Option<Buffer> = None;
                for seq in 1..=3u8 {
                    // The last record filled the buffer: retire it, get the next (writer.rs).
                    if let Some(full) = current.take() {
                        full.retire();
                    }
                    match manager.acquire_buffer(&thread, 1, u32::from(seq)) {
                        Ok(buffer) => {
                            // SAFETY: this thread is the new buffer's only writer; 1 byte fits.
                            unsafe { thread.write(&buffer, 0, seq) };
                            current = Some(buffer);
                        }
                        Err(NoBuffer::Dropped) => lost.push(seq),
                        Err(NoBuffer::SessionEnded) => {
                            panic!("event {seq} refused: the state was removed under its thread")
                        }
                    }
                }
                thread.exit(current);
                lost
            })
        };
        let mut read = Vec::new();
        let mut bound = 0u32;
        let removed = loop {
            let pass = manager.drain_pass(1, max_buffers);
            for (_, records) in &pass.read {
                for &seq in records {
                    assert!(
                        u32::from(seq) > bound,
                        "event {seq} arrived after a bound of {bound} counted it lost"
                    );
                }
                read.extend_from_slice(records);
            }
            for &(_, b) in &pass.bounds {
                assert!(b >= bound, "bound went back from {bound} to {b}");
                bound = b;
            }
            if !pass.removed.is_empty() {
                break pass.removed;
            }
            loom::thread::yield_now();
        };
        // The thread had exited (it is joinable): every event it attempted was read or lost
        // by the pass that removed it.
        let lost = writer.join().unwrap();
        let mut accounted = [read.as_slice(), lost.as_slice()].concat();
        accounted.sort_unstable();
        assert_eq!(
            accounted,
            [1, 2, 3],
            "removed with events unread: read {read:?}, lost {lost:?}"
        );
        assert_eq!(
            removed,
            [(index, 3, lost.len() as u64)],
            "removed once, carrying the last number and the loss count"
        );
        let after = manager.drain_pass(1, max_buffers);
        assert!(
            after.removed.is_empty() && after.read.is_empty(),
            "{after:?}"
        );
        assert_eq!(manager.usage(), (0, 0, 0), "states, buffers, bytes");
    });
}

/// The budget (one buffer) is held by a thread that has written and exited; a Block-mode
/// writer asks for a buffer while the drain makes one pass that frees it. The writer gets
/// the buffer whether it parked before the free or came after it: a lost wakeup would
/// leave it parked with nobody left to notify, which loom reports as a deadlock.
#[test]
fn a_parked_writer_wakes_when_the_drain_frees_a_buffer() {
    loom::model(|| {
        let manager = Arc::new(BufferManager::new(1, true));
        let holder = manager.add_thread();
        let held = manager.acquire_buffer(&holder, 1, 1).unwrap();
        // SAFETY: the only writer of the fresh buffer; 1 byte fits.
        unsafe { holder.write(&held, 0, 1) };
        holder.exit(Some(held));
        let writer = {
            let manager = Arc::clone(&manager);
            let thread = manager.add_thread();
            loom::thread::spawn(move || {
                let got = manager.acquire_buffer(&thread, 1, 1);
                assert!(got.is_ok(), "{got:?}: Block mode never drops");
                assert!(
                    manager.usage().2 <= 1,
                    "past the budget: {:?}",
                    manager.usage()
                );
                thread.exit(got.ok());
            })
        };
        let pass = manager.drain_pass(1, usize::MAX);
        assert_eq!(pass.removed.len(), 1, "the holder is reclaimed: {pass:?}");
        writer.join().unwrap();
    });
}

/// The budget is held by a live thread, so nothing is ever freed; two Block-mode writers
/// park while the session stops. Both return, refused as outside the session (not
/// dropped): a wakeup lost to either one is a deadlock.
#[test]
fn stopping_releases_every_parked_writer() {
    loom::model(|| {
        let manager = Arc::new(BufferManager::new(1, true));
        let holder = manager.add_thread();
        let _held = manager.acquire_buffer(&holder, 1, 1).unwrap();
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let manager = Arc::clone(&manager);
                let thread = manager.add_thread();
                loom::thread::spawn(move || manager.acquire_buffer(&thread, 1, 1).map(|_| ()))
            })
            .collect();
        manager.abort();
        for w in writers {
            assert_eq!(w.join().unwrap(), Err(NoBuffer::SessionEnded));
        }
    });
}

/// Two Block-mode writers wait for a one-buffer budget; the drain frees the one buffer
/// (notifying both), then the session stops. At most one writer gets the buffer and the
/// bytes allocated never exceed the budget; the other returns once the session stops.
#[test]
fn woken_writers_never_pass_the_budget() {
    loom::model(|| {
        let manager = Arc::new(BufferManager::new(1, true));
        let holder = manager.add_thread();
        let held = manager.acquire_buffer(&holder, 1, 1).unwrap();
        holder.exit(Some(held));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let manager = Arc::clone(&manager);
                let thread = manager.add_thread();
                loom::thread::spawn(move || {
                    let got = manager.acquire_buffer(&thread, 1, 1);
                    let (_, buffers, bytes) = manager.usage();
                    assert!(bytes <= 1 && buffers <= 1, "past the budget: {bytes} bytes");
                    got.map(|_| ())
                })
            })
            .collect();
        manager.drain_pass(1, usize::MAX);
        manager.abort();
        let results: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        let granted = results.iter().filter(|r| r.is_ok()).count();
        assert!(granted <= 1, "two writers share a one-buffer budget");
        assert!(
            results.iter().all(|r| *r != Err(NoBuffer::Dropped)),
            "Block mode dropped: {results:?}"
        );
    });
}
