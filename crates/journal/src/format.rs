//! The on-disk format: segment headers, frames, checkpoint slots and the committed-offset file.
//!
//! Every integer is little-endian. Every structure carries a CRC32C (Castagnoli) so that no byte is
//! trusted before it is checked. `FORMAT.md` describes the same layout for humans; keep them in step.

/// Magic bytes at the start of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"STRJSEG\0";
/// Magic bytes at the start of every checkpoint slot.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"STRJCKP\0";
/// Magic bytes at the start of the committed-offset file.
pub const COMMITTED_MAGIC: [u8; 8] = *b"STRJCOM\0";
/// The newest format version this code writes; readers accept every version listed in
/// `SEGMENT_VERSIONS_READABLE`.
pub const SEGMENT_VERSION: u16 = 1;
/// Versions this code can read.
pub const SEGMENT_VERSIONS_READABLE: [u16; 1] = [1];
/// Checkpoint slot and committed file version.
pub const META_VERSION: u16 = 1;

/// Size of the segment header; frames start right after it.
pub const SEGMENT_HEADER_SIZE_BYTES: u64 = 64;
/// Size of a frame header.
pub const FRAME_HEADER_SIZE_BYTES: usize = 32;
/// Size of the length prefix of each record inside a frame body.
pub const RECORD_PREFIX_SIZE_BYTES: usize = 4;
/// Size of one checkpoint slot (the encoded part; the slot itself is padded to a page).
pub const SLOT_SIZE_BYTES: usize = 64;
/// Distance between the two checkpoint slots: one page each, so a torn page write damages one slot.
pub const SLOT_STRIDE_BYTES: u64 = 4096;
/// Size of a checkpoint file (two slots).
pub const CHECKPOINT_FILE_SIZE_BYTES: u64 = 2 * SLOT_STRIDE_BYTES;
/// Size of the committed-offset file.
pub const COMMITTED_SIZE_BYTES: usize = 64;

/// Frame flag: the body is an LZ4 block.
pub const FLAG_LZ4: u8 = 1;
/// Frame flag: a quarantine marker written by `repair`. It holds no records; its `record_count`
/// offsets were damaged and moved to `quarantine/`. Its body is padding (ignored, CRC-covered).
pub const FLAG_GAP: u8 = 2;
/// Every flag bit this version knows; any other bit makes a frame invalid.
pub const FLAGS_KNOWN: u8 = FLAG_LZ4 | FLAG_GAP;

/// Smallest allowed segment (keeps tests with tiny segments meaningful, forbids absurd ones).
pub const SEGMENT_SIZE_BYTES_MIN: u64 = 4096;
/// Largest allowed segment: frame positions and lengths stay well inside u32 arithmetic.
pub const SEGMENT_SIZE_BYTES_MAX: u64 = 1 << 30;

fn crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn put(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}

/// The header at byte 0 of every segment file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub version: u16,
    pub base_offset: u64,
    pub segment_size_bytes: u64,
    pub created_unix_ms: u64,
}

/// Why a structure was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    Magic,
    Version(u16),
    Checksum,
    Field(&'static str),
}

