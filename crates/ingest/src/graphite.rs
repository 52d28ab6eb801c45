//! Graphite plaintext: `path[;tag=value…] value [timestamp_seconds]`, one metric per line.
//! Mapping rules: `FORMAT.md`.

use crate::batch::{
    check_name, check_tag, check_tag_count, Batch, Mode, Options, Reason, Sample, TagList, Value,
};
use crate::feed::Feed;
use crate::lines::{self, finite, offset_in, LineError};
use crate::sink::Sink;

/// Parses a chunk of whole lines. Bad lines are rejected with line and column; good ones kept.
pub fn parse(input: &[u8], options: &Options) -> Batch {
    let mut batch = Batch::default();
    parse_into(input, options, &mut batch);
    batch
}

/// [`parse`] into any sink.
pub fn parse_into<S: Sink>(input: &[u8], options: &Options, sink: &mut S) {
    let mut feed = Feed::new(sink);
    for (line_no, bytes) in lines::lines(input) {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match lines::utf8(bytes).and_then(|line| parse_line(line, options)) {
            Ok(sample) => {
                if !feed.push(sample, || lines::at(line_no, 0)) {
                    break;
                }
            }
            Err((offset, reason)) => feed.reject(|| lines::at(line_no, offset), reason),
        }
    }
}

fn parse_line(line: &str, options: &Options) -> Result<Sample, LineError> {
    let mut fields = line.split_ascii_whitespace();
    let (Some(path), Some(value)) = (fields.next(), fields.next()) else {
        let expected = "a path and a value separated by a space";
        return Err((line.len(), Reason::Syntax { expected }));
    };
    let ts = fields.next();
    if let Some(extra) = fields.next() {
        let expected = "at most path, value and timestamp";
        return Err((offset_in(line, extra), Reason::Syntax { expected }));
    }
    let (name, tags) = path_and_tags(path).map_err(|r| (offset_in(line, path), r))?;
    let value = finite(value).map_err(|r| (offset_in(line, value), r))?;
    let ts_ms = match ts {
        None => None,
        Some(ts) => timestamp(ts, options).map_err(|r| (offset_in(line, ts), r))?,
    };
    Ok(Sample {
        name: name.to_owned(),
        tags: tags.into(),
        ts_ms,
        value: Value::Numeric(value),
        mode: Mode::Set,
    })
}

fn path_and_tags(path: &str) -> Result<(&str, TagList), Reason> {
    let mut parts = path.split(';');
    let name = parts.next().unwrap_or("");
    check_name(name)?;
    let mut tags = Vec::new();
    for part in parts {
        let (category, value) = part
            .split_once('=')
            .ok_or_else(|| Reason::bad_tag("expected tag=value", part))?;
        check_tag(category, value)?;
        tags.push((category.to_owned(), value.to_owned()));
        check_tag_count(tags.len())?;
    }
    Ok((name, tags))
}

/// Seconds since the epoch, integer or decimal; negative (carbon's `-1`) means "at receipt".
fn timestamp(text: &str, options: &Options) -> Result<Option<i64>, Reason> {
    let ts_ms = match text.parse::<i64>() {
        Ok(seconds) => seconds.saturating_mul(1000),
        Err(_) => {
            let seconds = finite(text)?;
            // Saturating float-to-int: an absurd value stays absurd and the window rejects it.
            (seconds * 1000.0).round() as i64
        }
    };
    if ts_ms < 0 {
        return Ok(None);
    }
    options.check_ts(ts_ms).map(Some)
}
