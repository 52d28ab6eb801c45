//! Exemplars (a traced observation of a series: its own labels, a value, a time) as remote
//! write 1.0 and 2.0 send them, kept for `/api/v1/query_exemplars` the way Prometheus's circular
//! exemplar storage keeps them: at most `PER_SERIES_MAX` per series and `EXEMPLARS_MAX` in all,
//! the oldest evicted first; an exemplar older than its series' newest, or equal to it, is not
//! kept (Prometheus's out-of-order and duplicate rules).
//!
//! Kept across restarts in `exemplars.log` in the data directory: CRC'd records appended and
//! fdatasync'ed before the write is acknowledged (only bodies with exemplars pay for it), read
//! back at start up to the first torn record, and rewritten whole (temporary file, fsync,
//! rename) once it holds `REWRITE_FACTOR` times the bound. Format: `FORMAT.md`.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ingest::ExemplarOwned;
use promql::http::{ExemplarSource, KeptExemplar, SeriesExemplars};

/// Exemplars kept per series (the oldest of a series is evicted first).
pub const PER_SERIES_MAX: usize = 16;
/// Exemplars kept in all (Prometheus's `max_exemplars` default).
pub const EXEMPLARS_MAX: usize = 100_000;
/// Bytes of one record's payload; a larger one is not kept (labels are bounded to 128
/// characters, but a series' labels are not).
pub const RECORD_BYTES_MAX: usize = 64 << 10;
/// The log is rewritten from memory once it holds this many times `EXEMPLARS_MAX` records.
const REWRITE_FACTOR: usize = 4;
/// The file in the data directory, and its temporary twin while it is rewritten.
pub const FILE_NAME: &str = "exemplars.log";
const TEMP_NAME: &str = "exemplars.log.tmp";
/// Record kind: one exemplar.
const KIND_EXEMPLAR: u8 = 1;

type Labels = Vec<(String, String)>;

/// One kept exemplar; `seq` orders every exemplar ever kept (global eviction).
#[derive(Clone, Debug)]
struct Kept {
    seq: u64,
    labels: Labels,
    value: f64,
    ts_ms: i64,
}

#[derive(Default)]
struct State {
    series: HashMap<Arc<Labels>, VecDeque<Kept>>,
    /// Every kept exemplar's `seq` and series, oldest first; entries a per-series eviction
    /// removed already are skipped when met.
    order: VecDeque<(u64, Arc<Labels>)>,
    kept: usize,
    next_seq: u64,
    /// Records in the log file.
    records: usize,
}

/// The exemplar store.
pub struct Exemplars {
    path: Option<PathBuf>,
    state: Mutex<State>,
}

impl Exemplars {
    /// The store kept in `data_dir`: what the log holds, up to its first torn or bad record (cut
    /// off there). A log that cannot be read is reported and started over: exemplars are advice.
    pub fn open(data_dir: &Path) -> Exemplars {
        let path = data_dir.join(FILE_NAME);
        let mut state = State::default();
        match std::fs::read(&path) {
            Ok(bytes) => {
                let good = replay(&bytes, &mut state);
                if good < bytes.len() {
                    tracing::warn!(file = %path.display(), at = good, "exemplar log cut at a torn record");
                    if let Err(e) = truncate(&path, good) {
                        tracing::warn!(file = %path.display(), error = %e, "exemplar log not cut");
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "exemplar log unreadable; starting over")
            }
        }
        Exemplars {
            path: Some(path),
            state: Mutex::new(state),
        }
    }

    /// Keeps what a body carried, durably; how many were kept.
    pub fn record(&self, exemplars: &[ExemplarOwned]) -> usize {
        if exemplars.is_empty() {
            return 0;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut log = Vec::new();
        let mut kept = 0usize;
        for e in exemplars {
            let series = sorted(&e.series);
            let labels = sorted(&e.labels);
            let start = log.len();
            encode(&mut log, &series, &labels, e.value, e.ts_ms);
            if log.len() - start - 8 > RECORD_BYTES_MAX || !state.keep(series, labels, e) {
                log.truncate(start);
                continue;
            }
            kept += 1;
        }
        state.records += kept;
        if let Some(path) = &self.path {
            let rewrite = state.records > REWRITE_FACTOR * EXEMPLARS_MAX;
            let done = if rewrite {
                rewrite_log(path, &state)
            } else {
                append(path, &log)
            };
            match done {
                Ok(()) if rewrite => state.records = state.kept,
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "exemplar log not written")
                }
            }
        }
        kept
    }
}

