//! Delivery to one backend: a bounded queue (in memory, or on disk so that what waits
//! survives the agent and costs no memory), one sending thread, retries with backoff.
//!
//! * [`Delivery::submit`] never blocks and never fails: when the queue is over its bound
//!   (bytes or items), the **oldest** requests are dropped and counted. A continuous
//!   profile's newest periods are worth more than its oldest.
//! * The sending thread sends the oldest request first. A connection error, a timeout, or
//!   a status that says "later" (408, 429, 5xx) keeps it at the head and waits:
//!   [`Options::min_backoff`], doubling to [`Options::max_backoff`], or the `Retry-After` the backend asks for
//!   (within the same bound). Any other status ≥ 300 is the backend refusing that
//!   request for good: it is dropped, counted as rejected, and its status and the start
//!   of the answer are logged.
//! * Delivery is **at least once**. A request whose body was sent whole but whose answer
//!   did not come in time may have been stored: retried, it may be stored twice. Where a
//!   second copy is worse than a gap (a profile counted twice doubles that period's
//!   samples), [`Options::retry_unanswered`] off drops it instead, counted as unconfirmed.
//! * A request past its [`Request::expires`] (the backend would refuse it as too old) is
//!   dropped when it reaches the head, unsent, and counted as expired.
//! * The log gets one line when the backend stops answering (not one per retry), one when
//!   it answers again, one per rejected request, and one when requests start to expire or
//!   go unconfirmed (not one per request).
//! * On disk, each request is one file written to a temporary name and renamed, so a crash
//!   leaves whole requests or none; requests left by an earlier run are sent first.

use std::collections::VecDeque;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One HTTP POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The whole URL.
    pub url: String,
    /// The body's `Content-Type`.
    pub content_type: String,
    /// Further headers (`Content-Encoding`, authorization, …).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// What it holds, for the log (`cpu profile of app (4242), 10:00:00-10:00:10`).
    pub what: String,
    /// From this time on the backend would refuse it (too old): it is dropped unsent.
    pub expires: Option<SystemTime>,
}

impl Request {
    fn size(&self) -> u64 {
        (self.body.len()
            + self.url.len()
            + self.what.len()
            + self.content_type.len()
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()) as u64
    }
}

/// Where waiting requests are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Store {
    /// In memory (lost when the process ends).
    Memory,
    /// One file per request in this folder (created if missing, owner-only).
    Disk(PathBuf),
}

/// How a [`Delivery`] queues and retries.
#[derive(Debug, Clone)]
pub struct Options {
    /// The backend's name in log lines and errors (`pyroscope`, `otlp`).
    pub name: String,
    /// Where waiting requests are kept.
    pub store: Store,
    /// At most this many bytes waiting; beyond it the oldest are dropped.
    pub max_bytes: u64,
    /// At most this many requests waiting; beyond it the oldest are dropped.
    pub max_requests: usize,
    /// The limit of each phase of an attempt: connecting, sending the request, waiting
    /// for the answer, reading it.
    pub timeout: Duration,
    /// The first wait after a failed attempt; it doubles with each failure after it.
    pub min_backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
    /// Whether a request sent whole whose answer did not come within the timeout is sent
    /// again (it may be stored twice) or dropped and counted as unconfirmed (it may be
    /// lost). On by default.
    pub retry_unanswered: bool,
}

impl Options {
    /// In memory, 64 MiB, 10,000 requests, 10 s per attempt, at most 60 s between attempts.
    pub fn new(name: impl Into<String>) -> Options {
        Options {
            name: name.into(),
            store: Store::Memory,
            max_bytes: 64 << 20,
            max_requests: 10_000,
            timeout: Duration::from_secs(10),
            min_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            retry_unanswered: true,
        }
    }
}

