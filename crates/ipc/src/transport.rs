//! Where diagnostics sockets live and how they are named, found and created.
//!
//! A process listens on `$TMPDIR/dotnet-diagnostic-{pid}-{key}-socket` (`/tmp` when
//! `TMPDIR` is unset or empty), where `{key}` is the process start time in clock ticks
//! since boot (field 22 of `/proc/{pid}/stat`). The key tells a live socket from a stale
//! one left by a killed process whose pid was reused.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use crate::Error;

const PREFIX: &str = "dotnet-diagnostic-";
const SUFFIX: &str = "-socket";

/// The directory diagnostics sockets are created in.
pub fn socket_dir() -> PathBuf {
    match std::env::var_os("TMPDIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from("/tmp"),
    }
}

/// The socket path of process `pid` started at `key`, in `dir`.
pub fn socket_path(dir: &Path, pid: u32, key: u64) -> PathBuf {
    dir.join(format!("{PREFIX}{pid}-{key}{SUFFIX}"))
}

/// The start time of `pid` in clock ticks since boot, or `None` if it is not running.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is parenthesised and may contain anything; the fields
    // after its last ')' start at field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
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
    let middle = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let (pid, key) = middle.split_once('-')?;
    Some((pid.parse().ok()?, key.parse().ok()?))
}

/// Every live diagnostics socket in `dir`, by pid. Sockets of processes that are gone, or
/// whose pid now belongs to a process started at another time, are skipped.
pub fn discover(dir: &Path) -> Result<Vec<Endpoint>, Error> {
    let entries =
        std::fs::read_dir(dir).map_err(Error::io(format!("listing {}", dir.display())))?;
    let mut found: Vec<Endpoint> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let (pid, key) = parse_name(entry.file_name().to_str()?)?;
            (start_time(pid)? == key).then(|| Endpoint {
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

/// Listens on `path`, reachable only by this user (mode 0600). The socket is bound under
/// a temporary name, restricted, then renamed into place, so no one else can connect in
/// between. A stale file at `path` is replaced.
pub fn listen_private(path: &Path) -> Result<UnixListener, Error> {
    let mut temp = path.as_os_str().to_owned();
    temp.push(".new");
    let temp = PathBuf::from(temp);
    let _ = std::fs::remove_file(&temp);
    let listener =
        UnixListener::bind(&temp).map_err(Error::io(format!("binding {}", temp.display())))?;
    let restrict = std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = restrict {
        let _ = std::fs::remove_file(&temp);
        return Err(Error::Io {
            what: format!("making {} private", path.display()),
            source: e,
        });
    }
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

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
