//! NAD-compatible plugins: every executable file in the plugins directory runs once a period
//! (or on its own `[plugin.<name>] interval_s`) with a timeout (half a period, at most 5 s, or
//! its own `timeout_s`), and what it prints becomes samples tagged `plugin:<file name>`:
//! - lines `name<TAB>type<TAB>value` (types `i I l L n` numeric, `s` text; `name<TAB>type`
//!   alone is a null), or
//! - one JSON object in httptrap form (`{"a": 1, "lat": {"_type": "h", "_value": ["H[1]=2"]}}`).
//!
//! A plugin that prints a blank line ends a set: it is long-running, is never killed for time,
//! and each set replaces the one before (it is started again when it exits). A plugin that
//! ends no set before its timeout is killed. Timeouts, failures and garbage lines are counted
//! as `plugin_*` samples and logged; nothing a plugin does stops the agent.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use broker::record::{self, Mode, Sample, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::collect::Out;
use crate::config::PluginSettings;

/// Plugins run, at most (the first by name).
pub const PLUGINS_MAX: usize = 64;
/// Lines of one set kept, at most; longer sets are cut and the rest counted as garbage.
pub const PLUGIN_LINES_MAX: usize = 10_000;
/// Longest line read from a plugin.
pub const PLUGIN_LINE_BYTES_MAX: usize = 64 << 10;
/// A one-shot plugin's run, at most.
pub const PLUGIN_TIMEOUT_MS_MAX: u64 = 5_000;

/// A line of a plugin's output.
enum Line {
    Text(String),
    /// Longer than `PLUGIN_LINE_BYTES_MAX`, or not UTF-8.
    Garbage,
}

/// A plugin's stdout as lines of at most `PLUGIN_LINE_BYTES_MAX` bytes: the rest of a longer
/// line is read and dropped, so one endless line cannot grow the agent's memory.
struct Lines<R> {
    reader: BufReader<R>,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    async fn next(&mut self) -> std::io::Result<Option<Line>> {
        self.buf.clear();
        let mut too_long = false;
        loop {
            let chunk = self.reader.fill_buf().await?;
            if chunk.is_empty() {
                if self.buf.is_empty() && !too_long {
                    return Ok(None);
                }
                break;
            }
            let newline = chunk.iter().position(|&b| b == b'\n');
            let take = newline.map_or(chunk.len(), |i| i + 1);
            let room = PLUGIN_LINE_BYTES_MAX + 1 - self.buf.len().min(PLUGIN_LINE_BYTES_MAX + 1);
            too_long |= take > room;
            self.buf.extend_from_slice(&chunk[..take.min(room)]);
            self.reader.consume(take);
            if newline.is_some() {
                break;
            }
        }
        while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
            self.buf.pop();
        }
        if too_long || self.buf.len() > PLUGIN_LINE_BYTES_MAX {
            return Ok(Some(Line::Garbage));
        }
        Ok(Some(
            match String::from_utf8(std::mem::take(&mut self.buf)) {
                Ok(text) => Line::Text(text),
                Err(_) => Line::Garbage,
            },
        ))
    }
}

/// One plugin's latest state.
#[derive(Default)]
struct State {
    /// The latest complete set (already parsed; stamped when emitted).
    samples: Vec<Sample>,
    /// A run (or a long-running process) is going.
    running: bool,
    /// When the latest run started (a plugin with its own interval waits that long).
    started: Option<Instant>,
    long_running: bool,
    ok: bool,
    runs: u64,
    timeouts: u64,
    failures: u64,
    garbage_lines: u64,
}

#[derive(Clone)]
pub struct Plugins {
    dir: Option<PathBuf>,
    period: Duration,
    /// A run's timeout unless the plugin has its own.
    timeout: Duration,
    settings: Arc<BTreeMap<String, PluginSettings>>,
    states: Arc<Mutex<BTreeMap<String, State>>>,
}

fn executables(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let meta = std::fs::metadata(e.path()).ok()?;
            let runnable = meta.is_file() && meta.permissions().mode() & 0o111 != 0;
            (runnable && !name.starts_with('.')).then(|| (name, e.path()))
        })
        .collect();
    out.sort();
    out.truncate(PLUGINS_MAX);
    out
}

