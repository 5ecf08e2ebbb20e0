//! The CPU sampling profiler, behind the provider `EventPipeRs-CpuSampler`.
//!
//! While a session enables the provider, every thread of the process (except the
//! profiler's collector) has a **CPU-time timer** (`timer_create` on the thread's own CPU
//! clock, `SIGEV_THREAD_ID`) with a period of 1/rate of CPU time (default rate 1 kHz; the
//! session's filter argument `Rate=N` in Hz changes it). The kernel signals a thread only
//! after it has used that much CPU, on that thread, while it runs: no thread is woken and
//! none is preempted for sampling, and a thread that does not run costs nothing. The
//! signal handler walks the thread's own stack into a ring of capture records the thread
//! owns (`capture`, which documents the hand-off and its orderings).
//!
//! **Granularity.** The kernel checks CPU timers at the scheduler tick (CONFIG_HZ: 250 on
//! the machine this was built on), so at 1 kHz a timer expires only every ~4 ms of CPU time
//! and its signal carries `si_overrun` ≈ 3, the periods that passed meanwhile. A capture
//! stands for 1 + overrun periods: its `Sample` event says so in `Periods`, the weight a
//! profile gives its stack; but at rates above HZ the distinct stacks come at HZ per
//! thread-second, not at the rate.
//!
//! A **collector** thread (`eventpipe-cpu-sampler`) wakes every 10 ms — 100 wakeups a
//! second instead of the rate, as a `SCHED_BATCH` thread so that its wakeups do not preempt
//! the program's running threads — and
//!
//! * drains every thread's records and writes their `Sample` events, attributed to the
//!   sampled thread and captured by the collector (the format's ThreadIndex vs
//!   CaptureThreadIndex): `State` = [`STATE_RUNNING`], or [`STATE_BLOCKED`] when the signal
//!   found the thread in a system call (it used CPU in the kernel, or was about to wait), so
//!   profiles of CPU time leave it out while the stack still shows where it waits;
//! * reports **off-CPU time**: it reads each thread's CPU clock and writes one
//!   [`STATE_BLOCKED`] sample without a stack per period of wall time the thread did *not*
//!   run (wall time minus CPU time since the previous visit, the remainder carried to the
//!   next). A thread that used no CPU over an interval gets rate × interval blocked samples
//!   (10 at 1 kHz), one that ran throughout gets none. So every thread gets `rate` samples
//!   per second of wall time in all — running ones from its timer, blocked ones from the
//!   collector — the same total the earlier tick-by-tick sampler wrote, and wall-clock
//!   profiles (every state) stay proportional across threads while CPU profiles (running
//!   only) count CPU time alone;
//! * with **off-CPU stacks** (a session's `OffCpu=1`, [`parse_off_cpu`]), writes that
//!   off-CPU time as [`STATE_WAITING`] samples with the stack each thread waited in, which
//!   it learns by interrupting a waiting thread once per wait (`off_cpu` says how and what
//!   it costs); time it could not place keeps its stackless blocked samples;
//! * re-lists `/proc/self/task` every 100 ms, and sooner when the thread count (the
//!   directory's link count, one `stat`) changed: new threads get a timer and a record
//!   ring, exited ones have theirs deleted and given back.
//!
//! The price of collecting in batches: a sample's timestamp is when the collector wrote it,
//! up to one interval (plus the tick) after the capture.
//!
//! Stacks are unwound with the loaded binaries' unwind tables (`unwind`, x86_64), so they are
//! whole through code built without frame pointers (glibc's syscall wrappers, where an
//! I/O-bound program spends its CPU); a stack the unwinder cannot finish ends in
//! [`TRUNCATED_FRAME`]. Until the collector has published the tables, and on other
//! architectures, the handler follows frame pointers (build with
//! `RUSTFLAGS="-C force-frame-pointers=yes"` there). Either way a bad rule or frame pointer
//! ends the walk, never crashes it: every read is checked by the kernel.
//!
//! Enabling and disabling go through the provider's enable callback: the first session
//! starts the collector thread, the last one to stop ends it, and it deletes every timer as
//! it goes. The callback returns once the new collector has armed the timers of the threads
//! it found, before it writes any event (the wait is bounded: `wait_until_armed`): when
//! `Session::start` returns, every thread then alive is being sampled. That also keeps the
//! collector's start-up out of the program's first moments under the session, where on a
//! machine with every core busy it cost a 140 ms burst of new threads 3-4 % of its wall
//! time (`benches/cpu_overhead.rs`, BENCHMARKS.md).
//!
//! A signal still in flight after its timer was deleted finds its record ring taken back
//! and writes nothing; rings are never freed, so it never touches freed memory. Call
//! [`register`] once at startup so the provider exists before any session names it.
//!
//! Limits: at most 1,024 threads are sampled at once (each ring is ~33 KiB, with its
//! unwind-rule cache beside it, allocated the first time a thread needs one and kept for
//! reuse); a thread that exits and whose id is
//! taken by a new thread before the collector notices is caught by its CPU clock going
//! back, and the new thread gets a timer of its own at the next listing.

