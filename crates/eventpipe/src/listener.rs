//! In-process listener output: the drain writes nettrace into a channel; a listener thread
//! reads it back with the `nettrace` reader and hands each decoded event to the callback,
//! in timestamp order (`SortedReader`: the trace orders only each thread's own events, and
//! each drain pass's first events release what came before, so the wait is one pass).
//! The callback runs on its own thread, never on a writer's or the drain's.

use std::io::{Read, Write};
use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::config::ListenerCallback;
use crate::Error;

/// The drain's end: each block write becomes one message.
pub(crate) struct ChannelWriter(mpsc::SyncSender<Vec<u8>>);

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .send(buf.to_vec())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "listener stopped"))?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct ChannelReader {
    rx: mpsc::Receiver<Vec<u8>>,
    pending: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.pending.len() {
            match self.rx.recv() {
                Ok(bytes) => {
                    self.pending = bytes;
                    self.pos = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.pending.len() - self.pos);
        buf[..n].copy_from_slice(&self.pending[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

pub(crate) fn spawn(
    mut callback: ListenerCallback,
) -> Result<(ChannelWriter, JoinHandle<()>), Error> {
    // Bounded, so a slow callback slows the drain instead of growing memory.
    let (tx, rx) = mpsc::sync_channel(256);
    let handle = std::thread::Builder::new()
        .name("eventpipe-listener".into())
        .spawn(move || {
            let input = ChannelReader {
                rx,
                pending: Vec::new(),
                pos: 0,
            };
            let Ok(reader) = nettrace::TraceReader::from_read(input) else {
                return;
            };
            let mut reader = nettrace::SortedReader::new(reader);
            while let Ok(Some(event)) = reader.next_event() {
                callback(&event);
            }
        })
        .map_err(|e| Error::SpawnThread("listener", e))?;
    Ok((ChannelWriter(tx), handle))
}
