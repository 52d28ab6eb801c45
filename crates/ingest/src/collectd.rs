//! collectd's binary network protocol (the `network` plugin, UDP port 25826): one datagram is a
//! sequence of parts `type u16 BE, length u16 BE (header included), payload`. String parts
//! (host, plugin, plugin instance, type, type instance) and time/interval parts set the state
//! the following `values` parts are read with; each `values` part is one value list.
//!
//! Mapping (also in `FORMAT.md`): a value list of plugin `P` and type `T` becomes series named
//! `collectd.P.T` with tags `host`, `plugin_instance` and `type_instance` (each only when
//! non-empty) and, for a type of several values, `ds` naming the value: the types.db name for
//! the common types in [`DS_NAMES`], the value's index otherwise (data-source names are not on
//! the wire). GAUGE is a `Set`; COUNTER and DERIVE are running totals stored as they come
//! (`Set`, the store's counter increase reads them, as a Prometheus counter); ABSOLUTE is the
//! count since the last report (`Accumulate`).
//!
//! A datagram that is cut, over-long or malformed anywhere is refused whole (nothing of it is
//! handed over); a signed or encrypted one is refused whole as unsupported. A value list whose
//! names or time do not pass the crate's checks is rejected alone.

use crate::batch::{check_name, check_tag, Batch, Mode, Options, Reason, Sample, TagList, Value};
use crate::feed::Feed;
use crate::sink::Sink;

/// Longest datagram read: a UDP payload's maximum. collectd sends 1452 bytes by default.
pub const DATAGRAM_BYTES_MAX: usize = 65_535;
/// Bytes of a part's header: type and length, both u16 big-endian.
const PART_HEADER_BYTES: usize = 4;
/// Bytes of a numeric (time, interval) part: header and a u64.
const NUMERIC_PART_BYTES: usize = 12;
/// Bytes of one value in a `values` part: its type byte and 8 bytes.
const VALUE_BYTES: usize = 9;

const PART_HOST: u16 = 0x0000;
const PART_TIME: u16 = 0x0001;
const PART_PLUGIN: u16 = 0x0002;
const PART_PLUGIN_INSTANCE: u16 = 0x0003;
const PART_TYPE: u16 = 0x0004;
const PART_TYPE_INSTANCE: u16 = 0x0005;
const PART_VALUES: u16 = 0x0006;
const PART_INTERVAL: u16 = 0x0007;
const PART_TIME_HR: u16 = 0x0008;
const PART_INTERVAL_HR: u16 = 0x0009;
const PART_MESSAGE: u16 = 0x0100;
const PART_SEVERITY: u16 = 0x0101;
const PART_SIGNATURE: u16 = 0x0200;
const PART_ENCRYPTION: u16 = 0x0210;

const DS_COUNTER: u8 = 0;
const DS_GAUGE: u8 = 1;
const DS_DERIVE: u8 = 2;
const DS_ABSOLUTE: u8 = 3;

/// types.db names of the values of common multi-value types (collectd 5's `types.db`), for the
/// `ds` tag. A type not here, or sent with another number of values, gets indices.
pub const DS_NAMES: &[(&str, &[&str])] = &[
    ("load", &["shortterm", "midterm", "longterm"]),
    ("if_octets", &["rx", "tx"]),
    ("if_packets", &["rx", "tx"]),
    ("if_errors", &["rx", "tx"]),
    ("if_dropped", &["rx", "tx"]),
    ("io_octets", &["rx", "tx"]),
    ("io_packets", &["rx", "tx"]),
    ("node_octets", &["rx", "tx"]),
    ("disk_octets", &["read", "write"]),
    ("disk_ops", &["read", "write"]),
    ("disk_time", &["read", "write"]),
    ("disk_merged", &["read", "write"]),
    ("disk_io_time", &["io_time", "weighted_io_time"]),
    ("ps_disk_octets", &["read", "write"]),
    ("ps_disk_ops", &["read", "write"]),
    ("ps_cputime", &["user", "syst"]),
    ("ps_pagefaults", &["minflt", "majflt"]),
    ("ps_count", &["processes", "threads"]),
    ("vmpage_faults", &["minflt", "majflt"]),
    ("vmpage_io", &["in", "out"]),
];

