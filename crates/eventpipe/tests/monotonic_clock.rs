//! With `EVENTPIPE_CLOCK=monotonic` the short write path (which reads the TSC unchecked) is
//! never taken: every record goes through the general path and its clock. Its own test
//! binary, since the clock source is chosen once per process.

use eventpipe::{
    define_event, write_event, Level, Output, Provider, ProviderConfig, Session, SessionConfig,
};
use nettrace::{TraceReader, Value};

static MONO: Provider = Provider::new("Test-Monotonic");
define_event! { static FIXED = MONO { id: 1, name: "Fixed", level: Level::Informational, keywords: 0 } (thread: u32, n: u64); }
define_event! { static TEXT = MONO { id: 2, name: "Text", level: Level::Informational, keywords: 0 } (thread: u32, n: u64, text: &str); }

const THREADS: u32 = 2;
const PER_THREAD: u64 = 20_000;

#[test]
fn monotonic_timestamps_go_through_the_general_path_intact() {
    // Before anything reads the clock: this is the test binary's only test.
    std::env::set_var("EVENTPIPE_CLOCK", "monotonic");
    let path = std::env::temp_dir().join(format!(
        "eventpipe-{}-monotonic.nettrace",
        std::process::id()
    ));
    let session = Session::start(SessionConfig::new(
        vec![ProviderConfig::new(MONO.name())],
        Output::File(path.clone()),
    ))
    .expect("start the session");
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                for n in 0..PER_THREAD {
                    if n % 10 == 0 {
                        write_event!(TEXT, t, n, "ten");
                    } else {
                        write_event!(FIXED, t, n);
                    }
                }
            });
        }
    });
    let stats = session.stop().expect("stop the session");
    assert_eq!(stats.events_dropped, 0);

    let bytes = std::fs::read(&path).expect("read the trace");
    std::fs::remove_file(&path).ok();
    let mut reader = TraceReader::from_slice(&bytes).expect("open the trace");
    let mut next = vec![0u64; THREADS as usize];
    let mut last_timestamp = vec![i64::MIN; THREADS as usize];
    while let Some(e) = reader.next_event().expect("read an event") {
        if e.metadata.provider != MONO.name() {
            continue;
        }
        assert_eq!(
            e.trace.tick_frequency, 1_000_000_000,
            "monotonic ticks are ns"
        );
        let fields = e.decode_payload().expect("decode the payload");
        let (Value::U32(t), Value::U64(n)) = (&fields[0].1, &fields[1].1) else {
            panic!("unexpected fields {fields:?}");
        };
        let t = *t as usize;
        assert_eq!(*n, next[t], "thread {t}'s events in order, none missing");
        assert_eq!(
            e.metadata.event_id == 2,
            n % 10 == 0,
            "event {n} of thread {t}"
        );
        assert!(
            e.header.timestamp >= last_timestamp[t],
            "timestamps of thread {t} go back"
        );
        last_timestamp[t] = e.header.timestamp;
        next[t] += 1;
    }
    assert_eq!(
        next,
        vec![PER_THREAD; THREADS as usize],
        "events per thread"
    );
}
