//! Per-thread cells: where counter updates land.
//!
//! A counter holds [`CELLS`] cache-line-sized cells. Each of the first [`OWNED_SLOTS`] is
//! owned by at most one thread at a time: a thread claims a slot number on its first
//! update (the same number for every counter) and gives it back when it exits. The owner
//! updates its cell with a relaxed load and a relaxed store (no read-modify-write, no
//! `lock` prefix: about a third of a nanosecond), and no other thread writes it, so two
//! threads updating the same counter never touch the same cache line. Threads beyond the
//! owned slots share the last cell and update it with `fetch_add`.
//!
//! Readers (the publisher) load every cell with Relaxed and add them up. Owned cells only
//! grow by their owner's additions, so a reader never sees an update twice or loses one;
//! it may miss the ones in flight, which the next reading counts.
//!
//! Not async-signal-safe: a signal handler that updates a counter on a thread interrupted
//! between its load and its store would have its update overwritten.

use std::cell::Cell;

use crate::sync::{AtomicU64, Ordering};

/// Slots a thread may own.
pub(crate) const OWNED_SLOTS: usize = 32;
/// The cell threads share once every slot is owned (updated with read-modify-writes).
pub(crate) const SHARED_SLOT: usize = OWNED_SLOTS;
/// Cells per counter.
pub(crate) const CELLS: usize = OWNED_SLOTS + 1;

/// A thread's slot before its first update.
const UNCLAIMED: u8 = u8::MAX;

/// One cache line (two on x86-64, whose adjacent-line prefetcher pulls lines in pairs: the
/// claim order below keeps the first 16 threads on separate pairs without paying 128 bytes
/// a cell).
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct Padded<T>(pub(crate) T);

/// Bit `i` set: slot `i` has an owner.
static SLOT_OWNERS: AtomicU64 = AtomicU64::new(0);

/// Even slots first, so consecutive claims sit 128 bytes apart.
const CLAIM_ORDER: [u8; OWNED_SLOTS] = {
    let mut order = [0u8; OWNED_SLOTS];
    let mut i = 0;
    while i < OWNED_SLOTS {
        order[i] = if i < OWNED_SLOTS / 2 {
            (2 * i) as u8
        } else {
            (2 * (i - OWNED_SLOTS / 2) + 1) as u8
        };
        i += 1;
    }
    order
};

thread_local! {
    /// This thread's slot: `UNCLAIMED`, an owned slot, or `SHARED_SLOT`. Constant-initialised
    /// and without a destructor, so reading it is one thread-local load.
    static THREAD_SLOT: Cell<u8> = const { Cell::new(UNCLAIMED) };
    /// Gives the slot back when the thread exits; registered on the claim.
    static SLOT_RELEASE: SlotRelease = const { SlotRelease };
}

struct SlotRelease;

impl Drop for SlotRelease {
    fn drop(&mut self) {
        let slot = THREAD_SLOT.with(Cell::get);
        if usize::from(slot) < OWNED_SLOTS {
            // Updates from destructors that run after this one go to the shared cell.
            THREAD_SLOT.with(|s| s.set(SHARED_SLOT as u8));
            // Release: the next owner's claim (Acquire) sees every store this thread made
            // to its cells, so its load-and-store continues from them.
            SLOT_OWNERS.fetch_and(!(1u64 << slot), Ordering::Release);
        }
    }
}

/// The calling thread's slot, claimed on its first call.
#[inline(always)]
pub(crate) fn thread_slot() -> usize {
    let slot = THREAD_SLOT.with(Cell::get);
    if slot != UNCLAIMED {
        return usize::from(slot);
    }
    claim_slot()
}

#[cold]
#[inline(never)]
fn claim_slot() -> usize {
    let mut owners = SLOT_OWNERS.load(Ordering::Relaxed);
    let slot = loop {
        let Some(&free) = CLAIM_ORDER.iter().find(|&&s| owners & (1 << s) == 0) else {
            break SHARED_SLOT as u8;
        };
        // Acquire: pairs with the previous owner's Release in `SlotRelease::drop`.
        match SLOT_OWNERS.compare_exchange_weak(
            owners,
            owners | 1 << free,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => {
                // Registers the destructor that gives the slot back. A thread already
                // tearing down its thread-locals cannot register one: it keeps nothing.
                if SLOT_RELEASE.try_with(|_| ()).is_err() {
                    SLOT_OWNERS.fetch_and(!(1u64 << free), Ordering::Release);
                    break SHARED_SLOT as u8;
                }
                break free;
            }
            Err(now) => owners = now,
        }
    };
    THREAD_SLOT.with(|s| s.set(slot));
    usize::from(slot)
}

