#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Basic behaviour on real files: append, read, reopen, roll, subscribers, purge.

use std::time::Duration;

use journal::{Batch, Durability, Error, Journal, Options, Start};

fn opts(durability: Durability, segment_size_bytes: u64) -> Options {
    Options {
        durability,
        segment_size_bytes,
        ..Options::default()
    }
}

fn payload(i: u64) -> Vec<u8> {
    format!("record-{i}-{}", "x".repeat((i % 50) as usize)).into_bytes()
}

fn read_all(j: &Journal, from: u64) -> Vec<(u64, Vec<u8>)> {
    let mut r = j.reader(from).unwrap();
    let mut b = Batch::new();
    let mut out = Vec::new();
    for _ in 0..100_000 {
        if r.next_batch(&mut b).unwrap() == 0 {
            break;
        }
        out.extend(b.iter().map(|(o, p)| (o, p.to_vec())));
    }
    out
}

#[test]
fn append_read_reopen_every_mode() {
    let modes = [
        Durability::Buffered,
        Durability::default(),
        Durability::GroupCommit {
            max_bytes: 1024,
            max_delay: Duration::from_millis(1),
        },
        Durability::Always,
    ];
    for mode in modes {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), opts(mode, 8192)).unwrap();
        for i in 0..200u64 {
            assert_eq!(j.append(&payload(i)).unwrap(), i);
        }
        let batch: Vec<Vec<u8>> = (200..500).map(payload).collect();
        assert_eq!(j.append_batch(&batch).unwrap(), 200..500);
        let got = read_all(&j, 0);
        assert_eq!(got.len(), 500);
        for (i, (o, p)) in got.iter().enumerate() {
            assert_eq!(*o, i as u64);
            assert_eq!(*p, payload(i as u64));
        }
        j.close().unwrap();
        let j = Journal::open(dir.path(), opts(mode, 8192)).unwrap();
        assert_eq!(j.committed_offset(), 500);
        assert_eq!(j.recovery_report().truncated_bytes, 0);
        assert_eq!(read_all(&j, 123).len(), 377);
        assert_eq!(j.append(b"after").unwrap(), 500);
    }
}

#[test]
fn lz4_round_trip_and_smaller() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(Durability::Buffered, 1 << 20);
    o.lz4 = true;
    let j = Journal::open(dir.path(), o).unwrap();
    let recs: Vec<Vec<u8>> = (0..5000)
        .map(|i| format!("metric.cpu.user host=a{} 42", i % 7).into_bytes())
        .collect();
    j.append_batch(&recs).unwrap();
    let got = read_all(&j, 0);
    assert_eq!(got.len(), 5000);
    for (i, (_, p)) in got.iter().enumerate() {
        assert_eq!(p, &recs[i]);
    }
}

/// Records a caller encodes straight into the journal's buffer (`submit_encoded`) are read back
/// like appended ones, in offset order with them, in every mode and with LZ4; one over the
/// size bound is refused and leaves nothing behind, and so does an encoder that panics.
#[test]
fn encoded_records_interleave_with_appended_ones() {
    for (mode, lz4) in [
        (Durability::Buffered, false),
        (Durability::default(), false),
        (Durability::Always, false),
        (Durability::default(), true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(mode, 64 << 10);
        o.lz4 = lz4;
        let size_max = o.record_size_bytes_max() as usize;
        let j = Journal::open(dir.path(), o).unwrap();
        let mut want = Vec::new();
        for i in 0..300u64 {
            let p = payload(i);
            let offset = match i % 3 {
                0 => j.append(&p).unwrap(),
                // Hints too small and too large are both only hints.
                _ => {
                    let hint = if i % 2 == 0 { 1 } else { 4 * p.len() };
                    let ticket = j
                        .submit_encoded(hint, |out| out.extend_from_slice(&p))
                        .unwrap();
                    ticket.wait().unwrap().start
                }
            };
            assert_eq!(offset, i);
            want.push((i, p));
            if i == 150 {
                let refused = j.submit_encoded(16, |out| out.resize(out.len() + size_max + 1, 7));
                assert!(matches!(refused, Err(Error::RecordTooLarge { .. })));
                let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    j.submit_encoded(16, |out| {
                        out.extend_from_slice(b"half a record");
                        panic!("an encoder bug");
                    })
                }));
                assert!(panicked.is_err());
            }
        }
        assert_eq!(read_all(&j, 0), want, "{mode:?} lz4 {lz4}");
        j.close().unwrap();
        let j = Journal::open(dir.path(), opts(mode, 64 << 10)).unwrap();
        assert_eq!(read_all(&j, 0), want, "{mode:?} lz4 {lz4} reopened");
    }
}

#[test]
fn second_writer_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let _j = Journal::open(dir.path(), Options::default()).unwrap();
    assert!(matches!(
        Journal::open(dir.path(), Options::default()),
        Err(Error::Locked)
    ));
}

