//! Off-CPU stacks end to end: a thread that waits on a mutex another thread holds, sleeps,
//! and reads a pipe that another thread writes late, each for a time it measures itself;
//! the off-CPU profile of a session with `OffCpu=1` gives each wait's function its time,
//! within 10 %. A session without it keeps today's samples: no stacks for time off the CPU.

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::io::{Read, Write};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_insight::{build_profile, Profile, SampleSelection, SampleUnit};
use eventpipe_profiler::cpu;
use nettrace::TraceReader;

/// How long each wait lasts.
const WAIT: Duration = Duration::from_millis(500);

/// The sampler serves every session of the process: one session at a time.
static ONE_SESSION: Mutex<()> = Mutex::new(());

#[inline(never)]
fn wait_on_mutex(lock: &Mutex<()>) -> Duration {
    let start = Instant::now();
    drop(std::hint::black_box(lock.lock().unwrap()));
    start.elapsed()
}

#[inline(never)]
fn wait_in_sleep() -> Duration {
    let start = Instant::now();
    std::thread::sleep(std::hint::black_box(WAIT));
    start.elapsed()
}

#[inline(never)]
fn wait_on_pipe(reader: &mut std::fs::File) -> Duration {
    let start = Instant::now();
    let mut byte = [0u8];
    reader.read_exact(&mut byte).unwrap();
    start.elapsed()
}

/// A pipe's two ends.
fn pipe() -> (std::fs::File, std::fs::File) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors are new and owned by nothing else.
    unsafe {
        use std::os::fd::FromRawFd;
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    }
}

/// What the waiter measured of its waits, and its thread id.
struct Waits {
    on_mutex: Duration,
    in_sleep: Duration,
    on_pipe: Duration,
    tid: u64,
}

/// The three waits, one after another on this thread, each ended by a helper thread after
/// [`WAIT`].
fn three_waits() -> Waits {
    let lock = Arc::new(Mutex::new(()));
    let (held_tx, held_rx) = mpsc::channel();
    let holder = {
        let lock = Arc::clone(&lock);
        std::thread::spawn(move || {
            let guard = lock.lock().unwrap();
            held_tx.send(()).unwrap();
            std::thread::sleep(WAIT);
            drop(guard);
        })
    };
    held_rx.recv().unwrap();
    let on_mutex = wait_on_mutex(&lock);
    holder.join().unwrap();
    let in_sleep = wait_in_sleep();
    let (mut read_end, mut write_end) = pipe();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(WAIT);
        write_end.write_all(b"x").unwrap();
    });
    let on_pipe = wait_on_pipe(&mut read_end);
    writer.join().unwrap();
    Waits {
        on_mutex,
        in_sleep,
        on_pipe,
        // SAFETY: gettid has no preconditions.
        tid: unsafe { libc::gettid() } as u64,
    }
}

/// Runs the waits on a thread of their own under a session of the sampler with
/// `filter_args`, and returns the trace and the waits' own measures.
fn traced_waits(name: &str, filter_args: &str) -> (Vec<u8>, Waits) {
    let path = std::env::temp_dir().join(format!(
        "profiler-offcpu-{name}-{}.nettrace",
        std::process::id()
    ));
    let spec = format!("{}:0:5:{filter_args}", cpu::PROVIDER_NAME);
    let session = Session::start(SessionConfig::new(
        vec![ProviderConfig::parse(&spec).unwrap()],
        Output::File(path.clone()),
    ))
    .unwrap();
    let measured = std::thread::Builder::new()
        .name("waiter".into())
        .spawn(three_waits)
        .unwrap()
        .join()
        .unwrap();
    // Time in a wait is written every 100 ms and once the collector (every 10 ms) sees it
    // end: a session stopped sooner would lose the last wait's tail.
    std::thread::sleep(Duration::from_millis(100));
    session.stop().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    (bytes, measured)
}

/// The weight of the profile's samples whose stack has a function ending in `name`.
fn weight_in(profile: &Profile, name: &str) -> Duration {
    let ns = profile
        .samples
        .iter()
        .filter(|s| {
            profile.stacks[s.stack]
                .iter()
                .any(|&f| profile.frames[f].function.ends_with(name))
        })
        .map(|s| s.weight)
        .sum();
    Duration::from_nanos(ns)
}

#[test]
fn each_wait_gets_its_own_time_on_its_own_stack() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|p| p.into_inner());
    cpu::register().unwrap();
    let (bytes, waits) = traced_waits("stacks", "OffCpu=1");
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let built = build_profile(&mut reader, SampleSelection::OffCpu).unwrap();
    let profile = &built.profile;
    assert_eq!(profile.unit, SampleUnit::OffCpuTime);
    for (function, measured) in [
        ("wait_on_mutex", waits.on_mutex),
        ("wait_in_sleep", waits.in_sleep),
        ("wait_on_pipe", waits.on_pipe),
    ] {
        let attributed = weight_in(profile, function);
        eprintln!("{function}: measured {measured:?}, off-CPU profile {attributed:?}");
        let error = attributed.as_secs_f64() / measured.as_secs_f64() - 1.0;
        assert!(
            error.abs() <= 0.10,
            "{function} waited {measured:?}; the off-CPU profile gives it {attributed:?} \
             ({:+.1} %)",
            error * 100.0
        );
    }
    // All three on the waiter's own thread (the helpers, which it started, share its name).
    let waiter = profile
        .threads
        .iter()
        .position(|t| t.id == waits.tid)
        .expect("the waiter thread is in the profile");
    for function in ["wait_on_mutex", "wait_in_sleep", "wait_on_pipe"] {
        assert!(profile.samples.iter().all(|s| s.thread == waiter
            || !profile.stacks[s.stack]
                .iter()
                .any(|&f| profile.frames[f].function.ends_with(function))));
    }
}

#[test]
fn without_off_cpu_stacks_time_off_the_cpu_has_no_stack() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|p| p.into_inner());
    cpu::register().unwrap();
    let (bytes, _) = traced_waits("plain", "Rate=1000");
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let (mut blocked, mut waiting) = (0, 0);
    while let Some(e) = reader.next_event().unwrap() {
        if e.metadata.provider != cpu::PROVIDER_NAME {
            continue;
        }
        match e.decode_payload().unwrap()[0].1.as_u64() {
            Some(s) if s == u64::from(cpu::STATE_BLOCKED) => blocked += 1,
            Some(s) if s == u64::from(cpu::STATE_WAITING) => waiting += 1,
            _ => {}
        }
    }
    assert!(blocked > 0);
    assert_eq!(waiting, 0);
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let built = build_profile(&mut reader, SampleSelection::OffCpu).unwrap();
    assert!(built.profile.samples.is_empty());
}
