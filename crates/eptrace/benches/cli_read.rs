//! How fast the CLI reads an event-dense trace: `eptrace report`, `eptrace analyze`,
//! `eptrace dump` (every event, to /dev/null) and `eptrace convert` (pprof, and the Chrome
//! timeline) on a
//! generated trace of about 1 GiB (`eventpipe_test_support::write_dense_trace`: ~18 M
//! events of 18-56 bytes, 60 % with stacks, 8 threads), each timed as a whole command
//! from start to exit, in MB/s of the file (decimal MB). Target: ≥ 300 MB/s each.
//!
//! The trace is written once into the target directory (`tmp/cli-read-*.nettrace`) and
//! reused while its size matches. `CLI_READ_MB` sets its size (default 1024 MiB),
//! `CLI_READ_RUNS` the runs per command (default 3), `CLI_READ_COMMANDS` a comma-separated
//! choice of `report`, `analyze`, `dump`, `pprof`, `timeline` (default all).
//!
//! `cargo bench -p eptrace --bench cli_read`

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use nettrace::FormatVersion;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The generated trace, written if it is not there yet.
fn trace(mib: u64) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().unwrap().parent().unwrap().parent().unwrap();
    let dir = target.join("tmp");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("cli-read-{mib}mib-v5.nettrace"));
    let bytes = mib << 20;
    let fits =
        std::fs::metadata(&path).is_ok_and(|m| m.len() >= bytes && m.len() < bytes + (1 << 20));
    if !fits {
        let started = Instant::now();
        let file =
            std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).unwrap());
        eventpipe_test_support::write_dense_trace(file, FormatVersion::V5, bytes)
            .expect("writing the trace");
        eprintln!(
            "generated {} ({} bytes) in {:.1} s",
            path.display(),
            std::fs::metadata(&path).unwrap().len(),
            started.elapsed().as_secs_f64()
        );
    }
    path
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing we need.
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let mib = env_num("CLI_READ_MB", 1024);
    let runs = env_num("CLI_READ_RUNS", 3);
    let commands = std::env::var("CLI_READ_COMMANDS")
        .unwrap_or_else(|_| "report,analyze,dump,pprof,timeline".into());
    let path = trace(mib);
    let size = std::fs::metadata(&path).unwrap().len() as f64;
    let out_dir = path.parent().unwrap().to_path_buf();
    let file = path.to_str().unwrap().to_owned();
    let pprof_out = out_dir.join("cli-read.pb.gz");
    let timeline_out = out_dir.join("cli-read.timeline.json");
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("report", vec!["report".into(), file.clone()]),
        ("analyze", vec!["analyze".into(), file.clone()]),
        ("dump", vec!["dump".into(), file.clone()]),
        (
            "pprof",
            vec![
                "convert".into(),
                "-f".into(),
                "pprof".into(),
                file.clone(),
                "-o".into(),
                pprof_out.to_str().unwrap().into(),
            ],
        ),
        (
            "timeline",
            vec![
                "convert".into(),
                "-f".into(),
                "chrome".into(),
                file.clone(),
                "-o".into(),
                timeline_out.to_str().unwrap().into(),
            ],
        ),
    ];
    for (name, args) in cases {
        if !commands.split(',').any(|c| c.trim() == name) {
            continue;
        }
        let mut rates = Vec::new();
        for _ in 0..runs {
            let started = Instant::now();
            let status = Command::new(env!("CARGO_BIN_EXE_eptrace"))
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("eptrace runs");
            let seconds = started.elapsed().as_secs_f64();
            assert!(status.success(), "eptrace {args:?} failed");
            rates.push(size / seconds / 1e6);
        }
        let mut sorted = rates.clone();
        sorted.sort_by(f64::total_cmp);
        let text: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "{name}: {} MB/s median over {runs} runs ({} MB/s each) of a {:.0} MB trace",
            sorted[sorted.len() / 2].round(),
            text.join(", "),
            size / 1e6
        );
    }
    let _ = std::fs::remove_file(pprof_out);
    let _ = std::fs::remove_file(timeline_out);
}
