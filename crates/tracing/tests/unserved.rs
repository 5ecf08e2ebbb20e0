//! A program that uses the layer but does not link the `eventpipe` runtime has no
//! diagnostics server, whatever its environment says: setting the layer up says so on stderr
//! instead of leaving it to record nothing. This test binary names nothing of `eventpipe`
//! (a dev-dependency here), so the runtime is not linked into it.

mod child;

#[test]
fn child_sets_up_the_layer() {
    if child::is_child() {
        let _layer = eventpipe_tracing::EventPipeLayer::new();
        let _again = eventpipe_tracing::EventPipeLayer::new();
    }
}

fn child_stderr(env: &[(&str, &str)]) -> String {
    String::from_utf8(child::run("child_sets_up_the_layer", env).stderr).unwrap()
}

#[test]
fn a_layer_without_the_runtime_says_nothing_can_attach_when_the_environment_asks() {
    assert!(!eventpipe_core::server::runtime_linked());
    let stderr = child_stderr(&[(eventpipe_core::server::ENABLE_VAR, "1")]);
    let warning = "does not link the `eventpipe` runtime";
    assert_eq!(
        stderr.matches(warning).count(),
        1,
        "once, however many layers: {stderr}"
    );
    assert!(stderr.contains("eventpipe-tracing's layer"), "{stderr}");
}

#[test]
fn a_layer_without_the_runtime_is_quiet_when_nothing_asks_for_a_server() {
    assert_eq!(child_stderr(&[]), "");
}
