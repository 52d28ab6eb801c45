//! `strata journal …` pointed where a user points it: at a store's data directory (the natural
//! guess) it uses the write-ahead log inside and says so; at a directory with no journal it
//! fails saying where journals are, instead of printing an empty journal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

fn strata(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .unwrap()
}

fn make_store(dir: &Path) {
    let opts = StoreOptions {
        background_flush: false,
        ..StoreOptions::default()
    };
    let store = Store::open(dir, opts).unwrap();
    let mut b = WriteBatch::new();
    let n = StreamKey::parse("cpu|ST[host:a]").unwrap();
    b.numeric(&n, 1_700_000_000_000, 1.0).unwrap();
    store.write(&b).unwrap();
    // Not closed: the record stays in the write-ahead log.
    drop(store);
}

#[test]
fn a_data_directory_means_its_write_ahead_log() {
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path());
    let dir = tmp.path().to_str().unwrap();
    let wal = tmp.path().join("wal");
    let out = strata(&["journal", "inspect", dir]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("is a store's data directory; using its write-ahead log")
            && stderr.contains(&wal.display().to_string()),
        "{stderr}"
    );
    assert!(
        stdout.starts_with(&format!("journal {}", wal.display())),
        "{stdout}"
    );
    assert!(stdout.contains("subscribers"), "{stdout}");
    let direct = strata(&["journal", "inspect", wal.to_str().unwrap()]);
    assert!(direct.status.success());
    assert_eq!(
        direct.stdout, out.stdout,
        "the same answer as naming wal/ itself"
    );
    assert!(
        direct.stderr.is_empty(),
        "no note when the journal is named"
    );

    let verify = strata(&["journal", "verify", dir]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
}

#[test]
fn a_directory_without_a_journal_says_where_to_look() {
    let tmp = tempfile::tempdir().unwrap();
    let out = strata(&["journal", "inspect", tmp.path().to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.contains("holds no journal") && stderr.contains("strata-data/wal"),
        "{stderr}"
    );
    let missing = tmp.path().join("nope");
    let out = strata(&["journal", "verify", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such directory"));
}
