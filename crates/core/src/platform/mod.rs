//! What the core asks of the operating system, from each platform's own source: the
//! calling thread's id, whether the TSC may serve as the clock, and the process facts
//! behind the built-in counters.
//!
//! | fact | Linux | macOS | Windows |
//! |---|---|---|---|
//! | thread id | `gettid` | `pthread_threadid_np` | `GetCurrentThreadId` |
//! | clock | invariant TSC (`/proc/cpuinfo` says so), else the monotonic clock | the monotonic clock (`Instant`: `mach_absolute_time`) | the monotonic clock (`Instant`: `QueryPerformanceCounter`) |
//! | CPU time | `/proc/self/stat` | `getrusage` | `GetProcessTimes` |
//! | resident set | `/proc/self/statm` | `proc_pidinfo(PROC_PIDTASKINFO)` | `K32GetProcessMemoryInfo` |
//! | threads | `/proc/self/task` | `proc_pidinfo(PROC_PIDTASKINFO)` | a Toolhelp thread snapshot |
//! | open descriptors | `/proc/self/fd` | `proc_pidinfo(PROC_PIDLISTFDS)` | `GetProcessHandleCount` |
//!
//! The bindings are the `libc` and `windows-sys` crates'. A fact a platform cannot give is
//! `None`, and its counter reads 0.

#[cfg(any(target_os = "linux", target_os = "android"))]
mod linux;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) use linux::*;

#[cfg(target_vendor = "apple")]
mod macos;
#[cfg(target_vendor = "apple")]
pub(crate) use macos::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;

#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_vendor = "apple",
    windows
)))]
mod other;
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_vendor = "apple",
    windows
)))]
pub(crate) use other::*;

/// Whether this platform gives the process facts (CPU time, resident set, threads,
/// descriptors) the built-in counters report.
pub(crate) const PROCESS_FACTS: bool = cfg!(any(
    target_os = "linux",
    target_os = "android",
    target_vendor = "apple",
    windows
));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ids_differ_between_threads_and_hold_within_one() {
        let here = current_os_tid();
        assert_ne!(here, 0);
        assert_eq!(here, current_os_tid());
        let there = std::thread::spawn(current_os_tid).join().unwrap();
        assert_ne!(there, 0);
        assert_ne!(here, there);
    }

    #[test]
    fn process_facts_follow_the_process() {
        // CPU time grows with work done on this thread.
        let before = cpu_time().expect("the process's CPU time");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(60) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = cpu_time().unwrap();
        assert!(after > before, "{before:?} then {after:?}");

        // Touched memory is resident.
        let block = vec![1u8; 32 << 20];
        let resident = resident_bytes().expect("the resident set");
        assert!(resident >= 32 << 20, "{resident} bytes resident");
        drop(block);

        // A parked thread counts.
        let threads = thread_count().expect("the thread count");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let parked = std::thread::spawn(move || rx.recv());
        let more = thread_count().unwrap();
        assert!(more > threads, "{threads} then {more} threads");
        drop(tx);
        parked.join().unwrap().unwrap_err();

        // An open file counts. (Wine's GetProcessHandleCount reports 0 always: ci/cross.sh
        // says when the test runs under it.)
        if std::env::var_os("EVENTPIPE_UNDER_WINE").is_some() {
            println!("skipping the descriptor count: wine does not keep one");
            return;
        }
        let open = open_descriptors().expect("the open descriptors");
        let file = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
        let more = open_descriptors().unwrap();
        assert!(more > open, "{open} then {more} descriptors");
        drop(file);
    }
}