impl State {
    /// Keeps one exemplar of `series`; `false` for one out of order or a duplicate.
    fn keep(&mut self, series: Labels, labels: Labels, e: &ExemplarOwned) -> bool {
        let key = Arc::new(series);
        let seq = self.next_seq;
        let list = self.series.entry(key.clone()).or_default();
        if let Some(newest) = list.back() {
            let duplicate = newest.ts_ms == e.ts_ms
                && newest.value.to_bits() == e.value.to_bits()
                && newest.labels == labels;
            if e.ts_ms < newest.ts_ms || duplicate {
                return false;
            }
        }
        list.push_back(Kept {
            seq,
            labels,
            value: e.value,
            ts_ms: e.ts_ms,
        });
        self.next_seq += 1;
        self.kept += 1;
        if list.len() > PER_SERIES_MAX {
            list.pop_front();
            self.kept -= 1;
        }
        self.order.push_back((seq, key));
        while self.kept > EXEMPLARS_MAX {
            self.evict_oldest();
        }
        // Entries evicted per series pile up in `order`: drop them when they outnumber the kept.
        if self.order.len() > 2 * EXEMPLARS_MAX {
            let series = &self.series;
            self.order.retain(|(seq, key)| {
                series
                    .get(key)
                    .is_some_and(|l| l.iter().any(|k| k.seq == *seq))
            });
        }
        debug_assert!(self.kept <= EXEMPLARS_MAX);
        true
    }

    fn evict_oldest(&mut self) {
        while let Some((seq, key)) = self.order.pop_front() {
            let Some(list) = self.series.get_mut(&key) else {
                continue;
            };
            if list.front().is_some_and(|k| k.seq == seq) {
                list.pop_front();
                self.kept -= 1;
                if list.is_empty() {
                    self.series.remove(&key);
                }
                return;
            }
        }
    }
}

fn sorted(labels: &[(String, String)]) -> Labels {
    let mut out = labels.to_vec();
    out.sort();
    out
}

/// One record: `len u32 LE | crc32c u32 LE | payload` (see `FORMAT.md`).
fn encode(out: &mut Vec<u8>, series: &Labels, labels: &Labels, value: f64, ts_ms: i64) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    out.push(KIND_EXEMPLAR);
    out.extend_from_slice(&ts_ms.to_le_bytes());
    out.extend_from_slice(&value.to_bits().to_le_bytes());
    for list in [series, labels] {
        put_len(out, list.len());
        for (name, value) in list {
            put_len(out, name.len());
            out.extend_from_slice(name.as_bytes());
            put_len(out, value.len());
            out.extend_from_slice(value.as_bytes());
        }
    }
    let len = out.len() - start - 8;
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// A length as u32 LE (the record bound keeps every length far below it).
fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&(len.min(u32::MAX as usize) as u32).to_le_bytes());
}

/// The records of `bytes` into `state`; how many bytes were whole, good records.
fn replay(bytes: &[u8], state: &mut State) -> usize {
    let mut at = 0usize;
    while let Some(header) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let Some(payload) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        if len > RECORD_BYTES_MAX || crc32c::crc32c(payload) != crc {
            break;
        }
        let Some(e) = decode(payload) else {
            break;
        };
        let (series, labels) = (sorted(&e.series), sorted(&e.labels));
        if state.keep(series, labels, &e) {
            state.records += 1;
        }
        at += 8 + len;
    }
    at
}

fn decode(payload: &[u8]) -> Option<ExemplarOwned> {
    let mut r = Reader { bytes: payload };
    if r.take(1)?[0] != KIND_EXEMPLAR {
        return None;
    }
    let ts_ms = i64::from_le_bytes(r.take(8)?.try_into().ok()?);
    let value = f64::from_bits(u64::from_le_bytes(r.take(8)?.try_into().ok()?));
    let series = r.labels()?;
    let labels = r.labels()?;
    r.bytes.is_empty().then_some(ExemplarOwned {
        series,
        labels,
        value,
        ts_ms,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (head, rest) = self.bytes.split_at_checked(n)?;
        self.bytes = rest;
        Some(head)
    }

    fn len(&mut self) -> Option<usize> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize)
    }

    fn text(&mut self) -> Option<String> {
        let n = self.len()?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }

    fn labels(&mut self) -> Option<Labels> {
        let n = self.len()?;
        // Each label is at least 8 bytes: a count past the payload is a bad record.
        if n > self.bytes.len() / 8 {
            return None;
        }
        (0..n).map(|_| Some((self.text()?, self.text()?))).collect()
    }
}

fn append(path: &Path, records: &[u8]) -> std::io::Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(records)?;
    file.sync_data()
}

