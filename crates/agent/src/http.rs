//! The agent's HTTP API, shaped after dotnet-monitor's: routes, the API-key check, JSON
//! problem documents for every error, and the connection loop that bounds what a client
//! can hold (connections, header size and time, body size).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use eventpipe_client::capture::counters::{
    default_specs, parse_counter_specs, run, SessionConfig, SessionEnd, Sink, SinkResult,
};
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

use super::processes::Process;
use super::processes::RuntimeKind;
use super::sessions::{self, Snapshot, TraceAsk};
use super::{egress, lock, log, prometheus, run_operation, Agent, Listen, Naming, Work};

/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 512;
/// A request's head must arrive within this (slow clients hold nothing longer).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request head (request line and headers) read.
const MAX_HEAD: usize = 16 * 1024;
/// The largest request body (a provider list).
const MAX_BODY: usize = 64 * 1024;
/// The longest collection a request may ask for.
const MAX_DURATION_SECONDS: f64 = 86_400.0;
/// Chunks of a streamed response waiting for a slow client.
const STREAM_CHUNKS: usize = 16;
/// How long `/stacks` waits for the process to answer.
const STACKS_TIMEOUT: Duration = Duration::from_secs(5);

/// A bound listener.
#[derive(Debug)]
pub(crate) enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

impl Listener {
    /// Where it listens (a port 0 asked for is the port the kernel chose).
    pub(crate) fn address(&self, asked: &Listen) -> Listen {
        match (self, asked) {
            (Listener::Tcp(l), _) => l.local_addr().map_or_else(|_| asked.clone(), Listen::Tcp),
            (Listener::Unix(_), asked) => asked.clone(),
        }
    }
}

/// Binds `listen`; a Unix socket is created owner-only (mode 0600).
pub(crate) async fn bind(listen: &Listen) -> Result<Listener> {
    Ok(match listen {
        Listen::Tcp(addr) => Listener::Tcp(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening on {addr}"))?,
        ),
        Listen::Unix(path) => {
            let std = eventpipe_ipc::transport::listen_private(path)
                .with_context(|| format!("listening on {}", path.display()))?;
            std.set_nonblocking(true)?;
            Listener::Unix(tokio::net::UnixListener::from_std(std)?)
        }
    })
}

/// An RFC 7807 problem document.
#[derive(Debug)]
pub(crate) struct Problem {
    status: StatusCode,
    detail: String,
}

impl Problem {
    fn new(status: StatusCode, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            detail: detail.into(),
        }
    }

    fn bad(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, detail)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "type": "about:blank",
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            body.to_string(),
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

type Reply = std::result::Result<Response, Problem>;
type Params = std::result::Result<Query<HashMap<String, String>>, QueryRejection>;

fn router(agent: Arc<Agent>) -> Router {
    Router::new()
        .route("/processes", get(processes))
        .route("/info", get(info))
        .route("/trace", get(trace_get).post(trace_post))
        .route("/gcdump", get(gcdump))
        .route("/heap", get(heap))
        .route("/stacks", get(stacks))
        .route("/counters", get(counters))
        .route("/metrics", get(metrics))
        .route("/operations", get(operations))
        .route("/operations/{id}", get(operation).delete(cancel_operation))
        .fallback(|| async { Problem::new(StatusCode::NOT_FOUND, "no such endpoint") })
        .method_not_allowed_fallback(|| async {
            Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "this endpoint does not take that method",
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&agent),
            authorize,
        ))
        .with_state(agent)
}

/// Every request carries a key when the agent has keys.
async fn authorize(State(agent): State<Arc<Agent>>, request: Request, next: Next) -> Response {
    agent.requests.fetch_add(1, Ordering::Relaxed);
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    if agent.keys.is_empty() || super::auth::accepts(header, &agent.keys) {
        // A body announced too large is refused before a byte of it is read.
        let announced = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if announced.is_some_and(|n| n > MAX_BODY as u64) {
            return Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("a request body has at most {MAX_BODY} bytes"),
            )
            .into_response();
        }
        next.run(request).await
    } else {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "this agent needs an API key: `Authorization: Bearer KEY`",
        )
        .into_response()
    }
}

