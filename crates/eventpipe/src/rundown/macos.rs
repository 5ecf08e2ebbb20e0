//! macOS: Mach-O images through dyld. Threads are not named by id (no public call reads
//! another thread's name by its id), so only the names threads gave the writer appear.

// libc marks its dyld bindings deprecated in favour of the `mach2` crate's; they are the
// same four plain functions of libdyld, kept here to need no second binding crate.
#![allow(deprecated)]

use std::ffi::CStr;

use super::LoadedModule;

const MH_MAGIC_64: u32 = 0xfeed_facf;
const LC_SEGMENT_64: u32 = 0x19;
const LC_UUID: u32 = 0x1b;
/// `mach_header_64`'s size: the load commands follow it.
const HEADER_64: usize = 32;

/// Every image dyld has loaded, in its order (the main program first).
pub(super) fn loaded_modules() -> Vec<LoadedModule> {
    // SAFETY: no preconditions; images loaded later are simply not counted.
    let count = unsafe { libc::_dyld_image_count() };
    (0..count).filter_map(image).collect()
}

fn image(index: u32) -> Option<LoadedModule> {
    // SAFETY: `index` is below the count; dyld returns null for an image unloaded since.
    let header = unsafe { libc::_dyld_get_image_header(index) }.cast::<u8>();
    // SAFETY: as above.
    let name = unsafe { libc::_dyld_get_image_name(index) };
    if header.is_null() || name.is_null() {
        return None;
    }
    // SAFETY: as above; the slide is a plain number.
    let slide = unsafe { libc::_dyld_get_image_vmaddr_slide(index) } as u64;
    // SAFETY: a non-null name is a NUL-terminated string dyld keeps while the image is
    // loaded.
    let path = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: a loaded image's header and load commands are mapped and read-only for as
    // long as it is loaded: the header's 32 bytes first, then `sizeofcmds` more.
    let head = unsafe { std::slice::from_raw_parts(header, HEADER_64) };
    if word(head, 0)? != MH_MAGIC_64 {
        return None;
    }
    let ncmds = word(head, 16)? as usize;
    let sizeofcmds = word(head, 20)? as usize;
    // SAFETY: see above: the load commands follow the header in the mapped image.
    let commands = unsafe { std::slice::from_raw_parts(header.add(HEADER_64), sizeofcmds) };
    let (low, high, uuid) = segments(commands, ncmds)?;
    Some(LoadedModule {
        path,
        base_address: low.wrapping_add(slide),
        size: high.saturating_sub(low),
        load_bias: slide,
        build_id: uuid
            .map(|u| u.iter().map(|b| format!("{b:02x}")).collect())
            .unwrap_or_default(),
    })
}

/// The lowest and highest virtual addresses of an image's segments (but `__PAGEZERO`,
/// which maps nothing), and its `LC_UUID`, from its load commands.
fn segments(mut commands: &[u8], ncmds: usize) -> Option<(u64, u64, Option<[u8; 16]>)> {
    let (mut low, mut high, mut uuid) = (u64::MAX, 0u64, None);
    for _ in 0..ncmds {
        let (cmd, size) = (word(commands, 0)?, word(commands, 4)? as usize);
        let this = commands.get(..size.max(8))?;
        match cmd {
            LC_SEGMENT_64 => {
                let name = this.get(8..24)?;
                let (vmaddr, vmsize) = (quad(this, 24)?, quad(this, 32)?);
                if !name.starts_with(b"__PAGEZERO") && vmsize > 0 {
                    low = low.min(vmaddr);
                    high = high.max(vmaddr.saturating_add(vmsize));
                }
            }
            LC_UUID => uuid = this.get(8..24)?.try_into().ok(),
            _ => {}
        }
        commands = commands.get(size.max(8)..)?;
    }
    (high > 0).then_some((low, high, uuid))
}

/// The little-endian `u32` at `at` of `b`, if `b` is long enough.
fn word(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The little-endian `u64` at `at` of `b`, if `b` is long enough.
fn quad(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

pub(super) fn thread_name(_os_tid: u64) -> Option<String> {
    None
}