/// Counts since the delivery started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests handed to [`Delivery::submit`] (and found on disk at the start).
    pub submitted: u64,
    /// Requests the backend accepted (2xx).
    pub sent: u64,
    /// Attempts that failed and will be tried again.
    pub retries: u64,
    /// Requests dropped because the queue was over its bound (or unreadable on disk, or
    /// left in memory at shutdown).
    pub dropped: u64,
    /// Requests the backend refused for good (a status other than 408, 429, 5xx).
    pub rejected: u64,
    /// Requests dropped unsent because they were past their expiry.
    pub expired: u64,
    /// Requests sent whole that got no answer in time and were not sent again
    /// ([`Options::retry_unanswered`] off): the backend may or may not have them.
    pub unconfirmed: u64,
    /// Requests waiting now.
    pub queued: u64,
    /// Their bytes.
    pub queued_bytes: u64,
    /// Whether the last attempt failed.
    pub failing: bool,
    /// The last failure, for `/metrics` and the log.
    pub last_error: Option<String>,
}

/// What can go wrong starting a delivery.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The queue folder cannot be made or read.
    #[error("{name}: queue folder {path}")]
    Folder {
        /// The backend.
        name: String,
        /// The folder.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The sending thread cannot start.
    #[error("{name}: cannot start the sending thread")]
    Thread {
        /// The backend.
        name: String,
        /// Why.
        source: io::Error,
    },
}

type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// A queued request: in memory, or the file that holds it.
#[derive(Debug)]
enum Item {
    Memory(Request),
    Disk { path: PathBuf, size: u64 },
}

impl Item {
    fn size(&self) -> u64 {
        match self {
            Item::Memory(r) => r.size(),
            Item::Disk { size, .. } => *size,
        }
    }
}

#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<Item>,
    bytes: u64,
    next_file: u64,
}

