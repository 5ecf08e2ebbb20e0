//! What a trace needs to be understood after the process is gone, written once at the end
//! of a session that asked for rundown:
//!
//! * `Microsoft-DotNETCore-EventPipe/ProcessInfo`: command line, OS and architecture, as
//!   .NET writes it;
//! * `EventPipeRs-Rundown/Module`: every loaded object (path, base address, size, load
//!   bias, build id: ELF on Linux, Mach-O on macOS, PE on Windows), so a symbolizer can map
//!   instruction pointers back to files on disk;
//! * `EventPipeRs-Rundown/Thread`: the names of the threads that wrote to the session (as
//!   the program named them) and of the threads events were about (the CPU sampler's
//!   sampled threads, which may never write: the kernel's name, read when first seen), so
//!   V5 traces (whose events carry only a thread id) can show them.
//!
//! The events are written by the drain thread directly into the trace, not through the
//! per-thread buffers: they describe the session rather than happen in it, and the drain
//! never waits on itself (Block mode's rule).

use nettrace::{EventMetadata, FieldDesc, FieldType};

#[cfg(any(target_os = "linux", target_os = "android"))]
#[path = "linux.rs"]
mod platform;
#[cfg(target_vendor = "apple")]
#[path = "macos.rs"]
mod platform;
#[cfg(windows)]
#[path = "windows.rs"]
mod platform;
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_vendor = "apple",
    windows
)))]
#[path = "other.rs"]
mod platform;

/// The provider of the Module and Thread rundown events.
pub const RUNDOWN_PROVIDER: &str = "EventPipeRs-Rundown";
/// The provider .NET writes its ProcessInfo event under.
pub(crate) const PROCESS_INFO_PROVIDER: &str = "Microsoft-DotNETCore-EventPipe";

/// Metadata ids for the rundown events, far above the ids the drain gives registered
/// events (registry index + 1).
pub(crate) const PROCESS_INFO_METADATA_ID: u32 = u32::MAX >> 1;
pub(crate) const MODULE_METADATA_ID: u32 = PROCESS_INFO_METADATA_ID - 1;
pub(crate) const THREAD_METADATA_ID: u32 = PROCESS_INFO_METADATA_ID - 2;

/// Event id of `EventPipeRs-Rundown/Module`.
pub const MODULE_EVENT_ID: u32 = 1;
/// Event id of `EventPipeRs-Rundown/Thread`.
pub const THREAD_EVENT_ID: u32 = 2;

fn metadata(
    metadata_id: u32,
    provider: &str,
    event_id: u32,
    name: &str,
    fields: &[(&str, FieldType)],
) -> EventMetadata {
    EventMetadata {
        metadata_id,
        provider: provider.into(),
        event_id,
        event_name: name.into(),
        version: 1,
        fields: fields
            .iter()
            .map(|(n, ty)| FieldDesc {
                name: (*n).into(),
                ty: ty.clone(),
            })
            .collect(),
        ..Default::default()
    }
}

/// The metadata of the three rundown events.
pub(crate) fn all_metadata() -> Vec<EventMetadata> {
    use FieldType::{UInt64, Utf16String};
    vec![
        metadata(
            PROCESS_INFO_METADATA_ID,
            PROCESS_INFO_PROVIDER,
            1,
            "ProcessInfo",
            &[
                ("CommandLine", Utf16String),
                ("OSInformation", Utf16String),
                ("ArchInformation", Utf16String),
            ],
        ),
        metadata(
            MODULE_METADATA_ID,
            RUNDOWN_PROVIDER,
            MODULE_EVENT_ID,
            "Module",
            &[
                ("Path", Utf16String),
                ("BaseAddress", UInt64),
                ("Size", UInt64),
                ("LoadBias", UInt64),
                ("BuildId", Utf16String),
            ],
        ),
        metadata(
            THREAD_METADATA_ID,
            RUNDOWN_PROVIDER,
            THREAD_EVENT_ID,
            "Thread",
            &[("ThreadId", UInt64), ("Name", Utf16String)],
        ),
    ]
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend(s.encode_utf16().chain([0]).flat_map(u16::to_le_bytes));
}

/// The ProcessInfo payload.
pub(crate) fn process_info_payload() -> Vec<u8> {
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    let mut payload = Vec::new();
    for s in [
        command_line.as_str(),
        std::env::consts::OS,
        std::env::consts::ARCH,
    ] {
        put_str(&mut payload, s);
    }
    payload
}

/// The Thread payload.
pub(crate) fn thread_payload(os_tid: u64, name: &str) -> Vec<u8> {
    let mut payload = os_tid.to_le_bytes().to_vec();
    put_str(&mut payload, name);
    payload
}

/// One loaded object (an ELF object, a Mach-O image or a PE module).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedModule {
    /// Absolute path of the file it was loaded from (on Linux the main program's through
    /// `/proc/self/exe`); the kernel's vDSO has a name but no file.
    pub path: String,
    /// Lowest mapped address: load bias + the lowest `PT_LOAD` virtual address (a Mach-O
    /// image's lowest segment but `__PAGEZERO`; a PE module's image base).
    pub base_address: u64,
    /// Bytes from `base_address` to the end of the highest `PT_LOAD` segment (segment,
    /// or the PE image's size).
    pub size: u64,
    /// What was added to the file's virtual addresses when it was loaded: an instruction
    /// pointer `ip` is at file virtual address `ip - load_bias`.
    pub load_bias: u64,
    /// The GNU build id in lowercase hex (a Mach-O image's `LC_UUID`), empty when the
    /// object has none (PE modules, for now).
    pub build_id: String,
}

impl LoadedModule {
    /// The Module payload.
    pub(crate) fn payload(&self) -> Vec<u8> {
        let mut payload = Vec::new();
        put_str(&mut payload, &self.path);
        payload.extend_from_slice(&self.base_address.to_le_bytes());
        payload.extend_from_slice(&self.size.to_le_bytes());
        payload.extend_from_slice(&self.load_bias.to_le_bytes());
        put_str(&mut payload, &self.build_id);
        payload
    }
}

/// Every object loaded in this process (main program first): ELF objects through
/// `dl_iterate_phdr` on Linux, Mach-O images through dyld on macOS, PE modules through
/// `EnumProcessModules` on Windows.
pub fn loaded_modules() -> Vec<LoadedModule> {
    platform::loaded_modules()
}

/// The name the system gives thread `os_tid` of this process, if it is still alive and
/// the platform tells (Linux: `/proc/self/task/{tid}/comm`; Windows:
/// `GetThreadDescription`; macOS: no way by id, so only names threads gave themselves
/// through the writer reach the trace).
pub(crate) fn kernel_thread_name(os_tid: u64) -> Option<String> {
    platform::thread_name(os_tid)
}
