//! CPU samples joined to async callstacks: a sample taken inside an instrumented poll carries
//! that poll's context, and the profile builder puts the async frames above the executor's.

use std::time::Duration;

mod common;

use common::poll::{block_on, yield_once};
use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_insight::profile::FrameKind;
use eventpipe_insight::{build_profile, SampleSelection};
use eventpipe_profiler::{cpu, futures};
use futures::profiled;
use nettrace::TraceReader;

/// This thread's CPU time: the busy loop runs for CPU time, not wall time, so a loaded
/// machine does not thin out its samples.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[inline(never)]
fn busy_inside_inner(cpu: Duration) -> u64 {
    let until = thread_cpu_time() + cpu;
    let mut x = 1u64;
    while thread_cpu_time() < until {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.rotate_left(5) ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    x
}

#[profiled]
async fn inner(slices: u32) -> u64 {
    let mut x = 0;
    for _ in 0..slices {
        x ^= busy_inside_inner(Duration::from_millis(50));
        yield_once().await;
    }
    x
}

#[profiled]
async fn outer(slices: u32) -> u64 {
    inner(slices).await
}

#[test]
fn cpu_samples_inside_a_poll_show_its_async_callstack() {
    cpu::register().unwrap();
    futures::register();
    let path = std::env::temp_dir().join(format!("async-cpu-{}.nettrace", std::process::id()));
    let session = Session::start(SessionConfig::new(
        vec![
            ProviderConfig::parse("EventPipeRs-CpuSampler:0:5:Rate=1000").unwrap(),
            ProviderConfig::parse("EventPipeRs-AsyncProfiler:0:5").unwrap(),
        ],
        Output::File(path.clone()),
    ))
    .unwrap();
    let worker = std::thread::spawn(|| block_on(outer(16)));
    worker.join().unwrap();
    session.stop().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();

    let built = build_profile(
        &mut TraceReader::from_slice(&bytes).unwrap(),
        SampleSelection::Cpu,
    )
    .unwrap();
    let p = &built.profile;
    let (mut busy, mut with_async) = (0u64, 0u64);
    for s in &p.samples {
        let stack: Vec<_> = p.stacks[s.stack].iter().map(|&f| &p.frames[f]).collect();
        let Some(at_busy) = stack
            .iter()
            .position(|f| f.function.ends_with("busy_inside_inner"))
        else {
            continue;
        };
        busy += s.weight;
        let asyncs: Vec<(usize, &str)> = stack
            .iter()
            .enumerate()
            .filter(|(_, f)| f.kind == FrameKind::Async)
            .map(|(i, f)| (i, f.function.as_str()))
            .collect();
        // Root first: outer, then inner, both above the busy function.
        if asyncs.len() == 2
            && asyncs[0].1.ends_with("::outer")
            && asyncs[1].1.ends_with("::inner")
            && asyncs[1].0 < at_busy
        {
            with_async += s.weight;
        }
    }
    assert!(busy >= 200, "only {busy} samples in the busy function");
    // Samples taken just as a poll ends can miss it; nearly all are inside one.
    assert!(
        with_async * 100 >= busy * 95,
        "{with_async} of {busy} samples carry outer > inner"
    );
}
