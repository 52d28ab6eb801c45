//! Metric family metadata (type, help, unit) as senders describe it — remote write 1.0's
//! `metadata`, 2.0's per-series metadata — kept for `/api/v1/metadata`. Bounded by family
//! count and text size; kept across restarts in `metadata.json` in the data directory, written
//! whole (temporary file, then rename) when an entry changes. Format: `FORMAT.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ingest::{Metadata, MetadataOwned, Sink};
use promql::http::{FamilyMetadata, MetadataSource};

/// Families kept; a new family past it is not kept (an existing one is still updated).
pub const FAMILIES_MAX: usize = 100_000;
/// Bytes of help text kept per family (cut at a character boundary).
pub const HELP_BYTES_MAX: usize = 1024;
/// Bytes of a family name or unit kept; longer ones are not kept.
pub const NAME_BYTES_MAX: usize = 256;
/// The file in the data directory.
pub const FILE_NAME: &str = "metadata.json";

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Entry {
    #[serde(rename = "type")]
    kind: String,
    help: String,
    unit: String,
}

/// The families, by name.
pub struct Registry {
    path: Option<PathBuf>,
    families: Mutex<BTreeMap<String, Entry>>,
}

impl Registry {
    /// The registry kept in `data_dir` (what the file holds; a file that cannot be read is
    /// reported and started over: metadata is advisory).
    pub fn open(data_dir: &Path) -> Registry {
        let path = data_dir.join(FILE_NAME);
        let families = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<BTreeMap<String, Entry>>(&bytes)
                .unwrap_or_else(|e| {
                    tracing::warn!(file = %path.display(), error = %e, "metric metadata file unreadable; starting over");
                    BTreeMap::new()
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "metric metadata file unreadable; starting over");
                BTreeMap::new()
            }
        };
        let mut families = families;
        while families.len() > FAMILIES_MAX {
            families.pop_last();
        }
        Registry {
            path: Some(path),
            families: Mutex::new(families),
        }
    }

    /// Records what a body described; writes the file when anything changed.
    pub fn record(&self, described: &[MetadataOwned]) {
        if described.is_empty() {
            return;
        }
        let mut families = self.families.lock().unwrap_or_else(|p| p.into_inner());
        let mut changed = false;
        for m in described {
            if m.family.len() > NAME_BYTES_MAX || m.unit.len() > NAME_BYTES_MAX {
                continue;
            }
            let entry = Entry {
                kind: m.kind.name().to_owned(),
                help: cut(&m.help, HELP_BYTES_MAX).to_owned(),
                unit: m.unit.clone(),
            };
            let room = families.len() < FAMILIES_MAX;
            match families.get_mut(&m.family) {
                Some(old) if *old == entry => {}
                Some(old) => {
                    *old = entry;
                    changed = true;
                }
                None if room => {
                    families.insert(m.family.clone(), entry);
                    changed = true;
                }
                None => {}
            }
        }
        if changed {
            if let Some(path) = &self.path {
                if let Err(e) = save(path, &families) {
                    tracing::warn!(file = %path.display(), error = %e, "metric metadata not saved");
                }
            }
        }
    }
}

/// The whole map to a temporary file, synced, renamed over the file: a crash leaves the old
/// file or the new one, never half of one.
fn save(path: &Path, families: &BTreeMap<String, Entry>) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec(families).map_err(std::io::Error::other)?;
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// `text` cut to at most `max` bytes at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl MetadataSource for Registry {
    fn families(&self, metric: Option<&str>) -> Vec<FamilyMetadata> {
        let families = self.families.lock().unwrap_or_else(|p| p.into_inner());
        let to = |(family, e): (&String, &Entry)| FamilyMetadata {
            family: family.clone(),
            kind: e.kind.clone(),
            help: e.help.clone(),
            unit: e.unit.clone(),
        };
        match metric {
            Some(m) if !m.is_empty() => families.get_key_value(m).map(to).into_iter().collect(),
            _ => families.iter().map(to).collect(),
        }
    }
}

/// A sink that passes everything to `inner` and keeps the metadata and exemplars a body
/// carries.
pub struct Described<'s, S: ?Sized> {
    pub inner: &'s mut S,
    pub metadata: &'s mut Vec<MetadataOwned>,
    pub exemplars: &'s mut Vec<ingest::ExemplarOwned>,
}

impl<S: Sink + ?Sized> Sink for Described<'_, S> {
    fn document(&mut self, index: usize, metrics: usize) {
        self.inner.document(index, metrics)
    }

    fn known_series(&mut self, raw: ingest::RawSeries<'_>) -> Option<ingest::Known> {
        self.inner.known_series(raw)
    }

    fn series(&mut self, series: &ingest::Series<'_>) -> bool {
        self.inner.series(series)
    }

    #[inline]
    fn sample(&mut self, series: &ingest::Series<'_>, point: ingest::Point<'_>) -> bool {
        self.inner.sample(series, point)
    }

    fn reject(
        &mut self,
        location: &dyn Fn() -> String,
        reason: ingest::Reason,
        scope: ingest::Scope,
    ) {
        if scope == ingest::Scope::Whole {
            self.metadata.clear();
            self.exemplars.clear();
        }
        self.inner.reject(location, reason, scope)
    }

    fn reject_point(
        &mut self,
        series: &ingest::Series<'_>,
        at: ingest::PointAt,
        reason: ingest::Reason,
    ) {
        self.inner.reject_point(series, at, reason)
    }

    fn metadata(&mut self, metadata: &Metadata<'_>) {
        if self.metadata.len() < ingest::batch::METADATA_PER_BATCH_MAX {
            self.metadata.push(metadata.to_owned());
        }
    }

    fn exemplar(&mut self, exemplar: &ingest::Exemplar<'_>) {
        super::exemplars::collect(self.exemplars, exemplar);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use ingest::MetricType;

    fn described(family: &str, kind: MetricType, help: &str) -> MetadataOwned {
        MetadataOwned {
            family: family.to_owned(),
            kind,
            help: help.to_owned(),
            unit: String::new(),
        }
    }

    #[test]
    fn kept_across_a_reopen_and_bounded_help() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::open(dir.path());
        let long = "é".repeat(HELP_BYTES_MAX);
        registry.record(&[
            described("up", MetricType::Gauge, "Target up."),
            described("rpc_seconds", MetricType::Histogram, &long),
        ]);
        let reopened = Registry::open(dir.path());
        let families = reopened.families(None);
        assert_eq!(families.len(), 2);
        assert_eq!(families[0].family, "rpc_seconds");
        assert_eq!(families[0].kind, "histogram");
        assert_eq!(families[0].help.len(), HELP_BYTES_MAX);
        assert_eq!(reopened.families(Some("up"))[0].help, "Target up.");
        assert!(reopened.families(Some("down")).is_empty());
    }
}
