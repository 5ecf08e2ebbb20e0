//! End-to-end session behaviour: what is written is read back by the nettrace reader, in
//! every output and format; Drop mode counts its losses exactly; Block mode loses nothing;
//! teardown releases parked writers; a failing output ends only its own session.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventpipe::{
    define_event, write_event, BufferingMode, EnableChange, Level, Output, Provider,
    ProviderConfig, Session, SessionConfig,
};
use nettrace::{FormatVersion, TraceReader, Value};

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("eventpipe-{}-{name}.nettrace", std::process::id()))
}

struct Summary {
    counts: BTreeMap<String, u64>,
    lost: u64,
    first_payload: BTreeMap<String, Vec<(String, Value)>>,
}

fn read_trace(bytes: &[u8]) -> Summary {
    let mut r = TraceReader::from_slice(bytes).unwrap();
    let mut counts = BTreeMap::new();
    let mut first_payload = BTreeMap::new();
    while let Some(e) = r.next_event().unwrap() {
        let name = e.qualified_name();
        *counts.entry(name.clone()).or_default() += 1;
        first_payload.entry(name).or_insert_with(|| {
            let fields = e.decode_payload().unwrap();
            fields
                .into_iter()
                .map(|(n, v)| (n.to_string(), v))
                .collect()
        });
    }
    assert!(
        r.is_finished(),
        "trace must end with an end-of-stream marker"
    );
    Summary {
        counts,
        lost: r.stats().lost_events,
        first_payload,
    }
}

static TYPED: Provider = Provider::new("Test-Typed");
define_event! {
    static EVERYTHING = TYPED { id: 1, name: "Everything", level: Level::Informational, keywords: 0x1 }
        (a: u8, b: i16, c: u32, d: i64, e: f32, f: f64, g: bool, h: &str, i: nettrace::Guid, j: &[u8], k: &[u64]);
}
define_event! {
    static VERBOSE_ONLY = TYPED { id: 2, name: "Chatty", level: Level::Verbose, keywords: 0x2 } (n: u32);
}

#[test]
fn typed_payloads_round_trip_in_both_formats() {
    for format in [FormatVersion::V5, FormatVersion::V6] {
        let path = temp(&format!("typed-{format:?}"));
        let config = SessionConfig::new(
            vec![ProviderConfig {
                level: Level::Informational,
                ..ProviderConfig::new("Test-Typed")
            }],
            Output::File(path.clone()),
        )
        .format(format);
        let session = Session::start(config).unwrap();
        let guid = nettrace::Guid::parse("0e1b4a44-8a2c-4f1e-9d6a-1f2e3d4c5b6a").unwrap();
        for n in 0..3u32 {
            write_event!(
                EVERYTHING,
                7u8,
                -2i16,
                n,
                -40i64,
                1.5f32,
                2.25f64,
                true,
                "héllo",
                guid,
                &[1u8, 2, 3][..],
                &[9u64, 8][..]
            );
            write_event!(VERBOSE_ONLY, n); // filtered out by level
        }
        let stats = session.stop().unwrap();
        assert_eq!(stats.events_written, 3);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        let s = read_trace(&bytes);
        assert_eq!(
            s.counts.get("Test-Typed/Everything"),
            Some(&3),
            "{format:?}: {:?}",
            s.counts
        );
        assert_eq!(s.counts.get("Test-Typed/Chatty"), None);
        assert_eq!(
            s.counts.get("Microsoft-DotNETCore-EventPipe/ProcessInfo"),
            Some(&1),
            "rundown"
        );
        let p = &s.first_payload["Test-Typed/Everything"];
        let values: Vec<&Value> = p.iter().map(|(_, v)| v).collect();
        assert_eq!(
            values,
            [
                &Value::U8(7),
                &Value::I16(-2),
                &Value::U32(0),
                &Value::I64(-40),
                &Value::F32(1.5),
                &Value::F64(2.25),
                &Value::Bool(true),
                &Value::String("héllo".into()),
                &Value::Guid(guid),
                &Value::Bytes(vec![1, 2, 3]),
                &Value::Array(vec![Value::U64(9), Value::U64(8)]),
            ]
        );
        assert_eq!(p[0].0, "a");
        assert_eq!(s.lost, 0);
    }
}

