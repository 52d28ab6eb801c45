#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Row 15: a journal written by format version 1 (checked in under tests/data/v1, LZ4 frames,
//! two segments, a subscriber at offset 42) must stay readable by every later version.

use std::sync::Arc;

use journal::vfs::RealFs;
use journal::{tools, Batch, Journal, Options, Reader};

fn expected(i: u64) -> Vec<u8> {
    format!("v1-record-{i}-{}", "abc".repeat((i % 20) as usize)).into_bytes()
}

fn copy_fixture() -> tempfile::TempDir {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v1");
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    dir
}

#[test]
fn v1_fixture_reads_back_exactly() {
    let dir = copy_fixture();
    let i = tools::inspect(&RealFs, dir.path()).unwrap();
    assert!(!i.is_damaged());
    assert!(i.segments.len() >= 2, "fixture should span segments");
    assert_eq!(i.end_offset, 400);
    // A reader process (no writer) sees all of it.
    let mut r = Reader::open(Arc::new(RealFs), dir.path(), 0).unwrap();
    let mut b = Batch::new();
    let mut next = 0u64;
    while r.next_batch(&mut b).unwrap() > 0 {
        for (o, p) in b.iter() {
            assert_eq!((o, p), (next, expected(next).as_slice()));
            next += 1;
        }
    }
    assert_eq!(next, 400);
    // A writer opens it, keeps the subscriber where it was, and appends after it.
    let j = Journal::open(dir.path(), Options::default()).unwrap();
    assert_eq!(j.committed_offset(), 400);
    assert_eq!(j.subscriber("core").unwrap().checkpoint(), 42);
    assert_eq!(j.append(b"v2 era").unwrap(), 400);
}
