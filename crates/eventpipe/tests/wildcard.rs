//! A `*` provider in a session stands for every provider the session does not name. Its
//! own test binary: a star session enables every event in the process, which would disturb
//! tests that assert their events are off.

use eventpipe::{
    define_event, write_event, Level, Output, Provider, ProviderConfig, Session, SessionConfig,
};
use nettrace::TraceReader;

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("eventpipe-{}-{name}.nettrace", std::process::id()))
}

/// A star session enables every event here; one test's sessions at a time.
static ONE_SESSION: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Summary {
    counts: std::collections::BTreeMap<String, u64>,
}

fn read_trace(bytes: &[u8]) -> Summary {
    let mut r = TraceReader::from_slice(bytes).unwrap();
    let mut counts = std::collections::BTreeMap::new();
    while let Some(e) = r.next_event().unwrap() {
        *counts.entry(e.qualified_name()).or_default() += 1;
    }
    Summary { counts }
}

static WILD_A: Provider = Provider::new("Test-Wildcard-A");
static WILD_B: Provider = Provider::new("Test-Wildcard-B");
define_event! { static WILD_INFO = WILD_A { id: 1, name: "Info", level: Level::Informational, keywords: 0x1 } (n: u32); }
define_event! { static WILD_VERBOSE = WILD_B { id: 1, name: "Chatter", level: Level::Verbose, keywords: 0x2 } (n: u32); }

#[test]
fn a_star_provider_enables_every_provider_not_named_otherwise() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|p| p.into_inner());
    let path = temp("wildcard");
    let session = Session::start(SessionConfig::new(
        vec![
            ProviderConfig::parse("*:*:Informational").unwrap(),
            // Named explicitly: its own settings win over the star's.
            ProviderConfig::parse("Test-Wildcard-B:0x2:Verbose").unwrap(),
        ],
        Output::File(path.clone()),
    ))
    .unwrap();
    assert!(WILD_INFO.is_enabled() && WILD_VERBOSE.is_enabled());
    write_event!(WILD_INFO, 1u32);
    write_event!(WILD_VERBOSE, 2u32);
    session.stop().unwrap();
    assert!(!WILD_INFO.is_enabled() && !WILD_VERBOSE.is_enabled());
    let s = read_trace(&std::fs::read(&path).unwrap());
    std::fs::remove_file(&path).ok();
    assert_eq!(s.counts.get("Test-Wildcard-A/Info"), Some(&1));
    assert_eq!(s.counts.get("Test-Wildcard-B/Chatter"), Some(&1));

    // Without the explicit entry, the star's level (Informational) filters Verbose out.
    let path = temp("wildcard-level");
    let session = Session::start(SessionConfig::new(
        vec![ProviderConfig::parse("*:*:Informational").unwrap()],
        Output::File(path.clone()),
    ))
    .unwrap();
    assert!(WILD_INFO.is_enabled());
    assert!(!WILD_VERBOSE.is_enabled());
    session.stop().unwrap();
    std::fs::remove_file(&path).ok();
}

static PROFILER_LIKE: Provider = Provider::new("EventPipeRs-TestProfiler");
define_event! { static PROFILER_SAMPLE = PROFILER_LIKE { id: 1, name: "Sample", level: Level::Informational, keywords: 0 } (n: u32); }

/// This project's own `EventPipeRs-*` providers (the profilers) cost something the moment
/// they are on, so `*` leaves them out: a session enables them only by naming them.
#[test]
fn the_star_leaves_out_the_profiler_providers_until_named() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|p| p.into_inner());
    let path = temp("wildcard-optin");
    let session = Session::start(SessionConfig::new(
        vec![ProviderConfig::parse("*:*:Verbose").unwrap()],
        Output::File(path.clone()),
    ))
    .unwrap();
    write_event!(PROFILER_SAMPLE, 1u32);
    assert!(!PROFILER_SAMPLE.is_enabled());
    let named = Session::start(SessionConfig::new(
        vec![ProviderConfig::parse("eventpiperS-testprofiler").unwrap()],
        Output::File(temp("wildcard-optin-named")),
    ))
    .unwrap();
    assert!(PROFILER_SAMPLE.is_enabled());
    named.stop().unwrap();
    session.stop().unwrap();
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(temp("wildcard-optin-named")).ok();
}
