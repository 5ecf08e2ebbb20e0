//! The process's threads as the collector sees them: who they are (`/proc/self/task`), how
//! much CPU time each has used, and the per-thread CPU-time timers that interrupt them.

use crate::sync::{AtomicUsize, Ordering};
use std::time::Duration;

/// The OS ids of this process's threads, except `except`.
pub(crate) fn list_threads(except: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&tid| tid != except)
        .collect()
}

/// How many threads the process has, with one system call: procfs gives the `task`
/// directory a link count of two plus the thread count. `None` if it cannot be read.
pub(crate) fn thread_count() -> Option<u64> {
    std::fs::metadata("/proc/self/task")
        .ok()
        .map(|m| std::os::unix::fs::MetadataExt::nlink(&m).saturating_sub(2))
}

/// Linux's CPU-time clock of thread `tid`: `(!tid << 3) | CPUCLOCK_PERTHREAD (4) |
/// CPUCLOCK_SCHED (2)`, the encoding behind `pthread_getcpuclockid`.
fn thread_cpu_clock(tid: i32) -> libc::clockid_t {
    ((!tid) << 3) | 6
}

/// CPU time thread `tid` has used, in nanoseconds; `None` once it has exited.
pub(crate) fn thread_cpu_ns(tid: i32) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; an invalid clock (an exited thread) is
    // reported as an error.
    if unsafe { libc::clock_gettime(thread_cpu_clock(tid), &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// CPU-time timers alive (created and not yet deleted), for tests and diagnostics.
static ALIVE: AtomicUsize = AtomicUsize::new(0);

/// CPU-time timers alive now, in the whole process.
#[cfg(test)]
pub(crate) fn timers_alive() -> usize {
    // Relaxed: a count for tests; each change happens on the collector thread.
    ALIVE.load(Ordering::Relaxed)
}

/// A periodic timer on one thread's CPU clock that signals that thread: the kernel sends it
/// [`SAMPLE_SIGNAL`](super::capture::SAMPLE_SIGNAL) each time it has used `period` of CPU
/// (checked at the scheduler tick), carrying a value in `si_value` and the periods missed
/// since in `si_overrun`. Deleted on drop.
#[derive(Debug)]
pub(crate) struct CpuTimer(libc::timer_t);

impl CpuTimer {
    /// Starts a timer on thread `tid`'s CPU clock; `None` when the thread has exited (or
    /// the kernel refuses).
    pub(crate) fn start(tid: i32, value: usize, period: Duration) -> Option<CpuTimer> {
        // SAFETY: a zeroed sigevent is a valid starting value (a plain C struct).
        let mut event: libc::sigevent = unsafe { std::mem::zeroed() };
        event.sigev_notify = libc::SIGEV_THREAD_ID;
        event.sigev_signo = super::capture::SAMPLE_SIGNAL;
        event.sigev_notify_thread_id = tid;
        event.sigev_value = libc::sigval {
            sival_ptr: value as *mut libc::c_void,
        };
        let mut timer: libc::timer_t = std::ptr::null_mut();
        // SAFETY: `event` and `timer` are valid for the call; the kernel checks that the
        // clock and the thread to notify belong to this process.
        if unsafe { libc::timer_create(thread_cpu_clock(tid), &mut event, &mut timer) } != 0 {
            return None;
        }
        // Relaxed: a count (see `timers_alive`).
        ALIVE.fetch_add(1, Ordering::Relaxed);
        let timer = CpuTimer(timer);
        let every = libc::timespec {
            tv_sec: period.as_secs() as libc::time_t,
            tv_nsec: period.subsec_nanos() as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_interval: every,
            it_value: every,
        };
        // SAFETY: `timer.0` is a timer we created and have not deleted; `spec` is valid.
        if unsafe { libc::timer_settime(timer.0, 0, &spec, std::ptr::null_mut()) } != 0 {
            return None;
        }
        Some(timer)
    }
}

impl Drop for CpuTimer {
    fn drop(&mut self) {
        // SAFETY: `self.0` is a timer we created and, being dropped once, delete once. A
        // signal it already queued may still arrive; the handler checks the slot's owner.
        unsafe { libc::timer_delete(self.0) };
        // Relaxed: a count (see `timers_alive`).
        ALIVE.fetch_sub(1, Ordering::Relaxed);
    }
}
