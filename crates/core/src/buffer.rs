//! A single-producer, single-consumer byte buffer: one writing thread appends records, the
//! drain thread reads them.
//!
//! The writer owns `[committed, capacity)` and publishes a record by storing the new end in
//! `committed` with Release; the drain loads `committed` with Acquire and then owns reading
//! `[read position, committed)`. Bytes below `committed` are never written again, so the two
//! sides never touch the same byte concurrently. When the writer moves on to a new buffer it
//! sets `retired` (Release); a retired buffer whose every committed byte was read is freed by
//! the drain. This is the rtrb/Lamport SPSC queue without wrap-around: buffers are used once.

#[cfg(not(eventpipe_loom))]
use std::alloc::{alloc_zeroed, dealloc, Layout};
#[cfg(not(eventpipe_loom))]
use std::ptr::NonNull;

#[cfg(not(eventpipe_loom))]
use crate::record::RECORD_HEADER;
use crate::sync::{AtomicBool, AtomicUsize, Ordering};

/// One append-only buffer.
#[derive(Debug)]
pub struct Buffer {
    #[cfg(not(eventpipe_loom))]
    ptr: NonNull<u8>,
    /// Under loom every byte is a tracked cell, so the model checker sees each data access
    /// and reports any that is not ordered by the `committed` hand-off.
    #[cfg(eventpipe_loom)]
    cells: Box<[loom::cell::UnsafeCell<u8>]>,
    capacity: usize,
    /// End of the published records. Written only by the owning writer (Release), read by
    /// the drain (Acquire).
    committed: AtomicUsize,
    /// Set by the writer (Release) after its last commit to this buffer; read by the drain
    /// (Acquire) to know no more records will come.
    retired: AtomicBool,
}

