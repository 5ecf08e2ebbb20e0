//! The cost of `tracing::info!(target: "bench::layer", n, ok = true, "request done")`:
//!
//! * `info/baseline_no_layer`: a `tracing_subscriber::registry()` without the layer;
//! * `info/layer_no_session`: with the layer, no session: the layer adds one relaxed load;
//! * `info/layer_other_target_session`: with the layer and a session recording another
//!   target: the layer's flag is up, so it also checks this target's provider;
//! * `info/layer_session_recording`: a session (Drop mode, 1 GiB budget, `io::sink()`)
//!   records the event: fields visited twice, the message formatted into the payload,
//!   eventpipe's write. Between samples the bench waits (untimed) for the drain to empty the
//!   buffers, so no sample runs out of budget; the session's drops are printed and should
//!   be 0.
//!
//! Run: `cargo bench -p eventpipe-tracing --bench layer`.

use std::time::{Duration, Instant};

use criterion::Criterion;
use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use tracing::Dispatch;
use tracing_subscriber::prelude::*;

fn emit(n: u64) {
    tracing::info!(target: "bench::layer", n, ok = true, "request done");
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("info");
    let baseline = Dispatch::new(tracing_subscriber::registry());
    tracing::dispatcher::with_default(&baseline, || {
        group.bench_function("baseline_no_layer", |b| {
            let mut n = 0u64;
            b.iter(|| {
                n += 1;
                emit(n)
            })
        });
    });

    let layered = Dispatch::new(
        tracing_subscriber::registry().with(eventpipe_tracing::EventPipeLayer::new()),
    );
    tracing::dispatcher::with_default(&layered, || {
        group.bench_function("layer_no_session", |b| {
            let mut n = 0u64;
            b.iter(|| {
                n += 1;
                emit(n)
            })
        });

        // A session that records another provider: the layer's flag is up, this target's
        // provider is off.
        let other = Session::start(
            SessionConfig::new(
                vec![ProviderConfig::new("bench-other")],
                Output::Stream(Box::new(std::io::sink())),
            )
            .rundown(false),
        )
        .unwrap();
        tracing::info!(target: "bench::other", "declare the provider");
        group.bench_function("layer_other_target_session", |b| {
            let mut n = 0u64;
            b.iter(|| {
                n += 1;
                emit(n)
            })
        });
        other.stop().unwrap();

        let session = Session::start(
            SessionConfig::new(
                vec![ProviderConfig::new("bench-layer")],
                Output::Stream(Box::new(std::io::sink())),
            )
            .buffer_budget(1 << 30)
            .rundown(false),
        )
        .unwrap();
        group.bench_function("layer_session_recording", |b| {
            let mut n = 0u64;
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    n += 1;
                    emit(n);
                }
                let elapsed = start.elapsed();
                // Untimed: let the drain empty the buffers, so no sample runs out of budget.
                session.flush();
                while session.stats().buffer_bytes > 4 << 20 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                elapsed
            })
        });
        let stats = session.stop().unwrap();
        eprintln!(
            "session: {} events written, {} dropped",
            stats.events_written, stats.events_dropped
        );
    });
    group.finish();
}

fn main() {
    // What `criterion_group!`/`criterion_main!` expand to, minus their undocumented `pub fn`.
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench(&mut c);
    c.final_summary();
}