/// Serves until SIGTERM or SIGINT, then stops what streams, closes idle connections and
/// waits (bounded) for the rest.
pub(crate) async fn serve(agent: Arc<Agent>, listener: Listener) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let router = router(Arc::clone(&agent));
    let mut terminate = signal(SignalKind::terminate()).context("watching SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("watching SIGINT")?;
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&slots).acquire_owned() => p.context("the connection slots closed")?,
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        };
        let accepted = tokio::select! {
            a = accept(&listener) => a,
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        };
        // Ended connections are reaped as new ones come.
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok(Accepted::Tcp(io)) => {
                connections.spawn(serve_connection(
                    io,
                    router.clone(),
                    stop_rx.clone(),
                    permit,
                ));
            }
            Ok(Accepted::Unix(io)) => {
                connections.spawn(serve_connection(
                    io,
                    router.clone(),
                    stop_rx.clone(),
                    permit,
                ));
            }
            Err(e) => {
                // Out of descriptors, say: wait, rather than spin.
                log(&format!("accepting a connection failed: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    agent.stopping.store(true, Ordering::Relaxed);
    for flag in lock(&agent.streams).iter() {
        flag.store(true, Ordering::Relaxed);
    }
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(Duration::from_secs(30), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        log("some connections did not finish within 30 s; closing them");
        connections.abort_all();
    }
    Ok(())
}

enum Accepted {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

async fn accept(listener: &Listener) -> std::io::Result<Accepted> {
    match listener {
        Listener::Tcp(l) => l.accept().await.map(|(s, _)| Accepted::Tcp(s)),
        Listener::Unix(l) => l.accept().await.map(|(s, _)| Accepted::Unix(s)),
    }
}

async fn serve_connection<I>(
    io: I,
    router: Router,
    mut stop: watch::Receiver<bool>,
    permit: tokio::sync::OwnedSemaphorePermit,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper_util::service::TowerToHyperService::new(router);
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        _ = async { let _ = stop.wait_for(|s| *s).await; } => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
    drop(permit);
}

/// The query parameters, checked against the names the endpoint knows.
fn params(query: Params, known: &[&str]) -> std::result::Result<HashMap<String, String>, Problem> {
    let Query(map) = query.map_err(|e| Problem::bad(format!("the query string: {e}")))?;
    if let Some(unknown) = map.keys().find(|k| !known.contains(&k.as_str())) {
        let takes = if known.is_empty() {
            "no parameters".to_string()
        } else {
            known.join(", ")
        };
        return Err(Problem::bad(format!(
            "unknown parameter `{}` (this endpoint takes {takes})",
            unknown.chars().take(64).collect::<String>(),
        )));
    }
    Ok(map)
}

/// The process named by `pid=` or `name=`.
fn target(
    agent: &Agent,
    params: &HashMap<String, String>,
) -> std::result::Result<Process, Problem> {
    match (params.get("pid"), params.get("name")) {
        (Some(pid), None) => {
            let pid: u32 = pid
                .parse()
                .map_err(|_| Problem::bad(format!("pid `{pid}` is not a process id")))?;
            if let Some(p) = agent.processes.get(pid) {
                return Ok(p);
            }
            match agent.processes.skip_reason(pid) {
                Some(reason) => Err(Problem::new(
                    StatusCode::FORBIDDEN,
                    format!("the agent does not attach to process {pid}: {reason}"),
                )),
                None => Err(Problem::new(
                    StatusCode::NOT_FOUND,
                    format!("no attachable process {pid} (GET /processes lists them)"),
                )),
            }
        }
        (None, Some(name)) => {
            let mut found = agent.processes.by_name(name);
            match found.len() {
                0 => Err(Problem::new(
                    StatusCode::NOT_FOUND,
                    format!("no attachable process named `{name}` (GET /processes lists them)"),
                )),
                1 => Ok(found.remove(0)),
                _ => Err(Problem::new(
                    StatusCode::CONFLICT,
                    format!(
                        "{} processes are named `{name}` ({}): ask by pid",
                        found.len(),
                        found
                            .iter()
                            .map(|p| p.pid.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            }
        }
        (Some(_), Some(_)) => Err(Problem::bad("name the process by pid= or name=, not both")),
        (None, None) => Err(Problem::bad("name the process: pid= or name=")),
    }
}

fn duration(
    params: &HashMap<String, String>,
    default: f64,
) -> std::result::Result<Duration, Problem> {
    let Some(text) = params.get("durationSeconds") else {
        return Ok(Duration::from_secs_f64(default));
    };
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= MAX_DURATION_SECONDS => Ok(Duration::from_secs_f64(s)),
        _ => Err(Problem::bad(format!(
            "durationSeconds `{text}`: a number of seconds above 0 and at most {MAX_DURATION_SECONDS}"
        ))),
    }
}

fn flag(
    params: &HashMap<String, String>,
    name: &str,
    default: bool,
) -> std::result::Result<bool, Problem> {
    match params.get(name).map(String::as_str) {
        None => Ok(default),
        Some("true" | "1" | "") => Ok(true),
        Some("false" | "0") => Ok(false),
        Some(other) => Err(Problem::bad(format!("{name} `{other}`: true or false"))),
    }
}

/// `egress=` (a default name) or `egress=NAME`: the operation's file name; none: stream.
fn egress_name(
    agent: &Agent,
    params: &HashMap<String, String>,
    process: &Process,
    extension: &str,
) -> std::result::Result<Option<String>, Problem> {
    let Some(asked) = params.get("egress") else {
        return Ok(None);
    };
    if agent.settings.egress.is_none() {
        return Err(Problem::bad(
            "this agent has no egress folder (set `egress` in its config); leave egress out to \
             receive the file in the response",
        ));
    }
    if asked.is_empty() || asked == "true" || asked == "1" {
        return Ok(Some(default_file_name(process, extension)));
    }
    egress::requested_name(asked)
        .map(Some)
        .map_err(|e| Problem::bad(format!("{e:#}")))
}

fn refuse_when_stopping(agent: &Agent) -> std::result::Result<(), Problem> {
    if agent.stopping.load(Ordering::Relaxed) {
        return Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the agent is stopping",
        ));
    }
    Ok(())
}

async fn processes(State(agent): State<Arc<Agent>>, query: Params) -> Reply {
    params(query, &[])?;
    Ok(Json(agent.processes.list()).into_response())
}

async fn info(State(agent): State<Arc<Agent>>, query: Params) -> Reply {
    params(query, &[])?;
    Ok(Json(serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "listen": agent.listen.to_string(),
        "authentication": if agent.keys.is_empty() { "none" } else { "api-key" },
        "egress": agent.settings.egress.as_ref().map(|p| p.display().to_string()),
        "metrics": {
            "enabled": agent.settings.metrics.enabled,
            "intervalSeconds": agent.settings.metrics.interval_seconds,
        },
        "targets": agent.processes.list().len(),
        "skipped": agent.processes.skipped(),
        "rules": agent.rules.names(),
        "operationsRunning": agent.operations.running(),
    }))
    .into_response())
}

async fn trace_get(State(agent): State<Arc<Agent>>, query: Params) -> Reply {
    let params = params(
        query,
        &[
            "pid",
            "name",
            "durationSeconds",
            "profile",
            "egress",
            "bufferSizeInMB",
            "requestRundown",
        ],
    )?;
    let process = target(&agent, &params)?;
    let profile = params
        .get("profile")
        .map(|p| super::settings::parse_profile(p))
        .transpose()
        .map_err(|e| Problem::bad(format!("{e:#}")))?
        .unwrap_or_default();
    let ask = TraceAsk {
        profile,
        providers: Vec::new(),
        duration: duration(&params, 30.0)?,
        buffer_mb: buffer_mb(params.get("bufferSizeInMB"))?,
        rundown: flag(&params, "requestRundown", true)?,
    };
    start_trace(agent, process, ask, &params).await
}

fn buffer_mb(text: Option<&String>) -> std::result::Result<u32, Problem> {
    match text {
        None => Ok(256),
        Some(t) => match t.parse::<u32>() {
            Ok(n) if (1..=4096).contains(&n) => Ok(n),
            _ => Err(Problem::bad(format!("bufferSizeInMB `{t}`: 1 to 4096"))),
        },
    }
}

/// `POST /trace`'s body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TraceBody {
    #[serde(default)]
    providers: Vec<ProviderItem>,
    profile: Option<String>,
    request_rundown: Option<bool>,
    #[serde(rename = "bufferSizeInMB")]
    buffer_size_in_mb: Option<u32>,
}

/// A provider: `Name:Keywords:Level:Args` as `eptrace collect --providers`, or an object
/// as dotnet-monitor takes it.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ProviderItem {
    Spec(String),
    Object(ProviderObject),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProviderObject {
    name: String,
    keywords: Option<serde_json::Value>,
    #[serde(alias = "eventLevel")]
    level: Option<serde_json::Value>,
    arguments: Option<serde_json::Value>,
}

impl ProviderItem {
    fn spec(&self) -> std::result::Result<String, String> {
        let o = match self {
            ProviderItem::Spec(s) => return Ok(s.clone()),
            ProviderItem::Object(o) => o,
        };
        if o.name.contains(':') {
            return Err(format!("provider name `{}` has a `:`", o.name));
        }
        let keywords = match &o.keywords {
            None => "0xFFFFFFFFFFFFFFFF".to_owned(),
            Some(serde_json::Value::Number(n)) => match n.as_u64() {
                Some(k) => format!("0x{k:X}"),
                None => return Err(format!("keywords {n}: a 64-bit number")),
            },
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => return Err(format!("keywords {other}: a number or a hex string")),
        };
        let level = match &o.level {
            None => "Verbose".to_owned(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => return Err(format!("level {other}: a number or a name")),
        };
        let arguments = match &o.arguments {
            None => String::new(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Object(map)) => map
                .iter()
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                })
                .collect::<Vec<_>>()
                .join(";"),
            Some(other) => return Err(format!("arguments {other}: a string or an object")),
        };
        Ok(if arguments.is_empty() {
            format!("{}:{keywords}:{level}", o.name)
        } else {
            format!("{}:{keywords}:{level}:{arguments}", o.name)
        })
    }
}

