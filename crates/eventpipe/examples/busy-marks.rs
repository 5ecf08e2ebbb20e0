//! A program whose `spinner` thread alternates a busy loop with an event written the moment
//! the loop ends, then a sleep: `eptrace record`'s one clock is tested with it (each event
//! lands after its loop's CPU samples, and before the next loop's).
//!
//! ```sh
//! cargo run -p eptrace -- record -- target/debug/examples/busy-marks --rounds 10
//! ```
//!
//! Options: `--rounds N` (default 20), `--busy-ms MS` (default 60), `--sleep-ms MS`
//! (default 60). The rounds begin once a session enables the `BusyMarks` provider (or after
//! 5 s without one).

use std::time::{Duration, Instant};

use eventpipe::{define_event, write_event, Level, Provider};

static MARKS: Provider = Provider::new("BusyMarks");

define_event! {
    /// A busy loop has just ended.
    static LOOP_END = MARKS { id: 1, name: "LoopEnd", level: Level::Informational, keywords: 0x1 }
        (round: u32, busy_ns: u64);
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse().unwrap_or_else(|_| {
                eprintln!("busy-marks: {name} wants a whole number, got `{v}`");
                std::process::exit(2)
            })
        })
        .unwrap_or(default)
}

fn main() {
    let rounds = arg("--rounds", 20) as u32;
    let busy = Duration::from_millis(arg("--busy-ms", 60));
    let pause = Duration::from_millis(arg("--sleep-ms", 60));
    let _server = match eventpipe::diagnostics::start_server() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("busy-marks: {e}");
            std::process::exit(1);
        }
    };
    println!("pid {}", std::process::id());
    let waited = Instant::now();
    while !LOOP_END.is_enabled() && waited.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let spinner = std::thread::Builder::new()
        .name("spinner".into())
        .spawn(move || {
            for round in 0..rounds {
                let began = Instant::now();
                let mut x = u64::from(round) | 1;
                while began.elapsed() < busy {
                    for _ in 0..1000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                    }
                    std::hint::black_box(x);
                }
                write_event!(LOOP_END, round, began.elapsed().as_nanos() as u64);
                std::thread::sleep(pause);
            }
        })
        .expect("spawn the spinner");
    spinner.join().expect("the spinner ran");
}
