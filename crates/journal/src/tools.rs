//! Operator tools behind `strata journal inspect | verify | repair`: a full CRC walk of every
//! segment, and a repair that moves damaged ranges to `quarantine/` and marks them with gap
//! frames so readers pass them knowingly. Repair never touches a checkpoint, so no subscriber is
//! moved past intact data it has not read.

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::{self, FrameHeader, FRAME_HEADER_SIZE_BYTES};
use crate::reader::read_committed_file;
use crate::segment::{self, Scanner, Segment, Step};
use crate::subscribers::{self, SubscriberInfo};
use crate::vfs::{self, OpenMode, VFile, Vfs};

/// One segment as the CRC walk found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentSummary {
    pub base_offset: u64,
    pub size_bytes: u64,
    pub frames: u64,
    pub records: u64,
    /// Offsets quarantined by an earlier repair (gap frames).
    pub gap_records: u64,
    /// Offset after the last valid frame.
    pub end_offset: u64,
    /// Bytes used by valid frames (header included).
    pub used_bytes: u64,
    /// Where the walk stopped early, if it did.
    pub damage: Option<Damage>,
}

/// A damaged place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub segment: u64,
    pub byte_offset: u64,
    pub reason: String,
    /// True for the unrecovered tail of the last segment past the committed offset: a crashed
    /// writer's torn write, which the next open truncates. Not damage to acknowledged data.
    pub torn_tail: bool,
}

/// Everything `inspect` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspection {
    pub segments: Vec<SegmentSummary>,
    pub earliest_offset: u64,
    /// From the `committed` file (None if missing or unreadable).
    pub committed_offset: Option<u64>,
    /// Offset after the last valid frame of the last segment.
    pub end_offset: u64,
    pub subscribers: Vec<SubscriberInfo>,
    /// Damage found (torn tails included, marked).
    pub damage: Vec<Damage>,
}

impl Inspection {
    /// Damage to acknowledged data (torn tails excluded).
    pub fn is_damaged(&self) -> bool {
        self.damage.iter().any(|d| !d.torn_tail)
    }
}

/// Walks every frame of every segment, checking CRCs, decoding bodies and the offset chain.
pub fn inspect(fs: &dyn Vfs, dir: &Path) -> Result<Inspection> {
    let bases = segment::list_segments(fs, dir)?;
    let committed = fs
        .open(&dir.join(format::COMMITTED_FILE), OpenMode::Read)
        .ok()
        .and_then(|f| read_committed_file(&*f).ok());
    let earliest = bases.first().copied().unwrap_or(0);
    let mut out = Inspection {
        segments: Vec::new(),
        earliest_offset: earliest,
        committed_offset: committed,
        end_offset: earliest,
        subscribers: subscribers::list(fs, dir, earliest)?,
        damage: Vec::new(),
    };
    let mut expected: Option<u64> = None;
    for (i, &base) in bases.iter().enumerate() {
        if let Some(e) = expected.filter(|&e| e != base) {
            out.damage.push(Damage {
                segment: base,
                byte_offset: 0,
                reason: format!("missing records {e}..{base}: no segment starts at {e}"),
                torn_tail: false,
            });
        }
        let last = i + 1 == bases.len();
        let summary = match segment::open_segment(fs, dir, base, OpenMode::Read) {
            Ok(seg) => walk_segment(seg, last, committed)?,
            Err(Error::Corrupt { reason, .. }) => {
                out.damage.push(Damage {
                    segment: base,
                    byte_offset: 0,
                    reason,
                    torn_tail: false,
                });
                expected = None;
                continue;
            }
            Err(Error::UnsupportedVersion { version, .. }) => {
                let reason = format!("unsupported format version {version}");
                out.damage.push(Damage {
                    segment: base,
                    byte_offset: 0,
                    reason,
                    torn_tail: false,
                });
                expected = None;
                continue;
            }
            Err(e) => return Err(e),
        };
        expected = Some(summary.end_offset);
        out.end_offset = summary.end_offset;
        out.damage.extend(summary.damage.clone());
        out.segments.push(summary);
    }
    Ok(out)
}

fn walk_segment(seg: Segment, last: bool, committed: Option<u64>) -> Result<SegmentSummary> {
    let mut s = SegmentSummary {
        base_offset: seg.header.base_offset,
        size_bytes: seg.header.segment_size_bytes,
        frames: 0,
        records: 0,
        gap_records: 0,
        end_offset: seg.header.base_offset,
        used_bytes: 0,
        damage: None,
    };
    let mut scanner = Scanner::new(seg);
    let mut raw = Vec::new();
    let frames_max = s.size_bytes / FRAME_HEADER_SIZE_BYTES as u64 + 1;
    for _ in 0..frames_max {
        let why = match scanner.peek()? {
            Step::End => break,
            Step::Frame(h) => match format::decode_body(&h, scanner.body(&h), &mut raw) {
                Ok(()) => {
                    count_frame(&mut s, &h);
                    scanner.advance(&h);
                    continue;
                }
                Err(why) => why,
            },
            Step::Invalid(why) => why,
        };
        let torn_tail = last && committed.is_none_or(|c| scanner.next_offset >= c);
        s.damage = Some(Damage {
            segment: s.base_offset,
            byte_offset: scanner.pos,
            reason: why.to_string(),
            torn_tail,
        });
        break;
    }
    s.end_offset = scanner.next_offset;
    Ok(s)
}