async fn trace_post(
    State(agent): State<Arc<Agent>>,
    query: Params,
    body: std::result::Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Reply {
    let params = params(query, &["pid", "name", "durationSeconds", "egress"])?;
    let body = body.map_err(|e| Problem::new(e.status(), format!("the request body: {e}")))?;
    let process = target(&agent, &params)?;
    let body: TraceBody = serde_json::from_slice(&body)
        .map_err(|e| Problem::bad(format!("the request body: {e}")))?;
    let mut providers = Vec::new();
    for item in &body.providers {
        let spec = item.spec().map_err(Problem::bad)?;
        eventpipe_core::ProviderConfig::parse(&spec)
            .map_err(|e| Problem::bad(format!("provider `{spec}`: {e}")))?;
        providers.push(spec);
    }
    let profile = body
        .profile
        .as_deref()
        .map(super::settings::parse_profile)
        .transpose()
        .map_err(|e| Problem::bad(format!("{e:#}")))?
        .unwrap_or_default();
    if providers.is_empty() && profile.is_empty() {
        return Err(Problem::bad("the body names no provider and no profile"));
    }
    let ask = TraceAsk {
        profile,
        providers,
        duration: duration(&params, 30.0)?,
        buffer_mb: buffer_mb(body.buffer_size_in_mb.map(|n| n.to_string()).as_ref())?,
        rundown: body.request_rundown.unwrap_or(true),
    };
    start_trace(agent, process, ask, &params).await
}

/// A body fed from a blocking thread through a bounded channel: a slow client slows the
/// thread (and, for a trace, the session's buffer fills and the target drops, as it does
/// for any slow reader), never the agent's memory.
fn channel_body() -> (mpsc::Sender<std::io::Result<Bytes>>, Body) {
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(STREAM_CHUNKS);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    (tx, Body::from_stream(stream))
}

fn attachment(body: Body, content_type: &str, file_name: &str) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        headers.insert(header::CONTENT_TYPE, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{file_name}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    response
}

fn default_file_name(process: &Process, extension: &str) -> String {
    egress::expand(
        "{process}_{pid}_{time}",
        &egress::NameFields {
            rule: "",
            process: &process.name,
            pid: process.pid,
            time: SystemTime::now(),
        },
    ) + extension
}

/// 202 with the operation, and where to watch it.
fn accepted(agent: &Agent, id: &str) -> Response {
    let status = agent.operations.get(id);
    let mut response = (StatusCode::ACCEPTED, Json(status)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("/operations/{id}")) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    response
}

/// A cancel flag that the agent raises when it stops, for as long as the guard lives.
struct StreamGuard {
    agent: Arc<Agent>,
    flag: Arc<AtomicBool>,
}

impl StreamGuard {
    fn new(agent: &Arc<Agent>) -> StreamGuard {
        let flag = Arc::new(AtomicBool::new(agent.stopping.load(Ordering::Relaxed)));
        lock(&agent.streams).push(Arc::clone(&flag));
        StreamGuard {
            agent: Arc::clone(agent),
            flag,
        }
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        lock(&self.agent.streams).retain(|f| !Arc::ptr_eq(f, &self.flag));
    }
}

async fn start_trace(
    agent: Arc<Agent>,
    process: Process,
    ask: TraceAsk,
    params: &HashMap<String, String>,
) -> Reply {
    refuse_when_stopping(&agent)?;
    let request =
        sessions::trace_request(&process, &ask).map_err(|e| Problem::bad(format!("{e:#}")))?;
    if let Some(name) = egress_name(&agent, params, &process, ".nettrace")? {
        let dir = agent.settings.egress.clone().unwrap_or_default();
        let handle = agent
            .operations
            .start("trace", process.pid, &process.name, None);
        let id = handle.id.clone();
        run_operation(
            &agent,
            process,
            Work::Trace(ask),
            dir,
            Naming::Exact(name),
            handle,
        );
        return Ok(accepted(&agent, &id));
    }
    let (tx, body) = channel_body();
    let (started_tx, started_rx) = oneshot::channel();
    let file_name = default_file_name(&process, ".nettrace");
    let guard = StreamGuard::new(&agent);
    tokio::task::spawn_blocking(move || {
        let mut out = |bytes: &[u8]| {
            tx.blocking_send(Ok(Bytes::copy_from_slice(bytes)))
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        };
        let ended = sessions::run_trace(
            &process,
            &request,
            ask.duration,
            &guard.flag,
            |r| {
                let _ = started_tx.send(r);
            },
            &mut out,
        );
        if let Ok(end) = &ended {
            if !end.whole {
                // The client sees the body end in an error, not a short trace that looks
                // whole.
                let _ = tx.blocking_send(Err(std::io::Error::other("the trace stream broke")));
            }
        }
        drop(guard);
    });
    match started_rx.await {
        Ok(Ok(())) => Ok(attachment(body, "application/octet-stream", &file_name)),
        Ok(Err(message)) => Err(Problem::new(StatusCode::BAD_GATEWAY, message)),
        Err(_) => Err(Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the session thread ended before the session started",
        )),
    }
}

