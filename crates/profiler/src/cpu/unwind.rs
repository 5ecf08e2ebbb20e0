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

use eventpipe_unwind::framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use eventpipe_unwind::framehop::{MustNotAllocateDuringUnwind, Unwinder};
use eventpipe_unwind::{executable_mappings, module_of, Mapping, SectionBytes, Sections};

use crate::sync::{AtomicPtr, Ordering};

/// The address that ends a stack the unwinder could not finish: no code lives there (it
/// is not a canonical x86_64 address), and readers name it `[truncated]`.
pub const TRUNCATED_FRAME: u64 = 0xFFFF_FFFF_FFFF_FFFE;

/// The handler's rule cache (one per sampled thread).
pub(crate) type RuleCache = CacheX86_64<MustNotAllocateDuringUnwind>;

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

/// What the collector keeps between refreshes: the mappings of the published set and each
/// file's unwind sections.
#[derive(Debug, Default)]
pub(crate) struct Loader {
    published: Vec<Mapping>,
    sections: HashMap<String, Option<Sections>>,
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
                .or_insert_with(|| Sections::read(&m.path));
            if let Some(module) = sections.as_ref().and_then(|s| module_of(m, s)) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The published tables are one process-wide set: a test that checks which set is
    /// current must not run beside another that publishes.
    static PUBLISHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A function whose first instruction the next test unwinds from.
    #[inline(never)]
    fn probe_target(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(3)
    }

    #[test]
    fn at_a_functions_first_instruction_the_return_address_is_at_the_stack_pointer() {
        let _alone = PUBLISHING.lock().unwrap_or_else(|p| p.into_inner());
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
        let _alone = PUBLISHING.lock().unwrap_or_else(|p| p.into_inner());
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