mod capture;
mod off_cpu;
mod threads;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod unwind;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use unwind::TRUNCATED_FRAME;

use crate::sync::{AtomicBool, AtomicU64, Ordering};
use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use capture::{Capture, Claim};
use eventpipe_core::{define_event, EnableChange, Level, Provider};
use threads::CpuTimer;

/// The provider's name.
pub const PROVIDER_NAME: &str = "EventPipeRs-CpuSampler";
/// Samples per second per thread when the session does not say (`Rate=N`).
pub const DEFAULT_RATE_HZ: u32 = 1000;
/// The highest rate accepted; higher requests are clamped.
pub const MAX_RATE_HZ: u32 = 10_000;
/// `State` of a thread that was running: the sample carries its stack.
pub const STATE_RUNNING: u32 = 1;
/// `State` of a thread that was blocked: off the CPU (no stack), or caught in a system
/// call (with the stack it waits in).
pub const STATE_BLOCKED: u32 = 2;
/// `State` of a thread that was off the CPU, waiting in the stack the sample carries, for
/// `Periods × PeriodNs` of wall time: written only for sessions that asked for off-CPU
/// stacks (`OffCpu=1`, see [`parse_off_cpu`]).
pub const STATE_WAITING: u32 = 3;

/// The CPU sampler's provider.
pub static PROVIDER: Provider = Provider::with_callback(PROVIDER_NAME, on_enable_change);

define_event! {
    /// One sample of one thread: `State` says whether it was running (then the event has
    /// its stack) or blocked; `AsyncContext` is the async profiler's context the thread was
    /// polling innermost (0: none), which joins the sample to its async callstack;
    /// `Periods` is how many sampling periods (1/rate of time) it stands for, its weight: a
    /// capture whose timer overran, or a blocked thread's off-CPU time since the collector's
    /// previous visit, is one event rather than one per period. (A trace from before the
    /// field has one event per period; readers take a missing `Periods` as 1.) `PeriodNs`
    /// is the length of one period in nanoseconds, so a sample weighs `Periods × PeriodNs`
    /// of CPU time whatever rate the session asked for (the collector samples at the
    /// highest rate any session asked for; readers take a missing `PeriodNs` as 1 ms).
    pub static SAMPLE = PROVIDER { id: 1, name: "Sample", level: Level::Informational, keywords: 0 }
        (State: u32, AsyncContext: u64, Periods: u32, PeriodNs: u32);
}

/// Makes the sampler available: installs its signal handler and declares its provider, so
/// a session naming `EventPipeRs-CpuSampler` (now or later) starts it.
///
/// # Errors
/// When the signal handler cannot be installed.
pub fn register() -> std::io::Result<()> {
    eventpipe_core::server::warn_if_unserved("eventpipe-profiler's CPU sampler");
    capture::install_handler()?;
    SAMPLE.register();
    Ok(())
}

