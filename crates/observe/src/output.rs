//! A closed period as an httptrap JSON document (`crates/ingest/FORMAT.md`): one histogram
//! metric per stream and figure, as base64 llhist with the period's start as `_ts`, and the
//! observer's own counters as numbers.

use std::fmt::Write as _;

use crate::agg::Closed;
use crate::Counters;

/// The counters' differences over a period, each with its stream name.
pub fn counter_deltas(now: &Counters, before: &Counters) -> Vec<(&'static str, u64)> {
    let d = |a: u64, b: u64| a.saturating_sub(b);
    vec![
        ("observe.packets", d(now.packets, before.packets)),
        (
            "observe.kernel_drops",
            d(now.kernel_drops, before.kernel_drops),
        ),
        ("observe.connections", d(now.conns, before.conns)),
        (
            "observe.connections_refused",
            d(now.conns_refused, before.conns_refused),
        ),
        ("observe.gaps", d(now.gaps, before.gaps)),
        ("observe.unpaired", d(now.unpaired, before.unpaired)),
        ("observe.orphan_responses", d(now.orphans, before.orphans)),
        ("observe.resyncs", d(now.resyncs, before.resyncs)),
        ("observe.pairs", d(now.pairs, before.pairs)),
        (
            "observe.tls.connections",
            d(now.tls_conns, before.tls_conns),
        ),
        ("observe.tls.bytes", d(now.tls_bytes, before.tls_bytes)),
        ("observe.late", d(now.late, before.late)),
    ]
}

fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn hist_entry(out: &mut String, name: &str, tags: &str, r: &hist::Recorder, ts_ms: u64) {
    if r.sample_count() == 0 {
        return;
    }
    out.push_str(if out.len() > 1 { "," } else { "" });
    json_str(out, &format!("{name}|ST[{tags}]"));
    let _ = write!(
        out,
        ":{{\"_type\":\"h\",\"_value\":\"{}\",\"_ts\":{ts_ms}}}",
        r.to_histogram().to_base64()
    );
}

/// The period's document.
pub fn httptrap_json(p: &Closed, counters: &[(&'static str, u64)]) -> String {
    let ts = p.start_ms;
    let mut out = String::from("{");
    for (tags, h) in &p.streams {
        hist_entry(&mut out, "observe.latency", tags, &h.latency, ts);
        hist_entry(&mut out, "observe.ttfb", tags, &h.ttfb, ts);
        hist_entry(
            &mut out,
            "observe.request_bytes",
            tags,
            &h.request_bytes,
            ts,
        );
        hist_entry(
            &mut out,
            "observe.response_bytes",
            tags,
            &h.response_bytes,
            ts,
        );
        if let Some(rows) = &h.rows {
            hist_entry(&mut out, "observe.rows", tags, rows, ts);
        }
    }
    let number = |out: &mut String, name: &str, v: u64| {
        out.push_str(if out.len() > 1 { "," } else { "" });
        json_str(out, name);
        let _ = write!(out, ":{{\"_type\":\"L\",\"_value\":{v},\"_ts\":{ts}}}");
    };
    for (slot, n) in &p.overflow {
        number(&mut out, &format!("observe.tag_overflow|ST[{slot}]"), *n);
    }
    number(&mut out, "observe.stream_overflow", p.streams_overflow);
    for (name, v) in counters {
        number(&mut out, name, *v);
    }
    out.push('}');
    out
}
