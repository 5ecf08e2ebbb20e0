//! What several of eptrace's test binaries share.
#![allow(dead_code)] // each test binary uses part of it

use std::path::PathBuf;
use std::process::Command;

/// The example `name` of workspace package `package`, built (once per call site's
/// `OnceLock`) into this test's target dir.
pub(crate) fn build_example(package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let target_dir = profile_dir.parent().unwrap();
    let status = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args(["build", "--quiet", "-p", package, "--example", name])
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the {name} example failed");
    profile_dir.join("examples").join(name)
}
