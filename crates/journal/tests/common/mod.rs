#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]
//! Shared helpers: deterministic payloads and the invariant checks every matrix row asserts.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use journal::sim::SimFs;
use journal::vfs::Vfs;
use journal::{Batch, Durability, Error, Journal, Options, Reader};

/// The payload of the record at `offset`: its content proves where it belongs.
pub fn payload(offset: u64) -> Vec<u8> {
    let len = 20 + (offset % 61) as usize;
    let mut v = format!("rec:{offset:012}:").into_bytes();
    let mut x = offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    v
}

pub fn sim_opts(sim: &SimFs, durability: Durability, segment_size_bytes: u64) -> Options {
    Options {
        durability,
        segment_size_bytes,
        vfs: Arc::new(sim.clone()),
        ..Options::default()
    }
}

pub fn group() -> Durability {
    Durability::GroupCommit {
        max_bytes: 2048,
        max_delay: Duration::from_millis(1),
    }
}

/// Reads everything from `from` to the committed end. Every delivered record must be exactly
/// `payload(offset)` with consecutive offsets; returns the offsets read or the first error.
pub fn read_checked(r: &mut Reader) -> Result<Vec<u64>, Error> {
    let mut b = Batch::new();
    let mut out = Vec::new();
    let mut expect = r.position();
    for _ in 0..1_000_000 {
        if r.next_batch(&mut b)? == 0 {
            return Ok(out);
        }
        for (o, p) in b.iter() {
            assert!(o >= expect, "offsets go backwards: {o} < {expect}");
            assert_eq!(
                p,
                payload(o).as_slice(),
                "wrong bytes delivered at offset {o}"
            );
            out.push(o);
            expect = o + 1;
        }
    }
    Ok(out)
}

/// The core invariant after a crash: the journal opens, its committed end covers every
/// acknowledged record, and reading from `from` yields exactly payload(o) for o in from..end.
pub fn check_acked(dir: &Path, opts: Options, from: u64, acked_end: u64) -> Journal {
    let j = Journal::open(dir, opts).unwrap();
    let end = j.committed_offset();
    assert!(
        end >= acked_end,
        "acknowledged records lost: end {end} < acked {acked_end}"
    );
    let mut r = j.reader(from).unwrap();
    let got = read_checked(&mut r).unwrap();
    assert_eq!(
        got.len() as u64,
        end - from,
        "records missing between {from} and {end}"
    );
    j
}

/// Appends `n` records one batch at a time, returning the acknowledged end or the first error.
pub fn append_n(j: &Journal, n: u64, batch: u64) -> Result<u64, Error> {
    let mut next = j.committed_offset();
    let target = next + n;
    while next < target {
        let k = batch.min(target - next);
        let recs: Vec<Vec<u8>> = (next..next + k).map(payload).collect();
        let r = j.append_batch(&recs)?;
        assert_eq!(r, next..next + k);
        next += k;
    }
    Ok(next)
}

pub fn segment_files(fs: &dyn Vfs, dir: &Path) -> Vec<String> {
    fs.list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".seg"))
        .collect()
}
