//! The order guarantees readers rely on (nettrace format, "Ordering of events"), checked on
//! traces written by concurrent threads through many drain passes and sequence points:
//!
//! 1. each capture thread's events are in timestamp order, numbered one after another;
//! 2. every event of a sequence-point region is at or before every event of the next;
//! 3. no event after an IsSorted event in the file is older than it;
//!
//! and a sorting reader gives back every event, in timestamp order, with its payload.

use std::collections::HashMap;
use std::time::Duration;

use eventpipe::{
    define_event, write_event, BufferingMode, Level, Output, Provider, ProviderConfig, Session,
    SessionConfig,
};
use nettrace::{FormatVersion, SortedReader, TraceReader, Value};

static ORDER: Provider = Provider::new("Test-Order");
define_event! {
    static STEP = ORDER { id: 1, name: "Step", level: Level::Informational, keywords: 0 }
        (thread: u64, n: u64);
}
define_event! {
    static MARK = ORDER { id: 2, name: "Mark", level: Level::Informational, keywords: 0 }
        (thread: u64, n: u64, note: &str);
}

const THREADS: u64 = 4;
const PER_THREAD: u64 = 40_000;

/// Writes the workload to a trace in `format` and returns its bytes.
fn write_trace(format: FormatVersion, stacks: bool) -> Vec<u8> {
    let path = std::env::temp_dir().join(format!(
        "eventpipe-order-{}-{format:?}-{stacks}.nettrace",
        std::process::id()
    ));
    let mut config = SessionConfig::new(
        vec![ProviderConfig::new(ORDER.name())],
        Output::File(path.clone()),
    )
    .mode(BufferingMode::Block)
    .format(format)
    .stacks(stacks)
    .buffer_budget(1 << 20)
    .flush_interval(Duration::from_millis(1));
    config.sequence_point_interval = Duration::from_millis(3);
    let session = Session::start(config).unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                for n in 0..PER_THREAD {
                    // Runs of one event, broken by another kind now and then.
                    if n % 97 == 0 {
                        write_event!(MARK, t, n, "mark");
                    } else {
                        write_event!(STEP, t, n);
                    }
                    if n % 2_000 == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            });
        }
    });
    let stats = session.stop().unwrap();
    assert_eq!(stats.events_written, THREADS * PER_THREAD, "{stats:?}");
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    bytes
}

struct Seen {
    timestamp: i64,
    sorted: bool,
    region: u64,
}

/// The tests share the provider: one session at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn check(format: FormatVersion, stacks: bool) {
    let bytes = {
        let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        write_trace(format, stacks)
    };
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let mut events = Vec::new();
    // Per capture thread: last timestamp and sequence number; per writer: the next `n`.
    let mut by_thread: HashMap<u64, (i64, u32)> = HashMap::new();
    let mut next_n: HashMap<u64, u64> = HashMap::new();
    while let Some(e) = reader.next_event().unwrap() {
        if e.metadata.provider != ORDER.name() {
            continue;
        }
        let h = e.header;
        let fields = e.decode_payload().unwrap();
        let (Value::U64(t), Value::U64(n)) = (&fields[0].1, &fields[1].1) else {
            panic!("unexpected payload {fields:?}");
        };
        let expected = next_n.entry(*t).or_default();
        assert_eq!(
            *n, *expected,
            "writer {t}'s events arrive in order, none missing"
        );
        *expected += 1;
        if stacks {
            assert!(
                e.stack.is_some_and(|s| !s.is_empty()),
                "every event has its stack"
            );
        }
        if let Some(&(ts, seq)) = by_thread.get(&h.capture_thread) {
            assert!(
                h.timestamp >= ts,
                "guarantee 1: a thread's events in time order"
            );
            assert_eq!(
                h.sequence_number,
                seq.wrapping_add(1),
                "guarantee 1: numbered in turn"
            );
        }
        by_thread.insert(h.capture_thread, (h.timestamp, h.sequence_number));
        events.push(Seen {
            timestamp: h.timestamp,
            sorted: h.is_sorted,
            region: reader.stats().sequence_points,
        });
    }
    assert!(reader.is_finished());
    assert_eq!(events.len() as u64, THREADS * PER_THREAD);
    assert!(next_n.values().all(|&n| n == PER_THREAD));
    let regions = events.last().unwrap().region - events[0].region + 1;
    assert!(
        regions >= 3,
        "the workload spans several regions ({regions})"
    );

    // Guarantee 2: the latest of each region is no later than the earliest of the next.
    let mut bounds: Vec<(u64, i64, i64)> = Vec::new();
    for e in &events {
        match bounds.last_mut() {
            Some((region, lo, hi)) if *region == e.region => {
                *lo = (*lo).min(e.timestamp);
                *hi = (*hi).max(e.timestamp);
            }
            _ => bounds.push((e.region, e.timestamp, e.timestamp)),
        }
    }
    for pair in bounds.windows(2) {
        assert!(
            pair[0].2 <= pair[1].1,
            "guarantee 2 between regions {pair:?}"
        );
    }

    // Guarantee 3, against the earliest timestamp of everything after each event.
    let mut earliest_after = i64::MAX;
    let mut marked = 0;
    for e in events.iter().rev() {
        if e.sorted {
            marked += 1;
            assert!(
                e.timestamp <= earliest_after,
                "guarantee 3: an IsSorted event"
            );
        }
        earliest_after = earliest_after.min(e.timestamp);
    }
    assert!(
        marked >= regions,
        "every pass marks events IsSorted ({marked})"
    );

    // A sorting reader gives every event back in time order.
    let mut sorted = SortedReader::new(TraceReader::from_slice(&bytes).unwrap());
    let (mut count, mut last) = (0u64, i64::MIN);
    while let Some(e) = sorted.next_event().unwrap() {
        if e.metadata.provider == ORDER.name() {
            assert!(e.header.timestamp >= last, "sorted order");
            last = e.header.timestamp;
            count += 1;
        }
    }
    assert_eq!(count, THREADS * PER_THREAD);
}

#[test]
fn order_guarantees_hold_in_v5() {
    check(FormatVersion::V5, false);
}

#[test]
fn order_guarantees_hold_in_v6() {
    check(FormatVersion::V6, false);
}

#[test]
fn order_guarantees_hold_with_stacks() {
    check(FormatVersion::V6, true);
}
