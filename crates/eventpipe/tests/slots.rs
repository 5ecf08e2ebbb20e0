//! Up to 64 concurrent sessions; the 65th is refused; an event reaches exactly the sessions
//! that enable it. (A test binary of its own: it needs every slot.)

use std::sync::{Arc, Mutex};

use eventpipe::{
    define_event, write_event, Level, Output, Provider, ProviderConfig, Session, SessionConfig,
};

static SHARED: Provider = Provider::new("Slots-A");
static OTHER: Provider = Provider::new("Slots-B");
define_event! { static A = SHARED { id: 1, name: "A", level: Level::Informational, keywords: 0 } (n: u32); }
define_event! { static B = OTHER { id: 1, name: "B", level: Level::Informational, keywords: 0 } (n: u32); }

#[test]
fn sixty_four_sessions_each_get_exactly_their_events() {
    let received: Vec<Arc<Mutex<Vec<String>>>> = (0..eventpipe::MAX_SESSIONS)
        .map(|_| Arc::default())
        .collect();
    let sessions: Vec<Session> = received
        .iter()
        .enumerate()
        .map(|(i, sink)| {
            let sink = Arc::clone(sink);
            let provider = if i % 2 == 0 { "Slots-A" } else { "Slots-B" };
            let callback: eventpipe::ListenerCallback = Box::new(move |e| {
                if e.metadata.provider.starts_with("Slots-") {
                    sink.lock().unwrap().push(e.qualified_name());
                }
            });
            Session::start(SessionConfig::new(
                vec![ProviderConfig::new(provider)],
                Output::Listener(callback),
            ))
            .unwrap()
        })
        .collect();
    let extra = Session::start(SessionConfig::new(
        vec![ProviderConfig::new("Slots-A")],
        Output::Stream(Box::new(std::io::sink())),
    ));
    assert!(extra.unwrap_err().to_string().contains("64"));
    for n in 0..10u32 {
        write_event!(A, n);
        write_event!(B, n);
    }
    for s in sessions {
        s.stop().unwrap();
    }
    for (i, r) in received.iter().enumerate() {
        let want = if i % 2 == 0 { "Slots-A/A" } else { "Slots-B/B" };
        let got = r.lock().unwrap();
        assert_eq!(got.len(), 10, "session {i}");
        assert!(got.iter().all(|n| n == want), "session {i} got {got:?}");
    }
    assert!(
        !A.is_enabled() && !B.is_enabled(),
        "stopping every session disables the events"
    );
}