/// What one session asked of the sampler.
#[derive(Debug, Clone, Copy)]
struct Asked {
    slot: usize,
    rate: u32,
    off_cpu: bool,
}

/// The sessions enabling the sampler, by session slot, and what each asked for.
struct Control {
    sessions: Vec<Asked>,
}

static CONTROL: Mutex<Control> = Mutex::new(Control {
    sessions: Vec::new(),
});
/// Bumped whenever the set of sessions changes; a collector runs while the generation it
/// was started for is current (Relaxed: a stale read only delays its exit by one interval).
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// Whether the newest change to the sessions started one. A collector superseded by such a
/// change writes nothing more: what its rings still hold was captured before that session
/// started (at the old rate), and a write reaches every session recording the provider, the
/// new one too. Sessions that go on lose at most one collect interval of samples at
/// another session's start; at a stop, the superseded collector writes what it holds.
/// Written before the generation is bumped (Release there, Acquire where it is read).
static LAST_CHANGE_STARTED: AtomicBool = AtomicBool::new(false);
/// Held by the running collector for its whole life: the collector of a new generation
/// starts only once its predecessor has deleted its timers and given back its rings.
static COLLECTOR: Mutex<()> = Mutex::new(());
/// The newest generation whose collector has armed its timers (or ended, superseded before
/// arming any): the enable callback waits for it, so a session's sampling is live when
/// `Session::start` returns.
static ARMED: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());
/// How long the enable callback waits for the collector to arm its timers: normally well
/// under a millisecond, plus up to one interval while a predecessor collector finishes.
const ARM_WAIT: Duration = Duration::from_secs(1);

fn on_enable_change(change: &EnableChange<'_>) {
    if change.ending {
        // The session still records; the sampler stops at the call after this one.
        return;
    }
    let mut control = CONTROL.lock().unwrap_or_else(|p| p.into_inner());
    control
        .sessions
        .retain(|asked| asked.slot != change.session_slot);
    if change.enabled {
        control.sessions.push(Asked {
            slot: change.session_slot,
            rate: parse_rate(change.filter_args),
            off_cpu: parse_off_cpu(change.filter_args),
        });
    }
    LAST_CHANGE_STARTED.store(change.enabled, Ordering::Relaxed);
    let generation = GENERATION.fetch_add(1, Ordering::Release) + 1;
    // The collector is never joined here: it may be writing to the session that is being
    // stopped; it sees the new generation and exits on its own within one interval,
    // deleting its timers.
    if let Some(rate) = control.sessions.iter().map(|asked| asked.rate).max() {
        let off_cpu = control.sessions.iter().any(|asked| asked.off_cpu);
        let spawned = capture::install_handler().is_ok()
            && std::thread::Builder::new()
                .name("eventpipe-cpu-sampler".into())
                .spawn(move || run_collector(generation, rate, off_cpu))
                .is_ok();
        drop(control);
        if spawned {
            wait_until_armed(generation);
        }
    }
}

/// Waits (at most [`ARM_WAIT`]) until the collector of `generation`, or a newer one, has
/// armed its timers. The new collector writes no event before that; but it starts only
/// once its predecessor has finished, and a predecessor writing into a Block-mode session
/// whose reader has stalled may be parked: the bound keeps that from holding up this
/// session's start or stop for longer.
fn wait_until_armed(generation: u64) {
    let (armed, changed) = &ARMED;
    let armed = armed.lock().unwrap_or_else(|p| p.into_inner());
    let _ = changed.wait_timeout_while(armed, ARM_WAIT, |armed| *armed < generation);
}

fn announce_armed(generation: u64) {
    let (armed, changed) = &ARMED;
    let mut armed = armed.lock().unwrap_or_else(|p| p.into_inner());
    *armed = (*armed).max(generation);
    changed.notify_all();
}