/// Wrapping `u64` sums, one cell per slot (also used for `i64` as two's complement).
#[derive(Debug)]
pub(crate) struct U64Cells {
    cells: [Padded<AtomicU64>; CELLS],
}

impl U64Cells {
    pub(crate) const fn new() -> Self {
        U64Cells {
            cells: [const { Padded(AtomicU64::new(0)) }; CELLS],
        }
    }

    /// Adds `v` (wrapping) to the calling thread's cell.
    #[inline(always)]
    pub(crate) fn add(&self, v: u64) {
        let slot = thread_slot();
        let cell = &self.cells[slot.min(SHARED_SLOT)].0;
        if slot < OWNED_SLOTS {
            // Relaxed load and store: this thread is the cell's only writer (see the
            // module docs), so nothing can come between them.
            cell.store(
                cell.load(Ordering::Relaxed).wrapping_add(v),
                Ordering::Relaxed,
            );
        } else {
            cell.fetch_add(v, Ordering::Relaxed);
        }
    }

    /// The wrapping sum of every cell.
    pub(crate) fn sum(&self) -> u64 {
        self.cells
            .iter()
            .fold(0u64, |sum, c| sum.wrapping_add(c.0.load(Ordering::Relaxed)))
    }
}

/// `f64` sums (as bits), one cell per slot.
#[derive(Debug)]
pub(crate) struct F64Cells {
    cells: [Padded<AtomicU64>; CELLS],
}

impl F64Cells {
    pub(crate) const fn new() -> Self {
        F64Cells {
            // 0u64 is the bit pattern of 0.0.
            cells: [const { Padded(AtomicU64::new(0)) }; CELLS],
        }
    }

    /// Adds `v` to the calling thread's cell.
    #[inline(always)]
    pub(crate) fn add(&self, v: f64) {
        let slot = thread_slot();
        let cell = &self.cells[slot.min(SHARED_SLOT)].0;
        if slot < OWNED_SLOTS {
            // Relaxed load and store: the cell has one writer (module docs).
            let sum = f64::from_bits(cell.load(Ordering::Relaxed)) + v;
            cell.store(sum.to_bits(), Ordering::Relaxed);
        } else {
            add_f64_shared(cell, v);
        }
    }

    /// The sum of every cell.
    pub(crate) fn sum(&self) -> f64 {
        self.cells
            .iter()
            .map(|c| f64::from_bits(c.0.load(Ordering::Relaxed)))
            .sum()
    }
}

/// Adds `v` to an `f64` cell that several threads update: a compare-and-swap loop.
pub(crate) fn add_f64_shared(cell: &AtomicU64, v: f64) {
    // Relaxed: only the value matters; the CAS makes each addition apply exactly once.
    let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
        Some((f64::from_bits(bits) + v).to_bits())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_order_visits_every_slot_once() {
        let mut seen = [false; OWNED_SLOTS];
        for &s in &CLAIM_ORDER {
            assert!(!seen[usize::from(s)]);
            seen[usize::from(s)] = true;
        }
    }

    #[test]
    fn threads_beyond_the_owned_slots_share_a_cell_and_lose_nothing() {
        static CELLS_UNDER_TEST: U64Cells = U64Cells::new();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(OWNED_SLOTS + 8));
        let threads: Vec<_> = (0..OWNED_SLOTS + 8)
            .map(|_| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    CELLS_UNDER_TEST.add(1);
                    // Every thread holds its slot until all have updated once.
                    barrier.wait();
                    for _ in 0..9_999 {
                        CELLS_UNDER_TEST.add(1);
                    }
                    thread_slot()
                })
            })
            .collect();
        let slots: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(CELLS_UNDER_TEST.sum(), 10_000 * (OWNED_SLOTS as u64 + 8));
        // Other tests' threads may hold slots too, so at least 8 threads shared.
        assert!(slots.iter().filter(|&&s| s == SHARED_SLOT).count() >= 8);
    }
}