/// What a damage report says (`strata journal verify`, a store's WAL error).
impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Invalid::Magic => write!(f, "bad magic bytes"),
            Invalid::Version(version) => write!(f, "unsupported format version {version}"),
            Invalid::Checksum => write!(f, "checksum mismatch"),
            Invalid::Field(what) => write!(f, "bad {what}"),
        }
    }
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_SIZE_BYTES as usize] {
        let mut b = [0u8; SEGMENT_HEADER_SIZE_BYTES as usize];
        put(&mut b, 0, &SEGMENT_MAGIC);
        put(&mut b, 8, &self.version.to_le_bytes());
        put(
            &mut b,
            10,
            &(SEGMENT_HEADER_SIZE_BYTES as u16).to_le_bytes(),
        );
        put(&mut b, 16, &self.base_offset.to_le_bytes());
        put(&mut b, 24, &self.segment_size_bytes.to_le_bytes());
        put(&mut b, 32, &self.created_unix_ms.to_le_bytes());
        let c = crc(&b[..60]);
        put(&mut b, 60, &c.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<SegmentHeader, Invalid> {
        if b.len() < SEGMENT_HEADER_SIZE_BYTES as usize {
            return Err(Invalid::Field("short header"));
        }
        if b[..8] != SEGMENT_MAGIC {
            return Err(Invalid::Magic);
        }
        if crc(&b[..60]) != get_u32(b, 60) {
            return Err(Invalid::Checksum);
        }
        let version = get_u16(b, 8);
        if !SEGMENT_VERSIONS_READABLE.contains(&version) {
            return Err(Invalid::Version(version));
        }
        if u64::from(get_u16(b, 10)) != SEGMENT_HEADER_SIZE_BYTES {
            return Err(Invalid::Field("header size"));
        }
        let h = SegmentHeader {
            version,
            base_offset: get_u64(b, 16),
            segment_size_bytes: get_u64(b, 24),
            created_unix_ms: get_u64(b, 32),
        };
        if !(SEGMENT_SIZE_BYTES_MIN..=SEGMENT_SIZE_BYTES_MAX).contains(&h.segment_size_bytes) {
            return Err(Invalid::Field("segment size"));
        }
        Ok(h)
    }
}

/// The fixed part of a frame, before its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Length of the body as stored (after compression).
    pub stored_len: u32,
    pub crc: u32,
    pub flags: u8,
    pub record_count: u32,
    pub first_offset: u64,
    /// Length of the body once decoded.
    pub raw_len: u32,
}

impl FrameHeader {
    /// True when the header bytes are all zero: the preallocated, never-written tail of a segment.
    pub fn is_zero(b: &[u8]) -> bool {
        b.iter().all(|&x| x == 0)
    }

    /// Parses and sanity-checks the header fields; the CRC is checked by `check_body`.
    pub fn parse(b: &[u8]) -> Result<FrameHeader, Invalid> {
        if b.len() < FRAME_HEADER_SIZE_BYTES {
            return Err(Invalid::Field("short frame header"));
        }
        let h = FrameHeader {
            stored_len: get_u32(b, 0),
            crc: get_u32(b, 4),
            flags: b[8],
            record_count: get_u32(b, 12),
            first_offset: get_u64(b, 16),
            raw_len: get_u32(b, 24),
        };
        if h.flags & !FLAGS_KNOWN != 0 || b[9..12] != [0, 0, 0] || b[28..32] != [0, 0, 0, 0] {
            return Err(Invalid::Field("flags"));
        }
        if h.record_count == 0 {
            return Err(Invalid::Field("record count"));
        }
        if h.flags & FLAG_GAP != 0 {
            if h.flags != FLAG_GAP || h.raw_len != 0 {
                return Err(Invalid::Field("gap frame"));
            }
            return Ok(h);
        }
        if h.stored_len == 0 {
            return Err(Invalid::Field("zero length"));
        }
        let raw_min = u64::from(h.record_count) * RECORD_PREFIX_SIZE_BYTES as u64;
        if u64::from(h.raw_len) < raw_min {
            return Err(Invalid::Field("raw length"));
        }
        if h.flags & FLAG_LZ4 == 0 && h.raw_len != h.stored_len {
            return Err(Invalid::Field("raw length"));
        }
        Ok(h)
    }

    /// Checks the CRC over header bytes 8..32 and the stored body.
    pub fn check_body(&self, header: &[u8], body: &[u8]) -> Result<(), Invalid> {
        debug_assert_eq!(body.len(), self.stored_len as usize);
        let c = crc32c::crc32c_append(crc(&header[8..FRAME_HEADER_SIZE_BYTES]), body);
        if c != self.crc {
            return Err(Invalid::Checksum);
        }
        Ok(())
    }

    pub fn frame_size_bytes(&self) -> u64 {
        FRAME_HEADER_SIZE_BYTES as u64 + u64::from(self.stored_len)
    }

    pub fn end_offset(&self) -> u64 {
        self.first_offset + u64::from(self.record_count)
    }

    pub fn is_gap(&self) -> bool {
        self.flags & FLAG_GAP != 0
    }
}

