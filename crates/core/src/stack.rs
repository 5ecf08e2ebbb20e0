//! Capturing the writing thread's stack, through the walker the runtime installs (the
//! unwinder is the runtime's dependency, not this crate's).
//!
//! A capture walks the stack into a scratch buffer taken from a small bounded pool: pop one,
//! or allocate when the pool is empty; the record gets an exact-size copy; the buffer goes
//! back to the pool, or is freed when the pool already holds `POOL_SIZE`. The pool is a
//! lock-free bounded queue, so two threads never share a scratch buffer (the bug of a single
//! global one: interleaved frames) and nothing ever try-locks and silently skips a capture.

use std::sync::OnceLock;

use crossbeam_queue::ArrayQueue;

/// Scratch buffers kept for reuse.
const POOL_SIZE: usize = 8;
/// Deepest stack recorded; deeper stacks are truncated at the root end.
pub(crate) const MAX_FRAMES: usize = 512;

/// Walks the calling thread's stack, leaf first, calling `frame` with each instruction
/// pointer until it returns false.
pub type StackWalker = fn(frame: &mut dyn FnMut(usize) -> bool);

static WALKER: OnceLock<StackWalker> = OnceLock::new();

/// Installs the walker `CapturedStack::capture` uses; the first call wins. The runtime
/// installs one before its first session starts; until then, captured stacks are empty.
pub fn install_walker(walker: StackWalker) {
    let _ = WALKER.set(walker);
}

fn pool() -> &'static ArrayQueue<Vec<u8>> {
    static POOL: OnceLock<ArrayQueue<Vec<u8>>> = OnceLock::new();
    POOL.get_or_init(|| ArrayQueue::new(POOL_SIZE))
}

/// A captured stack, leaf first, in a pooled scratch buffer, already encoded the way the
/// trace stores IPs: pointer-sized, little-endian.
#[derive(Debug)]
pub(crate) struct CapturedStack {
    bytes: Vec<u8>,
}

const WIDTH: usize = std::mem::size_of::<usize>();

/// Instruction pointers as the trace stores them: pointer-sized, little-endian.
#[cfg(target_endian = "little")]
pub(crate) fn encode_ips(ips: &[usize]) -> &[u8] {
    // On a little-endian target these bytes are the trace's encoding.
    // SAFETY: `usize` has no padding, any byte is a valid `u8` (alignment 1), and the
    // slice covers the same memory for the same lifetime.
    unsafe { std::slice::from_raw_parts(ips.as_ptr().cast::<u8>(), std::mem::size_of_val(ips)) }
}

impl CapturedStack {
    /// Walks the calling thread's stack.
    pub(crate) fn capture() -> CapturedStack {
        let mut bytes = pool()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(MAX_FRAMES * WIDTH));
        bytes.clear();
        if let Some(walk) = WALKER.get() {
            walk(&mut |ip| {
                bytes.extend_from_slice(&ip.to_le_bytes());
                bytes.len() < MAX_FRAMES * WIDTH
            });
        }
        CapturedStack { bytes }
    }

    /// The encoded instruction pointers.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    #[cfg(test)]
    fn frames(&self) -> impl Iterator<Item = usize> + '_ {
        self.bytes.chunks_exact(WIDTH).map(|c| {
            let mut w = [0u8; WIDTH];
            w.copy_from_slice(c);
            usize::from_le_bytes(w)
        })
    }
}

impl Drop for CapturedStack {
    fn drop(&mut self) {
        // A full pool means enough spares already: free this one.
        let _ = pool().push(std::mem::take(&mut self.bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each thread captures through its own marker function; every capture must contain
    /// its own marker's return address and never the other's (a shared scratch buffer would
    /// mix them).
    // Each marker uses the capture after the call, so the call is not a tail call and the
    // marker's frame is on the stack being walked.
    #[inline(never)]
    fn marker_a() -> CapturedStack {
        let s = CapturedStack::capture();
        std::hint::black_box(&s);
        s
    }

    #[inline(never)]
    fn marker_b() -> CapturedStack {
        // Different code, so the two markers are never folded into one function.
        std::hint::black_box(7u64);
        let s = CapturedStack::capture();
        std::hint::black_box(&s);
        s
    }

    /// Whether some IP of the stack resolves to a function named `name`.
    fn contains_fn(stack: &CapturedStack, name: &str) -> bool {
        stack.frames().any(|ip| {
            let mut found = false;
            // The return address points just past the call; resolve the byte before it.
            backtrace::resolve(ip.saturating_sub(1) as *mut std::ffi::c_void, |sym| {
                found |= sym.name().is_some_and(|n| n.to_string().contains(name));
            });
            found
        })
    }

    fn walk_with_backtrace(frame: &mut dyn FnMut(usize) -> bool) {
        backtrace::trace(|f| frame(f.ip() as usize));
    }

    #[test]
    fn concurrent_captures_never_share_a_buffer() {
        install_walker(walk_with_backtrace);
        let handles: Vec<_> = (0..8)
            .map(|i| {
                std::thread::spawn(move || {
                    let (mine, my_name, their_name): (fn() -> CapturedStack, _, _) = if i % 2 == 0 {
                        (marker_a, "marker_a", "marker_b")
                    } else {
                        (marker_b, "marker_b", "marker_a")
                    };
                    for _ in 0..50 {
                        let s = mine();
                        assert!(contains_fn(&s, my_name), "own frame missing");
                        assert!(!contains_fn(&s, their_name), "another thread's frame");
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(pool().len() <= POOL_SIZE);
    }
}
