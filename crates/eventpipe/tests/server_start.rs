//! The diagnostics server starts when the program calls `start_server` or when its
//! environment asks at start-up, and for no other reason: declaring, registering and
//! writing events leave a process unserved. Each case runs in a child process (this test
//! binary again, running one `child_*` function), since the start-up decision is made once
//! per process, before `main`.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use eventpipe::{define_event, write_event, Level, Provider};
use eventpipe_ipc::transport;

static APP: Provider = Provider::new("Test-Server-Start");
define_event! {
    static WORK = APP { id: 1, name: "Work", level: Level::Informational, keywords: 0 } (n: u64);
}

/// The variable that makes this binary act as a child, naming what it does.
const ROLE: &str = "EVENTPIPE_TEST_SERVER_START_ROLE";

/// Runs `role` in a child with `env`, waits for it to say it is ready, and returns whether
/// it then had a diagnostics socket.
fn child_is_served(role: &str, env: &[(&str, &str)]) -> bool {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env_remove(eventpipe::diagnostics::ENABLE_VAR)
        .env_remove(eventpipe::diagnostics::PORTS_VAR)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().unwrap();
    let pid = child.id();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.any(|l| l.unwrap().contains("child ready"));
    assert!(ready, "the {role} child never got ready");
    let served = socket_of(pid).is_some();
    // Closing stdin ends the child.
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success(), "the {role} child failed");
    served
}

fn socket_of(pid: u32) -> Option<PathBuf> {
    let key = transport::start_time(pid)?;
    let path = transport::socket_path(&transport::socket_dir(), pid, key);
    path.exists().then_some(path)
}

#[test]
fn only_the_call_or_the_environment_starts_the_server() {
    assert!(
        !child_is_served("events", &[]),
        "writing events started a server"
    );
    assert!(
        child_is_served("nothing", &[(eventpipe::diagnostics::ENABLE_VAR, "1")]),
        "the environment asked, before any event: served"
    );
    assert!(
        !child_is_served("nothing", &[(eventpipe::diagnostics::ENABLE_VAR, "0")]),
        "`0` does not ask"
    );
    assert!(child_is_served("call", &[]), "the call starts it");
}

/// The child's side: `events` declares, registers and writes events (and counters);
/// `nothing` does nothing; `call` calls `start_server`. Then it says it is ready and waits
/// for its stdin to close.
#[test]
fn child_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return; // Not a child: nothing to do.
    };
    match role.as_str() {
        "events" => {
            assert!(!WORK.register());
            write_event!(WORK, 1);
            static COUNT: eventpipe::Counter =
                eventpipe::Counter::new(&APP, eventpipe::CounterInfo::new("count"));
            COUNT.add(1);
            COUNT.register();
            eventpipe::counters::runtime::register();
        }
        "nothing" => {}
        "call" => {
            eventpipe::diagnostics::start_server().unwrap();
        }
        other => panic!("unknown role {other}"),
    }
    println!("child ready");
    std::io::stdout().flush().unwrap();
    let mut rest = String::new();
    while std::io::stdin().read_line(&mut rest).unwrap() > 0 {}
}