fn count_frame(s: &mut SegmentSummary, h: &FrameHeader) {
    s.frames += 1;
    s.used_bytes += h.frame_size_bytes();
    if h.is_gap() {
        s.gap_records += u64::from(h.record_count);
    } else {
        s.records += u64::from(h.record_count);
    }
}

/// Copies `len_bytes` at `pos` of a segment into `quarantine/<base>-<pos>.bin` and syncs it.
pub fn quarantine(
    fs: &dyn Vfs,
    dir: &Path,
    base: u64,
    pos: u64,
    file: &dyn VFile,
    len_bytes: u64,
) -> Result<()> {
    let qdir = dir.join(format::QUARANTINE_DIR);
    fs.create_dir_all(&qdir)?;
    let mut buf = vec![0u8; usize::try_from(len_bytes).map_err(|_| Error::InvalidOptions("len"))?];
    let n = vfs::read_full_at(file, &mut buf, pos)?;
    buf.truncate(n);
    let q = fs.open(
        &qdir.join(format!("{base:020}-{pos:012}.bin")),
        OpenMode::CreateOrOpen,
    )?;
    vfs::write_all_at(&*q, &buf, 0)?;
    vfs::sync_data(&*q)?;
    fs.sync_dir(&qdir)?;
    Ok(())
}

/// What `repair` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Damaged ranges moved to `quarantine/`.
    pub ranges_quarantined: u64,
    /// Record offsets covered by the new gap frames (lost records).
    pub records_quarantined: u64,
    pub bytes_quarantined: u64,
    /// Segments created to fill a hole where a segment was missing.
    pub segments_created: u64,
    /// Damage repair could not mark (left for a human; reported).
    pub unrepaired: Vec<Damage>,
}

