//! Windows: PE modules through `EnumProcessModules`, thread names through
//! `GetThreadDescription`.

use windows_sys::Win32::Foundation::{CloseHandle, LocalFree, HMODULE};
use windows_sys::Win32::System::ProcessStatus::{
    K32EnumProcessModules, K32GetModuleFileNameExW, K32GetModuleInformation, MODULEINFO,
};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, GetThreadDescription, OpenThread, THREAD_QUERY_LIMITED_INFORMATION,
};

use super::LoadedModule;

/// Every module of the process, the main program first (the loader's order).
pub(super) fn loaded_modules() -> Vec<LoadedModule> {
    // SAFETY: the pseudo-handle of this process needs no closing.
    let process = unsafe { GetCurrentProcess() };
    let mut handles: Vec<HMODULE> = vec![std::ptr::null_mut(); 256];
    loop {
        let bytes = (handles.len() * std::mem::size_of::<HMODULE>()) as u32;
        let mut needed = 0u32;
        // SAFETY: `handles` has room for `bytes` bytes of module handles.
        if unsafe { K32EnumProcessModules(process, handles.as_mut_ptr(), bytes, &mut needed) } == 0
        {
            return Vec::new();
        }
        let count = needed as usize / std::mem::size_of::<HMODULE>();
        if needed <= bytes {
            handles.truncate(count);
            break;
        }
        handles.resize(count, std::ptr::null_mut());
    }
    handles
        .into_iter()
        .filter_map(|module| {
            // SAFETY: an all-zero MODULEINFO is a valid value of a plain C struct.
            let mut info: MODULEINFO = unsafe { std::mem::zeroed() };
            let size = std::mem::size_of::<MODULEINFO>() as u32;
            // SAFETY: `info` is `size` writable bytes; a module unloaded since fails.
            if unsafe { K32GetModuleInformation(process, module, &mut info, size) } == 0 {
                return None;
            }
            let mut name = vec![0u16; 32_768];
            // SAFETY: `name` has room for its length in UTF-16 units.
            let n = unsafe {
                K32GetModuleFileNameExW(process, module, name.as_mut_ptr(), name.len() as u32)
            } as usize;
            let base = info.lpBaseOfDll as u64;
            Some(LoadedModule {
                path: String::from_utf16_lossy(&name[..n.min(name.len())]),
                base_address: base,
                size: u64::from(info.SizeOfImage),
                load_bias: base,
                build_id: String::new(),
            })
        })
        .filter(|m| !m.path.is_empty())
        .collect()
}

/// The description a thread of this process was given (`SetThreadDescription`, which
/// Rust's `std::thread::Builder::name` calls).
pub(super) fn thread_name(os_tid: u64) -> Option<String> {
    let tid = u32::try_from(os_tid).ok()?;
    // SAFETY: no preconditions; failure (no such thread) is null.
    let thread = unsafe { OpenThread(THREAD_QUERY_LIMITED_INFORMATION, 0, tid) };
    if thread.is_null() {
        return None;
    }
    let mut text: *mut u16 = std::ptr::null_mut();
    // SAFETY: `thread` is open with the access the call needs; `text` receives a string
    // the system allocated, freed below with LocalFree.
    let hr = unsafe { GetThreadDescription(thread, &mut text) };
    // SAFETY: the handle is ours to close, once.
    unsafe { CloseHandle(thread) };
    if hr < 0 || text.is_null() {
        return None;
    }
    let mut len = 0;
    // SAFETY: a successful call leaves a NUL-terminated UTF-16 string at `text`.
    while unsafe { *text.add(len) } != 0 {
        len += 1;
    }
    // SAFETY: `len` units were just read as initialized.
    let name = String::from_utf16_lossy(unsafe { std::slice::from_raw_parts(text, len) });
    // SAFETY: `text` was allocated by GetThreadDescription for us to free with LocalFree.
    unsafe { LocalFree(text.cast()) };
    (!name.is_empty()).then_some(name)
}
