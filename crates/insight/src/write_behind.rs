//! A file written by a thread of its own, for the large outputs of the converters: the
//! converter formats the next chunk while the kernel copies the last one into the page
//! cache (a Chrome timeline is about four times the trace's size, and writing it was a
//! fifth of the conversion).

use std::fs::File;
use std::io::{self, Write};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

/// Chunks are handed to the writing thread once they hold this much.
const CHUNK: usize = 1 << 20;

/// What the writing thread is asked to do.
enum Job {
    /// Write these bytes; the emptied buffer comes back for reuse.
    Write(Vec<u8>),
    /// Flush the file and answer.
    Flush,
}

/// A [`Write`] whose bytes a second thread writes to a file, in order, in large chunks.
/// An error of the writing thread is returned by a later `write` or `flush`; `flush` waits
/// until everything before it is in the file.
#[derive(Debug)]
pub struct WriteBehind {
    current: Vec<u8>,
    jobs: Option<SyncSender<Job>>,
    /// Emptied buffers and flush answers, with the first error the thread met.
    done: Receiver<io::Result<Option<Vec<u8>>>>,
    spare: Vec<Vec<u8>>,
    thread: Option<JoinHandle<()>>,
    /// An error the thread reported, returned at the next call.
    failed: Option<io::Error>,
}

impl WriteBehind {
    /// Writes to `file` from a thread of its own, started here.
    pub fn new(mut file: File) -> WriteBehind {
        // Two chunks in flight at most: memory stays a few MiB whatever the output's size.
        let (jobs, incoming) = mpsc::sync_channel::<Job>(2);
        // Unbounded, but it never holds more answers than there are jobs in flight; a
        // bounded one could fill while this side waits to send a job: a deadlock.
        let (answer, done) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mut error = false;
            for job in incoming {
                let reply = match job {
                    // After an error nothing more is written: the output is already wrong.
                    Job::Write(mut chunk) if !error => {
                        let written = file.write_all(&chunk);
                        chunk.clear();
                        written.map(|()| Some(chunk))
                    }
                    Job::Write(mut chunk) => {
                        chunk.clear();
                        Ok(Some(chunk))
                    }
                    Job::Flush => file.flush().map(|()| None),
                };
                error |= reply.is_err();
                if answer.send(reply).is_err() {
                    return;
                }
            }
        });
        WriteBehind {
            current: Vec::with_capacity(CHUNK),
            jobs: Some(jobs),
            done,
            spare: Vec::new(),
            thread: Some(thread),
            failed: None,
        }
    }

    /// Takes in the answers that have arrived without waiting.
    fn collect_answers(&mut self) {
        while let Ok(answer) = self.done.try_recv() {
            self.take_answer(answer);
        }
    }

    fn take_answer(&mut self, answer: io::Result<Option<Vec<u8>>>) {
        match answer {
            Ok(Some(buffer)) => self.spare.push(buffer),
            Ok(None) => {}
            Err(e) => {
                self.failed.get_or_insert(e);
            }
        }
    }

    fn send(&mut self, job: Job) -> io::Result<()> {
        let gone = || io::Error::other("the writing thread has stopped");
        let jobs = self.jobs.as_ref().ok_or_else(gone)?;
        jobs.send(job).map_err(|_| gone())
    }

    /// Hands the current chunk to the writing thread.
    fn hand_on(&mut self) -> io::Result<()> {
        self.collect_answers();
        let next = self
            .spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(CHUNK));
        let chunk = std::mem::replace(&mut self.current, next);
        self.send(Job::Write(chunk))?;
        match self.failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Write for WriteBehind {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.current.extend_from_slice(buf);
        if self.current.len() >= CHUNK {
            self.hand_on()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.current.is_empty() {
            self.hand_on()?;
        }
        self.send(Job::Flush)?;
        // Every job before the flush is answered before it, in order.
        loop {
            match self.done.recv() {
                Ok(Ok(None)) => break,
                Ok(answer) => self.take_answer(answer),
                Err(_) => return Err(io::Error::other("the writing thread has stopped")),
            }
        }
        match self.failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        // What was not flushed is written still, as a dropped `BufWriter` would.
        if !self.current.is_empty() {
            let _ = self.hand_on();
        }
        // Closing the job channel ends the thread's loop once the jobs queued are done;
        // its answers are read until it hangs up.
        self.jobs = None;
        while self.done.recv().is_ok() {}
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_everything_in_order_and_flushes() {
        let dir = std::env::temp_dir().join(format!("eptrace-wb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.bin");
        let mut expected = Vec::new();
        {
            let mut w = WriteBehind::new(File::create(&path).unwrap());
            for i in 0..50_000u32 {
                let line = format!("line {i} {}\n", "x".repeat((i % 97) as usize));
                w.write_all(line.as_bytes()).unwrap();
                expected.extend_from_slice(line.as_bytes());
            }
            w.flush().unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), expected);
            w.write_all(b"tail").unwrap();
            expected.extend_from_slice(b"tail");
        }
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