#[test]
fn subscribers_checkpoint_rewind_and_purge() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path(), opts(Durability::Buffered, 4096)).unwrap();
    j.add_subscriber("a", Start::Begin).unwrap();
    for i in 0..300u64 {
        j.append(&payload(i)).unwrap();
    }
    j.add_subscriber("b", Start::End).unwrap();
    j.add_subscriber("c", Start::CopyOf("a".into())).unwrap();
    assert!(matches!(
        j.add_subscriber("a", Start::Begin),
        Err(Error::SubscriberExists(_))
    ));
    let mut a = j.subscriber("a").unwrap();
    let mut batch = Batch::new();
    let mut seen = 0u64;
    while a.next_batch(&mut batch).unwrap() > 0 {
        for (o, p) in batch.iter() {
            assert_eq!(o, seen);
            assert_eq!(p, payload(o).as_slice());
            seen += 1;
        }
    }
    assert_eq!(seen, 300);
    a.commit().unwrap();
    // c still at 0: nothing may be deleted.
    assert_eq!(j.purge().unwrap().segments_deleted, 0);
    j.remove_subscriber("c").unwrap();
    j.rewind_subscriber("b", 300).unwrap();
    let before = j.earliest_offset().unwrap();
    let report = j.purge().unwrap();
    assert!(report.segments_deleted > 0);
    assert!(j.earliest_offset().unwrap() > before);
    assert!(matches!(
        j.rewind_subscriber("a", 0),
        Err(Error::NotRetained { .. })
    ));
    let earliest = j.earliest_offset().unwrap();
    j.rewind_subscriber("a", earliest).unwrap();
    let mut a = j.subscriber("a").unwrap();
    assert_eq!(a.checkpoint(), earliest);
    assert!(a.next_batch(&mut batch).unwrap() > 0);
    assert_eq!(batch.iter().next().unwrap().0, earliest);
}

#[test]
fn retention_floor_keeps_segments_subscribers_have_passed() {
    use journal::Retention;
    for (retention, expect_deleted) in [
        (
            Retention {
                bytes_min: 0,
                age_ms_min: 0,
            },
            true,
        ),
        (
            Retention {
                bytes_min: 1 << 30,
                age_ms_min: 0,
            },
            false,
        ),
        (
            Retention {
                bytes_min: 0,
                age_ms_min: 3_600_000,
            },
            false,
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let o = Options {
            retention,
            ..opts(Durability::Buffered, 4096)
        };
        let j = Journal::open(dir.path(), o).unwrap();
        j.add_subscriber("a", Start::Begin).unwrap();
        for i in 0..200u64 {
            j.append(&payload(i)).unwrap();
        }
        j.rewind_subscriber("a", 200).unwrap();
        j.purge().unwrap();
        assert_eq!(
            j.earliest_offset().unwrap() > 0,
            expect_deleted,
            "{retention:?}"
        );
    }
}

#[test]
fn no_subscribers_means_nothing_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path(), opts(Durability::Buffered, 4096)).unwrap();
    for i in 0..200u64 {
        j.append(&payload(i)).unwrap();
    }
    assert_eq!(j.purge().unwrap().segments_deleted, 0);
    assert_eq!(read_all(&j, 0).len(), 200);
}

/// The async-friendly API: a ticket is a plain `Future`; concurrent appenders share syncs.
#[test]
fn tickets_are_futures_and_share_syncs() {
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park_timeout(Duration::from_millis(10));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let j = Arc::new(Journal::open(dir.path(), opts(Durability::default(), 1 << 20)).unwrap());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let j = j.clone();
            std::thread::spawn(move || {
                let mut ranges = Vec::new();
                for i in 0..50u64 {
                    let rec = format!("t{t}-{i}");
                    ranges.push(block_on(j.submit(&[rec.as_bytes()]).unwrap()).unwrap());
                }
                ranges
            })
        })
        .collect();
    let mut all: Vec<_> = threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    all.sort_by_key(|r| r.start);
    assert_eq!(all.len(), 200);
    for (i, r) in all.iter().enumerate() {
        assert_eq!(r.start, i as u64);
    }
    assert_eq!(j.committed_offset(), 200);
}

/// On the real file system, garbage far past the last frame — near the end of the preallocated
/// segment — is found and discarded at recovery, and a clean tail reports nothing.
#[test]
fn recovery_finds_garbage_anywhere_after_the_tail() {
    use std::os::unix::fs::FileExt;
    let segment_size_bytes = 4 << 20;
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path(), opts(Durability::Always, segment_size_bytes)).unwrap();
    for i in 0..20u64 {
        j.append(&payload(i)).unwrap();
    }
    j.close().unwrap();
    let j = Journal::open(dir.path(), opts(Durability::Always, segment_size_bytes)).unwrap();
    assert_eq!(j.recovery_report().truncated_bytes, 0);
    j.close().unwrap();
    let segment = dir.path().join(format!("{:020}.seg", 0));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.write_all_at(&[0xa5; 64], segment_size_bytes - 100)
        .unwrap();
    file.sync_all().unwrap();
    drop(file);
    let j = Journal::open(dir.path(), opts(Durability::Always, segment_size_bytes)).unwrap();
    assert!(
        j.recovery_report().truncated_bytes > 0,
        "{:?}",
        j.recovery_report()
    );
    assert_eq!(j.committed_offset(), 20);
    assert_eq!(read_all(&j, 0).len(), 20);
    assert_eq!(j.append(b"after").unwrap(), 20);
}
