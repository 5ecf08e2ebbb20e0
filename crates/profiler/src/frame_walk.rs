//! The frame-pointer walker shared by the allocation profiler (its own thread's stack) and
//! the CPU sampler (an interrupted thread's stack, from its signal handler).
//!
//! With frame pointers (the workspace builds with `-C force-frame-pointers=yes`) every frame
//! holds a *frame record*, two words at its frame pointer: the caller's frame pointer, then
//! the return address into the caller. The records form a chain from the leaf towards the
//! root, each above the last (stacks grow down). [`walk`] follows that chain, reading
//! memory through a [`FrameMemory`]: [`OwnStack`] reads the calling thread's own stack
//! directly, the CPU sampler's reader copies the interrupted stack through a system call
//! that fails, rather than faults, on an unmapped address.
//!
//! A chain through code built without frame pointers holds garbage, so the walk stops at the
//! first record that is below the last one (or at it), misaligned, above the stack's bound,
//! unreadable, or has a zero return address — or once it has emitted `max` frames.
//!
//! The walk allocates nothing and takes no lock: it runs in the CPU sampler's signal handler.

/// Bytes in a word, and the alignment of a frame record.
pub(crate) const WORD: usize = std::mem::size_of::<usize>();

/// Where the walk reads frame records from.
pub(crate) trait FrameMemory {
    /// The aligned word at `address`, or `None` when it cannot be read (which ends the walk).
    fn read_word(&mut self, address: usize) -> Option<usize>;

    /// The frame record at `fp`: (the caller's frame pointer, the return address).
    fn read_record(&mut self, fp: usize) -> Option<(usize, usize)> {
        Some((self.read_word(fp)?, self.read_word(fp.checked_add(WORD)?)?))
    }
}

/// Reads the calling thread's own stack with plain (volatile) loads, between bounds its
/// creator vouches are mapped; any address outside them reads as `None`.
#[derive(Debug)]
pub(crate) struct OwnStack {
    /// Lowest readable address.
    low: usize,
    /// One past the highest readable byte.
    high: usize,
}

impl OwnStack {
    /// A reader of `[low, high)`.
    ///
    /// # Safety
    /// `[low, high)` must be mapped and readable memory for as long as the reader is used
    /// (for the calling thread's stack: from a live local of the caller up to the stack's
    /// top), and the words read are only looked at as integers.
    pub(crate) unsafe fn new(low: usize, high: usize) -> Self {
        OwnStack { low, high }
    }
}

impl FrameMemory for OwnStack {
    #[inline]
    fn read_word(&mut self, address: usize) -> Option<usize> {
        let end = address.checked_add(WORD)?;
        if address < self.low || end > self.high || address % WORD != 0 {
            return None;
        }
        // The words are read as plain integers (volatile: they are not Rust objects the
        // compiler knows of), aligned.
        // SAFETY: `[address, address + WORD)` lies within `[low, high)`, which `new`'s caller
        // guarantees is mapped and readable; the address is word-aligned.
        Some(unsafe { std::ptr::read_volatile(address as *const usize) })
    }
}

/// Where a walk starts and what it keeps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Walk {
    /// The first frame record's address (the frame pointer register).
    pub(crate) fp: usize,
    /// The lowest address a record may start at (below it lies what is not stack any more,
    /// or not yet the chain: the stack pointer, or a local of the walking frame).
    pub(crate) lowest: usize,
    /// The highest address a record may start at.
    pub(crate) highest: usize,
    /// Records at or below this address are followed but their return addresses are not
    /// emitted (the profiler's own frames); 0 keeps every frame.
    pub(crate) skip_through: usize,
    /// Frames to emit at most.
    pub(crate) max: usize,
}