/// `Rate=N` (Hz) from the session's filter arguments (`key=value` pairs separated by `;`
/// or `,`), clamped to `1..=MAX_RATE_HZ`; the default otherwise.
pub fn parse_rate(filter_args: Option<&str>) -> u32 {
    filter_arg(filter_args, "rate")
        .and_then(|v| v.parse::<u32>().ok())
        .map_or(DEFAULT_RATE_HZ, |r| r.clamp(1, MAX_RATE_HZ))
}

/// `OffCpu=1` (or `true`) in the session's filter arguments: the session asks for off-CPU
/// stacks, `STATE_WAITING` samples saying where each thread waited (`off_cpu`'s docs say
/// how). Each waiting thread is interrupted once per wait, which its blocking call
/// restarts (`SA_RESTART`) or, for the few calls that never restart (`epoll_wait`, `poll`,
/// `nanosleep`), returns `EINTR` from: Rust's standard library and tokio retry those.
pub fn parse_off_cpu(filter_args: Option<&str>) -> bool {
    filter_arg(filter_args, "offcpu").is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// The value of `key` (any case) among `key=value` pairs separated by `;` or `,`.
fn filter_arg<'a>(filter_args: Option<&'a str>, key: &str) -> Option<&'a str> {
    filter_args
        .into_iter()
        .flat_map(|a| a.split([';', ',']))
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case(key))
        .map(|(_, v)| v.trim())
}

/// How often the collector drains the records and accounts off-CPU time.
const COLLECT_INTERVAL: Duration = Duration::from_millis(10);
/// How often the list of threads is re-read even when their count did not change (a thread
/// that exited while another started).
const THREAD_LIST_REFRESH: Duration = Duration::from_millis(100);
/// The most periods one capture's `Sample` stands for (a timer whose signal the thread kept
/// blocked for long carries a large overrun).
const MAX_PERIODS_PER_CAPTURE: u32 = 1000;

/// A thread being sampled: its timer and its ring of records.
struct Tracked {
    /// Declared before `claim`: the timer is deleted before its ring is given back.
    timer: CpuTimer,
    claim: Claim,
    /// The thread's CPU clock and the wall clock at the previous visit.
    cpu_ns: u64,
    at: Instant,
    /// Off-CPU time not yet reported as blocked samples (less than one period), without
    /// off-CPU stacks.
    off_cpu_ns: u64,
    /// With off-CPU stacks: where the thread waits, and the time not yet written.
    waits: off_cpu::WaitTracker,
}

/// The collector's state: one per generation, on its own thread.
struct Collector {
    me: i32,
    /// The generation it was started for.
    generation: u64,
    period: Duration,
    /// Whether a session asked for off-CPU stacks.
    off_cpu: bool,
    tracked: HashMap<i32, Tracked>,
    /// A stack read out of a ring.
    scratch: Vec<usize>,
}

fn run_collector(generation: u64, rate: u32, off_cpu: bool) {
    let _only = COLLECTOR.lock().unwrap_or_else(|p| p.into_inner());
    never_preempt_on_wakeup();
    let mut c = Collector {
        // SAFETY: gettid has no preconditions.
        me: unsafe { libc::gettid() },
        generation,
        period: Duration::from_nanos(1_000_000_000 / u64::from(rate.max(1))),
        off_cpu,
        tracked: HashMap::new(),
        scratch: Vec::with_capacity(capture::MAX_FRAMES),
    };
    let mut listed_at: Option<Instant> = None;
    let mut count = None;
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    let mut tables = unwind::Loader::default();
    while GENERATION.load(Ordering::Relaxed) == generation {
        let now_count = threads::thread_count();
        if now_count != count || listed_at.is_none_or(|t| t.elapsed() >= THREAD_LIST_REFRESH) {
            // Before the timers are armed, so the first samples have whole stacks; then
            // with each listing, so a library loaded since has its table.
            #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
            tables.refresh();
            c.track(&threads::list_threads(c.me));
            if listed_at.is_none() {
                announce_armed(generation);
            }
            listed_at = Some(Instant::now());
            count = now_count;
        }
        c.collect();
        std::thread::sleep(COLLECT_INTERVAL);
    }
    c.untrack_all();
    // Superseded before its first listing, it armed nothing: its waiter need not wait.
    announce_armed(generation);
}

