//! Property tests for every parser the crate owns: what a writer of each format produces reads
//! back as it was written, and every cut of it reads as incomplete or as an error, never as
//! something else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use checks::nrpe::packet::{self, Version};
use checks::perfdata;
use checks::prometheus::{proto, text};
use checks::redis::resp::{self, Reply};
use proptest::prelude::*;

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z_][a-zA-Z0-9_]{0,12}"
}

fn label_value() -> impl Strategy<Value = String> {
    // Quotes, backslashes, newlines and non-ASCII all need escaping or care.
    "[a-z0-9 \"\\\\\nä€]{0,10}"
}

fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![
        -1e12f64..1e12,
        Just(0.0),
        Just(1.5),
        (0u64..1_000_000).prop_map(|n| n as f64)
    ]
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

type Series = (String, Vec<(String, String)>, f64);

fn series() -> impl Strategy<Value = Vec<Series>> {
    prop::collection::vec(
        (
            name(),
            prop::collection::vec((name(), label_value()), 0..4),
            finite(),
        ),
        1..20,
    )
}

fn render(series: &[Series], openmetrics: bool) -> String {
    let mut body = String::new();
    for (n, labels, v) in series {
        // Each series its own gauge family, so grouping cannot merge two.
        body.push_str(&format!("# TYPE {n} gauge\n{n}"));
        if !labels.is_empty() {
            let l: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            body.push_str(&format!("{{{}}}", l.join(",")));
        }
        body.push_str(&format!(" {v:?}\n"));
    }
    if openmetrics {
        body.push_str("# EOF\n");
    }
    body
}