/// Appends a gap frame covering `record_count` offsets from `first_offset`, padded with
/// `padding_bytes` zero bytes so it can fill exactly the space of the damaged bytes it replaces.
pub fn encode_gap_frame(
    out: &mut Vec<u8>,
    first_offset: u64,
    record_count: u32,
    padding_bytes: u32,
) {
    assert!(record_count > 0);
    let start = out.len();
    out.resize(start + FRAME_HEADER_SIZE_BYTES + padding_bytes as usize, 0);
    let h = &mut out[start..];
    put(h, 0, &padding_bytes.to_le_bytes());
    h[8] = FLAG_GAP;
    put(h, 12, &record_count.to_le_bytes());
    put(h, 16, &first_offset.to_le_bytes());
    let c = crc(&h[8..]);
    put(h, 4, &c.to_le_bytes());
}

/// Appends one complete frame (header + stored body) to `out`. `raw` is the record area
/// (`len u32 | bytes` per record). When `lz4` is set and compression saves space, the body is
/// stored compressed; otherwise raw (so a frame never grows past its raw size).
pub fn encode_frame(
    out: &mut Vec<u8>,
    raw: &[u8],
    record_count: u32,
    first_offset: u64,
    lz4: bool,
    scratch: &mut Vec<u8>,
) {
    assert!(record_count > 0);
    assert!(raw.len() >= record_count as usize * RECORD_PREFIX_SIZE_BYTES);
    assert!(raw.len() <= u32::MAX as usize);
    let mut flags = 0u8;
    let mut body: &[u8] = raw;
    if lz4 {
        scratch.clear();
        scratch.resize(lz4_flex::block::get_maximum_output_size(raw.len()), 0);
        if let Ok(n) = lz4_flex::block::compress_into(raw, scratch) {
            if n < raw.len() {
                scratch.truncate(n);
                body = scratch;
                flags = FLAG_LZ4;
            }
        }
    }
    let start = out.len();
    out.resize(start + FRAME_HEADER_SIZE_BYTES, 0);
    let h = &mut out[start..];
    put(h, 0, &(body.len() as u32).to_le_bytes());
    h[8] = flags;
    put(h, 12, &record_count.to_le_bytes());
    put(h, 16, &first_offset.to_le_bytes());
    put(h, 24, &(raw.len() as u32).to_le_bytes());
    let c = crc32c::crc32c_append(crc(&h[8..FRAME_HEADER_SIZE_BYTES]), body);
    put(h, 4, &c.to_le_bytes());
    out.extend_from_slice(body);
}

/// Appends a frame whose header is complete except `first_offset` and the CRC, and returns the
/// CRC32C of its stored body; `seal_frame` finishes it once the offset is known. This lets a
/// submitting thread compress and checksum outside the writer's lock.
pub fn encode_unsealed_frame(
    out: &mut Vec<u8>,
    raw: &[u8],
    record_count: u32,
    lz4: bool,
    scratch: &mut Vec<u8>,
) -> u32 {
    let start = out.len();
    encode_frame(out, raw, record_count, 0, lz4, scratch);
    let body = &out[start + FRAME_HEADER_SIZE_BYTES..];
    crc(body)
}

/// Sets `first_offset` in an unsealed frame header and its CRC (combining the header CRC with
/// the body CRC computed earlier, so the body is not read again).
pub fn seal_frame(frame: &mut [u8], first_offset: u64, body_crc: u32) {
    let stored_len = get_u32(frame, 0) as usize;
    assert_eq!(frame.len(), FRAME_HEADER_SIZE_BYTES + stored_len);
    put(frame, 16, &first_offset.to_le_bytes());
    let header_crc = crc(&frame[8..FRAME_HEADER_SIZE_BYTES]);
    let c = crc32c::crc32c_combine(header_crc, body_crc, stored_len);
    put(frame, 4, &c.to_le_bytes());
}

/// Size of the frame starting at `frame[0]` according to its (trusted, self-built) header, and
/// its record count.
pub fn frame_extent_of(frame: &[u8]) -> (usize, u32) {
    (
        FRAME_HEADER_SIZE_BYTES + get_u32(frame, 0) as usize,
        get_u32(frame, 12),
    )
}

