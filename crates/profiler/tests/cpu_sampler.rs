//! The CPU sampler end to end: a session enabling `EventPipeRs-CpuSampler` starts it, its
//! samples are attributed to the sampled threads, and the time split between two busy
//! functions comes out in proportion.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_insight::{build_profile, SampleSelection, SampleUnit};
use eventpipe_profiler::cpu;
use nettrace::TraceReader;

/// One unit of work; both busy functions run the same loop, so their CPU time splits as
/// their unit counts do.
#[inline(always)]
fn unit(mut x: u64) -> u64 {
    for i in 0..20_000u64 {
        x = std::hint::black_box(x.rotate_left(5) ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    x
}

#[inline(never)]
fn busy_three_parts(x: u64) -> u64 {
    unit(unit(unit(x)))
}

#[inline(never)]
fn busy_one_part(x: u64) -> u64 {
    unit(x)
}

/// The sampler serves every session of the process; one test's session at a time keeps
/// each test's rates and counts its own.
static ONE_SESSION: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_session() -> std::sync::MutexGuard<'static, ()> {
    ONE_SESSION.lock().unwrap_or_else(|p| p.into_inner())
}

fn trace_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "profiler-cpu-{name}-{}.nettrace",
        std::process::id()
    ))
}

#[test]
fn a_three_to_one_split_of_work_shows_as_three_to_one() {
    let _one = one_session();
    cpu::register().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("busy".into())
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                tx.send(unsafe { libc::gettid() } as u64).unwrap();
                let mut x = 1;
                while !stop.load(Ordering::Relaxed) {
                    x = busy_one_part(busy_three_parts(x));
                }
                std::hint::black_box(x);
            })
            .unwrap()
    };
    let busy_tid = rx.recv().unwrap();
    // Sampling error shrinks with the sample count: gather at least 8000 samples (the 3:1
    // ratio's standard error is then about 2.5%, a quarter of the ±10% allowed), one
    // one-second session after another, since a loaded machine delays ticks.
    let (mut three, mut one, mut attributed) = (0u64, 0u64, 0u64);
    for round in 0..20 {
        if three + one >= 8000 {
            break;
        }
        let path = trace_path(&format!("split-{round}"));
        let session = Session::start(SessionConfig::new(
            vec![ProviderConfig::parse("EventPipeRs-CpuSampler:0:5:Rate=2000").unwrap()],
            Output::File(path.clone()),
        ))
        .unwrap();
        std::thread::sleep(Duration::from_secs(1));
        session.stop().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        // Every sample of the busy thread is attributed to it and captured by another.
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        while let Some(e) = reader.next_event().unwrap() {
            if e.metadata.provider == cpu::PROVIDER_NAME && e.thread_id() == busy_tid {
                assert_ne!(e.capture_thread_id(), busy_tid);
                attributed += 1;
            }
        }
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let built = build_profile(&mut reader, SampleSelection::Cpu).unwrap();
        let p = &built.profile;
        assert!(matches!(p.unit, SampleUnit::CpuSamples { .. }));
        // The interrupted instruction is exact even without frame pointers; it expands
        // into its inlined frames (`unit` inside one of the two), so look for the function
        // anywhere in the stack.
        let weight_in = |name: &str| -> u64 {
            p.samples
                .iter()
                .filter(|s| {
                    p.stacks[s.stack]
                        .iter()
                        .any(|&f| p.frames[f].function.ends_with(name))
                })
                .map(|s| s.weight)
                .sum()
        };
        three += weight_in("busy_three_parts");
        one += weight_in("busy_one_part");
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    assert!(three + one >= 8000, "only {} samples in 20 s", three + one);
    assert!(attributed >= three + one);
    let ratio = three as f64 / one as f64;
    eprintln!("busy_three_parts {three}, busy_one_part {one}: {ratio:.3}");
    assert!(
        (2.7..=3.3).contains(&ratio),
        "busy_three_parts {three} vs busy_one_part {one}: {ratio:.2}, not 3 ± 10%"
    );
}

#[test]
fn a_sleeping_thread_is_reported_blocked_not_running() {
    let _one = one_session();
    cpu::register().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let sleeper = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u64).unwrap();
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let tid = rx.recv().unwrap();
    let path = trace_path("blocked");
    let session = Session::start(SessionConfig::new(
        vec![ProviderConfig::parse("EventPipeRs-CpuSampler:0:5:Rate=200").unwrap()],
        Output::File(path.clone()),
    ))
    .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    session.stop().unwrap();
    stop.store(true, Ordering::Relaxed);
    sleeper.join().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let (mut running, mut blocked) = (0, 0);
    while let Some(e) = reader.next_event().unwrap() {
        if e.metadata.provider != cpu::PROVIDER_NAME || e.thread_id() != tid {
            continue;
        }
        match e.decode_payload().unwrap()[0].1.as_u64() {
            Some(s) if s == u64::from(cpu::STATE_RUNNING) => running += 1,
            // Without a stack when it was not interrupted; with the stack it waits in
            // when the signal found it back in its system call.
            Some(s) if s == u64::from(cpu::STATE_BLOCKED) => blocked += 1,
            other => panic!("state {other:?}"),
        }
    }
    // It wakes every 200 ms (a sample or two may catch it having run), and is otherwise
    // blocked.
    assert!(blocked > 50, "blocked {blocked}, running {running}");
    assert!(running <= 10, "blocked {blocked}, running {running}");
}

#[test]
fn sessions_can_start_and_stop_the_sampler_while_threads_run() {
    let _one = one_session();
    cpu::register().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut x = 0;
                while !stop.load(Ordering::Relaxed) {
                    x = busy_one_part(x);
                }
                std::hint::black_box(x);
            })
        })
        .collect();
    for round in 0..20 {
        let path = trace_path(&format!("churn-{round}"));
        let session = Session::start(SessionConfig::new(
            vec![ProviderConfig::parse("EventPipeRs-CpuSampler:0:5:Rate=2000").unwrap()],
            Output::File(path.clone()),
        ))
        .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        session.stop().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        while reader.next_event().unwrap().is_some() {}
        assert!(reader.is_finished());
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
}
