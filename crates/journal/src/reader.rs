//! Readers: threads of the writer's process or other processes. A reader opens files read-only,
//! writes nothing, and never delivers a record at or past the committed offset — nor a byte that
//! failed its CRC.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::{self, Invalid};
use crate::segment::{self, Scanner, Step};
use crate::vfs::{self, OpenMode, VFile, Vfs};

/// The writer, as a reader in its process sees it: the offset below which every record is
/// committed. (A trait, so that readers do not depend on the writer's internals.)
pub(crate) trait Committed: Send + Sync {
    fn committed_offset(&self) -> u64;
}

/// Where a reader learns the committed offset.
pub(crate) enum CommittedSource {
    /// In the writer's process: the writer's atomic.
    Shared(Arc<dyn Committed>),
    /// Another process: the `committed` file the writer rewrites after every commit.
    File(Arc<dyn VFile>),
}

impl CommittedSource {
    pub(crate) fn open_file(fs: &dyn Vfs, dir: &Path) -> Result<CommittedSource> {
        Ok(CommittedSource::File(
            fs.open(&dir.join(format::COMMITTED_FILE), OpenMode::Read)?,
        ))
    }

    pub(crate) fn load(&self) -> Result<u64> {
        match self {
            CommittedSource::Shared(writer) => Ok(writer.committed_offset()),
            CommittedSource::File(f) => read_committed_file(&**f),
        }
    }
}

/// Reads the committed-offset file; a torn read (racing the writer) is retried a few times.
pub(crate) fn read_committed_file(f: &dyn VFile) -> Result<u64> {
    const ATTEMPTS_MAX: u32 = 16;
    let mut b = [0u8; format::COMMITTED_SIZE_BYTES];
    let mut last = Invalid::Field("unread");
    for _ in 0..ATTEMPTS_MAX {
        vfs::read_full_at(f, &mut b, 0)?;
        match format::decode_committed(&b) {
            Ok(v) => return Ok(v),
            Err(e) => last = e,
        }
        std::thread::yield_now();
    }
    Err(Error::Corrupt {
        segment: 0,
        offset: 0,
        reason: format!("committed file: {last}"),
    })
}

/// Records read in one call: offsets are consecutive from `first_offset`.
#[derive(Default)]
pub struct Batch {
    /// Decoded record areas (`len u32 | bytes` per record), one per frame read.
    data: Vec<u8>,
    /// (offset, start, len) of each record in `data`.
    records: Vec<(u64, usize, usize)>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn clear(&mut self) {
        self.data.clear();
        self.records.clear();
    }

    /// (offset, payload) of every record, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.records
            .iter()
            .map(|&(o, s, l)| (o, &self.data[s..s + l]))
    }

    /// Offset after the last record, if any.
    pub fn end_offset(&self) -> Option<u64> {
        self.records.last().map(|r| r.0 + 1)
    }
}

/// A sequential reader.
pub struct Reader {
    fs: Arc<dyn Vfs>,
    dir: PathBuf,
    source: CommittedSource,
    scanner: Option<Scanner>,
    /// Next offset to deliver.
    position: u64,
    skipped_records: u64,
}

/// How many bytes of decoded records one `next_batch` call gathers at most (one frame may exceed
/// it: a frame is delivered whole).
pub const BATCH_BYTES_MAX: usize = 1 << 20;

impl Reader {
    /// A reader in another process: learns the committed offset from the `committed` file.
    pub fn open(fs: Arc<dyn Vfs>, dir: impl AsRef<Path>, offset: u64) -> Result<Reader> {
        let source = CommittedSource::open_file(&*fs, dir.as_ref())?;
        Reader::open_with(fs, dir.as_ref(), source, offset)
    }

    pub(crate) fn open_with(
        fs: Arc<dyn Vfs>,
        dir: &Path,
        source: CommittedSource,
        offset: u64,
    ) -> Result<Reader> {
        let mut r = Reader {
            fs,
            dir: dir.to_path_buf(),
            source,
            scanner: None,
            position: offset,
            skipped_records: 0,
        };
        r.seek(offset)?;
        Ok(r)
    }

    /// Next offset this reader delivers.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Offsets skipped because `repair` quarantined them (gap frames passed so far).
    pub fn skipped_records(&self) -> u64 {
        self.skipped_records
    }

    pub fn committed_offset(&self) -> Result<u64> {
        self.source.load()
    }

    /// Positions the reader at `offset`, which must be retained: earliest <= offset <= committed.
    pub fn seek(&mut self, offset: u64) -> Result<()> {
        let committed = self.source.load()?;
        let bases = segment::list_segments(&*self.fs, &self.dir)?;
        let earliest = bases.first().copied().unwrap_or(0);
        let not_retained = Error::NotRetained {
            offset,
            earliest,
            committed,
        };
        if offset < earliest || offset > committed {
            return Err(not_retained);
        }
        let Some(&base) = bases.iter().rev().find(|&&b| b <= offset) else {
            return Err(not_retained);
        };
        let seg = segment::open_segment(&*self.fs, &self.dir, base, OpenMode::Read)?;
        let mut scanner = Scanner::new(seg);
        skip_before(&mut scanner, offset)?;
        self.scanner = Some(scanner);
        self.position = offset;
        Ok(())
    }