static FIXED: Provider = Provider::new("Test-Fixed");
define_event! {
    /// Every field has a fixed size: `write_event!` encodes it straight into the buffer.
    static ALL_FIXED = FIXED { id: 1, name: "AllFixed", level: Level::Informational, keywords: 0 }
        (n: u32, a: u8, b: i16, c: u64, d: f64, e: bool, g: nettrace::Guid);
}

/// Every `Test-Fixed/AllFixed` payload of the trace, as `n` and the other values.
fn fixed_payloads(bytes: &[u8]) -> Vec<Vec<Value>> {
    let mut r = TraceReader::from_slice(bytes).unwrap();
    let mut out = Vec::new();
    while let Some(e) = r.next_event().unwrap() {
        if e.qualified_name() == "Test-Fixed/AllFixed" {
            let fields = e.decode_payload().unwrap();
            out.push(fields.into_iter().map(|(_, v)| v).collect());
        }
    }
    assert_eq!(r.stats().lost_events, 0);
    out
}

#[test]
fn fixed_size_payloads_read_back_on_every_write_path() {
    // One session without stacks: the short path, encoding in place (and the general path
    // each time a buffer fills: small buffers make that often). Two sessions at once, and a
    // session that wants stacks: the general path, from the staged copy.
    let guid = nettrace::Guid([0x5A; 16]);
    let expected = |n: u32| {
        vec![
            Value::U32(n),
            Value::U8(n as u8),
            Value::I16(-(n as i16)),
            Value::U64(u64::from(n) << 40 | 7),
            Value::F64(f64::from(n) / 4.0),
            Value::Bool(n % 2 == 1),
            Value::Guid(guid),
        ]
    };
    let start = |name: &str, stacks: bool| {
        let path = temp(name);
        let config = SessionConfig::new(
            vec![ProviderConfig::new("Test-Fixed")],
            Output::File(path.clone()),
        )
        .mode(BufferingMode::Block)
        .buffer_budget(64 << 10)
        .stacks(stacks);
        (Session::start(config).unwrap(), path)
    };
    const EVENTS: u32 = 20_000;
    let write_all = || {
        for n in 0..EVENTS {
            write_event!(
                ALL_FIXED,
                n,
                n as u8,
                -(n as i16),
                u64::from(n) << 40 | 7,
                f64::from(n) / 4.0,
                n % 2 == 1,
                guid
            );
        }
    };
    let check = |path: &std::path::Path, what: &str| {
        let bytes = std::fs::read(path).unwrap();
        std::fs::remove_file(path).ok();
        let payloads = fixed_payloads(&bytes);
        assert_eq!(payloads.len(), EVENTS as usize, "{what}");
        for (n, payload) in (0..EVENTS).zip(&payloads) {
            assert_eq!(payload, &expected(n), "{what}: event {n}");
        }
    };

    let (alone, alone_path) = start("fixed-alone", false);
    write_all();
    assert_eq!(alone.stop().unwrap().events_written, u64::from(EVENTS));
    check(&alone_path, "one session");

    let (first, first_path) = start("fixed-first", false);
    let (stacked, stacked_path) = start("fixed-stacked", true);
    write_all();
    assert_eq!(first.stop().unwrap().events_written, u64::from(EVENTS));
    assert_eq!(stacked.stop().unwrap().events_written, u64::from(EVENTS));
    check(&first_path, "two sessions");
    check(&stacked_path, "a session with stacks");
}

static MULTI: Provider = Provider::new("Test-Listener");
define_event! { static PING = MULTI { id: 1, name: "Ping", level: Level::Informational, keywords: 0 } (n: u64); }

