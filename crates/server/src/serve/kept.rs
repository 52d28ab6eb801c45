//! Reading buffers kept between request bodies and shared by the blocking-pool threads: a body
//! takes the one returned last, which the processor's caches still hold.
//!
//! Kept per thread instead, every thread that ever parsed a body held its own set (one per
//! concurrent request, up to `WRITERS_MAX`), and each set learned the same remembered
//! prefixes and key splits again (`ingest::httptrap::Scratch`). A body holds its set only while
//! it is read, not while its batch waits for the journal, so a few sets serve many writers.

use std::sync::Mutex;

use super::WRITERS_MAX;

/// Free buffers, most recently returned last; at most `WRITERS_MAX` (one per concurrent write).
pub struct Kept<T> {
    free: Mutex<Vec<T>>,
}

impl<T: Default> Kept<T> {
    pub const fn new() -> Kept<T> {
        Kept {
            free: Mutex::new(Vec::new()),
        }
    }

    /// The buffers returned last, or new ones.
    pub fn take(&self) -> T {
        // A poisoned lock (a panic while it was held) only loses the kept buffers.
        let taken = self.free.lock().ok().and_then(|mut free| free.pop());
        taken.unwrap_or_default()
    }

    /// Keeps `buffers` for the next body (dropped when `WRITERS_MAX` are kept already).
    pub fn give(&self, buffers: T) {
        if let Ok(mut free) = self.free.lock() {
            if free.len() < WRITERS_MAX {
                free.push(buffers);
            }
            assert!(free.len() <= WRITERS_MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffers_returned_last_are_taken_first() {
        let kept: Kept<Vec<u8>> = Kept::new();
        assert!(kept.take().is_empty(), "nothing kept yet: new buffers");
        kept.give(vec![1]);
        kept.give(vec![2]);
        assert_eq!(kept.take(), vec![2]);
        assert_eq!(kept.take(), vec![1]);
        assert!(kept.take().is_empty());
    }

    #[test]
    fn at_most_one_set_per_concurrent_writer_is_kept() {
        let kept: Kept<Vec<usize>> = Kept::new();
        for i in 0..WRITERS_MAX + 5 {
            kept.give(vec![i]);
        }
        let mut taken = 0;
        while !kept.take().is_empty() {
            taken += 1;
        }
        assert_eq!(taken, WRITERS_MAX);
    }
}