fn truncate(path: &Path, len: usize) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.set_len(len as u64)?;
    file.sync_all()
}

/// The log rewritten from what is kept, oldest first, so a replay keeps the same.
fn rewrite_log(path: &Path, state: &State) -> std::io::Result<()> {
    let mut all: Vec<(&Arc<Labels>, &Kept)> = state
        .series
        .iter()
        .flat_map(|(s, list)| list.iter().map(move |k| (s, k)))
        .collect();
    all.sort_by_key(|(_, k)| k.seq);
    let mut out = Vec::new();
    for (series, k) in all {
        encode(&mut out, series, &k.labels, k.value, k.ts_ms);
    }
    let temp = path.with_file_name(TEMP_NAME);
    let mut file = std::fs::File::create(&temp)?;
    file.write_all(&out)?;
    file.sync_all()?;
    std::fs::rename(&temp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

impl ExemplarSource for Exemplars {
    fn exemplars(
        &self,
        start_ms: i64,
        end_ms: i64,
        selects: &dyn Fn(&promql::http::LabelPairs) -> bool,
    ) -> Vec<SeriesExemplars> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<SeriesExemplars> = state
            .series
            .iter()
            .filter(|(series, _)| selects(series))
            .filter_map(|(series, list)| {
                let exemplars: Vec<KeptExemplar> = list
                    .iter()
                    .filter(|k| (start_ms..=end_ms).contains(&k.ts_ms))
                    .map(|k| KeptExemplar {
                        labels: k.labels.clone(),
                        value: k.value,
                        ts_ms: k.ts_ms,
                    })
                    .collect();
                (!exemplars.is_empty()).then(|| SeriesExemplars {
                    series: series.as_ref().clone(),
                    exemplars,
                })
            })
            .collect();
        out.sort_by(|a, b| a.series.cmp(&b.series));
        out
    }
}

/// The per-body collection: the server's sink wrapper (`Described`) fills it.
pub fn collect(out: &mut Vec<ExemplarOwned>, exemplar: &ingest::Exemplar<'_>) {
    if out.len() < ingest::EXEMPLARS_PER_BATCH_MAX {
        out.push(exemplar.to_owned());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn ex(series: &str, trace: &str, ts_ms: i64) -> ExemplarOwned {
        ExemplarOwned {
            series: vec![
                ("__name__".into(), series.into()),
                ("job".into(), "a".into()),
            ],
            labels: vec![("trace_id".into(), trace.into())],
            value: ts_ms as f64,
            ts_ms,
        }
    }

    fn all(store: &Exemplars) -> Vec<SeriesExemplars> {
        store.exemplars(i64::MIN, i64::MAX, &|_| true)
    }

    #[test]
    fn bounds_evict_the_oldest_and_survive_a_reopen_and_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let store = Exemplars::open(dir.path());
        // One series past its own bound: its oldest go.
        let many: Vec<_> = (0..PER_SERIES_MAX as i64 + 5)
            .map(|i| ex("a", "t", i))
            .collect();
        assert_eq!(store.record(&many), many.len());
        // Out of order and duplicate: not kept.
        assert_eq!(
            store.record(&[ex("a", "t", 3), many[many.len() - 1].clone()]),
            0
        );
        let got = all(&store);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].exemplars.len(), PER_SERIES_MAX);
        assert_eq!(got[0].exemplars[0].ts_ms, 5);
        // A torn record at the end is cut off; the rest is read back.
        let path = dir.path().join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[9, 0, 0, 0, 1, 2]);
        std::fs::write(&path, &bytes).unwrap();
        let reopened = Exemplars::open(dir.path());
        let again = all(&reopened);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].exemplars.len(), PER_SERIES_MAX);
        assert_eq!(again[0].exemplars[0].ts_ms, 5);
        assert_eq!(std::fs::read(&path).unwrap().len(), bytes.len() - 6);
    }

    #[test]
    fn the_global_bound_evicts_the_oldest_series_first() {
        let store = Exemplars {
            path: None,
            state: Mutex::new(State::default()),
        };
        let n = EXEMPLARS_MAX + 10;
        let batch: Vec<_> = (0..n).map(|i| ex(&format!("s{i}"), "t", 1)).collect();
        assert_eq!(store.record(&batch), n);
        let got = all(&store);
        assert_eq!(got.len(), EXEMPLARS_MAX);
        assert!(!got
            .iter()
            .any(|s| s.series[0].1 == "s0" || s.series[0].1 == "s9"));
        assert!(got.iter().any(|s| s.series[0].1 == "s10"));
    }
}
