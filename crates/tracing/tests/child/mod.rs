//! Runs one test of the calling test binary as a child process, so it starts with the
//! environment given (the diagnostics server reads its environment before `main`). Names
//! nothing of `eventpipe`, so a binary that includes it links the runtime only if it names
//! it itself.

use std::process::{Command, Output};

/// The variable that tells the child it is the child.
pub(crate) const CHILD: &str = "EVENTPIPE_TEST_CHILD";

/// Whether this process is the child.
pub(crate) fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Runs test `name` of this binary alone, with the diagnostics variables removed and then
/// `env` set; panics if it fails.
pub(crate) fn run(name: &str, env: &[(&str, &str)]) -> Output {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env_remove(eventpipe_core::server::ENABLE_VAR)
        .env_remove(eventpipe_core::server::PORTS_VAR)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "child failed: {out:?}");
    out
}