/// Makes the calling thread (the collector) `SCHED_BATCH`: the kernel then never preempts a
/// running thread to run it when it wakes; it waits for the running thread's time slice to
/// end. It keeps its fair share of the CPU, and nothing it does is urgent: each thread's ring
/// holds [`capture::RING`] captures, 16 ms of CPU or more. It could matter only where the
/// program keeps every core busy, and there `benches/cpu_overhead.rs` found its effect
/// within the noise (BENCHMARKS.md). Best effort: where the policy cannot be set the
/// collector runs as before.
fn never_preempt_on_wakeup() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread.
        let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    }
}

impl Collector {
    /// Starts sampling the threads in `threads` not yet sampled, and stops sampling those
    /// no longer in it.
    fn track(&mut self, threads: &[i32]) {
        let listed: HashSet<i32> = threads.iter().copied().collect();
        let gone: Vec<i32> = self
            .tracked
            .keys()
            .copied()
            .filter(|tid| !listed.contains(tid))
            .collect();
        for tid in gone {
            self.untrack(tid);
        }
        for &tid in threads {
            if self.tracked.contains_key(&tid) {
                continue;
            }
            // Pool exhausted: the thread goes unsampled (retried at the next listing).
            let Some(claim) = capture::claim(tid) else {
                break;
            };
            let started = threads::thread_cpu_ns(tid).and_then(|cpu| {
                Some((
                    cpu,
                    CpuTimer::start(tid, claim.signal_value(), self.period)?,
                ))
            });
            let Some((cpu_ns, timer)) = started else {
                // It exited meanwhile.
                claim.release(&mut self.scratch, |_| {});
                continue;
            };
            self.tracked.insert(
                tid,
                Tracked {
                    timer,
                    claim,
                    cpu_ns,
                    at: Instant::now(),
                    off_cpu_ns: 0,
                    waits: off_cpu::WaitTracker::default(),
                },
            );
        }
    }

