//! Allocation-heavy workloads shared by the benchmarks.

use std::alloc::{GlobalAlloc, Layout};
use std::collections::BTreeMap;

/// Sizes cycled through: mostly small, some medium, a few large, like a typical program.
const SIZES: [usize; 16] = [
    16, 24, 32, 48, 64, 96, 128, 256, 24, 40, 512, 1024, 4096, 32, 16384, 80,
];

/// `ops` allocations (and as many frees, every eighth slot a reallocation) through `a`,
/// keeping a ring of 256 blocks live. Direct calls, so the only difference between two
/// allocators is their code. With `fill`, every block is written in full once allocated, as
/// a program initialises what it allocates; without, only its first byte (the allocator's
/// worst case: nothing but allocator calls).
#[allow(dead_code)]
#[inline(never)]
pub(crate) fn ring<A: GlobalAlloc>(a: &A, ops: usize, fill: bool) -> usize {
    const RING: usize = 256;
    let mut live: [(usize, usize); RING] = [(0, 0); RING];
    let mut checksum = 0usize;
    for i in 0..ops {
        let slot = i % RING;
        let size = SIZES[(i ^ (i >> 4)) % SIZES.len()];
        let (old, old_size) = live[slot];
        // SAFETY: every layout has a non-zero size and alignment 8; a block is freed or
        // reallocated once, with the layout it was allocated with.
        unsafe {
            let layout = |s: usize| Layout::from_size_align_unchecked(s, 8);
            let p = if old != 0 && i % 8 == 0 {
                a.realloc(old as *mut u8, layout(old_size), size)
            } else {
                if old != 0 {
                    a.dealloc(old as *mut u8, layout(old_size));
                }
                a.alloc(layout(size))
            };
            assert!(!p.is_null());
            if fill {
                std::ptr::write_bytes(p, i as u8, size);
            }
            *p = i as u8;
            checksum = checksum.wrapping_add(p as usize & 0xff);
            live[slot] = (p as usize, size);
        }
    }
    for (p, size) in live {
        if p != 0 {
            // SAFETY: as above.
            unsafe { a.dealloc(p as *mut u8, Layout::from_size_align_unchecked(size, 8)) };
        }
    }
    checksum
}

/// An ordinary program's allocation pattern through the global allocator: strings, growing
/// vectors, a map.
#[allow(dead_code)]
pub(crate) fn program(n: usize) -> usize {
    let mut words: Vec<String> = Vec::new();
    let mut map: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for i in 0..n {
        let w = format!("word-{}-{}", i % 97, i);
        map.entry(w[..7.min(w.len())].to_owned())
            .or_default()
            .push(i as u32);
        words.push(w);
    }
    let joined: usize = words.iter().map(String::len).sum();
    joined + map.len()
}

/// The fastest and the median of 41 timed runs of `program(20_000)`, in microseconds:
/// figures two bench binaries (two global allocators) can be compared on when run
/// alternately.
#[allow(dead_code)]
pub(crate) fn program_times_us() -> (f64, f64) {
    let mut times: Vec<f64> = (0..41)
        .map(|_| {
            let start = std::time::Instant::now();
            std::hint::black_box(program(std::hint::black_box(20_000)));
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    (times[0], times[times.len() / 2])
}

/// What `criterion_group!`/`criterion_main!` expand to (minus their undocumented `pub fn`)
/// for `bench`, then `program_times_us` printed as `name`'s.
#[allow(dead_code)]
pub(crate) fn bench_and_time_program(name: &str, bench: fn(&mut criterion::Criterion)) {
    let mut c = criterion::Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    let (fastest, median) = program_times_us();
    println!("{name} program(20000): fastest and median of 41 runs {fastest:.1} us {median:.1} us");
}

/// The calling thread's CPU time: unlike the wall clock, it leaves out the time the thread
/// waits for a core while other threads (the session's drain thread, the profilers' own
/// threads, another process) run.
#[allow(dead_code)]
pub(crate) fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and the clock id is a constant Linux has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// One unit of CPU work, about 100 µs in a release build: the samplers' overhead benches
/// time a fixed number of them.
#[allow(dead_code)]
#[inline(never)]
pub(crate) fn unit(mut x: u64) -> u64 {
    for i in 0..20_000u64 {
        x = std::hint::black_box(x.rotate_left(5) ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    x
}

/// User plus system CPU time of the whole process so far.
#[allow(dead_code)]
pub(crate) fn process_cpu_time() -> std::time::Duration {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    let tv = |t: libc::timeval| std::time::Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The median of `v` (the upper one of an even count).
#[allow(dead_code)]
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