/// `/stacks?pid=N[&format=text][&merge=true]`: every thread's stack now, as `eptrace
/// stack` prints it (JSON by default). A process that does not answer within
/// [`STACKS_TIMEOUT`] is a 504, and is left as it was.
async fn stacks(State(agent): State<Arc<Agent>>, query: Params) -> Reply {
    let params = params(query, &["pid", "name", "format", "merge"])?;
    let process = target(&agent, &params)?;
    refuse_when_stopping(&agent)?;
    let merge = flag(&params, "merge", false)?;
    let text = match params.get("format").map(String::as_str) {
        None | Some("json") => false,
        Some("text") => true,
        Some(other) => return Err(Problem::bad(format!("format `{other}`: json or text"))),
    };
    let (pid, name) = (process.pid, process.name.clone());
    // Only the process's part is timed; symbolizing is the agent's own work.
    let sampled = tokio::time::timeout(
        STACKS_TIMEOUT,
        tokio::task::spawn_blocking(move || sessions::sample_threads(&process)),
    )
    .await;
    let taken = match sampled {
        Ok(Ok(Ok(sampled))) => {
            Ok(tokio::task::spawn_blocking(move || sessions::thread_stacks(sampled)).await)
        }
        Ok(Ok(Err(e))) => Ok(Ok(Err(e))),
        Ok(Err(e)) => Ok(Err(e)),
        Err(e) => Err(e),
    };
    match taken {
        Err(_) => Err(Problem::new(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "{name} ({pid}) did not answer within {} s; it was left as it is",
                STACKS_TIMEOUT.as_secs()
            ),
        )),
        Ok(Err(_)) => Err(Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the stack snapshot's thread failed",
        )),
        Ok(Ok(Err(e))) => Err(Problem::new(StatusCode::BAD_GATEWAY, format!("{e:#}"))),
        Ok(Ok(Ok(stacks))) if text => Ok((
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            stacks.text(merge),
        )
            .into_response()),
        Ok(Ok(Ok(stacks))) => Ok(Json(stacks).into_response()),
    }
}

