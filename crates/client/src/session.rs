//! A running session whose trace a thread of its own reads, and the one way sessions end:
//! ask the process to stop ([`TraceSession::stop`]: it flushes, then ends the stream),
//! give the stream a grace period to end ([`TraceSession::wait_within`], [`STOP_GRACE`]),
//! and cut it if it does not, so a process that never answers cannot hold a tool.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use eventpipe_ipc::client::StreamCloser;
use eventpipe_ipc::TraceStream;

use crate::{Error, Target};

/// How long a stopped session's stream has to end before it is cut: the process flushes
/// what its buffers hold, then its rundown, which for a large program takes seconds.
pub const STOP_GRACE: Duration = Duration::from_secs(30);

/// How often the waits below look at the reading thread.
const POLL: Duration = Duration::from_millis(20);

/// A session started on a [`Target`], its stream read on a thread of its own into a `T`.
#[derive(Debug)]
pub struct TraceSession<T> {
    id: u64,
    closer: StreamCloser,
    reader: JoinHandle<T>,
}

impl<T: Send + 'static> TraceSession<T> {
    /// Reads `stream` with `read` on a thread named `name`.
    ///
    /// # Errors
    /// When the stream cannot be cloned for cutting, or the thread cannot be started.
    pub fn spawn(
        stream: TraceStream,
        name: &str,
        read: impl FnOnce(TraceStream) -> T + Send + 'static,
    ) -> Result<TraceSession<T>, Error> {
        let id = stream.session_id();
        let closer = stream.closer()?;
        let reader = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || read(stream))
            .map_err(|source| Error::Thread {
                name: name.to_owned(),
                source,
            })?;
        Ok(TraceSession { id, closer, reader })
    }

    /// The session's id (what `StopTracing` names).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether the reading thread has ended (the stream ended, or `read` returned).
    pub fn is_finished(&self) -> bool {
        self.reader.is_finished()
    }

    /// Cuts the stream without stopping the session: the reader meets its end, and the
    /// process ends the session when it notices.
    pub fn cancel(&self) {
        self.closer.close();
    }

    /// Asks the process to stop the session; its stream then ends once it has flushed.
    /// When the process cannot be asked, the stream is cut, so the reader still ends.
    ///
    /// # Errors
    /// Why `StopTracing` failed (the stream has been cut).
    pub fn stop(&self, target: &mut Target) -> Result<(), Error> {
        target.stop(self.id).inspect_err(|_| self.cancel())
    }

    /// Waits up to `grace` for the stream to end, then cuts it; whether it ended by itself.
    pub fn wait_within(&self, grace: Duration) -> bool {
        let deadline = Instant::now() + grace;
        while !self.is_finished() {
            if Instant::now() >= deadline {
                self.cancel();
                return false;
            }
            std::thread::sleep(POLL);
        }
        true
    }

    /// What the reading thread made of the stream.
    ///
    /// # Errors
    /// When the reading thread panicked.
    pub fn join(self) -> Result<T, Error> {
        self.reader.join().map_err(|_| Error::ReaderPanicked)
    }
}