/// The name a plugin's samples are tagged with: its file name less an extension.
fn plugin_name(file: &str) -> String {
    let stem = file.split('.').next().unwrap_or(file);
    stem.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Parses one set of output: samples and the count of lines that were not metrics.
pub fn parse_set(lines: &[String], now_ms: i64) -> (Vec<Sample>, u64) {
    let text = lines.join("\n");
    if text.trim_start().starts_with('{') {
        let batch = ingest::httptrap::parse(text.as_bytes(), &ingest::Options::at(now_ms));
        let samples = if batch.stopped() {
            Vec::new()
        } else {
            batch
                .samples
                .iter()
                .map(|s| record::from_ingest(s, now_ms))
                .collect()
        };
        return (samples, batch.rejected_total as u64);
    }
    let mut samples = Vec::new();
    let mut garbage = 0;
    for line in lines {
        match parse_line(line) {
            Some((name, value)) => samples.push(Sample {
                name: name.to_owned(),
                tags: Vec::new(),
                ts_ms: now_ms,
                value,
                mode: Mode::Set,
            }),
            None => garbage += 1,
        }
    }
    (samples, garbage)
}

/// `name<TAB>type<TAB>value`, or `name<TAB>type` for a null.
fn parse_line(line: &str) -> Option<(&str, Value)> {
    let mut f = line.splitn(3, '\t');
    let name = f
        .next()
        .filter(|n| !n.is_empty() && n.len() <= ingest::NAME_BYTES_MAX)?;
    let kind = f.next()?;
    let Some(text) = f.next() else {
        return ["i", "I", "l", "L", "n", "s"]
            .contains(&kind)
            .then_some((name, Value::Null));
    };
    let value = match kind {
        "i" | "I" | "l" | "L" | "n" => {
            let v: f64 = text.trim().parse().ok()?;
            v.is_finite().then_some(Value::Numeric(v))?
        }
        "s" => Value::Text(text.to_owned()),
        _ => return None,
    };
    Some((name, value))
}

impl Plugins {
    pub fn new(
        dir: Option<PathBuf>,
        period: Duration,
        settings: BTreeMap<String, PluginSettings>,
    ) -> Plugins {
        Plugins {
            dir,
            period,
            timeout: (period / 2).min(Duration::from_millis(PLUGIN_TIMEOUT_MS_MAX)),
            settings: Arc::new(settings),
            states: Arc::new(Mutex::new(BTreeMap::new())),
        }
    }

    fn timeout_of(&self, name: &str) -> Duration {
        self.settings
            .get(name)
            .and_then(|s| s.timeout)
            .unwrap_or(self.timeout)
    }

    /// Whether a plugin that last started at `started` is due: its interval has passed, less
    /// half a period so a run is not put off a whole period by the ticks' jitter.
    fn due(&self, name: &str, started: Option<Instant>, now: Instant) -> bool {
        let interval = self.settings.get(name).and_then(|s| s.interval);
        match (interval, started) {
            (Some(interval), Some(started)) => {
                now.saturating_duration_since(started) + self.period / 2 >= interval
            }
            _ => true,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<String, State>) -> R) -> R {
        f(&mut self.states.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Starts a run of every plugin that is due and not already running (called once a
    /// period).
    pub fn start_runs(&self) {
        let Some(dir) = &self.dir else { return };
        let found = executables(dir);
        self.with(|states| states.retain(|k, _| found.iter().any(|(n, _)| plugin_name(n) == *k)));
        let now = Instant::now();
        for (file, path) in found {
            let name = plugin_name(&file);
            let start = self.with(|states| {
                let s = states.entry(name.clone()).or_default();
                if s.running || !self.due(&name, s.started, now) {
                    return false;
                }
                s.running = true;
                s.started = Some(now);
                true
            });
            if start {
                tokio::spawn(self.clone().run(name, path));
            }
        }
    }

    async fn run(self, name: String, path: PathBuf) {
        let child = tokio::process::Command::new(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(plugin = %name, error = %e, "plugin could not start");
                return self.finish(&name, |s| s.failures += 1);
            }
        };
        let Some(stdout) = child.stdout.take() else {
            return self.finish(&name, |s| s.failures += 1);
        };
        let mut lines = Lines {
            reader: BufReader::new(stdout),
            buf: Vec::new(),
        };
        let timeout = self.timeout_of(&name);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut set: Vec<String> = Vec::new();
        let mut long_running = false;
        loop {
            let next = if long_running {
                lines.next().await
            } else {
                match tokio::time::timeout_at(deadline, lines.next()).await {
                    Ok(r) => r,
                    Err(_) => {
                        tracing::warn!(plugin = %name, "plugin timed out; killed");
                        let _ = child.kill().await;
                        return self.finish(&name, |s| {
                            s.timeouts += 1;
                            s.ok = false;
                            s.samples.clear();
                        });
                    }
                }
            };
            match next {
                Ok(Some(Line::Text(line))) if line.trim().is_empty() => {
                    if !set.is_empty() {
                        long_running = true;
                        self.commit(&name, &std::mem::take(&mut set), true);
                    }
                }
                Ok(Some(Line::Text(line))) if set.len() < PLUGIN_LINES_MAX => set.push(line),
                Ok(Some(_)) => {
                    self.with(|s| s.entry(name.clone()).or_default().garbage_lines += 1);
                }
                Ok(None) | Err(_) => break,
            }
        }
        let status = tokio::time::timeout(timeout, child.wait()).await;
        let success = matches!(status, Ok(Ok(s)) if s.success());
        if !set.is_empty() || !long_running {
            self.commit(&name, &set, false);
        }
        if !success {
            tracing::warn!(plugin = %name, "plugin failed (exit status not 0)");
            let _ = child.kill().await;
        }
        self.finish(&name, |s| {
            if !success {
                s.failures += 1;
            }
            s.ok = success;
        });
    }

    /// A complete set replaces the plugin's samples (`long_running`: it ended with a blank
    /// line and the plugin goes on).
    fn commit(&self, name: &str, set: &[String], long_running: bool) {
        let now = (clock::wall() / 1_000_000) as i64;
        let (samples, garbage) = parse_set(set, now);
        if garbage > 0 {
            tracing::warn!(plugin = %name, lines = garbage, "plugin printed lines that are not metrics");
        }
        self.with(|states| {
            let s = states.entry(name.to_owned()).or_default();
            s.samples = samples;
            s.garbage_lines += garbage;
            s.long_running = long_running;
            s.ok = true;
            s.runs += 1;
        });
    }

    fn finish(&self, name: &str, f: impl FnOnce(&mut State)) {
        self.with(|states| {
            let s = states.entry(name.to_owned()).or_default();
            f(s);
            s.running = false;
        });
    }

    /// Every plugin's latest samples and its own counters, tagged with the host and plugin.
    pub fn emit(&self, host: &str, out: &mut Out) {
        self.with(|states| {
            for (name, s) in states.iter() {
                let tags = vec![
                    ("host".to_owned(), host.to_owned()),
                    ("plugin".to_owned(), name.clone()),
                ];
                for sample in &s.samples {
                    let mut t = tags.clone();
                    t.extend(
                        sample
                            .tags
                            .iter()
                            .filter(|(c, _)| c != "host" && c != "plugin")
                            .cloned(),
                    );
                    out.samples.push(Sample {
                        name: sample.name.clone(),
                        tags: t,
                        ts_ms: out.ts_ms,
                        value: sample.value.clone(),
                        mode: sample.mode,
                    });
                }
                out.num("plugin_ok", tags.clone(), if s.ok { 1.0 } else { 0.0 });
                out.num(
                    "plugin_long_running",
                    tags.clone(),
                    f64::from(u8::from(s.long_running)),
                );
                out.num("plugin_runs_total", tags.clone(), s.runs as f64);
                out.num("plugin_timeouts_total", tags.clone(), s.timeouts as f64);
                out.num("plugin_failures_total", tags.clone(), s.failures as f64);
                out.num("plugin_garbage_lines_total", tags, s.garbage_lines as f64);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tab_lines_and_garbage() {
        let lines: Vec<String> = [
            "a\tL\t5",
            "b\tn\t1.5",
            "c\ts\thello world",
            "d\ti",
            "junk",
            "e\tx\t1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (samples, garbage) = parse_set(&lines, 7);
        assert_eq!(samples.len(), 4);
        assert_eq!(samples[0].value, Value::Numeric(5.0));
        assert_eq!(samples[2].value, Value::Text("hello world".into()));
        assert_eq!(samples[3].value, Value::Null);
        assert_eq!(garbage, 2);
    }

    #[test]
    fn json_with_histograms() {
        let lines =
            vec![r#"{"lat": {"_type": "h", "_value": ["H[1.0e+00]=3"]}, "n": 2}"#.to_owned()];
        let (samples, garbage) = parse_set(&lines, 7);
        assert_eq!((samples.len(), garbage), (2, 0));
        let Value::Histogram(h) = &samples[0].value else {
            panic!("not a histogram")
        };
        assert_eq!(h.sample_count(), 3);
    }
}
