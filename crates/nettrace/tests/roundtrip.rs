//! Writer → reader round trips: any sequence of metadata, stacks, threads, label lists and
//! events written in V5 or V6 reads back identical.

use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{
    EventHeader, EventMetadata, FieldDesc, FieldType, FormatVersion, Guid, Label, ThreadInfo,
    TraceInfo, TraceReader,
};
use proptest::prelude::*;

fn scalar_type() -> impl Strategy<Value = FieldType> {
    prop_oneof![
        Just(FieldType::Boolean32),
        Just(FieldType::Char16),
        Just(FieldType::SByte),
        Just(FieldType::Byte),
        Just(FieldType::Int16),
        Just(FieldType::UInt16),
        Just(FieldType::Int32),
        Just(FieldType::UInt32),
        Just(FieldType::Int64),
        Just(FieldType::UInt64),
        Just(FieldType::Single),
        Just(FieldType::Double),
        Just(FieldType::DateTime),
        Just(FieldType::Guid),
        Just(FieldType::Utf16String),
    ]
}

fn v6_only_type() -> impl Strategy<Value = FieldType> {
    prop_oneof![
        Just(FieldType::VarInt),
        Just(FieldType::VarUInt),
        Just(FieldType::Boolean8),
        Just(FieldType::Char8),
        (scalar_type(), 1u16..5).prop_map(|(t, n)| FieldType::FixedArray(Box::new(t), n)),
        Just(FieldType::RelLoc(Box::new(FieldType::Int32))),
        Just(FieldType::DataLoc(Box::new(FieldType::UInt16))),
    ]
}

fn field_type(v6: bool) -> BoxedStrategy<FieldType> {
    let leaf = if v6 {
        prop_oneof![scalar_type(), v6_only_type()].boxed()
    } else {
        scalar_type().boxed()
    };
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|t| FieldType::Array(Box::new(t))),
            prop::collection::vec(("[a-z]{1,6}", inner), 0..3).prop_map(|fs| {
                FieldType::Object(
                    fs.into_iter()
                        .map(|(name, ty)| FieldDesc { name, ty })
                        .collect(),
                )
            }),
        ]
    })
    .boxed()
}

fn metadata(id: u32, v6: bool) -> impl Strategy<Value = EventMetadata> {
    (
        "P[0-3]",
        any::<u16>(),
        "[A-Za-z]{0,12}",
        any::<u64>(),
        0u32..=255,
        0u32..=5,
        proptest::option::of(any::<u8>()),
        prop::collection::vec(("[a-zA-Z]{1,8}", field_type(v6)), 0..5),
        proptest::option::of(any::<[u8; 16]>()),
        proptest::option::of("[ -~]{0,20}"),
    )
        .prop_map(
            move |(
                provider,
                event_id,
                event_name,
                keywords,
                version,
                level,
                opcode,
                fields,
                guid,
                template,
            )| {
                EventMetadata {
                    metadata_id: id,
                    provider,
                    event_id: u32::from(event_id),
                    event_name,
                    keywords,
                    version,
                    level,
                    opcode,
                    fields: fields
                        .into_iter()
                        .map(|(name, ty)| FieldDesc { name, ty })
                        .collect(),
                    provider_guid: if v6 { guid.map(Guid) } else { None },
                    message_template: if v6 { template } else { None },
                    ..Default::default()
                }
            },
        )
}

