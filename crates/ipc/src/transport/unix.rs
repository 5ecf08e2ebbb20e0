//! Unix domain sockets (Linux, macOS).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::Error;

/// A connection to or from a diagnostics endpoint.
pub type Stream = std::os::unix::net::UnixStream;
/// A listening diagnostics endpoint.
pub type Listener = std::os::unix::net::UnixListener;

/// Connects to the endpoint at `path`.
pub fn connect(path: &Path) -> std::io::Result<Stream> {
    Stream::connect(path)
}

/// The start time of `pid` in clock ticks since boot, or `None` if it is not running.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is parenthesised and may contain anything; the fields
    // after its last ')' start at field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// The start time of `pid` in seconds since the Unix epoch (the .NET runtime's key on
/// macOS: `kp_proc.p_starttime.tv_sec`, which `proc_bsdinfo` carries as
/// `pbi_start_tvsec`), or `None` if it is not running.
#[cfg(target_vendor = "apple")]
#[allow(unsafe_code)]
pub fn start_time(pid: u32) -> Option<u64> {
    // SAFETY: an all-zero proc_bsdinfo is a valid value of a plain C struct.
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::proc_bsdinfo>() as libc::c_int;
    // SAFETY: `info` is `size` writable bytes; the flavor's result is a proc_bsdinfo.
    let n = unsafe {
        libc::proc_pidinfo(
            pid as libc::c_int,
            libc::PROC_PIDTBSDINFO,
            0,
            (&mut info as *mut libc::proc_bsdinfo).cast(),
            size,
        )
    };
    (n == size).then_some(info.pbi_start_tvsec)
}

/// Other Unixes have no port: no key, so no socket is ever taken for live.
#[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
pub fn start_time(_pid: u32) -> Option<u64> {
    None
}

/// Waits up to `timeout` for a connection on a non-blocking `listener`; `None` when none
/// came.
pub fn accept_within(listener: &Listener, timeout: Duration) -> std::io::Result<Option<Stream>> {
    let deadline = Instant::now() + timeout;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(Some(s));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Listens on `path`, reachable only by this user (mode 0600). The socket is bound under
/// a temporary name, restricted, then renamed into place, so no one else can connect in
/// between. A stale file at `path` is replaced.
pub fn listen_private(path: &Path) -> Result<Listener, Error> {
    let mut temp = path.as_os_str().to_owned();
    temp.push(".new");
    let temp = PathBuf::from(temp);
    let _ = std::fs::remove_file(&temp);
    let listener =
        Listener::bind(&temp).map_err(Error::io(format!("binding {}", temp.display())))?;
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
