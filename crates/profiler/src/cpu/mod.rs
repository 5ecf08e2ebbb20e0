//! The CPU sampling profiler, behind the provider `EventPipeRs-CpuSampler`.
//!
//! While a session enables the provider, a sampler thread wakes at the configured rate
//! (default 1 kHz; the session's filter argument `Rate=N` in Hz changes it) and visits every
//! thread of the process in turn:
//!
//! * a thread that used (almost) no CPU time since the previous visit — less than 20 µs, what
//!   answering a sampling signal costs — is **blocked** (or waiting for a CPU); it is not
//!   interrupted, and its sample says so (`State` = [`STATE_BLOCKED`], no stack);
//! * a thread that ran is **interrupted** with a signal; its handler walks its own stack
//!   into a capture slot of its own (`capture`), and at its next tick the sampler writes a
//!   `Sample` with that stack, attributed to the sampled thread and captured by the sampler
//!   (the format's ThreadIndex vs CaptureThreadIndex): `State` = [`STATE_RUNNING`], or
//!   [`STATE_BLOCKED`] when the signal found it waiting in a system call (it ran, then went
//!   back to waiting), so profiles of CPU time leave it out while the stack still shows where
//!   it waits.
//!
//! The sampler signals every running thread at once and collects the answers a tick later:
//! it never waits for, or yields to, a thread it interrupted. Waiting made it fight its
//! targets for the CPU on a busy machine (a thread interrupted on the sampler's own core can
//! answer only once the sampler gives the core up), which cost 4–14% of a 2-core machine's
//! throughput at 1 kHz; collecting a tick later costs 1.6–5% (BENCHMARKS.md). The price:
//! a sample's timestamp is when it was written, up to one period after the capture.
//!
//! Stacks follow frame pointers. The leaf (the interrupted instruction) is always exact;
//! the frames above it are only as good as the frame-pointer chain, so build the program
//! with `RUSTFLAGS="-C force-frame-pointers=yes"` for whole stacks (code without frame
//! pointers ends the walk early, never crashes it: every read is checked by the kernel).
//!
//! Enabling and disabling go through the provider's enable callback: the first session
//! starts the sampler thread, the last one to stop ends it. Call [`register`] once at
//! startup so the provider exists before any session names it.

mod capture;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use capture::Captured;
use eventpipe::{define_event, EnableChange, Level, Provider};

/// The provider's name.
pub const PROVIDER_NAME: &str = "EventPipeRs-CpuSampler";
/// Samples per second per thread when the session does not say (`Rate=N`).
pub const DEFAULT_RATE_HZ: u32 = 1000;
/// The highest rate accepted; higher requests are clamped.
pub const MAX_RATE_HZ: u32 = 10_000;
/// `State` of a thread that was running: the sample carries its stack.
pub const STATE_RUNNING: u32 = 1;
/// `State` of a thread that was blocked (used no CPU since the previous sample).
pub const STATE_BLOCKED: u32 = 2;

/// The CPU sampler's provider.
pub static PROVIDER: Provider = Provider::with_callback(PROVIDER_NAME, on_enable_change);

define_event! {
    /// One sample of one thread: `State` says whether it was running (then the event has
    /// its stack) or blocked; `AsyncContext` is the async profiler's context the thread was
    /// polling innermost (0: none), which joins the sample to its async callstack.
    pub static SAMPLE = PROVIDER { id: 1, name: "Sample", level: Level::Informational, keywords: 0 }
        (State: u32, AsyncContext: u64);
}

/// Makes the sampler available: installs its signal handler and declares its provider, so
/// a session naming `EventPipeRs-CpuSampler` (now or later) starts it.
///
/// # Errors
/// When the signal handler cannot be installed.
pub fn register() -> std::io::Result<()> {
    capture::install_handler()?;
    SAMPLE.register();
    Ok(())
}

/// The sessions enabling the sampler, by session slot, and the rate each asked for.
struct Control {
    sessions: Vec<(usize, u32)>,
}

static CONTROL: Mutex<Control> = Mutex::new(Control {
    sessions: Vec::new(),
});
/// Bumped whenever the set of sessions changes; a sampler thread runs while the generation
/// it was started for is current (Relaxed: a stale read only delays its exit by one tick).
static GENERATION: AtomicU64 = AtomicU64::new(0);

