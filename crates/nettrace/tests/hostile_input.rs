//! Malformed, truncated and hostile bytes: the reader returns `Ok` or a typed `Err` and
//! never panics, never loops without consuming input, and never makes an allocation larger
//! than the input justifies (checked with a counting allocator).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use eventpipe_test_support::Rng;
use nettrace::{Error, ErrorKind, TraceReader};

/// Records the largest single allocation made by this thread. Per thread because the test
/// harness runs the tests of this file in parallel: a neighbour's large (legitimate)
/// allocation must not be blamed on the input under test.
struct LargestAllocation;

thread_local! {
    // A const-initialised `Cell` has no destructor and never allocates, so the allocator may
    // touch it at any point of the thread's life.
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note_allocation(size: usize) {
    let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
}

/// Forgets what this thread allocated so far.
fn reset_largest() {
    LARGEST.with(|largest| largest.set(0));
}

/// The largest single allocation this thread made since `reset_largest`.
fn largest() -> usize {
    LARGEST.with(Cell::get)
}

// SAFETY: forwards every call unchanged to the system allocator; the only addition is a
// thread-local max, which allocates nothing and cannot fail.
unsafe impl GlobalAlloc for LargestAllocation {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation(new_size);
        // SAFETY: the caller's contract for `realloc` is passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: LargestAllocation = LargestAllocation;

/// Reads everything through the fast API, decoding every field; returns the error, if any.
fn read_fully_borrowed(bytes: &[u8]) -> Option<Error> {
    let mut reader = match TraceReader::from_slice(bytes) {
        Ok(r) => r,
        Err(e) => return Some(e),
    };
    loop {
        match reader.next_event_ref() {
            Ok(Some(e)) => {
                let _ = e.for_each_field(|_, v| {
                    let _ = v.to_value();
                });
                let _ = e.stack_ips().count();
                let _ = (e.thread_id(), e.capture_thread_id(), e.activity_id());
            }
            Ok(None) => return None,
            Err(e) => return Some(e),
        }
    }
}

/// Reads everything, decoding every payload; returns the error, if any. Also reads through
/// the fast API, which must stop at the same error.
fn read_fully(bytes: &[u8]) -> Option<Error> {
    let owned = read_fully_owned(bytes);
    let borrowed = read_fully_borrowed(bytes);
    assert_eq!(
        owned.as_ref().map(ToString::to_string),
        borrowed.as_ref().map(ToString::to_string)
    );
    owned
}

fn read_fully_owned(bytes: &[u8]) -> Option<Error> {
    let mut reader = match TraceReader::from_slice(bytes) {
        Ok(r) => r,
        Err(e) => return Some(e),
    };
    loop {
        match reader.next_event() {
            Ok(Some(e)) => {
                let _ = e.decode_payload();
                let _ = e.stack_ips().count();
            }
            Ok(None) => return None,
            Err(e) => return Some(e),
        }
    }
}

fn read_streaming(bytes: &[u8]) -> Option<Error> {
    let mut reader = match TraceReader::from_read(bytes) {
        Ok(r) => r,
        Err(e) => return Some(e),
    };
    loop {
        match reader.next_event() {
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(e) => return Some(e),
        }
    }
}

fn traces(max_len: usize) -> Vec<(String, Vec<u8>)> {
    let Some(dir) = common::shared_traces("hostile input mutations") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "nettrace") {
            let bytes = std::fs::read(&path).unwrap();
            if bytes.len() <= max_len {
                out.push((
                    path.file_name().unwrap().to_string_lossy().into_owned(),
                    bytes,
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_truncation_is_ok_or_a_typed_error_with_an_offset() {
    for (name, bytes) in traces(600 * 1024) {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ bytes.len() as u64);
        let mut cuts: Vec<usize> = (0..bytes.len().min(300)).collect();
        cuts.extend((0..300).map(|_| rng.index(bytes.len())));
        for cut in cuts {
            let short = &bytes[..cut];
            let err = read_fully(short)
                .unwrap_or_else(|| panic!("{name} cut at {cut} read without error"));
            let offset = err
                .offset()
                .unwrap_or_else(|| panic!("{name} cut at {cut}: no offset in {err}"));
            assert!(
                offset.0 <= cut as u64,
                "{name} cut at {cut}: offset {offset} beyond input"
            );
            assert!(
                read_streaming(short).is_some(),
                "{name} cut at {cut}: streaming read without error"
            );
        }
    }
}

#[test]
fn bit_flips_never_panic_or_over_allocate() {
    let mut total = 0;
    for (name, bytes) in traces(600 * 1024) {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ bytes.len() as u64);
        let rounds = if bytes.len() > 100_000 { 150 } else { 1500 };
        for round in 0..rounds {
            let mut mutated = bytes.clone();
            for _ in 0..1 + rng.index(4) {
                let i = rng.index(mutated.len());
                match rng.index(3) {
                    0 => mutated[i] ^= 1 << rng.index(8),
                    1 => mutated[i] = 0xff,
                    _ => mutated[i] = rng.next_u64() as u8,
                }
            }
            reset_largest();
            let _ = read_fully(&mutated);
            let _ = read_streaming(&mutated);
            let largest = largest();
            // Streaming holds a 64 KiB read buffer; nothing else may exceed a few times the input.
            let bound = 4 * mutated.len() + (1 << 20);
            assert!(
                largest <= bound,
                "{name} round {round}: allocated {largest} bytes for {} input",
                mutated.len()
            );
            total += 1;
        }
    }
    if total > 0 {
        assert!(total >= 3000, "only {total} mutations ran");
    }
}

#[test]
fn hostile_size_fields_are_rejected_without_allocating_them() {
    // V6 header, then a 16 MiB event block that never arrives.
    let mut v6 = b"Nettrace".to_vec();
    for v in [0u32, 6, 0] {
        v6.extend_from_slice(&v.to_le_bytes());
    }
    let mut trace_block = Vec::new();
    trace_block.extend_from_slice(&[0u8; 16]);
    trace_block.extend_from_slice(&0i64.to_le_bytes());
    trace_block.extend_from_slice(&1_000i64.to_le_bytes());
    trace_block.extend_from_slice(&8i32.to_le_bytes());
    trace_block.extend_from_slice(&u32::MAX.to_le_bytes()); // absurd key/value count
    v6.extend_from_slice(&((trace_block.len() as u32) | 1 << 24).to_le_bytes());
    v6.extend_from_slice(&trace_block);
    reset_largest();
    let err = read_fully(&v6).expect("absurd key/value count must fail");
    assert!(err.to_string().contains("key/value count"), "{err}");
    assert!(largest() < 1 << 20);

    let mut streaming = v6.clone();
    let kv_at = streaming.len() - 4;
    streaming[kv_at..].copy_from_slice(&0u32.to_le_bytes());
    streaming.extend_from_slice(&(0x00ff_ffffu32 | 2 << 24).to_le_bytes());
    reset_largest();
    let err = read_streaming(&streaming).expect("missing block must fail");
    assert!(
        matches!(err.kind(), ErrorKind::UnexpectedEof { .. }),
        "{err}"
    );
    assert!(
        largest() < 1 << 20,
        "streaming reader allocated the declared block size"
    );
}

#[test]
fn netperf_and_foreign_files_get_clear_errors() {
    let mut netperf = 20i32.to_le_bytes().to_vec();
    netperf.extend_from_slice(b"!FastSerialization.1");
    let err = read_fully(&netperf).unwrap();
    assert!(err.to_string().contains("NetPerf"), "{err}");
    let err = read_fully(b"\x7fELF\x02\x01\x01\x00 not a trace").unwrap();
    assert!(err.to_string().contains("Nettrace"), "{err}");
    let err = read_fully(b"").unwrap();
    assert!(
        matches!(err.kind(), ErrorKind::UnexpectedEof { .. }),
        "{err}"
    );
}