async fn gcdump(State(agent): State<Arc<Agent>>, query: Params) -> Reply {
    snapshot(agent, query, Snapshot::Gcdump).await
}

async fn heap(State(agent): State<Arc<Agent>>, query: Params) -> Reply {
    snapshot(agent, query, Snapshot::Heap).await
}

async fn snapshot(agent: Arc<Agent>, query: Params, which: Snapshot) -> Reply {
    let params = params(query, &["pid", "name", "egress"])?;
    let process = target(&agent, &params)?;
    refuse_when_stopping(&agent)?;
    if let Some(why) = which.unfit(&process) {
        return Err(Problem::bad(why));
    }
    if let Some(name) = egress_name(&agent, &params, &process, which.extension())? {
        let dir = agent.settings.egress.clone().unwrap_or_default();
        let handle = agent
            .operations
            .start(which.kind(), process.pid, &process.name, None);
        let id = handle.id.clone();
        run_operation(
            &agent,
            process,
            Work::Snapshot(which),
            dir,
            Naming::Exact(name),
            handle,
        );
        return Ok(accepted(&agent, &id));
    }
    // Taken into a staging file first: the snapshot must be whole before a byte is sent.
    let file_name = default_file_name(&process, which.extension());
    let staging = agent.staging.clone();
    let guard = StreamGuard::new(&agent);
    let taken =
        tokio::task::spawn_blocking(move || -> std::result::Result<std::fs::File, String> {
            let name = format!(
                "request-{}-{}",
                process.pid,
                super::auth::new_key().map_err(|e| e.to_string())?
            );
            let (pending, file) =
                egress::Pending::create(&staging, &name).map_err(|e| format!("{e:#}"))?;
            let result = file.try_clone().map_err(|e| e.to_string()).and_then(|f| {
                sessions::take_snapshot(
                    which,
                    &process,
                    f,
                    pending.partial_path(),
                    &guard.flag,
                    &mut |_| {},
                )
                .map_err(|e| format!("{e:#}"))
            });
            let reopened = std::fs::File::open(pending.partial_path()).map_err(|e| e.to_string());
            // The open file stays readable after its name goes.
            pending.discard();
            result.and(reopened)
        })
        .await
        .map_err(|e| Problem::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| Problem::new(StatusCode::BAD_GATEWAY, e))?;
    let (tx, body) = channel_body();
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut file = taken;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if tx
                        .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                        .is_err()
                    {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    break;
                }
            }
        }
    });
    Ok(attachment(body, "application/octet-stream", &file_name))
}

