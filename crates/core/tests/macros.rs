//! What the macros promise beyond types (the compile-fail examples on `define_event!` show
//! those): the provider may be any path, each argument is evaluated once, and the values
//! only while the event may be recorded.

mod telemetry {
    pub(crate) static APP: eventpipe_core::Provider = eventpipe_core::Provider::new("Test-Macros");
}

eventpipe_core::define_event! {
    static HIT = crate::telemetry::APP { id: 1, name: "Hit", level: eventpipe_core::Level::Verbose, keywords: 0 }
        (key: &str, n: u64);
}

#[test]
fn each_argument_is_evaluated_once_and_values_only_when_enabled() {
    let (mut events, mut values) = (0, 0);
    // Unregistered, an event reads as enabled, so its first write evaluates the values
    // (and registers it: no session records it).
    eventpipe_core::write_event!(
        {
            events += 1;
            &HIT
        },
        {
            values += 1;
            "a"
        },
        7
    );
    assert_eq!((events, values), (1, 1));
    assert!(!HIT.is_enabled());
    for _ in 0..3 {
        eventpipe_core::write_event!(
            {
                events += 1;
                &HIT
            },
            {
                values += 1;
                "a"
            },
            7
        );
    }
    assert_eq!(
        (events, values),
        (4, 1),
        "disabled: the values are not evaluated"
    );
    assert_eq!(HIT.descriptor().provider.name(), "Test-Macros");
    assert_eq!(HIT.descriptor().fields.len(), 2);
}
