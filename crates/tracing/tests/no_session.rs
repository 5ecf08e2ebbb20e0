//! With no session the layer records nothing: no field is formatted, nothing is allocated,
//! and `is_recording` is false; a session on another target changes nothing for this one.
//! Its own binary: no other test may start a session while it looks.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Counted, FileSession};
use eventpipe_tracing::{is_recording, EventPipeLayer};
use tracing::Dispatch;
use tracing_subscriber::prelude::*;

/// Counts allocations made by the current thread.
struct CountingAlloc;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counting touches only a const-initialised thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: forwarded from the caller.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded from the caller.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: forwarded from the caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

static FORMATTED: AtomicUsize = AtomicUsize::new(0);

fn emit(n: u64) {
    tracing::info!(target: "quiet::target", n, f = 0.5, v = ?Counted(&FORMATTED, "v"), "message {n}");
}

fn emit_span() {
    tracing::info_span!(target: "quiet::target", "work", v = ?Counted(&FORMATTED, "s"))
        .in_scope(|| {});
}

#[test]
fn with_no_session_the_layer_records_nothing() {
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(EventPipeLayer::new()));
    tracing::dispatcher::with_default(&dispatch, || {
        assert!(!is_recording());
        emit(0); // declares the callsite
        emit_span();
        let before = allocations();
        for n in 0..1000 {
            emit(n);
        }
        assert_eq!(allocations() - before, 0, "events allocate nothing");
        emit_span();
        assert_eq!(FORMATTED.load(Ordering::SeqCst), 0, "nothing formatted");
        assert!(!is_recording());

        // A session recording another target: the layer's flag is up, this target stays off.
        let other = FileSession::start("other", &["some-other-target"]);
        tracing::info!(target: "some::other::target", "declare it");
        assert!(is_recording());
        for n in 0..100 {
            emit(n);
        }
        emit_span();
        assert_eq!(
            FORMATTED.load(Ordering::SeqCst),
            0,
            "another target's session"
        );

        // Now this target: every event is formatted once and recorded, without allocating
        // per event.
        let session = FileSession::start("quiet", &["quiet-target"]);
        let before = allocations();
        for n in 0..1000 {
            emit(n);
        }
        let per_1000 = allocations() - before;
        assert!(
            per_1000 < 100,
            "{per_1000} allocations for 1000 recorded events"
        );
        emit_span();
        assert_eq!(FORMATTED.load(Ordering::SeqCst), 1001);
        let (written, recs) = session.stop();
        assert_eq!(written, 1000 + 4);
        assert_eq!(
            recs.iter().filter(|r| r.name.starts_with("Event ")).count(),
            1000
        );
        assert!(is_recording(), "the other session still listens");
        let (other_written, _) = other.stop();
        assert_eq!(other_written, 1);
        assert!(!is_recording(), "no session left");

        for n in 0..100 {
            emit(n);
        }
        emit_span();
        assert_eq!(
            FORMATTED.load(Ordering::SeqCst),
            1001,
            "nothing after the stop"
        );
    });
}
