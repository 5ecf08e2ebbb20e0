//! Named pipes (Windows), as the .NET runtime serves diagnostics there:
//! `\\.\pipe\dotnet-diagnostic-{pid}`, byte mode, local clients only.
//!
//! [`PipeStream`] gives what the Unix socket gives the code above it: blocking reads and
//! writes with optional timeouts, clones that share one connection, and a `shutdown`
//! that ends every read or write in progress on any clone. Every operation is overlapped
//! I/O waited for with a timeout, so a timeout cancels the operation
//! (`CancelIoEx`) and waits for the cancellation to complete before the buffer and the
//! `OVERLAPPED` go out of scope: the kernel never writes into freed memory. A write
//! sends at most [`WRITE_CHUNK`] bytes, so a write timeout bounds a stall (nothing
//! taken), not the time a large write needs at a reader's pace.
//!
//! The pipes are created with the default security descriptor (the creator and the
//! administrators have full access, as for .NET's) and `PIPE_REJECT_REMOTE_CLIENTS`.
#![allow(unsafe_code)]

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::windows::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use windows_sys::Win32::Foundation::{
    CloseHandle, GetLastError, ERROR_BROKEN_PIPE, ERROR_FILE_NOT_FOUND, ERROR_IO_PENDING,
    ERROR_NO_DATA, ERROR_OPERATION_ABORTED, ERROR_PIPE_BUSY, ERROR_PIPE_CONNECTED,
    ERROR_PIPE_NOT_CONNECTED, GENERIC_READ, GENERIC_WRITE, HANDLE, INVALID_HANDLE_VALUE,
    WAIT_OBJECT_0,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, ReadFile, WriteFile, FILE_FLAG_FIRST_PIPE_INSTANCE, FILE_FLAG_OVERLAPPED,
    OPEN_EXISTING, PIPE_ACCESS_DUPLEX,
};
use windows_sys::Win32::System::Pipes::{
    ConnectNamedPipe, CreateNamedPipeW, WaitNamedPipeW, PIPE_READMODE_BYTE,
    PIPE_REJECT_REMOTE_CLIENTS, PIPE_TYPE_BYTE, PIPE_UNLIMITED_INSTANCES, PIPE_WAIT,
};
use windows_sys::Win32::System::Threading::{
    CreateEventW, SetEvent, WaitForMultipleObjects, WaitForSingleObject, INFINITE,
};
use windows_sys::Win32::System::IO::{CancelIoEx, GetOverlappedResult, OVERLAPPED};

use crate::Error;

/// The most one write hands the pipe at once (its buffer size): a write timeout then
/// measures a reader that takes nothing, not one that reads slowly.
pub const WRITE_CHUNK: usize = 64 * 1024;

/// How long [`connect`] waits for a busy pipe (every instance taken) to free one.
const BUSY_WAIT: Duration = Duration::from_secs(5);

/// How long [`connect`] retries a name that does not resolve: longer than a server takes
/// to create its next instance, short enough that a pipe that is not there fails soon.
const INSTANCE_GAP: Duration = Duration::from_millis(500);

/// A handle closed when dropped.
#[derive(Debug)]
struct Owned(HANDLE);

// SAFETY: a kernel handle may be used and closed from any thread.
unsafe impl Send for Owned {}
// SAFETY: as above; the calls made through a shared handle are thread-safe.
unsafe impl Sync for Owned {}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: the handle is open and owned here, closed once.
        unsafe { CloseHandle(self.0) };
    }
}

/// A manual-reset event, unsignalled.
fn event() -> std::io::Result<Owned> {
    // SAFETY: no security attributes, no name: an anonymous event of this process.
    let h = unsafe { CreateEventW(std::ptr::null(), 1, 0, std::ptr::null()) };
    if h.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Owned(h))
}

fn wide(path: &Path) -> Vec<u16> {
    OsStr::new(path).encode_wide().chain([0]).collect()
}

#[derive(Debug)]
struct Pipe {
    handle: Owned,
    /// Signalled by `shutdown`: every wait on this connection's I/O ends at once.
    shut: Owned,
    read_timeout: Mutex<Option<Duration>>,
    write_timeout: Mutex<Option<Duration>>,
}

