//! EventPipe's stress matrix: writer threads × events per thread × output × mode, each
//! cell checked to account for every event, with its rate and memory.
//!
//! ```text
//! cargo bench -p eventpipe --bench stress                     # the full matrix, 120 cells
//! cargo bench -p eventpipe --bench stress -- --threads 1,8 --events 1000 --json
//! ```
//!
//! See `matrix.rs` for what a cell does and checks.

mod matrix;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use matrix::{Config, Mode, OutputKind, MATRIX_EVENTS, MATRIX_THREADS};

/// EventPipe's stress matrix; flags pick a corner of it.
#[derive(Debug, Parser)]
#[command(name = "stress")]
struct Args {
    /// Writer thread counts (comma list) [default: 1,8,16,50,100,1000].
    #[arg(long, value_name = "N,..", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..))]
    threads: Vec<u32>,
    /// Events per thread (comma list) [default: 1,2,100,1000,100000].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    events: Vec<u64>,
    /// Outputs: file, listener (comma list) [default: both].
    #[arg(long = "output", value_name = "OUT,..", value_delimiter = ',')]
    outputs: Vec<OutputKind>,
    /// Buffering modes: drop, block (comma list) [default: both].
    #[arg(long = "mode", value_name = "MODE,..", value_delimiter = ',')]
    modes: Vec<Mode>,
    /// Each session's buffer budget, in MiB.
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    budget_mb: u32,
    /// Bytes in each event's byte-slice field (after its u64 counter).
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u16))]
    payload_bytes: u16,
    /// Trace format: v5 or v6.
    #[arg(long, value_name = "V", default_value = "v5", value_parser = matrix::parse_format)]
    format: nettrace::FormatVersion,
    /// JSON lines (one object per cell) instead of a table.
    #[arg(long)]
    json: bool,
    /// Directory for trace files [default: a temporary directory].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Keep the trace files instead of deleting each after its cell.
    #[arg(long)]
    keep: bool,
    /// Passed by `cargo bench`; nothing to do with the matrix.
    #[arg(long, hide = true)]
    bench: bool,
}

/// `list` without repeats, in order; `default` when empty.
fn or_default<T: PartialEq + Copy>(list: Vec<T>, default: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for v in if list.is_empty() {
        default.to_vec()
    } else {
        list
    } {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

fn main() -> ExitCode {
    let a = Args::parse();
    let config = Config {
        threads: or_default(a.threads, MATRIX_THREADS),
        events: or_default(a.events, MATRIX_EVENTS),
        outputs: or_default(a.outputs, &[OutputKind::File, OutputKind::Listener]),
        modes: or_default(a.modes, &[Mode::Drop, Mode::Block]),
        budget_bytes: (a.budget_mb as usize) << 20,
        payload_bytes: usize::from(a.payload_bytes),
        format: a.format,
        json: a.json,
        dir: a.dir,
        keep: a.keep,
    };
    match matrix::do_stress(&config, &mut std::io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stress: {e:#}");
            ExitCode::FAILURE
        }
    }
}
