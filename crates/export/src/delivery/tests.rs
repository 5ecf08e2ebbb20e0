use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;

use super::*;

/// What the scripted backend saw of one request.
#[derive(Debug)]
struct Seen {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// A loopback HTTP server answering each request with the next `(status, extra header)`
/// of `script`, then 200 for ever; every request it read goes to the channel.
fn backend(script: Vec<(u16, &'static str)>) -> (String, mpsc::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut script = script.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                continue;
            }
            let path = line.split(' ').nth(1).unwrap_or("").to_owned();
            let mut headers = Vec::new();
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                let (k, v) = h.split_once(':').unwrap();
                headers.push((k.to_ascii_lowercase(), v.trim().to_owned()));
            }
            let length: usize = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .map_or(0, |(_, v)| v.parse().unwrap());
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let (status, extra) = script.next().unwrap_or((200, ""));
            let answer = format!(
                "HTTP/1.1 {status} X\r\nContent-Length: 4\r\nConnection: close\r\n{extra}\r\nnope"
            );
            let _ = stream.write_all(answer.as_bytes());
            let _ = tx.send(Seen {
                path,
                headers,
                body,
            });
        }
    });
    (url, rx)
}

fn request(url: &str, n: u8) -> Request {
    Request {
        url: format!("{url}/push"),
        content_type: "application/proto".into(),
        headers: vec![("Content-Encoding".into(), "gzip".into())],
        body: vec![n; 100],
        what: format!("request {n}"),
    }
}

fn fast(name: &str) -> Options {
    Options {
        min_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        timeout: Duration::from_secs(5),
        ..Options::new(name)
    }
}

fn logger() -> (
    impl Fn(&str) + Send + Sync + 'static,
    Arc<Mutex<Vec<String>>>,
) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&lines);
    (move |l: &str| lock(&sink).push(l.to_owned()), lines)
}

fn wait_for(delivery: &Delivery, done: impl Fn(&Stats) -> bool) -> Stats {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = delivery.stats();
        if done(&stats) {
            return stats;
        }
        assert!(Instant::now() < deadline, "gave up waiting: {stats:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_request_arrives_whole_with_its_headers() {
    let (url, seen) = backend(vec![]);
    let (log, _) = logger();
    let delivery = Delivery::start(fast("test"), log).unwrap();
    delivery.submit(request(&url, 7));
    let stats = wait_for(&delivery, |s| s.sent == 1);
    assert_eq!((stats.queued, stats.dropped, stats.retries), (0, 0, 0));
    let got = seen.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(got.path, "/push");
    assert_eq!(got.body, vec![7; 100]);
    assert!(got
        .headers
        .contains(&("content-type".into(), "application/proto".into())));
    assert!(got
        .headers
        .contains(&("content-encoding".into(), "gzip".into())));
}

#[test]
fn busy_and_failing_answers_are_retried_in_order_and_a_refusal_is_dropped_and_logged() {
    // 503, then 429 with Retry-After: 1, then 200 for request 1; 400 for request 2;
    // request 3 goes through.
    let (url, seen) = backend(vec![
        (503, ""),
        (429, "Retry-After: 1\r\n"),
        (200, ""),
        (400, ""),
    ]);
    let (log, lines) = logger();
    let options = Options {
        max_backoff: Duration::from_secs(2),
        ..fast("test")
    };
    let delivery = Delivery::start(options, log).unwrap();
    let started = Instant::now();
    for n in 1..=3 {
        delivery.submit(request(&url, n));
    }
    let stats = wait_for(&delivery, |s| s.sent + s.rejected == 3);
    assert_eq!(
        (stats.sent, stats.rejected, stats.retries, stats.dropped),
        (2, 1, 2, 0)
    );
    // The Retry-After second was honoured (the backoff alone is 50 + 100 ms).
    assert!(started.elapsed() >= Duration::from_millis(1000));
    let bodies: Vec<u8> = seen.try_iter().map(|s| s.body[0]).collect();
    assert_eq!(bodies, vec![1, 1, 1, 2, 3]);
    let lines = lock(&lines).clone();
    assert_eq!(
        lines.iter().filter(|l| l.contains("does not take")).count(),
        1,
        "one line when the backend fails, not one per retry: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("answers again")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("refused request 2: HTTP 400: nope")),
        "{lines:?}"
    );
}

#[test]
fn an_unreachable_backend_keeps_the_newest_within_the_bound_and_recovers() {
    // A port nothing listens on: take one, and close it.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let dir = std::env::temp_dir().join(format!("epx-queue-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let options = Options {
        store: Store::Disk(dir.clone()),
        max_requests: 3,
        ..fast("test")
    };
    let (log, lines) = logger();
    let delivery = Delivery::start(options.clone(), log).unwrap();
    for n in 1..=5 {
        delivery.submit(request(&dead, n));
    }
    let stats = wait_for(&delivery, |s| s.retries >= 2);
    assert!(stats.failing);
    assert_eq!((stats.queued, stats.dropped, stats.sent), (3, 2, 0));
    assert!(stats.last_error.is_some());
    let files = fs::read_dir(&dir).unwrap().count();
    assert_eq!(
        files, 3,
        "one file per queued request, none for the dropped"
    );
    assert!(
        lock(&lines)[0].contains("does not take request"),
        "{:?}",
        lock(&lines)
    );
    // The agent stops; what is on disk stays for the next run.
    let stats = delivery.shutdown(Duration::from_millis(100));
    assert_eq!(stats.queued, 3);

    // The next run, with the backend up: the three newest arrive, oldest first, and the
    // folder empties.
    let (url, seen) = backend(vec![]);
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let mut r = read_request(&path).unwrap();
        r.url = r.url.replace(&dead, &url);
        fs::write(&path, encode(&r)).unwrap();
    }
    let (log, lines) = logger();
    let delivery = Delivery::start(options, log).unwrap();
    assert!(lock(&lines)[0].contains("3 request(s) left queued"));
    wait_for(&delivery, |s| s.sent == 3 && s.queued == 0);
    let bodies: Vec<u8> = seen.try_iter().map(|s| s.body[0]).collect();
    assert_eq!(bodies, vec![3, 4, 5]);
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    drop(delivery);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn the_byte_bound_drops_the_oldest_and_the_memory_left_at_shutdown_is_counted() {
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let options = Options {
        max_bytes: 1000,
        ..fast("test")
    };
    let (log, _) = logger();
    let delivery = Delivery::start(options, log).unwrap();
    for n in 0..20 {
        delivery.submit(request(&dead, n));
    }
    let stats = delivery.stats();
    assert!(stats.queued_bytes <= 1000, "{stats:?}");
    assert_eq!(stats.queued + stats.dropped, 20);
    let stats = delivery.shutdown(Duration::from_millis(50));
    assert_eq!(
        stats.dropped, 20,
        "what was queued in memory is lost at shutdown"
    );
}

