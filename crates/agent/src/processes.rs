//! The processes the agent can attach to, found as `eptrace ps` finds them (a live
//! diagnostics socket), rescanned every second: new ones are asked who they are, gone
//! ones are forgotten, and ones the agent may not attach to are listed with the reason.

use std::collections::BTreeMap;
use std::sync::Mutex;

use eventpipe_client::discover::{self, Endpoint};
use serde::Serialize;

/// The two kinds of target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RuntimeKind {
    Rust,
    Dotnet,
}

/// An attachable process.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Process {
    pub(crate) pid: u32,
    pub(crate) name: String,
    pub(crate) command_line: String,
    /// As `eptrace ps` says it: `Rust (eventpipe-rs 0.1.0)`, `.NET 8.0.0`.
    pub(crate) runtime: String,
    #[serde(skip)]
    pub(crate) kind: Option<RuntimeKind>,
    /// The socket's key: the process's start time, which tells a reused pid apart.
    #[serde(skip)]
    pub(crate) key: u64,
}

/// A process the agent will not attach to.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Skipped {
    pub(crate) pid: u32,
    pub(crate) reason: String,
    #[serde(skip)]
    key: u64,
}

/// What changed in one scan.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    pub(crate) started: Vec<Process>,
    pub(crate) exited: Vec<u32>,
    pub(crate) skipped: Vec<Skipped>,
}

#[derive(Debug, Default)]
struct Known {
    processes: BTreeMap<u32, Process>,
    skipped: BTreeMap<u32, Skipped>,
}

/// Every process the agent knows of.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    known: Mutex<Known>,
}

impl Registry {
    /// The attachable processes, by pid.
    pub(crate) fn list(&self) -> Vec<Process> {
        self.lock().processes.values().cloned().collect()
    }

    /// The processes skipped, with why.
    pub(crate) fn skipped(&self) -> Vec<Skipped> {
        self.lock().skipped.values().cloned().collect()
    }

    pub(crate) fn get(&self, pid: u32) -> Option<Process> {
        self.lock().processes.get(&pid).cloned()
    }

    pub(crate) fn skip_reason(&self, pid: u32) -> Option<String> {
        self.lock().skipped.get(&pid).map(|s| s.reason.clone())
    }

    /// The processes named `name`.
    pub(crate) fn by_name(&self, name: &str) -> Vec<Process> {
        self.lock()
            .processes
            .values()
            .filter(|p| p.name == name)
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Known> {
        // A panic elsewhere while holding the lock leaves a consistent map (every update
        // is one insert or remove), so the data is still good.
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks at the socket directory once; the questions to new processes are asked
    /// without holding the lock (each has the IPC client's answer timeout).
    pub(crate) fn scan(&self) -> Changes {
        let endpoints = discover::endpoints().unwrap_or_default();
        let mut changes = Changes::default();
        let (new, gone): (Vec<_>, Vec<u32>) = {
            let known = self.lock();
            let new = endpoints
                .iter()
                .filter(|e| {
                    known.processes.get(&e.pid).is_none_or(|p| p.key != e.key)
                        && known.skipped.get(&e.pid).is_none_or(|s| s.key != e.key)
                })
                .cloned()
                .collect();
            let gone = known
                .processes
                .values()
                .filter(|p| !endpoints.iter().any(|e| e.pid == p.pid && e.key == p.key))
                .map(|p| p.pid)
                .collect();
            (new, gone)
        };
        let mut found = Vec::new();
        for endpoint in new {
            match examine(&endpoint) {
                Ok(p) => found.push(p),
                Err(reason) => changes.skipped.push(Skipped {
                    pid: endpoint.pid,
                    reason,
                    key: endpoint.key,
                }),
            }
        }
        let mut known = self.lock();
        for pid in gone {
            known.processes.remove(&pid);
            changes.exited.push(pid);
        }
        known
            .skipped
            .retain(|pid, s| endpoints.iter().any(|e| e.pid == *pid && e.key == s.key));
        for s in &changes.skipped {
            known.skipped.insert(s.pid, s.clone());
        }
        for p in found {
            known.processes.insert(p.pid, p.clone());
            changes.started.push(p);
        }
        changes
    }
}

/// Asks a new process who it is (as `eptrace ps` does); the error says why it cannot be
/// attached to.
fn examine(endpoint: &Endpoint) -> Result<Process, String> {
    let p = discover::examine(endpoint).map_err(|why| eventpipe_client::with_causes(&why))?;
    let kind = if p.runtime.is_rust() {
        Some(RuntimeKind::Rust)
    } else if p.runtime.is_dotnet() {
        Some(RuntimeKind::Dotnet)
    } else {
        None
    };
    Ok(Process {
        pid: p.pid,
        name: p.name,
        command_line: p.command_line,
        runtime: p.runtime.to_string(),
        kind,
        key: endpoint.key,
    })
}
