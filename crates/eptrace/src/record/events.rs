//! The recorded program's own EventPipe session. Where the program serves the diagnostics
//! protocol (a .NET runtime, a Rust program running eventpipe), `record` opens a session
//! on it, as `collect` would, and forwards its events into the perf trace, each timestamp
//! turned into the samples' clock (`eventpipe_perf::clock` says how, and how exactly).
//!
//! A launched program's endpoint appears once its runtime is up, so a thread looks for it
//! every 20 ms while the program runs; an attached program's is there or not. The session
//! ends as `collect`'s do: StopTracing (a .NET runtime then writes its method rundown,
//! which names the JIT'd code the samples hit), a grace period, then a cut.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use eventpipe_client::request::TraceRequest;
use eventpipe_client::{Runtime, Target, TargetSpec, TraceSession, STOP_GRACE};
use eventpipe_perf::clock::{tsc_reading, TickClock, TscMap};
use eventpipe_perf::{monotonic_ns, ForwardedEvent, PerfTrace};
use nettrace::{EventMetadata, TraceReader};

/// How often a launched program is looked at for its diagnostics endpoint.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// The samplers a runtime runs itself: perf samples instead, so `record`'s default session
/// leaves them out.
const OWN_SAMPLERS: [&str; 2] = [
    "Microsoft-DotNETCore-SampleProfiler",
    "EventPipeRs-CpuSampler",
];

/// What the session's threads tell the recording.
enum Message {
    Clock(TickClock),
    Event(ForwardedEvent),
}

/// A session found and running.
struct Running {
    target: Target,
    session: TraceSession<Result<(), nettrace::Error>>,
    runtime: Runtime,
}

/// The program's session: being looked for, running, or never to be.
pub(crate) struct EventSession {
    pid: i32,
    messages: Receiver<Message>,
    connector: Option<JoinHandle<Result<Option<Running>, String>>>,
    running: Option<Running>,
    give_up: Arc<AtomicBool>,
    /// Set once the endpoint is found, before the session is asked for: its events may
    /// come from then on.
    found: Arc<AtomicBool>,
    clock: Option<TickClock>,
    forwarded: u64,
    notes: Vec<String>,
}

impl EventSession {
    /// Starts looking for `pid`'s endpoint (a `launched` program's may come later) and, once
    /// found, a session asking `request`. `tsc_start` is a TSC reading taken at the
    /// recording's start, for converting a TSC clock.
    pub(crate) fn start(
        pid: i32,
        request: TraceRequest,
        launched: bool,
        tsc_start: Option<(i64, u64)>,
    ) -> EventSession {
        let (sender, messages) = channel();
        let give_up = Arc::new(AtomicBool::new(false));
        let found = Arc::new(AtomicBool::new(false));
        let (stop, found_it) = (Arc::clone(&give_up), Arc::clone(&found));
        let connector = std::thread::Builder::new()
            .name("eptrace-events".into())
            .spawn(move || {
                connect(
                    pid,
                    &request,
                    launched,
                    (&stop, &found_it),
                    sender,
                    tsc_start,
                )
            })
            .ok();
        EventSession {
            pid,
            messages,
            connector,
            running: None,
            give_up,
            found,
            clock: None,
            forwarded: 0,
            notes: Vec::new(),
        }
    }

    /// Whether a session runs or is being started (the trace then waits for its events
    /// before writing the samples around them). While the program's endpoint is only being
    /// looked for, no event can come.
    pub(crate) fn is_live(&self) -> bool {
        self.running.is_some() || self.found.load(Ordering::Acquire)
    }

    /// Hands the events received so far to `trace`; the line to tell the user when the
    /// session has just started.
    pub(crate) fn forward<W: Write>(&mut self, trace: &mut PerfTrace<W>) -> Option<String> {
        let mut started = None;
        if self.connector.as_ref().is_some_and(JoinHandle::is_finished) {
            match self.connector.take().map(JoinHandle::join) {
                Some(Ok(Ok(running))) => {
                    started = running.as_ref().map(|r| {
                        format!(
                            "{} {}'s own EventPipe session is open: its events join the samples",
                            r.runtime, self.pid
                        )
                    });
                    self.running = running;
                }
                Some(Ok(Err(why))) => self.notes.push(why),
                Some(Err(_)) => self.notes.push("the session's thread failed".into()),
                None => {}
            }
        }
        while let Ok(message) = self.messages.try_recv() {
            match message {
                Message::Clock(clock) => self.clock = Some(clock),
                Message::Event(event) => {
                    self.forwarded += 1;
                    trace.add_forwarded(event);
                }
            }
        }
        started
    }

