//! Per-thread session state is reclaimed once its thread has exited and its buffers are
//! drained: 100,000 short-lived threads leave the session's thread states, buffers and the
//! process RSS flat. (A test binary of its own, so RSS is not shared with other tests.)

use std::time::{Duration, Instant};

use eventpipe::{
    define_event, write_event, Level, Output, Provider, ProviderConfig, Session, SessionConfig,
};

static CHURN: Provider = Provider::new("Test-Churn");
define_event! { static HELLO = CHURN { id: 1, name: "Hello", level: Level::Informational, keywords: 0 } (thread: u64, n: u32); }

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[test]
fn a_hundred_thousand_exited_threads_leave_nothing_behind() {
    const THREADS: u64 = 100_000;
    const BATCH: u64 = 500;
    const EVENTS: u32 = 3;
    let path =
        std::env::temp_dir().join(format!("eventpipe-churn-{}.nettrace", std::process::id()));
    let session = Session::start(
        SessionConfig::new(
            vec![ProviderConfig::new("Test-Churn")],
            Output::File(path.clone()),
        )
        .buffer_budget(16 << 20)
        .flush_interval(Duration::from_millis(20)),
    )
    .unwrap();
    let mut rss_after_warmup = 0;
    let mut peak_states = 0;
    for batch in 0..THREADS / BATCH {
        let handles: Vec<_> = (0..BATCH)
            .map(|i| {
                std::thread::spawn(move || {
                    for n in 0..EVENTS {
                        write_event!(HELLO, batch * BATCH + i, n);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        peak_states = peak_states.max(session.stats().live_thread_states);
        if batch == 10 {
            rss_after_warmup = rss_bytes();
        }
    }
    session.flush();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = session.stats();
        if s.live_thread_states == 0 && s.live_buffers == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "states never reclaimed: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let growth = rss_bytes().saturating_sub(rss_after_warmup);
    let stats = session.stop().unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(stats.threads_reclaimed, THREADS, "{stats:?}");
    assert_eq!(
        stats.events_written + stats.events_dropped,
        THREADS * u64::from(EVENTS)
    );
    // Reclaiming keeps up with churn: states never pile up far beyond one batch or two.
    assert!(
        peak_states <= 4 * BATCH as usize,
        "peak of {peak_states} live thread states"
    );
    assert!(
        growth < 64 << 20,
        "RSS grew by {} MiB over the churn",
        growth >> 20
    );
}
