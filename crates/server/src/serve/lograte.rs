//! Rejected statsd datagrams and Graphite lines logged at most once per `LOG_EVERY_MS` per
//! listener, with how many were rejected since the last line: a sender stuck on a bad line
//! sends it thousands of times a second, and one log line each would drown the log.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Least time between two log lines of one listener's rejections.
pub const LOG_EVERY_MS: i64 = 10_000;
/// Longest example of a rejection quoted in a log line.
const EXAMPLE_BYTES_MAX: usize = 200;

/// One listener's rejections not logged yet.
pub struct Rejections {
    listener: &'static str,
    /// When the last line was logged, ms since the epoch (`i64::MIN` before the first).
    logged_ms: AtomicI64,
    pending: AtomicU64,
}

impl Rejections {
    pub const fn new(listener: &'static str) -> Rejections {
        Rejections {
            listener,
            logged_ms: AtomicI64::new(i64::MIN),
            pending: AtomicU64::new(0),
        }
    }

    /// Notes `count` rejections from `sender` at `now_ms`; logs a line when the last was
    /// `LOG_EVERY_MS` ago or more (then `Some(count logged)`), with `example` as one of them.
    pub fn note(&self, count: u64, now_ms: i64, sender: &str, example: &str) -> Option<u64> {
        if count == 0 {
            return None;
        }
        self.pending.fetch_add(count, Ordering::Relaxed);
        let last = self.logged_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) < LOG_EVERY_MS {
            return None;
        }
        // One thread wins the right to log this period.
        if self
            .logged_ms
            .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let logged = self.pending.swap(0, Ordering::Relaxed);
        let example = cut(example);
        tracing::warn!(
            listener = self.listener,
            rejected = logged,
            last_sender = sender,
            example,
            "{}: {logged} rejected since the last report (at most one report per {} s; all \
             counted in strata_ingest_samples_rejected_total)",
            self.listener,
            LOG_EVERY_MS / 1000
        );
        Some(logged)
    }
}

fn cut(text: &str) -> &str {
    if text.len() <= EXAMPLE_BYTES_MAX {
        return text;
    }
    let mut end = EXAMPLE_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_with_the_count_since_the_last() {
        let r = Rejections::new("statsd");
        assert_eq!(r.note(2, 1_000_000, "a", "x"), Some(2));
        assert_eq!(r.note(3, 1_000_001, "a", "x"), None);
        assert_eq!(r.note(4, 1_005_000, "b", "y"), None);
        assert_eq!(r.note(0, 1_020_000, "b", "y"), None);
        assert_eq!(r.note(1, 1_010_000, "b", "y"), Some(8));
        assert_eq!(cut(&"é".repeat(150)).len(), EXAMPLE_BYTES_MAX);
    }
}
