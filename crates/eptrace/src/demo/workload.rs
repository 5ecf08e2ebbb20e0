//! The demo's traced program: a small multi-threaded service that uses `tracing` the way
//! real programs do, made attachable by one line (the eventpipe layer).
//!
//! What it does, so the trace has something to show:
//! * two `cruncher` threads burn CPU in two hot paths, about 3:1 (`checksum_block`, three
//!   times as much as `sort_block`), each inside spans; a checksum unit is sized at start
//!   to cost what a sort unit costs in this build, so the split holds in an unoptimised
//!   build too, where std's sort is relatively slower;
//! * an `allocator` thread allocates in bursts and frees them;
//! * a `spawner` thread starts a short-lived thread every 20 ms that does a little work and
//!   exits (thread churn, for the runtime's per-thread state reclamation);
//! * an `async-worker` thread runs a small executor over four client futures instrumented
//!   for the async profiler (`#[profiled]`): each request parses, waits on a "backend"
//!   (pending for a few polls, like I/O) and renders, so the async profiler sees nested
//!   futures, suspensions and CPU samples inside them.
//!
//! The CPU sampler (`eventpipe_profiler::cpu`) is registered, so a session naming
//! `EventPipeRs-CpuSampler` profiles it. Hot loops also write a TRACE event per unit of
//! work, so in a trace of events with stacks the hot paths carry weight in proportion to
//! the work they do.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::future::Future;
use std::pin::Pin;
use std::task::{Poll, Waker};

use anyhow::{Context, Result};
use eventpipe_profiler::futures::profiled;
use tracing::{info, info_span, trace};
use tracing_subscriber::prelude::*;