fn label() -> impl Strategy<Value = Label> {
    prop_oneof![
        any::<[u8; 16]>().prop_map(|g| Label::ActivityId(Guid(g))),
        any::<[u8; 16]>().prop_map(|g| Label::RelatedActivityId(Guid(g))),
        any::<[u8; 16]>().prop_map(Label::TraceId),
        any::<u64>().prop_map(Label::SpanId),
        ("[a-z]{0,5}", "[ -~]{0,10}").prop_map(|(key, value)| Label::String { key, value }),
        ("[a-z]{0,5}", any::<i64>()).prop_map(|(key, value)| Label::Int { key, value }),
        any::<u8>().prop_map(Label::OpCode),
        any::<u64>().prop_map(Label::Keywords),
        any::<u8>().prop_map(Label::Level),
        any::<u8>().prop_map(Label::Version),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    v6: bool,
    metadata: Vec<EventMetadata>,
    stacks: Vec<Vec<u8>>,
    threads: Vec<ThreadInfo>,
    labels: Vec<Vec<Label>>,
    events: Vec<(EventHeader, Vec<u8>)>,
    block_sizes: Vec<usize>,
}

fn case() -> impl Strategy<Value = Case> {
    any::<bool>().prop_flat_map(|v6| {
        let metadata = (1usize..5).prop_flat_map(move |n| {
            (1..=n as u32)
                .map(|id| metadata(id, v6))
                .collect::<Vec<_>>()
        });
        let stacks = prop::collection::vec(prop::collection::vec(any::<u64>(), 1..6), 0..4)
            .prop_map(|ss| {
                ss.into_iter()
                    .map(|s| {
                        s.iter()
                            .flat_map(|ip| ip.to_le_bytes())
                            .collect::<Vec<u8>>()
                    })
                    .collect::<Vec<_>>()
            });
        let threads = prop::collection::vec(
            (
                proptest::option::of("[a-z ]{0,8}"),
                proptest::option::of(any::<u32>()),
                proptest::option::of(any::<u64>()),
            ),
            1..4,
        )
        .prop_map(|ts| {
            ts.into_iter()
                .enumerate()
                .map(|(i, (name, pid, tid))| ThreadInfo {
                    index: i as u64,
                    name,
                    process_id: pid.map(u64::from),
                    thread_id: tid,
                    key_values: Vec::new(),
                })
                .collect::<Vec<_>>()
        });
        let labels = prop::collection::vec(prop::collection::vec(label(), 1..4), 0..3);
        (Just(v6), metadata, stacks, threads, labels).prop_flat_map(
            |(v6, metadata, stacks, threads, labels)| {
                let n_md = metadata.len() as u32;
                let n_stacks = stacks.len() as u32;
                let n_threads = threads.len() as u64;
                let n_labels = labels.len() as u32;
                let event = (
                    1..=n_md,
                    any::<u32>(),
                    0..n_threads,
                    0..n_threads,
                    0u32..64,
                    0..=n_stacks,
                    any::<i64>(),
                    any::<[u8; 16]>(),
                    0..=n_labels,
                    any::<bool>(),
                    prop::collection::vec(any::<u8>(), 0..40),
                )
                    .prop_map(
                        move |(
                            md,
                            seq,
                            thread,
                            capture,
                            cpu,
                            stack,
                            ts,
                            activity,
                            label,
                            sorted,
                            payload,
                        )| {
                            let header = EventHeader {
                                metadata_id: md,
                                sequence_number: seq,
                                thread: if v6 { thread } else { u64::from(seq) ^ thread },
                                capture_thread: capture,
                                processor: cpu,
                                stack_id: stack,
                                timestamp: ts,
                                activity_id: if v6 { Guid::ZERO } else { Guid(activity) },
                                related_activity_id: if v6 {
                                    Guid::ZERO
                                } else {
                                    Guid(activity.map(|b| !b))
                                },
                                label_list_id: if v6 { label } else { 0 },
                                is_sorted: sorted,
                                payload_size: payload.len() as u32,
                            };
                            (header, payload)
                        },
                    );
                (
                    Just(v6),
                    Just(metadata),
                    Just(stacks),
                    Just(threads),
                    Just(labels),
                    prop::collection::vec(event, 0..60),
                    prop::collection::vec(1usize..20, 1..8),
                )
                    .prop_map(
                        |(v6, metadata, stacks, threads, labels, events, block_sizes)| Case {
                            v6,
                            metadata,
                            stacks,
                            threads,
                            labels,
                            events,
                            block_sizes,
                        },
                    )
            },
        )
    })
}

fn write_case(case: &Case) -> Vec<u8> {
    let version = if case.v6 {
        FormatVersion::V6
    } else {
        FormatVersion::V5
    };
    let mut w = TraceWriter::new(Vec::new(), &TraceInfo::new(version, 8)).unwrap();
    w.write_metadata_block(&case.metadata).unwrap();
    if !case.stacks.is_empty() {
        let refs: Vec<&[u8]> = case.stacks.iter().map(Vec::as_slice).collect();
        w.write_stack_block(1, &refs).unwrap();
    }
    if case.v6 {
        w.write_thread_block(&case.threads).unwrap();
        if !case.labels.is_empty() {
            w.write_label_list_block(1, &case.labels).unwrap();
        }
    }
    let mut block = EventBlockBuilder::new(version);
    let mut sizes = case.block_sizes.iter().cycle();
    let mut limit = *sizes.next().unwrap();
    for (header, payload) in &case.events {
        block.push(header, payload);
        if block.len() >= limit {
            w.write_event_block(&mut block).unwrap();
            block.clear();
            limit = *sizes.next().unwrap();
        }
    }
    if !block.is_empty() {
        w.write_event_block(&mut block).unwrap();
    }
    w.write_sequence_point(0, 0, &[]).unwrap();
    w.finish().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn written_traces_read_back_identical(case in case()) {
        let bytes = write_case(&case);
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let mut got = Vec::new();
        while let Some(e) = reader.next_event().unwrap() {
            let mut md = e.metadata.clone();
            md.display_name.clear();
            let stack = e.stack.map(<[u8]>::to_vec);
            let thread = e.thread.cloned();
            let labels = e.labels.map(<[Label]>::to_vec);
            got.push((e.header, e.payload.to_vec(), md, stack, thread, labels));
        }
        prop_assert_eq!(got.len(), case.events.len());
        for ((header, payload, md, stack, thread, labels), (want_h, want_p)) in got.into_iter().zip(&case.events) {
            prop_assert_eq!(header, *want_h);
            prop_assert_eq!(&payload, want_p);
            prop_assert_eq!(&md, &case.metadata[want_h.metadata_id as usize - 1]);
            let want_stack = (want_h.stack_id != 0).then(|| case.stacks[want_h.stack_id as usize - 1].clone());
            prop_assert_eq!(stack, want_stack);
            if case.v6 {
                prop_assert_eq!(thread.as_ref(), case.threads.get(want_h.thread as usize));
                let want_labels = (want_h.label_list_id != 0).then(|| case.labels[want_h.label_list_id as usize - 1].clone());
                prop_assert_eq!(labels, want_labels);
            }
        }
        prop_assert!(reader.is_finished());
    }

    #[test]
    fn streaming_reader_matches_slice_reader_in_any_chunking(case in case(), chunk in 1usize..64) {
        let bytes = write_case(&case);
        let mut a = TraceReader::from_slice(&bytes).unwrap();
        let mut b = TraceReader::from_read(Trickle { data: &bytes, pos: 0, chunk }).unwrap();
        loop {
            let x = a.next_event().unwrap().map(|e| (e.header, e.payload.to_vec()));
            let y = b.next_event().unwrap().map(|e| (e.header, e.payload.to_vec()));
            prop_assert_eq!(&x, &y);
            if x.is_none() { break; }
        }
    }
}

/// A `Read` that hands out at most `chunk` bytes per call, like a slow socket.
struct Trickle<'a> {
    data: &'a [u8],
    pos: usize,
    chunk: usize,
}

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.chunk).min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Events that follow their predecessor (`commit_successors`): steps that are either a fresh
/// event (through `push`) or a successor with a new timestamp and payload.
/// A step: a fresh header (or none for a successor), the timestamp's delta, the payload.
type Step = (Option<EventHeader>, i64, Vec<u8>);

