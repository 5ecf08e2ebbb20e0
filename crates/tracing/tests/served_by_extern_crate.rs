//! The warning's advice works: `extern crate eventpipe;`, naming nothing else of it, links
//! the runtime, whose start-up constructor then starts the server the environment asks for.

extern crate eventpipe;

mod child;

#[test]
fn child_sets_up_the_layer() {
    if !child::is_child() {
        return;
    }
    let _layer = eventpipe_tracing::EventPipeLayer::new();
    let pid = std::process::id();
    let served = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .any(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.starts_with(&format!("dotnet-diagnostic-{pid}-")) && name.ends_with("-socket")
        });
    println!("served={served}");
}

#[test]
fn extern_crate_eventpipe_links_the_runtime_the_environment_starts() {
    assert!(eventpipe_core::server::runtime_linked());
    let out = child::run(
        "child_sets_up_the_layer",
        &[(eventpipe_core::server::ENABLE_VAR, "1")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("served=true"),
        "no socket: {stdout}{stderr}"
    );
    assert!(!stderr.contains("does not link"), "{stderr}");
}
