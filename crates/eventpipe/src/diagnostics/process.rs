//! What `ProcessInfo` tells about this process.

use std::sync::OnceLock;

use eventpipe_ipc::ProcessInfo;

/// The product name `eptrace ps` recognises Rust processes by.
pub const RUNTIME_NAME: &str = "eventpipe-rs";

/// The OS name .NET reports (`RuntimeInformation`'s), and its runtime-identifier prefix.
#[cfg(windows)]
const OS: &str = "Windows";
#[cfg(windows)]
const RID_OS: &str = "win";
#[cfg(target_vendor = "apple")]
const OS: &str = "macOS";
#[cfg(target_vendor = "apple")]
const RID_OS: &str = "osx";
#[cfg(not(any(windows, target_vendor = "apple")))]
const OS: &str = "Linux";
#[cfg(not(any(windows, target_vendor = "apple")))]
const RID_OS: &str = "linux";

/// This process's description, computed once.
pub(crate) fn this_process() -> &'static ProcessInfo {
    static INFO: OnceLock<ProcessInfo> = OnceLock::new();
    INFO.get_or_init(|| {
        let exe = std::env::current_exe().ok();
        let mut command_line = exe
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        for arg in std::env::args_os().skip(1) {
            command_line.push(' ');
            command_line.push_str(&arg.to_string_lossy());
        }
        let entrypoint = exe
            .as_ref()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let arch = match std::env::consts::ARCH {
            "x86_64" => "x64",
            "x86" => "x86",
            "aarch64" => "arm64",
            "arm" => "arm32",
            _ => "Unknown",
        };
        ProcessInfo {
            process_id: u64::from(std::process::id()),
            runtime_cookie: runtime_cookie(),
            command_line,
            os: OS.into(),
            arch: arch.into(),
            entrypoint_assembly: Some(entrypoint),
            runtime_version: Some(format!("{RUNTIME_NAME} {}", env!("CARGO_PKG_VERSION"))),
            runtime_identifier: Some(format!("{RID_OS}-{arch}")),
        }
    })
}

/// A GUID unique to this process instance: a hash of the pid, its start time and the
/// current time, shaped as a version-4 GUID.
fn runtime_cookie() -> [u8; 16] {
    let mut h = sha1_smol::Sha1::new();
    h.update(&std::process::id().to_le_bytes());
    let start = eventpipe_ipc::transport::start_time(std::process::id()).unwrap_or(0);
    h.update(&start.to_le_bytes());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.update(&now.to_le_bytes());
    let mut g = [0u8; 16];
    g.copy_from_slice(&h.digest().bytes()[..16]);
    g[7] = (g[7] & 0x0F) | 0x40;
    g[8] = (g[8] & 0x3F) | 0x80;
    g
}