// SAFETY: the bytes are shared between exactly one writer and the drain under the protocol
// in the module docs (disjoint ranges separated by `committed`), and all other fields are
// atomics or immutable.
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// A buffer of `capacity` bytes.
    #[cfg(eventpipe_loom)]
    pub fn new(capacity: usize) -> Option<Buffer> {
        Some(Buffer {
            cells: (0..capacity)
                .map(|_| loom::cell::UnsafeCell::new(0))
                .collect(),
            capacity,
            committed: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
        })
    }

    /// A buffer of `capacity` bytes, or `None` if the allocation fails.
    #[cfg(not(eventpipe_loom))]
    pub fn new(capacity: usize) -> Option<Buffer> {
        let layout = Layout::from_size_align(capacity.max(1), 8).ok()?;
        // Zeroed, so every byte is initialised from the start and the writer may hand out
        // the unpublished space as a `&mut [u8]` (`write_payload`). Buffers are reused
        // (`reset`), so only fresh ones pay for it.
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        Some(Buffer {
            ptr,
            capacity: layout.size(),
            committed: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Makes an emptied buffer new again, for another writer. `&mut self`: no writer or
    /// reader holds it (the manager got it back with `Arc::try_unwrap`, whose Acquire
    /// orders every access its last holders made before this).
    pub fn reset(&mut self) {
        self.committed.store(0, Ordering::Relaxed);
        self.retired.store(false, Ordering::Relaxed);
    }

    /// Writer side: appends `parts` as one record at `at` (the writer's own end, equal to
    /// `committed`) and publishes it. Returns the new end.
    ///
    /// # Safety
    /// Only the buffer's single writer may call this, with `at` equal to the end it last
    /// published, and the parts must fit: `at + total length <= capacity`.
    pub unsafe fn append(&self, at: usize, parts: &[&[u8]]) -> usize {
        let mut end = at;
        for part in parts {
            debug_assert!(end + part.len() <= self.capacity);
            // SAFETY: `[end, end + len)` lies within the buffer (caller's contract) and at or
            // beyond `committed`, so the drain does not read it until we publish.
            unsafe { self.write_bytes(end, part) };
            end += part.len();
        }
        // Release: publishes the bytes written above; pairs with the Acquire in `readable`.
        self.committed.store(end, Ordering::Release);
        end
    }

    /// Where the bytes start. The short write path keeps it beside its write position, so
    /// a record needs no pointer chase through the buffer (see [`write_record`]).
    #[cfg(not(eventpipe_loom))]
    pub fn base(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Writer side: publishes every record written below `end`.
    ///
    /// # Safety
    /// Only the buffer's single writer may call this, with `end` at or beyond the end it
    /// last published and within the capacity, and every byte below `end` written.
    #[cfg(not(eventpipe_loom))]
    #[inline(always)]
    pub unsafe fn publish(&self, end: usize) {
        debug_assert!(end <= self.capacity);
        // Release: publishes the bytes written before; pairs with the Acquire in `readable`.
        self.committed.store(end, Ordering::Release);
    }

    /// Writer side: no more records will be appended.
    pub fn retire(&self) {
        // Release: pairs with the Acquire in `is_retired`, ordering it after the last commit.
        self.retired.store(true, Ordering::Release);
    }

    /// Drain side: whether the writer has moved on.
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// # Safety
    /// `[at, at + bytes.len())` must lie within the buffer, at or beyond `committed`, and
    /// only the single writer may call this.
    #[cfg(not(eventpipe_loom))]
    #[inline(always)]
    unsafe fn write_bytes(&self, at: usize, bytes: &[u8]) {
        // SAFETY: forwarded from the caller.
        unsafe { copy_small(bytes, self.ptr.as_ptr().add(at)) };
    }

    /// # Safety
    /// As the std version.
    #[cfg(eventpipe_loom)]
    unsafe fn write_bytes(&self, at: usize, bytes: &[u8]) {
        for (cell, b) in self.cells[at..at + bytes.len()].iter().zip(bytes) {
            // SAFETY: forwarded from the caller; loom checks the exclusivity claim.
            cell.with_mut(|p| unsafe { *p = *b });
        }
    }

    /// Drain side: calls `f` with the published bytes from `from` on.
    pub fn with_readable<R>(&self, from: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        #[cfg(not(eventpipe_loom))]
        return f(self.readable(from));
        #[cfg(eventpipe_loom)]
        return f(&self.read_copy(from));
    }

    /// Drain side: whether nothing is published at or beyond `pos`. Once the buffer was seen
    /// retired, the answer is final.
    pub fn is_read_to_end(&self, pos: usize) -> bool {
        // Acquire: pairs with the Release in `append` (the same load `readable` makes).
        self.committed.load(Ordering::Acquire) <= pos
    }

    /// Drain side (model checking): a copy of the published bytes from `from` on.
    #[cfg(eventpipe_loom)]
    pub fn read_copy(&self, from: usize) -> Vec<u8> {
        // Acquire: pairs with the Release in `append`.
        let end = self.committed.load(Ordering::Acquire);
        self.cells[from.min(end)..end]
            .iter()
            // SAFETY: published bytes are never written again.
            .map(|c| c.with(|p| unsafe { *p }))
            .collect()
    }

    /// Drain side: the published bytes from `from` on.
    #[cfg(not(eventpipe_loom))]
    pub fn readable(&self, from: usize) -> &[u8] {
        // Acquire: pairs with the Release in `append`, so every byte below `end` is visible.
        let end = self.committed.load(Ordering::Acquire);
        let from = from.min(end);
        // SAFETY: `[from, end)` was published by the writer, which never writes below
        // `committed` again, and lies within the allocation.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(from), end - from) }
    }
}

/// Writer side: encodes, unpublished, the `payload_len` bytes of payload of the record at
/// `base + at` in place (no staging copy), through `write_payload`. Returns the record's end,
/// for [`Buffer::publish`] once [`write_header`] has written the rest.
///
/// # Safety
/// `base` is [`Buffer::base`] of a buffer whose single writer is the caller, `at` is at or
/// beyond its published end, and `at + RECORD_HEADER + payload_len` is within its capacity.
#[cfg(not(eventpipe_loom))]
#[inline(always)]
pub(crate) unsafe fn write_payload(
    base: NonNull<u8>,
    at: usize,
    payload_len: usize,
    write_payload: impl FnOnce(&mut [u8]),
) -> usize {
    // The payload lies within the allocation and at or beyond the published end (caller's
    // contract), so the drain holds no reference into it and only this writer touches it
    // until it publishes; every byte of the allocation is initialised (zeroed when
    // allocated, only ever overwritten with bytes).
    // SAFETY: so it may be a `&mut`, exclusive for this call.
    let payload = unsafe {
        std::slice::from_raw_parts_mut(base.as_ptr().add(at + RECORD_HEADER), payload_len)
    };
    write_payload(payload);
    at + RECORD_HEADER + payload_len
}

/// Writer side: writes, unpublished, the header of the record at `base + at`: three
/// little-endian words, straight from registers (a header assembled byte-wise on the stack
/// and then copied stalls on store forwarding).
///
/// # Safety
/// As for [`write_payload`].
#[cfg(not(eventpipe_loom))]
#[inline(always)]
pub(crate) unsafe fn write_header(base: NonNull<u8>, at: usize, header: [u64; 3]) {
    // SAFETY: within the allocation, at or beyond the published end (caller's contract);
    // unaligned stores.
    unsafe {
        let record = base.as_ptr().add(at).cast::<u64>();
        for (i, word) in header.into_iter().enumerate() {
            record.add(i).write_unaligned(word.to_le());
        }
    }
}

/// Copies `src` into `dst`, which is as long: `copy_small` for a payload in a record.
#[cfg(not(eventpipe_loom))]
#[inline(always)]
pub fn copy_payload(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "a payload copy of a different length");
    // SAFETY: `dst` is valid for `src.len()` bytes (asserted) and, being a `&mut`, does not
    // overlap `src`.
    unsafe { copy_small(src, dst.as_mut_ptr()) }
}

/// Copies `src` to `dst`. Payloads are mostly a few words: up to 32 bytes the copy is two
/// (possibly overlapping) loads and stores inline, where a call to `memcpy` for a length
/// known only at run time costs as much as the rest of the write.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes and not overlap `src`.
#[cfg(not(eventpipe_loom))]
#[inline(always)]
unsafe fn copy_small(src: &[u8], dst: *mut u8) {
    let len = src.len();
    let s = src.as_ptr();
    // In every arm, each read lies within `src` (offsets + widths <= len); an overlap of
    // the two stores of one arm writes the same bytes twice.
    // SAFETY: each write lies within `dst[..len]` (the caller's contract), all unaligned.
    unsafe {
        match len {
            0 => {}
            1..=7 => {
                for i in 0..len {
                    *dst.add(i) = *s.add(i);
                }
            }
            8..=16 => {
                let head = s.cast::<u64>().read_unaligned();
                let tail = s.add(len - 8).cast::<u64>().read_unaligned();
                dst.cast::<u64>().write_unaligned(head);
                dst.add(len - 8).cast::<u64>().write_unaligned(tail);
            }
            17..=32 => {
                let head = s.cast::<u128>().read_unaligned();
                let tail = s.add(len - 16).cast::<u128>().read_unaligned();
                dst.cast::<u128>().write_unaligned(head);
                dst.add(len - 16).cast::<u128>().write_unaligned(tail);
            }
            _ => dst.copy_from_nonoverlapping(s, len),
        }
    }
}

#[cfg(not(eventpipe_loom))]
impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this size and alignment; `&mut self` means no
        // writer or reader holds it.
        unsafe {
            dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.capacity, 8),
            )
        }
    }
}

