//! A program with a known live heap and a leak that grows on command, for `eptrace heap`.
//!
//! It tracks its heap from the start (`track_heap`, one sample per 64 KiB on average, or
//! per BYTES with `--interval BYTES`) and runs the diagnostics server, so
//! `eptrace heap -p PID` can snapshot it at any time.
//!
//! Stdout: `pid N`, then `ready` once the live set is built: `--blocks N` (10,000) blocks
//! of `--block-size BYTES` (4,096) allocated in `keep_live_set` and kept, in a vector
//! allocated there too; and 200 backtraces kept by `keep_backtraces`, whose memory the
//! `backtrace` crate allocates (a library's site, called from the program). Stdin, one
//! command a line:
//! `leak N` allocates N blocks of 16,384 bytes in `leak_more` and keeps them, then prints
//! `leaked TOTAL_BYTES`; `churn N` allocates and frees N blocks (nothing stays); `quit`.
//!
//! ```sh
//! cargo run -p eventpipe-profiler --example heap-leak
//! eptrace heap -n heap-leak -o before.heap.nettrace    # then: leak 1000
//! eptrace heap -n heap-leak -o after.heap.nettrace
//! eptrace heap diff before.heap.nettrace after.heap.nettrace
//! ```

use std::alloc::System;
use std::io::{BufRead, Write};

use eventpipe_profiler::alloc::ProfiledAllocator;

#[global_allocator]
static ALLOC: ProfiledAllocator<System> = ProfiledAllocator::new(System);

/// The size of a leaked block.
const LEAK_BLOCK: usize = 16 * 1024;

#[inline(never)]
fn keep_live_set(blocks: usize, size: usize) -> Vec<Box<[u8]>> {
    let mut kept = Vec::with_capacity(blocks);
    for i in 0..blocks {
        kept.push(vec![i as u8; size].into_boxed_slice());
    }
    kept
}

/// Memory a library allocates on the program's behalf: each backtrace's frames.
#[inline(never)]
fn keep_backtraces(n: usize) -> Vec<backtrace::Backtrace> {
    (0..n)
        .map(|_| backtrace::Backtrace::new_unresolved())
        .collect()
}

#[inline(never)]
fn leak_more(into: &mut Vec<Box<[u8]>>, blocks: usize) {
    for i in 0..blocks {
        into.push(vec![i as u8; LEAK_BLOCK].into_boxed_slice());
    }
}

#[inline(never)]
fn churn(blocks: usize) -> u64 {
    let mut sum = 0u64;
    for i in 0..blocks {
        let block = std::hint::black_box(vec![i as u8; LEAK_BLOCK]);
        sum += u64::from(block[0]);
    }
    sum
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let option = |name: &str, default: usize| match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                eprintln!("usage: heap-leak [--interval BYTES] [--blocks N] [--block-size BYTES]");
                std::process::exit(2)
            }),
        None => default,
    };
    let interval = option("--interval", 64 * 1024) as u64;
    let (blocks, block_size) = (option("--blocks", 10_000), option("--block-size", 4096));
    eventpipe_profiler::alloc::register();
    eventpipe_profiler::alloc::track_heap(interval);
    eventpipe::diagnostics::start_server().expect("the diagnostics server starts");
    let mut out = std::io::stdout().lock();
    writeln!(out, "pid {}", std::process::id()).unwrap();
    let live = keep_live_set(blocks, block_size);
    let traces = keep_backtraces(200);
    // The leak's container is sized up front, so its growth is not a second site.
    let mut leaked: Vec<Box<[u8]>> = Vec::with_capacity(1 << 20);
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut words = line.split_whitespace();
        match (
            words.next(),
            words.next().and_then(|n| n.parse::<usize>().ok()),
        ) {
            (Some("leak"), Some(n)) => {
                leak_more(&mut leaked, n);
                writeln!(out, "leaked {}", leaked.len() * LEAK_BLOCK).unwrap();
            }
            (Some("churn"), Some(n)) => {
                writeln!(out, "churned {}", churn(n)).unwrap();
            }
            (Some("quit"), _) => break,
            _ => writeln!(out, "? {line}").unwrap(),
        }
        out.flush().unwrap();
    }
    std::hint::black_box((&live, &leaked, &traces));
}
