//! The streaming reader yields events as soon as their block is complete, while the writer
//! is still producing the rest of the stream (as over a live socket).

use std::io::Read;
use std::sync::mpsc;
use std::time::Duration;

use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{EventHeader, EventMetadata, FormatVersion, TraceInfo, TraceReader};

/// A `Read` fed by a channel: blocks until the writer sends more bytes, ends when it hangs up.
struct ChannelReader {
    rx: mpsc::Receiver<Vec<u8>>,
    pending: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.pending.len() {
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

/// A `Write` that forwards each write to the channel.
struct ChannelWriter(mpsc::Sender<Vec<u8>>);

impl std::io::Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .send(buf.to_vec())
            .map_err(|_| std::io::ErrorKind::BrokenPipe)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn events_arrive_before_the_stream_ends() {
    for version in [FormatVersion::V5, FormatVersion::V6] {
        let (bytes_tx, bytes_rx) = mpsc::channel();
        let (ack_tx, ack_rx) = mpsc::channel::<u32>();
        let writer = std::thread::spawn(move || {
            let mut w =
                TraceWriter::new(ChannelWriter(bytes_tx), &TraceInfo::new(version, 8)).unwrap();
            let md = EventMetadata {
                metadata_id: 1,
                provider: "Live".into(),
                event_name: "Tick".into(),
                ..Default::default()
            };
            w.write_metadata_block(&[md]).unwrap();
            for block_no in 1..=3u32 {
                let mut b = EventBlockBuilder::new(version);
                let h = EventHeader {
                    metadata_id: 1,
                    sequence_number: block_no,
                    timestamp: i64::from(block_no),
                    ..Default::default()
                };
                b.push(&h, &block_no.to_le_bytes());
                w.write_event_block(&mut b).unwrap();
                // Do not write more until the reader has seen this block's event.
                assert_eq!(
                    ack_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
                    block_no
                );
            }
            w.finish().unwrap();
        });
        let mut reader = TraceReader::from_read(ChannelReader {
            rx: bytes_rx,
            pending: Vec::new(),
            pos: 0,
        })
        .unwrap();
        for block_no in 1..=3u32 {
            let e = reader
                .next_event()
                .unwrap()
                .expect("event of a complete block");
            assert_eq!(e.payload, block_no.to_le_bytes());
            ack_tx.send(block_no).unwrap();
        }
        assert!(reader.next_event().unwrap().is_none());
        assert!(reader.is_finished());
        writer.join().unwrap();
    }
}