/// Sends each counter value as a JSON line.
struct LineSink {
    tx: mpsc::Sender<std::io::Result<Bytes>>,
    started: Option<oneshot::Sender<std::result::Result<(), String>>>,
    pid: u32,
    cancel: Arc<AtomicBool>,
}

impl LineSink {
    fn send(&mut self, value: serde_json::Value) -> Result<()> {
        let mut line = value.to_string();
        line.push('\n');
        self.tx
            .blocking_send(Ok(Bytes::from(line)))
            .map_err(|_| anyhow::anyhow!("the client went away"))
    }
}

impl Sink for LineSink {
    fn started(&mut self) -> SinkResult<()> {
        if let Some(s) = self.started.take() {
            let _ = s.send(Ok(()));
        }
        Ok(())
    }
    fn value(&mut self, v: eventpipe_counters::CounterValue, at: SystemTime) -> SinkResult<()> {
        let value = if v.value.is_finite() {
            serde_json::json!(v.value)
        } else {
            serde_json::Value::Null
        };
        let quantiles: Vec<serde_json::Value> = v
            .quantiles
            .iter()
            .map(|(q, x)| serde_json::json!({"quantile": q, "value": x}))
            .collect();
        Ok(self.send(serde_json::json!({
            "timestamp": eventpipe_counters::iso8601(at),
            "pid": self.pid,
            "provider": v.provider,
            "name": v.name,
            "displayName": v.display_name,
            "unit": v.unit,
            "counterType": v.kind.dotnet_name(),
            "tags": v.tags,
            "value": value,
            "quantiles": quantiles,
        }))?)
    }
    fn problem(&mut self, problem: String) -> SinkResult<()> {
        Ok(self.send(serde_json::json!({ "problem": problem }))?)
    }
    fn tick(&mut self) -> SinkResult<bool> {
        Ok(!self.tx.is_closed() && !self.cancel.load(Ordering::Relaxed))
    }
    fn ended(&mut self, why: &SessionEnd) -> SinkResult<()> {
        Ok(self.send(serde_json::json!({ "ended": why.to_string() }))?)
    }
}

