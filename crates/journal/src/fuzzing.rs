//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the corpus replay test, so CI
//! runs the checked-in corpus through exactly the code the fuzzer exercises. Each function must
//! never panic on any input, and checks the decoders' own invariants.

use std::path::Path;
use std::sync::Arc;

use crate::format::{self, CheckpointSlot, FrameHeader, SegmentHeader, FRAME_HEADER_SIZE_BYTES};
use crate::segment::{Scanner, Segment, Step};
use crate::sim::SimFs;
use crate::vfs::{self, OpenMode, Vfs};

/// Treats `data` as the frame area of a segment: decodes every frame the scanner accepts and
/// checks that what it yields is self-consistent.
pub fn frame_decoder(data: &[u8]) {
    // Direct parse of the first bytes as one frame.
    if let Ok(h) = FrameHeader::parse(data) {
        let end = FRAME_HEADER_SIZE_BYTES.saturating_add(h.stored_len as usize);
        if let Some(body) = data.get(FRAME_HEADER_SIZE_BYTES..end) {
            if h.check_body(data, body).is_ok() {
                let mut raw = Vec::new();
                if format::decode_body(&h, body, &mut raw).is_ok() {
                    let n = format::records(&raw).count();
                    assert!(h.is_gap() || n == h.record_count as usize);
                }
            }
        }
    }
    scan_as_segment(data);
}

/// Builds a segment (valid header + `data`) in the simulated file system and walks it with the
/// same scanner readers and recovery use.
fn scan_as_segment(data: &[u8]) {
    let size = (format::SEGMENT_HEADER_SIZE_BYTES + data.len() as u64).clamp(
        format::SEGMENT_SIZE_BYTES_MIN,
        format::SEGMENT_SIZE_BYTES_MAX,
    );
    let header = SegmentHeader {
        version: format::SEGMENT_VERSION,
        base_offset: 0,
        segment_size_bytes: size,
        created_unix_ms: 0,
    };
    let fs = SimFs::new(0);
    let path = Path::new("/f/00000000000000000000.seg");
    let Ok(()) = fs.create_dir_all(Path::new("/f")) else {
        return;
    };
    let Ok(file) = fs.open(path, OpenMode::CreateNew) else {
        return;
    };
    let mut bytes = header.encode().to_vec();
    bytes.extend_from_slice(data);
    if vfs::write_all_at(&*file, &bytes, 0).is_err() {
        return;
    }
    let mut scanner = Scanner::new(Segment {
        file: Arc::clone(&file),
        header,
    });
    let mut raw = Vec::new();
    let frames_max = size / FRAME_HEADER_SIZE_BYTES as u64 + 1;
    let mut expected = 0u64;
    for _ in 0..frames_max {
        match scanner.peek() {
            Ok(Step::Frame(h)) => {
                assert_eq!(h.first_offset, expected);
                if format::decode_body(&h, scanner.body(&h), &mut raw).is_err() {
                    return;
                }
                scanner.advance(&h);
                expected = h.end_offset();
            }
            _ => return,
        }
    }
}

/// Treats `data` as a checkpoint file and as a committed-offset file.
pub fn checkpoint_reader(data: &[u8]) {
    if let Some((slot, s)) = CheckpointSlot::newest(data) {
        assert!(slot < 2 && s.sequence > 0);
        let at = slot * format::SLOT_STRIDE_BYTES as usize;
        assert_eq!(CheckpointSlot::decode(&data[at..]).ok(), Some(s));
    }
    let _ = format::decode_committed(data);
    let _ = SegmentHeader::decode(data);
}