#[test]
fn listener_receives_every_event_on_its_own_thread_in_time_order() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let caller = std::thread::current().id();
    let callback: eventpipe::ListenerCallback = Box::new(move |e| {
        assert_ne!(std::thread::current().id(), caller);
        if e.metadata.provider == "Test-Listener" {
            let n = e.decode_payload().unwrap()[0].1.as_u64().unwrap();
            sink.lock().unwrap().push((e.header.timestamp, n));
        }
    });
    let session = Session::start(
        SessionConfig::new(
            vec![ProviderConfig::new("Test-Listener")],
            Output::Listener(callback),
        )
        .flush_interval(Duration::from_millis(1)),
    )
    .unwrap();
    let writers: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..20_000u64 {
                    write_event!(PING, t * 20_000 + i);
                }
            })
        })
        .collect();
    writers.into_iter().for_each(|w| w.join().unwrap());
    session.stop().unwrap();
    let got = seen.lock().unwrap().clone();
    assert!(
        got.windows(2).all(|w| w[0].0 <= w[1].0),
        "the listener sees events in timestamp order"
    );
    let mut numbers: Vec<u64> = got.iter().map(|&(_, n)| n).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (0..80_000).collect::<Vec<_>>());
}

static FLUSHED: Provider = Provider::new("Test-Flush");
define_event! { static TICK = FLUSHED { id: 1, name: "Tick", level: Level::Informational, keywords: 0 } (n: u64); }

/// Starts a listener session on `Test-Flush` with `interval`, writes one event (far too
/// little to fill a buffer, so only the drain's periodic wake-up moves it) and says whether
/// the listener had it within `within`, with the session still running; then stops it.
fn one_event_arrives_within(interval: Duration, within: Duration) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    let callback: eventpipe::ListenerCallback = Box::new(move |e| {
        if e.metadata.provider == "Test-Flush" {
            let _ = tx.send(e.decode_payload().unwrap()[0].1.as_u64().unwrap());
        }
    });
    let session = Session::start(
        SessionConfig::new(
            vec![ProviderConfig::new("Test-Flush")],
            Output::Listener(callback),
        )
        .flush_interval(interval),
    )
    .unwrap();
    write_event!(TICK, 7u64);
    let arrived = rx.recv_timeout(within) == Ok(7);
    let stats = session.stop().unwrap();
    assert_eq!(stats.events_written, 1);
    // Whatever was still buffered reaches the listener at the stop.
    assert!(arrived || rx.recv_timeout(Duration::from_secs(5)) == Ok(7));
    arrived
}

#[test]
fn the_flush_interval_delivers_a_lone_event_while_the_session_runs() {
    // 20 ms: the event is out within a few intervals (the bound is for a loaded machine).
    assert!(one_event_arrives_within(
        Duration::from_millis(20),
        Duration::from_secs(10)
    ));
    // An hour: nothing else wakes the drain for a lone event, so it waits for the stop.
    assert!(!one_event_arrives_within(
        Duration::from_secs(3600),
        Duration::from_millis(300)
    ));
}

static MISTYPED: Provider = Provider::new("Test-Mistyped");
define_event! { static COUNT = MISTYPED { id: 1, name: "Count", level: Level::Informational, keywords: 0 } (n: u64); }

/// A value of another type than its field's does not compile (the compile-fail example on
/// `define_event!`); a literal takes its field's type, in every build.
#[test]
fn an_unsuffixed_literal_is_written_as_its_fields_type() {
    let path = temp("literal");
    let session = Session::start(SessionConfig::new(
        vec![ProviderConfig::new("Test-Mistyped")],
        Output::File(path.clone()),
    ))
    .unwrap();
    write_event!(COUNT, 7);
    write_event!(COUNT, u64::MAX);
    session.stop().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let mut counts = Vec::new();
    while let Some(event) = reader.next_event().unwrap() {
        if event.qualified_name() == "Test-Mistyped/Count" {
            assert_eq!(event.payload.len(), 8, "a u64 field's eight bytes");
            counts.push(event.decode_payload().unwrap().remove(0).1);
        }
    }
    assert_eq!(counts, [Value::U64(7), Value::U64(u64::MAX)]);
}

static LOSSY: Provider = Provider::new("Test-Drop");
define_event! { static FILLER = LOSSY { id: 1, name: "Filler", level: Level::Informational, keywords: 0 } (n: u64, pad: &[u8]); }

