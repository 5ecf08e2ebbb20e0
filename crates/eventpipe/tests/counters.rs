//! Counters end to end: values updated from several threads come back, read by the
//! nettrace reader from `EventCounters` events, exactly as they were added (histogram
//! percentiles within the documented error), in the payload shape .NET writes.

#[path = "common/counters.rs"]
mod counters_common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use counters_common::{total_increment, Collector, Published};
use eventpipe::counters::histogram::RELATIVE_ERROR;
use eventpipe::{Counter, CounterInfo, FloatCounter, Gauge, Histogram, Provider, UpDownCounter};

/// The metadata of .NET 8's `System.Runtime` EventCounters events, as the nettrace reader
/// describes it (read from a trace collected with `EventCounterIntervalSec=1`).
const DOTNET_MEAN_SHAPE: &str = ":{Payload:{Name:Utf16String,DisplayName:Utf16String,Mean:Double,StandardDeviation:Double,Count:Int32,Min:Double,Max:Double,IntervalSec:Single,Series:Utf16String,CounterType:Utf16String,Metadata:Utf16String,DisplayUnits:Utf16String}}";
const DOTNET_SUM_SHAPE: &str = ":{Payload:{Name:Utf16String,DisplayName:Utf16String,DisplayRateTimeScale:Utf16String,Increment:Double,IntervalSec:Single,Metadata:Utf16String,Series:Utf16String,CounterType:Utf16String,DisplayUnits:Utf16String}}";

static EXACT: Provider = Provider::new("Test-Counters-Exact");
static REQUESTS: Counter = Counter::new(
    &EXACT,
    CounterInfo::new("requests")
        .display_name("Requests")
        .description("served"),
);
static BYTES: FloatCounter = FloatCounter::new(
    &EXACT,
    CounterInfo::new("bytes-sent")
        .display_name("Bytes Sent")
        .unit("B"),
);
static IN_FLIGHT: UpDownCounter = UpDownCounter::new(
    &EXACT,
    CounterInfo::new("in-flight").display_name("In Flight"),
);
static TEMPERATURE: Gauge = Gauge::new(
    &EXACT,
    CounterInfo::new("temperature")
        .display_name("Temperature")
        .unit("C"),
);
fn seven() -> f64 {
    7.0
}
static OBSERVED: Gauge = Gauge::observed(&EXACT, CounterInfo::new("observed"), seven);
static LATENCY: Histogram = Histogram::new(
    &EXACT,
    CounterInfo::new("latency")
        .display_name("Latency")
        .unit("ms")
        .metadata("route=/a"),
);

const THREADS: u64 = 4;
const PER_THREAD: u64 = 1000;

