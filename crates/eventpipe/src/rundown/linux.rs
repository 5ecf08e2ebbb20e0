//! Linux: ELF objects through `dl_iterate_phdr`, thread names from `/proc`.

use std::ffi::CStr;

use super::LoadedModule;

/// Every ELF object loaded in this process, in the dynamic linker's order (main program
/// first).
pub(super) fn loaded_modules() -> Vec<LoadedModule> {
    let mut modules: Vec<LoadedModule> = Vec::new();
    // The call is synchronous: the data pointer, a `&mut Vec`, outlives it.
    // SAFETY: `collect_module` matches the callback signature dl_iterate_phdr expects.
    unsafe {
        libc::dl_iterate_phdr(
            Some(collect_module),
            (&mut modules as *mut Vec<LoadedModule>).cast(),
        );
    }
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    for (i, m) in modules.iter_mut().enumerate() {
        // The dynamic linker names the main program "" (it is always reported first).
        if m.path.is_empty() && i == 0 {
            m.path = exe.clone();
        }
    }
    modules.retain(|m| !m.path.is_empty() && m.size > 0);
    modules
}

/// `dl_iterate_phdr` callback: appends one module to the `Vec` behind `data`.
///
/// # Safety
/// Only `dl_iterate_phdr` calls it: `info` valid for the call, `data` the exclusive
/// `&mut Vec<LoadedModule>` that `loaded_modules` passed.
// SAFETY: called only by dl_iterate_phdr from `loaded_modules`, as the doc says.
unsafe extern "C" fn collect_module(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid `info` for the duration of the callback, and
    // `data` is the `&mut Vec<LoadedModule>` given by `loaded_modules`, not aliased.
    let (info, modules) = unsafe { (&*info, &mut *data.cast::<Vec<LoadedModule>>()) };
    let path = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a non-null dlpi_name is a NUL-terminated string owned by the linker,
        // valid during the callback.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let headers: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: dlpi_phdr points at dlpi_phnum program headers of the loaded object,
        // which stay mapped while the callback runs (the linker holds its lock).
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let bias = info.dlpi_addr;
    let loads = headers.iter().filter(|h| h.p_type == libc::PT_LOAD);
    let low = loads.clone().map(|h| h.p_vaddr).min().unwrap_or(0);
    let high = loads.map(|h| h.p_vaddr + h.p_memsz).max().unwrap_or(0);
    let mut build_id = String::new();
    for h in headers.iter().filter(|h| h.p_type == libc::PT_NOTE) {
        // PT_NOTE segments of a loaded object lie inside its PT_LOAD segments (the linker
        // maps allocated notes).
        // SAFETY: so these `p_memsz` bytes are mapped, immutable while the object is loaded.
        let notes = unsafe {
            std::slice::from_raw_parts(
                (bias.wrapping_add(h.p_vaddr)) as *const u8,
                h.p_memsz as usize,
            )
        };
        if let Some(id) = gnu_build_id(notes) {
            build_id = id.iter().map(|b| format!("{b:02x}")).collect();
            break;
        }
    }
    modules.push(LoadedModule {
        path,
        base_address: bias.wrapping_add(low),
        size: high.saturating_sub(low),
        load_bias: bias,
        build_id,
    });
    0
}

/// The descriptor of the `NT_GNU_BUILD_ID` note in a note segment, if there is one.
pub(super) fn gnu_build_id(mut notes: &[u8]) -> Option<&[u8]> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let align4 = |n: usize| n.checked_add(3).map(|n| n & !3);
    while notes.len() >= 12 {
        let word =
            |i: usize| u32::from_ne_bytes([notes[i], notes[i + 1], notes[i + 2], notes[i + 3]]);
        let (namesz, descsz, kind) = (word(0) as usize, word(4) as usize, word(8));
        let name_end = 12usize.checked_add(align4(namesz)?)?;
        let desc_end = name_end.checked_add(align4(descsz)?)?;
        let name = notes.get(12..12 + namesz)?;
        let desc = notes.get(name_end..name_end.checked_add(descsz)?)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return Some(desc);
        }
        notes = notes.get(desc_end..)?;
    }
    None
}

/// The name the kernel gives thread `os_tid` of this process, if it is still alive.
pub(super) fn thread_name(os_tid: u64) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/self/task/{os_tid}/comm")).ok()?;
    let name = comm.trim_end_matches('\n');
    (!name.is_empty()).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::gnu_build_id;

    #[test]
    fn the_main_program_is_listed_first_with_its_build_id() {
        let modules = loaded_modules();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(modules[0].path, exe.to_string_lossy());
        // Our own code lies inside the main program's range.
        let here = the_main_program_is_listed_first_with_its_build_id as fn() as usize as u64;
        let m = &modules[0];
        assert!(
            here >= m.base_address && here < m.base_address + m.size,
            "{m:?}"
        );
        // rustc links with --build-id on Linux by default.
        assert_eq!(m.build_id.len(), 40, "{m:?}");
        // libc is loaded and has a path on disk.
        assert!(
            modules.iter().any(|m| m.path.contains("libc.so")),
            "{modules:?}"
        );
    }

    #[test]
    fn build_id_notes_are_found_and_malformed_notes_rejected() {
        let mut note = Vec::new();
        // An unrelated note first, then the build id.
        for (name, kind, desc) in [
            (&b"XYZ\0"[..], 1u32, &[9u8, 9][..]),
            (b"GNU\0", 3, &[1, 2, 3, 4, 5]),
        ] {
            note.extend_from_slice(&(name.len() as u32).to_ne_bytes());
            note.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
            note.extend_from_slice(&kind.to_ne_bytes());
            note.extend_from_slice(name);
            note.extend_from_slice(desc);
            while note.len() % 4 != 0 {
                note.push(0);
            }
        }
        assert_eq!(gnu_build_id(&note), Some(&[1u8, 2, 3, 4, 5][..]));
        for cut in 0..note.len() - 3 {
            assert!(gnu_build_id(&note[..cut]).is_none_or(|id| id == [1, 2, 3, 4, 5]));
        }
        let mut huge = note.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(gnu_build_id(&huge), None);
    }

    #[test]
    fn the_current_thread_has_a_kernel_name() {
        let tid = eventpipe_core::current_os_tid();
        assert!(kernel_thread_name(tid).is_some());
        assert_eq!(kernel_thread_name(u64::MAX), None);
    }
}
