//! Heap snapshots on request: a session with `Snapshot=1` gets the tracked live set once,
//! ended by a `HeapSnapshot` event whose count is exactly what was written; before the
//! program tracks its heap the snapshot is empty and says so (`SampleInterval` 0); a
//! snapshot session neither starts sampling nor gets a second profile when it ends.

mod common;

use std::alloc::System;
use std::time::{Duration, Instant};

use eventpipe_profiler::alloc::{is_enabled, register, track_heap, ProfiledAllocator};

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

/// Starts a snapshot session, waits for its `HeapSnapshot` event to be written (the
/// emitter writes it once the session runs), stops it and reads it back.
fn snapshot(tag: &str) -> Vec<common::Read> {
    let before = eventpipe_profiler::alloc::stats().heap_profiles;
    let (session, path) = common::start(tag, "Snapshot=1");
    let deadline = Instant::now() + Duration::from_secs(30);
    while eventpipe_profiler::alloc::stats().heap_profiles == before {
        assert!(Instant::now() < deadline, "no snapshot within 30 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    common::stop_and_read(session, path)
}

#[test]
fn snapshots_on_request_are_whole_and_say_when_nothing_is_tracked() {
    register();
    // Nothing tracked yet: the snapshot is only its end, saying so; the request did not
    // turn sampling on.
    let empty = snapshot("untracked");
    assert!(!is_enabled());
    let ends: Vec<_> = empty.iter().filter(|e| e.name == "HeapSnapshot").collect();
    assert_eq!(ends.len(), 1, "{empty:?}");
    assert_eq!(ends[0].get("SampleInterval"), 0);
    assert_eq!(ends[0].get("Allocations"), 0);
    assert!(!empty.iter().any(|e| e.name == "LiveAllocation"));

    track_heap(4096);
    assert!(is_enabled(), "tracking samples with no session");
    // A live set tracked with no session running: 2,000 blocks of 8 KiB (sampled with
    // probability 1 - e^-2 each).
    let kept: Vec<Box<[u8]>> = (0..2000)
        .map(|i| vec![i as u8; 8192].into_boxed_slice())
        .collect();
    let events = snapshot("tracked");
    let live: Vec<_> = events
        .iter()
        .filter(|e| e.name == "LiveAllocation")
        .collect();
    let ends: Vec<_> = events.iter().filter(|e| e.name == "HeapSnapshot").collect();
    assert_eq!(ends.len(), 1);
    let end = ends[0];
    assert_eq!(end.get("SampleInterval"), 4096);
    assert_eq!(
        end.get("Allocations"),
        live.len() as u64,
        "the count is what was written"
    );
    // One snapshot only: the session's end adds no second profile.
    assert!(live
        .iter()
        .all(|e| e.get("Snapshot") == end.get("Snapshot")));
    let blocks = live.iter().filter(|e| e.get("Size") == 8192).count();
    assert!(
        (1500..=2000).contains(&blocks),
        "{blocks} of 2,000 blocks sampled"
    );
    // Still tracking after the snapshot session ended.
    assert!(is_enabled());
    std::hint::black_box(&kept);
}
