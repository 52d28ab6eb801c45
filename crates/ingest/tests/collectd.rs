#![allow(clippy::unwrap_used, clippy::expect_used)]

use ingest::{collectd, Batch, Mode, Options, Reason, Sample, Value};
use proptest::prelude::*;

/// 2026-11-22T00:00:00Z.
const NOW_MS: i64 = 1_795_305_600_000;

/// A test-only encoder of collectd's network protocol, as the `network` plugin writes it.
#[derive(Default)]
struct Encoder {
    out: Vec<u8>,
}

#[derive(Clone, Copy, Debug)]
enum V {
    Counter(u64),
    Gauge(f64),
    Derive(i64),
    Absolute(u64),
}

impl Encoder {
    fn header(&mut self, kind: u16, len: usize) {
        self.out.extend_from_slice(&kind.to_be_bytes());
        self.out.extend_from_slice(&(len as u16).to_be_bytes());
    }

    fn string(&mut self, kind: u16, text: &str) -> &mut Self {
        self.header(kind, 4 + text.len() + 1);
        self.out.extend_from_slice(text.as_bytes());
        self.out.push(0);
        self
    }

    fn numeric(&mut self, kind: u16, n: u64) -> &mut Self {
        self.header(kind, 12);
        self.out.extend_from_slice(&n.to_be_bytes());
        self
    }

    fn values(&mut self, values: &[V]) -> &mut Self {
        self.header(6, 4 + 2 + 9 * values.len());
        self.out
            .extend_from_slice(&(values.len() as u16).to_be_bytes());
        for v in values {
            self.out.push(match v {
                V::Counter(_) => 0,
                V::Gauge(_) => 1,
                V::Derive(_) => 2,
                V::Absolute(_) => 3,
            });
        }
        for v in values {
            let word = match *v {
                V::Counter(n) | V::Absolute(n) => n.to_be_bytes(),
                V::Gauge(g) => g.to_le_bytes(),
                V::Derive(d) => d.to_be_bytes(),
            };
            self.out.extend_from_slice(&word);
        }
        self
    }

    /// One whole value list, every part sent (as collectd does for the first of a packet).
    #[allow(clippy::too_many_arguments)]
    fn list(
        &mut self,
        host: &str,
        time_hr: u64,
        plugin: &str,
        plugin_instance: &str,
        kind: &str,
        type_instance: &str,
        values: &[V],
    ) -> &mut Self {
        self.string(0, host)
            .numeric(8, time_hr)
            .numeric(9, 10 << 30)
            .string(2, plugin)
            .string(3, plugin_instance)
            .string(4, kind)
            .string(5, type_instance)
            .values(values)
    }
}

fn parse(bytes: &[u8]) -> Batch {
    collectd::parse(bytes, &Options::at(NOW_MS))
}

fn sample(name: &str, tags: &[(&str, &str)], ts_ms: i64, value: f64, mode: Mode) -> Sample {
    Sample {
        name: name.to_owned(),
        tags: tags
            .iter()
            .map(|(c, v)| (c.to_string(), v.to_string()))
            .collect(),
        ts_ms: Some(ts_ms),
        value: Value::Numeric(value),
        mode,
    }
}

/// `ms` since the epoch in collectd's 2^-30 s units.
fn hr(ms: i64) -> u64 {
    ((ms as u128) * (1 << 30) / 1000) as u64
}