/// Runs the workload for `seconds` (forever when 0).
pub(crate) fn run(seconds: f64) -> Result<()> {
    tracing_subscriber::registry()
        .with(eventpipe_tracing::EventPipeLayer::new())
        .try_init()
        .context("installing the tracing subscriber")?;
    eventpipe_profiler::cpu::register().context("installing the CPU sampler")?;
    eventpipe_profiler::futures::register();
    // Waits here for `eptrace collect -- ...` to resume us, so no early event is lost.
    eventpipe::diagnostics::start_server().context("starting the diagnostics server")?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for id in 0..2u32 {
        let stop = Arc::clone(&stop);
        threads.push(spawn(format!("cruncher-{id}"), move || {
            cruncher(id, &stop)
        })?);
    }
    {
        let stop = Arc::clone(&stop);
        threads.push(spawn("allocator".into(), move || allocator(&stop))?);
    }
    {
        let stop = Arc::clone(&stop);
        threads.push(spawn("spawner".into(), move || spawner(&stop))?);
    }
    {
        let stop = Arc::clone(&stop);
        threads.push(spawn("async-worker".into(), move || async_worker(&stop))?);
    }
    info!(threads = threads.len() as u64, "demo workload started");
    let deadline = (seconds > 0.0).then(|| Instant::now() + Duration::from_secs_f64(seconds));
    while deadline.is_none_or(|d| Instant::now() < d) {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    info!("demo workload finished");
    Ok(())
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(f)
        .with_context(|| format!("spawning {name}"))
}

fn cruncher(id: u32, stop: &AtomicBool) {
    let mut data: Vec<u64> = (0..4096u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    let passes = passes_per_sort_unit(&mut data);
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let _request = info_span!("request", worker = id, round).entered();
        let sum = checksum_block(&data, 3, passes);
        sort_block(&mut data, 1);
        info!(sum, round, "request done");
        round += 1;
    }
}

/// How many hashing passes over `data` cost what one sort unit costs, in this build on
/// this machine: the fastest of a few timings of each, so a busy moment does not skew it.
fn passes_per_sort_unit(data: &mut [u64]) -> u32 {
    let fastest = |f: &mut dyn FnMut()| {
        (0..5)
            .map(|_| {
                let began = Instant::now();
                f();
                began.elapsed()
            })
            .min()
            .unwrap_or_default()
    };
    let pass = fastest(&mut || {
        std::hint::black_box(hash_pass(0, data));
    });
    let sort = fastest(&mut || sort_unit(data));
    let ratio = sort.as_secs_f64() / pass.as_secs_f64().max(1e-9);
    ratio.round().clamp(1.0, 10_000.0) as u32
}

/// The hotter path: `units` units of hashing work, each `passes` passes over the data.
#[inline(never)]
fn checksum_block(data: &[u64], units: u32, passes: u32) -> u64 {
    let _span = info_span!("checksum", units).entered();
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for unit in 0..units {
        for _ in 0..passes {
            h = hash_pass(h, data);
        }
        trace!(unit, "checksum unit");
    }
    std::hint::black_box(h)
}

#[inline(always)]
fn hash_pass(mut h: u64, data: &[u64]) -> u64 {
    for &v in data {
        h = (h ^ v).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The cooler path: `units` units of shuffling and sorting, each costing about one
/// checksum unit.
#[inline(never)]
fn sort_block(data: &mut [u64], units: u32) {
    let _span = info_span!("sort", units).entered();
    for unit in 0..units {
        sort_unit(data);
        trace!(unit, "sort unit");
    }
}

#[inline(always)]
fn sort_unit(data: &mut [u64]) {
    for _ in 0..3 {
        for (i, v) in data.iter_mut().enumerate() {
            *v = v.rotate_left(7) ^ i as u64;
        }
        data.sort_unstable();
    }
}

fn allocator(stop: &AtomicBool) {
    let mut burst = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let _span = info_span!("allocation_burst", burst).entered();
        let strings: Vec<String> = (0..20_000).map(|i| format!("item-{burst}-{i}")).collect();
        let bytes: usize = strings.iter().map(String::capacity).sum();
        info!(
            count = strings.len() as u64,
            bytes = bytes as u64,
            "burst allocated"
        );
        drop(strings);
        burst += 1;
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn spawner(stop: &AtomicBool) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let child = std::thread::Builder::new()
            .name(format!("short-lived-{n}"))
            .spawn(move || {
                let _span = info_span!("short_task", n).entered();
                let v: Vec<u64> = (0..50_000).map(|i| i * n).collect();
                info!(sum = v.iter().sum::<u64>(), "short task done");
            });
        if let Ok(child) = child {
            let _ = child.join();
        }
        n += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A round-robin executor over the clients' futures: polls each in turn, and naps between
/// rounds so the thread is busy only part of the time.
fn async_worker(stop: &Arc<AtomicBool>) {
    let mut clients: Vec<Pin<Box<dyn Future<Output = ()> + Send>>> = (0..4)
        .map(|client| Box::pin(serve(client, Arc::clone(stop))) as Pin<Box<_>>)
        .collect();
    let mut cx = std::task::Context::from_waker(Waker::noop());
    while !clients.is_empty() {
        clients.retain_mut(|f| f.as_mut().poll(&mut cx).is_pending());
        std::thread::sleep(Duration::from_micros(300));
    }
}

#[profiled]
async fn serve(client: u32, stop: Arc<AtomicBool>) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let reply = handle_request(client, n).await;
        std::hint::black_box(reply);
        n += 1;
    }
}

#[profiled]
async fn handle_request(client: u32, n: u64) -> u64 {
    let parsed = parse(u64::from(client) ^ n).await;
    Backend { polls_left: 3 }.await;
    render(parsed).await
}

#[profiled]
async fn parse(seed: u64) -> u64 {
    spin(seed, 40_000)
}

#[profiled]
async fn render(seed: u64) -> u64 {
    spin(seed, 80_000)
}

#[inline(never)]
fn spin(seed: u64, rounds: u64) -> u64 {
    let mut h = seed;
    for i in 0..rounds {
        h = std::hint::black_box(h.rotate_left(9) ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    h
}

/// A reply that takes a few polls to arrive, as a network call would.
struct Backend {
    polls_left: u32,
}

impl Future for Backend {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut std::task::Context<'_>) -> Poll<()> {
        if self.polls_left == 0 {
            Poll::Ready(())
        } else {
            self.polls_left -= 1;
            Poll::Pending
        }
    }
}
