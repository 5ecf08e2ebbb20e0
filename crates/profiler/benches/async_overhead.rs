//! The async profiler's cost on a tokio program whose futures do almost no work: the same
//! number of polls timed uninstrumented (plain futures, no session) and instrumented with a
//! session recording, interleaved round by round; at two poll rates, 100k and 1M resumes per
//! second (the uninstrumented rate, set by a calibrated spin between yields). Also reports
//! the bytes per record and per poll, and checks that no buffer was lost.
//!
//! `cargo bench -p eventpipe-profiler --bench async_overhead`
//! (`ASYNC_BENCH_SESSION_ONLY=1`: the session runs, the futures stay plain — the cost of the
//! session alone.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_profiler::futures::{self, FutureExt};
use nettrace::{TraceReader, Value};

const WORKERS: usize = 2;
const TASKS: u64 = 64;
const ROUNDS: usize = 15;

#[inline(never)]
fn spin(iterations: u64) {
    let mut x = 0u64;
    for i in 0..iterations {
        x = std::hint::black_box(x.rotate_left(3) ^ i);
    }
    std::hint::black_box(x);
}

/// Runs `TASKS` tasks of `polls_per_task` polls each (a spin, then a yield); returns the
/// wall time.
fn run(
    rt: &tokio::runtime::Runtime,
    instrumented: bool,
    polls_per_task: u64,
    work: u64,
) -> Duration {
    let polls = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    rt.block_on(async {
        let handles: Vec<_> = (0..TASKS)
            .map(|_| {
                let polls = Arc::clone(&polls);
                let body = async move {
                    for _ in 0..polls_per_task {
                        spin(work);
                        tokio::task::yield_now().await;
                    }
                    polls.fetch_add(polls_per_task, Ordering::Relaxed);
                };
                if instrumented {
                    tokio::spawn(body.profiled("bench task"))
                } else {
                    tokio::spawn(body)
                }
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
    });
    start.elapsed()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Record bytes and buffer-sequence gaps in a trace.
fn record_stats(path: &std::path::Path) -> (u64, u64) {
    let bytes = std::fs::read(path).expect("read the trace");
    let mut reader = TraceReader::from_slice(&bytes).expect("open the trace");
    let (mut record_bytes, mut gaps) = (0u64, 0u64);
    let mut next_sequence = std::collections::HashMap::new();
    while let Some(e) = reader.next_event().expect("read an event") {
        if e.metadata.provider != futures::PROVIDER_NAME || e.metadata.event_name != "AsyncBuffer" {
            continue;
        }
        let fields = e.decode_payload().expect("decode AsyncBuffer");
        let field = |name: &str| {
            fields
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        };
        let (Some(Value::U64(tid)), Some(Value::U32(seq))) =
            (field("OsThreadId"), field("Sequence"))
        else {
            panic!("AsyncBuffer without OsThreadId/Sequence");
        };
        match field("Records") {
            Some(Value::Bytes(b)) => record_bytes += b.len() as u64,
            Some(Value::Array(a)) => record_bytes += a.len() as u64,
            other => panic!("AsyncBuffer Records: {other:?}"),
        }
        let expected = next_sequence.insert(tid, seq + 1).unwrap_or(seq);
        gaps += u64::from(seq - expected.min(seq));
    }
    (record_bytes, gaps)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("async_overhead: bench");
        return;
    }
    futures::register();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .build()
        .expect("a tokio runtime");
    let path = std::env::temp_dir().join(format!("async-overhead-{}.nettrace", std::process::id()));
    run(&rt, false, 1000, 0); // warm-up
    for target in [100_000.0f64, 1_000_000.0] {
        // Calibrate the spin so the uninstrumented program polls at about `target` per
        // second: a second's worth of polls per run.
        let polls_per_task = (target / TASKS as f64).ceil() as u64;
        let mut work = 0u64;
        let rate_at = |work: u64| {
            let t = run(&rt, false, polls_per_task / 4, work);
            (TASKS * (polls_per_task / 4)) as f64 / t.as_secs_f64()
        };
        let mut rate = rate_at(work);
        if rate > target {
            let (mut lo, mut hi) = (0u64, 1u64);
            while rate_at(hi) > target {
                lo = hi;
                hi *= 2;
            }
            for _ in 0..12 {
                let mid = (lo + hi) / 2;
                if rate_at(mid) > target {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            work = hi;
            rate = rate_at(work);
        }
        let (mut plain, mut profiled, mut idle) = (Vec::new(), Vec::new(), Vec::new());
        let (mut record_bytes, mut gaps, mut dropped) = (0u64, 0u64, 0u64);
        for round in 0..ROUNDS {
            // Alternate which goes first, so drift within a round favours neither.
            if round % 2 == 0 {
                plain.push(run(&rt, false, polls_per_task, work).as_secs_f64());
                idle.push(run(&rt, true, polls_per_task, work).as_secs_f64());
            }
            let session = Session::start(SessionConfig::new(
                vec![ProviderConfig::parse("EventPipeRs-AsyncProfiler:0:5").unwrap()],
                Output::File(path.clone()),
            ))
            .expect("start a session");
            let instrument = std::env::var_os("ASYNC_BENCH_SESSION_ONLY").is_none();
            profiled.push(run(&rt, instrument, polls_per_task, work).as_secs_f64());
            dropped += session.stop().expect("stop the session").events_dropped;
            let (b, g) = record_stats(&path);
            record_bytes += b;
            gaps += g;
            if round % 2 == 1 {
                idle.push(run(&rt, true, polls_per_task, work).as_secs_f64());
                plain.push(run(&rt, false, polls_per_task, work).as_secs_f64());
            }
        }
        std::fs::remove_file(&path).ok();
        let (p, s, i) = (median(&mut plain), median(&mut profiled), median(&mut idle));
        let polls = (TASKS * polls_per_task) as f64;
        // Each poll is three records: its resume, its suspend (or complete), and the wake
        // that the yield after it makes.
        let per_poll = record_bytes as f64 / (ROUNDS as f64 * polls);
        let per_record = per_poll / 3.0;
        println!(
            "async_overhead at {:.0}k resumes/s uninstrumented (spin {work}, measured {:.0}k/s): \
             {TASKS} tasks x {polls_per_task} polls on {WORKERS} workers, {ROUNDS} rounds: median \
             uninstrumented {:.1} ms, instrumented without a session {:.1} ms ({:+.2}%), profiled {:.1} ms: \
             throughput loss {:+.2}%; \
             {per_record:.2} bytes per record, {per_poll:.2} per poll (resume, suspend, wake); \
             {dropped} events dropped, {gaps} buffers missing",
            target / 1e3,
            rate / 1e3,
            p * 1e3,
            i * 1e3,
            (1.0 - p / i) * 100.0,
            s * 1e3,
            (1.0 - p / s) * 100.0
        );
    }
}
