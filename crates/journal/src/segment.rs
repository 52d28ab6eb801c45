//! Segment files: listing, creation, and the frame scanner shared by recovery, readers and tools.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::{
    self, FrameHeader, Invalid, SegmentHeader, FRAME_HEADER_SIZE_BYTES, SEGMENT_HEADER_SIZE_BYTES,
};
use crate::vfs::{self, OpenMode, VFile, Vfs};

/// How much a scanner reads ahead in one call.
pub const READ_CHUNK_BYTES_MAX: usize = 1 << 20;

pub fn segment_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(format::segment_file_name(base))
}

/// Base offsets of every segment in `dir`, ascending.
pub fn list_segments(fs: &dyn Vfs, dir: &Path) -> Result<Vec<u64>> {
    let mut bases: Vec<u64> = fs
        .list(dir)?
        .iter()
        .filter_map(|n| format::parse_segment_file_name(n))
        .collect();
    bases.sort_unstable();
    Ok(bases)
}

/// Reads and checks a segment's header; the base in the header must match the file name.
pub fn read_header(file: &dyn VFile, base: u64) -> Result<SegmentHeader> {
    let mut b = [0u8; SEGMENT_HEADER_SIZE_BYTES as usize];
    let n = vfs::read_full_at(file, &mut b, 0)?;
    let corrupt = |reason: String| Error::Corrupt {
        segment: base,
        offset: 0,
        reason,
    };
    if n < b.len() {
        return Err(corrupt("segment shorter than its header".into()));
    }
    let h = SegmentHeader::decode(&b).map_err(|e| match e {
        Invalid::Version(version) => Error::UnsupportedVersion {
            segment: base,
            version,
        },
        other => corrupt(format!("segment header: {other}")),
    })?;
    if h.base_offset != base {
        return Err(corrupt(format!(
            "header base {} differs from file name",
            h.base_offset
        )));
    }
    Ok(h)
}

pub fn open_segment(fs: &dyn Vfs, dir: &Path, base: u64, mode: OpenMode) -> Result<Segment> {
    let file = fs.open(&segment_path(dir, base), mode)?;
    let header = read_header(&*file, base)?;
    Ok(Segment { file, header })
}

/// An open segment and its checked header.
#[derive(Clone)]
pub struct Segment {
    pub file: Arc<dyn VFile>,
    pub header: SegmentHeader,
}

/// Creates a preallocated segment atomically: temp file, header, allocate, sync, rename, dir sync.
/// A crash at any point leaves either no segment or a complete empty one (plus a temp file that
/// the next open removes).
pub fn create_segment(
    fs: &dyn Vfs,
    dir: &Path,
    base: u64,
    segment_size_bytes: u64,
) -> Result<Segment> {
    let path = segment_path(dir, base);
    let tmp = dir.join(format!("{}.tmp", format::segment_file_name(base)));
    if fs.exists(&tmp) {
        fs.remove_file(&tmp)?;
    }
    let header = SegmentHeader {
        version: format::SEGMENT_VERSION,
        base_offset: base,
        segment_size_bytes,
        created_unix_ms: crate::now_unix_ms(),
    };
    let made = (|| -> std::io::Result<Arc<dyn VFile>> {
        let file = fs.open(&tmp, OpenMode::CreateNew)?;
        file.allocate(segment_size_bytes)?;
        vfs::write_all_at(&*file, &header.encode(), 0)?;
        vfs::sync_data(&*file)?;
        fs.rename(&tmp, &path)?;
        fs.sync_dir(dir)?;
        Ok(file)
    })();
    match made {
        Ok(file) => Ok(Segment { file, header }),
        Err(e) => {
            // Best effort: a leftover temp file is also removed by the next open.
            let _ = fs.remove_file(&tmp);
            Err(Error::from_io(e))
        }
    }
}

/// What the scanner found at its position.
#[derive(Debug)]
pub enum Step {
    /// A complete frame with a valid CRC and the expected first offset.
    Frame(FrameHeader),
    /// Zero bytes or no room for another frame: the written part of the segment ends here.
    End,
    /// Bytes that are neither a valid frame nor zeros.
    Invalid(Invalid),
}

/// Walks the frames of one segment. It never trusts a byte it has not checked: every frame is
/// length-bounded by the segment, CRC-checked, and must continue the offset sequence.
pub struct Scanner {
    pub segment: Segment,
    /// File position of the next frame.
    pub pos: u64,
    /// Offset the next frame must start at.
    pub next_offset: u64,
    buf: Vec<u8>,
    buf_pos: u64,
}