#[test]
fn damaged_queue_files_are_dropped_not_sent() {
    let dir = std::env::temp_dir().join(format!("epx-damaged-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let (url, seen) = backend(vec![]);
    let whole = encode(&request(&url, 9));
    fs::write(dir.join(file_name(1)), &whole[..whole.len() - 3]).unwrap();
    fs::write(dir.join(file_name(2)), &whole).unwrap();
    fs::write(dir.join(".0000000000000003.req.partial"), b"half").unwrap();
    let (log, lines) = logger();
    let delivery = Delivery::start(
        Options {
            store: Store::Disk(dir.clone()),
            ..fast("test")
        },
        log,
    )
    .unwrap();
    let stats = wait_for(&delivery, |s| s.sent == 1 && s.queued == 0);
    assert_eq!(stats.dropped, 1);
    assert_eq!(seen.try_iter().count(), 1);
    assert!(lock(&lines).iter().any(|l| l.contains("cannot be read")));
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    drop(delivery);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn queued_requests_round_trip_and_damage_is_an_error() {
    let r = request("http://x", 3);
    assert_eq!(decode(&encode(&r)).unwrap(), r);
    let bytes = encode(&r);
    for cut in [0, 5, 9, 20, bytes.len() - 1] {
        assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    assert_eq!(
        host_of("https://user:pw@example.com:443/a/b"),
        "https://example.com:443"
    );
}

#[test]
fn a_backend_slower_than_the_timeout_is_retried_and_submit_never_waits_for_it() {
    // Reads the request, then answers only after 2 s, for the first two connections.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                if n < 2 {
                    std::thread::sleep(Duration::from_secs(2));
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            });
        }
    });
    let (log, lines) = logger();
    let delivery = Delivery::start(
        Options {
            timeout: Duration::from_millis(300),
            ..fast("test")
        },
        log,
    )
    .unwrap();
    let started = Instant::now();
    for n in 0..50 {
        delivery.submit(request(&url, n));
    }
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "submitting does not wait for the backend"
    );
    let stats = wait_for(&delivery, |s| s.sent == 50);
    assert!(stats.retries >= 2, "{stats:?}");
    assert_eq!(stats.dropped, 0);
    assert!(lock(&lines).iter().any(|l| l.contains("does not take")));
}
