//! Through the real `metrics` macros: counters, gauges and histograms, one series per
//! name and label set, published as EventCounters with exact values, labels in `Metadata`,
//! units from `describe_*!`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use nettrace::Value;

type Fields = BTreeMap<String, Value>;

fn payload(e: &nettrace::Event<'_>) -> Option<Fields> {
    let (_, Value::Object(outer)) = e.decode_payload().ok()?.into_iter().next()? else {
        return None;
    };
    let (_, Value::Object(fields)) = outer.into_iter().find(|(n, _)| n == "Payload")? else {
        return None;
    };
    Some(fields.into_iter().collect())
}

fn text<'a>(f: &'a Fields, k: &str) -> &'a str {
    f[k].as_str().unwrap()
}

fn num(f: &Fields, k: &str) -> f64 {
    f[k].as_f64().unwrap()
}

#[test]
fn metrics_macros_become_eventpipe_counters() {
    eventpipe_metrics::install_under("Test-Metrics-Bridge").unwrap();
    assert!(
        eventpipe_metrics::install().is_err(),
        "a second global recorder is refused"
    );
    metrics::describe_histogram!("request-latency", metrics::Unit::Milliseconds, "Latency");
    metrics::describe_gauge!("queue-bytes", metrics::Unit::Bytes, "Bytes queued");

    let events: Arc<Mutex<Vec<Fields>>> = Arc::default();
    let sink = Arc::clone(&events);
    let callback: eventpipe::ListenerCallback = Box::new(move |e| {
        if e.metadata.event_name == "EventCounters" && e.metadata.provider == "Test-Metrics-Bridge"
        {
            sink.lock()
                .unwrap()
                .push(payload(e).expect("an EventCounters payload"));
        }
    });
    let session = Session::start(SessionConfig::new(
        vec![ProviderConfig::parse("Test-Metrics-Bridge:0:5:EventCounterIntervalSec=0.2").unwrap()],
        Output::Listener(callback),
    ))
    .unwrap();

    let threads: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(|| {
                for i in 0..1000u64 {
                    metrics::counter!("requests", "route" => "/a", "method" => "GET").increment(2);
                    if i % 4 == 0 {
                        metrics::counter!("requests", "route" => "/b").increment(1);
                    }
                    metrics::histogram!("request-latency").record((i % 100 + 1) as f64);
                    metrics::gauge!("in-flight").increment(1.0);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    metrics::gauge!("in-flight").decrement(1000.0);
    metrics::gauge!("queue-bytes", "queue" => "a=b,c").set(4096.0);
    let kept = metrics::counter!("kept-handle");
    kept.absolute(40);
    kept.absolute(10); // lower: ignored
    kept.increment(2);

    let sum_of = |name: &str, metadata: &str, field: &str| -> f64 {
        events
            .lock()
            .unwrap()
            .iter()
            .filter(|f| text(f, "Name") == name && text(f, "Metadata").starts_with(metadata))
            .map(|f| num(f, field))
            .sum()
    };
    let start = Instant::now();
    while sum_of("requests", "route=/a,method=GET", "Increment") < 6000.0
        && start.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    session.stop().unwrap();

    assert_eq!(
        sum_of("requests", "route=/a,method=GET", "Increment"),
        6000.0
    );
    assert_eq!(sum_of("requests", "route=/b", "Increment"), 750.0);
    assert_eq!(sum_of("kept-handle", "", "Increment"), 42.0);
    assert_eq!(sum_of("request-latency", "", "Count"), 3000.0);

    let events = events.lock().unwrap().clone();
    let last = |name: &str| {
        events
            .iter()
            .rfind(|f| text(f, "Name") == name)
            .unwrap()
            .clone()
    };
    let in_flight = last("in-flight");
    assert_eq!(num(&in_flight, "Mean"), 2000.0);
    assert_eq!(text(&in_flight, "CounterType"), "Mean");
    let queue = last("queue-bytes");
    assert_eq!(num(&queue, "Mean"), 4096.0);
    assert_eq!(text(&queue, "DisplayUnits"), "B");
    assert_eq!(text(&queue, "Metadata"), "queue=a_b_c");
    let requests = last("requests");
    assert_eq!(text(&requests, "CounterType"), "Sum");
    assert_eq!(text(&requests, "DisplayName"), "requests");

    let latency: Vec<_> = events
        .iter()
        .filter(|f| text(f, "Name") == "request-latency" && num(f, "Count") > 0.0)
        .collect();
    assert_eq!(text(latency[0], "DisplayUnits"), "ms");
    let min = latency
        .iter()
        .map(|f| num(f, "Min"))
        .fold(f64::INFINITY, f64::min);
    let max = latency.iter().map(|f| num(f, "Max")).fold(0.0, f64::max);
    assert_eq!((min, max), (1.0, 100.0));
    let total: f64 = latency
        .iter()
        .map(|f| num(f, "Mean") * num(f, "Count"))
        .sum();
    assert!((total - 3.0 * 10.0 * 5050.0).abs() < 1e-6, "{total}");
    assert!(latency
        .iter()
        .all(|f| text(f, "Metadata").starts_with("Percentiles=p50:")));
}