/// Name prefix of every series.
const NAME_PREFIX: &str = "collectd";

/// Parses one datagram.
pub fn parse(input: &[u8], options: &Options) -> Batch {
    let mut batch = Batch::default();
    parse_into(input, options, &mut batch);
    batch
}

/// [`parse`] into any sink. The whole datagram is read before anything is handed over, so a
/// malformed one is refused whole without a sample reaching the sink.
pub fn parse_into<S: Sink>(input: &[u8], options: &Options, sink: &mut S) {
    let mut feed = Feed::new(sink);
    match read(input, options) {
        Err((offset, reason)) => feed.reject_whole(|| at(offset), reason),
        Ok(read) => {
            for (offset, reason) in read.rejected {
                feed.reject(|| at(offset), reason);
            }
            for (offset, sample) in read.samples {
                if !feed.push(sample, || at(offset)) {
                    break;
                }
            }
        }
    }
}

fn at(offset: usize) -> String {
    format!("byte {offset}")
}

/// A datagram read: samples and per-value-list rejections, each with its part's offset.
struct Read {
    samples: Vec<(usize, Sample)>,
    rejected: Vec<(usize, Reason)>,
}

/// What the parts before a `values` part said.
#[derive(Default)]
struct State<'a> {
    host: &'a str,
    plugin: &'a str,
    plugin_instance: &'a str,
    kind: &'a str,
    type_instance: &'a str,
    /// Time in collectd's 2^-30 s units; 0 = not sent (at receipt).
    time_hr: u64,
}

type PartError = (usize, Reason);

fn read(input: &[u8], options: &Options) -> Result<Read, PartError> {
    if input.len() > DATAGRAM_BYTES_MAX {
        let reason = Reason::Bound {
            what: "datagram bytes",
            size: input.len(),
            max: DATAGRAM_BYTES_MAX,
        };
        return Err((0, reason));
    }
    let mut out = Read {
        samples: Vec::new(),
        rejected: Vec::new(),
    };
    let mut state = State::default();
    let mut offset = 0;
    // Each turn consumes at least a header's bytes: at most len / 4 turns.
    while offset < input.len() {
        let (kind, payload) = part_at(input, offset)?;
        let here = offset;
        offset += PART_HEADER_BYTES + payload.len();
        debug_assert!(offset <= input.len());
        apply(&mut state, &mut out, here, kind, payload, options)?;
    }
    Ok(out)
}

/// The part at `offset`: its type and payload, or why the datagram is cut there.
fn part_at(input: &[u8], offset: usize) -> Result<(u16, &[u8]), PartError> {
    let rest = &input[offset..];
    let cut = Reason::Syntax {
        expected: "a part header of 4 bytes (type, length)",
    };
    let header = rest.get(..PART_HEADER_BYTES).ok_or((offset, cut))?;
    let kind = u16::from_be_bytes([header[0], header[1]]);
    let length = usize::from(u16::from_be_bytes([header[2], header[3]]));
    if length < PART_HEADER_BYTES || length > rest.len() {
        let reason = Reason::Bound {
            what: "part length (header included) against the bytes left",
            size: length,
            max: rest.len(),
        };
        return Err((offset, reason));
    }
    Ok((kind, &rest[PART_HEADER_BYTES..length]))
}

