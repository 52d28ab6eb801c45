//! Blocks: immutable, time-partitioned, columnar files of chunks.
//!
//! One block holds, for one time partition, the chunks of every series a flush had data for,
//! series after series (columnar: a read of one series touches only its chunks). A directory
//! at the end lists each chunk (series, kind, time range, count, offset, size) and a fixed-size
//! footer locates the directory; header, directory and footer carry CRC32Cs and every chunk has
//! its own (`encode`), so any damaged byte is detected before it could be served. Layout:
//! `FORMAT.md`. Blocks are written once (to a temporary name, synced, renamed) and never
//! modified; they only become visible through the manifest.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hist::Histogram;
use journal::vfs::{write_all_at, Mapped, OpenMode, VFile, Vfs};

use crate::aggregate::SliceAggregate;
use crate::encode::{self, histogram::HIST_CHUNK_PERIODS_MAX, CHUNK_SAMPLES_MAX};
use crate::series::{Kind, SeriesId};

pub const BLOCK_MAGIC: &[u8; 8] = b"STRATABK";
pub const BLOCK_VERSION: u32 = 1;
pub const HEADER_SIZE_BYTES: usize = 16;
pub const ENTRY_SIZE_BYTES: usize = 40;
pub const FOOTER_SIZE_BYTES: usize = 68;
/// Most directory entries in one block (bounds what an open reads into memory).
pub const ENTRIES_MAX: u32 = 1 << 26;
/// Largest chunk a block may hold (bounds a read's allocation).
pub const CHUNK_SIZE_BYTES_MAX: u32 = 1 << 30;
/// The writer's buffer is written out once it holds this much.
const WRITE_BUFFER_BYTES_MAX: usize = 1 << 20;

/// Why a block file cannot be used. `offset` is a byte offset in the file.
#[derive(Debug)]
pub enum BlockError {
    Io(std::io::Error),
    /// The file's structure (header, footer, directory) is damaged.
    Damaged {
        offset: u64,
        what: &'static str,
    },
    /// One chunk is damaged (its checksum or its content disagrees with the directory).
    Chunk {
        series: SeriesId,
        first_ts_ms: i64,
        last_ts_ms: i64,
        what: String,
    },
}

impl From<std::io::Error> for BlockError {
    fn from(e: std::io::Error) -> BlockError {
        BlockError::Io(e)
    }
}

/// One chunk in a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub series: SeriesId,
    pub kind: Kind,
    pub first_ts_ms: i64,
    pub last_ts_ms: i64,
    pub sample_count: u32,
    pub offset: u64,
    pub size_bytes: u32,
}

/// Where a block sits in time and in flush order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockId {
    pub partition_start_ms: i64,
    /// The flush (or compaction) that wrote it; later generations win duplicates.
    pub generation: u64,
}

impl BlockId {
    pub fn file_name(&self) -> String {
        format!("p{}_g{}.blk", self.partition_start_ms, self.generation)
    }
}

impl std::fmt::Display for BlockId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.file_name())
    }
}

/// The data of one series for one partition, ready to encode (sorted, one sample per
/// timestamp; histograms one per base period).
pub enum SeriesData {
    Numeric(Vec<(i64, f64)>),
    Text(Vec<(i64, String)>),
    Histogram(Vec<(i64, Histogram)>),
    /// A numeric series' rollup slices, by slice start (rollup blocks only).
    Aggregates(Vec<(i64, SliceAggregate)>),
}

/// Decoded samples of one chunk.
pub enum ChunkData {
    Numeric(Vec<(i64, f64)>),
    Text(Vec<(i64, String)>),
    Histogram(Vec<(i64, Histogram)>),
    Aggregates(Vec<(i64, SliceAggregate)>),
}

/// Bytes of consecutive chunks: the file offset they start at, and the bytes.
pub type Span<'a> = (u64, Cow<'a, [u8]>);