#[test]
fn values_from_several_threads_are_published_exactly_in_the_dotnet_shape() {
    OBSERVED.register();
    let c = Collector::start(&["Test-Counters-Exact:0:5:EventCounterIntervalSec=0.2"]);
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                for i in 1..=PER_THREAD {
                    REQUESTS.add(i);
                    BYTES.add(0.5);
                    IN_FLIGHT.add(3);
                    IN_FLIGHT.add(-1);
                    LATENCY.record(i as f64);
                }
                BYTES.add(-5.0); // ignored: a monotonic counter only grows
                BYTES.add(f64::NAN);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    TEMPERATURE.set(42.5);

    let expected_requests = (THREADS * PER_THREAD * (PER_THREAD + 1) / 2) as f64;
    let limit = Duration::from_secs(10);
    c.wait_for("requests", limit, |e| {
        total_increment(e) >= expected_requests
    });
    c.wait_for("temperature", limit, |e| {
        e.iter().any(|p| p.f64("Mean") == 42.5)
    });
    c.wait_for("latency", limit, |e| {
        e.iter().map(|p| p.f64("Count")).sum::<f64>() >= (THREADS * PER_THREAD) as f64
    });
    // One more interval, so each counter has published after the last update.
    std::thread::sleep(Duration::from_millis(450));
    let events = c.stop();
    let of = |name: &str| -> Vec<Published> {
        events
            .iter()
            .filter(|p| p.name() == name)
            .cloned()
            .collect()
    };

    for p in &events {
        assert_eq!(p.provider, "Test-Counters-Exact");
        assert_eq!((p.level, p.keywords), (0, 0), "LogAlways, no keywords");
        assert_eq!(p.str("Series"), "Interval=200");
        let interval = p.f64("IntervalSec");
        assert!(interval > 0.1 && interval < 1.0, "IntervalSec {interval}");
        match p.str("CounterType") {
            "Sum" => {
                assert_eq!(p.shape, DOTNET_SUM_SHAPE);
                assert_eq!(p.str("DisplayRateTimeScale"), "00:00:01");
            }
            "Mean" => assert_eq!(p.shape, DOTNET_MEAN_SHAPE),
            other => panic!("CounterType {other}"),
        }
    }

    let requests = of("requests");
    assert_eq!(total_increment(&requests), expected_requests);
    assert!(requests.iter().all(|p| p.str("DisplayName") == "Requests"));
    assert!(
        requests.len() >= 3,
        "published every interval, zero increments too"
    );
    let bytes = of("bytes-sent");
    assert_eq!(total_increment(&bytes), 0.5 * (THREADS * PER_THREAD) as f64);
    assert_eq!(bytes[0].str("DisplayUnits"), "B");

    let in_flight = of("in-flight");
    let last = in_flight.last().unwrap();
    assert_eq!(last.f64("Mean"), (2 * THREADS * PER_THREAD) as f64);
    assert_eq!(
        (last.f64("Count"), last.f64("StandardDeviation")),
        (1.0, 0.0)
    );
    assert_eq!(
        (last.f64("Min"), last.f64("Max")),
        (last.f64("Mean"), last.f64("Mean"))
    );

    assert_eq!(of("temperature").last().unwrap().f64("Mean"), 42.5);
    assert_eq!(of("temperature")[0].str("DisplayUnits"), "C");
    assert!(of("observed").iter().all(|p| p.f64("Mean") == 7.0));
    assert!(!of("observed").is_empty());

    // The histogram: exact count, min, max and mean over the intervals that hold values.
    let latency: Vec<_> = of("latency")
        .into_iter()
        .filter(|p| p.f64("Count") > 0.0)
        .collect();
    let count: f64 = latency.iter().map(|p| p.f64("Count")).sum();
    assert_eq!(count, (THREADS * PER_THREAD) as f64);
    let sum: f64 = latency.iter().map(|p| p.f64("Mean") * p.f64("Count")).sum();
    assert!(
        (sum - expected_requests).abs() < 1e-6 * expected_requests,
        "{sum}"
    );
    let min = latency
        .iter()
        .map(|p| p.f64("Min"))
        .fold(f64::INFINITY, f64::min);
    let max = latency.iter().map(|p| p.f64("Max")).fold(0.0, f64::max);
    assert_eq!((min, max), (1.0, PER_THREAD as f64));
    for p in of("latency").iter().filter(|p| p.f64("Count") == 0.0) {
        assert_eq!(
            p.str("Metadata"),
            "route=/a",
            "no percentiles without values"
        );
    }
    if let [all] = &latency[..] {
        // Every value in one interval (the usual case): the uniform 1..=1000, four times.
        let sd = all.f64("StandardDeviation");
        assert!((sd - 288.6749).abs() < 1e-3, "StandardDeviation {sd}");
        let metadata = all.str("Metadata");
        let percentiles = metadata
            .strip_prefix("route=/a,Percentiles=")
            .unwrap_or_else(|| panic!("Metadata {metadata}"));
        let expected = [("p50", 500.0), ("p95", 950.0), ("p99", 990.0)];
        let parts: Vec<(&str, f64)> = percentiles
            .split(';')
            .map(|kv| {
                let (k, v) = kv.split_once(':').unwrap();
                (k, v.parse().unwrap())
            })
            .collect();
        assert_eq!(parts.len(), 3, "{metadata}");
        for ((k, v), (ek, ev)) in parts.into_iter().zip(expected) {
            assert_eq!(k, ek);
            assert!(
                (v - ev).abs() / ev <= RELATIVE_ERROR,
                "{k} = {v}, exact {ev}"
            );
        }
    } else {
        eprintln!("note: the histogram's values straddled a publication; percentiles not checked");
    }
}

static STRESS: Provider = Provider::new("Test-Counters-Stress");
static HAMMERED: Counter = Counter::new(&STRESS, CounterInfo::new("hammered"));
static HAMMERED_HISTOGRAM: Histogram =
    Histogram::new(&STRESS, CounterInfo::new("hammered-histogram"));