fn apply<'a>(
    state: &mut State<'a>,
    out: &mut Read,
    offset: usize,
    kind: u16,
    payload: &'a [u8],
    options: &Options,
) -> Result<(), PartError> {
    let fail = |reason| (offset, reason);
    match kind {
        PART_HOST => state.host = string(payload).map_err(fail)?,
        PART_PLUGIN => state.plugin = string(payload).map_err(fail)?,
        PART_PLUGIN_INSTANCE => state.plugin_instance = string(payload).map_err(fail)?,
        PART_TYPE => state.kind = string(payload).map_err(fail)?,
        PART_TYPE_INSTANCE => state.type_instance = string(payload).map_err(fail)?,
        PART_TIME => {
            let seconds = numeric(payload).map_err(fail)?;
            state.time_hr = seconds.saturating_mul(1 << 30);
        }
        PART_TIME_HR => state.time_hr = numeric(payload).map_err(fail)?,
        // The interval is the sender's; the store's periods are its own.
        PART_INTERVAL | PART_INTERVAL_HR => {
            numeric(payload).map_err(fail)?;
        }
        PART_VALUES => {
            let values = values(payload).map_err(fail)?;
            match value_list(state, &values, options) {
                Ok(samples) => out.samples.extend(samples.into_iter().map(|s| (offset, s))),
                Err(reason) => out.rejected.push((offset, reason)),
            }
        }
        PART_MESSAGE => {
            string(payload).map_err(fail)?;
            let what = "collectd notifications";
            out.rejected.push((offset, Reason::Unsupported { what }));
        }
        PART_SEVERITY => {
            numeric(payload).map_err(fail)?;
        }
        PART_SIGNATURE | PART_ENCRYPTION => {
            let what = "signed or encrypted collectd datagrams (network plugin SecurityLevel)";
            return Err(fail(Reason::Unsupported { what }));
        }
        // collectd itself skips parts it does not know: a newer sender's additions.
        _ => {}
    }
    Ok(())
}

/// A string part: UTF-8 ending in one NUL.
fn string(payload: &[u8]) -> Result<&str, Reason> {
    let Some((&0, text)) = payload.split_last() else {
        let expected = "a string part ending in a NUL byte";
        return Err(Reason::Syntax { expected });
    };
    let text = std::str::from_utf8(text).map_err(|_| Reason::InvalidUtf8)?;
    if text.contains('\0') {
        return Err(Reason::bad_value("a string without NUL bytes", text));
    }
    Ok(text)
}

/// A numeric part: one u64, big-endian.
fn numeric(payload: &[u8]) -> Result<u64, Reason> {
    let bytes: [u8; 8] = payload.try_into().map_err(|_| Reason::Bound {
        what: "numeric part length",
        size: payload.len() + PART_HEADER_BYTES,
        max: NUMERIC_PART_BYTES,
    })?;
    Ok(u64::from_be_bytes(bytes))
}

/// One value as sent.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Raw {
    Counter(u64),
    Gauge(f64),
    Derive(i64),
    Absolute(u64),
}

/// A `values` part: count u16 BE, the types (one byte each), then the values (8 bytes each:
/// gauges a little-endian double, the others big-endian integers).
fn values(payload: &[u8]) -> Result<Vec<Raw>, Reason> {
    let Some((count, rest)) = payload.split_first_chunk::<2>() else {
        let expected = "a values part with its count";
        return Err(Reason::Syntax { expected });
    };
    let count = usize::from(u16::from_be_bytes(*count));
    if count == 0 || rest.len() != count * VALUE_BYTES {
        return Err(Reason::Bound {
            what: "values part length for its count",
            size: payload.len() + PART_HEADER_BYTES,
            max: PART_HEADER_BYTES + 2 + count * VALUE_BYTES,
        });
    }
    let (types, data) = rest.split_at(count);
    let mut out = Vec::with_capacity(count);
    for (&kind, bytes) in types.iter().zip(data.chunks_exact(8)) {
        let mut word = [0u8; 8];
        word.copy_from_slice(bytes);
        out.push(match kind {
            DS_COUNTER => Raw::Counter(u64::from_be_bytes(word)),
            DS_GAUGE => Raw::Gauge(f64::from_le_bytes(word)),
            DS_DERIVE => Raw::Derive(i64::from_be_bytes(word)),
            DS_ABSOLUTE => Raw::Absolute(u64::from_be_bytes(word)),
            _ => {
                let found = kind.to_string();
                return Err(Reason::bad_value("a value type 0 to 3", &found));
            }
        });
    }
    Ok(out)
}

