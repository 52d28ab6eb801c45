//! statsd and DogStatsD: `<name>:<value>[:<value>…]|<type>[|@<rate>][|#k:v,…][|T<seconds>]`,
//! one metric per line, several lines per datagram. Mapping rules: `FORMAT.md`.

use std::collections::{HashMap, HashSet};

use hist::Histogram;

use crate::batch::{
    check_name, check_tag, check_tag_count, Batch, Mode, Options, Reason, Sample, TagList, Tags,
    Value,
};
use crate::feed::Feed;
use crate::lines::{self, finite, offset_in, LineError};
use crate::sink::Sink;

/// Parses one datagram (or a TCP chunk of whole lines). Bad lines are rejected with their line
/// number and column; good lines are kept.
pub fn parse(input: &[u8], options: &Options) -> Batch {
    let mut batch = Batch::default();
    parse_into(input, options, &mut batch);
    batch
}

/// [`parse`] into any sink.
pub fn parse_into<S: Sink>(input: &[u8], options: &Options, sink: &mut S) {
    let mut feed = Feed::new(sink);
    let mut state = State::default();
    for (line_no, bytes) in lines::lines(input) {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line = match lines::utf8(bytes) {
            Ok(line) => line,
            Err((offset, reason)) => {
                feed.reject(|| lines::at(line_no, offset), reason);
                continue;
            }
        };
        match parse_line(line, options, &mut state) {
            Ok(metric) => {
                if !metric.push_into(&mut feed, &mut state, line_no) {
                    break;
                }
            }
            Err((offset, reason)) => feed.reject(|| lines::at(line_no, offset), reason),
        }
    }
}

/// What one batch remembers across its lines.
#[derive(Default)]
struct State<'a> {
    sets: SetMembers,
    /// `#` tag sections already parsed, by their text: a datagram repeats a few tag sets.
    tag_sets: HashMap<&'a str, Tags>,
    no_tags: Tags,
}

/// One parsed line before it becomes samples.
struct Metric<'a> {
    name: &'a str,
    values: &'a str,
    kind: &'a str,
    rate: f64,
    tags: Option<Tags>,
    ts_ms: Option<i64>,
}

fn parse_line<'a>(
    line: &'a str,
    options: &Options,
    state: &mut State<'a>,
) -> Result<Metric<'a>, LineError> {
    if line.starts_with("_e{") || line.starts_with("_sc|") {
        let what = "DogStatsD events and service checks";
        return Err((0, Reason::Unsupported { what }));
    }
    let colon = line.find(':').ok_or((
        line.len(),
        Reason::Syntax {
            expected: "':' after the metric name",
        },
    ))?;
    let name = &line[..colon];
    check_name(name).map_err(|r| (0, r))?;
    let mut sections = line[colon + 1..].split('|');
    let values = sections.next().unwrap_or("");
    let kind = sections.next().ok_or((
        line.len(),
        Reason::Syntax {
            expected: "'|' and a type after the value",
        },
    ))?;
    if !matches!(kind, "c" | "g" | "s" | "ms" | "h" | "d" | "t") {
        let reason = Reason::bad_value("a type c g s ms h d t", kind);
        return Err((offset_in(line, kind), reason));
    }
    let mut metric = Metric {
        name,
        values,
        kind,
        rate: 1.0,
        tags: None,
        ts_ms: None,
    };
    for section in sections {
        metric
            .section(section, options, state)
            .map_err(|r| (offset_in(line, section), r))?;
    }
    Ok(metric)
}