#[test]
fn drop_mode_counts_every_loss_and_the_trace_agrees() {
    let path = temp("drop");
    let config = SessionConfig::new(
        vec![ProviderConfig::new("Test-Drop")],
        Output::File(path.clone()),
    )
    .buffer_budget(eventpipe::MIN_BUDGET)
    .flush_interval(Duration::from_secs(3600));
    let session = Session::start(config).unwrap();
    let pad = [0u8; 200];
    let written = 20_000u64;
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            std::thread::spawn(move || {
                (0..written / 2).for_each(|i| write_event!(FILLER, t * written + i, &pad[..]))
            })
        })
        .collect();
    writers.into_iter().for_each(|w| w.join().unwrap());
    let stats = session.stop().unwrap();
    assert!(
        stats.events_dropped > 0,
        "a 64 KiB budget cannot hold 4 MB without a drain pass"
    );
    assert_eq!(stats.events_written + stats.events_dropped, written);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let s = read_trace(&bytes);
    assert_eq!(s.counts["Test-Drop/Filler"], stats.events_written);
    assert_eq!(
        s.lost, stats.events_dropped,
        "the trace's reader counts exactly the dropped events"
    );
}

static FILLING: Provider = Provider::new("Test-Drop-Fill");
define_event! { static FILL = FILLING { id: 1, name: "Fill", level: Level::Informational, keywords: 0 } (n: u64, pad: &[u8]); }

/// Drop mode loses events only once the budget is full: a thread whose next buffer would
/// be larger than what is left takes a smaller one that still holds its record. With the
/// output stalled (no buffer comes back), one thread's buffers grow 4, 8, 16, 32 KiB, then
/// 64 KiB each (a 1 MiB budget's buffer size) up to 1020 KiB: the last 4 KiB are taken too.
#[test]
fn drop_mode_fills_the_whole_budget_before_it_drops() {
    const BUDGET: usize = 1 << 20;
    let open = Arc::new(AtomicBool::new(true));
    let config = SessionConfig::new(
        vec![ProviderConfig::new("Test-Drop-Fill")],
        Output::Stream(Box::new(Gate(Arc::clone(&open), std::io::sink()))),
    )
    .buffer_budget(BUDGET)
    .flush_interval(Duration::from_secs(3600));
    let session = Session::start(config).unwrap();
    // Closed once the trace's header is out.
    open.store(false, Ordering::Release);
    let pad = [0u8; 200];
    let issued = 10_000u64;
    std::thread::spawn(move || (0..issued).for_each(|i| write_event!(FILL, i, &pad[..])))
        .join()
        .unwrap();
    let full = session.stats();
    // Opened before any assertion: a failing one would otherwise stop the session with
    // its drain stuck on the closed output.
    open.store(true, Ordering::Release);
    let stats = session.stop().unwrap();
    assert_eq!(
        full.buffer_bytes, BUDGET,
        "the whole budget in use: {full:?}"
    );
    assert!(
        stats.events_dropped > 0,
        "2.4 MB cannot fit in 1 MiB: {stats:?}"
    );
    assert_eq!(stats.events_written + stats.events_dropped, issued);
}

static RECLAIMED: Provider = Provider::new("Test-Drop-Reclaimed");
define_event! { static LAST_WORDS = RECLAIMED { id: 1, name: "LastWords", level: Level::Informational, keywords: 0 } (n: u64, pad: &[u8]); }

