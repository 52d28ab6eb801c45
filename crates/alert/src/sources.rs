//! Push sources and the built-in rule that notices one going silent.
//!
//! A *source* is what identifies a sender in the tags the server writes (first that applies):
//! httptrap's `__check` tag; remote write's `job` + `instance`; OTLP's `service.name` +
//! `service.instance.id`; for senders that name nobody on the wire (statsd, Graphite, Influx)
//! the `host` tag. A stream with none of these names no sender and belongs to no source: on its
//! own it is one metric, and a metric that is only sent when something happens (a statsd
//! counter of rare errors) would be called silent after every quiet spell; its absence is what
//! an `absent` ruleset is for. Series of the server itself (`strata:self`) and alert history
//! streams are not sources.
//!
//! Each period the tracker groups series it has not seen yet (ids are dense and only grow, so
//! this is incremental), then for every source takes its newest sample time from the index's
//! activity ranges (no data read) and compares the silence with the source's usual interval ×
//! the factor. The usual interval is the median gap of the newest samples of the source's most
//! recently active series, read from the store, relearned hourly.
//!
//! A source is judged only once it has been seen *live*: not silent at some evaluation, or (after
//! a restart) not silent at the last evaluation before it. Data imported or replayed from the past
//! is history, not a sender that stopped: without this, a backfill of yesterday's hosts would page
//! for every one of them at once.

use std::collections::HashMap;

use store::key::StreamKey;
use store::Store;
use store::{Kind as SeriesKind, SeriesId};

use crate::cond::Windowed;
use crate::observe::Obs;

/// Sources judged at most; series of further sources are not grouped (and counted).
pub const SOURCES_MAX: usize = 100_000;
/// New series grouped per period at most (the rest next period).
pub const SERIES_SCAN_PER_CYCLE_MAX: usize = 1_000_000;
/// Newest samples whose gaps give the usual interval.
const INTERVAL_SAMPLES: usize = 16;
/// How often a source's usual interval is learned again.
const RELEARN_MS: i64 = 3_600_000;
/// A source silent longer than this is gone, not silent: no longer judged.
const SEEN_WITHIN_MS: i64 = 86_400_000;

/// The tag categories that name a sender, in the order they are tried.
const IDENTITIES: [&[&str]; 4] = [
    &["__check"],
    &["job", "instance"],
    &["service.name", "service.instance.id"],
    &["host"],
];

struct Source {
    identity: String,
    tags: Vec<(String, String)>,
    series: Vec<SeriesId>,
    interval_ms: Option<i64>,
    learned_at_ms: i64,
    /// Seen live (see the module's text); only armed sources are judged.
    armed: bool,
}

/// Groups series into sources and remembers their usual intervals.
#[derive(Default)]
pub struct Tracker {
    next_id: u32,
    sources: Vec<Source>,
    by_identity: HashMap<String, usize>,
    /// The last evaluation before a restart: a source not silent then is armed.
    resumed_ms: Option<i64>,
    /// Series of sources past `SOURCES_MAX`.
    pub ungrouped: u64,
}

fn tag_pairs(key: &StreamKey) -> Vec<(String, String)> {
    key.tags()
        .iter()
        .map(|t| {
            (
                String::from_utf8_lossy(t.category()).into_owned(),
                String::from_utf8_lossy(t.value()).into_owned(),
            )
        })
        .collect()
}

/// Whether a stream is the server's own (self-monitoring or alert history).
pub fn is_internal(key: &StreamKey) -> bool {
    let name = key.name();
    name == "ALERTS"
        || name.starts_with("ALERTS_")
        || name.starts_with("strata_alert_")
        || key
            .tags()
            .iter()
            .any(|t| t.category() == b"strata" && t.value() == b"self")
}

/// The source a stream belongs to: (identity text, its tags); none when it names no sender.
pub fn source_of(key: &StreamKey) -> Option<(String, Vec<(String, String)>)> {
    let tags = tag_pairs(key);
    IDENTITIES.iter().find_map(|cats| {
        let found: Vec<(String, String)> = cats
            .iter()
            .filter_map(|c| tags.iter().find(|(k, _)| k == c).cloned())
            .collect();
        if found.is_empty() {
            return None;
        }
        let text = found
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect::<Vec<_>>()
            .join(",");
        Some((text, found))
    })
}

/// The median gap between consecutive timestamps (at most the newest `INTERVAL_SAMPLES`).
fn median_gap(ts: &[i64]) -> Option<i64> {
    let tail = &ts[ts.len().saturating_sub(INTERVAL_SAMPLES + 1)..];
    let mut gaps: Vec<i64> = tail
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|g| *g > 0)
        .collect();
    if gaps.is_empty() {
        return None;
    }
    gaps.sort_unstable();
    Some(gaps[gaps.len() / 2])
}

fn timestamps(
    view: &store::View<'_>,
    id: SeriesId,
    kind: SeriesKind,
    start: i64,
    end: i64,
) -> Result<Vec<i64>, String> {
    let e = |x: store::StoreError| x.to_string();
    Ok(match kind {
        SeriesKind::Numeric => view
            .raw_numeric(id, start, end)
            .map_err(e)?
            .iter()
            .map(|p| p.0)
            .collect(),
        SeriesKind::Text => view
            .raw_text(id, start, end)
            .map_err(e)?
            .iter()
            .map(|p| p.0)
            .collect(),
        SeriesKind::Histogram => view
            .raw_histograms(id, start, end)
            .map_err(e)?
            .iter()
            .map(|p| p.0)
            .collect(),
    })
}

