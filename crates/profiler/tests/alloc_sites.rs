//! An allocation profile starts at the allocation's site: the frames between it and the
//! allocator (`Vec`'s and `RawVec`'s growth, `Global`, the global allocator's shims, the
//! profiling allocator) are the machinery, not the site, and no view shows them as the
//! leaf. The program allocates from one function through `Vec::with_capacity`; the
//! profile built from its trace, symbolized from this test binary, must name that function
//! as the leaf of (nearly) every sample.

use std::alloc::System;
use std::hint::black_box;

use eventpipe::{BufferingMode, Output, ProviderConfig, Session, SessionConfig};
use eventpipe_insight::{build_profile, SampleSelection, SampleUnit};
use eventpipe_profiler::alloc::{register, ProfiledAllocator};
use nettrace::TraceReader;

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

#[inline(never)]
fn allocation_site() -> Vec<u8> {
    Vec::with_capacity(black_box(4096))
}

#[test]
fn allocation_samples_start_at_the_allocating_function() {
    register();
    let path = std::env::temp_dir().join(format!(
        "eventpipe-profiler-alloc-sites-{}.nettrace",
        std::process::id()
    ));
    let session = Session::start(
        SessionConfig::new(
            vec![ProviderConfig::parse("EventPipeRs-Allocations:0:5:SampleInterval=8192").unwrap()],
            Output::File(path.clone()),
        )
        .mode(BufferingMode::Block),
    )
    .unwrap();
    // Kept, so the frees do not interleave; reserved, so the list's own growth is one
    // allocation.
    let mut kept = Vec::with_capacity(4096);
    for _ in 0..4096 {
        kept.push(allocation_site());
    }
    assert!(eventpipe_profiler::alloc::flush(
        std::time::Duration::from_secs(30)
    ));
    session.stop().unwrap();
    drop(kept);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();

    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let built = build_profile(&mut reader, SampleSelection::Allocations).unwrap();
    let p = &built.profile;
    assert_eq!(p.unit, SampleUnit::Bytes);
    let leaf = |stack: usize| {
        p.stacks[stack]
            .last()
            .map(|&f| p.frames[f].function.as_str())
    };
    let total: u64 = p.samples.iter().map(|s| s.weight).sum();
    let at_site: u64 = p
        .samples
        .iter()
        .filter(|s| leaf(s.stack).is_some_and(|f| f.ends_with("alloc_sites::allocation_site")))
        .map(|s| s.weight)
        .sum();
    let leaves: std::collections::BTreeSet<_> =
        p.samples.iter().filter_map(|s| leaf(s.stack)).collect();
    // 16 MiB allocated at the site, sampled every 8 KiB on average: about 2,000 samples.
    assert!(
        total > 0 && p.samples.len() > 500,
        "{} samples",
        p.samples.len()
    );
    assert!(
        at_site as f64 >= 0.95 * total as f64,
        "{at_site} of {total} bytes have the site as their leaf; leaves: {leaves:#?}"
    );
}
