//! Rundown at session end names the process, every loaded module and the threads that
//! wrote, in both formats, so a trace can be symbolized after its process is gone.

use eventpipe::rundown::{loaded_modules, RUNDOWN_PROVIDER};
use eventpipe::{
    define_event, write_event, Level, Output, Provider, ProviderConfig, Session, SessionConfig,
};
use nettrace::{FormatVersion, TraceReader, Value};

static APP: Provider = Provider::new("Test-Rundown");
define_event! {
    static TICK = APP { id: 1, name: "Tick", level: Level::Informational, keywords: 0 } (n: u32);
}

fn field<'a>(fields: &'a [(&str, Value)], name: &str) -> &'a Value {
    &fields
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no field {name}"))
        .1
}

/// Tests enabling the same provider run one session at a time, keeping their events apart.
static ONE_SESSION: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `body` in a file session (named `name` in the temp dir) on `provider`, in `format`,
/// with or without rundown; returns the file's bytes (the file is removed). The caller holds
/// `ONE_SESSION`.
fn in_session(
    name: &str,
    provider: &str,
    format: FormatVersion,
    rundown: bool,
    body: impl FnOnce(),
) -> Vec<u8> {
    let path =
        std::env::temp_dir().join(format!("eventpipe-{name}-{}.nettrace", std::process::id()));
    let session = Session::start(
        SessionConfig::new(
            vec![ProviderConfig::new(provider)],
            Output::File(path.clone()),
        )
        .format(format)
        .rundown(rundown),
    )
    .unwrap();
    body();
    session.stop().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    bytes
}

fn record(format: FormatVersion, rundown: bool) -> Vec<u8> {
    let _one = ONE_SESSION.lock().unwrap_or_else(|p| p.into_inner());
    in_session(
        &format!("rundown-{format:?}-{rundown}"),
        "Test-Rundown",
        format,
        rundown,
        || {
            std::thread::Builder::new()
                .name("rundown-worker".into())
                .spawn(|| write_event!(TICK, 1u32))
                .unwrap()
                .join()
                .unwrap();
            write_event!(TICK, 2u32);
        },
    )
}

#[test]
fn modules_and_thread_names_are_rundown_in_both_formats() {
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let expected = loaded_modules();
    for format in [FormatVersion::V5, FormatVersion::V6] {
        let bytes = record(format, true);
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let mut modules = Vec::new();
        let mut threads = Vec::new();
        let mut tick_threads = Vec::new();
        while let Some(e) = reader.next_event().unwrap() {
            let fields = e.decode_payload().unwrap();
            match (e.metadata.provider.as_str(), e.metadata.event_name.as_str()) {
                (RUNDOWN_PROVIDER, "Module") => modules.push((
                    field(&fields, "Path").as_str().unwrap().to_owned(),
                    field(&fields, "BaseAddress").as_u64().unwrap(),
                    field(&fields, "Size").as_u64().unwrap(),
                    field(&fields, "BuildId").as_str().unwrap().to_owned(),
                )),
                (RUNDOWN_PROVIDER, "Thread") => threads.push((
                    field(&fields, "ThreadId").as_u64().unwrap(),
                    field(&fields, "Name").as_str().unwrap().to_owned(),
                )),
                ("Test-Rundown", "Tick") => tick_threads.push(e.thread_id()),
                _ => {}
            }
        }
        assert_eq!(modules.len(), expected.len(), "{format:?}: {modules:?}");
        let main = &modules[0];
        assert_eq!(main.0, exe.to_string_lossy(), "{format:?}");
        assert_eq!(main.3, expected[0].build_id);
        let code = modules_and_thread_names_are_rundown_in_both_formats as fn() as usize as u64;
        assert!(
            code >= main.1 && code < main.1 + main.2,
            "{format:?}: {main:?}"
        );
        // Both writing threads are named, under the ids their events carry.
        assert_eq!(tick_threads.len(), 2);
        for tid in &tick_threads {
            assert!(
                threads.iter().any(|(t, _)| t == tid),
                "{format:?}: {threads:?}"
            );
        }
        assert!(
            threads
                .iter()
                .any(|(t, n)| *t == tick_threads[0] && n == "rundown-worker"),
            "{format:?}: {threads:?}"
        );
    }
}

#[test]
fn no_rundown_means_no_module_events() {
    let bytes = record(FormatVersion::V5, false);
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    while let Some(e) = reader.next_event().unwrap() {
        assert_ne!(e.metadata.provider, RUNDOWN_PROVIDER);
    }
}

static PROFILER: Provider = Provider::new("Test-GivenStack");
define_event! {
    static SAMPLE = PROFILER { id: 1, name: "Sample", level: Level::Informational, keywords: 0 } (weight: u64);
}

/// A profiler's event carries the stack it captured, even in a session that did not ask
/// for stacks; an ordinary event in that session carries none.
#[test]
fn a_given_stack_is_recorded_as_given() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|p| p.into_inner());
    let ips = [0x1000usize, 0x2000, usize::MAX - 1];
    // The session's default format.
    let bytes = in_session(
        "given-stack",
        "Test-GivenStack",
        FormatVersion::V5,
        false,
        || {
            SAMPLE.write_with_stack(&ips, (7,));
            write_event!(SAMPLE, 8u64);
        },
    );
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let mut seen = Vec::new();
    while let Some(e) = reader.next_event().unwrap() {
        let weight = e.decode_payload().unwrap()[0].1.as_u64().unwrap();
        seen.push((weight, e.stack_ips().collect::<Vec<u64>>()));
    }
    let expected: Vec<u64> = ips.iter().map(|&ip| ip as u64).collect();
    assert_eq!(seen, vec![(7, expected), (8, Vec::new())]);
}

/// A sampler's event about another thread is attributed to that thread and captured by the
/// sampler, in both formats (V6 through a thread-table entry for the sampled thread).
#[test]
fn an_event_about_another_thread_is_attributed_to_it() {
    let _one = ONE_SESSION.lock().unwrap_or_else(|p| p.into_inner());
    for format in [FormatVersion::V5, FormatVersion::V6] {
        let mut ids = (0, 0);
        let bytes = in_session(
            &format!("subject-{format:?}"),
            "Test-GivenStack",
            format,
            false,
            || {
                let (tx, rx) = std::sync::mpsc::channel();
                let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
                let sampled = std::thread::spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    tx.send(unsafe { libc::gettid() } as u64).unwrap();
                    let _ = done_rx.recv();
                });
                let subject = rx.recv().unwrap();
                // SAFETY: gettid has no preconditions.
                let sampler = unsafe { libc::gettid() } as u64;
                SAMPLE.write_about_thread(subject, &[0x1234, 0x5678], (1,));
                SAMPLE.write_about_thread(subject, &[0x1234], (2u64,));
                done_tx.send(()).unwrap();
                sampled.join().unwrap();
                ids = (subject, sampler);
            },
        );
        let (subject, sampler) = ids;
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let mut seen = Vec::new();
        while let Some(e) = reader.next_event().unwrap() {
            seen.push((e.thread_id(), e.capture_thread_id(), e.stack_ips().count()));
        }
        assert_eq!(
            seen,
            vec![(subject, sampler, 2), (subject, sampler, 1)],
            "{format:?}"
        );
        assert_eq!(reader.stats().lost_events, 0);
    }
}
