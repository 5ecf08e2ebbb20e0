//! Symbolization against real binaries: this test's own executable, traced by the real
//! runtime, and modules that are missing or not the traced file.

use eventpipe::{
    define_event, write_event, Level, Output, Provider, ProviderConfig, Session, SessionConfig,
};
use eventpipe_insight::{
    build_profile, FrameKind, Module, SampleSelection, SampleUnit, Symbolizer,
};
use nettrace::TraceReader;

static APP: Provider = Provider::new("Insight-Symbols");
define_event! {
    static MARK = APP { id: 1, name: "Mark", level: Level::Informational, keywords: 0 } (n: u32);
}

#[inline(never)]
fn distinctive_leaf_function(n: u32) {
    write_event!(MARK, n);
    std::hint::black_box(n);
}

#[inline(never)]
fn distinctive_caller_function() {
    for n in 0..3 {
        distinctive_leaf_function(n);
    }
}

#[test]
fn stacks_of_our_own_events_resolve_to_our_functions_with_lines() {
    let path =
        std::env::temp_dir().join(format!("insight-symbols-{}.nettrace", std::process::id()));
    let session = Session::start(
        SessionConfig::new(
            vec![ProviderConfig::new("Insight-Symbols")],
            Output::File(path.clone()),
        )
        .stacks(true),
    )
    .unwrap();
    std::thread::Builder::new()
        .name("marker".into())
        .spawn(distinctive_caller_function)
        .unwrap()
        .join()
        .unwrap();
    session.stop().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();

    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let built = build_profile(&mut reader, SampleSelection::Auto).unwrap();
    let p = &built.profile;
    assert_eq!(p.unit, SampleUnit::Events);
    assert_eq!(p.samples.len(), 3, "{:?}", p.samples);
    assert!(built.modules > 1);
    assert_eq!(p.threads.len(), 1);
    assert_eq!(p.threads[0].name.as_deref(), Some("marker"));
    let stack = &p.stacks[p.samples[0].stack];
    let names: Vec<&str> = stack
        .iter()
        .map(|&f| p.frames[f].function.as_str())
        .collect();
    // The runtime's own frames are trimmed: the leaf is the function that wrote the event.
    let leaf = &p.frames[*stack.last().unwrap()];
    assert!(
        leaf.function.ends_with("distinctive_leaf_function"),
        "{names:#?}"
    );
    assert_eq!(leaf.kind, FrameKind::Native);
    assert!(
        leaf.file.as_deref().unwrap().ends_with("symbolize.rs"),
        "{leaf:?}"
    );
    assert!(leaf.line.is_some());
    let caller = &p.frames[stack[stack.len() - 2]];
    assert!(
        caller.function.ends_with("distinctive_caller_function"),
        "{names:#?}"
    );
    assert!(!names
        .iter()
        .any(|n| n.starts_with("eventpipe::") || n.starts_with("backtrace::")));
    // The three events share one stack, except for the loop's return address: at most
    // the same frames.
    assert!(p.weight_by_function()[0].1 >= 1);
}

#[test]
fn a_missing_binary_or_a_different_build_gets_a_note_and_offsets() {
    let mut s = Symbolizer::new();
    s.add_module(Module {
        path: "/nonexistent/libgone.so".into(),
        base_address: 0x1000,
        size: 0x1000,
        load_bias: 0x1000,
        build_id: String::new(),
    });
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    s.add_module(Module {
        path: exe.to_string_lossy().into_owned(),
        base_address: 0x10_0000,
        size: 0x1000,
        load_bias: 0x10_0000,
        build_id: "00".repeat(20),
    });
    let gone = s.resolve(0x1234, false).to_vec();
    assert_eq!(gone[0].function, "libgone.so+0x234");
    assert_eq!(gone[0].kind, FrameKind::ModuleOffset);
    let changed = s.resolve(0x10_0010, true).to_vec();
    assert_eq!(changed[0].kind, FrameKind::ModuleOffset);
    assert_eq!(s.resolve(0x9_0000, false)[0].kind, FrameKind::Unknown);
    let notes = s.notes().join("\n");
    assert!(
        notes.contains("libgone.so") && notes.contains("cannot read"),
        "{notes}"
    );
    assert!(notes.contains("not the traced binary"), "{notes}");
    // One note per module, however many addresses.
    s.resolve(0x1300, false);
    assert_eq!(s.notes().len(), 2);
}

#[test]
fn a_stripped_binary_is_named_as_such() {
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let dir = std::env::temp_dir().join(format!("insight-strip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stripped = dir.join("stripped");
    match std::process::Command::new("strip")
        .arg("-s")
        .arg(&exe)
        .arg("-o")
        .arg(&stripped)
        .status()
    {
        Ok(status) if status.success() => {}
        _ => {
            eprintln!("skipping: `strip` (binutils) is not available");
            return;
        }
    }
    let m = eventpipe::rundown::loaded_modules().remove(0);
    let traced = Module {
        path: m.path,
        base_address: m.base_address,
        size: m.size,
        load_bias: m.load_bias,
        build_id: m.build_id,
    };
    let mut s = Symbolizer::new();
    s.add_module(Module {
        path: stripped.to_string_lossy().into_owned(),
        ..traced.clone()
    });
    // A private function of this test: not exported, so the stripped file cannot name it.
    let here = distinctive_leaf_function as fn(u32) as usize as u64;
    let frames = s.resolve(here, false).to_vec();
    assert_eq!(frames[0].kind, FrameKind::ModuleOffset, "{frames:?}");
    let notes = s.notes().join("\n");
    assert!(notes.contains("stripped"), "{notes}");
    // The unstripped original names it, with no note.
    let mut full = Symbolizer::new();
    full.add_module(traced);
    assert!(full.resolve(here, false)[0]
        .function
        .ends_with("distinctive_leaf_function"));
    assert!(full.notes().is_empty(), "{:?}", full.notes());
    std::fs::remove_dir_all(&dir).ok();
}