/// One end of a named pipe connection. Clones share the connection; it closes when the
/// last clone is dropped (the peer then reads what is left, then the end).
#[derive(Debug, Clone)]
pub struct PipeStream(Arc<Pipe>);

/// What ended an overlapped operation that did not complete.
enum Interrupted {
    TimedOut,
    Shut,
}

impl PipeStream {
    fn new(handle: HANDLE) -> std::io::Result<PipeStream> {
        let handle = Owned(handle);
        Ok(PipeStream(Arc::new(Pipe {
            handle,
            shut: event()?,
            read_timeout: Mutex::new(None),
            write_timeout: Mutex::new(None),
        })))
    }

    /// Another handle to the same connection.
    pub fn try_clone(&self) -> std::io::Result<PipeStream> {
        Ok(self.clone())
    }

    /// How long a read may wait (`None`: for ever), for every clone.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        *self
            .0
            .read_timeout
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = timeout;
        Ok(())
    }

    /// How long a write may wait for room (`None`: for ever), for every clone.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        *self
            .0
            .write_timeout
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = timeout;
        Ok(())
    }

    /// Ends every read and write on every clone, now and later: reads see the end of the
    /// stream, writes a broken pipe. (Both directions: `_how` is the socket API's.)
    pub fn shutdown(&self, _how: std::net::Shutdown) -> std::io::Result<()> {
        // SAFETY: `shut` is an open event handle.
        if unsafe { SetEvent(self.0.shut.0) } == 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn is_shut(&self) -> bool {
        // SAFETY: `shut` is an open event handle; a zero timeout only polls it.
        unsafe { WaitForSingleObject(self.0.shut.0, 0) == WAIT_OBJECT_0 }
    }

    /// Runs one overlapped operation that `start` begins on the pipe, waiting for it at
    /// most `timeout`.
    fn overlapped(
        &self,
        timeout: Option<Duration>,
        start: impl FnOnce(HANDLE, *mut OVERLAPPED) -> i32,
    ) -> Result<std::io::Result<usize>, Interrupted> {
        if self.is_shut() {
            return Err(Interrupted::Shut);
        }
        let done = match event() {
            Ok(e) => e,
            Err(e) => return Ok(Err(e)),
        };
        let handle = self.0.handle.0;
        // SAFETY: an all-zero OVERLAPPED (offset 0, no event yet) is valid.
        let mut ov: OVERLAPPED = unsafe { std::mem::zeroed() };
        ov.hEvent = done.0;
        let mut moved = 0u32;
        if start(handle, &mut ov) == 0 {
            // SAFETY: no preconditions.
            let error = unsafe { GetLastError() };
            if error != ERROR_IO_PENDING {
                return Ok(Err(std::io::Error::from_raw_os_error(error as i32)));
            }
            let waits = [done.0, self.0.shut.0];
            let ms = timeout.map_or(INFINITE, |d| {
                d.as_millis().clamp(1, u128::from(INFINITE - 1)) as u32
            });
            // SAFETY: both handles are open events.
            let woke = unsafe { WaitForMultipleObjects(2, waits.as_ptr(), 0, ms) };
            if woke != WAIT_OBJECT_0 {
                // SAFETY: `ov` is this operation's, still in flight or just finished.
                unsafe { CancelIoEx(handle, &ov) };
            }
            // Waits for the operation to end, completed or cancelled: only then may `ov`
            // and the buffer go.
            // SAFETY: `ov` belongs to an operation started on `handle`.
            if unsafe { GetOverlappedResult(handle, &ov, &mut moved, 1) } == 0 {
                // SAFETY: no preconditions.
                let error = unsafe { GetLastError() };
                if error == ERROR_OPERATION_ABORTED && moved == 0 {
                    return Err(if woke == WAIT_OBJECT_0 + 1 {
                        Interrupted::Shut
                    } else {
                        Interrupted::TimedOut
                    });
                }
                if error != ERROR_OPERATION_ABORTED {
                    return Ok(Err(std::io::Error::from_raw_os_error(error as i32)));
                }
            }
            return Ok(Ok(moved as usize));
        }
        // Done at once; the count is in the OVERLAPPED.
        // SAFETY: as above, for a completed operation.
        if unsafe { GetOverlappedResult(handle, &ov, &mut moved, 0) } == 0 {
            return Ok(Err(std::io::Error::last_os_error()));
        }
        Ok(Ok(moved as usize))
    }

    fn read_some(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let timeout = *self
            .0
            .read_timeout
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let len = buf.len().min(u32::MAX as usize) as u32;
        let ptr = buf.as_mut_ptr();
        // SAFETY: `buf` is `len` writable bytes that outlive the operation (`overlapped`
        // returns only once it has ended).
        let read = self.overlapped(timeout, |h, ov| unsafe {
            ReadFile(h, ptr, len, std::ptr::null_mut(), ov)
        });
        match read {
            Ok(Err(e)) if is_closed(&e) => Ok(0),
            Ok(r) => r,
            Err(Interrupted::Shut) => Ok(0),
            Err(Interrupted::TimedOut) => Err(std::io::ErrorKind::TimedOut.into()),
        }
    }

    fn write_some(&self, buf: &[u8]) -> std::io::Result<usize> {
        let timeout = *self
            .0
            .write_timeout
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.write_within(buf, timeout)
    }

    /// Writes at most [`WRITE_CHUNK`] bytes of `buf`, waiting at most `timeout` (`None`:
    /// for ever) for the pipe to take them, whatever the stream's write timeout.
    pub fn write_within(&self, buf: &[u8], timeout: Option<Duration>) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let len = buf.len().min(WRITE_CHUNK) as u32;
        let ptr = buf.as_ptr();
        // SAFETY: `buf` has at least `len` readable bytes that outlive the operation.
        let written = self.overlapped(timeout, |h, ov| unsafe {
            WriteFile(h, ptr, len, std::ptr::null_mut(), ov)
        });
        match written {
            Ok(Err(e)) if is_closed(&e) => Err(std::io::ErrorKind::BrokenPipe.into()),
            Ok(r) => r,
            Err(Interrupted::Shut) => Err(std::io::ErrorKind::BrokenPipe.into()),
            Err(Interrupted::TimedOut) => Err(std::io::ErrorKind::TimedOut.into()),
        }
    }
}