/// Fills the frame header in `frame[..32]` for the uncompressed body `frame[32..]` (the record
/// area), computing the CRC in place.
pub fn fill_frame_header(frame: &mut [u8], record_count: u32, first_offset: u64) {
    assert!(record_count > 0);
    let body_len = frame.len() - FRAME_HEADER_SIZE_BYTES;
    assert!(body_len >= record_count as usize * RECORD_PREFIX_SIZE_BYTES);
    let body_len = u32::try_from(body_len).unwrap_or(u32::MAX);
    frame[..FRAME_HEADER_SIZE_BYTES].fill(0);
    put(frame, 0, &body_len.to_le_bytes());
    put(frame, 12, &record_count.to_le_bytes());
    put(frame, 16, &first_offset.to_le_bytes());
    put(frame, 24, &body_len.to_le_bytes());
    let c = crc(&frame[8..]);
    put(frame, 4, &c.to_le_bytes());
    debug_assert!(check_records(&frame[FRAME_HEADER_SIZE_BYTES..], record_count).is_ok());
}

/// Decodes a CRC-checked frame body into `raw` (the record area) and validates that the record
/// lengths add up exactly to `raw_len` with `record_count` records. After this returns Ok every
/// record boundary in `raw` is trustworthy.
pub fn decode_body(h: &FrameHeader, body: &[u8], raw: &mut Vec<u8>) -> Result<(), Invalid> {
    raw.clear();
    decode_body_append(h, body, raw)
}

/// Like `decode_body`, but appends the record area to `out` (readers decode straight into the
/// batch they return). On error `out` is left as it was.
pub fn decode_body_append(h: &FrameHeader, body: &[u8], out: &mut Vec<u8>) -> Result<(), Invalid> {
    if h.is_gap() {
        return Ok(());
    }
    let start = out.len();
    let r = decode_into(h, body, out).and_then(|()| check_records(&out[start..], h.record_count));
    if r.is_err() {
        out.truncate(start);
    }
    r
}

fn decode_into(h: &FrameHeader, body: &[u8], raw: &mut Vec<u8>) -> Result<(), Invalid> {
    let start = raw.len();
    if h.flags & FLAG_LZ4 != 0 {
        raw.resize(start + h.raw_len as usize, 0);
        match lz4_flex::block::decompress_into(body, &mut raw[start..]) {
            Ok(n) if n == h.raw_len as usize => {}
            _ => return Err(Invalid::Field("lz4 body")),
        }
    } else {
        raw.extend_from_slice(body);
    }
    Ok(())
}

/// Walks the `len u32 | bytes` records and checks they fill `raw` exactly.
pub fn check_records(raw: &[u8], record_count: u32) -> Result<(), Invalid> {
    let mut pos = 0usize;
    for _ in 0..record_count {
        if raw.len() - pos < RECORD_PREFIX_SIZE_BYTES {
            return Err(Invalid::Field("record prefix"));
        }
        let len = get_u32(raw, pos) as usize;
        pos += RECORD_PREFIX_SIZE_BYTES;
        if raw.len() - pos < len {
            return Err(Invalid::Field("record length"));
        }
        pos += len;
    }
    if pos != raw.len() {
        return Err(Invalid::Field("trailing bytes"));
    }
    Ok(())
}

/// Iterates the records of a validated record area: yields each payload.
pub fn records(raw: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        if pos + RECORD_PREFIX_SIZE_BYTES > raw.len() {
            return None;
        }
        let len = get_u32(raw, pos) as usize;
        let start = pos + RECORD_PREFIX_SIZE_BYTES;
        let end = start.checked_add(len).filter(|&e| e <= raw.len())?;
        pos = end;
        Some(&raw[start..end])
    })
}

/// One checkpoint slot: a subscriber's next offset to read, with a sequence number so the newer
/// of the two slots wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointSlot {
    pub sequence: u64,
    pub offset: u64,
    pub written_unix_ms: u64,
}

