//! `EventDescriptor::register`: the mask and the provider's enable callback are exact from
//! registration on, before any write.

use std::sync::atomic::{AtomicU32, Ordering};

use eventpipe::{EnableChange, EventDescriptor, Level, Provider};

static REGISTER_CALLS: AtomicU32 = AtomicU32::new(0);
static REGISTER_ENABLED: AtomicU32 = AtomicU32::new(0);
static REGISTER_ENDING_RECORDED: AtomicU32 = AtomicU32::new(0);
fn count_register_callback(change: &EnableChange<'_>) {
    REGISTER_CALLS.fetch_add(1, Ordering::SeqCst);
    REGISTER_ENABLED.store(u32::from(change.enabled), Ordering::SeqCst);
    if change.ending {
        // The session still records while it ends.
        REGISTER_ENDING_RECORDED.store(u32::from(REGISTER_A.is_enabled()), Ordering::SeqCst);
    }
}
static REGISTER_PROVIDER: Provider =
    Provider::with_callback("Test-Unit-Register", count_register_callback);
static REGISTER_A: EventDescriptor =
    EventDescriptor::new(&REGISTER_PROVIDER, 1, 0, "A", Level::Verbose, 0, 0, &[]);
static REGISTER_B: EventDescriptor =
    EventDescriptor::new(&REGISTER_PROVIDER, 2, 0, "B", Level::Verbose, 0, 0, &[]);
static UNNAMED_PROVIDER: Provider = Provider::new("Test-Unit-Register-Unnamed");
static UNNAMED: EventDescriptor =
    EventDescriptor::new(&UNNAMED_PROVIDER, 1, 0, "C", Level::Verbose, 0, 0, &[]);

#[test]
fn register_makes_the_mask_and_the_enable_callback_exact_before_any_write() {
    // Unregistered: reads enabled (the sentinel) though no session names it.
    assert!(UNNAMED.is_enabled());
    assert!(!UNNAMED.register());
    assert!(!UNNAMED.is_enabled());
    assert!(!UNNAMED.register(), "idempotent");

    let path = std::env::temp_dir().join(format!(
        "eventpipe-unit-register-{}.nettrace",
        std::process::id()
    ));
    let session = eventpipe::Session::start(eventpipe::SessionConfig::new(
        vec![eventpipe::ProviderConfig::new("Test-Unit-Register")],
        eventpipe::Output::File(path.clone()),
    ))
    .unwrap();
    // The provider had no registered event when the session started: not told yet.
    assert_eq!(REGISTER_CALLS.load(Ordering::SeqCst), 0);
    assert!(REGISTER_A.register());
    assert_eq!(REGISTER_CALLS.load(Ordering::SeqCst), 1, "told on register");
    assert_eq!(REGISTER_ENABLED.load(Ordering::SeqCst), 1);
    assert!(REGISTER_B.register());
    assert_eq!(
        REGISTER_CALLS.load(Ordering::SeqCst),
        1,
        "once per provider"
    );
    assert!(!UNNAMED.is_enabled());
    let stats = session.stop().unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(stats.events_written, 0, "registering writes nothing");
    assert_eq!(
        REGISTER_CALLS.load(Ordering::SeqCst),
        3,
        "told on stop: once ending, once stopped"
    );
    assert_eq!(REGISTER_ENABLED.load(Ordering::SeqCst), 0);
    assert_eq!(REGISTER_ENDING_RECORDED.load(Ordering::SeqCst), 1);
    assert!(!REGISTER_A.is_enabled() && !REGISTER_B.is_enabled());
    assert!(!REGISTER_A.register());
}
