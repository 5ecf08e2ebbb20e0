//! Sampling follows the sessions that enable the provider, through its enable callback.
//!
//! - No session: nothing is sampled, nothing tracked.
//! - A session below `Informational` does not start sampling; one at `Verbose` does.
//! - Two overlapping sessions: sampling runs while either does, at the smaller interval;
//!   stopping the first keeps it on (at the second's interval), stopping both turns it off
//!   and empties the table.
//! - Every sample is recorded: with sampling steady, the samples taken equal the entries
//!   tracked plus the tracked frees (no sample forgotten, no try-lock skipping one).

mod common;

use std::alloc::System;
use std::sync::Mutex;
use std::time::Duration;

use eventpipe_profiler::alloc::{is_enabled, register, stats, ProfiledAllocator};

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

/// The profiler is process-wide: these tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

#[inline(never)]
fn allocate(bytes: usize) {
    let mut kept = Vec::new();
    let mut total = 0;
    while total < bytes {
        let v = vec![1u8; 1000];
        total += v.len();
        kept.push(v);
        if kept.len() > 64 {
            kept.clear();
        }
    }
}

#[test]
fn nothing_is_sampled_without_a_session() {
    let _s = serial();
    register();
    assert!(!is_enabled());
    let before = stats();
    allocate(16 << 20);
    let after = stats();
    assert_eq!(after.samples, before.samples);
    assert_eq!(after.tracked, 0);
}

#[test]
fn a_session_below_informational_does_not_sample() {
    let _s = serial();
    register();
    let path = std::env::temp_dir().join(format!("ep-prof-warn-{}.nettrace", std::process::id()));
    let session = eventpipe::Session::start(eventpipe::SessionConfig::new(
        vec![
            eventpipe::ProviderConfig::parse("EventPipeRs-Allocations:0:3:SampleInterval=4096")
                .unwrap(),
        ],
        eventpipe::Output::File(path.clone()),
    ))
    .unwrap();
    assert!(
        !is_enabled(),
        "Warning level records none of the profiler's events"
    );
    session.stop().unwrap();
    std::fs::remove_file(path).ok();
}

#[test]
fn overlapping_sessions_keep_sampling_until_the_last_one_stops() {
    let _s = serial();
    register();
    let (a, path_a) = common::start("overlap-a", "SampleInterval=65536");
    assert!(is_enabled());
    assert_eq!(stats().sample_interval, 65_536);
    let (b, path_b) = common::start("overlap-b", "SampleInterval=8192");
    assert_eq!(stats().sample_interval, 8192, "the smaller interval wins");
    allocate(8 << 20);
    let events_a = common::stop_and_read(a, path_a);
    assert!(is_enabled(), "the second session still enables it");
    assert_eq!(stats().sample_interval, 8192);
    allocate(8 << 20);
    let events_b = common::stop_and_read(b, path_b);
    assert!(!is_enabled());
    let after = stats();
    assert_eq!(
        after.tracked, 0,
        "the table is empty once the last session stops"
    );
    let count = |events: &[common::Read]| {
        events
            .iter()
            .filter(|e| e.name == "AllocationSample")
            .count()
    };
    // 8 MiB at 8 KiB: about 1000 samples while both ran, then as many for b alone.
    assert!(count(&events_a) > 500, "{}", count(&events_a));
    assert!(count(&events_b) > count(&events_a) + 500);
}

#[test]
fn every_sample_is_tracked_until_its_free() {
    let _s = serial();
    register();
    let before = stats();
    let (session, path) = common::start("accounting", "SampleInterval=4096");
    let threads: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(|| allocate(32 << 20)))
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Steady: no stop raced a sample. The session's own threads (its drain) allocate too,
    // and a sample of theirs may be counted but not yet in the table as the figures are
    // read: they are read until they balance (a sample that never reaches the table, or a
    // free counted twice, never does).
    let balanced = |now: &eventpipe_profiler::alloc::Stats| {
        now.samples - before.samples
            == now.tracked_frees - before.tracked_frees + now.tracked as u64
    };
    let mut now = stats();
    for _ in 0..200 {
        if balanced(&now) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        now = stats();
    }
    let samples = now.samples - before.samples;
    let frees = now.tracked_frees - before.tracked_frees;
    assert_eq!(now.untracked_samples, before.untracked_samples);
    assert!(samples > 10_000, "{samples}");
    assert_eq!(
        samples,
        frees + now.tracked as u64,
        "every sample is either still tracked or was freed"
    );
    let events = common::stop_and_read(session, path);
    let allocs = events
        .iter()
        .filter(|e| e.name == "AllocationSample")
        .count() as u64;
    let freed = events.iter().filter(|e| e.name == "FreeSample").count() as u64;
    // Each sample and each tracked free became an event (unless the emitter's queue was
    // full); samples taken after the snapshot above may add more.
    let dropped = stats().events_dropped - before.events_dropped;
    assert!(
        allocs + dropped >= samples,
        "{allocs} + {dropped} < {samples}"
    );
    assert!(freed + dropped >= frees, "{freed} + {dropped} < {frees}");
    assert!(eventpipe_profiler::alloc::flush(Duration::from_secs(1)));
}