impl CheckpointSlot {
    pub fn encode(&self) -> [u8; SLOT_SIZE_BYTES] {
        let mut b = [0u8; SLOT_SIZE_BYTES];
        put(&mut b, 0, &CHECKPOINT_MAGIC);
        put(&mut b, 8, &META_VERSION.to_le_bytes());
        put(&mut b, 16, &self.sequence.to_le_bytes());
        put(&mut b, 24, &self.offset.to_le_bytes());
        put(&mut b, 32, &self.written_unix_ms.to_le_bytes());
        let c = crc(&b[..60]);
        put(&mut b, 60, &c.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<CheckpointSlot, Invalid> {
        decode_meta(b, &CHECKPOINT_MAGIC)?;
        let s = CheckpointSlot {
            sequence: get_u64(b, 16),
            offset: get_u64(b, 24),
            written_unix_ms: get_u64(b, 32),
        };
        if s.sequence == 0 {
            return Err(Invalid::Field("sequence"));
        }
        Ok(s)
    }

    /// Picks the newest valid slot of a checkpoint file's bytes; None when both are damaged.
    pub fn newest(file: &[u8]) -> Option<(usize, CheckpointSlot)> {
        let mut best: Option<(usize, CheckpointSlot)> = None;
        for i in 0..2usize {
            let at = i * SLOT_STRIDE_BYTES as usize;
            let Some(bytes) = file.get(at..at + SLOT_SIZE_BYTES) else {
                continue;
            };
            if let Ok(s) = CheckpointSlot::decode(bytes) {
                if best.is_none_or(|(_, b)| s.sequence > b.sequence) {
                    best = Some((i, s));
                }
            }
        }
        best
    }
}

fn decode_meta(b: &[u8], magic: &[u8; 8]) -> Result<(), Invalid> {
    if b.len() < SLOT_SIZE_BYTES {
        return Err(Invalid::Field("short"));
    }
    if &b[..8] != magic {
        return Err(Invalid::Magic);
    }
    if crc(&b[..60]) != get_u32(b, 60) {
        return Err(Invalid::Checksum);
    }
    let v = get_u16(b, 8);
    if v != META_VERSION {
        return Err(Invalid::Version(v));
    }
    Ok(())
}

/// The committed-offset file: the writer publishes here, reader processes read it.
pub fn encode_committed(committed_offset: u64) -> [u8; COMMITTED_SIZE_BYTES] {
    let mut b = [0u8; COMMITTED_SIZE_BYTES];
    put(&mut b, 0, &COMMITTED_MAGIC);
    put(&mut b, 8, &META_VERSION.to_le_bytes());
    put(&mut b, 16, &committed_offset.to_le_bytes());
    let c = crc(&b[..60]);
    put(&mut b, 60, &c.to_le_bytes());
    b
}

pub fn decode_committed(b: &[u8]) -> Result<u64, Invalid> {
    decode_meta(b, &COMMITTED_MAGIC)?;
    Ok(get_u64(b, 16))
}

/// File name of the segment whose first record has `base_offset`.
pub fn segment_file_name(base_offset: u64) -> String {
    format!("{base_offset:020}.seg")
}

/// Parses a segment file name; None for any other file.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// File name of a subscriber's checkpoint.
pub fn checkpoint_file_name(name: &str) -> String {
    format!("{name}.ckpt")
}

pub fn parse_checkpoint_file_name(file: &str) -> Option<&str> {
    let name = file.strip_suffix(".ckpt")?;
    valid_subscriber_name(name).then_some(name)
}

/// Longest subscriber name.
pub const SUBSCRIBER_NAME_BYTES_MAX: usize = 64;

/// Subscriber names are file-name safe: `[A-Za-z0-9_.-]`, not starting with '.', 1..=64 bytes.
pub fn valid_subscriber_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= SUBSCRIBER_NAME_BYTES_MAX
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.')
}

/// Name of the committed-offset file.
pub const COMMITTED_FILE: &str = "committed";
/// Name of the writer's lock file.
pub const LOCK_FILE: &str = "lock";
/// Directory where `repair` moves damaged ranges.
pub const QUARANTINE_DIR: &str = "quarantine";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trip_raw_and_lz4() {
        let mut raw = Vec::new();
        for i in 0..10u32 {
            let payload = vec![b'a'; 100 + i as usize];
            raw.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            raw.extend_from_slice(&payload);
        }
        for lz4 in [false, true] {
            let mut out = Vec::new();
            let mut scratch = Vec::new();
            encode_frame(&mut out, &raw, 10, 77, lz4, &mut scratch);
            let h = FrameHeader::parse(&out).unwrap();
            assert_eq!(h.flags & FLAG_LZ4 != 0, lz4);
            let body = &out[FRAME_HEADER_SIZE_BYTES..];
            h.check_body(&out, body).unwrap();
            let mut dec = Vec::new();
            decode_body(&h, body, &mut dec).unwrap();
            assert_eq!(dec, raw);
            assert_eq!(records(&dec).count(), 10);
            assert_eq!(h.end_offset(), 87);
        }
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let mut raw = Vec::new();
        raw.extend_from_slice(&3u32.to_le_bytes());
        raw.extend_from_slice(b"abc");
        let mut out = Vec::new();
        encode_frame(&mut out, &raw, 1, 5, false, &mut Vec::new());
        for bit in 0..out.len() * 8 {
            let mut bad = out.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let ok = FrameHeader::parse(&bad).and_then(|h| {
                let end = FRAME_HEADER_SIZE_BYTES + h.stored_len as usize;
                let body = bad
                    .get(FRAME_HEADER_SIZE_BYTES..end)
                    .ok_or(Invalid::Field("len"))?;
                h.check_body(&bad, body)
            });
            assert!(ok.is_err(), "bit {bit} not detected");
        }
    }

