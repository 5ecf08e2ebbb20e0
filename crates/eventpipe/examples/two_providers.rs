//! A program that instruments itself with two providers and records a session to a file:
//!
//! ```sh
//! cargo run -p eventpipe --example two_providers -- orders.nettrace
//! cargo run -p eptrace -- report orders.nettrace
//! ```

use std::time::Duration;

use eventpipe::{
    define_event, write_event, BufferingMode, Level, Output, Provider, ProviderConfig, Session,
    SessionConfig, SessionStats,
};

static ORDERS: Provider = Provider::new("Demo.Orders");
static CACHE: Provider = Provider::new("Demo.Cache");

define_event! {
    /// An order entered the pipeline.
    static ORDER_START = ORDERS { id: 1, name: "OrderStart", level: Level::Informational, keywords: 0x1 }
        (order_id: u64, customer: &str, items: u32);
}
define_event! {
    /// An order left the pipeline.
    static ORDER_STOP = ORDERS { id: 2, name: "OrderStop", level: Level::Informational, keywords: 0x1 }
        (order_id: u64, total_cents: i64, ok: bool);
}
define_event! {
    /// A cache lookup; verbose, so the session below records it only with keyword 0x2.
    static LOOKUP = CACHE { id: 1, name: "Lookup", level: Level::Verbose, keywords: 0x2 }
        (key: &str, hit: bool, micros: f64);
}

/// Runs the workload under a session writing to `path`; returns the session's counters.
pub(crate) fn run(path: &std::path::Path) -> Result<SessionStats, eventpipe::Error> {
    let config = SessionConfig::new(
        vec![
            ProviderConfig::parse("Demo.Orders:0x1:Informational")?,
            ProviderConfig::parse("Demo.Cache:0x2:Verbose")?,
        ],
        Output::File(path.to_path_buf()),
    )
    .mode(BufferingMode::Block)
    .flush_interval(Duration::from_millis(50));
    let session = Session::start(config)?;
    let workers: Vec<_> = (0..3u64)
        .map(|w| {
            std::thread::Builder::new()
                .name(format!("worker-{w}"))
                .spawn(move || {
                    for i in 0..100u64 {
                        let order = w * 1000 + i;
                        write_event!(ORDER_START, order, "contoso", (i % 5) as u32 + 1);
                        write_event!(LOOKUP, "price-table", i % 3 != 0, 12.5);
                        write_event!(ORDER_STOP, order, (i as i64) * 199, i % 17 != 0);
                    }
                })
                .expect("spawn worker")
        })
        .collect();
    for w in workers {
        w.join().expect("worker panicked");
    }
    session.stop()
}

#[allow(dead_code)] // also compiled into a test, which calls `run` only
fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "two_providers.nettrace".into());
    match run(path.as_ref()) {
        Ok(stats) => println!(
            "wrote {path}: {} events, {} dropped, {} bytes",
            stats.events_written, stats.events_dropped, stats.bytes_written
        ),
        Err(e) => {
            eprintln!("two_providers: {e}");
            std::process::exit(1);
        }
    }
}