/// Repairs a journal no writer has open: each damaged range is copied to `quarantine/` and
/// replaced by a gap frame (or, for a torn tail of the last segment, zeroed), a missing segment
/// is replaced by one holding a gap frame. Intact frames after a damaged one are kept: the walk
/// resynchronises on the next frame whose CRC and offset fit.
pub fn repair(fs: &dyn Vfs, dir: &Path) -> Result<RepairReport> {
    let _lock = fs
        .lock_exclusive(&dir.join(format::LOCK_FILE))
        .map_err(|_| Error::Locked)?;
    let mut report = RepairReport::default();
    let bases = segment::list_segments(fs, dir)?;
    let mut expected: Option<u64> = None;
    // Bounded: each pass fixes one place or finishes; a segment has at most size/33 frames.
    let passes_max = 1_000_000u64;
    let mut i = 0usize;
    for _ in 0..passes_max {
        let Some(&base) = bases.get(i) else { break };
        if let Some(e) = expected.filter(|&e| e < base) {
            fill_missing_segment(fs, dir, e, base, &mut report)?;
        }
        let seg = match segment::open_segment(fs, dir, base, OpenMode::Write) {
            Ok(seg) => seg,
            Err(Error::Corrupt { reason, .. }) => {
                report.unrepaired.push(Damage {
                    segment: base,
                    byte_offset: 0,
                    reason,
                    torn_tail: false,
                });
                expected = None;
                i += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        let successor = bases.get(i + 1).copied();
        expected = Some(repair_segment(fs, dir, seg, successor, &mut report)?);
        i += 1;
    }
    Ok(report)
}

fn fill_missing_segment(
    fs: &dyn Vfs,
    dir: &Path,
    from: u64,
    to: u64,
    report: &mut RepairReport,
) -> Result<()> {
    let seg = segment::create_segment(fs, dir, from, format::SEGMENT_SIZE_BYTES_MIN)?;
    let count = u32::try_from(to - from).map_err(|_| Error::InvalidOptions("hole too large"))?;
    let mut frame = Vec::new();
    format::encode_gap_frame(&mut frame, from, count, 0);
    vfs::write_all_at(&*seg.file, &frame, format::SEGMENT_HEADER_SIZE_BYTES)?;
    vfs::sync_data(&*seg.file)?;
    report.segments_created += 1;
    report.records_quarantined += to - from;
    Ok(())
}

/// Repairs one segment in place; returns the offset after its last frame.
fn repair_segment(
    fs: &dyn Vfs,
    dir: &Path,
    seg: Segment,
    successor: Option<u64>,
    report: &mut RepairReport,
) -> Result<u64> {
    let size = seg.header.segment_size_bytes;
    let file = seg.file.clone();
    let base = seg.header.base_offset;
    let mut scanner = Scanner::new(seg);
    let frames_max = size / FRAME_HEADER_SIZE_BYTES as u64 + 1;
    for _ in 0..frames_max {
        match scanner.skip_to_end()? {
            Step::End => break,
            Step::Frame(_) => continue,
            Step::Invalid(_) => {}
        }
        let (pos, expected) = (scanner.pos, scanner.next_offset);
        let resync = find_next_frame(&*file, size, pos, expected, successor)?;
        let (gap_end_pos, gap_end_offset) = match (resync, successor) {
            (Some(found), _) => found,
            (None, Some(next_base)) => (size, next_base),
            (None, None) => {
                // The tail of the last segment: a torn write. Quarantine and zero it.
                let len = size - pos;
                quarantine(fs, dir, base, pos, &*file, len)?;
                vfs::write_all_at(&*file, &vec![0u8; len as usize], pos)?;
                vfs::sync_data(&*file)?;
                report.ranges_quarantined += 1;
                report.bytes_quarantined += len;
                break;
            }
        };
        let len = gap_end_pos - pos;
        quarantine(fs, dir, base, pos, &*file, len)?;
        let count =
            u32::try_from(gap_end_offset - expected).map_err(|_| Error::InvalidOptions("gap"))?;
        let padding = u32::try_from(len - FRAME_HEADER_SIZE_BYTES as u64)
            .map_err(|_| Error::InvalidOptions("gap"))?;
        let mut frame = Vec::new();
        if count > 0 {
            format::encode_gap_frame(&mut frame, expected, count, padding);
        } else {
            frame.resize(len as usize, 0);
        }
        vfs::write_all_at(&*file, &frame, pos)?;
        vfs::sync_data(&*file)?;
        scanner.invalidate();
        report.ranges_quarantined += 1;
        report.bytes_quarantined += len;
        report.records_quarantined += u64::from(count);
    }
    Ok(scanner.next_offset)
}

/// Looks for the first valid frame after damaged bytes at `pos`: a header that parses, a CRC
/// that matches, and a first offset in `(expected, successor]`. Returns (position, its offset).
fn find_next_frame(
    file: &dyn VFile,
    size: u64,
    pos: u64,
    expected: u64,
    successor: Option<u64>,
) -> Result<Option<(u64, u64)>> {
    let mut buf = vec![0u8; usize::try_from(size).map_err(|_| Error::InvalidOptions("size"))?];
    let n = vfs::read_full_at(file, &mut buf, 0)?;
    buf.truncate(n);
    let limit = successor.unwrap_or(u64::MAX);
    // A gap frame needs 32 bytes, so a resync point is at least one header past `pos`.
    let start = (pos + FRAME_HEADER_SIZE_BYTES as u64) as usize;
    for at in start..buf.len().saturating_sub(FRAME_HEADER_SIZE_BYTES) {
        let Ok(h) = FrameHeader::parse(&buf[at..]) else {
            continue;
        };
        if h.first_offset <= expected || h.first_offset > limit {
            continue;
        }
        let end = at + h.frame_size_bytes() as usize;
        if end > buf.len()
            || h.check_body(&buf[at..], &buf[at + FRAME_HEADER_SIZE_BYTES..end])
                .is_err()
        {
            continue;
        }
        return Ok(Some((at as u64, h.first_offset)));
    }
    Ok(None)
}

/// The committed offset a tool should use: the `committed` file, else the end of the CRC walk.
pub fn committed_offset(fs: &dyn Vfs, dir: &Path) -> Result<u64> {
    let from_file = fs
        .open(&dir.join(format::COMMITTED_FILE), OpenMode::Read)
        .ok()
        .and_then(|f| read_committed_file(&*f).ok());
    match from_file {
        Some(c) => Ok(c),
        None => Ok(inspect(fs, dir)?.end_offset),
    }
}

fn retained_range(fs: &dyn Vfs, dir: &Path) -> Result<(u64, u64)> {
    let earliest = segment::list_segments(fs, dir)?
        .first()
        .copied()
        .unwrap_or(0);
    Ok((earliest, committed_offset(fs, dir)?))
}

/// Adds a subscriber from outside the writer process (the writer may be running).
pub fn add_subscriber(
    fs: &dyn Vfs,
    dir: &Path,
    name: &str,
    start: &subscribers::Start,
) -> Result<u64> {
    let (earliest, committed) = retained_range(fs, dir)?;
    let offset = subscribers::resolve(fs, dir, start, earliest, committed)?;
    subscribers::add(fs, dir, name, offset)?;
    Ok(offset)
}

pub fn remove_subscriber(fs: &dyn Vfs, dir: &Path, name: &str) -> Result<()> {
    subscribers::remove(fs, dir, name)
}

/// Moves a subscriber's checkpoint to a retained offset. Do not run it while that subscriber is
/// reading: its next commit would overwrite the rewind.
pub fn rewind_subscriber(fs: &dyn Vfs, dir: &Path, name: &str, offset: u64) -> Result<()> {
    let (earliest, committed) = retained_range(fs, dir)?;
    subscribers::rewind(fs, dir, name, offset, earliest, committed)
}
