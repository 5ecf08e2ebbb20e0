//! Shared by the counters tests: a listener session that keeps every `EventCounters`
//! event, decoded by the nettrace reader.

#![allow(dead_code)] // each test binary uses a part

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use nettrace::{FieldType, Value};

/// One published counter value, as a reader sees it.
#[derive(Debug, Clone)]
pub(crate) struct Published {
    pub(crate) provider: String,
    pub(crate) event_id: u32,
    pub(crate) level: u32,
    pub(crate) keywords: u64,
    /// The metadata's top-level fields, as names and type codes (nested).
    pub(crate) shape: String,
    /// The `Payload` struct's fields.
    pub(crate) fields: BTreeMap<String, Value>,
    pub(crate) at: Instant,
}

impl Published {
    pub(crate) fn name(&self) -> &str {
        self.fields["Name"].as_str().unwrap()
    }
    pub(crate) fn str(&self, field: &str) -> &str {
        self.fields[field].as_str().unwrap()
    }
    pub(crate) fn f64(&self, field: &str) -> f64 {
        self.fields[field].as_f64().unwrap()
    }
}

pub(crate) fn shape(fields: &[nettrace::FieldDesc]) -> String {
    fields
        .iter()
        .map(|f| match &f.ty {
            FieldType::Object(inner) => format!("{}:{{{}}}", f.name, shape(inner)),
            other => format!("{}:{other:?}", f.name),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A running listener session and what it received.
pub(crate) struct Collector {
    pub(crate) session: Session,
    pub(crate) events: Arc<Mutex<Vec<Published>>>,
}

impl Collector {
    /// Starts a session with these `Name:Keywords:Level:FilterArgs` specs.
    pub(crate) fn start(specs: &[&str]) -> Collector {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        let callback: eventpipe::ListenerCallback = Box::new(move |e| {
            if e.metadata.event_name != "EventCounters" {
                return;
            }
            let decoded = e
                .decode_payload()
                .expect("an EventCounters payload decodes");
            let Some((_, Value::Object(outer))) = decoded.into_iter().next() else {
                panic!("EventCounters without its outer struct")
            };
            let Some((_, Value::Object(payload))) = outer.into_iter().find(|(n, _)| n == "Payload")
            else {
                panic!("EventCounters without Payload")
            };
            sink.lock().unwrap().push(Published {
                provider: e.metadata.provider.clone(),
                event_id: e.metadata.event_id,
                level: e.metadata.level,
                keywords: e.metadata.keywords,
                shape: shape(&e.metadata.fields),
                fields: payload.into_iter().collect(),
                at: Instant::now(),
            });
        });
        let providers = specs
            .iter()
            .map(|s| ProviderConfig::parse(s).unwrap())
            .collect();
        let mut config = SessionConfig::new(providers, Output::Listener(callback));
        config.flush_interval = Duration::from_millis(20);
        Collector {
            session: Session::start(config).unwrap(),
            events,
        }
    }

    /// The events of counter `name` so far.
    pub(crate) fn of(&self, name: &str) -> Vec<Published> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.name() == name)
            .cloned()
            .collect()
    }

    /// Waits (at most `limit`) until `done` holds for the events of `name`.
    pub(crate) fn wait_for(
        &self,
        name: &str,
        limit: Duration,
        done: impl Fn(&[Published]) -> bool,
    ) -> Vec<Published> {
        let start = Instant::now();
        loop {
            let events = self.of(name);
            if done(&events) || start.elapsed() > limit {
                return events;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub(crate) fn stop(self) -> Vec<Published> {
        self.session.stop().unwrap();
        let events = self.events.lock().unwrap().clone();
        events
    }
}

/// Names of this process's threads.
pub(crate) fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

/// The total of a Sum counter's increments.
pub(crate) fn total_increment(events: &[Published]) -> f64 {
    events.iter().map(|p| p.f64("Increment")).sum()
}
