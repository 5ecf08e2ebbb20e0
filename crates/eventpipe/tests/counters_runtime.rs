//! Publication costs nothing while no session asks for it (no `ep-counters` thread, no
//! events), starts with the first session that asks and stops with the last; the built-in
//! `EventPipeRs-Runtime` counters track the process. One test: the checks on the thread
//! need no other session in the process.

#[path = "common/counters.rs"]
mod counters_common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use counters_common::{thread_names, total_increment, Collector};
use eventpipe::counters::publish::publisher_running;
use eventpipe::{Counter, CounterInfo, Provider};

static IDLE: Provider = Provider::new("Test-Counters-Idle");
static IDLE_COUNTER: Counter = Counter::new(&IDLE, CounterInfo::new("idle-count"));

fn publisher_thread_alive() -> bool {
    thread_names().iter().any(|n| n == "ep-counters")
}

fn wait_until(limit: Duration, done: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[test]
fn publication_runs_only_while_asked_and_the_runtime_counters_track_the_process() {
    IDLE_COUNTER.add(5);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !publisher_running() && !publisher_thread_alive(),
        "no session: no thread"
    );

    // A session that records the provider without asking for counters: no publication.
    let plain = Collector::start(&["Test-Counters-Idle"]);
    IDLE_COUNTER.add(5);
    std::thread::sleep(Duration::from_millis(400));
    assert!(!publisher_thread_alive());
    assert!(
        plain.stop().is_empty(),
        "no EventCounters without an interval"
    );

    // A bad interval is ignored, as if absent.
    let bad = Collector::start(&["Test-Counters-Idle:0:5:EventCounterIntervalSec=-3"]);
    std::thread::sleep(Duration::from_millis(200));
    assert!(!publisher_thread_alive());
    assert!(bad.stop().is_empty());

    // Asked: the thread runs, and the first interval counts only what came after.
    let asked = Collector::start(&["Test-Counters-Idle:0:5:EventCounterIntervalSec=0.1"]);
    assert!(publisher_running());
    assert!(wait_until(Duration::from_secs(2), publisher_thread_alive));
    std::thread::sleep(Duration::from_millis(50));
    IDLE_COUNTER.add(7);
    let events = asked.wait_for("idle-count", Duration::from_secs(5), |e| e.len() >= 3);
    assert_eq!(
        total_increment(&events),
        7.0,
        "before the session: not counted"
    );
    asked.stop();
    assert!(
        wait_until(Duration::from_secs(3), || !publisher_thread_alive()),
        "the last session stopped: the thread exits"
    );
    assert!(!publisher_running());

    runtime_counters_track_threads_and_cpu();
}

fn runtime_counters_track_threads_and_cpu() {
    eventpipe::counters::runtime::register();
    let cpu_before = process_cpu_seconds();
    let c = Collector::start(&["EventPipeRs-Runtime:0:5:EventCounterIntervalSec=0.2"]);
    // Twelve parked threads and one busy one, for a second.
    let (release, parked) = mpsc::channel::<()>();
    let parked = std::sync::Arc::new(std::sync::Mutex::new(parked));
    let sleepers: Vec<_> = (0..12)
        .map(|_| {
            let parked = std::sync::Arc::clone(&parked);
            std::thread::spawn(move || {
                let _ = parked.lock().unwrap().recv();
            })
        })
        .collect();
    let busy = std::thread::spawn(|| {
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(1200) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        x
    });
    std::thread::sleep(Duration::from_millis(300));
    let threads_now = std::fs::read_dir("/proc/self/task").unwrap().count() as f64;
    std::thread::sleep(Duration::from_millis(700));
    let during = c.of("thread-count");
    busy.join().unwrap();
    drop(release);
    for s in sleepers {
        s.join().unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    let events = c.stop();
    let cpu_used = process_cpu_seconds() - cpu_before;
    let of = |name: &str| -> Vec<_> {
        events
            .iter()
            .filter(|p| p.name() == name)
            .cloned()
            .collect()
    };

    // While the threads lived, the published count was the process's (±2: the session's
    // own threads come and go).
    let counted: Vec<f64> = during.iter().skip(1).map(|p| p.f64("Mean")).collect();
    assert!(!counted.is_empty());
    assert!(
        counted.iter().any(|&n| (n - threads_now).abs() <= 2.0),
        "thread-count {counted:?}, /proc says {threads_now}"
    );
    let after = of("thread-count").last().unwrap().f64("Mean");
    assert!(
        after <= threads_now - 12.0,
        "after the joins: {after} of {threads_now}"
    );

    // One thread spinning for 1.2 s: the intervals' CPU, added up, is the CPU time the
    // kernel charged the process over the session (getrusage), however much of a core the
    // machine's other work left it.
    let cores = std::thread::available_parallelism().unwrap().get() as f64;
    let cpu = of("cpu-usage");
    let counted: f64 = cpu
        .iter()
        .map(|p| p.f64("Mean") / 100.0 * cores * p.f64("IntervalSec"))
        .sum();
    let percents: Vec<f64> = cpu.iter().map(|p| p.f64("Mean")).collect();
    assert!(cpu_used > 0.2, "the spinning thread ran: {cpu_used} s");
    assert!(
        (counted - cpu_used).abs() <= 0.25 * cpu_used + 0.1,
        "cpu-usage {percents:?} on {cores} cores adds up to {counted:.3} s; getrusage says {cpu_used:.3} s"
    );
    assert!(percents.iter().all(|&p| (0.0..=100.0).contains(&p)));
    assert_eq!(of("cpu-usage")[0].str("DisplayUnits"), "%");

    let working_set = of("working-set").last().unwrap().f64("Mean");
    assert!(
        working_set > 1.0 && working_set < 10_000.0,
        "{working_set} MB"
    );
    let fds = of("open-fds").last().unwrap().f64("Mean");
    assert!(fds >= 3.0, "{fds} fds");
    assert!(of("session-count").iter().all(|p| p.f64("Mean") >= 1.0));
    assert!(total_increment(&of("session-events-written")) > 0.0);
}

/// User + system CPU time of the whole process so far, from the kernel's own account.
fn process_cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is writable memory for one `rusage`, which getrusage fills.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage");
    // SAFETY: getrusage succeeded, so it initialised the struct (zeroed before, too).
    let usage = unsafe { usage.assume_init() };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}