impl Scanner {
    pub fn new(segment: Segment) -> Scanner {
        let base = segment.header.base_offset;
        Scanner {
            segment,
            pos: SEGMENT_HEADER_SIZE_BYTES,
            next_offset: base,
            buf: Vec::new(),
            buf_pos: 0,
        }
    }

    pub fn base(&self) -> u64 {
        self.segment.header.base_offset
    }

    fn size_bytes(&self) -> u64 {
        self.segment.header.segment_size_bytes
    }

    /// Forgets read-ahead bytes so the next step re-reads the file (the writer may have added
    /// frames where zeros were read before).
    pub fn invalidate(&mut self) {
        self.buf.clear();
    }

    /// Makes `[pos, pos + len)` available in `buf`; returns false if the file is shorter.
    fn fill(&mut self, len: usize) -> Result<bool> {
        let have_from = self.buf_pos;
        let have_to = self.buf_pos + self.buf.len() as u64;
        if self.pos >= have_from && self.pos + len as u64 <= have_to {
            return Ok(true);
        }
        let room = self.size_bytes().saturating_sub(self.pos) as usize;
        let want = len.max(READ_CHUNK_BYTES_MAX).min(room.max(len));
        self.buf.resize(want, 0);
        let n = vfs::read_full_at(&*self.segment.file, &mut self.buf, self.pos)?;
        self.buf.truncate(n);
        self.buf_pos = self.pos;
        Ok(n >= len)
    }

    fn at(&self, len: usize) -> &[u8] {
        let start = (self.pos - self.buf_pos) as usize;
        &self.buf[start..start + len]
    }

    /// Looks at the frame at `pos` without moving past it.
    pub fn peek(&mut self) -> Result<Step> {
        if self.pos + FRAME_HEADER_SIZE_BYTES as u64 > self.size_bytes() {
            return Ok(Step::End);
        }
        if !self.fill(FRAME_HEADER_SIZE_BYTES)? {
            return Ok(Step::Invalid(Invalid::Field(
                "file shorter than segment size",
            )));
        }
        let head = self.at(FRAME_HEADER_SIZE_BYTES);
        if FrameHeader::is_zero(head) {
            return Ok(Step::End);
        }
        let h = match FrameHeader::parse(head) {
            Ok(h) => h,
            Err(e) => return Ok(Step::Invalid(e)),
        };
        if self.pos + h.frame_size_bytes() > self.size_bytes() {
            return Ok(Step::Invalid(Invalid::Field(
                "frame runs past the segment end",
            )));
        }
        let frame_len = h.frame_size_bytes() as usize;
        if !self.fill(frame_len)? {
            return Ok(Step::Invalid(Invalid::Field("file shorter than frame")));
        }
        let frame = self.at(frame_len);
        if let Err(e) = h.check_body(frame, &frame[FRAME_HEADER_SIZE_BYTES..]) {
            return Ok(Step::Invalid(e));
        }
        if h.first_offset != self.next_offset {
            return Ok(Step::Invalid(Invalid::Field(
                "frame offset out of sequence",
            )));
        }
        Ok(Step::Frame(h))
    }

    /// The stored body of the frame `peek` just returned.
    pub fn body(&self, h: &FrameHeader) -> &[u8] {
        let frame = self.at(h.frame_size_bytes() as usize);
        &frame[FRAME_HEADER_SIZE_BYTES..]
    }

    /// Moves past the frame `peek` just returned.
    pub fn advance(&mut self, h: &FrameHeader) {
        assert_eq!(h.first_offset, self.next_offset);
        self.pos += h.frame_size_bytes();
        self.next_offset = h.end_offset();
        assert!(self.pos <= self.size_bytes());
    }

    /// Walks every valid frame to the end of the written part. Returns what stopped it.
    pub fn skip_to_end(&mut self) -> Result<Step> {
        let frames_max = self.size_bytes() / FRAME_HEADER_SIZE_BYTES as u64 + 1;
        for _ in 0..frames_max {
            match self.peek()? {
                Step::Frame(h) => self.advance(&h),
                other => return Ok(other),
            }
        }
        Ok(Step::End)
    }

    pub fn corrupt(&self, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            segment: self.base(),
            offset: self.pos,
            reason: reason.into(),
        }
    }
}