/// A thread whose last events were dropped is reclaimed (exited, drained) long before the
/// session stops: its last sequence number still reaches the trace first (V6 RemoveThread,
/// V5 a sequence point), so the reader counts those trailing losses too.
#[test]
fn a_reclaimed_threads_trailing_losses_are_counted_in_both_formats() {
    for format in [FormatVersion::V5, FormatVersion::V6] {
        let path = temp(&format!("reclaimed-{format:?}"));
        let open = Arc::new(AtomicBool::new(true));
        let file = std::fs::File::create(&path).unwrap();
        let config = SessionConfig::new(
            vec![ProviderConfig::new("Test-Drop-Reclaimed")],
            Output::Stream(Box::new(Gate(Arc::clone(&open), file))),
        )
        .buffer_budget(eventpipe::MIN_BUDGET)
        .flush_interval(Duration::from_secs(3600))
        .format(format);
        let session = Session::start(config).unwrap();
        let pad = [0u8; 200];
        // The output stalls while the thread writes, so no drain pass frees a buffer (a
        // drain woken at an eighth of the budget could otherwise keep up with a slow writer): the
        // budget fills and the rest is dropped.
        open.store(false, Ordering::Release);
        std::thread::spawn(move || {
            (0..2000u64).for_each(|i| write_event!(LAST_WORDS, i, &pad[..]))
        })
        .join()
        .unwrap();
        open.store(true, Ordering::Release);
        session.flush();
        let deadline = Instant::now() + Duration::from_secs(10);
        while session.stats().live_thread_states != 0 {
            assert!(
                Instant::now() < deadline,
                "never reclaimed: {:?}",
                session.stats()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let stats = session.stop().unwrap();
        assert!(stats.events_dropped > 0, "{stats:?}");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        let s = read_trace(&bytes);
        assert_eq!(
            s.counts["Test-Drop-Reclaimed/LastWords"],
            stats.events_written
        );
        assert_eq!(s.lost, stats.events_dropped, "{format:?}");
    }
}

static BLOCKING: Provider = Provider::new("Test-Block");
define_event! { static ITEM = BLOCKING { id: 1, name: "Item", level: Level::Informational, keywords: 0 } (n: u64, pad: &[u8]); }

#[test]
fn block_mode_loses_nothing_under_pressure() {
    let path = temp("block");
    let config = SessionConfig::new(
        vec![ProviderConfig::new("Test-Block")],
        Output::File(path.clone()),
    )
    .buffer_budget(eventpipe::MIN_BUDGET)
    .mode(BufferingMode::Block);
    let session = Session::start(config).unwrap();
    let pad = [7u8; 100];
    let per_thread = 50_000u64;
    let writers: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || {
                (0..per_thread).for_each(|i| write_event!(ITEM, t * per_thread + i, &pad[..]))
            })
        })
        .collect();
    writers.into_iter().for_each(|w| w.join().unwrap());
    let stats = session.stop().unwrap();
    assert_eq!(stats.events_dropped, 0);
    assert_eq!(stats.events_written, 4 * per_thread);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let s = read_trace(&bytes);
    assert_eq!(s.counts["Test-Block/Item"], 4 * per_thread);
    assert_eq!(s.lost, 0);
}

static BURSTY: Provider = Provider::with_callback("Test-Burst", burst_on_enable);
define_event! { static BURST = BURSTY { id: 1, name: "Burst", level: Level::Informational, keywords: 0 } (n: u64); }
static BURST_SIZE: AtomicU64 = AtomicU64::new(0);

fn burst_on_enable(change: &EnableChange<'_>) {
    if change.enabled {
        for i in 0..BURST_SIZE.load(Ordering::Relaxed) {
            write_event!(BURST, i);
        }
    }
}

#[test]
fn enable_callback_bursting_far_past_a_block_budget_completes() {
    // 1 MiB budget; the callback writes 10 million events (~440 times the budget) before
    // `Session::start` returns. It can only finish if the drain already runs.
    let n = 10_000_000;
    BURST_SIZE.store(n, Ordering::Relaxed);
    BURST.is_enabled(); // declared before the session: the callback must find it
    write_event!(BURST, u64::MAX); // registers the provider (no session yet: dropped)
    let received = Arc::new(AtomicU64::new(0));
    let count = Arc::clone(&received);
    let callback: eventpipe::ListenerCallback = Box::new(move |e| {
        if e.metadata.provider == "Test-Burst" {
            count.fetch_add(1, Ordering::Relaxed);
        }
    });
    let config = SessionConfig::new(
        vec![ProviderConfig::new("Test-Burst")],
        Output::Listener(callback),
    )
    .buffer_budget(1 << 20)
    .mode(BufferingMode::Block);
    let started = Instant::now();
    let session = Session::start(config).unwrap();
    let stats = session.stop().unwrap();
    assert_eq!(stats.events_dropped, 0);
    assert_eq!(stats.events_written, n);
    assert_eq!(
        received.load(Ordering::Relaxed),
        n,
        "after {:?}",
        started.elapsed()
    );
}

