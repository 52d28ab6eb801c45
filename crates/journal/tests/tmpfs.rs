#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Row 9 on a real full file system: a small tmpfs, mounted where mounting is allowed (root in a
//! container that permits it). Elsewhere the test says so and returns; `faults.rs` covers ENOSPC
//! everywhere with the simulated file system.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{append_n, read_checked};
use journal::{Batch, Durability, Error, Journal, Options, Start};

struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn mount_tmpfs(at: &Path, size: &str) -> Option<Mount> {
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(at)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then(|| Mount(at.to_path_buf()))
}

#[test]
fn row09_enospc_on_a_real_small_tmpfs() {
    let base = tempfile::tempdir().unwrap();
    let Some(_mount) = mount_tmpfs(base.path(), "640k") else {
        eprintln!("row09 tmpfs: mounting is not allowed here; covered by faults.rs instead");
        return;
    };
    let dir = base.path().join("j");
    let opts = Options {
        durability: Durability::default(),
        segment_size_bytes: 64 << 10,
        ..Options::default()
    };
    let j = Journal::open(&dir, opts).unwrap();
    j.add_subscriber("s", Start::Begin).unwrap();
    let mut acked = 0u64;
    let mut full = false;
    for _ in 0..10_000 {
        match append_n(&j, 50, 10) {
            Ok(end) => acked = end,
            Err(Error::NoSpace) => {
                full = true;
                break;
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert!(full, "the tmpfs never filled up");
    assert!(!j.is_poisoned());
    assert!(j.committed_offset() >= acked);
    // Readers and checkpoint commits work on the full disk.
    let mut s = j.subscriber("s").unwrap();
    let mut b = Batch::new();
    let mut next = 0u64;
    while s.next_batch(&mut b).unwrap() > 0 {
        for (o, p) in b.iter() {
            assert_eq!((o, p), (next, common::payload(next).as_slice()));
            next += 1;
        }
    }
    assert_eq!(next, j.committed_offset());
    s.commit().unwrap();
    // Space comes back once the subscriber has passed the old segments; appends resume.
    let purged = j.purge().unwrap();
    assert!(purged.segments_deleted > 0);
    let end = append_n(&j, 100, 10).unwrap();
    assert_eq!(end, next + 100);
    let got = read_checked(&mut j.reader(j.earliest_offset().unwrap()).unwrap()).unwrap();
    assert_eq!(*got.last().unwrap(), end - 1);
    drop(s);
    drop(j);
}
