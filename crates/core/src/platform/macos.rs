//! macOS: `pthread_threadid_np`, `getrusage` and `proc_pidinfo`.

use std::time::Duration;

/// The calling thread's system-wide thread id (what Activity Monitor and `spindump` show).
pub(crate) fn current_os_tid() -> u64 {
    let mut id = 0u64;
    // SAFETY: `pthread_self()` is the calling thread, alive for the call; `id` is a valid
    // place for the result.
    unsafe { libc::pthread_threadid_np(libc::pthread_self(), &mut id) };
    id
}

/// macOS times with the monotonic clock (`mach_absolute_time` underneath `Instant`).
pub(crate) fn invariant_tsc() -> bool {
    false
}

/// The process's CPU time (user + system).
pub(crate) fn cpu_time() -> Option<Duration> {
    // SAFETY: an all-zero rusage is a valid value of a plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid rusage for getrusage to fill.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return None;
    }
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    Some(time(usage.ru_utime) + time(usage.ru_stime))
}

fn task_info() -> Option<libc::proc_taskinfo> {
    // SAFETY: an all-zero proc_taskinfo is a valid value of a plain C struct.
    let mut info: libc::proc_taskinfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::proc_taskinfo>() as libc::c_int;
    // SAFETY: `info` is `size` writable bytes; the flavor's result is a proc_taskinfo.
    let n = unsafe {
        libc::proc_pidinfo(
            libc::getpid(),
            libc::PROC_PIDTASKINFO,
            0,
            (&mut info as *mut libc::proc_taskinfo).cast(),
            size,
        )
    };
    (n == size).then_some(info)
}

/// The resident set in bytes.
pub(crate) fn resident_bytes() -> Option<u64> {
    task_info().map(|t| t.pti_resident_size)
}

/// Threads of the process.
pub(crate) fn thread_count() -> Option<u64> {
    task_info().map(|t| t.pti_threadnum as u64)
}

/// Open descriptors.
pub(crate) fn open_descriptors() -> Option<u64> {
    // SAFETY: a null buffer asks for the size the list needs, in bytes.
    let bytes = unsafe {
        libc::proc_pidinfo(
            libc::getpid(),
            libc::PROC_PIDLISTFDS,
            0,
            std::ptr::null_mut(),
            0,
        )
    };
    (bytes >= 0).then(|| bytes as u64 / std::mem::size_of::<libc::proc_fdinfo>() as u64)
}

/// Where the monotonic clock's ticks count from: the first reading (its origin is
/// `Instant`'s own here, which no other process states).
pub(crate) fn monotonic_origin_ns() -> i64 {
    0
}
