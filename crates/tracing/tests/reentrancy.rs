//! The layer does not recurse: a tracing event emitted while it records (from a `Debug`
//! impl it formats, on the same thread) or from eventpipe's own threads (an in-process
//! listener that logs what it receives) is not recorded. Its own binary because it installs
//! a global default subscriber: with a global default tracing itself does not stop a
//! dispatch that re-enters on the same thread.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::FileSession;
use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_tracing::EventPipeLayer;
use tracing_subscriber::prelude::*;

static SEEN_BY_OTHER_LAYER: AtomicUsize = AtomicUsize::new(0);

struct CountingLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountingLayer {
    fn on_event(&self, e: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if e.metadata().target() == "reentry::nested" {
            SEEN_BY_OTHER_LAYER.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing_subscriber::registry()
            .with(EventPipeLayer::new())
            .with(CountingLayer)
            .init();
    });
}

/// Emits a tracing event whenever it is formatted.
struct Noisy;

impl std::fmt::Debug for Noisy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        tracing::info!(target: "reentry::nested", "from inside Debug");
        f.write_str("noisy")
    }
}

#[test]
fn an_event_emitted_while_the_layer_records_is_not_recorded() {
    install();
    let session = FileSession::start("nested", &["reentry-nested"]);
    tracing::info!(target: "reentry::nested", v = ?Noisy, "outer");
    let (written, recs) = session.stop();
    let messages: Vec<&str> = recs.iter().map(|r| r.str("Message")).collect();
    assert_eq!(messages, ["outer"]);
    assert_eq!(written, 1);
    assert_eq!(recs[0].str("v"), "noisy");
    // The registry and the other layer still got the nested event.
    assert_eq!(SEEN_BY_OTHER_LAYER.load(Ordering::SeqCst), 2);
}

#[test]
fn a_listener_that_logs_what_it_receives_does_not_feed_on_itself() {
    install();
    let received = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&received);
    let session = Session::start(
        SessionConfig::new(
            vec![ProviderConfig::new("reentry-listener")],
            Output::Listener(Box::new(move |e| {
                sink.lock().unwrap().push(e.metadata.event_name.clone());
                // The listener's own thread: recorded, this would come back to it for ever.
                tracing::info!(target: "reentry::listener", "echo");
            })),
        )
        .rundown(false)
        .flush_interval(Duration::from_millis(10)),
    )
    .unwrap();
    tracing::info!(target: "reentry::listener", "first");
    let deadline = Instant::now() + Duration::from_secs(10);
    while received.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the listener got nothing");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Several flush intervals: an echo would have come back by now.
    std::thread::sleep(Duration::from_millis(200));
    let stats = session.stop().unwrap();
    assert_eq!(stats.events_written, 1);
    assert_eq!(received.lock().unwrap().len(), 1);
}