    /// Reads committed records from the position on into `batch` (cleared first). Returns how
    /// many; 0 means the reader is at the committed end.
    pub fn next_batch(&mut self, batch: &mut Batch) -> Result<usize> {
        batch.clear();
        let committed = self.source.load()?;
        // One frame per iteration, and frames are at least a header long.
        let frames_max = BATCH_BYTES_MAX / format::FRAME_HEADER_SIZE_BYTES + 2;
        for _ in 0..frames_max {
            if self.position >= committed || batch.data.len() >= BATCH_BYTES_MAX {
                break;
            }
            let before = self.progress_mark();
            self.read_frame(batch, committed)?;
            if self.progress_mark() == before {
                // Below the committed offset every step must move: a stall is damage, and
                // returning "no records" would look like the end of the log.
                let scanner = self.scanner.as_ref().ok_or(Error::Closed)?;
                return Err(scanner.corrupt(format!("no progress at offset {}", self.position)));
            }
        }
        Ok(batch.len())
    }

    /// (position, segment base, byte position): changes whenever reading makes progress.
    fn progress_mark(&self) -> (u64, u64, u64) {
        let (base, pos) = self.scanner.as_ref().map_or((0, 0), |s| (s.base(), s.pos));
        (self.position, base, pos)
    }

    /// Delivers the frame holding `position` (or moves to the next segment).
    fn read_frame(&mut self, batch: &mut Batch, committed: u64) -> Result<()> {
        let scanner = self.scanner.as_mut().ok_or(Error::Closed)?;
        let mut step = scanner.peek()?;
        if !matches!(step, Step::Frame(_)) {
            // The read-ahead may predate the writer's latest frames: look again at fresh bytes.
            scanner.invalidate();
            step = scanner.peek()?;
        }
        let h = match step {
            Step::Frame(h) => h,
            Step::End => {
                scanner.invalidate();
                return self.next_segment(committed);
            }
            Step::Invalid(why) => {
                scanner.invalidate();
                // Below the committed offset every byte must be valid: this is damage.
                return Err(scanner.corrupt(why.to_string()));
            }
        };
        if h.first_offset >= committed {
            scanner.invalidate();
            return Ok(());
        }
        if h.end_offset() > committed {
            // The writer publishes whole frames only; a committed offset inside a frame comes
            // from a stale or damaged `committed` file. Never deliver part of the frame.
            scanner.invalidate();
            return Err(scanner.corrupt(format!(
                "committed offset {committed} falls inside frame {}..{}",
                h.first_offset,
                h.end_offset()
            )));
        }
        let start = batch.data.len();
        let body = scanner.body(&h);
        if let Err(why) = format::decode_body_append(&h, body, &mut batch.data) {
            return Err(scanner.corrupt(why.to_string()));
        }
        scanner.advance(&h);
        if h.is_gap() {
            // Offsets `repair` quarantined: nothing to deliver, never silently — counted.
            let from = self.position.max(h.first_offset);
            self.skipped_records += h.end_offset().saturating_sub(from);
            self.position = self.position.max(h.end_offset());
            return Ok(());
        }
        let mut at = start;
        let mut offset = h.first_offset;
        for rec in format::records(&batch.data[start..]) {
            let rec_start = at + format::RECORD_PREFIX_SIZE_BYTES;
            if offset >= self.position {
                batch.records.push((offset, rec_start, rec.len()));
            }
            at = rec_start + rec.len();
            offset += 1;
        }
        assert_eq!(
            offset,
            h.end_offset(),
            "validated frame yields its record count"
        );
        self.position = self.position.max(offset);
        Ok(())
    }

    /// At the end of a segment's frames with records still due: the next segment must start
    /// exactly at our position, else the log has a hole.
    fn next_segment(&mut self, committed: u64) -> Result<()> {
        let scanner = self.scanner.as_ref().ok_or(Error::Closed)?;
        let expected = scanner.next_offset;
        if expected >= committed {
            return Ok(());
        }
        let bases = segment::list_segments(&*self.fs, &self.dir)?;
        // The successor must start exactly where this segment's frames end — and be another
        // segment: an empty segment below the committed offset is a hole too.
        if expected == scanner.base() || !bases.contains(&expected) {
            return Err(scanner.corrupt(format!(
                "segment ends at offset {expected} but no segment starts there"
            )));
        }
        let seg = segment::open_segment(&*self.fs, &self.dir, expected, OpenMode::Read)?;
        self.scanner = Some(Scanner::new(seg));
        Ok(())
    }
}

/// Moves the scanner to the frame that holds `offset` (frames wholly before it are skipped).
fn skip_before(scanner: &mut Scanner, offset: u64) -> Result<()> {
    let frames_max =
        scanner.segment.header.segment_size_bytes / format::FRAME_HEADER_SIZE_BYTES as u64;
    for _ in 0..frames_max {
        if scanner.next_offset >= offset {
            return Ok(());
        }
        match scanner.peek()? {
            Step::Frame(h) if h.end_offset() <= offset => scanner.advance(&h),
            Step::Frame(_) => return Ok(()),
            Step::End => break,
            Step::Invalid(why) => return Err(scanner.corrupt(why.to_string())),
        }
    }
    scanner.invalidate();
    if scanner.next_offset < offset {
        return Err(scanner.corrupt(format!("segment ends before offset {offset}")));
    }
    Ok(())
}