#[test]
fn every_value_type_with_its_byte_order_and_the_state_carried_between_lists() {
    let t = NOW_MS - 5_000;
    let mut e = Encoder::default();
    e.list("web-1", hr(t), "cpu", "0", "cpu", "user", &[V::Derive(-7)])
        // Only what changed is sent again: same host, plugin, time.
        .string(5, "idle")
        .values(&[V::Derive(123_456)])
        .string(2, "load")
        .string(3, "")
        .string(4, "load")
        .string(5, "")
        .values(&[V::Gauge(0.5), V::Gauge(1.25), V::Gauge(2.0)])
        .string(2, "interface")
        .string(3, "eth0")
        .string(4, "if_octets")
        .values(&[V::Counter(1 << 40), V::Counter(9)])
        .string(2, "statsd")
        .string(3, "")
        .string(4, "count")
        .string(5, "hits")
        .numeric(1, (t / 1000 + 1) as u64)
        .values(&[V::Absolute(4)])
        .string(4, "weird")
        .string(5, "")
        .values(&[V::Gauge(1.0), V::Counter(2)]);
    let batch = parse(&e.out);
    assert_eq!(batch.rejected, []);
    let host = ("host", "web-1");
    let t2 = (t / 1000 + 1) * 1000;
    assert_eq!(
        batch.samples,
        [
            sample(
                "collectd.cpu.cpu",
                &[host, ("plugin_instance", "0"), ("type_instance", "user")],
                t,
                -7.0,
                Mode::Set
            ),
            sample(
                "collectd.cpu.cpu",
                &[host, ("plugin_instance", "0"), ("type_instance", "idle")],
                t,
                123_456.0,
                Mode::Set
            ),
            sample(
                "collectd.load.load",
                &[host, ("ds", "shortterm")],
                t,
                0.5,
                Mode::Set
            ),
            sample(
                "collectd.load.load",
                &[host, ("ds", "midterm")],
                t,
                1.25,
                Mode::Set
            ),
            sample(
                "collectd.load.load",
                &[host, ("ds", "longterm")],
                t,
                2.0,
                Mode::Set
            ),
            sample(
                "collectd.interface.if_octets",
                &[host, ("plugin_instance", "eth0"), ("ds", "rx")],
                t,
                (1u64 << 40) as f64,
                Mode::Set
            ),
            sample(
                "collectd.interface.if_octets",
                &[host, ("plugin_instance", "eth0"), ("ds", "tx")],
                t,
                9.0,
                Mode::Set
            ),
            sample(
                "collectd.statsd.count",
                &[host, ("type_instance", "hits")],
                t2,
                4.0,
                Mode::Accumulate
            ),
            sample(
                "collectd.statsd.weird",
                &[host, ("ds", "0")],
                t2,
                1.0,
                Mode::Set
            ),
            sample(
                "collectd.statsd.weird",
                &[host, ("ds", "1")],
                t2,
                2.0,
                Mode::Set
            ),
        ]
    );
}

#[test]
fn time_zero_means_at_receipt_and_a_time_out_of_the_window_rejects_its_list_alone() {
    let mut e = Encoder::default();
    e.list("h", 0, "p", "", "gauge", "", &[V::Gauge(1.0)])
        .numeric(1, 12) // 1970
        .values(&[V::Gauge(2.0)])
        .numeric(8, hr(NOW_MS))
        .values(&[V::Gauge(3.0)]);
    let batch = parse(&e.out);
    assert_eq!(batch.samples.len(), 2);
    assert_eq!(batch.samples[0].ts_ms, None);
    assert_eq!(batch.samples[1].ts_ms, Some(NOW_MS));
    assert_eq!(batch.rejected_total, 1);
    assert!(matches!(batch.rejected[0].reason, Reason::Timestamp { .. }));
    assert!(!batch.stopped());
}

#[test]
fn bad_value_lists_are_rejected_alone() {
    let mut e = Encoder::default();
    e.numeric(8, hr(NOW_MS))
        .values(&[V::Gauge(1.0)]) // no plugin and type yet
        .string(2, "p")
        .string(4, "t")
        .values(&[V::Gauge(f64::NAN)])
        .string(0x0100, "disk full") // a notification
        .values(&[V::Gauge(5.0)]);
    let batch = parse(&e.out);
    assert_eq!(batch.samples.len(), 1);
    assert_eq!(batch.samples[0].value, Value::Numeric(5.0));
    assert_eq!(batch.rejected_total, 3);
    assert!(matches!(batch.rejected[0].reason, Reason::Syntax { .. }));
    assert!(matches!(batch.rejected[1].reason, Reason::BadValue { .. }));
    assert!(matches!(
        batch.rejected[2].reason,
        Reason::Unsupported { .. }
    ));
    assert_eq!(batch.rejected[2].location, "byte 54");
}

#[test]
fn cut_malformed_signed_and_encrypted_datagrams_are_refused_whole() {
    let mut good = Encoder::default();
    good.list("h", hr(NOW_MS), "p", "", "t", "", &[V::Gauge(1.0)]);
    let whole = good.out.clone();
    assert_eq!(parse(&whole).samples.len(), 1);
    let mut cases: Vec<Vec<u8>> = vec![
        whole[..whole.len() - 1].to_vec(),  // cut in the last part
        whole[..whole.len() - 16].to_vec(), // cut in the type instance
        [&whole[..], &[0, 6, 0]].concat(),  // a header cut short
    ];
    let mut bad_length = whole.clone();
    bad_length[3] = 3; // the first part's length under its header
    cases.push(bad_length);
    let mut unterminated = Encoder::default();
    unterminated.header(0, 6);
    unterminated.out.extend_from_slice(b"ab");
    cases.push([&unterminated.out[..], &whole[..]].concat());
    let mut bad_type = whole.clone();
    let at = whole.len() - 9;
    bad_type[at] = 7;
    cases.push(bad_type);
    let mut zero_values = Encoder::default();
    zero_values.header(6, 6);
    zero_values.out.extend_from_slice(&[0, 0]);
    cases.push([&whole[..], &zero_values.out[..]].concat());
    let mut short_numeric = Encoder::default();
    short_numeric.header(8, 8);
    short_numeric.out.extend_from_slice(&[0; 4]);
    cases.push([&whole[..], &short_numeric.out[..]].concat());
    for kind in [0x0200u16, 0x0210] {
        let mut sealed = Encoder::default();
        sealed.header(kind, 40);
        sealed.out.extend_from_slice(&[0; 36]);
        cases.push([&sealed.out[..], &whole[..]].concat());
    }
    for (i, case) in cases.iter().enumerate() {
        let batch = parse(case);
        assert!(batch.samples.is_empty(), "case {i}: {:?}", batch.samples);
        assert_eq!(batch.rejected_total, 1, "case {i}");
        assert!(batch.stopped(), "case {i}");
    }
    let sealed = parse(cases.last().unwrap());
    let text = sealed.rejected[0].to_string();
    assert!(text.contains("signed or encrypted"), "{text}");
}

