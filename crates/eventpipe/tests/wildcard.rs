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