struct Shared {
    options: Options,
    queue: Mutex<Queue>,
    wake: Condvar,
    stopping: AtomicBool,
    submitted: AtomicU64,
    sent: AtomicU64,
    retries: AtomicU64,
    dropped: AtomicU64,
    rejected: AtomicU64,
    expired: AtomicU64,
    unconfirmed: AtomicU64,
    failing: AtomicBool,
    /// Whether expiring (unconfirmed) requests were logged since the last one sent.
    said_expired: AtomicBool,
    said_unconfirmed: AtomicBool,
    last_error: Mutex<Option<String>>,
    log: Log,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update under these locks is whole (a push, a pop, a counter): a poisoned
    // value is still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A backend's queue and its sending thread.
pub struct Delivery {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("name", &self.shared.options.name)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Delivery {
    /// Starts the sending thread; on disk, the requests an earlier run left are queued
    /// first. `log` gets the lines the module docs describe.
    ///
    /// # Errors
    /// The queue folder cannot be created or listed; the thread cannot start.
    pub fn start(
        options: Options,
        log: impl Fn(&str) + Send + Sync + 'static,
    ) -> Result<Delivery, Error> {
        let mut queue = Queue::default();
        let mut found = 0;
        if let Store::Disk(dir) = &options.store {
            found = load_folder(dir, &mut queue).map_err(|source| Error::Folder {
                name: options.name.clone(),
                path: dir.clone(),
                source,
            })?;
        }
        let name = options.name.clone();
        let shared = Arc::new(Shared {
            options,
            queue: Mutex::new(queue),
            wake: Condvar::new(),
            stopping: AtomicBool::new(false),
            submitted: AtomicU64::new(found),
            sent: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            unconfirmed: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            said_expired: AtomicBool::new(false),
            said_unconfirmed: AtomicBool::new(false),
            last_error: Mutex::new(None),
            log: Arc::new(log),
        });
        if found > 0 {
            (shared.log)(&format!(
                "{name}: {found} request(s) left queued by an earlier run are sent first"
            ));
        }
        shared.trim();
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("eventpipe-export-{name}"))
            .spawn(move || thread_shared.run())
            .map_err(|source| Error::Thread { name, source })?;
        Ok(Delivery {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues `request`, dropping the oldest ones when the queue is over its bound. Never
    /// blocks on the backend; on disk, writes one file.
    pub fn submit(&self, request: Request) {
        self.shared.submitted.fetch_add(1, Ordering::Relaxed);
        let item = match &self.shared.options.store {
            Store::Memory => Item::Memory(request),
            Store::Disk(dir) => {
                let n = {
                    let mut q = lock(&self.shared.queue);
                    q.next_file += 1;
                    q.next_file
                };
                match write_request(dir, n, &request) {
                    Ok(item) => item,
                    Err(e) => {
                        self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                        (self.shared.log)(&format!(
                            "{}: cannot queue {} on disk ({e}); dropped",
                            self.shared.options.name, request.what
                        ));
                        return;
                    }
                }
            }
        };
        {
            let mut q = lock(&self.shared.queue);
            q.bytes += item.size();
            q.items.push_back(item);
        }
        self.shared.trim();
        self.shared.wake.notify_one();
    }

    /// The counts so far.
    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        let (queued, queued_bytes) = {
            let q = lock(&s.queue);
            (q.items.len() as u64, q.bytes)
        };
        Stats {
            submitted: s.submitted.load(Ordering::Relaxed),
            sent: s.sent.load(Ordering::Relaxed),
            retries: s.retries.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            rejected: s.rejected.load(Ordering::Relaxed),
            expired: s.expired.load(Ordering::Relaxed),
            unconfirmed: s.unconfirmed.load(Ordering::Relaxed),
            queued,
            queued_bytes,
            failing: s.failing.load(Ordering::Relaxed),
            last_error: lock(&s.last_error).clone(),
        }
    }

    /// The backend's name.
    pub fn name(&self) -> &str {
        &self.shared.options.name
    }

    /// Sends what is queued for at most `grace` (less if the backend is failing), then
    /// stops the thread; later submits only queue. Requests on disk stay there for the
    /// next run; those in memory are counted as dropped.
    pub fn shutdown(&self, grace: Duration) -> Stats {
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            let empty = lock(&self.shared.queue).items.is_empty();
            if empty || self.shared.failing.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop_thread();
        let mut q = lock(&self.shared.queue);
        let before = q.items.len();
        q.items.retain(|i| matches!(i, Item::Disk { .. }));
        let left = (before - q.items.len()) as u64;
        q.bytes = q.items.iter().map(Item::size).sum();
        drop(q);
        self.shared.dropped.fetch_add(left, Ordering::Relaxed);
        self.stats()
    }

    fn stop_thread(&self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        self.shared.wake.notify_all();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// How one attempt ended.
#[derive(Debug)]
enum Outcome {
    Sent,
    /// Try again, after at least this long when the backend said so.
    Later(String, Option<Duration>),
    Refused(String),
    /// Sent whole, no answer in time, and not to be sent again.
    Unanswered(String),
}

impl Shared {
    /// Drops the oldest requests while the queue is over a bound.
    fn trim(&self) {
        let mut dropped = Vec::new();
        {
            let mut q = lock(&self.queue);
            while q.items.len() > self.options.max_requests
                || (q.bytes > self.options.max_bytes && q.items.len() > 1)
            {
                match q.items.pop_front() {
                    Some(item) => {
                        q.bytes -= item.size();
                        dropped.push(item);
                    }
                    None => break,
                }
            }
        }
        if dropped.is_empty() {
            return;
        }
        self.dropped
            .fetch_add(dropped.len() as u64, Ordering::Relaxed);
        for item in dropped {
            if let Item::Disk { path, .. } = item {
                let _ = fs::remove_file(path);
            }
        }
    }

    fn run(&self) {
        // One client for the thread's life: its connections are kept alive between
        // requests, and its TLS settings are built once.
        // A limit per phase rather than one for the whole call: a timeout then says
        // whether the request had been sent whole (`RecvResponse`) when it struck.
        let limit = Some(self.options.timeout);
        let client: ureq::Agent = ureq::Agent::config_builder()
            .timeout_resolve(limit)
            .timeout_connect(limit)
            .timeout_send_request(limit)
            .timeout_send_body(limit)
            .timeout_recv_response(limit)
            .timeout_recv_body(limit)
            .http_status_as_error(false)
            .tls_config(tls())
            .build()
            .into();
        let mut backoff = self.options.min_backoff;
        loop {
            let head = {
                let mut q = lock(&self.queue);
                loop {
                    if self.stopping.load(Ordering::Relaxed) {
                        return;
                    }
                    if let Some(item) = q.items.front() {
                        break match item {
                            Item::Memory(r) => Ok((r.clone(), None)),
                            Item::Disk { path, .. } => {
                                read_request(path).map(|r| (r, Some(path.clone())))
                            }
                        };
                    }
                    q = self.wake.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            let (request, path) = match head {
                Ok(head) => head,
                Err(e) => {
                    (self.log)(&format!(
                        "{}: a queued request cannot be read ({e}); dropped",
                        self.options.name
                    ));
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    self.pop_head();
                    continue;
                }
            };
            if request.expires.is_some_and(|at| SystemTime::now() >= at) {
                self.expired.fetch_add(1, Ordering::Relaxed);
                if !self.said_expired.swap(true, Ordering::Relaxed) {
                    (self.log)(&format!(
                        "{}: {} waited past what {} takes; dropped unsent, as are the \
                         others that expire while it is away (counted as expired)",
                        self.options.name,
                        request.what,
                        host_of(&request.url)
                    ));
                }
                self.pop_head_if(path.as_deref(), &request);
                continue;
            }
            match self.attempt(&client, &request) {
                Outcome::Sent => {
                    self.sent.fetch_add(1, Ordering::Relaxed);
                    if self.failing.swap(false, Ordering::Relaxed) {
                        let queued = lock(&self.queue).items.len();
                        (self.log)(&format!(
                            "{}: {} answers again; {} request(s) queued",
                            self.options.name,
                            host_of(&request.url),
                            queued.saturating_sub(1)
                        ));
                    }
                    backoff = self.options.min_backoff;
                    self.said_expired.store(false, Ordering::Relaxed);
                    self.said_unconfirmed.store(false, Ordering::Relaxed);
                    self.pop_head_if(path.as_deref(), &request);
                }
                Outcome::Unanswered(why) => {
                    self.unconfirmed.fetch_add(1, Ordering::Relaxed);
                    if !self.said_unconfirmed.swap(true, Ordering::Relaxed) {
                        (self.log)(&format!(
                            "{}: {} did not answer for {} ({why}); not sent again, since it \
                             may have stored it (counted as unconfirmed)",
                            self.options.name,
                            host_of(&request.url),
                            request.what
                        ));
                    }
                    *lock(&self.last_error) = Some(why);
                    self.pop_head_if(path.as_deref(), &request);
                }
                Outcome::Refused(why) => {
                    self.rejected.fetch_add(1, Ordering::Relaxed);
                    self.failing.store(false, Ordering::Relaxed);
                    (self.log)(&format!(
                        "{}: {} refused {}: {why}; dropped",
                        self.options.name,
                        host_of(&request.url),
                        request.what
                    ));
                    *lock(&self.last_error) = Some(why);
                    self.pop_head_if(path.as_deref(), &request);
                }
                Outcome::Later(why, asked) => {
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    if !self.failing.swap(true, Ordering::Relaxed) {
                        (self.log)(&format!(
                            "{}: {} does not take {}: {why}; queueing (at most {} requests, \
                             {} MiB) and trying again",
                            self.options.name,
                            host_of(&request.url),
                            request.what,
                            self.options.max_requests,
                            self.options.max_bytes >> 20
                        ));
                    }
                    *lock(&self.last_error) = Some(why);
                    let wait = asked.unwrap_or(backoff).min(self.options.max_backoff);
                    backoff = (backoff * 2).min(self.options.max_backoff);
                    let q = lock(&self.queue);
                    let _ = self
                        .wake
                        .wait_timeout_while(q, wait, |_| !self.stopping.load(Ordering::Relaxed));
                }
            }
        }
    }

    fn pop_head(&self) {
        let mut q = lock(&self.queue);
        if let Some(item) = q.items.pop_front() {
            q.bytes -= item.size();
            if let Item::Disk { path, .. } = item {
                let _ = fs::remove_file(path);
            }
        }
    }

    /// Removes the head if it is still the request just sent (it may have been trimmed
    /// away while the attempt ran).
    fn pop_head_if(&self, path: Option<&Path>, request: &Request) {
        let same = {
            let q = lock(&self.queue);
            match (q.items.front(), path) {
                (Some(Item::Disk { path: p, .. }), Some(path)) => p == path,
                (Some(Item::Memory(r)), None) => r == request,
                _ => false,
            }
        };
        if same {
            self.pop_head();
        }
    }

    fn attempt(&self, client: &ureq::Agent, request: &Request) -> Outcome {
        let mut call = client
            .post(&request.url)
            .header("Content-Type", &request.content_type);
        for (k, v) in &request.headers {
            call = call.header(k, v);
        }
        match call.send(&request.body[..]) {
            Err(ureq::Error::Timeout(ureq::Timeout::RecvResponse))
                if !self.options.retry_unanswered =>
            {
                Outcome::Unanswered(format!(
                    "no answer within {:?} of sending",
                    self.options.timeout
                ))
            }
            Err(e) => Outcome::Later(e.to_string(), None),
            Ok(mut answer) => {
                let status = answer.status().as_u16();
                if (200..300).contains(&status) {
                    return Outcome::Sent;
                }
                let retry_after = answer
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let mut text = String::new();
                let _ = answer
                    .body_mut()
                    .with_config()
                    .limit(4096)
                    .reader()
                    .take(4096)
                    .read_to_string(&mut text);
                let text: String = text.trim().chars().take(200).collect();
                let why = if text.is_empty() {
                    format!("HTTP {status}")
                } else {
                    format!("HTTP {status}: {text}")
                };
                if status == 408 || status == 429 || status >= 500 {
                    Outcome::Later(why, retry_after)
                } else {
                    Outcome::Refused(why)
                }
            }
        }
    }
}

/// `scheme://host:port` of a URL, for log lines (no path, no credentials).
fn host_of(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.split('/').next().unwrap_or(rest);
    let host = host.rsplit('@').next().unwrap_or(host);
    if scheme.is_empty() {
        host.to_owned()
    } else {
        format!("{scheme}://{host}")
    }
}

/// A queued request's file: this header, then the fields; version 1 had no expiry.
const MAGIC: &[u8; 8] = b"EPXREQ2\n";
const MAGIC_V1: &[u8; 8] = b"EPXREQ1\n";

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn encode(request: &Request) -> Vec<u8> {
    let mut out = Vec::with_capacity(request.body.len() + 256);
    out.extend_from_slice(MAGIC);
    put(&mut out, request.url.as_bytes());
    put(&mut out, request.content_type.as_bytes());
    put(&mut out, request.what.as_bytes());
    out.extend_from_slice(&(request.headers.len() as u64).to_le_bytes());
    for (k, v) in &request.headers {
        put(&mut out, k.as_bytes());
        put(&mut out, v.as_bytes());
    }
    put(&mut out, &request.body);
    // Milliseconds since the Unix epoch; 0: none.
    let expires = request.expires.map_or(0, |at| {
        at.duration_since(UNIX_EPOCH).map_or(1, |d| {
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
        })
    });
    out.extend_from_slice(&expires.to_le_bytes());
    out
}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("not a queued request: {what}"),
    )
}

fn number(rest: &mut &[u8]) -> io::Result<u64> {
    let (n, tail) = rest
        .split_first_chunk::<8>()
        .ok_or_else(|| bad("cut short"))?;
    *rest = tail;
    Ok(u64::from_le_bytes(*n))
}

fn take(rest: &mut &[u8]) -> io::Result<Vec<u8>> {
    let n = usize::try_from(number(rest)?).map_err(|_| bad("length"))?;
    if rest.len() < n {
        return Err(bad("cut short"));
    }
    let (v, tail) = rest.split_at(n);
    *rest = tail;
    Ok(v.to_vec())
}

fn take_text(rest: &mut &[u8]) -> io::Result<String> {
    String::from_utf8(take(rest)?).map_err(|_| bad("text"))
}

fn decode(bytes: &[u8]) -> io::Result<Request> {
    let (mut rest, with_expiry) = match (bytes.strip_prefix(MAGIC), bytes.strip_prefix(MAGIC_V1)) {
        (Some(rest), _) => (rest, true),
        (None, Some(rest)) => (rest, false),
        (None, None) => return Err(bad("no header")),
    };
    let url = take_text(&mut rest)?;
    let content_type = take_text(&mut rest)?;
    let what = take_text(&mut rest)?;
    let headers_len = number(&mut rest)?;
    if headers_len > 1024 {
        return Err(bad("header count"));
    }
    let mut headers = Vec::new();
    for _ in 0..headers_len {
        let k = take_text(&mut rest)?;
        let v = take_text(&mut rest)?;
        headers.push((k, v));
    }
    let body = take(&mut rest)?;
    let expires = match with_expiry {
        true => match number(&mut rest)? {
            0 => None,
            ms => Some(UNIX_EPOCH + Duration::from_millis(ms)),
        },
        false => None,
    };
    if !rest.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(Request {
        url,
        content_type,
        headers,
        body,
        what,
        expires,
    })
}

fn file_name(n: u64) -> String {
    format!("{n:016}.req")
}

fn write_request(dir: &Path, n: u64, request: &Request) -> io::Result<Item> {
    let bytes = encode(request);
    let path = dir.join(file_name(n));
    let temporary = dir.join(format!(".{}.partial", file_name(n)));
    let mut file = fs::File::create(&temporary)?;
    file.write_all(&bytes)?;
    drop(file);
    fs::rename(&temporary, &path)?;
    Ok(Item::Disk {
        path,
        size: bytes.len() as u64,
    })
}

fn read_request(path: &Path) -> io::Result<Request> {
    decode(&fs::read(path)?)
}

/// Queues the whole requests an earlier run left in `dir` (oldest first) and removes its
/// partial files; returns how many were queued.
fn load_folder(dir: &Path, queue: &mut Queue) -> io::Result<u64> {
    fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') && name.ends_with(".partial") {
            let _ = fs::remove_file(entry.path());
            continue;
        }
        if let Some(n) = name
            .strip_suffix(".req")
            .and_then(|n| n.parse::<u64>().ok())
        {
            found.push((n, entry.path(), entry.metadata()?.len()));
        }
    }
    found.sort();
    let count = found.len() as u64;
    for (n, path, size) in found {
        queue.next_file = queue.next_file.max(n);
        queue.bytes += size;
        queue.items.push_back(Item::Disk { path, size });
    }
    Ok(count)
}

#[cfg(test)]
mod tests;

/// The TLS stack the build has: rustls, or macOS's own.
fn tls() -> ureq::tls::TlsConfig {
    let provider = if cfg!(target_vendor = "apple") {
        ureq::tls::TlsProvider::NativeTls
    } else {
        ureq::tls::TlsProvider::Rustls
    };
    ureq::tls::TlsConfig::builder().provider(provider).build()
}
