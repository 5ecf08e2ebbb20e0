//! Unwind tables of mapped ELF files, for unwinding stacks through code without frame
//! pointers with `framehop`: the file-backed executable mappings of a process
//! ([`executable_mappings`] of its `/proc/PID/maps`, or the caller's own list, such as perf's
//! mmap records), each file's unwind sections read once ([`Sections::read`]), and the
//! `framehop` [`Module`] of a mapping ([`module_of`]) at its loaded addresses.
//!
//! The CPU sampler (`eventpipe-profiler`) unwinds its own process in a signal handler with
//! these modules; `eventpipe-perf` unwinds another process's samples from the copy of its
//! stack the kernel took.

use std::sync::Arc;

pub use framehop;
use framehop::{ExplicitModuleSectionInfo, Module};
use object::{Object, ObjectSection, ObjectSegment};

/// A section's bytes, shared between the modules of every mapping of its file.
pub type SectionBytes = Arc<[u8]>;

/// One executable mapping of a file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mapping {
    /// First mapped address.
    pub start: u64,
    /// One past the last mapped address.
    pub end: u64,
    /// The file offset `start` maps.
    pub offset: u64,
    /// The file's path.
    pub path: String,
}

/// A file's unwind sections and where its segments load.
#[derive(Debug, Clone)]
pub struct Sections {
    eh_frame: Option<(std::ops::Range<u64>, SectionBytes)>,
    eh_frame_hdr: Option<(std::ops::Range<u64>, SectionBytes)>,
    got: Option<std::ops::Range<u64>>,
    /// (file offset, size in the file, virtual address, executable) of each loadable
    /// segment.
    segments: Vec<(u64, u64, u64, bool)>,
}

impl Sections {
    /// The unwind sections of the ELF file at `path`, read without loading the whole file;
    /// `None` when it cannot be read or is no ELF file.
    pub fn read(path: &str) -> Option<Sections> {
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
}

/// The file-backed executable mappings of a `/proc/PID/maps` text (not the vDSO, not a
/// deleted file).
pub fn executable_mappings(maps: &str) -> Vec<Mapping> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
            let _device = fields.next()?;
            let _inode = fields.next()?;
            let path: String = fields.collect::<Vec<_>>().join(" ");
            if !perms.contains('x') || !is_file_path(&path) {
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

/// Whether a mapping's name is a file that can be read (not `[vdso]`, `//anon`, a deleted
/// file).
pub fn is_file_path(path: &str) -> bool {
    path.starts_with('/') && !path.ends_with("(deleted)")
}

/// The `framehop` module of mapping `m` of a file with `sections`: its addresses as
/// loaded, from the executable segment the mapping holds; `None` without `.eh_frame` or
/// such a segment.
pub fn module_of(m: &Mapping, sections: &Sections) -> Option<Module<SectionBytes>> {
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
    let (eh_frame_svma, eh_frame) = sections.eh_frame.clone().unzip();
    let (eh_frame_hdr_svma, eh_frame_hdr) = sections.eh_frame_hdr.clone().unzip();
    Some(Module::new(
        m.path.clone(),
        m.start..m.end,
        bias,
        ExplicitModuleSectionInfo {
            base_svma: 0,
            got_svma: sections.got.clone(),
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

    #[test]
    fn this_test_binary_has_unwind_sections_and_a_module_where_it_runs() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let here = executable_file_mappings_are_read_from_maps as fn() as usize as u64;
        let m = executable_mappings(&maps)
            .into_iter()
            .find(|m| m.path == exe.to_string_lossy() && (m.start..m.end).contains(&here))
            .expect("this binary's code is mapped");
        let sections = Sections::read(&m.path).expect("it reads");
        assert!(module_of(&m, &sections).is_some());
    }
}