async fn counters(State(agent): State<Arc<Agent>>, query: Params) -> Reply {
    let params = params(
        query,
        &[
            "pid",
            "name",
            "durationSeconds",
            "intervalSeconds",
            "counters",
        ],
    )?;
    let process = target(&agent, &params)?;
    refuse_when_stopping(&agent)?;
    let duration = duration(&params, 30.0)?;
    let interval = match params.get("intervalSeconds") {
        None => 1.0,
        Some(t) => match t.parse::<f64>() {
            Ok(s) if (1.0..=3600.0).contains(&s) => s,
            _ => return Err(Problem::bad(format!("intervalSeconds `{t}`: 1 to 3600"))),
        },
    };
    let specs = match params.get("counters") {
        Some(text) => {
            parse_counter_specs(text).map_err(|e| Problem::bad(format!("counters: {e}")))?
        }
        None => default_specs(process.kind == Some(RuntimeKind::Rust)),
    };
    let (tx, body) = channel_body();
    let (started_tx, started_rx) = oneshot::channel();
    let guard = StreamGuard::new(&agent);
    tokio::task::spawn_blocking(move || {
        let config = SessionConfig {
            target: eventpipe_client::TargetSpec::Pid(process.pid),
            counters: Some(specs),
            refresh_sec: interval,
            duration: Some(duration),
            max_time_series: 1000,
            max_histograms: 20,
            runtime_events: false,
        };
        let mut sink = LineSink {
            tx,
            started: Some(started_tx),
            pid: process.pid,
            cancel: Arc::clone(&guard.flag),
        };
        let outcome = run(&config, &mut sink, &guard.flag).map_err(anyhow::Error::from);
        if let (Err(e), Some(started)) = (&outcome, sink.started.take()) {
            let _ = started.send(Err(format!("{e:#}")));
        }
        drop(guard);
    });
    match started_rx.await {
        Ok(Ok(())) => {
            let mut response = Response::new(body);
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-ndjson"),
            );
            Ok(response)
        }
        Ok(Err(message)) => Err(Problem::new(StatusCode::BAD_GATEWAY, message)),
        Err(_) => Err(Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the counters thread ended before the session started",
        )),
    }
}

