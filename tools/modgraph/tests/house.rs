//! The documents a newcomer reads first stay maps, not logs: the architecture map fits in ten
//! minutes, every crate says what it can do in its own `STATUS.md`, the licence the manifests
//! name is in the repository, and no document points into a tracker or a work session that a
//! reader of the repository cannot see.

use std::fs;
use std::path::{Path, PathBuf};

/// What "readable in ten minutes" means for `ARCHITECTURE.md`.
const ARCHITECTURE_WORDS_MAX: usize = 1_200;
/// Directories walked for Markdown files, and how deep.
const DOC_DEPTH_MAX: usize = 6;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn markdown_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > DOC_DEPTH_MAX {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || matches!(name.as_str(), "target" | "node_modules" | "dist") {
            continue;
        }
        if path.is_dir() {
            markdown_files(&path, depth + 1, out);
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// A reference to a tracker issue or a work session: "issue 29", "issue #29", "session 19".
fn tracker_reference(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    ["issue ", "issue #", "session "].iter().any(|word| {
        lower.match_indices(word).any(|(at, _)| {
            let before_ok = at == 0 || !lower.as_bytes()[at - 1].is_ascii_alphanumeric();
            let rest = &lower[at + word.len()..];
            before_ok && rest.starts_with(|c: char| c.is_ascii_digit())
        })
    })
}

#[test]
fn the_architecture_map_reads_in_ten_minutes() {
    let text = fs::read_to_string(repo().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let words = text.split_whitespace().count();
    assert!(
        words <= ARCHITECTURE_WORDS_MAX,
        "ARCHITECTURE.md has {words} words, more than {ARCHITECTURE_WORDS_MAX}: keep it a map"
    );
    for heading in ["## Entry points", "## Crates", "## Where to add"] {
        assert!(text.contains(heading), "ARCHITECTURE.md lacks {heading:?}");
    }
}

#[test]
fn every_crate_has_its_status_table_and_a_place_in_the_map() {
    let map = fs::read_to_string(repo().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let crates = fs::read_dir(repo().join("crates")).expect("crates/");
    let mut seen = 0;
    for entry in crates.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !entry.path().join("Cargo.toml").is_file() {
            continue;
        }
        seen += 1;
        let status = entry.path().join("STATUS.md");
        let text = fs::read_to_string(&status).unwrap_or_default();
        assert!(
            text.contains("\n|---"),
            "crates/{name}/STATUS.md has no table"
        );
        assert!(
            map.contains(&format!("`{name}`")),
            "ARCHITECTURE.md does not name `{name}`"
        );
    }
    assert!(seen > 10, "found only {seen} crates under crates/");
}

#[test]
fn the_licence_named_in_the_manifest_is_in_the_repository() {
    let manifest = fs::read_to_string(repo().join("Cargo.toml")).expect("Cargo.toml");
    let licence = fs::read_to_string(repo().join("LICENSE")).expect("LICENSE");
    let named = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("license = "))
        .expect("a license in the workspace manifest")
        .trim_matches('"');
    let first_word = named.split(['-', ' ']).next().unwrap_or(named);
    assert!(
        licence.contains(first_word),
        "LICENSE does not read as {named}"
    );
}

#[test]
fn no_document_points_into_a_tracker_or_a_session() {
    let mut files = Vec::new();
    markdown_files(&repo(), 0, &mut files);
    assert!(
        files.len() > 20,
        "found only {} Markdown files",
        files.len()
    );
    let mut found = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if tracker_reference(line) {
                found.push(format!("{}:{}: {line}", file.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "documents naming issues or sessions:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_tracker_reference_check_can_fail() {
    assert!(tracker_reference("fixed in issue 29"));
    assert!(tracker_reference("Session 19: figures"));
    assert!(tracker_reference("see issue #4"));
    assert!(!tracker_reference("no tissue 9 here"));
    assert!(!tracker_reference("the session store"));
}
