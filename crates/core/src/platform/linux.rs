//! Linux: `gettid`, and `/proc/self` for everything else.

use std::time::Duration;

/// The calling thread's kernel thread id.
pub(crate) fn current_os_tid() -> u64 {
    // SAFETY: gettid has no preconditions and cannot fail.
    (unsafe { libc::gettid() }) as u64
}

/// `CLOCK_MONOTONIC` now, in ns: where the monotonic clock's ticks count from, so that they
/// are that clock's own readings, as .NET's are on Linux, and a tool that reads the clock
/// too (`eptrace record`'s perf samples) places them exactly.
pub(crate) fn monotonic_origin_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // `time_t` and `c_long` are 32 bits on 32-bit Linux.
    #[allow(clippy::useless_conversion)]
    let (seconds, nanos) = (i64::from(ts.tv_sec), i64::from(ts.tv_nsec));
    seconds * 1_000_000_000 + nanos
}

/// Whether every CPU reports an invariant TSC (`constant_tsc` and `nonstop_tsc`).
pub(crate) fn invariant_tsc() -> bool {
    let Ok(cpuinfo) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    let mut cpus = 0;
    for flags in cpuinfo.lines().filter(|l| l.starts_with("flags")) {
        cpus += 1;
        let has = |flag: &str| flags.split_whitespace().any(|f| f == flag);
        if !(has("constant_tsc") && has("nonstop_tsc")) {
            return false;
        }
    }
    cpus > 0
}

/// The process's CPU time (user + system), from `/proc/self/stat`.
pub(crate) fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields count from the
    // last ')'. utime and stime are fields 14 and 15, the 12th and 13th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    let ticks = utime + stime;
    Some(Duration::from_secs(ticks / hz) + Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz))
}

/// The resident set in bytes, from `/proc/self/statm` (its second field, in pages).
pub(crate) fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = if page > 0 { page as u64 } else { 4096 };
    Some(pages * page)
}

fn count_entries(dir: &str) -> Option<u64> {
    Some(std::fs::read_dir(dir).ok()?.count() as u64)
}

/// Threads of the process.
pub(crate) fn thread_count() -> Option<u64> {
    count_entries("/proc/self/task")
}

/// Open descriptors, not counting the one reading the directory.
pub(crate) fn open_descriptors() -> Option<u64> {
    count_entries("/proc/self/fd").map(|n| n.saturating_sub(1))
}