async fn metrics(State(agent): State<Arc<Agent>>, query: Params) -> Reply {
    params(query, &[])?;
    let mut out = String::new();
    agent.store.render(&mut out);
    prometheus::own(
        &mut out,
        "eptrace_agent_targets",
        "gauge",
        "Processes the agent can attach to",
        &[("", agent.processes.list().len() as f64)],
    );
    prometheus::own(
        &mut out,
        "eptrace_agent_skipped_targets",
        "gauge",
        "Processes the agent will not attach to (GET /info says why)",
        &[("", agent.processes.skipped().len() as f64)],
    );
    prometheus::own(
        &mut out,
        "eptrace_agent_counter_session_errors_total",
        "counter",
        "Counters sessions that failed or ended while their process lived",
        &[("", agent.session_errors.load(Ordering::Relaxed) as f64)],
    );
    prometheus::own(
        &mut out,
        "eptrace_agent_requests_total",
        "counter",
        "HTTP requests received",
        &[("", agent.requests.load(Ordering::Relaxed) as f64)],
    );
    if let Some(exporter) = &agent.otlp {
        prometheus::own(
            &mut out,
            "eptrace_agent_otlp_spans_over_bound_total",
            "counter",
            "Spans not exported because too many were open in one target",
            &[("", exporter.over_bound.load(Ordering::Relaxed) as f64)],
        );
    }
    let states: Vec<(String, f64)> = agent
        .operations
        .counts()
        .iter()
        .map(|(state, n)| (format!("{{state=\"{state:?}\"}}"), *n as f64))
        .collect();
    let states: Vec<(&str, f64)> = states.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    prometheus::own(
        &mut out,
        "eptrace_agent_operations",
        "gauge",
        "Operations by state (the latest ended ones are kept)",
        &states,
    );
    let rules = agent.rules.counts();
    if !rules.is_empty() {
        let per_rule = |pick: fn(&(String, u64, u64)) -> u64| -> Vec<(String, f64)> {
            rules
                .iter()
                .map(|r| {
                    let name = r.0.replace(['"', '\\', '\n'], "_");
                    (format!("{{rule=\"{name}\"}}"), pick(r) as f64)
                })
                .collect()
        };
        for (name, help, series) in [
            (
                "eptrace_agent_rule_actions_total",
                "Times each rule acted",
                per_rule(|r| r.1),
            ),
            (
                "eptrace_agent_rule_limited_total",
                "Times each rule's limit held it back",
                per_rule(|r| r.2),
            ),
        ] {
            let series: Vec<(&str, f64)> = series.iter().map(|(l, v)| (l.as_str(), *v)).collect();
            prometheus::own(&mut out, name, "counter", help, &series);
        }
    }
    let mut backends = Vec::new();
    if let Some(exporter) = &agent.otlp {
        backends.push(("otlp", exporter.stats()));
    }
    if let Some(p) = &agent.profiling {
        p.render(&mut out);
        backends.push(("pyroscope", p.delivery_stats()));
    }
    prometheus::deliveries(&mut out, &backends);
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response())
}

async fn operations(State(agent): State<Arc<Agent>>, query: Params) -> Reply {
    params(query, &[])?;
    Ok(Json(agent.operations.list()).into_response())
}

async fn operation(State(agent): State<Arc<Agent>>, Path(id): Path<String>) -> Reply {
    agent
        .operations
        .get(&id)
        .map(|s| Json(s).into_response())
        .ok_or_else(|| Problem::new(StatusCode::NOT_FOUND, "no such operation"))
}

async fn cancel_operation(State(agent): State<Arc<Agent>>, Path(id): Path<String>) -> Reply {
    let status = agent
        .operations
        .get(&id)
        .ok_or_else(|| Problem::new(StatusCode::NOT_FOUND, "no such operation"))?;
    if status.state != super::operations::State::Running {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            format!("operation {id} has ended ({:?})", status.state),
        ));
    }
    agent.operations.cancel(&id);
    Ok((StatusCode::ACCEPTED, Json(agent.operations.get(&id))).into_response())
}