#[cfg(all(test, not(eventpipe_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn copies_of_every_small_length_are_exact() {
        let src: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        for len in 0..=80 {
            let mut dst = vec![0xEEu8; len + 8];
            // SAFETY: `dst` has room for `len` bytes; the two do not overlap.
            unsafe { copy_small(&src[..len], dst.as_mut_ptr()) };
            assert_eq!(&dst[..len], &src[..len], "length {len}");
            assert!(
                dst[len..].iter().all(|&b| b == 0xEE),
                "length {len} wrote past"
            );
        }
    }

    #[test]
    fn records_cross_threads_intact_and_in_order() {
        let buf = Arc::new(Buffer::new(1 << 20).unwrap());
        let writer = {
            let buf = Arc::clone(&buf);
            std::thread::spawn(move || {
                let mut end = 0;
                for i in 0u32..50_000 {
                    let bytes = i.to_le_bytes();
                    // SAFETY: this thread is the only writer; 50_000 * 8 bytes fit.
                    end = unsafe { buf.append(end, &[&bytes, &bytes]) };
                }
                buf.retire();
            })
        };
        let mut read = 0;
        let mut next = 0u32;
        loop {
            let retired = buf.is_retired();
            let chunk = buf.readable(read);
            for rec in chunk.chunks_exact(8) {
                assert_eq!(rec[..4], next.to_le_bytes());
                assert_eq!(rec[4..], next.to_le_bytes());
                next += 1;
            }
            read += chunk.len() - chunk.len() % 8;
            if retired && buf.readable(read).is_empty() {
                break;
            }
        }
        writer.join().unwrap();
        assert_eq!(next, 50_000);
    }
}