/// The samples of one value list, or why it is rejected (all its values together).
fn value_list(state: &State<'_>, values: &[Raw], options: &Options) -> Result<Vec<Sample>, Reason> {
    if state.plugin.is_empty() || state.kind.is_empty() {
        let expected = "plugin and type parts before a values part";
        return Err(Reason::Syntax { expected });
    }
    let name = format!("{NAME_PREFIX}.{}.{}", state.plugin, state.kind);
    check_name(&name)?;
    let mut tags = TagList::new();
    for (category, value) in [
        ("host", state.host),
        ("plugin_instance", state.plugin_instance),
        ("type_instance", state.type_instance),
    ] {
        if !value.is_empty() {
            check_tag(category, value)?;
            tags.push((category.to_owned(), value.to_owned()));
        }
    }
    let ts_ms = match state.time_hr {
        0 => None,
        t => Some(options.check_ts(time_hr_to_ms(t))?),
    };
    let names = ds_names(state.kind, values.len());
    let mut out = Vec::with_capacity(values.len());
    for (index, &raw) in values.iter().enumerate() {
        let (value, mode) = match raw {
            Raw::Gauge(v) if !v.is_finite() => {
                return Err(Reason::bad_value("a finite gauge", &v.to_string()));
            }
            Raw::Gauge(v) => (v, Mode::Set),
            Raw::Counter(v) => (v as f64, Mode::Set),
            Raw::Derive(v) => (v as f64, Mode::Set),
            Raw::Absolute(v) => (v as f64, Mode::Accumulate),
        };
        let mut tags = tags.clone();
        if values.len() > 1 {
            let ds = names.map_or_else(|| index.to_string(), |n| n[index].to_owned());
            tags.push(("ds".to_owned(), ds));
        }
        out.push(Sample {
            name: name.clone(),
            tags: tags.into(),
            ts_ms,
            value: Value::Numeric(value),
            mode,
        });
    }
    Ok(out)
}

/// The types.db names of a type's values when known and `count` matches.
fn ds_names(kind: &str, count: usize) -> Option<&'static [&'static str]> {
    DS_NAMES
        .iter()
        .find(|(k, names)| *k == kind && names.len() == count)
        .map(|(_, names)| *names)
}

/// collectd's `CDTIME_T_TO_MS`: 2^-30 s units to ms, rounded to nearest.
pub fn time_hr_to_ms(t: u64) -> i64 {
    let seconds = t >> 30;
    let fraction = ((t & ((1 << 30) - 1)) * 1000 + (1 << 29)) >> 30;
    let ms = seconds.saturating_mul(1000).saturating_add(fraction);
    i64::try_from(ms).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_hr_rounds_as_collectd_does() {
        assert_eq!(time_hr_to_ms(0), 0);
        assert_eq!(time_hr_to_ms(1 << 30), 1000);
        assert_eq!(time_hr_to_ms((1 << 30) + (1 << 29)), 1500);
        // 0.0004999 s rounds down, 0.0005 s up.
        assert_eq!(time_hr_to_ms(536_870), 0);
        assert_eq!(time_hr_to_ms(536_871), 1);
        assert_eq!(time_hr_to_ms(u64::MAX), 17_179_869_184_000);
    }

    #[test]
    fn ds_names_only_when_the_count_matches() {
        assert_eq!(
            ds_names("load", 3),
            Some(&["shortterm", "midterm", "longterm"][..])
        );
        assert_eq!(ds_names("load", 2), None);
        assert_eq!(ds_names("cpu", 1), None);
    }
}
