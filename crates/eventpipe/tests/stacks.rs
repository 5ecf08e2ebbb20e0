//! Sessions that ask for stacks get the writing thread's own stack on every event, interned
//! in the trace; concurrent writers never see each other's frames.

use eventpipe::{
    define_event, write_event, Level, Output, Provider, ProviderConfig, Session, SessionConfig,
};
use nettrace::{FormatVersion, TraceReader};
use std::collections::HashMap;

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

/// Which marker function (`write_from_a`: 0, `write_from_b`: 1) the frame whose return
/// address is `ip` runs in, by the symbol table and debug info (an address range guessed
/// from the functions' starts would take in whatever code the linker put after them).
fn marker_of(ip: u64, cache: &mut HashMap<u64, Option<u32>>) -> Option<u32> {
    *cache.entry(ip).or_insert_with(|| {
        let mut found = None;
        // A return address follows its call: the byte before it is in the calling function.
        backtrace::resolve(
            ip.saturating_sub(1) as usize as *mut std::ffi::c_void,
            |symbol| {
                // `{:#}`: demangled, without the hash.
                let name = symbol.name().map(|n| format!("{n:#}")).unwrap_or_default();
                if name.ends_with("write_from_a") {
                    found = Some(0);
                } else if name.ends_with("write_from_b") {
                    found = Some(1);
                }
            },
        );
        found
    })
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
        let mut markers_by_ip = HashMap::new();
        while let Some(e) = reader.next_event().unwrap() {
            if e.metadata.provider != "Test-Stacks" {
                continue;
            }
            seen += 1;
            let writer = e.decode_payload().unwrap()[0].1.as_u64().unwrap();
            let ips: Vec<u64> = e.stack_ips().collect();
            let markers: Vec<u32> = ips
                .iter()
                .filter_map(|&ip| marker_of(ip, &mut markers_by_ip))
                .collect();
            assert!(ips.len() >= 3, "{format:?}: stack too short: {ips:x?}");
            assert!(
                !ips.contains(&0),
                "{format:?}: a null address is the unwinder's end of stack, not a frame: {ips:x?}"
            );
            assert!(
                markers.iter().any(|&m| u64::from(m) == writer),
                "{format:?}: writer {writer}'s frame missing: {ips:x?}"
            );
            assert!(
                markers.iter().all(|&m| u64::from(m) == writer),
                "{format:?}: another thread's frame in writer {writer}'s stack: {ips:x?}"
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
