//! Replays the checked-in fuzz corpora (`crates/hist/fuzz/corpus/<target>/`) through the fuzz
//! targets' own checks (`fuzz_checks`), so every `cargo test` covers them on stable Rust,
//! without nightly or libFuzzer. Each input must pass without a panic, and no single allocation
//! made while checking it may exceed a bound proportional to the input's length (plus a constant):
//! a length field in the input must never decide how much memory is taken.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuzz_checks;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};

/// Each target's corpus must hold at least this many inputs: the replay has to mean something.
const FILES_MIN: usize = 100;

thread_local! {
    /// The largest single allocation (or reallocation target) made on this thread since reset.
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: while a thread is torn down its slot may be gone; then nothing is noted.
    let _ = PEAK.try_with(|peak| peak.set(peak.get().max(size)));
}

/// The system allocator, noting the size of every block requested on each thread.
struct PeakAlloc;

// SAFETY: every method forwards its arguments unchanged to `System`, so `System`'s guarantees
// hold for the caller. The bookkeeping only reads sizes and sets a const-initialised
// thread-local `Cell<usize>`, which neither allocates, re-enters the allocator nor unwinds.
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` through this allocator, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: `ptr` was allocated by `System` through this allocator, with `layout`; the
        // caller upholds the rest of `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: PeakAlloc = PeakAlloc;

fn corpus_files(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `target`'s check on every file of its corpus. A single allocation may take at most
/// `per_byte` bytes per input byte plus `fixed` bytes.
fn replay(target: &str, per_byte: usize, fixed: usize) {
    let check = fuzz_checks::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|&(_, check)| check)
        .unwrap();
    let files = corpus_files(target);
    assert!(
        files.len() >= FILES_MIN,
        "{target}: only {} corpus files, expected at least {FILES_MIN}",
        files.len()
    );
    let mut worst = (0, PathBuf::new());
    let started = std::time::Instant::now();
    for path in &files {
        let data = std::fs::read(path).unwrap();
        PEAK.with(|peak| peak.set(0));
        let outcome = std::panic::catch_unwind(|| check(&data));
        let peak = PEAK.with(Cell::get);
        if outcome.is_err() {
            let source = (target == "convert").then(|| fuzz_checks::convert_source(&data));
            panic!("{target}: {} panicked (source: {source:?})", path.display());
        }
        let limit = per_byte * data.len() + fixed;
        assert!(
            peak <= limit,
            "{target}: {} ({} bytes) allocated a {peak}-byte block (limit {limit})",
            path.display(),
            data.len()
        );
        if peak > worst.0 {
            worst = (peak, path.clone());
        }
    }
    println!(
        "{target}: {} inputs replayed in {:.2?}; largest block {} bytes ({})",
        files.len(),
        started.elapsed(),
        worst.0,
        worst.1.display()
    );
}

// Binary, base64 and text inputs: every allocation is proportional to the input, except the
// merge's dense scratch array (at most 8,192 counts, 64 KiB, whatever the input), which the
// constant covers. A histogram sized by its bin-count header (65,535 bins) would need 512 KiB
// for its counts alone, far above the limit for any input shorter than 6 KB.
const SMALL_FIXED: usize = 96 << 10;

#[test]
fn decode_binary_corpus() {
    replay("decode_binary", 64, SMALL_FIXED);
}

#[test]
fn decode_base64_corpus() {
    replay("decode_base64", 64, SMALL_FIXED);
}

#[test]
fn parse_text_corpus() {
    replay("parse_text", 64, SMALL_FIXED);
}

/// Conversions are bounded by constants instead: at most `SOURCE_BUCKETS_MAX` source buckets
/// (checked before allocating), and at most `BIN_COUNT_MAX` (46,082) bins out, whose text and
/// JSON forms the round-trip checks build (about 2 MiB at the most).
#[test]
fn convert_corpus() {
    replay("convert", 64, 4 << 20);
}

/// The allocation bound has teeth: a decoder that sized its buffers by the header would fail it.
#[test]
fn allocation_tracking_sees_a_large_block() {
    PEAK.with(|peak| peak.set(0));
    let counts = vec![0u64; usize::from(u16::MAX)];
    assert!(PEAK.with(Cell::get) >= 8 * counts.len());
    // What a 4-byte input whose header says 65,535 bins would cost a header-sized decoder.
    assert!(PEAK.with(Cell::get) > 64 * 4 + SMALL_FIXED);
    drop(counts);
}
