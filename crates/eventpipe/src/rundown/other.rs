//! Platforms without a port: no module list, no thread names by id.

use super::LoadedModule;

pub(super) fn loaded_modules() -> Vec<LoadedModule> {
    Vec::new()
}

pub(super) fn thread_name(_os_tid: u64) -> Option<String> {
    None
}
