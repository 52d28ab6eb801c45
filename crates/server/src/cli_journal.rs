//! `strata journal …`: inspect, verify, repair and benchmark a journal directory, and manage its
//! subscribers. Exit codes: 0 ok, 1 runtime failure or damage found, 2 bad usage or input.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand, ValueEnum};
use journal::tools;
use journal::vfs::{RealFs, Vfs};
use journal::{Batch, Durability, Error, Journal, Options, Start};
use serde_json::json;

#[derive(Subcommand)]
pub enum JournalCommand {
    /// Show segments, offsets, subscribers and their lag.
    Inspect {
        /// The journal directory.
        dir: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Add, remove, rewind or list named subscribers.
    Subscribers {
        /// The journal directory.
        dir: PathBuf,
        #[command(subcommand)]
        action: SubscriberAction,
    },
    /// Walk every frame and check its CRC; exit 1 if any acknowledged data is damaged.
    Verify {
        /// The journal directory.
        dir: PathBuf,
    },
    /// Move damaged ranges to quarantine/ and mark them so readers pass them; reports counts.
    /// Never moves a subscriber's checkpoint. Refuses to run while a writer holds the lock.
    Repair {
        /// The journal directory.
        dir: PathBuf,
    },
    /// Measure append and read throughput; prints one JSON line.
    Bench(BenchArgs),
}

#[derive(Subcommand)]
pub enum SubscriberAction {
    /// List subscribers with their checkpoints and lag.
    List,
    /// Add a subscriber.
    Add {
        /// Subscriber name: [A-Za-z0-9_.-], 1-64 bytes.
        name: String,
        /// Where it starts: `begin`, `end`, `copy:<other>`, or an offset.
        #[arg(long, default_value = "end")]
        start: String,
    },
    /// Remove a subscriber (its retained segments become deletable).
    Remove {
        /// Subscriber name.
        name: String,
    },
    /// Move a subscriber's checkpoint to any retained offset.
    Rewind {
        /// Subscriber name.
        name: String,
        /// The new checkpoint (next offset it reads).
        offset: u64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum BenchMode {
    Buffered,
    Group,
    Always,
}

#[derive(Args)]
pub struct BenchArgs {
    /// Directory for the benchmark journal (default: a fresh one under the temp dir, removed after).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Records to append.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Payload size of each record in bytes.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Durability mode: group is GroupCommit with 128 KiB / 2 ms.
    #[arg(long, value_enum, default_value = "group")]
    mode: BenchMode,
    /// Compress frames with LZ4 (the payload is then compressible text instead of random bytes).
    #[arg(long)]
    lz4: bool,
    /// Concurrent appender threads.
    #[arg(long, default_value_t = 1)]
    appenders: u64,
    /// Records per append call (one batch API call).
    #[arg(long, default_value_t = 1024)]
    batch: u64,
    /// Segment size in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    segment_size: u64,
}

/// Prints a line to stdout; a closed pipe (`strata journal inspect | head`) is not an error.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// Unacknowledged batches one appender keeps in flight before waiting for the oldest.
const TICKETS_IN_FLIGHT_MAX: usize = 32;

pub fn run(cmd: JournalCommand) -> ExitCode {
    let fs: Arc<dyn Vfs> = Arc::new(RealFs);
    let resolved = |dir: PathBuf| -> Result<PathBuf, ExitCode> {
        journal_dir(&dir).map_err(|message| {
            eprintln!("strata journal: {message}");
            ExitCode::from(2)
        })
    };
    let result = match cmd {
        JournalCommand::Inspect { dir, json } => match resolved(dir) {
            Ok(dir) => inspect(&*fs, &dir, json),
            Err(code) => return code,
        },
        JournalCommand::Subscribers { dir, action } => match resolved(dir) {
            Ok(dir) => subscribers(&*fs, &dir, action),
            Err(code) => return code,
        },
        JournalCommand::Verify { dir } => match resolved(dir) {
            Ok(dir) => verify(&*fs, &dir),
            Err(code) => return code,
        },
        JournalCommand::Repair { dir } => match resolved(dir) {
            Ok(dir) => repair(&*fs, &dir),
            Err(code) => return code,
        },
        JournalCommand::Bench(args) => bench(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("strata journal: {e}");
            ExitCode::from(exit_code(&e))
        }
    }
}

/// Whether `dir` holds a journal: a segment file (`<20 digits>.seg`) or the `committed` file.
fn is_journal(dir: &Path) -> bool {
    if dir.join("committed").is_file() {
        return true;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.strip_suffix(".seg")
            .is_some_and(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// The journal a command means: `dir` itself, or — given a store's data directory (the natural
/// guess, `strata journal inspect strata-data`) — its write-ahead log `dir/wal`, said on stderr.
/// Anything else is an error that says where journals are.
fn journal_dir(dir: &Path) -> Result<PathBuf, String> {
    if !dir.is_dir() {
        return Err(format!("{}: no such directory", dir.display()));
    }
    if is_journal(dir) {
        return Ok(dir.to_path_buf());
    }
    let wal = dir.join("wal");
    if wal.is_dir() && is_journal(&wal) {
        eprintln!(
            "strata journal: {} is a store's data directory; using its write-ahead log {}",
            dir.display(),
            wal.display()
        );
        return Ok(wal);
    }
    Err(format!(
        "{} holds no journal (no segment files and no `committed` file); a store's \
         write-ahead log is the `wal` directory inside its data directory, e.g. strata-data/wal",
        dir.display()
    ))
}

fn exit_code(e: &Error) -> u8 {
    match e {
        Error::InvalidName(_)
        | Error::InvalidOptions(_)
        | Error::NoSuchSubscriber(_)
        | Error::SubscriberExists(_)
        | Error::NotRetained { .. } => 2,
        Error::Io(io) if io.kind() == std::io::ErrorKind::NotFound => 2,
        _ => 1,
    }
}

fn require_dir(dir: &Path) -> Result<(), Error> {
    if !dir.is_dir() {
        return Err(Error::InvalidOptions("not a journal directory"));
    }
    Ok(())
}

fn inspect(fs: &dyn Vfs, dir: &Path, as_json: bool) -> Result<ExitCode, Error> {
    require_dir(dir)?;
    let i = tools::inspect(fs, dir)?;
    let committed = i.committed_offset.unwrap_or(i.end_offset);
    if as_json {
        let segments: Vec<_> = i
            .segments
            .iter()
            .map(|s| {
                json!({"base_offset": s.base_offset, "end_offset": s.end_offset,
                "size_bytes": s.size_bytes, "used_bytes": s.used_bytes, "frames": s.frames,
                "records": s.records, "gap_records": s.gap_records})
            })
            .collect();
        let subs: Vec<_> = i
            .subscribers
            .iter()
            .map(|s| {
                json!({"name": s.name, "checkpoint": s.offset,
                "lag_records": committed.saturating_sub(s.offset), "fell_back": s.fell_back})
            })
            .collect();
        let damage: Vec<_> = i
            .damage
            .iter()
            .map(|d| {
                json!({"segment": d.segment, "byte_offset": d.byte_offset, "reason": d.reason,
                "torn_tail": d.torn_tail})
            })
            .collect();
        let v = json!({"dir": dir.display().to_string(), "earliest_offset": i.earliest_offset,
            "committed_offset": i.committed_offset, "end_offset": i.end_offset,
            "segments": segments, "subscribers": subs, "damage": damage});
        say!("{v}");
    } else {
        say!("journal {}", dir.display());
        say!("  earliest offset  {}", i.earliest_offset);
        say!("  committed offset {}", committed);
        say!("  segments ({}):", i.segments.len());
        for s in &i.segments {
            say!(
                "    {:>20}..{:<20} {:>8} frames {:>10} records {:>12} / {} bytes used",
                s.base_offset,
                s.end_offset,
                s.frames,
                s.records,
                s.used_bytes,
                s.size_bytes
            );
        }
        say!("  subscribers ({}):", i.subscribers.len());
        for s in &i.subscribers {
            let note = if s.fell_back {
                " (checkpoint damaged: fell back to earliest)"
            } else {
                ""
            };
            let lag = committed.saturating_sub(s.offset);
            say!(
                "    {:<24} checkpoint {:>20} lag {:>12}{note}",
                s.name,
                s.offset,
                lag
            );
        }
        for d in &i.damage {
            let kind = if d.torn_tail { "torn tail" } else { "DAMAGE" };
            say!(
                "  {kind}: segment {} byte {}: {}",
                d.segment,
                d.byte_offset,
                d.reason
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_start(s: &str) -> Result<Start, Error> {
    match s {
        "begin" => Ok(Start::Begin),
        "end" => Ok(Start::End),
        _ => {
            if let Some(other) = s.strip_prefix("copy:") {
                return Ok(Start::CopyOf(other.to_string()));
            }
            s.parse()
                .map(Start::At)
                .map_err(|_| Error::InvalidOptions("--start: begin|end|copy:<name>|<offset>"))
        }
    }
}

fn subscribers(fs: &dyn Vfs, dir: &Path, action: SubscriberAction) -> Result<ExitCode, Error> {
    require_dir(dir)?;
    match action {
        SubscriberAction::List => return inspect(fs, dir, false),
        SubscriberAction::Add { name, start } => {
            let offset = tools::add_subscriber(fs, dir, &name, &parse_start(&start)?)?;
            say!("added subscriber {name} at offset {offset}");
        }
        SubscriberAction::Remove { name } => {
            tools::remove_subscriber(fs, dir, &name)?;
            say!("removed subscriber {name}");
        }
        SubscriberAction::Rewind { name, offset } => {
            tools::rewind_subscriber(fs, dir, &name, offset)?;
            say!("subscriber {name} now at offset {offset}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn verify(fs: &dyn Vfs, dir: &Path) -> Result<ExitCode, Error> {
    require_dir(dir)?;
    let i = tools::inspect(fs, dir)?;
    let records: u64 = i.segments.iter().map(|s| s.records).sum();
    let frames: u64 = i.segments.iter().map(|s| s.frames).sum();
    for d in &i.damage {
        let kind = if d.torn_tail {
            "torn tail (truncated on next open)"
        } else {
            "DAMAGE"
        };
        say!(
            "{kind}: segment {} byte {}: {}",
            d.segment,
            d.byte_offset,
            d.reason
        );
    }
    let damaged = i.is_damaged();
    say!(
        "{}: {} segments, {frames} frames, {records} records, offsets {}..{}",
        if damaged { "damaged" } else { "ok" },
        i.segments.len(),
        i.earliest_offset,
        i.end_offset
    );
    Ok(if damaged {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn repair(fs: &dyn Vfs, dir: &Path) -> Result<ExitCode, Error> {
    require_dir(dir)?;
    let r = tools::repair(fs, dir)?;
    say!(
        "repair: {} ranges quarantined, {} records lost, {} bytes moved to quarantine/, \
         {} missing segments replaced, {} places left unrepaired",
        r.ranges_quarantined,
        r.records_quarantined,
        r.bytes_quarantined,
        r.segments_created,
        r.unrepaired.len()
    );
    for d in &r.unrepaired {
        say!(
            "  unrepaired: segment {} byte {}: {}",
            d.segment,
            d.byte_offset,
            d.reason
        );
    }
    Ok(if r.unrepaired.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Fills `buf` with a record: random bytes, or (for LZ4 runs) metric-like text.
fn fill_payload(buf: &mut [u8], i: u64, compressible: bool, rng: &mut u64) {
    if compressible {
        let text = format!(
            "cpu.user|ST[host:web-{:03},dc:eu-west] value={} ",
            i % 500,
            i % 97
        );
        for (k, b) in buf.iter_mut().enumerate() {
            *b = text.as_bytes()[k % text.len()];
        }
        return;
    }
    for chunk in buf.chunks_mut(8) {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        let bytes = rng.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

fn bench(a: &BenchArgs) -> Result<ExitCode, Error> {
    if a.records == 0 || a.appenders == 0 || a.batch == 0 || a.appenders > 1024 {
        return Err(Error::InvalidOptions(
            "--records, --appenders (<= 1024), --batch must be > 0",
        ));
    }
    let (dir, remove_after) = match &a.dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("strata-journal-bench-{}", std::process::id())),
            true,
        ),
    };
    if dir.exists()
        && std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(Error::InvalidOptions("--dir must be empty or absent"));
    }
    let durability = match a.mode {
        BenchMode::Buffered => Durability::Buffered,
        BenchMode::Group => Durability::default(),
        BenchMode::Always => Durability::Always,
    };
    let opts = Options {
        durability,
        lz4: a.lz4,
        segment_size_bytes: a.segment_size,
        ..Options::default()
    };
    let result = bench_in(&dir, a, opts);
    if remove_after {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let line = result?;
    say!("{line}");
    Ok(ExitCode::SUCCESS)
}

fn bench_in(dir: &Path, a: &BenchArgs, opts: Options) -> Result<serde_json::Value, Error> {
    let journal = Arc::new(Journal::open(dir, opts)?);
    journal.add_subscriber("bench", Start::Begin)?;
    let per = a.records / a.appenders;
    // Payloads are generated before the clock starts: the benchmark measures the journal.
    let payloads: Vec<(u64, Vec<u8>)> = (0..a.appenders)
        .map(|t| {
            let last = t + 1 == a.appenders;
            let count = if last {
                a.records - per * (a.appenders - 1)
            } else {
                per
            };
            (count, make_payloads(t, count, a.size, a.lz4))
        })
        .collect();
    let started = Instant::now();
    let mut handles = Vec::new();
    for (count, data) in payloads {
        let j = journal.clone();
        let (size, batch) = (a.size, a.batch);
        handles.push(std::thread::spawn(move || {
            append_worker(&j, &data, count, size, batch)
        }));
    }
    for h in handles {
        h.join().map_err(|_| Error::Poisoned)??;
    }
    journal.flush()?;
    let write_s = started.elapsed().as_secs_f64();
    let (read_records, read_s) = read_all(&journal)?;
    if read_records != a.records {
        return Err(Error::Corrupt {
            segment: 0,
            offset: 0,
            reason: format!("read {read_records} of {} records", a.records),
        });
    }
    let inspection = tools::inspect(&RealFs, dir)?;
    let used: u64 = inspection.segments.iter().map(|s| s.used_bytes + 64).sum();
    let allocated = allocated_bytes(dir);
    let payload_bytes = a.records * a.size as u64;
    Ok(json!({
        "records": a.records, "size_bytes": a.size,
        "mode": match journal.options().durability { Durability::Buffered => "buffered", Durability::Always => "always", _ => "group" },
        "lz4": a.lz4, "appenders": a.appenders, "batch_records": a.batch,
        "write_seconds": write_s, "write_records_per_sec": (a.records as f64 / write_s).round(),
        "read_seconds": read_s, "read_records_per_sec": (read_records as f64 / read_s).round(),
        "payload_bytes": payload_bytes, "bytes_on_disk": used,
        "allocated_bytes": allocated,
        "compression_ratio": payload_bytes as f64 / used.max(1) as f64,
    }))
}

fn make_payloads(t: u64, count: u64, size: usize, compressible: bool) -> Vec<u8> {
    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
    let mut data = vec![0u8; count as usize * size];
    if size > 0 {
        for (i, r) in data.chunks_mut(size).enumerate() {
            fill_payload(r, i as u64, compressible, &mut rng);
        }
    }
    data
}

fn append_worker(
    j: &Journal,
    data: &[u8],
    count: u64,
    size: usize,
    batch: u64,
) -> Result<(), Error> {
    let mut in_flight = std::collections::VecDeque::with_capacity(TICKETS_IN_FLIGHT_MAX + 1);
    let mut done = 0u64;
    let mut records: Vec<&[u8]> = Vec::with_capacity(batch as usize);
    let batches_max = count / batch + 2;
    for _ in 0..batches_max {
        if done >= count {
            break;
        }
        let n = batch.min(count - done) as usize;
        records.clear();
        let from = done as usize * size;
        records.extend((0..n).map(|k| &data[from + k * size..from + (k + 1) * size]));
        in_flight.push_back(j.submit(&records)?);
        if in_flight.len() > TICKETS_IN_FLIGHT_MAX {
            if let Some(oldest) = in_flight.pop_front() {
                oldest.wait()?;
            }
        }
        done += n as u64;
    }
    for t in in_flight {
        t.wait()?;
    }
    Ok(())
}

fn read_all(j: &Journal) -> Result<(u64, f64), Error> {
    let started = Instant::now();
    let mut sub = j.subscriber("bench")?;
    let mut batch = Batch::new();
    let mut records = 0u64;
    let mut checksum = 0u64;
    let deadline = Duration::from_secs(600);
    while started.elapsed() < deadline {
        if sub.next_batch(&mut batch)? == 0 {
            break;
        }
        for (_, p) in batch.iter() {
            records += 1;
            checksum =
                checksum.wrapping_add(p.len() as u64 + u64::from(p.first().copied().unwrap_or(0)));
        }
    }
    sub.commit()?;
    std::hint::black_box(checksum);
    Ok((records, started.elapsed().as_secs_f64()))
}

fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.blocks() * 512)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct TestCli {
        #[command(subcommand)]
        cmd: JournalCommand,
    }

    fn code(args: &[&str]) -> String {
        let cli = TestCli::try_parse_from(std::iter::once("journal").chain(args.iter().copied()));
        format!("{:?}", run(cli.unwrap().cmd))
    }

    fn exit(n: u8) -> String {
        format!("{:?}", ExitCode::from(n))
    }

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tmp(name: &str) -> Dir {
        let d =
            std::env::temp_dir().join(format!("strata-cli-journal-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Dir(d)
    }

    #[test]
    fn bench_inspect_subscribers_verify_repair() {
        let d = tmp("all");
        let p = d.0.to_str().unwrap();
        let bench = [
            "bench",
            "--dir",
            p,
            "--records",
            "3000",
            "--batch",
            "7",
            "--segment-size",
            "4096",
        ];
        assert_eq!(code(&bench), exit(0));
        assert_eq!(code(&["inspect", p]), exit(0));
        assert_eq!(code(&["inspect", p, "--json"]), exit(0));
        assert_eq!(
            code(&["subscribers", p, "add", "x", "--start", "begin"]),
            exit(0)
        );
        assert_eq!(code(&["subscribers", p, "add", "x"]), exit(2));
        assert_eq!(code(&["subscribers", p, "add", "../bad"]), exit(2));
        assert_eq!(code(&["subscribers", p, "rewind", "x", "2999"]), exit(0));
        assert_eq!(code(&["subscribers", p, "rewind", "x", "999999"]), exit(2));
        assert_eq!(
            code(&["subscribers", p, "add", "y", "--start", "copy:x"]),
            exit(0)
        );
        assert_eq!(code(&["subscribers", p, "remove", "x"]), exit(0));
        assert_eq!(code(&["subscribers", p, "remove", "x"]), exit(2));
        assert_eq!(code(&["subscribers", p, "list"]), exit(0));
        assert_eq!(code(&["verify", p]), exit(0));
        // Damage a payload byte in the first (sealed) segment: verify fails, repair fixes it.
        let seg = d.0.join("00000000000000000000.seg");
        let mut bytes = std::fs::read(&seg).unwrap();
        bytes[64 + 32 + 10] ^= 0x40;
        std::fs::write(&seg, &bytes).unwrap();
        assert_eq!(code(&["verify", p]), exit(1));
        assert_eq!(code(&["repair", p]), exit(0));
        assert_eq!(code(&["verify", p]), exit(0));
        assert!(d.0.join("quarantine").is_dir());
    }

    #[test]
    fn bad_input_exits_2() {
        let d = tmp("missing");
        let p = d.0.to_str().unwrap();
        assert_eq!(code(&["inspect", p]), exit(2));
        assert_eq!(code(&["verify", p]), exit(2));
        assert_eq!(code(&["bench", "--records", "0"]), exit(2));
    }
}
