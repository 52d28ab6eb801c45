//! The checker on two fixture crates (`tests/fixtures/`): one with a module cycle at its root and
//! one inside a module directory, reported exactly, and the same crate without them, clean.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

/// Runs the `modgraph` binary from the fixtures directory (so reported paths are relative).
fn modgraph(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_modgraph"))
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap() + &String::from_utf8(out.stderr).unwrap();
    (out.status.code(), text)
}

#[test]
fn a_cycle_is_reported_with_one_reference_per_edge() {
    let (code, text) = modgraph(&["cyclic"]);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(
        text,
        "modgraph: module cycle in cyclic among the children of `crate`: block -> read -> block
    block -> read: cyclic/src/block.rs:8  crate::read::slice_of
    read -> block: cyclic/src/read.rs:3  crate::Block
modgraph: module cycle in cyclic among the children of `crate::codec`: body -> frame -> body
    body -> frame: cyclic/src/codec/body.rs:4  super::frame::start
    frame -> body: cyclic/src/codec/frame.rs:2  super::body::KIND
modgraph: 1 crates, 7 modules: 2 cycles, 0 allowed, 0 stale allowlist entries
"
    );
}

#[test]
fn an_acyclic_crate_passes() {
    let (code, text) = modgraph(&["acyclic"]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(
        text,
        "modgraph: 1 crates, 8 modules: 0 cycles, 0 allowed, 0 stale allowlist entries\n"
    );
}

#[test]
fn an_allowlisted_edge_lets_exactly_its_cycle_stand() {
    let dir = tempfile_dir();
    let allow = dir.join("allow.txt");
    std::fs::write(
        &allow,
        "# the lead moves `slice_of` down, then empties this\ncyclic crate: read -> block\n",
    )
    .unwrap();
    let (code, text) = modgraph(&["--allow", allow.to_str().unwrap(), "cyclic"]);
    // The root cycle is allowed; the one in `codec` still fails the check.
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("allowed by ") && text.contains(": cyclic crate: read -> block -> read\n"),
        "{text}"
    );
    assert!(text.contains("children of `crate::codec`: body -> frame -> body"));
    assert!(!text.contains("children of `crate`: "), "{text}");

    // On the acyclic crate the same entry closes no cycle: stale, and the check fails.
    let (code, text) = modgraph(&["--allow", allow.to_str().unwrap(), "acyclic"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("no longer closes a cycle; delete the entry"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_usage_exits_2() {
    let (code, _) = modgraph(&[]);
    assert_eq!(code, Some(2));
    let (code, text) = modgraph(&["no-such-dir/src/lib.rs"]);
    assert_eq!(code, Some(2), "{text}");
}

/// A fresh directory under the target directory's temp space (no dependency for one file).
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("modgraph-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
