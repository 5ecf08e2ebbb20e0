//! mini-redis's own server `main` (src/bin/server.rs of mini-redis 0.4.1 on crates.io, with
//! clap's derive in place of structopt's), with what the guide's instrumentation page adds:
//! the CPU sampler, the diagnostics server, and `EventPipeLayer` beside the program's own
//! `fmt` log, its `EnvFilter` given to the log alone. Lines added are marked `// eventpipe`.

use mini_redis::{server, DEFAULT_PORT};

use clap::Parser;
use tokio::net::TcpListener;
use tokio::signal;
use tracing_subscriber::prelude::*; // eventpipe
use tracing_subscriber::{fmt, EnvFilter}; // eventpipe

#[tokio::main]
pub async fn main() -> mini_redis::Result<()> {
    // enable logging
    // see https://docs.rs/tracing for more info
    // mini-redis: `tracing_subscriber::fmt::try_init()?;`, a fmt log filtered by RUST_LOG.
    let log = fmt::layer().with_filter(EnvFilter::from_default_env()); // eventpipe
    tracing_subscriber::registry() // eventpipe
        .with(log) // eventpipe
        .with(eventpipe_tracing::EventPipeLayer::new()) // eventpipe
        .try_init()?; // eventpipe
    eventpipe_profiler::cpu::register()?; // eventpipe
    eventpipe::diagnostics::start_server()?; // eventpipe

    let cli = Cli::parse();
    let port = cli.port.as_deref().unwrap_or(DEFAULT_PORT);

    // Bind a TCP listener
    let listener = TcpListener::bind(&format!("127.0.0.1:{}", port)).await?;
    println!("listening on {}", listener.local_addr()?.port()); // eventpipe (for the test)

    server::run(listener, signal::ctrl_c()).await
}

#[derive(Parser, Debug)]
#[command(name = "mini-redis-server", about = "A Redis server")]
struct Cli {
    #[arg(long)]
    port: Option<String>,
}
