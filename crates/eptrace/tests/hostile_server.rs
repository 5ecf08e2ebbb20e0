//! `eptrace` connects to any socket named like a diagnostics socket, and a process that
//! advertises one can answer anything. Each hostile or broken server here gets a clear
//! error within the client's timeouts, in bounded memory, with no panic or hang: a wrong
//! magic, an answer to another command, silence, a stream of valid blocks that never ends
//! (StopTracing ignored), and a reverse-port advertisement that lies.
//!
//! The fake server listens where a diagnostics socket of this test's own process would be
//! (the test binary runs no real server).

mod support;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventpipe_ipc::transport;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A fake diagnostics server for this process, answering every connection with `answer`.
struct FakeServer {
    path: std::path::PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeServer {
    fn start(answer: impl Fn(UnixStream) + Send + Sync + 'static) -> FakeServer {
        let me = std::process::id();
        let key = transport::start_time(me).unwrap();
        let path = transport::socket_path(&transport::socket_dir(), me, key);
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let answer = Arc::new(answer);
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((s, _)) => {
                            s.set_nonblocking(false).unwrap();
                            let answer = Arc::clone(&answer);
                            std::thread::spawn(move || answer(s));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        FakeServer {
            path,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads the client's command (header and payload) so the answer comes after it.
fn read_command(s: &mut UnixStream) {
    let mut head = [0u8; 20];
    if s.read_exact(&mut head).is_ok() {
        let size = u16::from_le_bytes([head[14], head[15]]) as usize;
        let mut rest = vec![0u8; size.saturating_sub(20)];
        let _ = s.read_exact(&mut rest);
    }
}

fn collect(extra: &[&str]) -> (Output, Duration) {
    let out = std::env::temp_dir().join(format!("eptrace-hostile-{}.nettrace", std::process::id()));
    let began = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(["collect", "--providers", "Anything", "-o"])
        .arg(&out)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = began.elapsed();
    // What a failed collection leaves of its file is not looked at.
    let _ = std::fs::remove_file(&out);
    (output, took)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_wrong_magic_or_an_answer_to_another_command_is_a_clear_error() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let me = std::process::id().to_string();
    for (what, answer, expected) in [
        (
            "a wrong magic",
            b"HELLO_IPC_V1\0\0\x18\0\xff\0\0\0\0\0\0\0".to_vec(),
            "response header",
        ),
        (
            "an answer to another command",
            {
                let mut m = b"DOTNET_IPC_V1\0".to_vec();
                m.extend_from_slice(&[20, 0, 0x02, 0x01, 0, 0]);
                m
            },
            "not a server response",
        ),
    ] {
        let _server = FakeServer::start(move |mut s| {
            read_command(&mut s);
            let _ = s.write_all(&answer);
        });
        let (out, took) = collect(&["-p", &me, "--duration", "1s"]);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{what}: {}", stderr(&out));
        assert!(took < Duration::from_secs(5), "{what}: {took:?}");
    }
}

#[test]
fn a_server_that_never_answers_is_given_up_within_the_timeout() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let me = std::process::id().to_string();
    let _server = FakeServer::start(|mut s| {
        read_command(&mut s);
        std::thread::sleep(Duration::from_secs(60));
    });
    let (out, took) = collect(&["-p", &me, "--duration", "1s"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("reading the response header"),
        "{}",
        stderr(&out)
    );
    // ProcessInfo's answer timeout, then CollectTracing's: 10 s each.
    assert!(took < Duration::from_secs(25), "{took:?}");
}

#[test]
fn a_stream_that_never_ends_is_cut_and_left_valid_in_bounded_memory() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let me = std::process::id().to_string();
    let _server = FakeServer::start(|mut s| {
        read_command(&mut s);
        let mut ok = b"DOTNET_IPC_V1\0".to_vec();
        ok.extend_from_slice(&[28, 0, 0xFF, 0x00, 0, 0]);
        ok.extend_from_slice(&1u64.to_le_bytes());
        if s.write_all(&ok).is_err() {
            return;
        }
        // StopTracing (a second connection) is answered OK and changes nothing: this one
        // streams valid blocks, ~20 MB/s, until the client hangs up.
        let info = nettrace::TraceInfo::new(nettrace::FormatVersion::V5, 8);
        let Ok(mut w) = nettrace::write::TraceWriter::new(s, &info) else {
            return;
        };
        let md = nettrace::EventMetadata {
            metadata_id: 1,
            provider: "Endless".into(),
            event_name: "Tick".into(),
            ..Default::default()
        };
        if w.write_metadata_block(&[md]).is_err() {
            return;
        }
        let mut seq = 0u32;
        loop {
            let mut b = nettrace::write::EventBlockBuilder::new(nettrace::FormatVersion::V5);
            for _ in 0..1000 {
                seq += 1;
                let h = nettrace::EventHeader {
                    metadata_id: 1,
                    sequence_number: seq,
                    timestamp: i64::from(seq),
                    ..Default::default()
                };
                b.push(&h, &[0u8; 180]);
            }
            if w.write_event_block(&mut b).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let out_path =
        std::env::temp_dir().join(format!("eptrace-hostile-{}.nettrace", std::process::id()));
    let began = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args([
            "collect",
            "--providers",
            "Anything",
            "-p",
            &me,
            "--duration",
            "1s",
            "-o",
        ])
        .arg(&out_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut peak_kb = 0u64;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if let Some(kb) = support::peak_resident_kb(child.id()) {
            peak_kb = peak_kb.max(kb);
        }
        assert!(began.elapsed() < Duration::from_secs(60), "collect hung");
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    // Its peak however briefly it lasted (this binary's other children are smaller).
    peak_kb = peak_kb.max(support::children_peak_resident_kb());
    let err = stderr(&out);
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &err;
    assert!(status.success(), "{text}");
    assert!(text.contains("did not end the stream"), "{text}");
    let size = std::fs::metadata(&out_path).unwrap().len();
    // Hundreds of MB streamed; the client held a bounded part of it.
    assert!(size > 100_000_000, "only {size} bytes streamed");
    assert!(
        peak_kb < 150 * 1024,
        "eptrace peaked at {peak_kb} kB for a {size}-byte stream"
    );
    let report = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(["report", "--require-complete"])
        .arg(&out_path)
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "the cut file is not a whole trace: {}",
        stderr(&report)
    );
    let _ = std::fs::remove_file(&out_path);
}

#[test]
fn a_reverse_port_advertisement_that_lies_is_a_clear_error() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // A "program" that connects to the reverse port and sends garbage for an
    // advertisement.
    let script = r#"
import os, socket
port = os.environ["DOTNET_DiagnosticPorts"].split(",")[0].split(";")[0]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(port)
s.sendall(b"NOT_AN_ADVERTISEMENT_AT_ALL_34_BYTES!!")
import time; time.sleep(5)
"#;
    let (out, took) = collect(&["--", "python3", "-c", script]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("ADVR_V1"), "{}", stderr(&out));
    assert!(took < Duration::from_secs(20), "{took:?}");
}