/// Publications every 10 ms read the cells while four threads add to them (more threads
/// than cores, so writers are preempted between their load and their store): the
/// increments published add up to exactly what was added, and so do the histogram's counts.
#[test]
fn no_increment_is_lost_or_counted_twice_across_many_publications() {
    HAMMERED.register();
    HAMMERED_HISTOGRAM.register();
    let c = Collector::start(&["Test-Counters-Stress:0:5:EventCounterIntervalSec=0.01"]);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut added = 0u64;
                let mut recorded = 0u64;
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    i += 1;
                    let n = (i * (t + 1)) % 7;
                    HAMMERED.add(n);
                    added += n;
                    if i % 16 == 0 {
                        HAMMERED_HISTOGRAM.record(n as f64 + 0.5);
                        recorded += 1;
                    }
                }
                (added, recorded)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (added, recorded) = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .fold((0, 0), |(a, r), (x, y)| (a + x, r + y));
    let published = c.wait_for("hammered", Duration::from_secs(10), |e| {
        total_increment(e) >= added as f64
    });
    let histogram = c.wait_for("hammered-histogram", Duration::from_secs(10), |e| {
        e.iter().map(|p| p.f64("Count")).sum::<f64>() >= recorded as f64
    });
    std::thread::sleep(Duration::from_millis(100));
    let published_total = total_increment(&c.of("hammered"));
    let histogram_total: f64 = c
        .of("hammered-histogram")
        .iter()
        .map(|p| p.f64("Count"))
        .sum();
    let _ = c.stop();
    eprintln!(
        "{} publications, {added} added; {} histogram publications, {recorded} recorded",
        published.len(),
        histogram.len()
    );
    assert!(published.len() >= 50, "{} publications", published.len());
    assert!(added > 1_000_000, "only {added} added");
    assert_eq!(published_total, added as f64);
    assert_eq!(histogram_total, recorded as f64);
}

static PACED: Provider = Provider::new("Test-Counters-Paced");
static TICKS: Counter = Counter::new(&PACED, CounterInfo::new("ticks"));

/// Two sessions: the smaller interval sets the pace for both; when its session stops, the
/// other's own interval takes over.
#[test]
fn the_smallest_interval_across_sessions_wins() {
    TICKS.register();
    let slow = Collector::start(&["Test-Counters-Paced:0:5:EventCounterIntervalSec=0.6"]);
    let fast = Collector::start(&["Test-Counters-Paced::5:EventCounterIntervalSec=0.1"]);
    let sped_up = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(1300));
    let fast_events = fast.stop();
    let switched = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(1900));
    let slow_events = slow.stop();

    let series = |events: &[Published]| -> Vec<String> {
        events.iter().map(|p| p.str("Series").to_string()).collect()
    };
    let fast_series = series(&fast_events);
    assert!(fast_series.len() >= 8, "{fast_series:?}");
    assert!(
        fast_series.iter().all(|s| s == "Interval=100"),
        "{fast_series:?}"
    );
    // Between the fast session's start and its stop. On a loaded machine a slow-paced
    // event may be published while the fast session is starting and arrive after it
    // started: at most one, the first.
    let during: Vec<_> = slow_events
        .iter()
        .filter(|p| p.at >= sped_up && p.at < switched)
        .cloned()
        .collect();
    let after: Vec<_> = slow_events
        .iter()
        .filter(|p| p.at >= switched)
        .cloned()
        .collect();
    assert!(
        during.len() >= 8,
        "the slow session got the fast pace: {:?}",
        series(&during)
    );
    assert!(
        series(&during).iter().skip(1).all(|s| s == "Interval=100"),
        "{:?}",
        series(&during)
    );
    // After the switch (one event may still be at the fast pace, in flight).
    let slow_paced: Vec<_> = series(&after)
        .into_iter()
        .filter(|s| s == "Interval=600")
        .collect();
    assert!((2..=4).contains(&slow_paced.len()), "{:?}", series(&after));
    assert!(after.len() <= slow_paced.len() + 1, "{:?}", series(&after));
}

/// The same metadata as the .NET runtime's own EventCounters events, compared with a real
/// .NET 8 trace when one is at hand (`EVENTPIPE_DOTNET_COUNTERS_TRACE`, or
/// `/tmp/counters8.nettrace`).
#[test]
fn the_shapes_match_a_real_dotnet_trace() {
    let path = std::env::var("EVENTPIPE_DOTNET_COUNTERS_TRACE")
        .unwrap_or_else(|_| "/tmp/counters8.nettrace".into());
    let Ok(bytes) = std::fs::read(&path) else {
        eprintln!("skipped: no .NET counters trace at {path}");
        return;
    };
    let mut reader = nettrace::TraceReader::from_slice(&bytes).unwrap();
    let mut shapes = std::collections::BTreeSet::new();
    while let Some(e) = reader.next_event().unwrap() {
        if e.metadata.event_name == "EventCounters" {
            shapes.insert(counters_common::shape(&e.metadata.fields));
        }
    }
    let expected: std::collections::BTreeSet<String> =
        [DOTNET_MEAN_SHAPE.to_string(), DOTNET_SUM_SHAPE.to_string()].into();
    assert_eq!(shapes, expected);
}
