//! The within-batch mode-combining rule: in a body holding a numeric sample in mode
//! `Accumulate` or `Average`, numeric samples of one stream at one timestamp collapse into one
//! value in input order — `Set` replaces, `Accumulate` adds to the value so far, `Average` is
//! the mean of the `Average` samples (weighted by count, one each) since the last `Set`. Across
//! bodies nothing is combined: each body's value is a sample, and at the same millisecond the
//! later acknowledged batch wins (the store's rule). Without such a sample, the store's own rule
//! within a batch (the last `Set` at a stream and timestamp wins) is the whole rule, and numeric
//! samples go into the batch as they come.

use std::collections::HashMap;

use ingest::Mode;

/// One numeric value being combined at (stream, timestamp).
struct Slot {
    value: f64,
    average_sum: f64,
    average_count: u64,
}

/// The numeric values of a combining body, by canonical key and timestamp, in the order first
/// seen. Bounded by the body's samples.
#[derive(Default)]
pub(crate) struct Slots {
    order: Vec<(String, i64, Slot)>,
    at: HashMap<(String, i64), usize>,
}

impl Slots {
    /// Combines `value` in `mode` into the slot of `key` at `ts_ms`.
    pub(crate) fn add(&mut self, key: &str, ts_ms: i64, value: f64, mode: Mode) {
        // A copy of the key per sample: the combining path is the rare one (`_fl`, statsd-like
        // counters over OTLP), and keys are short.
        let found = self.at.get(&(key.to_owned(), ts_ms)).copied();
        match found {
            Some(i) => combine(&mut self.order[i].2, value, mode),
            None => {
                let mut slot = Slot {
                    value,
                    average_sum: 0.0,
                    average_count: 0,
                };
                if mode == Mode::Average {
                    slot.average_sum = value;
                    slot.average_count = 1;
                }
                self.at.insert((key.to_owned(), ts_ms), self.order.len());
                self.order.push((key.to_owned(), ts_ms, slot));
            }
        }
    }

    /// The combined values, in the order first seen.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (String, i64, f64)> + '_ {
        self.at.clear();
        self.order
            .drain(..)
            .map(|(key, ts_ms, slot)| (key, ts_ms, slot.value))
    }
}

fn combine(slot: &mut Slot, v: f64, mode: Mode) {
    match mode {
        Mode::Set => {
            slot.value = v;
            slot.average_sum = 0.0;
            slot.average_count = 0;
        }
        Mode::Accumulate => slot.value += v,
        Mode::Average => {
            slot.average_sum += v;
            slot.average_count += 1;
            slot.value = slot.average_sum / slot.average_count as f64;
        }
    }
}
