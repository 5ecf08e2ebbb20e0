//! A program whose threads are each parked in a known function, for `eptrace stack`:
//! `mutex-holder` holds a mutex and sleeps in `hold_mutex`; `mutex-waiter` waits for it in
//! `wait_on_mutex`; `chan-waiter` waits on a channel nobody sends to in `wait_on_channel`;
//! `sleeper` sleeps in `sleep_long`; `spinner` keeps a core busy in `spin_forever`.
//!
//! Stdout: `pid N`, then `ready` once every thread is in place. It runs until killed.

use std::io::Write;
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::time::Duration;

const FOREVER: Duration = Duration::from_secs(3600);

#[inline(never)]
fn hold_mutex(lock: &Mutex<u64>, held: &Barrier) {
    let guard = lock.lock().unwrap();
    held.wait();
    std::thread::sleep(FOREVER);
    drop(guard);
}

#[inline(never)]
fn wait_on_mutex(lock: &Mutex<u64>) -> u64 {
    *lock.lock().unwrap()
}

#[inline(never)]
fn wait_on_channel(rx: &mpsc::Receiver<u64>) -> Option<u64> {
    rx.recv().ok()
}

#[inline(never)]
fn sleep_long() -> u64 {
    std::thread::sleep(FOREVER);
    // Not a tail call: this function's frame stays under the sleep's.
    std::hint::black_box(1)
}

#[inline(never)]
fn spin_forever() -> u64 {
    let mut x = 1u64;
    loop {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        std::hint::black_box(x);
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(f)
        .expect("a thread starts");
}

fn main() {
    eventpipe_profiler::cpu::register().expect("the CPU sampler registers");
    eventpipe::diagnostics::start_server().expect("the diagnostics server starts");
    let lock = Arc::new(Mutex::new(7u64));
    let held = Arc::new(Barrier::new(2));
    {
        let (lock, held) = (Arc::clone(&lock), Arc::clone(&held));
        spawn("mutex-holder", move || hold_mutex(&lock, &held));
    }
    held.wait();
    spawn("mutex-waiter", move || {
        std::hint::black_box(wait_on_mutex(&lock));
    });
    let (tx, rx) = mpsc::channel::<u64>();
    spawn("chan-waiter", move || {
        std::hint::black_box(wait_on_channel(&rx));
    });
    spawn("sleeper", || {
        sleep_long();
    });
    spawn("spinner", || {
        spin_forever();
    });
    // Long enough for every thread to reach its place.
    std::thread::sleep(Duration::from_millis(200));
    let mut out = std::io::stdout().lock();
    writeln!(out, "pid {}", std::process::id()).unwrap();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    drop(out);
    std::thread::sleep(FOREVER);
    drop(tx);
}
