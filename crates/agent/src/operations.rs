//! Operations: collections that write to the egress folder, started by a request or a
//! rule. Each has an id, a state the API shows, and a flag that cancels it. The list keeps
//! every running operation and the latest [`KEEP_ENDED`] ended ones.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;

/// Ended operations kept for `GET /operations`.
const KEEP_ENDED: usize = 1000;

/// Where an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum State {
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

/// What the API shows of an operation.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Status {
    pub(crate) operation_id: String,
    /// `trace`, `gcdump` or `heap`.
    pub(crate) kind: &'static str,
    pub(crate) pid: u32,
    pub(crate) process: String,
    /// The rule that started it; none for a request.
    pub(crate) rule: Option<String>,
    pub(crate) state: State,
    pub(crate) created: String,
    pub(crate) ended: Option<String>,
    /// The file, once complete.
    pub(crate) egress_path: Option<String>,
    pub(crate) error: Option<String>,
    /// What it said on the way (fallbacks, warnings).
    pub(crate) notes: Vec<String>,
}

/// A running operation's handle.
#[derive(Debug, Clone)]
pub(crate) struct Handle {
    pub(crate) id: String,
    pub(crate) cancel: Arc<AtomicBool>,
    table: Arc<Table>,
}

#[derive(Debug, Default)]
struct Table {
    entries: Mutex<BTreeMap<u64, (Status, Arc<AtomicBool>)>>,
    next: AtomicU64,
}

/// Every operation.
#[derive(Debug, Clone, Default)]
pub(crate) struct Operations {
    table: Arc<Table>,
}

impl Operations {
    /// Records a new running operation.
    pub(crate) fn start(
        &self,
        kind: &'static str,
        pid: u32,
        process: &str,
        rule: Option<&str>,
    ) -> Handle {
        let seq = self.table.next.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("{seq:08x}");
        let cancel = Arc::new(AtomicBool::new(false));
        let status = Status {
            operation_id: id.clone(),
            kind,
            pid,
            process: process.to_owned(),
            rule: rule.map(str::to_owned),
            state: State::Running,
            created: now(),
            ended: None,
            egress_path: None,
            error: None,
            notes: Vec::new(),
        };
        let mut entries = self.lock();
        entries.insert(seq, (status, Arc::clone(&cancel)));
        let ended: Vec<u64> = entries
            .iter()
            .filter(|(_, (s, _))| s.state != State::Running)
            .map(|(k, _)| *k)
            .collect();
        for k in ended.iter().take(ended.len().saturating_sub(KEEP_ENDED)) {
            entries.remove(k);
        }
        Handle {
            id,
            cancel,
            table: Arc::clone(&self.table),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (Status, Arc<AtomicBool>)>> {
        lock(&self.table)
    }

    /// Every operation, oldest first.
    pub(crate) fn list(&self) -> Vec<Status> {
        self.lock().values().map(|(s, _)| s.clone()).collect()
    }

    pub(crate) fn get(&self, id: &str) -> Option<Status> {
        let seq = parse_id(id)?;
        self.lock().get(&seq).map(|(s, _)| s.clone())
    }

    /// Asks a running operation to stop; `None`: no such operation.
    pub(crate) fn cancel(&self, id: &str) -> Option<Status> {
        let seq = parse_id(id)?;
        let entries = self.lock();
        let (status, flag) = entries.get(&seq)?;
        flag.store(true, Ordering::Relaxed);
        Some(status.clone())
    }

    /// Cancels every running operation (the agent is stopping).
    pub(crate) fn cancel_all(&self) {
        for (status, flag) in self.lock().values() {
            if status.state == State::Running {
                flag.store(true, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn running(&self) -> usize {
        self.lock()
            .values()
            .filter(|(s, _)| s.state == State::Running)
            .count()
    }

    /// How many there are in each state.
    pub(crate) fn counts(&self) -> [(State, usize); 4] {
        let entries = self.lock();
        [
            State::Running,
            State::Succeeded,
            State::Failed,
            State::Cancelled,
        ]
        .map(|state| {
            (
                state,
                entries.values().filter(|(s, _)| s.state == state).count(),
            )
        })
    }
}

fn lock(table: &Table) -> std::sync::MutexGuard<'_, BTreeMap<u64, (Status, Arc<AtomicBool>)>> {
    // Every update under the lock is a whole assignment; a poisoned map is still good.
    table.entries.lock().unwrap_or_else(|e| e.into_inner())
}

fn parse_id(id: &str) -> Option<u64> {
    if id.len() != 8 {
        return None;
    }
    u64::from_str_radix(id, 16).ok()
}

fn now() -> String {
    eventpipe_counters::iso8601(SystemTime::now())
}

impl Handle {
    fn update(&self, f: impl FnOnce(&mut Status)) {
        if let Some(seq) = parse_id(&self.id) {
            if let Some((status, _)) = lock(&self.table).get_mut(&seq) {
                f(status);
            }
        }
    }

    /// Something to tell whoever looks at the operation.
    pub(crate) fn note(&self, note: &str) {
        self.update(|s| {
            if s.notes.len() < 32 {
                s.notes.push(note.to_owned());
            }
        });
    }

    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// The operation ended: with its file, or with an error (a cancelled one says so).
    pub(crate) fn finish(&self, outcome: Result<String, String>) {
        let cancelled = self.cancelled();
        self.update(|s| {
            s.ended = Some(now());
            match outcome {
                Ok(path) => {
                    s.state = State::Succeeded;
                    s.egress_path = Some(path);
                }
                Err(e) => {
                    s.state = if cancelled {
                        State::Cancelled
                    } else {
                        State::Failed
                    };
                    s.error = Some(e);
                }
            }
        });
    }
}