#[test]
fn unknown_parts_are_skipped_as_collectd_skips_them() {
    let mut e = Encoder::default();
    e.header(0x0042, 7);
    e.out.extend_from_slice(b"xyz");
    e.list("h", hr(NOW_MS), "p", "", "t", "", &[V::Gauge(1.0)]);
    let batch = parse(&e.out);
    assert_eq!(batch.rejected, []);
    assert_eq!(batch.samples.len(), 1);
}

#[test]
fn an_over_long_datagram_is_refused() {
    let mut e = Encoder::default();
    while e.out.len() <= collectd::DATAGRAM_BYTES_MAX {
        e.list("h", hr(NOW_MS), "p", "", "t", "", &[V::Gauge(1.0)]);
    }
    let batch = parse(&e.out);
    assert!(batch.stopped());
    assert!(batch.samples.is_empty());
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,12}"
}

fn instance() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-zA-Z0-9_.:/-]{1,16}"]
}

fn value() -> impl Strategy<Value = V> {
    prop_oneof![
        any::<u64>().prop_map(V::Counter),
        (-1e300f64..1e300).prop_map(V::Gauge),
        any::<i64>().prop_map(V::Derive),
        any::<u64>().prop_map(V::Absolute),
    ]
}

type List = (String, i64, String, String, String, String, Vec<V>);

fn list() -> impl Strategy<Value = List> {
    (
        name(),
        (NOW_MS - 86_400_000)..NOW_MS,
        name(),
        instance(),
        name(),
        instance(),
        prop::collection::vec(value(), 1..5),
    )
}

proptest! {
    #[test]
    fn encoded_value_lists_parse_back(lists in prop::collection::vec(list(), 1..20)) {
        let mut e = Encoder::default();
        let mut expected = Vec::new();
        for (host, ms, plugin, pi, kind, ti, values) in &lists {
            e.list(host, hr(*ms), plugin, pi, kind, ti, values);
            let ts_ms = collectd::time_hr_to_ms(hr(*ms));
            prop_assert!((ts_ms - ms).abs() <= 1);
            for (i, v) in values.iter().enumerate() {
                let mut tags = vec![("host", host.as_str())];
                if !pi.is_empty() { tags.push(("plugin_instance", pi)); }
                if !ti.is_empty() { tags.push(("type_instance", ti)); }
                let index = i.to_string();
                let known = collectd::DS_NAMES
                    .iter()
                    .find(|(k, n)| k == kind && n.len() == values.len());
                if values.len() > 1 {
                    tags.push(("ds", known.map_or(index.as_str(), |(_, n)| n[i])));
                }
                let (value, mode) = match *v {
                    V::Counter(n) => (n as f64, Mode::Set),
                    V::Gauge(g) => (g, Mode::Set),
                    V::Derive(d) => (d as f64, Mode::Set),
                    V::Absolute(n) => (n as f64, Mode::Accumulate),
                };
                let name = format!("collectd.{plugin}.{kind}");
                expected.push(sample(&name, &tags, ts_ms, value, mode));
            }
        }
        let batch = parse(&e.out);
        prop_assert_eq!(batch.rejected, vec![]);
        prop_assert_eq!(batch.samples, expected);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let batch = parse(&bytes);
        if batch.stopped() {
            prop_assert!(batch.samples.is_empty());
        }
    }

    #[test]
    fn mutated_datagrams_never_panic_and_refuse_whole_or_parse(
        lists in prop::collection::vec(list(), 1..4),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut e = Encoder::default();
        for (host, ms, plugin, pi, kind, ti, values) in &lists {
            e.list(host, hr(*ms), plugin, pi, kind, ti, values);
        }
        let mut bytes = e.out.clone();
        for (at, byte) in flips {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        bytes.truncate(cut.index(bytes.len() + 1));
        let batch = parse(&bytes);
        if batch.stopped() {
            prop_assert!(batch.samples.is_empty());
        }
        prop_assert!(batch.samples.len() <= bytes.len() / 9);
    }
}