    /// Writes every thread's captures, and blocked samples for the time it spent off the
    /// CPU (with the stack it waited in, for sessions that asked); stops sampling threads
    /// that have exited.
    fn collect(&mut self) {
        let writes = self.writes();
        let period_ns = self.period.as_nanos() as u64;
        // At least 1 Hz: a period is at most a second, which fits.
        let period_field = u32::try_from(period_ns).unwrap_or(u32::MAX);
        let mut gone = Vec::new();
        // The threads that asked for a probe, with the time each holds.
        let mut wanted: Vec<(u64, i32)> = Vec::new();
        for (&tid, t) in &mut self.tracked {
            let mut answer = None;
            t.claim.drain(&mut self.scratch, |capture| {
                if capture.probe {
                    answer = Some(off_cpu::ProbeAnswer {
                        in_syscall: capture.in_syscall,
                        async_context: capture.async_context,
                        stack: capture.stack.to_vec(),
                    });
                } else if writes {
                    write_capture(tid, capture, period_field);
                }
            });
            // Gone, or its id now names a new thread (whose clock starts again at 0).
            let Some(cpu_ns) = threads::thread_cpu_ns(tid).filter(|&cpu| cpu >= t.cpu_ns) else {
                gone.push(tid);
                continue;
            };
            let now = Instant::now();
            let wall_ns = now.duration_since(t.at).as_nanos() as u64;
            let ran_ns = cpu_ns.saturating_sub(t.cpu_ns);
            let off_ns = wall_ns.saturating_sub(ran_ns);
            t.cpu_ns = cpu_ns;
            t.at = now;
            if self.off_cpu {
                let write = |time: off_cpu::OffCpuTime<'_>| {
                    if writes {
                        write_off_cpu(tid, &time, period_ns, period_field);
                    }
                };
                let visit = t.waits.visit(answer, cpu_ns, off_ns, period_ns, write);
                if visit.probe {
                    wanted.push((t.waits.held_ns(), tid));
                }
                continue;
            }
            t.off_cpu_ns += off_ns;
            let blocked = t.off_cpu_ns / period_ns;
            t.off_cpu_ns -= blocked * period_ns;
            if blocked > 0 && writes {
                let periods = u32::try_from(blocked).unwrap_or(u32::MAX);
                let values = (STATE_BLOCKED, 0, periods, period_field);
                SAMPLE.write_about_thread(tid as u64, &[], values);
            }
        }
        // Those holding the most time first (off_cpu.rs: the budget per visit).
        wanted.sort_unstable_by(|a, b| b.cmp(a));
        for (i, &(_, tid)) in wanted.iter().enumerate() {
            let Some(t) = self.tracked.get_mut(&tid) else {
                continue;
            };
            if i < off_cpu::PROBES_PER_VISIT {
                capture::send_probe(tid, t.claim.signal_value());
            } else {
                t.waits.probe_declined();
            }
        }
        for tid in gone {
            self.untrack(tid);
        }
    }

    /// Deletes thread `tid`'s timer, writes what its ring still holds and gives it back.
    fn untrack(&mut self, tid: i32) {
        let writes = self.writes();
        if let Some(Tracked {
            timer,
            claim,
            mut waits,
            ..
        }) = self.tracked.remove(&tid)
        {
            drop(timer);
            let period = self.period.as_nanos() as u64;
            let period_field = u32::try_from(period).unwrap_or(u32::MAX);
            claim.release(&mut self.scratch, |capture| {
                if writes && !capture.probe {
                    write_capture(tid, capture, period_field);
                }
            });
            // The wait it was last found in, as far as it was seen.
            waits.flush(period, &mut |time| {
                if writes {
                    write_off_cpu(tid, &time, period, period_field);
                }
            });
        }
    }

    /// Whether this collector still writes samples: it is current, or it was superseded
    /// by a session stopping, not starting (see [`LAST_CHANGE_STARTED`]).
    fn writes(&self) -> bool {
        GENERATION.load(Ordering::Acquire) == self.generation
            || !LAST_CHANGE_STARTED.load(Ordering::Relaxed)
    }

    fn untrack_all(&mut self) {
        let all: Vec<i32> = self.tracked.keys().copied().collect();
        for tid in all {
            self.untrack(tid);
        }
    }
}

/// Writes `time` thread `tid` spent off the CPU: with the stack it waited in
/// ([`STATE_WAITING`]), or without one ([`STATE_BLOCKED`]), as whole periods.
fn write_off_cpu(tid: i32, time: &off_cpu::OffCpuTime<'_>, period_ns: u64, period_field: u32) {
    let periods = u32::try_from(time.ns / period_ns.max(1)).unwrap_or(u32::MAX);
    match time.wait {
        Some(wait) => SAMPLE.write_about_thread(
            tid as u64,
            &wait.stack,
            (STATE_WAITING, wait.async_context, periods, period_field),
        ),
        None => {
            SAMPLE.write_about_thread(tid as u64, &[], (STATE_BLOCKED, 0, periods, period_field))
        }
    }
}

