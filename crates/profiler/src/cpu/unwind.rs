//! Whole stacks through code without frame pointers: the signal handler unwinds with the
//! loaded modules' unwind tables (`.eh_frame`, through `framehop`), so a sample taken in
//! glibc's syscall wrappers, which keep no frame pointer, still reaches `main`.
//!
//! The collector builds the **tables** (one `framehop` module per executable mapping of
//! `/proc/self/maps`, with the file's `.eh_frame`, `.eh_frame_hdr` and `.got`) before it
//! arms the first timer and again whenever the mappings change (a library loaded), and
//! publishes each set with a Release store into `TABLES`. The handler loads it with
//! Acquire and only reads it. A published set is never freed, since a handler may be
//! reading it at any time: sets are built only when the executable mappings change, so
//! their number stays that of the program's `dlopen`s, and the sections' bytes are shared
//! between sets (`Arc`).
//!
//! In the handler the unwinding allocates nothing (`MustNotAllocateDuringUnwind`, with the
//! per-thread rule cache the slot owns) and reads the stack through the same checked
//! reader as the frame-pointer walk, so a bad rule ends the walk instead of faulting. Code
//! with no unwind table (the vDSO, JIT code) is unwound by its frame pointer, as
//! `framehop` falls back to. A stack the unwinder could not finish (an unreadable slot, a
//! stack deeper than [`MAX_FRAMES`](super::capture::MAX_FRAMES)) ends in
//! [`TRUNCATED_FRAME`], which readers show as `[truncated]`.

use std::collections::HashMap;
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, MustNotAllocateDuringUnwind, Unwinder};
use object::{Object, ObjectSection, ObjectSegment};

use crate::sync::{AtomicPtr, Ordering};

/// The address that ends a stack the unwinder could not finish: no code lives there (it
/// is not a canonical x86_64 address), and readers name it `[truncated]`.
pub const TRUNCATED_FRAME: u64 = 0xFFFF_FFFF_FFFF_FFFE;

/// The handler's rule cache (one per sampled thread).
pub(crate) type RuleCache = CacheX86_64<MustNotAllocateDuringUnwind>;

type SectionBytes = Arc<[u8]>;

/// One published set of unwind tables.
pub(crate) struct Tables {
    unwinder: UnwinderX86_64<SectionBytes, MustNotAllocateDuringUnwind>,
}

/// The newest published set, or null before the first.
static TABLES: AtomicPtr<Tables> = AtomicPtr::new(std::ptr::null_mut());

/// The tables the handler unwinds with, once the collector has published some.
#[inline]
pub(crate) fn current() -> Option<&'static Tables> {
    // Acquire: pairs with the Release store in `Loader::refresh`; the set it points to is
    // complete.
    let tables = TABLES.load(Ordering::Acquire);
    // SAFETY: a non-null pointer came from `Box::leak` and is never freed.
    (!tables.is_null()).then(|| unsafe { &*tables })
}

impl Tables {
    /// Unwinds from the interrupted registers, calling `emit` with the pc and then each
    /// return address, at most `max` addresses; `read` reads one stack word (or fails).
    /// Returns whether the stack was cut short (the unwinder failed, or `max` was reached)
    /// rather than ending where the thread began.
    pub(crate) fn unwind(
        &self,
        (pc, sp, fp): (usize, usize, usize),
        cache: &mut RuleCache,
        read: &mut impl FnMut(u64) -> Option<u64>,
        max: usize,
        mut emit: impl FnMut(usize),
    ) -> bool {
        let regs = UnwindRegsX86_64::new(pc as u64, sp as u64, fp as u64);
        let mut read_stack = |address: u64| read(address).ok_or(());
        let mut frames = self
            .unwinder
            .iter_frames(pc as u64, regs, cache, &mut read_stack);
        let mut n = 0;
        loop {
            match frames.next() {
                Ok(Some(frame)) if n < max => {
                    emit(frame.address() as usize);
                    n += 1;
                }
                Ok(Some(_)) | Err(_) => return true,
                Ok(None) => return false,
            }
        }
    }
}

/// One executable mapping of a file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    path: String,
}

/// What the collector keeps between refreshes: the mappings of the published set and each
/// file's unwind sections.
#[derive(Debug, Default)]
pub(crate) struct Loader {
    published: Vec<Mapping>,
    sections: HashMap<String, Option<Sections>>,
}