    #[test]
    fn unsealed_frame_seals_to_the_same_bytes() {
        let raw = {
            let mut r = Vec::new();
            for i in 0..50u32 {
                r.extend_from_slice(&8u32.to_le_bytes());
                r.extend_from_slice(&u64::from(i % 3).to_le_bytes());
            }
            r
        };
        for lz4 in [false, true] {
            let (mut direct, mut unsealed) = (Vec::new(), Vec::new());
            encode_frame(&mut direct, &raw, 50, 1234, lz4, &mut Vec::new());
            let body_crc = encode_unsealed_frame(&mut unsealed, &raw, 50, lz4, &mut Vec::new());
            seal_frame(&mut unsealed, 1234, body_crc);
            assert_eq!(direct, unsealed);
            assert_eq!(frame_extent_of(&unsealed), (direct.len(), 50));
        }
    }

    #[test]
    fn gap_frame_round_trip() {
        let mut out = Vec::new();
        encode_gap_frame(&mut out, 10, 5, 7);
        let h = FrameHeader::parse(&out).unwrap();
        assert!(h.is_gap());
        h.check_body(&out, &out[FRAME_HEADER_SIZE_BYTES..]).unwrap();
        assert_eq!(h.end_offset(), 15);
        assert_eq!(h.frame_size_bytes(), 39);
    }

    #[test]
    fn names() {
        assert_eq!(parse_segment_file_name(&segment_file_name(42)), Some(42));
        assert_eq!(parse_segment_file_name("42.seg"), None);
        assert!(valid_subscriber_name("core-1.a_b"));
        assert!(!valid_subscriber_name("../x"));
        assert!(!valid_subscriber_name(""));
    }

    #[test]
    fn checkpoint_newest_slot_wins_and_damage_falls_back() {
        let mut file = vec![0u8; CHECKPOINT_FILE_SIZE_BYTES as usize];
        let a = CheckpointSlot {
            sequence: 1,
            offset: 10,
            written_unix_ms: 0,
        };
        let b = CheckpointSlot {
            sequence: 2,
            offset: 20,
            written_unix_ms: 0,
        };
        file[..64].copy_from_slice(&a.encode());
        file[4096..4096 + 64].copy_from_slice(&b.encode());
        assert_eq!(CheckpointSlot::newest(&file).unwrap().1.offset, 20);
        file[4096 + 30] ^= 1;
        assert_eq!(CheckpointSlot::newest(&file).unwrap().1.offset, 10);
        file[3] ^= 1;
        assert!(CheckpointSlot::newest(&file).is_none());
    }
}
