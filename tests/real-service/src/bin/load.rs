//! Drives a mini-redis server with mini-redis's own client: `load PORT SECONDS [TASKS]`,
//! each task a connection doing SET then GET of its own keys in a loop. Prints the
//! operations done.

use std::time::{Duration, Instant};

use bytes::Bytes;
use mini_redis::client;

#[tokio::main]
async fn main() -> mini_redis::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(6379);
    let seconds: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5.0);
    let tasks: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(8);
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let mut handles = Vec::new();
    for t in 0..tasks {
        handles.push(tokio::spawn(async move {
            let mut client = client::connect(("127.0.0.1", port)).await?;
            let mut ops = 0u64;
            while Instant::now() < until {
                let key = format!("key-{t}-{}", ops % 100);
                client.set(&key, Bytes::from_static(b"value")).await?;
                client.get(&key).await?;
                ops += 2;
            }
            Ok::<u64, mini_redis::Error>(ops)
        }));
    }
    let mut ops = 0;
    for h in handles {
        ops += h.await??;
    }
    println!("ops {ops}");
    Ok(())
}