fn on_enable_change(change: &EnableChange<'_>) {
    if change.ending {
        // The session still records; the sampler stops at the call after this one.
        return;
    }
    let mut control = CONTROL.lock().unwrap_or_else(|p| p.into_inner());
    control
        .sessions
        .retain(|&(slot, _)| slot != change.session_slot);
    if change.enabled {
        control
            .sessions
            .push((change.session_slot, parse_rate(change.filter_args)));
    }
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed) + 1;
    // The sampler thread is never joined here: it may be writing to the session that is
    // being stopped; it sees the new generation and exits on its own within one period.
    if let Some(rate) = control.sessions.iter().map(|&(_, rate)| rate).max() {
        if capture::install_handler().is_ok() {
            let _ = std::thread::Builder::new()
                .name("eventpipe-cpu-sampler".into())
                .spawn(move || run_sampler(generation, rate));
        }
    }
}

/// `Rate=N` (Hz) from the session's filter arguments (`key=value` pairs separated by `;`
/// or `,`), clamped to `1..=MAX_RATE_HZ`; the default otherwise.
pub fn parse_rate(filter_args: Option<&str>) -> u32 {
    filter_args
        .into_iter()
        .flat_map(|a| a.split([';', ',']))
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("rate"))
        .and_then(|(_, v)| v.trim().parse::<u32>().ok())
        .map_or(DEFAULT_RATE_HZ, |r| r.clamp(1, MAX_RATE_HZ))
}

/// The least CPU time since the previous visit that counts a thread as running.
const BUSY_THRESHOLD_NS: u64 = 20_000;
/// How long the sampler waits for an interrupted thread to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_millis(5);
/// How often the list of threads is re-read.
const THREAD_LIST_REFRESH: Duration = Duration::from_millis(100);

/// A capture asked for and not yet collected.
struct Outstanding {
    slot: usize,
    tid: i32,
    /// Ticks since it was asked for.
    age: u32,
}

fn run_sampler(generation: u64, rate: u32) {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    let period = Duration::from_secs_f64(1.0 / f64::from(rate));
    let busy_threshold_ns = (period.as_nanos() as u64 / 50).max(BUSY_THRESHOLD_NS);
    // A thread that has not answered within this many ticks (it exited, or blocks the
    // signal) is given up on.
    let patience = u32::try_from(ANSWER_TIMEOUT.as_nanos() / period.as_nanos().max(1))
        .unwrap_or(u32::MAX)
        .max(1);
    let mut threads: Vec<i32> = Vec::new();
    let mut listed_at: Option<Instant> = None;
    let mut last_cpu: HashMap<i32, u64> = HashMap::new();
    let mut stack: Vec<usize> = Vec::with_capacity(capture::MAX_FRAMES);
    let mut outstanding: Vec<Outstanding> = Vec::with_capacity(capture::SLOTS);
    let mut next = Instant::now();
    while GENERATION.load(Ordering::Relaxed) == generation {
        if listed_at.is_none_or(|t| t.elapsed() >= THREAD_LIST_REFRESH) {
            threads = list_threads(me);
            last_cpu.retain(|tid, _| threads.contains(tid));
            listed_at = Some(Instant::now());
        }
        let mut turn = capture::sampler_turn();
        // The answers to last tick's signals: the interrupted threads answered as soon as
        // they ran, so the sampler never waits on (or yields to) a thread it signalled.
        outstanding.retain_mut(|o| {
            o.age += 1;
            let mut async_context = 0;
            let found = capture::collect(o.slot, o.age > patience, &mut stack, &mut async_context);
            let state = match found {
                Captured::Pending => return true,
                Captured::NoAnswer => None,
                Captured::Running => Some(STATE_RUNNING),
                // It ran since the previous visit but is waiting now: blocked, with the
                // stack it waits in.
                Captured::InSyscall => Some(STATE_BLOCKED),
            };
            if let Some(state) = state {
                SAMPLE.write_about_thread(o.tid as u64, &stack, |p| {
                    p.put(&state);
                    p.put(&async_context);
                });
            }
            // Read after the capture: the signal handler ran on that thread, and its CPU
            // time must not make a blocked thread look as if it had run.
            if let Some(after) = thread_cpu_ns(o.tid) {
                last_cpu.insert(o.tid, after);
            }
            turn.free_slot(o.slot);
            false
        });
        for &tid in &threads {
            if outstanding.iter().any(|o| o.tid == tid) {
                continue;
            }
            let Some(cpu) = thread_cpu_ns(tid) else {
                continue;
            };
            // Running means more CPU time than waking up for our signal costs (a blocked
            // thread interrupted last time re-enters its wait, which uses a few µs).
            let ran = last_cpu
                .get(&tid)
                .is_none_or(|&before| cpu.saturating_sub(before) >= busy_threshold_ns);
            if !ran {
                SAMPLE.write_about_thread(tid as u64, &[], |p| {
                    p.put(&STATE_BLOCKED);
                    p.put(&0u64);
                });
                continue;
            }
            // More running threads than slots: the rest wait for a later tick.
            let Some(slot) = turn.take_slot() else {
                break;
            };
            if capture::request(slot, tid) {
                outstanding.push(Outstanding { slot, tid, age: 0 });
            } else {
                turn.free_slot(slot);
            }
        }
        drop(turn);
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            // Fell behind (a slow tick): skip the missed ticks rather than burst.
            next = now;
        }
    }
    // Withdraw what is still outstanding, so the next sampler starts with free slots.
    let mut turn = capture::sampler_turn();
    for o in outstanding {
        let mut async_context = 0;
        // A handler still walking (Pending even when giving up) keeps its slot: reusing it
        // under the handler would mix two captures.
        if capture::collect(o.slot, true, &mut stack, &mut async_context) != Captured::Pending {
            turn.free_slot(o.slot);
        }
    }
}

