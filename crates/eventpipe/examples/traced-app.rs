//! The smallest program to attach to: it starts the diagnostics server and writes events
//! of the provider `Demo` on two threads until it is killed.
//!
//! ```sh
//! cargo run -p eventpipe --example traced-app &
//! cargo run -p eptrace -- ps
//! cargo run -p eptrace -- collect -n traced-app --providers Demo --duration 3s
//! ```
//!
//! Options: `--rate N` events per second per thread (default 1000; `0` = as fast as
//! possible), `--threads N` (default 2), `--seconds S` to exit on its own.

use std::time::{Duration, Instant};

use eventpipe::{define_event, write_event, Level, Provider};

static DEMO: Provider = Provider::new("Demo");

define_event! {
    /// One tick of a worker: its own counter, counting from 0 without gaps, and a label.
    static TICK = DEMO { id: 1, name: "Tick", level: Level::Informational, keywords: 0x1 }
        (worker: u32, counter: u64, label: &str);
}

fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse().unwrap_or_else(|_| {
                eprintln!("traced-app: {name} wants a number, got `{v}`");
                std::process::exit(2)
            })
        })
        .unwrap_or(default)
}

fn main() {
    let rate = arg("--rate", 1000.0);
    let threads = arg("--threads", 2.0) as u32;
    let seconds = arg("--seconds", 0.0);
    let server = match eventpipe::diagnostics::start_server() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("traced-app: {e}");
            std::process::exit(1);
        }
    };
    println!("pid {}", std::process::id());
    println!("socket {}", server.socket_path().display());
    let deadline = (seconds > 0.0).then(|| Instant::now() + Duration::from_secs_f64(seconds));
    let workers: Vec<_> = (0..threads)
        .map(|worker| {
            std::thread::Builder::new()
                .name(format!("demo-worker-{worker}"))
                .spawn(move || work(worker, rate, deadline))
                .expect("spawn a worker")
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
}

fn work(worker: u32, rate: f64, deadline: Option<Instant>) {
    let labels = ["alpha", "beta", "gamma"];
    let start = Instant::now();
    let mut counter = 0u64;
    loop {
        write_event!(TICK, worker, counter, labels[(counter % 3) as usize]);
        counter += 1;
        if counter % 256 == 0 && deadline.is_some_and(|d| Instant::now() >= d) {
            return;
        }
        if rate > 0.0 {
            // Pace against the start so the rate holds whatever the sleeps overshoot.
            let due = start + Duration::from_secs_f64(counter as f64 / rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
    }
}
