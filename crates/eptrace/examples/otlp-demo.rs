//! A program whose spans, events and counters are known, for the agent's OTLP tests:
//!
//! * `tracing` target `otlp_demo` (provider `otlp_demo`): `work N B` runs N requests, each
//!   a span `request` (fields `batch` = B, `id` = 0..N as i64, `route` = "/items",
//!   `ratio` = 0.5, `cached` = true) holding a span `load` (`bytes` = 1024 as u64) in
//!   which the event `loaded` is written at INFO (`rows` = 3, `mean` = 2.5, `ok` = true,
//!   `who` = "db", message "loaded rows"); then it answers `worked N`.
//! * provider `OtlpDemo` (counters): `fixed-gauge` (a gauge at 42.5, unit `MB`) and
//!   `fixed-total` (an observed counter that grows by 7 each time it is read).
//!
//! Stdout: `pid N`, then `ready`. It runs until killed.

use std::io::{BufRead, Write};

use eventpipe::{CounterInfo, Gauge, ObservedCounter, Provider};
use tracing_subscriber::prelude::*;

static DEMO: Provider = Provider::new("OtlpDemo");
static FIXED_GAUGE: Gauge = Gauge::new(&DEMO, CounterInfo::new("fixed-gauge").unit("MB"));
static TOTAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn grow_by_seven() -> u64 {
    TOTAL.fetch_add(7, std::sync::atomic::Ordering::Relaxed) + 7
}

static FIXED_TOTAL: ObservedCounter =
    ObservedCounter::new(&DEMO, CounterInfo::new("fixed-total"), grow_by_seven);

fn work(n: i64, batch: i64) {
    for id in 0..n {
        let request = tracing::info_span!(
            target: "otlp_demo",
            "request",
            batch,
            id,
            route = "/items",
            ratio = 0.5,
            cached = true
        );
        let _in_request = request.enter();
        let load = tracing::info_span!(target: "otlp_demo", "load", bytes = 1024u64);
        let _in_load = load.enter();
        tracing::info!(
            name: "loaded",
            target: "otlp_demo",
            batch,
            rows = 3i64,
            mean = 2.5,
            ok = true,
            who = "db",
            "loaded rows"
        );
    }
}

fn main() {
    tracing_subscriber::registry()
        .with(eventpipe_tracing::EventPipeLayer::new())
        .init();
    eventpipe::diagnostics::start_server().expect("the diagnostics server starts");
    FIXED_GAUGE.set(42.5);
    FIXED_TOTAL.register();

    let mut out = std::io::stdout().lock();
    writeln!(out, "pid {}", std::process::id()).unwrap();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["work", n, batch] = words[..] {
            let (Ok(n), Ok(batch)) = (n.parse::<i64>(), batch.parse::<i64>()) else {
                continue;
            };
            work(n, batch);
            writeln!(out, "worked {n}").unwrap();
            out.flush().unwrap();
        }
    }
    loop {
        std::thread::park();
    }
}
