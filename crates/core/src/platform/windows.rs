//! Windows: `GetCurrentThreadId` and the process APIs, through `windows-sys`.

use std::time::Duration;

use windows_sys::Win32::Foundation::{CloseHandle, FILETIME, INVALID_HANDLE_VALUE};
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, Thread32First, Thread32Next, TH32CS_SNAPTHREAD, THREADENTRY32,
};
use windows_sys::Win32::System::ProcessStatus::{K32GetProcessMemoryInfo, PROCESS_MEMORY_COUNTERS};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, GetCurrentProcessId, GetCurrentThreadId, GetProcessHandleCount,
    GetProcessTimes,
};

/// The calling thread's id.
pub(crate) fn current_os_tid() -> u64 {
    // SAFETY: no preconditions.
    u64::from(unsafe { GetCurrentThreadId() })
}

/// Windows times with the monotonic clock (`QueryPerformanceCounter` underneath `Instant`).
pub(crate) fn invariant_tsc() -> bool {
    false
}

fn filetime(t: FILETIME) -> Duration {
    let hundreds = (u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime);
    Duration::from_nanos(hundreds.saturating_mul(100))
}

/// The process's CPU time (user + kernel).
pub(crate) fn cpu_time() -> Option<Duration> {
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: the pseudo-handle of this process needs no closing; the four out-pointers
    // are valid FILETIMEs.
    let ok = unsafe {
        GetProcessTimes(
            GetCurrentProcess(),
            &mut created,
            &mut exited,
            &mut kernel,
            &mut user,
        )
    };
    (ok != 0).then(|| filetime(kernel) + filetime(user))
}

/// The working set in bytes.
pub(crate) fn resident_bytes() -> Option<u64> {
    // SAFETY: an all-zero PROCESS_MEMORY_COUNTERS is a valid value of a plain C struct.
    let mut counters: PROCESS_MEMORY_COUNTERS = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<PROCESS_MEMORY_COUNTERS>() as u32;
    counters.cb = size;
    // SAFETY: `counters` is `size` writable bytes.
    let ok = unsafe { K32GetProcessMemoryInfo(GetCurrentProcess(), &mut counters, size) };
    (ok != 0).then_some(counters.WorkingSetSize as u64)
}

/// Threads of the process, from a Toolhelp snapshot of every thread on the system.
pub(crate) fn thread_count() -> Option<u64> {
    // SAFETY: no preconditions; failure is INVALID_HANDLE_VALUE.
    let snapshot = unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) };
    if snapshot == INVALID_HANDLE_VALUE {
        return None;
    }
    // SAFETY: no preconditions.
    let me = unsafe { GetCurrentProcessId() };
    // SAFETY: an all-zero THREADENTRY32 is a valid value of a plain C struct.
    let mut entry: THREADENTRY32 = unsafe { std::mem::zeroed() };
    entry.dwSize = std::mem::size_of::<THREADENTRY32>() as u32;
    let mut count = 0;
    // SAFETY: `snapshot` is the open snapshot; `entry` has its size set, as required.
    let mut more = unsafe { Thread32First(snapshot, &mut entry) } != 0;
    while more {
        count += u64::from(entry.th32OwnerProcessID == me);
        // SAFETY: as for Thread32First.
        more = unsafe { Thread32Next(snapshot, &mut entry) } != 0;
    }
    // SAFETY: the snapshot is ours to close, once.
    unsafe { CloseHandle(snapshot) };
    Some(count)
}

/// Open handles of the process (of every kind: files, events, threads, keys).
pub(crate) fn open_descriptors() -> Option<u64> {
    let mut count = 0u32;
    // SAFETY: the pseudo-handle of this process; `count` is a valid out-pointer.
    let ok = unsafe { GetProcessHandleCount(GetCurrentProcess(), &mut count) };
    (ok != 0).then_some(u64::from(count))
}

/// Where the monotonic clock's ticks count from: the first reading (its origin is
/// `Instant`'s own here, which no other process states).
pub(crate) fn monotonic_origin_ns() -> i64 {
    0
}