/// An output that blocks every write while its flag is false, then passes it on.
struct Gate<W>(Arc<AtomicBool>, W);
impl<W: Write> Write for Gate<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        while !self.0.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.1.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

static STUCK: Provider = Provider::new("Test-Teardown");
define_event! { static WORK = STUCK { id: 1, name: "Work", level: Level::Informational, keywords: 0 } (n: u64, pad: &[u8]); }

#[test]
fn stopping_releases_writers_parked_in_block_mode() {
    let open = Arc::new(AtomicBool::new(true));
    let config = SessionConfig::new(
        vec![ProviderConfig::new("Test-Teardown")],
        Output::Stream(Box::new(Gate(Arc::clone(&open), std::io::sink()))),
    )
    .buffer_budget(eventpipe::MIN_BUDGET)
    .mode(BufferingMode::Block);
    let session = Session::start(config).unwrap();
    open.store(false, Ordering::Release); // the output stalls: the drain stops freeing
    let writer_done = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&writer_done);
    let writer = std::thread::spawn(move || {
        let pad = [0u8; 500];
        for i in 0..100_000u64 {
            write_event!(WORK, i, &pad[..]);
        }
        done.store(true, Ordering::Release);
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !writer_done.load(Ordering::Acquire),
        "the writer should be parked on a full budget"
    );
    let stopper = std::thread::spawn(move || session.stop());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !writer_done.load(Ordering::Acquire) {
        assert!(
            Instant::now() < deadline,
            "teardown did not release the parked writer"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    writer.join().unwrap();
    open.store(true, Ordering::Release);
    let stats = stopper.join().unwrap().unwrap();
    // What was buffered reached the output; the parked write was refused as after the
    // stop, not counted as a loss: Block mode reports none.
    assert!(stats.events_written > 0);
    assert_eq!(stats.events_dropped, 0);
}

/// An output that fails after a few writes.
struct Failing(usize);
impl Write for Failing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0 == 0 {
            return Err(std::io::Error::other("disk full"));
        }
        self.0 -= 1;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

static FRAGILE: Provider = Provider::new("Test-Failing");
define_event! { static TICKET = FRAGILE { id: 1, name: "Ticket", level: Level::Informational, keywords: 0 } (n: u64); }

#[test]
fn a_failing_output_ends_only_its_session() {
    let failing = Session::start(
        SessionConfig::new(
            vec![ProviderConfig::new("Test-Failing")],
            Output::Stream(Box::new(Failing(3))),
        )
        .flush_interval(Duration::from_millis(10)),
    )
    .unwrap();
    let path = temp("healthy");
    let healthy = Session::start(SessionConfig::new(
        vec![ProviderConfig::new("Test-Failing")],
        Output::File(path.clone()),
    ))
    .unwrap();
    for i in 0..50_000u64 {
        write_event!(TICKET, i);
    }
    std::thread::sleep(Duration::from_millis(100));
    for i in 0..10u64 {
        write_event!(TICKET, i);
    }
    let err = failing.stop().unwrap_err();
    // Each layer's message is its own; the cause hangs off `source()`, once.
    let chain: Vec<String> =
        std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
            .map(|e| e.to_string())
            .collect();
    assert_eq!(chain[0], "writing the trace failed", "{chain:?}");
    let mentions = chain.iter().filter(|m| m.contains("disk full")).count();
    assert_eq!(mentions, 1, "the cause once, in its own layer: {chain:?}");
    let stats = healthy.stop().unwrap();
    assert_eq!(stats.events_written, 50_010);
    let s = read_trace(&std::fs::read(&path).unwrap());
    std::fs::remove_file(&path).ok();
    assert_eq!(s.counts["Test-Failing/Ticket"], 50_010);
}

#[test]
fn invalid_configurations_are_clear_errors() {
    let no_providers = Session::start(SessionConfig::new(
        vec![],
        Output::Stream(Box::new(std::io::sink())),
    ));
    assert!(no_providers
        .unwrap_err()
        .to_string()
        .contains("at least one provider"));
    let tiny = Session::start(
        SessionConfig::new(
            vec![ProviderConfig::new("X")],
            Output::Stream(Box::new(std::io::sink())),
        )
        .buffer_budget(0),
    );
    assert!(tiny.unwrap_err().to_string().contains("budget"));
    let bad_path = Session::start(SessionConfig::new(
        vec![ProviderConfig::new("X")],
        Output::File("/nonexistent-dir/x.nettrace".into()),
    ));
    assert!(bad_path
        .unwrap_err()
        .to_string()
        .contains("/nonexistent-dir/x.nettrace"));
}

static ACTIVE: Provider = Provider::new("Test-Activity");
define_event! { static STEP = ACTIVE { id: 1, name: "Step", level: Level::Informational, keywords: 0 } (n: u32); }

#[test]
fn activity_ids_reach_the_trace_in_both_formats() {
    let activity = nettrace::Guid::parse("11111111-2222-3333-4444-555555555555").unwrap();
    let related = nettrace::Guid::parse("66666666-7777-8888-9999-aaaaaaaaaaaa").unwrap();
    for format in [FormatVersion::V5, FormatVersion::V6] {
        let path = temp(&format!("activity-{format:?}"));
        let session = Session::start(
            SessionConfig::new(
                vec![ProviderConfig::new("Test-Activity")],
                Output::File(path.clone()),
            )
            .format(format),
        )
        .unwrap();
        for n in 0..3u32 {
            STEP.write_with_activity(activity, related, (n,));
        }
        write_event!(STEP, 9u32);
        session.stop().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        let mut r = TraceReader::from_slice(&bytes).unwrap();
        let mut seen = Vec::new();
        while let Some(e) = r.next_event().unwrap() {
            if e.metadata.provider == "Test-Activity" {
                seen.push((e.activity_id(), e.related_activity_id()));
            }
        }
        let with = (activity, related);
        let without = (nettrace::Guid::ZERO, nettrace::Guid::ZERO);
        assert_eq!(seen, vec![with, with, with, without], "{format:?}");
    }
}

static BUSY: Provider = Provider::new("Test-Churning-Sessions");
define_event! { static SPIN = BUSY { id: 1, name: "Spin", level: Level::Informational, keywords: 0 } (n: u64); }

#[test]
fn sessions_start_stop_and_drop_while_writers_run_flat_out() {
    let running = Arc::new(AtomicBool::new(true));
    let writers: Vec<_> = (0..3)
        .map(|_| {
            let running = Arc::clone(&running);
            std::thread::spawn(move || {
                let mut n = 0u64;
                while running.load(Ordering::Relaxed) {
                    write_event!(SPIN, n);
                    n += 1;
                }
            })
        })
        .collect();
    for round in 0..40 {
        let path = temp(&format!("churning-{round}"));
        let config = SessionConfig::new(
            vec![ProviderConfig::new("Test-Churning-Sessions")],
            Output::File(path.clone()),
        )
        .flush_interval(Duration::from_millis(5))
        .mode(if round % 2 == 0 {
            BufferingMode::Drop
        } else {
            BufferingMode::Block
        });
        let session = Session::start(config).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let written = if round % 3 == 0 {
            drop(session); // dropping ends the trace as stop() does
            None
        } else {
            Some(session.stop().unwrap())
        };
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        let s = read_trace(&bytes);
        let got = s
            .counts
            .get("Test-Churning-Sessions/Spin")
            .copied()
            .unwrap_or(0);
        if let Some(stats) = written {
            assert_eq!(got, stats.events_written, "round {round}");
            assert_eq!(s.lost, stats.events_dropped, "round {round}");
            if round % 2 == 1 {
                assert_eq!(
                    stats.events_dropped, 0,
                    "Block mode lost events, round {round}"
                );
            }
        }
    }
    running.store(false, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    assert!(!SPIN.is_enabled());
}