/// An open block: its directory in memory, chunks read on demand.
pub struct Block {
    pub id: BlockId,
    pub partition_end_ms: i64,
    pub base_period_ms: i64,
    pub size_bytes: u64,
    pub path: PathBuf,
    /// From the manifest (`BlockRef::content_generation`); the generation until set.
    pub content_generation: u64,
    entries: Vec<Entry>,
    file: Arc<dyn VFile>,
    /// The whole file mapped (blocks are immutable once written), when the file system maps:
    /// chunk reads borrow from it instead of a read and a copy per chunk.
    map: Option<Mapped>,
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn le_i64(b: &[u8], at: usize) -> i64 {
    le_u64(b, at) as i64
}

fn read_exact_at(file: &dyn VFile, buf: &mut [u8], offset: u64) -> Result<(), BlockError> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            return Err(BlockError::Damaged {
                offset: offset + done as u64,
                what: "file ends early",
            });
        }
        done += n;
    }
    Ok(())
}

fn damaged(offset: u64, what: &'static str) -> BlockError {
    BlockError::Damaged { offset, what }
}

pub fn header_bytes() -> [u8; HEADER_SIZE_BYTES] {
    let mut h = [0u8; HEADER_SIZE_BYTES];
    h[..8].copy_from_slice(BLOCK_MAGIC);
    h[8..12].copy_from_slice(&BLOCK_VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    h
}

impl Block {
    /// Opens a block and checks its header, footer and directory (not the chunks: those are
    /// checked when read, and by `verify`).
    pub fn open(vfs: &dyn Vfs, path: &Path) -> Result<Block, BlockError> {
        let file = vfs.open(path, OpenMode::Read)?;
        let size_bytes = file.len()?;
        let min = (HEADER_SIZE_BYTES + FOOTER_SIZE_BYTES) as u64;
        if size_bytes < min {
            return Err(damaged(0, "shorter than header and footer"));
        }
        let mut header = [0u8; HEADER_SIZE_BYTES];
        read_exact_at(&*file, &mut header, 0)?;
        if header != header_bytes() {
            return Err(damaged(0, "bad header (magic, version or checksum)"));
        }
        let footer_at = size_bytes - FOOTER_SIZE_BYTES as u64;
        let mut f = [0u8; FOOTER_SIZE_BYTES];
        read_exact_at(&*file, &mut f, footer_at)?;
        if &f[60..68] != BLOCK_MAGIC {
            return Err(damaged(footer_at + 60, "bad footer magic"));
        }
        if le_u32(&f, 56) != crc32c::crc32c(&f[..56]) {
            return Err(damaged(footer_at + 56, "footer checksum mismatch"));
        }
        let id = BlockId {
            partition_start_ms: le_i64(&f, 0),
            generation: le_u64(&f, 16),
        };
        let partition_end_ms = le_i64(&f, 8);
        let base_period_ms = le_i64(&f, 24);
        let directory_offset = le_u64(&f, 32);
        let entry_count = le_u32(&f, 40);
        let directory_crc = le_u32(&f, 44);
        if partition_end_ms <= id.partition_start_ms || base_period_ms <= 0 {
            return Err(damaged(footer_at, "bad partition range or base period"));
        }
        if entry_count > ENTRIES_MAX {
            return Err(damaged(footer_at + 40, "too many entries"));
        }
        let directory_size = entry_count as u64 * ENTRY_SIZE_BYTES as u64;
        if directory_offset < HEADER_SIZE_BYTES as u64
            || directory_offset.checked_add(directory_size) != Some(footer_at)
        {
            return Err(damaged(
                footer_at + 32,
                "directory does not end at the footer",
            ));
        }
        let mut dir = vec![0u8; directory_size as usize];
        read_exact_at(&*file, &mut dir, directory_offset)?;
        if crc32c::crc32c(&dir) != directory_crc {
            return Err(damaged(directory_offset, "directory checksum mismatch"));
        }
        let bounds = (id.partition_start_ms, partition_end_ms, directory_offset);
        let entries = parse_directory(&dir, directory_offset, bounds)?;
        let map = file
            .map_immutable()
            .filter(|m| (**m).as_ref().len() as u64 == size_bytes);
        Ok(Block {
            id,
            partition_end_ms,
            base_period_ms,
            size_bytes,
            path: path.to_path_buf(),
            content_generation: id.generation,
            entries,
            file,
            map,
        })
    }

    /// The `len` bytes at `offset`: borrowed from the mapping, else read.
    fn bytes_at(&self, offset: u64, len: usize) -> Result<Cow<'_, [u8]>, BlockError> {
        if let Some(map) = &self.map {
            let range = usize::try_from(offset)
                .ok()
                .and_then(|at| Some(at..at.checked_add(len)?));
            if let Some(bytes) = range.and_then(|r| (**map).as_ref().get(r)) {
                return Ok(Cow::Borrowed(bytes));
            }
        }
        let mut bytes = vec![0u8; len];
        read_exact_at(&*self.file, &mut bytes, offset)?;
        Ok(Cow::Owned(bytes))
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entries of one series (ascending time).
    pub fn entries_of(&self, series: SeriesId) -> &[Entry] {
        let from = self.entries.partition_point(|e| e.series < series);
        let to = self.entries.partition_point(|e| e.series <= series);
        &self.entries[from..to]
    }

    /// Decodes one histogram chunk straight into accumulators (see
    /// `encode::rice_hist::decode_into`: `slot_of` picks the accumulator of each period, or
    /// none), building no histogram, and checks it against its directory entry. On an error
    /// some periods may already have been added: the caller must discard `out`.
    pub fn accumulate_histogram_chunk(
        &self,
        entry: &Entry,
        slot_of: impl FnMut(i64) -> Option<usize>,
        out: &mut [hist::Accumulator],
    ) -> Result<(), BlockError> {
        let bytes = self.bytes_at(entry.offset, entry.size_bytes as usize)?;
        self.accumulate_histogram_bytes(entry, &bytes, slot_of, out)
    }

    /// The bytes of chunks `entries` (ascending, as `entries_of` lists a series') read with
    /// one read: the file offset they start at, and the bytes up to the end of the last. `None`
    /// if they span more than `SPAN_BYTES_MAX` (read them one by one then).
    pub fn read_span(&self, entries: &[Entry]) -> Result<Option<Span<'_>>, BlockError> {
        let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
            return Ok(None);
        };
        let end = last.offset + u64::from(last.size_bytes);
        if last.offset < first.offset || end - first.offset > SPAN_BYTES_MAX {
            return Ok(None);
        }
        let bytes = self.bytes_at(first.offset, (end - first.offset) as usize)?;
        Ok(Some((first.offset, bytes)))
    }

    /// `accumulate_histogram_chunk` from the chunk's bytes, already read.
    pub fn accumulate_histogram_bytes(
        &self,
        entry: &Entry,
        bytes: &[u8],
        slot_of: impl FnMut(i64) -> Option<usize>,
        out: &mut [hist::Accumulator],
    ) -> Result<(), BlockError> {
        let chunk_error = |what: String| BlockError::Chunk {
            series: entry.series,
            first_ts_ms: entry.first_ts_ms,
            last_ts_ms: entry.last_ts_ms,
            what,
        };
        if entry.kind != Kind::Histogram {
            return Err(chunk_error("not a histogram chunk".into()));
        }
        if bytes.len() != entry.size_bytes as usize {
            return Err(chunk_error(
                "chunk size disagrees with its directory entry".into(),
            ));
        }
        let summary = if is_packed_histogram(bytes) {
            encode::packed_hist::decode_into(bytes, slot_of, out)
        } else {
            encode::rice_hist::decode_into(bytes, slot_of, out)
        }
        .map_err(|e| chunk_error(e.to_string()))?;
        if summary.periods != entry.sample_count as usize
            || (summary.periods > 0
                && (summary.first_ts_ms != entry.first_ts_ms
                    || summary.last_ts_ms != entry.last_ts_ms))
        {
            return Err(chunk_error(
                "chunk disagrees with its directory entry".into(),
            ));
        }
        Ok(())
    }

    /// Reads and decodes one chunk, checking it against its directory entry.
    pub fn read_chunk(&self, entry: &Entry) -> Result<ChunkData, BlockError> {
        let bytes = self.bytes_at(entry.offset, entry.size_bytes as usize)?;
        let chunk_error = |what: String| BlockError::Chunk {
            series: entry.series,
            first_ts_ms: entry.first_ts_ms,
            last_ts_ms: entry.last_ts_ms,
            what,
        };
        let data = match entry.kind {
            // Rollup blocks hold numeric series as aggregate chunks (kind 4).
            Kind::Numeric if bytes.get(1) == Some(&(encode::ChunkKind::Aggregate as u8)) => {
                encode::aggregate::decode(&bytes).map(ChunkData::Aggregates)
            }
            Kind::Numeric => encode::numeric::decode(&bytes).map(ChunkData::Numeric),
            Kind::Text => encode::text::decode(&bytes).map(ChunkData::Text),
            // Rollup blocks hold histogram series as packed chunks (kind 5).
            Kind::Histogram if is_packed_histogram(&bytes) => {
                encode::packed_hist::decode(&bytes).map(ChunkData::Histogram)
            }
            Kind::Histogram => encode::rice_hist::decode(&bytes).map(ChunkData::Histogram),
        }
        .map_err(|e| chunk_error(e.to_string()))?;
        let (count, first, last) = data.summary();
        if count != entry.sample_count as usize
            || first != Some(entry.first_ts_ms)
            || last != Some(entry.last_ts_ms)
        {
            return Err(chunk_error(
                "chunk disagrees with its directory entry".into(),
            ));
        }
        Ok(data)
    }
}

