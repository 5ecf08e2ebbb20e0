//! Whole user stacks through code without frame pointers: each sample's copy of its user
//! stack and registers, unwound with the unwind tables (`.eh_frame`) of the files the
//! process has mapped (`eventpipe-unwind`, `framehop`), as `perf report --call-graph
//! dwarf` and samply do.
//!
//! Each process's executable file mappings are followed from its mmap records, in time
//! order: a fork starts from its parent's, an exec from none, a new mapping replaces what
//! it overlaps. Its unwinder is rebuilt at its next sample after they change; each file's
//! sections are read once for all processes. Code with no table (JIT code, the vDSO) is
//! unwound by its frame pointer, as `framehop` falls back to. Reads outside the copied
//! stack end the walk.

use std::collections::HashMap;

use eventpipe_unwind::framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use eventpipe_unwind::framehop::{FrameAddress, Unwinder};
use eventpipe_unwind::{is_file_path, module_of, Mapping, SectionBytes, Sections};

use crate::record::{Mmap, UserStack};

/// The most frames one stack keeps.
const MAX_FRAMES: usize = 512;

/// Every process's unwinder.
#[derive(Default)]
pub(crate) struct Unwinders {
    processes: HashMap<u32, Process>,
    sections: HashMap<String, Option<Sections>>,
}

impl std::fmt::Debug for Unwinders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinders")
            .field("processes", &self.processes.len())
            .field("files", &self.sections.len())
            .finish()
    }
}

#[derive(Default)]
struct Process {
    mappings: Vec<Mapping>,
    unwinder: Option<(UnwinderX86_64<SectionBytes>, CacheX86_64)>,
}

impl Unwinders {
    /// Process `pid` mapped `m`.
    pub(crate) fn map(&mut self, m: &Mmap) {
        if !m.executable || !is_file_path(&m.file_name) {
            return;
        }
        let p = self.processes.entry(m.pid).or_default();
        let end = m.start.saturating_add(m.len);
        p.mappings
            .retain(|old| old.end <= m.start || old.start >= end);
        p.mappings.push(Mapping {
            start: m.start,
            end,
            offset: m.file_offset,
            path: m.file_name.clone(),
        });
        p.unwinder = None;
    }

    /// Process `pid` was forked from `parent`: it starts with the parent's mappings.
    pub(crate) fn fork(&mut self, pid: u32, parent: u32) {
        let mappings = self
            .processes
            .get(&parent)
            .map(|p| p.mappings.clone())
            .unwrap_or_default();
        self.processes.insert(
            pid,
            Process {
                mappings,
                unwinder: None,
            },
        );
    }

    /// Process `pid` exec'd: its old mappings are gone.
    pub(crate) fn exec(&mut self, pid: u32) {
        self.processes.insert(pid, Process::default());
    }

    /// Process `pid` ended.
    pub(crate) fn exit(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// The user frames of a sample of `pid`, innermost first: the interrupted address, then
    /// return addresses. Empty when the process has no known mapping.
    pub(crate) fn unwind(&mut self, pid: u32, user: &UserStack) -> Vec<u64> {
        let Some(p) = self.processes.get_mut(&pid) else {
            return Vec::new();
        };
        if p.mappings.is_empty() {
            return Vec::new();
        }
        let sections = &mut self.sections;
        let (unwinder, cache) = p.unwinder.get_or_insert_with(|| {
            let mut unwinder = UnwinderX86_64::new();
            for m in &p.mappings {
                let s = sections
                    .entry(m.path.clone())
                    .or_insert_with(|| Sections::read(&m.path));
                if let Some(module) = s.as_ref().and_then(|s| module_of(m, s)) {
                    unwinder.add_module(module);
                }
            }
            (unwinder, CacheX86_64::new())
        });
        let stack = &user.bytes;
        let mut read = |address: u64| -> Result<u64, ()> {
            let at = usize::try_from(address.checked_sub(user.sp).ok_or(())?).map_err(|_| ())?;
            let word = stack.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(word.try_into().map_err(|_| ())?))
        };
        let regs = UnwindRegsX86_64::new(user.ip, user.sp, user.bp);
        let mut frames = unwinder.iter_frames(user.ip, regs, cache, &mut read);
        let mut out = Vec::new();
        while let Ok(Some(frame)) = frames.next() {
            out.push(match frame {
                FrameAddress::InstructionPointer(a) => a,
                FrameAddress::ReturnAddress(a) => a.get(),
            });
            if out.len() >= MAX_FRAMES {
                break;
            }
        }
        out
    }
}
