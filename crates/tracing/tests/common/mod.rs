//! Shared by the test binaries: sessions to a file and the trace read back.

#![allow(dead_code, unreachable_pub)]

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use nettrace::{FormatVersion, TraceReader, Value};

/// One event of a trace, decoded.
#[derive(Debug, Clone)]
pub struct Rec {
    pub provider: String,
    pub name: String,
    pub id: u32,
    pub level: u32,
    pub opcode: Option<u8>,
    pub keywords: u64,
    pub thread: u64,
    pub fields: Vec<(String, Value)>,
}

impl Rec {
    pub fn field(&self, name: &str) -> &Value {
        &self
            .fields
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{} has no field {name}: {:?}", self.name, self.fields))
            .1
    }

    pub fn u64(&self, name: &str) -> u64 {
        match self.field(name) {
            Value::U64(v) => *v,
            other => panic!("{name} is not a u64: {other:?}"),
        }
    }

    pub fn str(&self, name: &str) -> &str {
        match self.field(name) {
            Value::String(v) => v,
            other => panic!("{name} is not a string: {other:?}"),
        }
    }

    pub fn field_names(&self) -> Vec<&str> {
        self.fields.iter().map(|(n, _)| n.as_str()).collect()
    }
}

/// A session to a temporary file, recording `specs` (`Name:Keywords:Level`).
pub struct FileSession {
    session: Session,
    path: std::path::PathBuf,
}

impl FileSession {
    pub fn start(tag: &str, specs: &[&str]) -> FileSession {
        FileSession::start_format(tag, specs, FormatVersion::V5)
    }

    pub fn start_format(tag: &str, specs: &[&str], format: FormatVersion) -> FileSession {
        let path = std::env::temp_dir().join(format!(
            "eventpipe-tracing-{}-{tag}.nettrace",
            std::process::id()
        ));
        let providers = specs
            .iter()
            .map(|s| ProviderConfig::parse(s).unwrap())
            .collect();
        let config = SessionConfig::new(providers, Output::File(path.clone()))
            .format(format)
            .rundown(false);
        FileSession {
            session: Session::start(config).unwrap(),
            path,
        }
    }

    /// Stops the session; returns the number of events it wrote and every event read back.
    pub fn stop(self) -> (u64, Vec<Rec>) {
        let stats = self.session.stop().unwrap();
        let bytes = std::fs::read(&self.path).unwrap();
        std::fs::remove_file(&self.path).ok();
        (stats.events_written, read(&bytes))
    }
}

pub fn read(bytes: &[u8]) -> Vec<Rec> {
    let mut r = TraceReader::from_slice(bytes).unwrap();
    let mut out = Vec::new();
    while let Some(e) = r.next_event().unwrap() {
        out.push(Rec {
            provider: e.metadata.provider.clone(),
            name: e.metadata.event_name.clone(),
            id: e.metadata.event_id,
            level: e.metadata.level,
            opcode: e.metadata.opcode,
            keywords: e.metadata.keywords,
            thread: e.thread_id(),
            fields: e
                .decode_payload()
                .unwrap()
                .into_iter()
                .map(|(n, v)| (n.to_string(), v))
                .collect(),
        });
    }
    assert!(
        r.is_finished(),
        "the trace ends with an end-of-stream marker"
    );
    assert_eq!(r.stats().lost_events, 0);
    out
}

/// The OS id of the calling thread, as eventpipe records it.
pub fn os_tid() -> u64 {
    let link = std::fs::read_link("/proc/thread-self").unwrap();
    link.file_name().unwrap().to_str().unwrap().parse().unwrap()
}

/// A value whose `Debug` counts how often it is formatted.
pub struct Counted<'a>(pub &'a std::sync::atomic::AtomicUsize, pub &'static str);

impl std::fmt::Debug for Counted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        f.write_str(self.1)
    }
}