impl<'a> Metric<'a> {
    /// Reads one optional section after the type.
    fn section(
        &mut self,
        section: &'a str,
        options: &Options,
        state: &mut State<'a>,
    ) -> Result<(), Reason> {
        if let Some(rate) = section.strip_prefix('@') {
            self.rate = finite(rate)?;
            if !(self.rate > 0.0 && self.rate <= 1.0) {
                return Err(Reason::bad_value("a sample rate in (0, 1]", rate));
            }
        } else if let Some(text) = section.strip_prefix('#') {
            let tags = match state.tag_sets.get(text) {
                Some(tags) => tags.clone(),
                None => {
                    let tags: Tags = tag_section(text)?.into();
                    state.tag_sets.insert(text, tags.clone());
                    tags
                }
            };
            self.tags = Some(match self.tags.take() {
                None => tags,
                Some(earlier) => {
                    let all: TagList = earlier.iter().chain(tags.iter()).cloned().collect();
                    check_tag_count(all.len())?;
                    all.into()
                }
            });
        } else if let Some(seconds) = section.strip_prefix('T') {
            let seconds: i64 = seconds
                .parse()
                .map_err(|_| Reason::bad_value("T<integer seconds>", seconds))?;
            let ts_ms = seconds.checked_mul(1000).unwrap_or(i64::MAX);
            self.ts_ms = Some(options.check_ts(ts_ms)?);
        } else if !(section.starts_with("c:") || section.starts_with("e:")) {
            // `c:` (container id) and `e:` (external data) are DogStatsD origin detection,
            // which Strata has no use for; anything else is a mistake worth reporting.
            return Err(Reason::bad_value("@rate, #tags or T<seconds>", section));
        }
        Ok(())
    }

    /// Turns the line into samples; false once the batch is full.
    fn push_into<S: Sink>(
        mut self,
        feed: &mut Feed<'_, S>,
        state: &mut State<'_>,
        line_no: usize,
    ) -> bool {
        let location = || lines::at(line_no, 0);
        let tags = self.tags.take().unwrap_or_else(|| state.no_tags.clone());
        let samples = match self.samples(tags, &mut state.sets) {
            Ok(samples) => samples,
            Err(reason) => {
                let offset = self.name.len() + 1;
                feed.reject(|| lines::at(line_no, offset), reason);
                return true;
            }
        };
        samples.into_iter().all(|s| feed.push(s, location))
    }

    fn samples(&self, tags: Tags, sets: &mut SetMembers) -> Result<Vec<Sample>, Reason> {
        let sample = |value, mode| Sample {
            name: self.name.to_owned(),
            tags: tags.clone(),
            ts_ms: self.ts_ms,
            value,
            mode,
        };
        let values = || self.values.split(':');
        let mut out = Vec::new();
        match self.kind {
            "c" => {
                for v in values() {
                    // A tiny rate can push the scaled count past f64.
                    let count = finite(v)? / self.rate;
                    if !count.is_finite() {
                        return Err(Reason::bad_value(
                            "a count that stays finite over its rate",
                            v,
                        ));
                    }
                    out.push(sample(Value::Numeric(count), Mode::Accumulate));
                }
            }
            "g" => {
                for v in values() {
                    let delta = v.starts_with('+') || v.starts_with('-');
                    let mode = if delta { Mode::Accumulate } else { Mode::Set };
                    out.push(sample(Value::Numeric(finite(v)?), mode));
                }
            }
            "s" => {
                for member in values() {
                    if sets.first(self.name, &tags, member) {
                        out.push(sample(Value::Numeric(1.0), Mode::Accumulate));
                    }
                }
            }
            "t" => out.push(sample(Value::Text(self.values.to_owned()), Mode::Set)),
            _ => out.push(sample(Value::Histogram(self.histogram()?), Mode::Set)),
        }
        Ok(out)
    }

    /// `ms`/`h`/`d`: every value is `round(1 / rate)` samples of one histogram.
    fn histogram(&self) -> Result<Histogram, Reason> {
        let count = (1.0 / self.rate).round().max(1.0) as u64;
        let mut histogram = Histogram::new();
        for v in self.values.split(':') {
            histogram.insert_n(finite(v)?, count);
        }
        Ok(histogram)
    }
}

/// Reads `k:v,k2:v2,k3` (no `:` = empty value).
fn tag_section(text: &str) -> Result<TagList, Reason> {
    let mut tags = TagList::new();
    for tag in text.split(',').filter(|t| !t.is_empty()) {
        let (category, value) = tag.split_once(':').unwrap_or((tag, ""));
        check_tag(category, value)?;
        tags.push((category.to_owned(), value.to_owned()));
        check_tag_count(tags.len())?;
    }
    Ok(tags)
}

/// Set members seen in this batch: a set counts each distinct member once per batch.
#[derive(Default)]
struct SetMembers {
    seen: HashSet<(String, Tags, String)>,
}

impl SetMembers {
    fn first(&mut self, name: &str, tags: &Tags, member: &str) -> bool {
        self.seen
            .insert((name.to_owned(), tags.clone(), member.to_owned()))
    }
}