/// Whether an error means the other end is gone.
fn is_closed(e: &std::io::Error) -> bool {
    let closed = [ERROR_BROKEN_PIPE, ERROR_NO_DATA, ERROR_PIPE_NOT_CONNECTED];
    e.raw_os_error()
        .is_some_and(|code| closed.contains(&(code as u32)))
}

impl Read for PipeStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.read_some(buf)
    }
}

impl Read for &PipeStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.read_some(buf)
    }
}

impl Write for PipeStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_some(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Write for &PipeStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_some(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Connects to the pipe at `path`, waiting a while if every instance is taken.
pub fn connect(path: &Path) -> std::io::Result<PipeStream> {
    let name = wide(path);
    let deadline = Instant::now() + BUSY_WAIT;
    let gap_deadline = Instant::now() + INSTANCE_GAP;
    loop {
        // SAFETY: `name` is NUL-terminated; no security attributes, no template.
        let h = unsafe {
            CreateFileW(
                name.as_ptr(),
                GENERIC_READ | GENERIC_WRITE,
                0,
                std::ptr::null(),
                OPEN_EXISTING,
                FILE_FLAG_OVERLAPPED,
                std::ptr::null_mut(),
            )
        };
        if h != INVALID_HANDLE_VALUE {
            return PipeStream::new(h);
        }
        let e = std::io::Error::last_os_error();
        let now = Instant::now();
        match e.raw_os_error().map(|code| code as u32) {
            Some(ERROR_PIPE_BUSY) if now < deadline => {
                let left = deadline - now;
                // SAFETY: `name` is NUL-terminated.
                unsafe { WaitNamedPipeW(name.as_ptr(), left.as_millis().max(1) as u32) };
            }
            // Between a client taking the waiting instance and the server creating the
            // next, the name may not resolve; .NET's client retries through that window
            // too.
            Some(ERROR_FILE_NOT_FOUND) if now < gap_deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            _ => return Err(e),
        }
    }
}

/// A named pipe server: one instance always waits for the next client.
#[derive(Debug)]
pub struct PipeListener {
    path: PathBuf,
    name: Vec<u16>,
    /// The instance the next client connects to.
    waiting: Mutex<Option<Owned>>,
}

impl PipeListener {
    /// Creates the pipe at `path`; fails if another server has it already.
    pub fn bind(path: &Path) -> std::io::Result<PipeListener> {
        let name = wide(path);
        let first = instance(&name, true)?;
        Ok(PipeListener {
            path: path.to_path_buf(),
            name,
            waiting: Mutex::new(Some(first)),
        })
    }

    /// The pipe's name.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for the next client.
    pub fn accept(&self) -> std::io::Result<PipeStream> {
        loop {
            if let Some(s) = self.accept_for(None)? {
                return Ok(s);
            }
        }
    }

    /// Waits at most `timeout` for the next client (`None` for ever).
    fn accept_for(&self, timeout: Option<Duration>) -> std::io::Result<Option<PipeStream>> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let pipe = match waiting.take() {
            Some(p) => p,
            None => instance(&self.name, false)?,
        };
        let done = event()?;
        // SAFETY: an all-zero OVERLAPPED is valid.
        let mut ov: OVERLAPPED = unsafe { std::mem::zeroed() };
        ov.hEvent = done.0;
        // SAFETY: `pipe` is a listening instance; `ov` outlives the operation (waited
        // for below, or cancelled and waited for).
        let connected = unsafe { ConnectNamedPipe(pipe.0, &mut ov) } != 0 || {
            // SAFETY: no preconditions.
            match unsafe { GetLastError() } {
                ERROR_PIPE_CONNECTED => true,
                ERROR_IO_PENDING => {
                    let ms = timeout.map_or(INFINITE, |d| {
                        d.as_millis().clamp(1, u128::from(INFINITE - 1)) as u32
                    });
                    // SAFETY: `done` is an open event.
                    let woke = unsafe { WaitForSingleObject(done.0, ms) };
                    if woke != WAIT_OBJECT_0 {
                        // SAFETY: `ov` is the pending connect's.
                        unsafe { CancelIoEx(pipe.0, &ov) };
                    }
                    let mut unused = 0u32;
                    // SAFETY: waits for the connect to end, completed or cancelled.
                    unsafe { GetOverlappedResult(pipe.0, &ov, &mut unused, 1) != 0 }
                }
                error => return Err(std::io::Error::from_raw_os_error(error as i32)),
            }
        };
        if !connected {
            // Timed out: the instance waits again next time.
            *waiting = Some(pipe);
            return Ok(None);
        }
        // The next instance before handing this one over, so a client never finds no
        // instance waiting (failure is retried at the next accept).
        *waiting = instance(&self.name, false).ok();
        let handle = pipe.0;
        std::mem::forget(pipe);
        PipeStream::new(handle).map(Some)
    }
}

/// A new instance of the pipe `name`, overlapped, byte mode, local clients only; the
/// first one claims the name.
fn instance(name: &[u16], first: bool) -> std::io::Result<Owned> {
    let flags = PIPE_ACCESS_DUPLEX
        | FILE_FLAG_OVERLAPPED
        | if first {
            FILE_FLAG_FIRST_PIPE_INSTANCE
        } else {
            0
        };
    let size = WRITE_CHUNK as u32;
    // SAFETY: `name` is NUL-terminated; default security attributes.
    let h = unsafe {
        CreateNamedPipeW(
            name.as_ptr(),
            flags,
            PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS,
            PIPE_UNLIMITED_INSTANCES,
            size,
            size,
            0,
            std::ptr::null(),
        )
    };
    if h == INVALID_HANDLE_VALUE {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Owned(h))
}

/// Waits up to `timeout` for a connection on `listener`; `None` when none came.
pub fn accept_within(
    listener: &PipeListener,
    timeout: Duration,
) -> std::io::Result<Option<PipeStream>> {
    listener.accept_for(Some(timeout))
}

/// Creates the pipe at `path`. (A pipe has no file mode; see the module's note on its
/// security descriptor.)
pub fn listen_private(path: &Path) -> Result<PipeListener, Error> {
    PipeListener::bind(path).map_err(Error::io(format!("creating the pipe {}", path.display())))
}

/// Windows names pipes without a start time: none is needed.
pub fn start_time(_pid: u32) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipe_name(test: &str) -> PathBuf {
        PathBuf::from(format!(
            r"\\.\pipe\eventpipe-test-{test}-{}",
            std::process::id()
        ))
    }

    #[test]
    fn bytes_cross_both_ways_and_the_end_is_seen_after_them() {
        let path = pipe_name("cross");
        let listener = PipeListener::bind(&path).unwrap();
        let client = std::thread::spawn({
            let path = path.clone();
            move || {
                let mut s = connect(&path).unwrap();
                s.write_all(b"ping").unwrap();
                let mut all = Vec::new();
                s.read_to_end(&mut all).unwrap();
                all
            }
        });
        let mut server = listener.accept().unwrap();
        let mut ping = [0u8; 4];
        server.read_exact(&mut ping).unwrap();
        assert_eq!(&ping, b"ping");
        // More than a chunk, then the server's end: the client reads all of it, then 0.
        let big: Vec<u8> = (0..3 * WRITE_CHUNK + 17).map(|i| i as u8).collect();
        server.write_all(&big).unwrap();
        drop(server);
        assert_eq!(client.join().unwrap(), big);
    }

    #[test]
    #[ignore = "wine does not enforce FILE_FLAG_FIRST_PIPE_INSTANCE: run on Windows"]
    fn a_second_server_cannot_take_the_name() {
        let path = pipe_name("twice");
        let _first = PipeListener::bind(&path).unwrap();
        assert!(PipeListener::bind(&path).is_err());
    }

    #[test]
    fn reads_time_out_and_shutdown_ends_a_blocked_read() {
        let path = pipe_name("timeout");
        let listener = PipeListener::bind(&path).unwrap();
        let client = connect(&path).unwrap();
        let server = listener.accept().unwrap();
        server
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let started = Instant::now();
        let err = (&server).read(&mut [0u8; 8]).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(90));
        // A clone blocked for ever is ended by shutdown on another.
        server.set_read_timeout(None).unwrap();
        let clone = server.try_clone().unwrap();
        let reader = std::thread::spawn(move || (&clone).read(&mut [0u8; 8]));
        std::thread::sleep(Duration::from_millis(100));
        server.shutdown(std::net::Shutdown::Both).unwrap();
        assert_eq!(reader.join().unwrap().unwrap(), 0);
        drop(client);
    }

    #[test]
    fn a_write_to_a_reader_that_takes_nothing_times_out() {
        let path = pipe_name("stall");
        let listener = PipeListener::bind(&path).unwrap();
        let _client = connect(&path).unwrap();
        let server = listener.accept().unwrap();
        server
            .set_write_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut sent = 0usize;
        let chunk = vec![0u8; WRITE_CHUNK];
        let err = loop {
            match (&server).write(&chunk) {
                Ok(n) => sent += n,
                Err(e) => break e,
            }
            assert!(sent < 64 * WRITE_CHUNK, "the pipe took {sent} bytes unread");
        };
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    }

    #[test]
    fn accept_within_gives_up_and_the_pipe_still_takes_clients() {
        let path = pipe_name("accept");
        let listener = PipeListener::bind(&path).unwrap();
        assert!(accept_within(&listener, Duration::from_millis(50))
            .unwrap()
            .is_none());
        let _client = connect(&path).unwrap();
        assert!(accept_within(&listener, Duration::from_secs(5))
            .unwrap()
            .is_some());
    }
}
