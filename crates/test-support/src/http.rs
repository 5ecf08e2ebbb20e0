//! A scripted HTTP server on loopback, in a backend's place (an OTLP collector, Pyroscope,
//! any push target) for the tests of what delivers to one: it answers its first requests
//! with the statuses of its script (a `Retry-After: 1` with a 429), then 200, and keeps
//! every request it read.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};

/// A request the server received: its path, its headers (names lower case), the status it
/// was answered with, its body (decompressed when it came gzip-encoded).
#[derive(Clone, Debug)]
pub struct Received {
    /// The request target, e.g. `/v1/traces`.
    pub path: String,
    /// Every header, name lower case, value trimmed.
    pub headers: Vec<(String, String)>,
    /// The status it was answered with.
    pub status: u16,
    /// The body: de-chunked, and decompressed when `Content-Encoding: gzip` came with gzip
    /// data (anything else is kept as sent).
    pub body: Vec<u8>,
}

/// The server; it runs until the test process exits.
#[derive(Debug)]
pub struct ScriptedServer {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl ScriptedServer {
    /// Listens on loopback `port` (0: any free port) and answers the n-th request (over
    /// every connection, each kept alive for as many requests as the client sends) with
    /// `script[n]`, 200 past its end; each answer's body is `text(status)`. A request is
    /// in [`received`](ScriptedServer::received) before its answer is written.
    pub fn start(port: u16, script: Vec<u16>, text: fn(u16) -> String) -> ScriptedServer {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("binding a loopback port");
        let port = listener.local_addr().expect("a bound address").port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let answered = Arc::new(Mutex::new(0usize));
        let script = Arc::new(script);
        let kept = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let (received, answered, script) = (
                    Arc::clone(&kept),
                    Arc::clone(&answered),
                    Arc::clone(&script),
                );
                std::thread::spawn(move || {
                    let Ok(mut writer) = stream.try_clone() else {
                        return;
                    };
                    let mut reader = BufReader::new(stream);
                    while let Some((path, headers, body)) = read_request(&mut reader) {
                        let status = {
                            let mut n = lock(&answered);
                            *n += 1;
                            script.get(*n - 1).copied().unwrap_or(200)
                        };
                        let extra = if status == 429 {
                            "Retry-After: 1\r\n"
                        } else {
                            ""
                        };
                        let text = text(status);
                        let answer = format!(
                            "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\n{extra}\
                             Content-Length: {}\r\n\r\n{text}",
                            text.len()
                        );
                        lock(&received).push(Received {
                            path,
                            headers,
                            status,
                            body,
                        });
                        if writer.write_all(answer.as_bytes()).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        ScriptedServer { port, received }
    }

    /// Every request received so far, in the order they were answered.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.received).clone()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Path, headers (names lower case), body.
type Request = (String, Vec<(String, String)>, Vec<u8>);

/// Reads one HTTP/1.1 request; `None` at the end of the connection or on anything
/// malformed.
fn read_request(stream: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if stream.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let path = line.split_whitespace().nth(1)?.to_owned();
    let mut length = 0usize;
    let mut chunked = false;
    let mut gzip = false;
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        stream.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        let name = name.trim().to_ascii_lowercase();
        match name.as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            "content-encoding" => gzip = value.trim().eq_ignore_ascii_case("gzip"),
            _ => {}
        }
        headers.push((name, value.trim().to_owned()));
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            stream.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; size + 2];
            stream.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        body.resize(length, 0);
        stream.read_exact(&mut body).ok()?;
    }
    // gzip's magic number: a body merely labelled gzip stays as sent.
    if gzip && body.starts_with(&[0x1f, 0x8b]) {
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut plain)
            .ok()?;
        body = plain;
    }
    Some((path, headers, body))
}