impl ChunkData {
    fn summary(&self) -> (usize, Option<i64>, Option<i64>) {
        fn s<T>(v: &[(i64, T)]) -> (usize, Option<i64>, Option<i64>) {
            (v.len(), v.first().map(|p| p.0), v.last().map(|p| p.0))
        }
        match self {
            ChunkData::Numeric(v) => s(v),
            ChunkData::Text(v) => s(v),
            ChunkData::Histogram(v) => s(v),
            ChunkData::Aggregates(v) => s(v),
        }
    }
}

fn parse_directory(
    dir: &[u8],
    directory_offset: u64,
    (start_ms, end_ms, chunks_end): (i64, i64, u64),
) -> Result<Vec<Entry>, BlockError> {
    let mut entries: Vec<Entry> = Vec::with_capacity(dir.len() / ENTRY_SIZE_BYTES);
    for (i, e) in dir.chunks_exact(ENTRY_SIZE_BYTES).enumerate() {
        let at = directory_offset + (i * ENTRY_SIZE_BYTES) as u64;
        let kind = Kind::from_u8(e[4]).ok_or(damaged(at + 4, "unknown kind"))?;
        if e[5..8] != [0, 0, 0] {
            return Err(damaged(at + 5, "reserved bytes not zero"));
        }
        let entry = Entry {
            series: SeriesId(le_u32(e, 0)),
            kind,
            first_ts_ms: le_i64(e, 8),
            last_ts_ms: le_i64(e, 16),
            sample_count: le_u32(e, 24),
            offset: le_u64(e, 28),
            size_bytes: le_u32(e, 36),
        };
        if entry.first_ts_ms > entry.last_ts_ms
            || entry.first_ts_ms < start_ms
            || entry.last_ts_ms >= end_ms
        {
            return Err(damaged(at + 8, "chunk time range outside the partition"));
        }
        if entry.sample_count == 0 || entry.sample_count as usize > CHUNK_SAMPLES_MAX {
            return Err(damaged(at + 24, "bad sample count"));
        }
        let fits = entry.offset >= HEADER_SIZE_BYTES as u64
            && (encode::CHUNK_FRAME_SIZE_BYTES as u32..=CHUNK_SIZE_BYTES_MAX)
                .contains(&entry.size_bytes)
            && entry.offset + entry.size_bytes as u64 <= chunks_end;
        if !fits {
            return Err(damaged(at + 28, "chunk outside the chunk area"));
        }
        if let Some(prev) = entries.last() {
            let ordered = prev.series < entry.series
                || (prev.series == entry.series
                    && prev.kind == entry.kind
                    && prev.last_ts_ms < entry.first_ts_ms);
            if !ordered {
                return Err(damaged(at, "entries out of order"));
            }
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// Writes one block: chunks series after series, then the directory and the footer.
pub struct BlockWriter {
    id: BlockId,
    partition_end_ms: i64,
    base_period_ms: i64,
    tmp_path: PathBuf,
    final_path: PathBuf,
    file: Arc<dyn VFile>,
    buffer: Vec<u8>,
    written_bytes: u64,
    entries: Vec<Entry>,
    /// Histogram series as packed chunks (kind 5) rather than Rice-coded ones (kind 6).
    packed_histograms: bool,
    /// The Rice coder's memory, kept across the block's chunks.
    rice_scratch: encode::rice_hist::EncodeScratch,
}

/// Most bytes one `read_span` reads at once.
const SPAN_BYTES_MAX: u64 = 16 << 20;

/// Whether chunk bytes are a packed histogram chunk (kind 5).
fn is_packed_histogram(bytes: &[u8]) -> bool {
    bytes.get(1) == Some(&(encode::ChunkKind::PackedHistogram as u8))
}

/// What a finished block holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockStats {
    pub size_bytes: u64,
    pub chunks: u64,
    pub samples: u64,
}

impl BlockWriter {
    pub fn create(
        vfs: &dyn Vfs,
        dir: &Path,
        id: BlockId,
        partition_end_ms: i64,
        base_period_ms: i64,
    ) -> Result<BlockWriter, BlockError> {
        assert!(partition_end_ms > id.partition_start_ms);
        let final_path = dir.join(id.file_name());
        let tmp_path = dir.join(format!("{}.tmp", id.file_name()));
        if vfs.exists(&tmp_path) {
            vfs.remove_file(&tmp_path)?;
        }
        let file = vfs.open(&tmp_path, OpenMode::CreateNew)?;
        let mut w = BlockWriter {
            id,
            partition_end_ms,
            base_period_ms,
            tmp_path,
            final_path,
            file,
            buffer: Vec::with_capacity(WRITE_BUFFER_BYTES_MAX),
            written_bytes: 0,
            entries: Vec::new(),
            packed_histograms: false,
            rice_scratch: encode::rice_hist::EncodeScratch::default(),
        };
        w.buffer.extend_from_slice(&header_bytes());
        Ok(w)
    }

    /// Writes histogram series as packed chunks, which decode without setting up symbol
    /// tables: for rollups, whose chunks are short and read by the thousand (see
    /// `encode/packed_hist.rs`).
    pub fn with_packed_histograms(mut self) -> BlockWriter {
        self.packed_histograms = true;
        self
    }

    fn position(&self) -> u64 {
        self.written_bytes + self.buffer.len() as u64
    }

    fn spill(&mut self) -> Result<(), BlockError> {
        write_all_at(&*self.file, &self.buffer, self.written_bytes)?;
        self.written_bytes += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    /// Adds a series' data; series must come in ascending id order, each once.
    pub fn add(&mut self, series: SeriesId, data: &SeriesData) -> Result<(), BlockError> {
        assert!(
            self.entries.last().is_none_or(|e| e.series < series),
            "series added out of order"
        );
        self.add_parts(series, data)
    }

    /// `add` with chunks that never straddle a multiple of `split_ms`, so a read of a short
    /// range decodes only the chunks it needs (rollups, whose partitions are long).
    pub fn add_split(
        &mut self,
        series: SeriesId,
        data: &SeriesData,
        split_ms: i64,
    ) -> Result<(), BlockError> {
        assert!(
            self.entries.last().is_none_or(|e| e.series < series),
            "series added out of order"
        );
        assert!(split_ms > 0);
        fn groups<T: Clone>(v: &[(i64, T)], split_ms: i64) -> Vec<Vec<(i64, T)>> {
            let mut out: Vec<Vec<(i64, T)>> = Vec::new();
            let mut current: Option<i64> = None;
            for item in v {
                let g = item.0.div_euclid(split_ms);
                if current != Some(g) {
                    out.push(Vec::new());
                    current = Some(g);
                }
                if let Some(last) = out.last_mut() {
                    last.push(item.clone());
                }
            }
            out
        }
        match data {
            SeriesData::Histogram(v) => {
                for g in groups(v, split_ms) {
                    self.add_parts(series, &SeriesData::Histogram(g))?;
                }
                Ok(())
            }
            SeriesData::Aggregates(v) => {
                for g in groups(v, split_ms) {
                    self.add_parts(series, &SeriesData::Aggregates(g))?;
                }
                Ok(())
            }
            other => self.add_parts(series, other),
        }
    }

    fn add_parts(&mut self, series: SeriesId, data: &SeriesData) -> Result<(), BlockError> {
        match data {
            SeriesData::Numeric(points) => {
                for part in points.chunks(CHUNK_SAMPLES_MAX) {
                    let bytes = encode::numeric::encode(part).map_err(encode_error(series))?;
                    self.push_chunk(series, Kind::Numeric, part, &bytes)?;
                }
            }
            SeriesData::Text(points) => {
                let refs: Vec<(i64, &str)> = points.iter().map(|(t, v)| (*t, v.as_str())).collect();
                let changes = encode::text::changes(&refs);
                for part in changes.chunks(CHUNK_SAMPLES_MAX) {
                    let bytes = encode::text::encode(part).map_err(encode_error(series))?;
                    self.push_chunk(series, Kind::Text, part, &bytes)?;
                }
            }
            SeriesData::Histogram(periods) => {
                for part in periods.chunks(HIST_CHUNK_PERIODS_MAX) {
                    self.push_histograms(series, part)?;
                }
            }
            SeriesData::Aggregates(slices) => {
                for part in slices.chunks(CHUNK_SAMPLES_MAX) {
                    let bytes = encode::aggregate::encode(part).map_err(encode_error(series))?;
                    self.push_chunk(series, Kind::Numeric, part, &bytes)?;
                }
            }
        }
        Ok(())
    }

    /// Histogram chunks are bounded in bin slots too: split until each part fits.
    fn push_histograms(
        &mut self,
        series: SeriesId,
        part: &[(i64, Histogram)],
    ) -> Result<(), BlockError> {
        if self.packed_histograms {
            let bytes = encode::packed_hist::encode(part).map_err(encode_error(series))?;
            return self.push_chunk(series, Kind::Histogram, part, &bytes);
        }
        self.push_rice(series, part, |part, scratch| {
            encode::rice_hist::encode(part, scratch)
        })
    }

    /// Adds a histogram series given as the periods the head packed (ascending starts, each
    /// period's bins packed by the store itself): Rice-coded straight from those bytes, with no
    /// histogram built. Series must come in ascending id order, each once.
    pub fn add_packed_histograms<B: AsRef<[u8]>>(
        &mut self,
        series: SeriesId,
        periods: &[(i64, B)],
    ) -> Result<(), BlockError> {
        self.assert_next_histogram_series(series);
        for part in periods.chunks(HIST_CHUNK_PERIODS_MAX) {
            self.push_rice(series, part, |part, scratch| {
                encode::rice_hist::encode(&encode::rice_hist::PackedPeriods(part), scratch)
            })?;
        }
        Ok(())
    }

    /// Adds a head series' periods (`HistSeries::windowed_periods_in`): with the series'
    /// window, every period is written with it (the coded ones' bits copied); without one, all
    /// are packed and choose their chunk's window as `add_packed_histograms` does.
    pub(crate) fn add_head_histograms(
        &mut self,
        series: SeriesId,
        window: Option<&encode::rice_hist::Window>,
        periods: Vec<(i64, encode::rice_hist::WindowedPeriod<'_>)>,
    ) -> Result<(), BlockError> {
        use encode::rice_hist::WindowedPeriod;
        let Some(window) = window else {
            let packed: Vec<(i64, std::borrow::Cow<'_, [u8]>)> = periods
                .into_iter()
                .map(|(t, p)| match p {
                    WindowedPeriod::Packed(bytes) => (t, bytes),
                    WindowedPeriod::Coded(_) => unreachable!("coded periods have a window"),
                })
                .collect();
            return self.add_packed_histograms(series, &packed);
        };
        self.assert_next_histogram_series(series);
        for part in periods.chunks(HIST_CHUNK_PERIODS_MAX) {
            self.push_rice(series, part, |part, scratch| {
                encode::rice_hist::encode_with_window(window, part, scratch)
            })?;
        }
        Ok(())
    }

    /// A base block's histogram series come in ascending id order, each once.
    fn assert_next_histogram_series(&self, series: SeriesId) {
        assert!(
            self.entries.last().is_none_or(|e| e.series < series),
            "series added out of order"
        );
        assert!(
            !self.packed_histograms,
            "rollup blocks add histograms as values"
        );
    }

    /// Rice-codes `part` as one chunk, or as halves, recursively, where its bins need more
    /// slots than one chunk has.
    fn push_rice<T>(
        &mut self,
        series: SeriesId,
        part: &[(i64, T)],
        encode: impl Fn(
                &[(i64, T)],
                &mut encode::rice_hist::EncodeScratch,
            ) -> Result<Vec<u8>, encode::EncodeError>
            + Copy,
    ) -> Result<(), BlockError> {
        match encode(part, &mut self.rice_scratch) {
            Ok(bytes) => self.push_chunk(series, Kind::Histogram, part, &bytes),
            Err(encode::EncodeError::TooManySlots { .. }) if part.len() > 1 => {
                let (a, b) = part.split_at(part.len() / 2);
                self.push_rice(series, a, encode)?;
                self.push_rice(series, b, encode)
            }
            Err(e) => Err(encode_error(series)(e)),
        }
    }

    fn push_chunk<T>(
        &mut self,
        series: SeriesId,
        kind: Kind,
        part: &[(i64, T)],
        bytes: &[u8],
    ) -> Result<(), BlockError> {
        let (Some(first), Some(last)) = (part.first(), part.last()) else {
            return Ok(());
        };
        assert!(first.0 >= self.id.partition_start_ms && last.0 < self.partition_end_ms);
        assert!(bytes.len() <= CHUNK_SIZE_BYTES_MAX as usize);
        let entry = Entry {
            series,
            kind,
            first_ts_ms: first.0,
            last_ts_ms: last.0,
            sample_count: part.len() as u32,
            offset: self.position(),
            size_bytes: bytes.len() as u32,
        };
        self.buffer.extend_from_slice(bytes);
        self.entries.push(entry);
        if self.buffer.len() >= WRITE_BUFFER_BYTES_MAX {
            self.spill()?;
        }
        Ok(())
    }

    /// Writes the directory and footer, syncs, and renames the block to its final name.
    /// The caller syncs the directory (once for all the blocks of a flush).
    pub fn finish(mut self, vfs: &dyn Vfs) -> Result<(PathBuf, BlockStats), BlockError> {
        assert!((self.entries.len() as u64) <= ENTRIES_MAX as u64);
        let directory_offset = self.position();
        let dir_start = self.buffer.len();
        for e in &self.entries {
            self.buffer.extend_from_slice(&e.series.0.to_le_bytes());
            self.buffer.extend_from_slice(&[e.kind as u8, 0, 0, 0]);
            self.buffer.extend_from_slice(&e.first_ts_ms.to_le_bytes());
            self.buffer.extend_from_slice(&e.last_ts_ms.to_le_bytes());
            self.buffer.extend_from_slice(&e.sample_count.to_le_bytes());
            self.buffer.extend_from_slice(&e.offset.to_le_bytes());
            self.buffer.extend_from_slice(&e.size_bytes.to_le_bytes());
        }
        let directory_crc = crc32c::crc32c(&self.buffer[dir_start..]);
        let mut footer = Vec::with_capacity(FOOTER_SIZE_BYTES);
        footer.extend_from_slice(&self.id.partition_start_ms.to_le_bytes());
        footer.extend_from_slice(&self.partition_end_ms.to_le_bytes());
        footer.extend_from_slice(&self.id.generation.to_le_bytes());
        footer.extend_from_slice(&self.base_period_ms.to_le_bytes());
        footer.extend_from_slice(&directory_offset.to_le_bytes());
        footer.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        footer.extend_from_slice(&directory_crc.to_le_bytes());
        footer.extend_from_slice(&0u64.to_le_bytes());
        let footer_crc = crc32c::crc32c(&footer);
        footer.extend_from_slice(&footer_crc.to_le_bytes());
        footer.extend_from_slice(BLOCK_MAGIC);
        assert_eq!(footer.len(), FOOTER_SIZE_BYTES);
        self.buffer.extend_from_slice(&footer);
        self.spill()?;
        self.file.sync_data()?;
        vfs.rename(&self.tmp_path, &self.final_path)?;
        let stats = BlockStats {
            size_bytes: self.written_bytes,
            chunks: self.entries.len() as u64,
            samples: self.entries.iter().map(|e| e.sample_count as u64).sum(),
        };
        Ok((self.final_path, stats))
    }
}

fn encode_error(series: SeriesId) -> impl Fn(encode::EncodeError) -> BlockError {
    move |e| BlockError::Chunk {
        series,
        first_ts_ms: 0,
        last_ts_ms: 0,
        what: format!("encode: {e}"),
    }
}

/// Checks a whole block: structure, then every chunk's checksum and contents. `Ok` carries
/// what it holds; `Err` every problem found (a structural one stops the check).
pub fn verify(vfs: &dyn Vfs, path: &Path) -> Result<BlockStats, Vec<BlockError>> {
    let block = Block::open(vfs, path).map_err(|e| vec![e])?;
    let mut problems = Vec::new();
    for entry in block.entries() {
        if let Err(e) = block.read_chunk(entry) {
            problems.push(e);
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(BlockStats {
        size_bytes: block.size_bytes,
        chunks: block.entries().len() as u64,
        samples: block.entries().iter().map(|e| e.sample_count as u64).sum(),
    })
}