/// A file's unwind sections and where its segments load.
#[derive(Debug, Clone)]
struct Sections {
    eh_frame: Option<(std::ops::Range<u64>, SectionBytes)>,
    eh_frame_hdr: Option<(std::ops::Range<u64>, SectionBytes)>,
    got: Option<std::ops::Range<u64>>,
    /// (file offset, size in the file, virtual address, executable) of each loadable
    /// segment.
    segments: Vec<(u64, u64, u64, bool)>,
}

impl Loader {
    /// Publishes new tables when the process's executable mappings changed since the last
    /// set (or none was published yet). Best effort: a file that cannot be read gets no
    /// table, and its code is unwound by frame pointers.
    pub(crate) fn refresh(&mut self) {
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
            return;
        };
        let mappings = executable_mappings(&maps);
        if mappings == self.published && !TABLES.load(Ordering::Relaxed).is_null() {
            return;
        }
        let mut unwinder = UnwinderX86_64::new();
        for m in &mappings {
            let sections = self
                .sections
                .entry(m.path.clone())
                .or_insert_with(|| read_sections(&m.path))
                .clone();
            if let Some(module) = sections.and_then(|s| module_of(m, s)) {
                unwinder.add_module(module);
            }
        }
        let tables: &'static Tables = Box::leak(Box::new(Tables { unwinder }));
        // Release: the set is complete before a handler's Acquire load sees the pointer.
        // The set it replaces is leaked, not freed (module docs).
        TABLES.store(std::ptr::from_ref(tables).cast_mut(), Ordering::Release);
        self.published = mappings;
    }
}

/// The file-backed executable mappings of a `/proc/self/maps` text.
fn executable_mappings(maps: &str) -> Vec<Mapping> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
            let _device = fields.next()?;
            let _inode = fields.next()?;
            let path: String = fields.collect::<Vec<_>>().join(" ");
            if !perms.contains('x') || !path.starts_with('/') || path.ends_with("(deleted)") {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset,
                path,
            })
        })
        .collect()
}

/// The unwind sections of the ELF file at `path`, read without loading the whole file.
fn read_sections(path: &str) -> Option<Sections> {
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    let section = |name: &str| {
        let s = elf.section_by_name(name)?;
        let data = s.data().ok()?;
        Some((
            s.address()..s.address() + s.size(),
            SectionBytes::from(data),
        ))
    };
    Some(Sections {
        eh_frame: section(".eh_frame"),
        eh_frame_hdr: section(".eh_frame_hdr"),
        got: elf
            .section_by_name(".got")
            .map(|s| s.address()..s.address() + s.size()),
        segments: elf
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                let executable = match s.flags() {
                    object::SegmentFlags::Elf { p_flags, .. } => {
                        p_flags.contains(object::elf::PF_X)
                    }
                    _ => false,
                };
                (offset, size, s.address(), executable)
            })
            .collect(),
    })
}

/// The `framehop` module of mapping `m` of a file with `sections`: its addresses as
/// loaded, from the executable segment the mapping holds.
fn module_of(m: &Mapping, sections: Sections) -> Option<Module<SectionBytes>> {
    let (seg_offset, seg_address) = mapped_segment(m.offset, &sections.segments)?;
    // Where the file's address 0 lies in memory (0 for a non-PIE executable): the mapping
    // puts file offset `m.offset` at `m.start`, the segment file offset `seg_offset` at
    // `seg_address + bias`.
    let bias = m
        .start
        .wrapping_sub(m.offset)
        .wrapping_add(seg_offset)
        .wrapping_sub(seg_address);
    sections.eh_frame.as_ref()?;
    let (eh_frame_svma, eh_frame) = sections.eh_frame.unzip();
    let (eh_frame_hdr_svma, eh_frame_hdr) = sections.eh_frame_hdr.unzip();
    Some(Module::new(
        m.path.clone(),
        m.start..m.end,
        bias,
        ExplicitModuleSectionInfo {
            base_svma: 0,
            got_svma: sections.got,
            eh_frame_svma,
            eh_frame,
            eh_frame_hdr_svma,
            eh_frame_hdr,
            ..Default::default()
        },
    ))
}

