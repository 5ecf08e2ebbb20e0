//! Reverse ("connect") diagnostic ports, configured like .NET's:
//! `DOTNET_DiagnosticPorts=<path>[,suspend|,nosuspend][;<path>...]`.
//!
//! For each port a thread connects out (retrying with a growing delay), sends the
//! advertisement, serves the one command the tool sends, and connects again. A `suspend`
//! port (the default) holds the process's startup until a `ResumeRuntime` arrives on it,
//! so a tool that starts the program loses none of its early events.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use eventpipe_ipc::advertise::Advertise;

use super::{process, server, PORTS_VAR};

/// The environment variable bounding the startup suspension, in milliseconds.
pub const SUSPEND_TIMEOUT_VAR: &str = "EVENTPIPE_SUSPEND_TIMEOUT_MS";
const DEFAULT_SUSPEND_TIMEOUT: Duration = Duration::from_secs(30);

/// One configured port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Port {
    pub(crate) path: PathBuf,
    pub(crate) suspend: bool,
}

/// Parses a `DOTNET_DiagnosticPorts` value. As in .NET, the first suspend tag wins, and a
/// configuration with only tags takes its first tag as the address.
pub(crate) fn parse_ports(value: &str) -> Vec<Port> {
    value
        .split(';')
        .filter_map(|config| {
            let mut parts = config.split(',').map(str::trim).filter(|p| !p.is_empty());
            let address = parts.next()?;
            let mut suspend = None;
            for tag in parts {
                match tag.to_ascii_lowercase().as_str() {
                    "suspend" => suspend = suspend.or(Some(true)),
                    "nosuspend" => suspend = suspend.or(Some(false)),
                    _ => {}
                }
            }
            Some(Port {
                path: PathBuf::from(address),
                suspend: suspend.unwrap_or(true),
            })
        })
        .collect()
}

/// Counts suspend ports still waiting for `ResumeRuntime`.
#[derive(Debug, Default)]
pub(crate) struct Startup {
    waiting: Mutex<usize>,
    resumed: Condvar,
}

impl Startup {
    fn resume_one(&self, port: &mut bool) {
        if std::mem::take(port) {
            let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            *w = w.saturating_sub(1);
            self.resumed.notify_all();
        }
    }

    /// Blocks until every suspend port has resumed, or the timeout passes.
    fn wait(&self, ports: &[Port]) {
        let timeout = std::env::var(SUSPEND_TIMEOUT_VAR)
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_SUSPEND_TIMEOUT);
        let start = Instant::now();
        let mut told = false;
        let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        while *w > 0 {
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                eprintln!(
                    "eventpipe: no ResumeRuntime within {timeout:?} on {}; starting anyway",
                    describe(ports)
                );
                return;
            }
            if !told && elapsed >= Duration::from_secs(5) {
                told = true;
                eprintln!(
                    "eventpipe: paused at startup, waiting for a diagnostics tool to send \
                     ResumeRuntime on {} ({PORTS_VAR})",
                    describe(ports)
                );
            }
            let step = (timeout - elapsed).min(Duration::from_secs(1));
            w = self
                .resumed
                .wait_timeout(w, step)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

fn describe(ports: &[Port]) -> String {
    ports
        .iter()
        .filter(|p| p.suspend)
        .map(|p| p.path.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Starts a thread per port and, if any suspends, waits for their `ResumeRuntime`.
pub(crate) fn start(ports: Vec<Port>) {
    let startup = Arc::new(Startup::default());
    *startup.waiting.lock().unwrap_or_else(|p| p.into_inner()) =
        ports.iter().filter(|p| p.suspend).count();
    for port in &ports {
        let port = port.clone();
        let startup = Arc::clone(&startup);
        let spawned = std::thread::Builder::new()
            .name("eventpipe-ipc-reverse".into())
            .spawn(move || connect_loop(port, &startup));
        if spawned.is_err() {
            eprintln!("eventpipe: could not start a thread for a diagnostic port");
        }
    }
    startup.wait(&ports);
}

fn connect_loop(port: Port, startup: &Startup) -> ! {
    let mut suspended = port.suspend;
    let mut delay = Duration::from_millis(10);
    let advertise = Advertise {
        runtime_cookie: process::this_process().runtime_cookie,
        process_id: u64::from(std::process::id()),
    };
    loop {
        let connected = eventpipe_ipc::transport::connect(&port.path).and_then(|mut s| {
            super::no_sigpipe(&s)?;
            s.write_all(&advertise.encode())?;
            Ok(s)
        });
        match connected {
            Ok(stream) => {
                delay = Duration::from_millis(10);
                if server::serve_reverse(stream) == server::Served::Resume {
                    startup.resume_one(&mut suspended);
                }
            }
            Err(_) => {
                std::thread::sleep(delay);
                delay = (delay * 5 / 4).min(Duration::from_millis(500));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_parse_like_dotnet() {
        let ports = parse_ports("/tmp/a.sock;/tmp/b.sock,nosuspend,suspend; ;nosuspend,connect");
        assert_eq!(
            ports,
            vec![
                Port {
                    path: "/tmp/a.sock".into(),
                    suspend: true
                },
                Port {
                    path: "/tmp/b.sock".into(),
                    suspend: false
                },
                Port {
                    path: "nosuspend".into(),
                    suspend: true
                },
            ]
        );
    }
}