/// Writes one capture of thread `tid`: one `Sample` with the periods it stands for, each
/// `period_ns` long.
fn write_capture(tid: i32, capture: Capture<'_>, period_ns: u32) {
    let state = if capture.in_syscall {
        // It ran, then went back to waiting (or was caught on its way): blocked, with the
        // stack it waits in.
        STATE_BLOCKED
    } else {
        STATE_RUNNING
    };
    let periods = capture.periods.clamp(1, MAX_PERIODS_PER_CAPTURE);
    let values = (state, capture.async_context, periods, period_ns);
    SAMPLE.write_about_thread(tid as u64, capture.stack, values);
}

#[cfg(test)]
mod tests {
    use super::capture::Captured;
    use super::threads::thread_cpu_ns;
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
        let _one = capture::tests::one_at_a_time();
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

    #[test]
    fn a_cpu_timer_signals_a_thread_by_the_cpu_it_uses_not_the_wall_time() {
        let _one = capture::tests::one_at_a_time();
        capture::install_handler().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spawn = |busy: bool| {
            let (tx, rx) = std::sync::mpsc::channel();
            let stop = std::sync::Arc::clone(&stop);
            let handle = std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                tx.send(unsafe { libc::gettid() }).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    if busy {
                        std::hint::spin_loop();
                    } else {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            });
            (handle, rx.recv().unwrap())
        };
        let (spinner, busy_tid) = spawn(true);
        let (sleeper, idle_tid) = spawn(false);
        let alive_before = threads::timers_alive();
        let period = Duration::from_millis(1);
        let mut sampled = Vec::new();
        for tid in [busy_tid, idle_tid] {
            let claim = capture::claim(tid).unwrap();
            let cpu = thread_cpu_ns(tid).unwrap();
            let timer = CpuTimer::start(tid, claim.signal_value(), period).unwrap();
            sampled.push((tid, claim, timer, cpu));
        }
        assert_eq!(threads::timers_alive(), alive_before + 2);
        let mut scratch = Vec::new();
        let (mut captures, mut periods) = ([0u32; 2], [0u32; 2]);
        for _ in 0..30 {
            std::thread::sleep(Duration::from_millis(10));
            for (i, (_, claim, _, _)) in sampled.iter().enumerate() {
                claim.drain(&mut scratch, |c| {
                    assert!(!c.stack.is_empty());
                    captures[i] += 1;
                    periods[i] += c.periods;
                });
            }
        }
        let used_ms = (thread_cpu_ns(busy_tid).unwrap() - sampled[0].3) / 1_000_000;
        let idle_used_ms = (thread_cpu_ns(idle_tid).unwrap() - sampled[1].3) / 1_000_000;
        for (tid, claim, timer, _) in sampled {
            drop(timer);
            claim.release(&mut scratch, |c| {
                let i = usize::from(tid == idle_tid);
                captures[i] += 1;
                periods[i] += c.periods;
            });
        }
        assert_eq!(threads::timers_alive(), alive_before);
        stop.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
        sleeper.join().unwrap();
        eprintln!(
            "busy thread: {} ms of CPU, {} captures standing for {} periods; idle thread: {} \
             ms of CPU, {} periods",
            used_ms, captures[0], periods[0], idle_used_ms, periods[1]
        );
        // One period per millisecond of CPU, less what the timer holds back (at most a
        // tick's worth) — however few signals the tick granularity allowed.
        assert!(
            u64::from(periods[0]) * 10 >= used_ms * 7 && u64::from(periods[0]) <= used_ms + 2,
            "{} periods for {used_ms} ms of CPU",
            periods[0]
        );
        // A thread that sleeps 300 ms in 5 ms naps uses a few microseconds of CPU a nap
        // (more on a loaded machine, where it once reached a period): its timer counts
        // only those, never the wall time it sleeps through.
        assert!(
            u64::from(periods[1]) <= idle_used_ms + 1,
            "the idle thread was sampled {} periods for {idle_used_ms} ms of CPU",
            periods[1]
        );
        assert!(
            periods[1] * 20 < periods[0],
            "idle {} periods against busy {}",
            periods[1],
            periods[0]
        );
    }
}
