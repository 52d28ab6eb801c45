//! Recovery on open: temp files and the torn tail of the last segment.

use super::*;

/// What `recover` hands to `Journal::open`.
pub(super) struct Recovered {
    pub(super) io: Io,
    pub(super) committed_file: Arc<dyn VFile>,
    pub(super) next_offset: u64,
    pub(super) report: RecoveryReport,
}

/// Removes temp files, checks every segment header, finds the end of the log in the last
/// segment (truncating a torn tail), republishes the committed offset and clamps checkpoints.
pub(super) fn recover(fs: &dyn Vfs, dir: &Path, opts: &Options) -> Result<Recovered> {
    let mut report = RecoveryReport {
        temp_files_removed: remove_temp_files(fs, dir)?,
        ..Default::default()
    };
    let mut bases = segment::list_segments(fs, dir)?;
    // A segment created here holds nothing past its header: no tail to look for garbage in.
    let created = bases.is_empty();
    if created {
        segment::create_segment(fs, dir, 0, opts.segment_size_bytes)?;
        bases.push(0);
    }
    for &base in &bases {
        segment::open_segment(fs, dir, base, OpenMode::Read)?;
    }
    report.segments_quarantined = drop_segments_after_lost_tail(fs, dir, opts, &mut bases)?;
    let last = *bases.last().ok_or(Error::InvalidOptions("no segment"))?;
    let active = segment::open_segment(fs, dir, last, OpenMode::Write)?;
    let (write_pos, next_offset, truncated) = recover_tail(fs, dir, active.clone(), !created)?;
    report.truncated_bytes = truncated;
    let committed_file = fs.open(&dir.join(format::COMMITTED_FILE), OpenMode::CreateOrOpen)?;
    vfs::write_all_at(&*committed_file, &format::encode_committed(next_offset), 0)?;
    report.checkpoints_clamped = subscribers::clamp_all(fs, dir, next_offset)?;
    let io = Io {
        active,
        write_pos,
        written_offset: next_offset,
        frames: Vec::new(),
        scratch: Vec::new(),
        unsynced_sealed: Vec::new(),
    };
    Ok(Recovered {
        io,
        committed_file,
        next_offset,
        report,
    })
}

fn remove_temp_files(fs: &dyn Vfs, dir: &Path) -> Result<u64> {
    let mut removed = 0u64;
    for name in fs.list(dir)? {
        if name.ends_with(".tmp") {
            fs.remove_file(&dir.join(&name))?;
            removed += 1;
        }
    }
    if removed > 0 {
        fs.sync_dir(dir)?;
    }
    Ok(removed)
}

/// Finds the end of the valid frames of the last segment and zeroes anything after it, so the
/// next append cannot be followed by stale bytes. Returns (write position, next offset,
/// non-zero bytes discarded).
fn recover_tail(
    fs: &dyn Vfs,
    dir: &Path,
    seg: Segment,
    scan_garbage: bool,
) -> Result<(u64, u64, u64)> {
    let size = seg.header.segment_size_bytes;
    let file = seg.file.clone();
    let mut scanner = Scanner::new(seg);
    scanner.skip_to_end()?;
    let (valid_end, next_offset) = (scanner.pos, scanner.next_offset);
    if !scan_garbage {
        // Reading a new segment's zeros cost ≈ 40 ms of every fresh store's first open.
        debug_assert_eq!(next_offset, 0, "a segment just created holds no frame");
        return Ok((valid_end, next_offset, 0));
    }
    let mut truncated = 0u64;
    let mut buf = vec![0u8; segment::READ_CHUNK_BYTES_MAX];
    let mut pos = valid_end;
    let chunks_max = size / buf.len() as u64 + 2;
    for _ in 0..chunks_max {
        if pos >= size {
            break;
        }
        let n = vfs::read_full_at(&*file, &mut buf, pos)?;
        if n == 0 {
            break;
        }
        if let Some(last) = buf[..n].iter().rposition(|&b| b != 0) {
            truncated = pos + last as u64 + 1 - valid_end;
        }
        pos += n as u64;
    }
    let short = file.len()? < size;
    if truncated > 0 {
        // Never destroy bytes silently: a torn tail is usually garbage, but keep it for forensics.
        let base = scanner.base();
        // Best effort: a full disk must not stop recovery; the count is reported either way.
        let _ = crate::tools::quarantine(fs, dir, base, valid_end, &*file, truncated);
    }
    if truncated > 0 || short {
        file.set_len(valid_end)?;
        file.set_len(size)?;
        file.allocate(size)?;
        vfs::sync_data(&*file)?;
    }
    Ok((valid_end, next_offset, truncated))
}

/// A power loss in Buffered mode can lose the unsynced tail of a sealed segment while the next
/// segment (created with a directory sync) survives: a hole before the last segment. Then the
/// log ends where the sealed segment's valid frames end, and the later segment is moved to
/// `quarantine/` (nothing deleted). In sync modes a roll syncs the sealed segment first, so a
/// hole there is damage to acknowledged data, never loss: it is left for `verify`/`repair`,
/// which keeps the later segment readable. Returns how many segments were quarantined.
fn drop_segments_after_lost_tail(
    fs: &dyn Vfs,
    dir: &Path,
    opts: &Options,
    bases: &mut Vec<u64>,
) -> Result<u64> {
    let mut quarantined = 0u64;
    if opts.durability != Durability::Buffered {
        return Ok(quarantined);
    }
    let iterations_max = bases.len();
    for _ in 0..iterations_max {
        let [.., sealed, last] = bases[..] else { break };
        let seg = segment::open_segment(fs, dir, sealed, OpenMode::Read)?;
        let mut scanner = Scanner::new(seg);
        scanner.skip_to_end()?;
        if scanner.next_offset >= last {
            break;
        }
        let qdir = dir.join(format::QUARANTINE_DIR);
        fs.create_dir_all(&qdir)?;
        let name = format::segment_file_name(last);
        fs.rename(
            &dir.join(&name),
            &qdir.join(format!("{name}.after-lost-tail")),
        )?;
        fs.sync_dir(&qdir)?;
        fs.sync_dir(dir)?;
        bases.pop();
        quarantined += 1;
    }
    Ok(quarantined)
}
