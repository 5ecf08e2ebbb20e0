//! Loom models of the writer → drain buffer hand-off (the real `Buffer` with every data byte
//! a tracked cell). Run with `ci/loom.sh`; in a normal build this file is empty.
#![cfg(eventpipe_loom)]

use eventpipe::loom_model::Buffer;
use loom::sync::Arc;

/// The writer publishes two records and retires the buffer; the drain polls. Every chunk it
/// reads ends on a record boundary, the bytes are exactly what was written, and once it has
/// seen `retired` one more read returns everything that remained.
#[test]
fn published_records_are_whole_and_retire_publishes_the_rest() {
    loom::model(|| {
        let buf = Arc::new(Buffer::new(4));
        let writer = {
            let buf = Arc::clone(&buf);
            loom::thread::spawn(move || {
                // SAFETY: this thread is the only writer; 4 bytes fit.
                let end = unsafe { buf.append(0, &[&[1, 2]]) };
                // SAFETY: as above, `end` is the published end.
                unsafe { buf.append(end, &[&[3], &[4]]) };
                buf.retire();
            })
        };
        let mut got: Vec<u8> = Vec::new();
        loop {
            let retired = buf.is_retired();
            let chunk = buf.read(got.len());
            assert!(chunk.len() % 2 == 0, "a read split a record: {chunk:?}");
            got.extend(chunk);
            if retired {
                assert!(
                    buf.read(got.len()).is_empty(),
                    "bytes published after retire"
                );
                break;
            }
            loom::thread::yield_now();
        }
        assert_eq!(got, [1, 2, 3, 4]);
        writer.join().unwrap();
    });
}

/// A drain that reads while the writer is mid-append never sees unpublished bytes: it only
/// ever sees a prefix of the records, in order.
#[test]
fn a_concurrent_read_sees_a_prefix_of_whole_records() {
    loom::model(|| {
        let buf = Arc::new(Buffer::new(4));
        let writer = {
            let buf = Arc::clone(&buf);
            loom::thread::spawn(move || {
                // SAFETY: single writer; 4 bytes fit.
                let end = unsafe { buf.append(0, &[&[7, 8]]) };
                // SAFETY: as above.
                unsafe { buf.append(end, &[&[9, 10]]) };
            })
        };
        let seen = buf.read(0);
        assert!(
            seen.is_empty() || seen == [7, 8] || seen == [7, 8, 9, 10],
            "read {seen:?}"
        );
        writer.join().unwrap();
        assert_eq!(buf.read(0), [7, 8, 9, 10]);
    });
}