/// The OS ids of this process's threads, except `except`.
fn list_threads(except: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&tid| tid != except)
        .collect()
}

/// CPU time thread `tid` has used, in nanoseconds; `None` once it has exited.
fn thread_cpu_ns(tid: i32) -> Option<u64> {
    // Linux encodes a thread's CPU-time clock as (!tid << 3) | CPUCLOCK_PERTHREAD (4) |
    // CPUCLOCK_SCHED (2).
    let clock: libc::clockid_t = ((!tid) << 3) | 6;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; an invalid clock (an exited thread) is
    // reported as an error.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_leniently() {
        assert_eq!(parse_rate(None), DEFAULT_RATE_HZ);
        assert_eq!(parse_rate(Some("Rate=250")), 250);
        assert_eq!(parse_rate(Some("x=1; rate = 99")), 99);
        assert_eq!(parse_rate(Some("Rate=0")), 1);
        assert_eq!(parse_rate(Some("Rate=1000000")), MAX_RATE_HZ);
        assert_eq!(parse_rate(Some("Rate=fast")), DEFAULT_RATE_HZ);
    }

    #[test]
    fn a_thread_cpu_clock_advances_only_while_it_runs() {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        let before = thread_cpu_ns(me).unwrap();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let after = thread_cpu_ns(me).unwrap();
        assert!(after > before);
        // SAFETY: gettid has no preconditions.
        let gone = std::thread::spawn(|| unsafe { libc::gettid() })
            .join()
            .unwrap();
        // `join` returns once the kernel has cleared the thread's id word, which it does
        // a moment before the thread is gone from the process: allow that moment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while thread_cpu_ns(gone).is_some() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(thread_cpu_ns(gone), None);
    }

    #[test]
    fn capturing_another_thread_yields_its_stack_and_whether_it_waits() {
        capture::install_handler().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinning = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                tx.send(unsafe { libc::gettid() }).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let tid = rx.recv().unwrap();
        let mut stack = Vec::new();
        let found = capture::capture(tid, Duration::from_secs(1), &mut stack, &mut 0);
        assert_eq!(found, Captured::Running);
        assert!(!stack.is_empty() && stack[0] != 0);
        // A thread that does not exist does not answer.
        assert_eq!(
            capture::capture(i32::MAX, Duration::from_millis(10), &mut stack, &mut 0),
            Captured::NoAnswer
        );
        // A sleeping thread is found in its system call.
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        let sleeping = rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            capture::capture(sleeping, Duration::from_secs(1), &mut stack, &mut 0),
            Captured::InSyscall
        );
        sleeper.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        spinning.join().unwrap();
    }
}