/// The (file offset, address) of the executable segment a mapping at file offset
/// `offset` holds. A mapping starts at a page boundary, so it may start before its
/// segment's first byte (linkers such as lld give segments offsets that are not page
/// aligned): the segment's page-aligned start is what must match.
fn mapped_segment(offset: u64, segments: &[(u64, u64, u64, bool)]) -> Option<(u64, u64)> {
    const PAGE: u64 = 4096;
    segments
        .iter()
        .filter(|s| s.3)
        .find(|&&(seg_offset, size, _, _)| {
            seg_offset & !(PAGE - 1) <= offset && offset < seg_offset + size.max(1)
        })
        .map(|&(seg_offset, _, address, _)| (seg_offset, address))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_finds_its_executable_segment_even_when_the_segment_is_not_page_aligned() {
        // As lld lays out a PIE: read-only data, then code at a file offset that is not
        // page aligned, loaded a page further on.
        let segments = [
            (0, 0x1d3ab0, 0, false),
            (0x1d3ab0, 0x9e2000, 0x1d4ab0, true),
            (0xbb5ab0, 0x1000, 0xbb7ab0, false),
        ];
        assert_eq!(
            mapped_segment(0x1d3000, &segments),
            Some((0x1d3ab0, 0x1d4ab0))
        );
        let m = Mapping {
            start: 0x5600_001d_4000,
            end: 0x5600_00bb_6000,
            offset: 0x1d3000,
            path: "/bin/app".into(),
        };
        // File offset 0x1d3ab0 (address 0x1d4ab0) is at 0x5600001d4ab0: the bias is the
        // PIE's load address.
        let (seg_offset, seg_address) = mapped_segment(m.offset, &segments).unwrap();
        let bias = m.start - m.offset + seg_offset - seg_address;
        assert_eq!(bias, 0x5600_0000_0000);
        assert_eq!(mapped_segment(0x1000, &segments), None, "not code");
    }

    #[test]
    fn executable_file_mappings_are_read_from_maps() {
        let maps = "\
55d0c0000000-55d0c0010000 r--p 00000000 08:01 1 /usr/bin/app
55d0c0010000-55d0c0050000 r-xp 00010000 08:01 1 /usr/bin/app
7f0000000000-7f0000020000 r-xp 00028000 08:01 2 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000100000-7f0000101000 r-xp 00000000 00:00 0 [vdso]
7f0000200000-7f0000201000 r-xp 00000000 08:01 3 /tmp/gone.so (deleted)
";
        let m = executable_mappings(maps);
        assert_eq!(m.len(), 2);
        assert_eq!(
            m[0],
            Mapping {
                start: 0x55d0_c001_0000,
                end: 0x55d0_c005_0000,
                offset: 0x10000,
                path: "/usr/bin/app".into()
            }
        );
        assert_eq!(m[1].path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
    }

    /// A function whose first instruction the next test unwinds from.
    #[inline(never)]
    fn probe_target(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(3)
    }

    #[test]
    fn at_a_functions_first_instruction_the_return_address_is_at_the_stack_pointer() {
        let mut loader = Loader::default();
        loader.refresh();
        let tables = current().expect("published");
        let pc = probe_target as fn(u64) -> u64 as usize;
        let caller = at_a_functions_first_instruction_the_return_address_is_at_the_stack_pointer
            as fn() as usize
            + 16;
        let decoy = this_process_gets_tables_for_itself_and_libc as fn() as usize + 16;
        // A stack of our own: the return address at the stack pointer (as `call` left it),
        // and a frame record at the frame pointer that leads elsewhere (the decoy): only
        // the rule of this very function's entry reads the former.
        let mut stack = [0u64; 16];
        stack[0] = caller as u64;
        stack[8] = 0;
        stack[9] = decoy as u64;
        let base = stack.as_ptr() as usize;
        let (sp, fp) = (base, base + 8 * 8);
        let mut read = |address: u64| {
            let at = usize::try_from(address).ok()?.checked_sub(base)? / 8;
            stack.get(at).copied()
        };
        let mut frames = Vec::new();
        tables.unwind((pc, sp, fp), &mut RuleCache::new_in(), &mut read, 4, |a| {
            frames.push(a)
        });
        assert_eq!(frames.first(), Some(&pc));
        assert_eq!(
            frames.get(1),
            Some(&caller),
            "the entry's rule (found at this binary's real addresses) reads the stack pointer"
        );
    }

    #[test]
    fn this_process_gets_tables_for_itself_and_libc() {
        let mut loader = Loader::default();
        loader.refresh();
        let tables = current().expect("published");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let here = this_process_gets_tables_for_itself_and_libc as fn() as usize as u64;
        let m = executable_mappings(&std::fs::read_to_string("/proc/self/maps").unwrap());
        assert!(m
            .iter()
            .any(|m| m.path == exe.to_string_lossy() && (m.start..m.end).contains(&here)));
        assert!(loader.sections.keys().any(|p| p.contains("libc.so")));
        // The same mappings again: nothing new is published.
        loader.refresh();
        assert!(std::ptr::eq(tables, current().unwrap()));
    }
}
