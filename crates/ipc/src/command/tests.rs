use proptest::prelude::*;

use super::*;
use crate::header::HEADER_LEN;

fn decode_message(bytes: &[u8]) -> Result<Request, (ServerError, String)> {
    let header = Header::decode(bytes[..HEADER_LEN].try_into().unwrap()).unwrap();
    assert_eq!(usize::from(header.size), bytes.len());
    Request::decode(&header, &bytes[HEADER_LEN..])
}

#[test]
fn the_spec_example_collect_tracing_message_is_eighty_bytes() {
    let request = Request::CollectTracing(CollectTracing {
        circular_buffer_mb: 250,
        ..CollectTracing::new(
            1,
            vec![ProviderRequest {
                keywords: 100,
                level: 2,
                name: "MyEventSource".into(),
                arguments: String::new(),
                filter: None,
            }],
        )
    });
    let bytes = request.encode().unwrap();
    assert_eq!(bytes.len(), 80);
    assert_eq!(&bytes[14..20], &[80, 0, 2, 2, 0, 0]);
    assert_eq!(&bytes[20..24], &250u32.to_le_bytes());
    assert_eq!(&bytes[40..44], &2u32.to_le_bytes()); // logLevel
    assert_eq!(&bytes[44..48], &14u32.to_le_bytes()); // 13 chars + NUL
    assert_eq!(&bytes[76..80], &0u32.to_le_bytes()); // empty arguments
    assert_eq!(decode_message(&bytes).unwrap(), request);
}

fn provider(with_filter: bool) -> impl Strategy<Value = ProviderRequest> {
    (
        any::<u64>(),
        0u32..6,
        "[A-Za-z][A-Za-z0-9\\-é]{0,40}",
        "([a-z]+=[0-9]+;?){0,3}",
        prop::option::of((any::<bool>(), prop::collection::vec(any::<u32>(), 0..5))),
    )
        .prop_map(
            move |(keywords, level, name, arguments, filter)| ProviderRequest {
                keywords,
                level,
                name,
                arguments,
                filter: if with_filter {
                    Some(
                        filter
                            .map(|(enable, event_ids)| EventFilter { enable, event_ids })
                            .unwrap_or_default(),
                    )
                } else {
                    None
                },
            },
        )
}

fn request() -> impl Strategy<Value = CollectTracing> {
    (1u8..=6).prop_flat_map(|version| {
        (
            any::<u32>(),
            0u32..3,
            any::<u64>(),
            any::<bool>(),
            prop::collection::vec(provider(version >= 5), 0..4),
            0u32..2,
        )
            .prop_map(move |(mb, format, rundown, stack, providers, mode)| {
                CollectTracing {
                    version,
                    circular_buffer_mb: mb,
                    format,
                    // What each version can carry.
                    rundown_keyword: match version {
                        1 => DEFAULT_RUNDOWN_KEYWORD,
                        2 | 3 if rundown % 2 == 0 => 0,
                        2 | 3 => DEFAULT_RUNDOWN_KEYWORD,
                        _ => rundown,
                    },
                    stackwalk: version < 3 || stack,
                    providers,
                    buffering_mode: if version >= 6 { mode } else { 0 },
                }
            })
    })
}

proptest! {
    #[test]
    fn every_collect_tracing_version_round_trips(req in request()) {
        let request = Request::CollectTracing(req);
        let bytes = request.encode().unwrap();
        prop_assert_eq!(decode_message(&bytes).unwrap(), request);
    }

    #[test]
    fn truncated_requests_are_bad_encoding_never_a_panic(req in request(), cut in 0usize..400) {
        let bytes = Request::CollectTracing(req).encode().unwrap();
        let payload = &bytes[HEADER_LEN..];
        let cut = cut.min(payload.len());
        let header = Header::decode(bytes[..HEADER_LEN].try_into().unwrap()).unwrap();
        match Request::decode(&header, &payload[..cut]) {
            // Every field is required: only the whole payload decodes.
            Ok(_) => prop_assert_eq!(cut, payload.len()),
            Err((code, _)) => prop_assert_eq!(code, ServerError::BAD_ENCODING),
        }
    }

    #[test]
    fn arbitrary_payloads_decode_or_fail_cleanly(set in any::<u8>(), id in any::<u8>(),
                                                 payload in prop::collection::vec(any::<u8>(), 0..200)) {
        let header = Header::new(set, id, payload.len()).unwrap();
        let _ = Request::decode(&header, &payload);
    }

    #[test]
    fn process_info_round_trips_in_every_version(version in 1u8..=3, pid in any::<u64>(),
                                                 cmd in ".{0,60}", cookie in any::<[u8; 16]>()) {
        let full = ProcessInfo {
            process_id: pid,
            runtime_cookie: cookie,
            command_line: cmd,
            os: "Linux".into(),
            arch: "x64".into(),
            entrypoint_assembly: (version >= 2).then(|| "traced-app".into()),
            runtime_version: (version >= 2).then(|| "eventpipe-rs 0.1.0".into()),
            runtime_identifier: (version >= 3).then(|| "linux-x64".into()),
        };
        prop_assert_eq!(ProcessInfo::decode(version, &full.encode(version)).unwrap(), full);
    }
}

#[test]
fn unknown_commands_and_user_events_sessions_are_refused_with_their_codes() {
    let header = Header::new(set::DUMP, 1, 0).unwrap();
    assert_eq!(
        Request::decode(&header, &[]).unwrap_err().0,
        ServerError::UNKNOWN_COMMAND
    );
    let mut w = PayloadWriter::new();
    w.u32(1).u64(0).u32(0); // session type 1: user_events
    let payload = w.into_bytes();
    let header = Header::new(set::EVENTPIPE, eventpipe::COLLECT_TRACING_5, payload.len()).unwrap();
    let (code, why) = Request::decode(&header, &payload).unwrap_err();
    assert_eq!(code, ServerError::BAD_ENCODING);
    assert!(why.contains("session type 1"), "{why}");
}

#[test]
fn a_provider_count_beyond_the_payload_is_refused_before_allocating() {
    let mut w = PayloadWriter::new();
    w.u32(64).u32(1).u32(u32::MAX);
    let payload = w.into_bytes();
    let header = Header::new(set::EVENTPIPE, eventpipe::COLLECT_TRACING, payload.len()).unwrap();
    let (code, why) = Request::decode(&header, &payload).unwrap_err();
    assert_eq!(code, ServerError::BAD_ENCODING);
    assert!(why.contains("provider count"), "{why}");
}

#[test]
fn server_errors_print_their_code_and_meaning() {
    assert_eq!(
        ServerError::UNKNOWN_COMMAND.to_string(),
        "0x80131385 (unknown command)"
    );
    let bytes = error_response(ServerError::BAD_ENCODING);
    assert_eq!(bytes.len(), 24); // header + i32 HRESULT
    assert_eq!(&bytes[16..18], &[0xFF, 0xFF]);
    assert_eq!(&bytes[20..], &0x8013_1384u32.to_le_bytes());
}
