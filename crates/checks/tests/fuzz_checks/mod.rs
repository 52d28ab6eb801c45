//! The checks every checks-crate fuzz target runs, shared by the libFuzzer targets (`fuzz/`)
//! and the corpus replay in `tests/fuzz_corpus.rs`: any bytes through each parser, no panic,
//! and every result within the bounds the crate promises.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use checks::nrpe::packet::{self, Version};
use checks::perfdata;
use checks::prometheus::{self, proto, text};
use checks::redis::resp;

const SERIES: usize = 1_000;

pub fn nrpe_packet(data: &[u8]) {
    for v in [Version::V2, Version::V3, Version::V4] {
        if let Ok(Some(r)) = packet::decode_response(data, v) {
            assert_eq!(r.version, v.number());
            assert!(
                r.output.len() <= 3 * packet::BUFFER_BYTES_MAX,
                "lossy text at most triples"
            );
            assert!(!r.output.contains('\0'));
        }
        let command = String::from_utf8_lossy(data);
        if let Some(q) = packet::encode_query(v, &command) {
            assert!(q.len() >= packet::V2_PACKET_BYTES);
            assert_eq!(u16::from_be_bytes([q[0], q[1]]), v.number());
        }
    }
}

pub fn perfdata(data: &[u8]) {
    let out = perfdata::parse_output(&String::from_utf8_lossy(data));
    assert!(out.perf.len() <= perfdata::ITEMS_MAX);
    for p in &out.perf {
        assert!(!p.label.is_empty() && p.label.len() <= perfdata::LABEL_BYTES_MAX);
        assert!(p.value.is_none_or(f64::is_finite));
        assert!(p.min.is_none_or(f64::is_finite) && p.max.is_none_or(f64::is_finite));
        for t in [&p.warn, &p.crit].into_iter().flatten() {
            assert!(perfdata::threshold_number(t).is_none_or(f64::is_finite));
        }
    }
}

pub fn prom_text(data: &[u8]) {
    for format in [text::Format::Text, text::Format::OpenMetrics] {
        let Ok(families) = text::parse(data, format, SERIES) else {
            continue;
        };
        let samples: usize = families.iter().map(|f| f.samples.len()).sum();
        assert!(samples <= SERIES);
        for s in families.iter().flat_map(|f| &f.samples) {
            assert!(!s.name.is_empty());
            assert!(s.labels.len() <= text::LABELS_MAX);
        }
        let mapped = prometheus::from_text(families);
        for m in &mapped.list {
            if let checks::Value::Numeric(v) = m.value {
                assert!(v.is_finite());
            }
        }
    }
    content_types(data);
}

/// The content-type dispatch never panics either.
fn content_types(data: &[u8]) {
    for ct in [
        "text/plain; version=0.0.4",
        "application/openmetrics-text; version=1.0.0",
        "",
    ] {
        let _ = prometheus::read_body(data, ct);
    }
}

pub fn prom_proto(data: &[u8]) {
    let Ok(families) = proto::parse(data, SERIES) else {
        return;
    };
    let metrics: usize = families.iter().map(|f| f.metric.len()).sum();
    assert!(metrics <= SERIES);
    let mapped = prometheus::from_proto(&families);
    for m in &mapped.list {
        if let checks::Value::Numeric(v) = m.value {
            assert!(v.is_finite());
        }
    }
}

pub fn resp(data: &[u8]) {
    match resp::parse(data) {
        Ok(Some((reply, used))) => {
            assert!(used <= data.len() && used > 0);
            assert!(depth(&reply) <= resp::DEPTH_MAX + 1);
            // The same bytes with more after them read as the same reply.
            let mut longer = data[..used].to_vec();
            longer.extend_from_slice(b"+more\r\n");
            assert_eq!(resp::parse(&longer).unwrap(), Some((reply, used)));
        }
        Ok(None) => {
            // A prefix of an incomplete reply is incomplete or already wrong, never complete.
            for cut in [0, data.len() / 2] {
                assert!(!matches!(resp::parse(&data[..cut]), Ok(Some(_))));
            }
        }
        Err(_) => {}
    }
}

fn depth(r: &resp::Reply) -> usize {
    match r.as_array() {
        Some(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        None => 0,
    }
}