fn successors() -> impl Strategy<Value = (bool, Vec<Step>)> {
    let step = (
        prop::option::weighted(
            0.1,
            (1u32..3, any::<u32>(), 0u64..4, any::<bool>()).prop_map(
                |(md, seq, thread, sorted)| EventHeader {
                    metadata_id: md,
                    sequence_number: seq,
                    thread,
                    capture_thread: thread,
                    is_sorted: sorted,
                    ..EventHeader::default()
                },
            ),
        ),
        prop_oneof![any::<i64>(), 0i64..200, -5i64..5],
        prop_oneof![
            prop::collection::vec(any::<u8>(), 16..17),
            prop::collection::vec(any::<u8>(), 0..40)
        ],
    );
    (any::<bool>(), prop::collection::vec(step, 1..300))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn successors_read_back_as_the_next_events(
        (v6, steps) in successors(),
        block_events in 1usize..80,
        byte_limit in 1usize..600,
    ) {
        let version = if v6 { FormatVersion::V6 } else { FormatVersion::V5 };
        let metadata: Vec<EventMetadata> = (1..3)
            .map(|id| EventMetadata { metadata_id: id, provider: "P".into(), event_id: id, ..EventMetadata::default() })
            .collect();
        let mut w = TraceWriter::new(Vec::new(), &TraceInfo::new(version, 8)).unwrap();
        w.write_metadata_block(&metadata).unwrap();
        if v6 {
            let threads: Vec<ThreadInfo> = (0..4).map(|index| ThreadInfo { index, ..ThreadInfo::default() }).collect();
            w.write_thread_block(&threads).unwrap();
        }
        // The events each step stands for, and whether it is a successor.
        let mut want: Vec<(EventHeader, Vec<u8>, bool)> = Vec::new();
        let mut previous = EventHeader { metadata_id: 1, ..EventHeader::default() };
        for (i, (fresh, delta, payload)) in steps.into_iter().enumerate() {
            let fresh = if i == 0 { Some(fresh.unwrap_or(previous)) } else { fresh };
            let successor = fresh.is_none();
            let mut h = fresh.unwrap_or(EventHeader {
                sequence_number: previous.sequence_number.wrapping_add(1),
                is_sorted: false,
                ..previous
            });
            h.timestamp = previous.timestamp.wrapping_add(delta);
            h.payload_size = payload.len() as u32;
            previous = h;
            want.push((h, payload, successor));
        }
        let mut empty = EventBlockBuilder::new(version);
        empty.successor_room(8)[..3].copy_from_slice(&[0, 1, 7]);
        empty.commit_successors(3, 1, 1);
        prop_assert!(empty.is_empty(), "an empty block has nothing to follow");
        let mut block = EventBlockBuilder::new(version);
        let mut at = 0;
        while at < want.len() {
            // Successors of one payload size, never earlier than the one before, encoded
            // here as the format defines an event whose header differs from the previous
            // one's only by the implied sequence number and the timestamp: flags 0, the
            // timestamp's delta, the payload.
            let size = want[at].1.len();
            let mut timestamp = block.last_event().map(|(t, _)| t);
            let mut encoded = Vec::new();
            let mut run = 0;
            for (h, p, successor) in &want[at..] {
                let Some(before) = timestamp.filter(|&t| *successor && p.len() == size && h.timestamp >= t) else {
                    break;
                };
                if block.last_event().is_some_and(|(_, last)| last != size) || encoded.len() >= byte_limit {
                    break;
                }
                encoded.push(0);
                let mut delta = h.timestamp.wrapping_sub(before) as u64;
                while delta >= 0x80 {
                    encoded.push(delta as u8 | 0x80);
                    delta >>= 7;
                }
                encoded.push(delta as u8);
                encoded.extend_from_slice(p);
                timestamp = Some(h.timestamp);
                run += 1;
            }
            if run > 0 {
                block.successor_room(encoded.len())[..encoded.len()].copy_from_slice(&encoded);
                block.commit_successors(encoded.len(), run, timestamp.unwrap());
                at += run;
            }
            if at == want.len() {
                break;
            }
            // The next goes in whole: a fresh event, or a successor this did not take.
            if block.len() >= block_events {
                w.write_event_block(&mut block).unwrap();
                block.clear();
            }
            let (h, p, _) = &want[at];
            block.push(h, p);
            at += 1;
        }
        if !block.is_empty() {
            w.write_event_block(&mut block).unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let mut got = Vec::new();
        while let Some(e) = reader.next_event().unwrap() {
            got.push((e.header, e.payload.to_vec()));
        }
        prop_assert!(reader.is_finished());
        let want: Vec<(EventHeader, Vec<u8>)> = want.into_iter().map(|(h, p, _)| (h, p)).collect();
        prop_assert_eq!(got, want);
    }
}
