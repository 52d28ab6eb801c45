#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Crash matrix rows that need real processes: `kill -9` of a writer (rows 1 and 2), of a
//! subscriber (row 3), and one writer with several reader processes during writes and segment
//! deletion (row 14). The children are this test binary re-executed with `JOURNAL_CHILD` set, so
//! the binary has its own `main` (`harness = false`): with the variable set it is a child, without
//! it it runs the tests below and prints libtest-style results.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{payload, read_checked};
use journal::vfs::RealFs;
use journal::{Batch, Durability, Error, Journal, Options, Start, Subscriber};

const CHILD_ENV: &str = "JOURNAL_CHILD";

fn durability(name: &str) -> Durability {
    match name {
        "buffered" => Durability::Buffered,
        "always" => Durability::Always,
        _ => Durability::default(),
    }
}

/// `mode` is `buffered`, `group` or `always`, optionally with `+lz4`.
fn opts(mode: &str, segment_size_bytes: u64) -> Options {
    let (name, lz4) = match mode.strip_suffix("+lz4") {
        Some(name) => (name, true),
        None => (mode, false),
    };
    Options {
        durability: durability(name),
        segment_size_bytes,
        lz4,
        ..Options::default()
    }
}

fn spawn(role: &str, dir: &Path, mode: &str, segment_size_bytes: u64, extra: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, role)
        .env("JOURNAL_DIR", dir)
        .env("JOURNAL_MODE", mode)
        .env("JOURNAL_SEGMENT", segment_size_bytes.to_string())
        .env("JOURNAL_EXTRA", extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Entry point of the child processes.
fn child_main(role: &str) {
    let dir = std::env::var("JOURNAL_DIR").unwrap();
    let mode = std::env::var("JOURNAL_MODE").unwrap();
    let segment: u64 = std::env::var("JOURNAL_SEGMENT").unwrap().parse().unwrap();
    let extra = std::env::var("JOURNAL_EXTRA").unwrap();
    // A child must never outlive a broken parent for long: it gives up after a minute.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(60));
        std::process::exit(3);
    });
    match role {
        "writer" => child_writer(Path::new(&dir), &mode, segment),
        "subscriber" => child_subscriber(Path::new(&dir), &extra),
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

/// Opens the writer, waiting out a lock held by a forked copy: another test thread of the parent
/// may fork a child while it holds the lock, and the copy keeps it until its exec. A restarting
/// writer waits the same way.
fn open_retry(dir: &Path, o: Options) -> Journal {
    let mut opened = Journal::open(dir, o.clone());
    for _ in 0..500 {
        if !matches!(opened, Err(Error::Locked)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        opened = Journal::open(dir, o.clone());
    }
    opened.unwrap()
}

/// Appends records whose payload is a function of their offset, pipelined two tickets deep,
/// printing each acknowledged end offset. Runs until killed.
fn child_writer(dir: &Path, mode: &str, segment: u64) {
    let j = open_retry(dir, opts(mode, segment));
    let mut next = j.committed_offset();
    let mut in_flight = std::collections::VecDeque::new();
    for i in 0..10_000_000u64 {
        let n = 1 + (next + i) % 9;
        let recs: Vec<Vec<u8>> = (next..next + n).map(payload).collect();
        let t = j.submit(&recs).unwrap();
        assert_eq!(t.range(), next..next + n);
        next += n;
        in_flight.push_back(t);
        if in_flight.len() > 2 {
            let end = in_flight.pop_front().unwrap().wait().unwrap().end;
            println!("{end}");
        }
    }
}

/// Reads as subscriber `name`, checking every payload, printing `read <end>` before and
/// `commit <end>` after each checkpoint commit. Exits when it reaches `stop` (if given).
fn child_subscriber(dir: &Path, extra: &str) {
    let mut parts = extra.split(':');
    let name = parts.next().unwrap();
    let stop: u64 = parts.next().map_or(u64::MAX, |s| s.parse().unwrap());
    let mut s = Subscriber::open(Arc::new(RealFs), dir, name).unwrap();
    println!("start {}", s.position());
    let mut b = Batch::new();
    let mut next = s.position();
    for _ in 0..100_000_000u64 {
        if next >= stop {
            return;
        }
        if s.next_batch(&mut b).unwrap() == 0 {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        // Process in chunks of 50 records, committing after each: many kill points.
        for (o, p) in b.iter() {
            assert_eq!(o, next, "subscriber {name} skipped or repeated");
            assert_eq!(p, payload(o).as_slice(), "corrupt payload at {o}");
            next += 1;
            if next.is_multiple_of(50) || next == s.position() {
                println!("read {next}");
                s.commit_offset(next).unwrap();
                println!("commit {next}");
            }
        }
    }
}

/// Reads `lines_min` lines from the child, waits a little, kills it with SIGKILL, and returns
/// every line it printed before dying.
fn run_and_kill(mut child: Child, lines_min: usize, delay_us: u64) -> Vec<String> {
    let stdout = child.stdout.take().unwrap();
    let mut reader = BufReader::new(stdout);
    let mut lines = Vec::new();
    let mut line = String::new();
    while lines.len() < lines_min {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        lines.push(line.trim().to_string());
    }
    std::thread::sleep(Duration::from_micros(delay_us));
    child.kill().unwrap();
    child.wait().unwrap();
    for l in reader.lines() {
        lines.push(l.unwrap());
    }
    lines
}

fn writer_kill_loop(mode: &str, segment: u64, iterations: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut acked = 0u64;
    for it in 0..iterations {
        let child = spawn("writer", dir.path(), mode, segment, "");
        let lines = run_and_kill(child, 1 + (it * 37 % 60) as usize, it * 331 % 3000);
        for l in &lines {
            if let Ok(end) = l.parse::<u64>() {
                acked = acked.max(end);
            }
        }
        let j = open_retry(dir.path(), opts(mode, segment));
        let end = j.committed_offset();
        assert!(
            end >= acked,
            "{mode} iteration {it}: acked {acked} but only {end} recovered"
        );
        let got = read_checked(&mut j.reader(0).unwrap()).unwrap();
        assert_eq!(
            got.len() as u64,
            end,
            "{mode} iteration {it}: records missing"
        );
    }
    assert!(acked > 0);
}

/// Row 1: writer `kill -9` at random times, many iterations, Buffered and GroupCommit.
fn row01_writer_kill9_buffered_and_group() {
    writer_kill_loop("buffered", 1 << 20, 12);
    writer_kill_loop("group", 1 << 20, 12);
}

/// Row 2: `kill -9` during segment roll and preallocation (tiny segments roll constantly).
fn row02_writer_kill9_during_roll() {
    writer_kill_loop("group", 4096, 12);
    writer_kill_loop("buffered+lz4", 4096, 8);
}

/// Row 3: a subscriber killed between read and checkpoint, and during the checkpoint write:
/// it resumes at a checkpoint never past what it read and never before what it committed.
fn row03_subscriber_kill9() {
    let dir = tempfile::tempdir().unwrap();
    let total = 20_000u64;
    {
        let j = open_retry(dir.path(), opts("group", 1 << 16));
        j.add_subscriber("s", Start::Begin).unwrap();
        common::append_n(&j, total, 13).unwrap();
        j.close().unwrap();
    }
    let mut committed = 0u64;
    let mut read_end = 0u64;
    for it in 0..25u64 {
        let child = spawn(
            "subscriber",
            dir.path(),
            "group",
            1 << 16,
            &format!("s:{total}"),
        );
        let lines = run_and_kill(child, 2 + (it * 7 % 20) as usize, it * 97 % 700);
        for l in &lines {
            // The test harness prints its own lines ("running 1 test"): skip anything else.
            let Some((kind, v)) = l.split_once(' ') else {
                continue;
            };
            let Ok(v) = v.parse::<u64>() else { continue };
            match kind {
                "start" => {
                    assert!(
                        v >= committed,
                        "resumed at {v} before committed {committed}"
                    );
                    assert!(
                        v <= read_end.max(committed),
                        "resumed at {v} past read {read_end}"
                    );
                }
                "read" => read_end = read_end.max(v),
                "commit" => committed = committed.max(v),
                _ => {}
            }
        }
        let j = open_retry(dir.path(), opts("group", 1 << 16));
        let ckpt = j.subscriber("s").unwrap().checkpoint();
        assert!(
            ckpt >= committed && ckpt <= read_end.max(committed),
            "checkpoint {ckpt}"
        );
        drop(j);
        if ckpt == total {
            break;
        }
    }
    // A last run without a kill reads the rest, so the whole log was consumed with no gap.
    let mut last = spawn(
        "subscriber",
        dir.path(),
        "group",
        1 << 16,
        &format!("s:{total}"),
    );
    let out = last.stdout.take().unwrap();
    let lines: Vec<String> = BufReader::new(out).lines().map(|l| l.unwrap()).collect();
    assert!(last.wait().unwrap().success());
    let start: u64 = lines
        .iter()
        .find_map(|l| l.strip_prefix("start ")?.parse().ok())
        .unwrap();
    assert!(start >= committed && start <= read_end.max(committed));
    let j = open_retry(dir.path(), opts("group", 1 << 16));
    assert_eq!(j.subscriber("s").unwrap().checkpoint(), total);
}

/// Row 14: one writer and several reader processes during writes and segment deletion.
fn row14_writer_and_reader_processes_with_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let total = 30_000u64;
    let j = Arc::new(Journal::open(dir.path(), opts("group", 8192)).unwrap());
    j.add_subscriber("a", Start::Begin).unwrap();
    j.add_subscriber("b", Start::Begin).unwrap();
    let children: Vec<Child> = ["a", "b"]
        .iter()
        .map(|n| {
            spawn(
                "subscriber",
                dir.path(),
                "group",
                8192,
                &format!("{n}:{total}"),
            )
        })
        .collect();
    let writer = {
        let j = j.clone();
        std::thread::spawn(move || common::append_n(&j, total, 17).unwrap())
    };
    assert_eq!(writer.join().unwrap(), total);
    for mut c in children {
        let out = c.stdout.take().unwrap();
        let last = BufReader::new(out).lines().map(|l| l.unwrap()).last();
        assert!(c.wait().unwrap().success(), "reader process failed");
        assert_eq!(last.as_deref(), Some(format!("commit {total}").as_str()));
    }
    // Both subscribers passed everything: the writer may now delete all sealed segments.
    let purged = j.purge().unwrap();
    let earliest = j.earliest_offset().unwrap();
    assert!(earliest > 0, "no segment was deleted ({purged:?})");
    let got = read_checked(&mut j.reader(earliest).unwrap()).unwrap();
    assert_eq!(got.len() as u64, total - earliest);
    assert!(matches!(j.reader(0), Err(Error::NotRetained { .. })));
}

/// The tests of this file, run in order; a name given on the command line selects by substring.
fn main() {
    if let Ok(role) = std::env::var(CHILD_ENV) {
        child_main(&role);
        return;
    }
    let tests: [(&str, fn()); 4] = [
        (
            "row01_writer_kill9_buffered_and_group",
            row01_writer_kill9_buffered_and_group,
        ),
        (
            "row02_writer_kill9_during_roll",
            row02_writer_kill9_during_roll,
        ),
        ("row03_subscriber_kill9", row03_subscriber_kill9),
        (
            "row14_writer_and_reader_processes_with_deletion",
            row14_writer_and_reader_processes_with_deletion,
        ),
    ];
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let selected = tests.iter().filter(|(name, _)| {
        filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
    });
    let (mut passed, mut failed) = (0, 0);
    for (name, test) in selected {
        let ok = std::panic::catch_unwind(test).is_ok();
        println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
    }
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!("\ntest result: {verdict}. {passed} passed; {failed} failed; 0 ignored");
    if failed > 0 {
        std::process::exit(101);
    }
}
