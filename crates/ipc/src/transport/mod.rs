//! Where diagnostics endpoints live, how they are named, found and created, and the
//! connection type both ends speak over, as the .NET runtime has them:
//!
//! | | Linux | macOS | Windows |
//! |---|---|---|---|
//! | endpoint | Unix domain socket | Unix domain socket | named pipe |
//! | name | `$TMPDIR/dotnet-diagnostic-{pid}-{key}-socket` | the same | `\\.\pipe\dotnet-diagnostic-{pid}` |
//! | `{key}` | start time, clock ticks since boot (`/proc/{pid}/stat` field 22) | start time, seconds since the epoch (`proc_pidinfo`) | none |
//! | [`Stream`], [`Listener`] | `UnixStream`, `UnixListener` | the same | `windows::PipeStream`, `windows::PipeListener` |
//!
//! `$TMPDIR` falls back to `/tmp` when unset or empty. The key tells a live socket from a
//! stale one left by a killed process whose pid was reused; a named pipe vanishes with
//! its process, so Windows needs none. Everything above the transport (the message
//! framing, the commands, the trace stream) is the same on every platform.

use std::path::{Path, PathBuf};

use crate::Error;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::{accept_within, connect, listen_private, start_time, Listener, Stream};

#[cfg(windows)]
pub mod windows;
#[cfg(windows)]
pub use windows::{
    accept_within, connect, listen_private, start_time, PipeListener as Listener,
    PipeStream as Stream,
};

const PREFIX: &str = "dotnet-diagnostic-";
const SUFFIX: &str = "-socket";

/// The directory diagnostics endpoints are created in: `$TMPDIR` (else `/tmp`); on
/// Windows the named pipe namespace, `\\.\pipe\`.
pub fn socket_dir() -> PathBuf {
    if cfg!(windows) {
        return PathBuf::from(r"\\.\pipe\");
    }
    match std::env::var_os("TMPDIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from("/tmp"),
    }
}

/// The endpoint of process `pid` started at `key`, in `dir` (on Windows the key is not
/// part of the name).
pub fn socket_path(dir: &Path, pid: u32, key: u64) -> PathBuf {
    if cfg!(windows) {
        dir.join(format!("{PREFIX}{pid}"))
    } else {
        dir.join(format!("{PREFIX}{pid}-{key}{SUFFIX}"))
    }
}

/// A process's diagnostics socket, found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The process id in the name.
    pub pid: u32,
    /// The disambiguation key in the name.
    pub key: u64,
    /// The socket's path.
    pub path: PathBuf,
}

fn parse_name(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix(PREFIX)?;
    if cfg!(windows) {
        return Some((rest.parse().ok()?, 0));
    }
    let middle = rest.strip_suffix(SUFFIX)?;
    let (pid, key) = middle.split_once('-')?;
    Some((pid.parse().ok()?, key.parse().ok()?))
}

/// Whether the endpoint named for `pid` and `key` belongs to the running process `pid`.
fn is_live(pid: u32, key: u64) -> bool {
    // A named pipe exists only while its server does.
    cfg!(windows) || start_time(pid) == Some(key)
}

/// Every live diagnostics endpoint in `dir`, by pid. Sockets of processes that are gone,
/// or whose pid now belongs to a process started at another time, are skipped.
pub fn discover(dir: &Path) -> Result<Vec<Endpoint>, Error> {
    let entries =
        std::fs::read_dir(dir).map_err(Error::io(format!("listing {}", dir.display())))?;
    let mut found: Vec<Endpoint> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let (pid, key) = parse_name(entry.file_name().to_str()?)?;
            is_live(pid, key).then(|| Endpoint {
                pid,
                key,
                path: entry.path(),
            })
        })
        .collect();
    found.sort_by_key(|e| e.pid);
    Ok(found)
}

/// The live diagnostics socket of `pid` in `dir`.
pub fn find(dir: &Path, pid: u32) -> Result<Endpoint, Error> {
    discover(dir)?
        .into_iter()
        .find(|e| e.pid == pid)
        .ok_or_else(|| Error::NoSocket {
            pid,
            dir: dir.to_path_buf(),
        })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn names_parse_and_stale_sockets_are_skipped() {
        assert_eq!(
            parse_name("dotnet-diagnostic-42-9001-socket"),
            Some((42, 9001))
        );
        assert_eq!(parse_name("dotnet-diagnostic-42-9001-socket.new"), None);
        assert_eq!(parse_name("clr-debug-pipe-42-9001-in"), None);
        let dir = std::env::temp_dir().join(format!("ep-ipc-discover-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let me = std::process::id();
        let key = start_time(me).unwrap();
        let live = socket_path(&dir, me, key);
        let _l = listen_private(&live).unwrap();
        // Same pid, another start time: a leftover of an earlier process.
        let stale = socket_path(&dir, me, key + 1);
        std::fs::write(&stale, b"").unwrap();
        let found = discover(&dir).unwrap();
        assert_eq!(
            found,
            vec![Endpoint {
                pid: me,
                key,
                path: live.clone()
            }]
        );
        let mode = std::fs::metadata(&live).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
