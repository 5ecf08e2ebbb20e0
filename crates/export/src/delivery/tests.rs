use std::io::{Read, Write};
use std::net::TcpListener;

use eventpipe_test_support::http::ScriptedServer;

use super::*;

/// A loopback HTTP server answering each request with the next status of `script` (a
/// 429 with `Retry-After: 1`), then 200 for ever, each with the body `nope`; it keeps every
/// request it read.
fn backend(script: Vec<u16>) -> ScriptedServer {
    ScriptedServer::start(0, script, |_| "nope".into())
}

fn request(url: &str, n: u8) -> Request {
    Request {
        url: format!("{url}/push"),
        content_type: "application/proto".into(),
        headers: vec![("Content-Encoding".into(), "gzip".into())],
        body: vec![n; 100],
        what: format!("request {n}"),
        expires: None,
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
    let server = backend(vec![]);
    let (log, _) = logger();
    let delivery = Delivery::start(fast("test"), log).unwrap();
    delivery.submit(request(&server.url(), 7));
    let stats = wait_for(&delivery, |s| s.sent == 1);
    assert_eq!((stats.queued, stats.dropped, stats.retries), (0, 0, 0));
    let got = server.received().remove(0);
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
    let server = backend(vec![503, 429, 200, 400]);
    let url = server.url();
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
    let bodies: Vec<u8> = server.received().iter().map(|s| s.body[0]).collect();
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
    let server = backend(vec![]);
    let url = server.url();
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
    let bodies: Vec<u8> = server.received().iter().map(|s| s.body[0]).collect();
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
    let server = backend(vec![]);
    let url = server.url();
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
    assert_eq!(server.received().len(), 1);
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

/// A loopback server that reads each request whole (headers and `Content-Length` bytes
/// of body), keeps its body's first byte, and answers 200 only to connections after the
/// first `silent`; those it holds open without a word.
fn reads_whole_then_silent(silent: usize) -> (String, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { return };
            let record = Arc::clone(&record);
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                let body = loop {
                    let Ok(k) = stream.read(&mut buf) else { return };
                    if k == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..k]);
                    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if got.len() >= end + 4 + length {
                        break got[end + 4..end + 4 + length].to_vec();
                    }
                };
                lock(&record).push(body[0]);
                if n < silent {
                    std::thread::sleep(Duration::from_secs(3));
                    return;
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            });
        }
    });
    (url, seen)
}

#[test]
fn a_request_sent_whole_and_unanswered_is_not_sent_twice_when_retries_are_off() {
    let (url, seen) = reads_whole_then_silent(1);
    let (log, lines) = logger();
    let delivery = Delivery::start(
        Options {
            timeout: Duration::from_millis(300),
            retry_unanswered: false,
            ..fast("test")
        },
        log,
    )
    .unwrap();
    delivery.submit(request(&url, 1));
    delivery.submit(request(&url, 2));
    let stats = wait_for(&delivery, |s| s.sent == 1 && s.queued == 0);
    assert_eq!((stats.unconfirmed, stats.retries, stats.dropped), (1, 0, 0));
    // The server got request 1 once: it may have stored it, so it is not sent again.
    assert_eq!(*lock(&seen), vec![1, 2]);
    let lines = lock(&lines).clone();
    assert_eq!(
        lines.iter().filter(|l| l.contains("unconfirmed")).count(),
        1,
        "{lines:?}"
    );
}

#[test]
fn a_request_sent_whole_and_unanswered_is_sent_again_by_default() {
    let (url, seen) = reads_whole_then_silent(1);
    let (log, _) = logger();
    let delivery = Delivery::start(
        Options {
            timeout: Duration::from_millis(300),
            ..fast("test")
        },
        log,
    )
    .unwrap();
    delivery.submit(request(&url, 1));
    let stats = wait_for(&delivery, |s| s.sent == 1);
    assert_eq!((stats.unconfirmed, stats.retries), (0, 1));
    assert_eq!(
        *lock(&seen),
        vec![1, 1],
        "at least once: the server has it twice"
    );
}

#[test]
fn a_request_that_cannot_connect_is_retried_even_with_retries_of_the_unanswered_off() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let (log, _) = logger();
    let delivery = Delivery::start(
        Options {
            retry_unanswered: false,
            ..fast("test")
        },
        log,
    )
    .unwrap();
    delivery.submit(request(&url, 4));
    wait_for(&delivery, |s| s.retries >= 2);
    let server = ScriptedServer::start(port, vec![], |_| "ok".into());
    let stats = wait_for(&delivery, |s| s.sent == 1);
    assert_eq!(stats.unconfirmed, 0);
    assert_eq!(server.received().len(), 1);
}

#[test]
fn expired_requests_are_dropped_unsent_counted_and_logged_once() {
    let dir = std::env::temp_dir().join(format!("epx-expired-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let server = backend(vec![]);
    let url = server.url();
    let past = SystemTime::now() - Duration::from_secs(1);
    let future = SystemTime::now() + Duration::from_secs(3600);
    // Left on disk by an earlier run: two expired, then one still good.
    fs::create_dir_all(&dir).unwrap();
    for (n, expires) in [(1u8, past), (2, past), (3, future)] {
        let r = Request {
            expires: Some(expires),
            ..request(&url, n)
        };
        fs::write(dir.join(file_name(u64::from(n))), encode(&r)).unwrap();
    }
    let (log, lines) = logger();
    let delivery = Delivery::start(
        Options {
            store: Store::Disk(dir.clone()),
            ..fast("test")
        },
        log,
    )
    .unwrap();
    let stats = wait_for(&delivery, |s| s.queued == 0);
    assert_eq!((stats.expired, stats.sent, stats.dropped), (2, 1, 0));
    let bodies: Vec<u8> = server.received().iter().map(|s| s.body[0]).collect();
    assert_eq!(bodies, vec![3], "the expired ones are never sent");
    let lines = lock(&lines).clone();
    assert_eq!(
        lines.iter().filter(|l| l.contains("expire")).count(),
        1,
        "{lines:?}"
    );
    drop(delivery);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_request_queued_by_the_previous_format_still_reads() {
    let r = Request {
        expires: Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)),
        ..request("http://x", 5)
    };
    assert_eq!(decode(&encode(&r)).unwrap(), r);
    // Version 1: the same fields, no expiry.
    let mut v1 = encode(&request("http://x", 5));
    v1.truncate(v1.len() - 8);
    v1[..8].copy_from_slice(MAGIC_V1);
    assert_eq!(decode(&v1).unwrap(), request("http://x", 5));
}
