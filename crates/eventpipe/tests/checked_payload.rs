//! An untyped event's fill is held to its declared layout: puts of the declared kinds (a
//! struct's members one after the other) are written and read back as declared; a value of
//! another kind, one too many or one missing writes nothing (a debug build panics, naming
//! the event and the field), since readers would misparse every field after the break.
//! The unchecked write puts the same encodings, and in a debug build checks the same way.

use std::sync::{Arc, Mutex};

use eventpipe::{
    EventDescriptor, FieldKind, FieldSpec, Level, Output, PayloadWriter, Provider, ProviderConfig,
    Session, SessionConfig, UncheckedPayloadWriter,
};
use nettrace::Value;

static CHECKED: Provider = Provider::new("Test-CheckedPayload");
const POINT: &[FieldSpec] = &[
    FieldSpec {
        name: "X",
        kind: FieldKind::U32,
    },
    FieldSpec {
        name: "Y",
        kind: FieldKind::F64,
    },
];
static SHAPE: EventDescriptor = EventDescriptor::new(
    &CHECKED,
    1,
    0,
    "Shape",
    Level::Informational,
    0,
    0,
    &[
        FieldSpec {
            name: "Id",
            kind: FieldKind::U64,
        },
        FieldSpec {
            name: "Name",
            kind: FieldKind::Str,
        },
        FieldSpec {
            name: "At",
            kind: FieldKind::Struct(POINT),
        },
        FieldSpec {
            name: "Tags",
            kind: FieldKind::U32Array,
        },
    ],
);

/// The payloads of the events `write` writes while a session records the provider. One
/// test records at a time: a session records every thread's writes, so tests running
/// side by side would see each other's events.
fn recorded(write: impl FnOnce()) -> Vec<Vec<(String, Value)>> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let session = Session::start(SessionConfig::new(
        vec![ProviderConfig::new("Test-CheckedPayload")],
        Output::Listener(Box::new(move |e| {
            if e.metadata.provider == "Test-CheckedPayload" {
                let fields = e.decode_payload().unwrap();
                let fields = fields
                    .into_iter()
                    .map(|(n, v)| (n.to_string(), v))
                    .collect();
                sink.lock().unwrap().push(fields);
            }
        })),
    ))
    .unwrap();
    write();
    session.stop().unwrap();
    let seen = seen.lock().unwrap();
    seen.clone()
}

/// Puts `SHAPE`'s fields through either writer: the same calls, the same encodings.
macro_rules! put_all {
    ($w:expr) => {{
        let w = $w;
        w.put(&42u64);
        w.put_fmt(format_args!("{}-{}", "sq\0uare", 2));
        w.put(&3u32);
        w.put(&0.5f64);
        w.put(&[7u32, 8][..]);
    }};
}

fn put_all(w: &mut PayloadWriter<'_>) {
    put_all!(w)
}

fn put_all_unchecked(w: &mut UncheckedPayloadWriter<'_>) {
    put_all!(w)
}

#[test]
fn a_fill_of_the_declared_kinds_is_written_and_reads_back_as_declared() {
    assert_reads_back_as_declared(recorded(|| SHAPE.write_with(put_all)));
}

#[test]
fn an_unchecked_fill_puts_the_same_encodings() {
    // SAFETY: `put_all_unchecked` puts SHAPE's declared fields, in order.
    let events = recorded(|| unsafe { SHAPE.write_unchecked(put_all_unchecked) });
    assert_reads_back_as_declared(events);
}

fn assert_reads_back_as_declared(events: Vec<Vec<(String, Value)>>) {
    assert_eq!(events.len(), 1);
    let fields = &events[0];
    let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["Id", "Name", "At", "Tags"]);
    assert_eq!(fields[0].1.as_u64(), Some(42));
    assert_eq!(fields[1].1.as_str(), Some("sq\u{FFFD}uare-2"));
    let Value::Object(at) = &fields[2].1 else {
        panic!("At is not a struct: {:?}", fields[2].1)
    };
    assert_eq!(at[0].1.as_u64(), Some(3));
    assert_eq!(at[1].1, Value::F64(0.5));
    assert_eq!(
        fields[3].1,
        Value::Array(vec![Value::U32(7), Value::U32(8)])
    );
}

/// Writes `fill` as `SHAPE`: in a debug build the write panics with `expected`; in a
/// release build nothing is written.
fn spoilt(fill: fn(&mut PayloadWriter<'_>), expected: &str) {
    let result = std::panic::catch_unwind(|| recorded(|| SHAPE.write_with(fill)));
    if cfg!(debug_assertions) {
        let panic = result.expect_err("a spoilt payload panics in a debug build");
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            message.contains("Test-CheckedPayload/Shape not written"),
            "{message}"
        );
        assert!(message.contains(expected), "{message}");
    } else {
        assert_eq!(result.unwrap(), Vec::<Vec<(String, Value)>>::new());
    }
}

#[test]
fn a_value_of_another_kind_spoils_the_payload() {
    spoilt(
        |w| {
            w.put(&42u64);
            w.put(&1u32);
        },
        "field 1 is declared Str but was put as U32",
    );
}

#[test]
fn the_fields_after_a_break_do_not_mend_the_payload() {
    spoilt(
        |w| {
            w.put(&42u64);
            w.put(&1u32);
            w.put(&3u32);
            w.put(&0.5f64);
            w.put(&[7u32][..]);
        },
        "field 1 is declared Str but was put as U32",
    );
}

/// A debug build holds the unchecked writer's caller to its promise as the checked writer
/// is held (release builds trust it: that is the point of it).
#[cfg(debug_assertions)]
#[test]
fn an_unchecked_fill_that_breaks_the_layout_panics_in_a_debug_build() {
    let result = std::panic::catch_unwind(|| {
        recorded(|| {
            // SAFETY: deliberately broken; only a debug build, which checks, runs this.
            unsafe {
                SHAPE.write_unchecked(|w| {
                    w.put(&42u64);
                    w.put_text("s");
                })
            }
        })
    });
    let panic = result.expect_err("a broken unchecked payload panics in a debug build");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("Test-CheckedPayload/Shape not written: fields from 2 on were not put"),
        "{message}"
    );
}

#[test]
fn a_struct_member_of_another_kind_spoils_the_payload() {
    spoilt(
        |w| {
            w.put(&42u64);
            w.put_text("s");
            w.put(&3u32);
            w.put(&0.5f32);
        },
        "field 3 is declared F64 but was put as F32",
    );
}

#[test]
fn a_value_past_the_last_field_spoils_the_payload() {
    spoilt(
        |w| {
            put_all(w);
            w.put(&1u8);
        },
        "a value was put after the 5 declared fields",
    );
}

#[test]
fn a_missing_field_spoils_the_payload() {
    spoilt(
        |w| {
            w.put(&42u64);
            w.put_text("s");
        },
        "fields from 2 on were not put",
    );
}