proptest! {
    #[test]
    fn prometheus_text_round_trips(series in series(), om in any::<bool>()) {
        let body = render(&series, om);
        let format = if om { text::Format::OpenMetrics } else { text::Format::Text };
        let families = text::parse(body.as_bytes(), format, 1000).unwrap();
        let read: Vec<Series> = families
            .into_iter()
            .flat_map(|f| f.samples)
            .map(|s| (s.name, s.labels, s.value))
            .collect();
        prop_assert_eq!(read, series);
    }

    #[test]
    fn prometheus_text_series_bound(series in series()) {
        let body = render(&series, false);
        let r = text::parse(body.as_bytes(), text::Format::Text, series.len() - 1);
        prop_assert!(r.is_err());
    }

    #[test]
    fn prometheus_protobuf_round_trips(series in series(), cut in any::<prop::sample::Index>()) {
        let families: Vec<proto::MetricFamily> = series
            .iter()
            .map(|(n, labels, v)| proto::MetricFamily {
                name: Some(n.clone()),
                r#type: Some(proto::GAUGE),
                metric: vec![proto::Metric {
                    label: labels
                        .iter()
                        .map(|(k, v)| proto::LabelPair { name: Some(k.clone()), value: Some(v.clone()) })
                        .collect(),
                    gauge: Some(proto::Single { value: Some(*v) }),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect();
        let body = proto::encode(&families);
        prop_assert_eq!(proto::parse(&body, 1000).unwrap(), families.clone());
        let at = cut.index(body.len());
        if let Ok(read) = proto::parse(&body[..at], 1000) {
            // A cut between messages reads as the families before it.
            prop_assert!(read.len() < families.len() && read[..] == families[..read.len()]);
        }
    }

    #[test]
    fn resp_round_trips_and_cuts_are_incomplete(reply in reply(), cut in any::<prop::sample::Index>()) {
        let mut bytes = Vec::new();
        write_reply(&reply, &mut bytes);
        prop_assert_eq!(resp::parse(&bytes).unwrap(), Some((reply, bytes.len())));
        let at = cut.index(bytes.len());
        prop_assert_eq!(resp::parse(&bytes[..at]).unwrap(), None);
    }

    #[test]
    fn nrpe_responses_round_trip(output in "[ -~é\n]{0,2000}", code in -5i16..10, v in 0usize..3) {
        let version = [Version::V2, Version::V3, Version::V4][v];
        let output = if version == Version::V2 { cut_to(&output, 1023) } else { output };
        let packet = response(version, code, &output);
        let r = packet::decode_response(&packet, version).unwrap().unwrap();
        prop_assert_eq!((r.result_code, r.output), (code, output));
        for at in [0, 9, 10, 15, packet.len() / 2] {
            prop_assert_eq!(packet::decode_response(&packet[..at.min(packet.len() - 1)], version), Ok(None));
        }
    }

    #[test]
    fn nrpe_queries_carry_a_valid_crc(command in "[a-z_!0-9]{1,600}", v in 0usize..3) {
        let version = [Version::V2, Version::V3, Version::V4][v];
        let q = packet::encode_query(version, &command).unwrap();
        let mut zeroed = q.clone();
        zeroed[4..8].fill(0);
        prop_assert_eq!(u32::from_be_bytes([q[4], q[5], q[6], q[7]]), crc32(&zeroed));
        let start = if version == Version::V2 { 10 } else { 16 };
        prop_assert_eq!(&q[start..start + command.len()], command.as_bytes());
        prop_assert_eq!(q[start + command.len()], 0);
    }

    #[test]
    fn perfdata_round_trips(items in prop::collection::vec(perf_item(), 1..10)) {
        let perf: Vec<String> = items.iter().map(render_perf).collect();
        let text = format!("SERVICE OK - fine|{}", perf.join(" "));
        let out = perfdata::parse_output(&text);
        prop_assert_eq!(out.summary.as_str(), "SERVICE OK - fine");
        prop_assert_eq!(out.skipped, 0);
        prop_assert_eq!(out.perf, items);
    }
}

fn cut_to(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

fn crc32(bytes: &[u8]) -> u32 {
    // The IEEE CRC-32, bit by bit, as NRPE's own table computes it.
    let mut crc = 0xffff_ffffu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A daemon's response packet, written independently of the crate's encoder.
fn response(version: Version, code: i16, output: &str) -> Vec<u8> {
    let tail = if version == Version::V3 { 3 } else { 0 };
    let mut p = match version {
        Version::V2 => {
            let mut p = vec![0u8; 1036];
            p[10..10 + output.len()].copy_from_slice(output.as_bytes());
            p
        }
        _ => {
            let len = output.len() + 1;
            let mut p = vec![0u8; 16 + len + tail];
            p[12..16].copy_from_slice(&(len as u32).to_be_bytes());
            p[16..16 + output.len()].copy_from_slice(output.as_bytes());
            p
        }
    };
    p[0..2].copy_from_slice(&version.number().to_be_bytes());
    p[2..4].copy_from_slice(&2u16.to_be_bytes());
    p[8..10].copy_from_slice(&code.to_be_bytes());
    let crc = crc32(&p);
    p[4..8].copy_from_slice(&crc.to_be_bytes());
    p.truncate(p.len() - tail);
    p
}

fn reply() -> impl Strategy<Value = Reply> {
    let leaf = prop_oneof![
        "[a-zA-Z0-9 ]{0,12}".prop_map(Reply::Simple),
        "[a-zA-Z0-9 ]{0,12}".prop_map(Reply::Error),
        any::<i64>().prop_map(Reply::Integer),
        prop::collection::vec(any::<u8>(), 0..40).prop_map(|b| Reply::Bulk(Some(b))),
        Just(Reply::Bulk(None)),
        Just(Reply::Array(None)),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop::collection::vec(inner, 0..8).prop_map(|items| Reply::Array(Some(items)))
    })
}

fn write_reply(r: &Reply, out: &mut Vec<u8>) {
    match r {
        Reply::Simple(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
        Reply::Error(s) => out.extend_from_slice(format!("-{s}\r\n").as_bytes()),
        Reply::Integer(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
        Reply::Double(d) => out.extend_from_slice(format!(",{d}\r\n").as_bytes()),
        Reply::Bulk(None) => out.extend_from_slice(b"$-1\r\n"),
        Reply::Bulk(Some(b)) => {
            out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Reply::Array(None) => out.extend_from_slice(b"*-1\r\n"),
        Reply::Array(Some(items)) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for i in items {
                write_reply(i, out);
            }
        }
    }
}

fn perf_item() -> impl Strategy<Value = perfdata::Perf> {
    let label = prop_oneof!["[a-z_/][a-z0-9_/]{0,10}", "[a-z][a-z ']{0,8}[a-z]"];
    let number = prop_oneof![(-1000i32..1000).prop_map(f64::from), Just(0.5), Just(1e-3)];
    (
        label,
        prop::option::of(number.clone()),
        prop_oneof![
            Just(""),
            Just("s"),
            Just("ms"),
            Just("%"),
            Just("B"),
            Just("KB"),
            Just("c")
        ],
        prop::option::of(prop_oneof![Just("10"), Just("~:5"), Just("@1:2")]),
        prop::option::of(prop_oneof![Just("20"), Just("0:30")]),
        prop::option::of(number.clone()),
        prop::option::of(number),
    )
        .prop_map(|(label, value, uom, warn, crit, min, max)| perfdata::Perf {
            label,
            value,
            uom: if value.is_none() {
                String::new()
            } else {
                uom.to_owned()
            },
            warn: warn.map(str::to_owned),
            crit: crit.map(str::to_owned),
            min,
            max,
        })
}

fn render_perf(p: &perfdata::Perf) -> String {
    let label = match p.label.contains([' ', '\'', '=']) {
        true => format!("'{}'", p.label.replace('\'', "''")),
        false => p.label.clone(),
    };
    let value = p.value.map_or("U".to_owned(), |v| format!("{v}"));
    let opt = |o: &Option<String>| o.clone().unwrap_or_default();
    let num = |o: Option<f64>| o.map(|v| format!("{v}")).unwrap_or_default();
    format!(
        "{label}={value}{};{};{};{};{}",
        p.uom,
        opt(&p.warn),
        opt(&p.crit),
        num(p.min),
        num(p.max)
    )
}
