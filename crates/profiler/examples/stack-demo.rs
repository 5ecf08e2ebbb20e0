//! A program whose threads are each parked in a known function, for `eptrace stack`:
//! `mutex-holder` holds a mutex and sleeps in `hold_mutex`; `mutex-waiter` waits for it in
//! `wait_on_mutex`; `chan-waiter` waits on a channel nobody sends to in `wait_on_channel`;
//! `sleeper` sleeps in `sleep_long`; `spinner` keeps a core busy in `spin_forever`. On
//! `async-worker`, a tokio runtime holds three tasks suspended in `wait_for_payment`,
//! awaited by `handle_order` (both `#[profiled]`), and one in `idle_task`.
//!
//! Stdout: `pid N`, then `ready` once every thread is in place. It runs until killed.

use std::io::Write;
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::time::Duration;

use eventpipe_profiler::futures::profiled;

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

#[profiled]
async fn wait_for_payment(paid: tokio::sync::oneshot::Receiver<u64>) -> u64 {
    paid.await.unwrap_or(0)
}

#[profiled]
async fn handle_order(paid: tokio::sync::oneshot::Receiver<u64>) -> u64 {
    wait_for_payment(paid).await + 1
}

#[profiled]
async fn idle_task() {
    std::future::pending::<()>().await;
}

/// A runtime on this thread with its tasks suspended; the senders that never send are
/// handed back, to be kept.
fn run_tasks(senders: mpsc::Sender<Vec<tokio::sync::oneshot::Sender<u64>>>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let mut kept = Vec::new();
    for _ in 0..3 {
        let (tx, rx) = tokio::sync::oneshot::channel();
        kept.push(tx);
        runtime.spawn(handle_order(rx));
    }
    runtime.spawn(idle_task());
    senders.send(kept).expect("main keeps the senders");
    runtime.block_on(std::future::pending::<()>());
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(f)
        .expect("a thread starts");
}

fn main() {
    eventpipe_profiler::cpu::register().expect("the CPU sampler registers");
    eventpipe_profiler::futures::register();
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
    let (senders, kept) = mpsc::channel();
    spawn("async-worker", move || run_tasks(senders));
    let _unsent = kept.recv().expect("the tasks are spawned");
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
