use super::json::*;
use super::names::*;
use super::*;
use nettrace::ValueRef;

#[test]
fn program_names_come_from_the_first_word() {
    assert_eq!(program_name("/usr/bin/app --x"), Some("app"));
    assert_eq!(
        program_name(r#""C:\Program Files\dotnet\dotnet.exe" app.dll"#),
        Some("dotnet.exe")
    );
    assert_eq!(program_name("   "), None);
    assert_eq!(program_name("dir/"), None);
}

#[test]
fn short_names_keep_frames_apart() {
    let mut names = ShortNames::default();
    let mut name = |id: u32, full: &str| names.name(AsyncFrameId(id), full);
    assert_eq!(name(1, "app::server::handle"), "handle");
    // Seen again: the same short name.
    assert_eq!(name(1, "app::server::handle"), "handle");
    assert_eq!(name(2, "app::client::handle"), "client::handle");
    assert_eq!(name(3, "<app::Conn as tower::Service>::call"), "call");
    assert_eq!(name(4, "GET /users"), "GET /users");
    // Every suffix taken by other frames.
    assert_eq!(name(5, "client::handle"), "client::handle (frame#5)");
    assert_eq!(name(6, "handle"), "handle (frame#6)");
}

fn dur(start: i64, end: i64) -> String {
    serde_json::to_string(&Duration { start, end }).unwrap()
}

#[test]
fn durations_add_up_to_the_written_end_with_the_fewest_digits() {
    assert_eq!(dur(1_000, 2_500), "1.5");
    assert_eq!(dur(13_720_846, 13_770_694), "49.848");
    // 2004.698 + 40.275 is not 2044.973 in doubles: more digits, as few as add up.
    let text = dur(2_004_698, 2_044_973);
    assert_eq!(text, "40.2749999999999");
    let d: f64 = text.parse().unwrap();
    assert_eq!(2004.698 + d, 2044.973);
    assert_eq!(2004.698 + 40.275, 2044.9730000000002);
}

/// `json::micros` writes what serde_json writes for the same time as a double, across
/// the digit counts, the signs, trailing zeros and the edge of its integer path.
#[test]
fn micros_are_what_serde_json_writes_for_the_double() {
    let mut times: Vec<i64> = vec![
        0,
        1,
        -1,
        5,
        50,
        500,
        1_000,
        1_050,
        -1_500,
        13_720_846,
        999_999_999_999_999,
        -999_999_999_999_999,
        1_000_000_000_000_000,
        MAX_SAFE_INTEGER as i64,
        i64::MAX,
        i64::MIN,
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Every magnitude from 1 to 10^18, both signs.
        let digits = x % 19;
        let value = (x >> 8) % 10u64.pow(digits as u32).max(1);
        times.push(if x & 1 == 0 {
            value as i64
        } else {
            -(value as i64)
        });
    }
    for ns in times {
        let mut ours = Vec::new();
        json::micros(&mut ours, ns);
        let expected = serde_json::to_string(&Micros(ns)).unwrap();
        assert_eq!(String::from_utf8(ours).unwrap(), expected, "{ns} ns");
    }
}

fn json(v: Value) -> String {
    serde_json::to_string(&json_value(&v)).unwrap()
}

#[test]
fn values_map_to_json_types() {
    assert_eq!(json(Value::F32(0.1)), "0.1");
    assert_eq!(json(Value::F64(f64::NAN)), r#""NaN""#);
    assert_eq!(json(Value::F64(f64::NEG_INFINITY)), r#""-inf""#);
    // Beyond 2^53 - 1 JavaScript rounds: such integers are strings.
    assert_eq!(json(Value::U64(u64::MAX)), r#""18446744073709551615""#);
    assert_eq!(json(Value::U64(MAX_SAFE_INTEGER)), "9007199254740991");
    assert_eq!(json(Value::I64(-(1 << 53))), r#""-9007199254740992""#);
    assert_eq!(json(Value::Pointer(255)), r#""0xff""#);
    assert_eq!(json(Value::Bytes(vec![1, 0xab])), r#""01ab""#);
    assert_eq!(json(Value::Char('"')), r#""\"""#);
    assert_eq!(
        json(Value::Array(vec![Value::I8(-1), Value::Bool(true)])),
        "[-1,true]"
    );
    // Fields keep their order.
    assert_eq!(
        json(Value::Object(vec![
            ("z".into(), Value::String("x".into())),
            ("a".into(), Value::U16(2)),
        ])),
        r#"{"z":"x","a":2}"#
    );
}

#[test]
fn hand_written_json_is_what_serde_json_writes() {
    let mut values = vec![
        Value::Bool(true),
        Value::Bool(false),
        Value::I8(-128),
        Value::U8(255),
        Value::I16(-300),
        Value::U16(65535),
        Value::I32(i32::MIN),
        Value::U32(u32::MAX),
        Value::I64(i64::MIN),
        Value::I64(-(1 << 53) + 1),
        Value::U64(MAX_SAFE_INTEGER + 1),
        Value::U64(42),
        Value::F32(0.1),
        Value::F64(0.1),
        Value::F64(1e300),
        Value::F64(-0.0),
        Value::F64(252045.0),
        Value::F64(f64::NAN),
        Value::Char('x'),
        Value::String("plain /v2/orders".into()),
        Value::String("quote \" back \\ tab \t ctl \u{1} del \u{7f} é 😀".into()),
        Value::String(String::new()),
        Value::Guid(nettrace::Guid([
            0xa5, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9, 0xa, 0xb, 0xc, 0xd, 0xe, 0xff,
        ])),
        Value::Pointer(0),
        Value::Pointer(0x7fff_1234_abcd),
        Value::Pointer(u64::MAX),
        Value::Bytes(vec![0, 0xfe]),
        Value::Array(vec![Value::U8(1)]),
    ];
    values.extend(
        (0..2000u64).map(|i| Value::F64(f64::from_bits(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))),
    );
    for value in &values {
        let mut buf = Vec::new();
        json::owned_value(&mut buf, value);
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            json(value.clone()),
            "{value:?}"
        );
    }
    let borrowed = [
        ValueRef::Bool(true),
        ValueRef::I8(-1),
        ValueRef::U16(7),
        ValueRef::I64(i64::MAX),
        ValueRef::U64(MAX_SAFE_INTEGER),
        ValueRef::F64(87281.5),
        ValueRef::F64(f64::INFINITY),
        ValueRef::Pointer(0xdead),
        ValueRef::Guid(nettrace::Guid([7; 16])),
        ValueRef::Str8(b"a\"b"),
        ValueRef::Bytes(&[1, 2]),
    ];
    for value in borrowed {
        let mut buf = Vec::new();
        json::value(&mut buf, value);
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            json(value.to_value()),
            "{value:?}"
        );
    }
    for text in ["Bench-Provider/Counter", "a\"b", "tab\t", "é"] {
        let mut buf = Vec::new();
        json::string(&mut buf, text);
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            serde_json::to_string(text).unwrap()
        );
    }
    for ns in [
        0,
        1,
        999,
        1_000_001,
        -5,
        MAX_SAFE_INTEGER as i64 + 1,
        i64::MIN,
    ] {
        let mut buf = Vec::new();
        json::instant_times(&mut buf, ns, 1, u64::MAX);
        let expected = format!(
            ",\"ph\":\"I\",\"ts\":{},\"pid\":1,\"tid\":{}",
            serde_json::to_string(&Micros(ns)).unwrap(),
            u64::MAX
        );
        assert_eq!(String::from_utf8(buf).unwrap(), expected);
    }
}