/// Follows the frame-record chain described by `walk` through `memory`, handing each kept
/// return address to `emit`, leaf first; returns how many it emitted.
#[inline]
pub(crate) fn walk<M: FrameMemory + ?Sized>(
    walk: Walk,
    memory: &mut M,
    mut emit: impl FnMut(usize),
) -> usize {
    let Walk {
        mut fp,
        mut lowest,
        highest,
        skip_through,
        max,
    } = walk;
    let mut emitted = 0;
    while emitted < max {
        // A frame record is (the caller's frame pointer, the return address) at `fp`, above
        // the previous record; anything else ends the chain (a function built without frame
        // pointers may have left any value in the register).
        if fp < lowest || fp % WORD != 0 || fp > highest {
            break;
        }
        let Some(record_end) = fp.checked_add(2 * WORD) else {
            break;
        };
        let Some((next, return_address)) = memory.read_record(fp) else {
            break;
        };
        if return_address == 0 {
            break;
        }
        if fp > skip_through {
            emit(return_address);
            emitted += 1;
        }
        lowest = record_end;
        fp = next;
    }
    emitted
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic stack: `words[i]` is the word at `base + i * WORD`; nothing else reads.
    struct Synthetic<'a> {
        base: usize,
        words: &'a [usize],
        reads: usize,
    }

    impl FrameMemory for Synthetic<'_> {
        fn read_word(&mut self, address: usize) -> Option<usize> {
            self.reads += 1;
            let offset = address.checked_sub(self.base)?;
            if offset % WORD != 0 {
                return None;
            }
            self.words.get(offset / WORD).copied()
        }
    }

    const BASE: usize = 0x10_000;

    fn at(index: usize) -> usize {
        BASE + index * WORD
    }

    /// Five frame records at words 2, 6, 10, 14, 18, each pointing at the next; the last
    /// points at `last_next`. Return addresses are 0xA0, 0xA1, ...
    fn chain(last_next: usize) -> Vec<usize> {
        let mut words = vec![0xdead; 24];
        let records = [2, 6, 10, 14, 18];
        for (i, &r) in records.iter().enumerate() {
            words[r] = records.get(i + 1).map_or(last_next, |&n| at(n));
            words[r + 1] = 0xA0 + i;
        }
        words
    }

    fn run(words: &[usize], walk_from: Walk) -> (Vec<usize>, usize) {
        let mut memory = Synthetic {
            base: BASE,
            words,
            reads: 0,
        };
        let mut out = Vec::new();
        let n = walk(walk_from, &mut memory, |ra| out.push(ra));
        assert_eq!(n, out.len());
        (out, memory.reads)
    }

    fn whole(words: &[usize]) -> Walk {
        Walk {
            fp: at(2),
            lowest: BASE,
            highest: at(words.len() - 2),
            skip_through: 0,
            max: 64,
        }
    }

    #[test]
    fn walk_follows_the_chain_leaf_first_until_a_zero_return_address() {
        let mut words = chain(at(22));
        // A record whose return address is 0: the chain's end (a thread's first frame).
        words[22] = at(0);
        words[23] = 0;
        let (frames, _) = run(&words, whole(&words));
        assert_eq!(frames, [0xA0, 0xA1, 0xA2, 0xA3, 0xA4]);
    }

    #[test]
    fn walk_stops_at_a_frame_pointer_that_does_not_increase() {
        // The last record points back at the first (a cycle) and, separately, at itself.
        for back in [at(2), at(18), at(19)] {
            let words = chain(back);
            let (frames, _) = run(&words, whole(&words));
            assert_eq!(frames, [0xA0, 0xA1, 0xA2, 0xA3, 0xA4], "next fp {back:#x}");
        }
        // A start below `lowest` gives nothing.
        let words = chain(at(22));
        let start = Walk {
            lowest: at(3),
            ..whole(&words)
        };
        assert_eq!(run(&words, start).0, []);
    }

    #[test]
    fn walk_stops_at_a_misaligned_frame_pointer_without_reading_it() {
        let words = chain(at(20) + 1);
        let (frames, reads) = run(&words, whole(&words));
        assert_eq!(frames, [0xA0, 0xA1, 0xA2, 0xA3, 0xA4]);
        assert_eq!(
            reads, 10,
            "two words per record, none at the misaligned address"
        );
    }

    #[test]
    fn walk_stops_above_the_highest_record_and_at_unreadable_memory() {
        // `highest` excludes the fourth record: three frames.
        let words = chain(at(22));
        let bounded = Walk {
            highest: at(13),
            ..whole(&words)
        };
        assert_eq!(run(&words, bounded).0, [0xA0, 0xA1, 0xA2]);
        // Within bounds but past what the memory holds: the read fails, the walk ends.
        let words = chain(at(40));
        let unbounded = Walk {
            highest: usize::MAX,
            ..whole(&words)
        };
        assert_eq!(run(&words, unbounded).0, [0xA0, 0xA1, 0xA2, 0xA3, 0xA4]);
        // A record at the very top of the address space: its end overflows, so it ends the
        // walk instead of wrapping.
        let words = chain(usize::MAX - WORD + 1);
        assert_eq!(run(&words, unbounded).0, [0xA0, 0xA1, 0xA2, 0xA3, 0xA4]);
    }

    #[test]
    fn walk_emits_at_most_max_frames_and_reads_no_further() {
        let words = chain(at(22));
        let limited = Walk {
            max: 3,
            ..whole(&words)
        };
        let (frames, reads) = run(&words, limited);
        assert_eq!(frames, [0xA0, 0xA1, 0xA2]);
        assert_eq!(reads, 6);
        let none = Walk {
            max: 0,
            ..whole(&words)
        };
        assert_eq!(run(&words, none), (vec![], 0));
    }

    #[test]
    fn walk_skips_the_frames_at_or_below_skip_through_and_counts_only_kept_ones() {
        let words = chain(at(22));
        // Records at words 2 and 6 are the walker's own: skipped, not counted against `max`.
        let skipping = Walk {
            skip_through: at(6),
            max: 2,
            ..whole(&words)
        };
        assert_eq!(run(&words, skipping).0, [0xA2, 0xA3]);
    }

    #[test]
    fn own_stack_reads_a_real_chain_and_nothing_outside_its_bounds() {
        // A chain laid out in real memory, read with plain loads (under Miri too).
        let mut words = vec![0usize; 12];
        let base = words.as_ptr() as usize;
        words[0] = base + 4 * WORD;
        words[1] = 0x111;
        words[4] = base + 8 * WORD;
        words[5] = 0x222;
        // The last record points past the buffer: outside the reader's bounds.
        words[8] = base + 12 * WORD;
        words[9] = 0x333;
        let high = base + words.len() * WORD;
        // SAFETY: `[base, high)` is `words`, alive and not written while the reader is used.
        let mut memory = unsafe { OwnStack::new(base, high) };
        let mut out = Vec::new();
        let start = Walk {
            fp: base,
            lowest: base,
            highest: usize::MAX,
            skip_through: 0,
            max: 16,
        };
        walk(start, &mut memory, |ra| out.push(ra));
        assert_eq!(out, [0x111, 0x222, 0x333]);
        assert_eq!(memory.read_word(base - WORD), None);
        assert_eq!(memory.read_word(high), None);
        assert_eq!(memory.read_word(base + 1), None);
        assert_eq!(memory.read_word(high - WORD), Some(0));
        drop(words);
    }
}
