//! Sessions that ask for stacks get the writing thread's own stack on every event, interned
//! in the trace; concurrent writers never see each other's frames.

use eventpipe::{
    define_event, write_event, Level, Output, Provider, ProviderConfig, Session, SessionConfig,
};
use nettrace::{FormatVersion, TraceReader};

static STACKY: Provider = Provider::new("Test-Stacks");
define_event! { static SAMPLE = STACKY { id: 1, name: "Sample", level: Level::Informational, keywords: 0 } (writer: u32); }

#[inline(never)]
fn write_from_a() {
    write_event!(SAMPLE, 0u32);
    std::hint::black_box(());
}

#[inline(never)]
fn write_from_b() {
    std::hint::black_box(11u64);
    write_event!(SAMPLE, 1u32);
    std::hint::black_box(());
}

/// Whether `ip` lies in `f`, whose code ends where `other` begins if `other` follows it
/// (the two markers are usually adjacent), or within 512 bytes otherwise.
fn near(ip: u64, f: fn(), other: fn()) -> bool {
    let (f, other) = (f as usize as u64, other as usize as u64);
    let end = if other > f {
        other.min(f + 512)
    } else {
        f + 512
    };
    (f..end).contains(&ip)
}

#[test]
fn every_event_carries_its_own_writers_stack() {
    for format in [FormatVersion::V5, FormatVersion::V6] {
        let path = std::env::temp_dir().join(format!(
            "eventpipe-stacks-{}-{format:?}.nettrace",
            std::process::id()
        ));
        let session = Session::start(
            SessionConfig::new(
                vec![ProviderConfig::new("Test-Stacks")],
                Output::File(path.clone()),
            )
            .format(format)
            .stacks(true),
        )
        .unwrap();
        let writers: Vec<_> = [write_from_a as fn(), write_from_b]
            .into_iter()
            .map(|f| std::thread::spawn(move || (0..2000).for_each(|_| f())))
            .collect();
        writers.into_iter().for_each(|w| w.join().unwrap());
        session.stop().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let mut seen = 0;
        while let Some(e) = reader.next_event().unwrap() {
            if e.metadata.provider != "Test-Stacks" {
                continue;
            }
            seen += 1;
            let writer = e.decode_payload().unwrap()[0].1.as_u64().unwrap();
            let (mine, theirs) = if writer == 0 {
                (write_from_a as fn(), write_from_b as fn())
            } else {
                (write_from_b as fn(), write_from_a as fn())
            };
            let ips: Vec<u64> = e.stack_ips().collect();
            assert!(ips.len() >= 3, "{format:?}: stack too short: {ips:x?}");
            assert!(
                !ips.contains(&0),
                "{format:?}: a null address is the unwinder's end of stack, not a frame: {ips:x?}"
            );
            assert!(
                ips.iter().any(|&ip| near(ip, mine, theirs)),
                "{format:?}: writer {writer}'s frame missing"
            );
            assert!(
                !ips.iter().any(|&ip| near(ip, theirs, mine)),
                "{format:?}: another thread's frame"
            );
        }
        assert_eq!(seen, 4000, "{format:?}");
        assert_eq!(
            reader.stats().unresolved_stacks,
            0,
            "{format:?}: every stack id resolves"
        );
    }
}