impl Tracker {
    /// A tracker for an engine that last evaluated the built-in rule at `resumed_ms` (none: it
    /// never did).
    pub fn resuming(resumed_ms: Option<i64>) -> Tracker {
        Tracker {
            resumed_ms,
            ..Tracker::default()
        }
    }

    /// Groups the series added since the last call.
    fn group_new(&mut self, store: &Store) -> Result<(), String> {
        let index = store.index();
        let count = index.snapshot().map_err(|e| e.to_string())?.series_count();
        let end = count.min(
            self.next_id
                .saturating_add(SERIES_SCAN_PER_CYCLE_MAX as u32),
        );
        for id in self.next_id..end {
            let Some(text) = index.key_text(SeriesId(id)).map_err(|e| e.to_string())? else {
                continue;
            };
            let Ok(key) = StreamKey::parse(&text) else {
                continue;
            };
            if is_internal(&key) {
                continue;
            }
            let Some((identity, tags)) = source_of(&key) else {
                continue;
            };
            let idx = match self.by_identity.get(&identity) {
                Some(&i) => i,
                None if self.sources.len() >= SOURCES_MAX => {
                    self.ungrouped += 1;
                    continue;
                }
                None => {
                    self.sources.push(Source {
                        identity: identity.clone(),
                        tags,
                        series: Vec::new(),
                        interval_ms: None,
                        learned_at_ms: i64::MIN,
                        armed: false,
                    });
                    self.by_identity.insert(identity, self.sources.len() - 1);
                    self.sources.len() - 1
                }
            };
            self.sources[idx].series.push(SeriesId(id));
        }
        self.next_id = end;
        Ok(())
    }

    /// Learns a source's usual interval from its most recently active series.
    fn learn(
        &self,
        store: &Store,
        view: &store::View<'_>,
        rep: SeriesId,
        last: i64,
    ) -> Result<Option<i64>, String> {
        let Some(kind) = store.index().kind_of(rep).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        for lookback in [3_600_000, SEEN_WITHIN_MS] {
            let ts = timestamps(view, rep, kind, last - lookback, last + 1)?;
            if let Some(g) = median_gap(&ts) {
                return Ok(Some(g));
            }
        }
        Ok(None)
    }

    /// One observation per source seen in the last day whose usual interval is known.
    pub fn observe(&mut self, store: &Store, t_ms: i64, factor: f64) -> Result<Vec<Obs>, String> {
        self.group_new(store)?;
        let activities = store
            .index()
            .activities(SeriesId(0), self.next_id as usize)
            .map_err(|e| e.to_string())?;
        let view = store.view().map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for si in 0..self.sources.len() {
            let newest = self.sources[si]
                .series
                .iter()
                .filter_map(|id| {
                    activities
                        .get(id.0 as usize)
                        .copied()
                        .flatten()
                        .map(|a| (a.1, *id))
                })
                .max();
            let Some((last, rep)) = newest else { continue };
            if last < t_ms - SEEN_WITHIN_MS {
                continue;
            }
            let src = &self.sources[si];
            if src.interval_ms.is_none() || t_ms - src.learned_at_ms >= RELEARN_MS {
                let learned = self.learn(store, &view, rep, last)?;
                let src = &mut self.sources[si];
                // Not learned yet (one sample so far): try again next period.
                if learned.is_some() {
                    src.interval_ms = learned;
                    src.learned_at_ms = t_ms;
                }
            }
            let resumed_ms = self.resumed_ms;
            let src = &mut self.sources[si];
            let Some(interval) = src.interval_ms else {
                continue;
            };
            let limit_ms = (interval as f64 * factor).round() as i64;
            let live_at = |t: i64| t.saturating_sub(last) <= limit_ms;
            src.armed = src.armed || live_at(t_ms) || resumed_ms.is_some_and(live_at);
            if !src.armed {
                continue;
            }
            out.push(Obs {
                stream: src.identity.as_str().into(),
                tags: std::sync::Arc::new(src.tags.clone()),
                value: Some(Windowed::Silent {
                    silent_ms: (t_ms - last).max(0),
                    last_seen_ms: last,
                    limit_ms,
                }),
                coverage: 1.0,
            });
        }
        out.sort_by(|a, b| a.stream.cmp(&b.stream));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(t: &str) -> StreamKey {
        StreamKey::parse(t).unwrap()
    }

    #[test]
    fn sources_are_named_by_the_first_identity_that_applies_and_only_by_one() {
        let identity = |k: &str| source_of(&key(k)).map(|s| s.0);
        assert_eq!(
            identity("lat|ST[__check:web-1,host:a]").as_deref(),
            Some("__check:web-1")
        );
        assert_eq!(
            identity("up|ST[instance:h:9090,job:api]").as_deref(),
            Some("job:api,instance:h:9090")
        );
        assert_eq!(identity("req|ST[host:h1]").as_deref(), Some("host:h1"));
        assert_eq!(identity("req"), None, "a stream that names no sender");
        assert_eq!(identity("req|ST[path:/login]"), None);
        assert!(is_internal(&key("ALERTS|ST[alertname:x]")));
        assert!(is_internal(&key("http|ST[strata:self]")));
        assert!(!is_internal(&key("req")));
    }

    #[test]
    fn usual_interval_is_the_median_gap() {
        assert_eq!(median_gap(&[0, 10, 20, 35, 40]), Some(10));
        assert_eq!(median_gap(&[5]), None);
        let long: Vec<i64> = (0..100).map(|i| i * 1000).collect();
        assert_eq!(median_gap(&long), Some(1000));
    }
}