    /// Ends the session (asking the program to stop it, when it still runs) and hands its
    /// last events to `trace`; what to tell the user.
    pub(crate) fn finish<W: Write>(mut self, trace: &mut PerfTrace<W>) -> Vec<String> {
        self.give_up.store(true, Ordering::Relaxed);
        if let Some(connector) = self.connector.take() {
            match connector.join() {
                Ok(Ok(running)) => self.running = running,
                Ok(Err(why)) => self.notes.push(why),
                Err(_) => self.notes.push("the session's thread failed".into()),
            }
        }
        if let Some(mut running) = self.running.take() {
            if !running.session.is_finished() && !running.target.exited() {
                if let Err(e) = running.session.stop(&mut running.target) {
                    self.notes.push(format!(
                        "StopTracing failed ({}); the session's stream was cut",
                        eventpipe_client::with_causes(&e)
                    ));
                }
            }
            // Forward while the program flushes, so a long rundown does not pile up here.
            let deadline = std::time::Instant::now() + STOP_GRACE;
            while !running.session.is_finished() && std::time::Instant::now() < deadline {
                let _ = self.forward(trace);
                std::thread::sleep(LOOK_EVERY);
            }
            if !running.session.wait_within(Duration::ZERO) {
                self.notes.push(format!(
                    "the program did not end its session within {} s; it was cut",
                    STOP_GRACE.as_secs()
                ));
            }
            match running.session.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => self
                    .notes
                    .push(format!("the session's stream ended badly: {e}")),
                Err(e) => self.notes.push(eventpipe_client::with_causes(&e)),
            }
            let _ = self.forward(trace);
            let clock = self.clock.map_or("", |c| c.describe());
            self.notes.insert(
                0,
                format!(
                    "{} events of {} {}'s own EventPipe session; {clock}",
                    self.forwarded, running.runtime, self.pid
                ),
            );
        }
        self.notes
    }
}

/// Finds `pid`'s endpoint and starts the session; `None` when the program serves none.
fn connect(
    pid: i32,
    request: &TraceRequest,
    launched: bool,
    (give_up, found): (&AtomicBool, &AtomicBool),
    sender: Sender<Message>,
    tsc_start: Option<(i64, u64)>,
) -> Result<Option<Running>, String> {
    let spec = TargetSpec::Pid(pid as u32);
    let mut target = loop {
        match Target::open(&spec) {
            Ok(target) => break target,
            Err(_) if launched && !give_up.load(Ordering::Relaxed) && alive(pid) => {
                std::thread::sleep(LOOK_EVERY);
            }
            Err(_) => return Ok(None),
        }
    };
    // Release: nothing is handed over with it; Acquire on the reader's side is enough for a
    // flag read on its own.
    found.store(true, Ordering::Release);
    let info = target.process_info();
    let runtime = Runtime::of(&info);
    let is_rust = runtime.is_rust();
    let mut providers = request
        .providers(is_rust)
        .map_err(|e| format!("no EventPipe session: {e}"))?;
    if request.presets.is_empty() && request.providers.is_empty() {
        providers.retain(|p| !OWN_SAMPLERS.contains(&p.name.as_str()));
    }
    let collect = request
        .collect_tracing(is_rust, providers)
        .map_err(|e| format!("no EventPipe session: {e}"))?;
    let stream = target.collect(&collect).map_err(|e| {
        format!(
            "the program refused an EventPipe session: {}",
            eventpipe_client::with_causes(&e)
        )
    })?;
    let session = TraceSession::spawn(stream, "eptrace-session", move |stream| {
        read_session(stream, pid as u32, &sender, tsc_start)
    })
    .map_err(|e| eventpipe_client::with_causes(&e))?;
    Ok(Some(Running {
        target,
        session,
        runtime,
    }))
}

/// Reads the session's trace, each event sent on with its time on the samples' clock.
fn read_session(
    stream: eventpipe_client::TraceStream,
    pid: u32,
    sender: &Sender<Message>,
    tsc_start: Option<(i64, u64)>,
) -> Result<(), nettrace::Error> {
    let mut reader =
        TraceReader::from_read(BufReader::with_capacity(1 << 16, stream))?.accept_truncation(true);
    let info = reader.trace().clone();
    let tsc = tsc_start.and_then(|first| {
        std::thread::sleep(Duration::from_millis(2));
        TscMap::from_readings(first, tsc_reading()?)
    });
    let utc_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let mut clock = TickClock::of(&info, utc_now, monotonic_ns(), tsc);
    let _ = sender.send(Message::Clock(clock));
    let pid = info.process_id.map_or(pid, |p| p as u32);
    let mut metadata: HashMap<u32, Arc<EventMetadata>> = HashMap::new();
    let mut since_refresh = 0u32;
    while let Some(event) = reader.next_event()? {
        since_refresh += 1;
        if since_refresh == 1 << 12 {
            // A longer base gives the TSC's rate more exactly.
            since_refresh = 0;
            if let (TickClock::Tsc(_), Some(first), Some(now)) = (clock, tsc_start, tsc_reading()) {
                if let Some(map) = TscMap::from_readings(first, now) {
                    clock = TickClock::Tsc(map);
                }
            }
        }
        let md = metadata
            .entry(event.header.metadata_id)
            .or_insert_with(|| Arc::new(event.metadata.clone()));
        let forwarded = ForwardedEvent {
            time: clock.nanos(event.header.timestamp),
            pid: event.process_id().map_or(pid, |p| p as u32),
            tid: event.thread_id() as u32,
            metadata: Arc::clone(md),
            payload: event.payload.to_vec(),
            stack: event.stack_ips().collect(),
            activity_id: event.header.activity_id,
            related_activity_id: event.header.related_activity_id,
        };
        if sender.send(Message::Event(forwarded)).is_err() {
            break;
        }
    }
    Ok(())
}

fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}
