//! The benchmark payloads, shared by `parse` (criterion, wall time) and `parse_cpu` (samples
//! per CPU-second). Deterministic: every run parses the same bytes.
#![allow(dead_code)]

use std::fmt::Write as _;

use hist::Histogram;
use ingest::flat::{self, HistogramForm};
use ingest::influx::Precision;
use ingest::otlp::{self, proto as otlp_proto};
use ingest::remote_write::{self, proto};
use ingest::{graphite, httptrap, influx, statsd, Batch, Options};
use prost::Message;

pub const NOW_MS: i64 = 1_795_305_600_000;
pub const TS_S: i64 = 1_795_305_000;
const LINES: usize = 10_000;
const HISTOGRAM_METRICS: usize = 1_000;

/// Deterministic pseudo-random numbers (xorshift), so every run parses the same bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// The TSBS cpu-only shape: 10 tags and 10 integer fields per line (100,000 samples).
pub fn influx_body() -> Vec<u8> {
    let mut rng = Rng(7);
    let mut out = String::new();
    for i in 0..LINES {
        let host = i % 1000;
        write!(
            out,
            "cpu,hostname=host_{host},region=eu-west-1,datacenter=eu-west-1a,rack={},os=Ubuntu16.10,\
             arch=x64,team=NYC,service={},service_version=1,service_environment=production ",
            host % 100,
            host % 20
        )
        .unwrap();
        let fields = [
            "usage_user",
            "usage_system",
            "usage_idle",
            "usage_nice",
            "usage_iowait",
            "usage_irq",
            "usage_softirq",
            "usage_steal",
            "usage_guest",
            "usage_guest_nice",
        ];
        for (j, field) in fields.iter().enumerate() {
            let sep = if j == 0 { "" } else { "," };
            write!(out, "{sep}{field}={}i", rng.next(100)).unwrap();
        }
        writeln!(out, " {}", (TS_S + (i / 1000) as i64 * 10) * 1_000_000_000).unwrap();
    }
    out.into_bytes()
}

/// A latency histogram with about 75 bins (values spread over two decades).
fn histogram(rng: &mut Rng) -> Histogram {
    let mut h = Histogram::new();
    while h.bin_count() < 75 {
        let v = 0.001 * (1.0 + rng.next(9_000) as f64 / 100.0);
        h.insert_n(v, 1 + rng.next(50));
    }
    h
}

/// A histogram with about 75 bins anywhere from 1e-60 to 1e60: across a body, thousands of
/// distinct bins (the text reader's remembered prefixes mostly miss; its worst case).
fn wide_histogram(rng: &mut Rng) -> Histogram {
    let mut h = Histogram::new();
    while h.bin_count() < 75 {
        let v = (1.0 + rng.next(900) as f64 / 100.0) * 10f64.powi(rng.next(121) as i32 - 60);
        h.insert_n(v, 1 + rng.next(50));
    }
    h
}

/// One httptrap document of `HISTOGRAM_METRICS` histograms, each as `H[..]=n` strings or base64.
pub fn httptrap_histograms(base64: bool) -> Vec<u8> {
    httptrap_histograms_of(base64, histogram)
}

/// [`httptrap_histograms`] of `wide_histogram`s, as `H[..]=n` strings.
pub fn httptrap_wide_histograms() -> Vec<u8> {
    httptrap_histograms_of(false, wide_histogram)
}

fn httptrap_histograms_of(base64: bool, histogram: fn(&mut Rng) -> Histogram) -> Vec<u8> {
    let mut rng = Rng(11);
    let mut out = String::from("{");
    for i in 0..HISTOGRAM_METRICS {
        let h = histogram(&mut rng);
        let value = if base64 {
            format!("\"{}\"", h.to_base64())
        } else {
            let bins: Vec<String> = h.to_text().iter().map(|b| format!("\"{b}\"")).collect();
            format!("[{}]", bins.join(","))
        };
        let sep = if i == 0 { "" } else { "," };
        write!(
            out,
            "{sep}\"api`latency|ST[host:host_{},route:r{}]\":{{\"_type\":\"h\",\"_value\":{value}}}",
            i % 100,
            i / 100
        )
        .unwrap();
    }
    out.push('}');
    out.into_bytes()
}

/// Numeric httptrap documents: one per host, nested objects of plain values (20,000 samples).
pub fn httptrap_numeric() -> Vec<u8> {
    let mut rng = Rng(13);
    let mut out = String::new();
    for host in 0..LINES / 10 {
        write!(out, "{{\"cpu|ST[host:host_{host}]\":{{").unwrap();
        for j in 0..10 {
            let sep = if j == 0 { "" } else { "," };
            write!(out, "{sep}\"usage_{j}\":{}", rng.next(100)).unwrap();
        }
        write!(
            out,
            "}},\"mem\":{{\"used\":{},\"free\":{}.5",
            rng.next(1 << 40),
            rng.next(1000)
        )
        .unwrap();
        for j in 0..8 {
            write!(out, ",\"slab_{j}\":{}", rng.next(1 << 20)).unwrap();
        }
        out.push_str("}}\n");
    }
    out.into_bytes()
}

/// 10,000 DogStatsD lines: counters, gauges and sampled timings with tags.
pub fn statsd_body() -> Vec<u8> {
    let mut rng = Rng(17);
    let mut out = String::new();
    for i in 0..LINES {
        let tags = format!("#host:host_{},env:prod,route:r{}", i % 100, i % 7);
        match i % 3 {
            0 => writeln!(out, "api.requests:1|c|{tags}"),
            1 => writeln!(
                out,
                "api.latency:{}.{}|ms|@0.5|{tags}",
                rng.next(500),
                rng.next(10)
            ),
            _ => writeln!(out, "api.queue_depth:{}|g|{tags}", rng.next(100)),
        }
        .unwrap();
    }
    out.into_bytes()
}

/// 10,000 Graphite lines, half of them tagged.
pub fn graphite_body() -> Vec<u8> {
    let mut rng = Rng(19);
    let mut out = String::new();
    for i in 0..LINES {
        let host = i % 1000;
        if i % 2 == 0 {
            writeln!(
                out,
                "servers.host_{host}.cpu.usage_user {} {TS_S}",
                rng.next(100)
            )
            .unwrap();
        } else {
            let v = rng.next(100_000);
            writeln!(out, "disk.used;host=host_{host};mount=/var {v}.25 {TS_S}").unwrap();
        }
    }
    out.into_bytes()
}

/// Series in one remote write request, and float samples per series: the numeric workload's
/// shape (10,000 series), 10 scrapes batched per request as a sender's queue does.
const REMOTE_WRITE_SERIES: usize = 10_000;
const REMOTE_WRITE_SAMPLES_PER_SERIES: usize = 10;

fn label(name: &str, value: String) -> proto::Label {
    proto::Label {
        name: name.as_bytes().to_vec(),
        value: value.into_bytes(),
    }
}

/// One remote write 1.0 body (snappy) of node-exporter-like series: 100,000 float samples.
pub fn remote_write_body() -> Vec<u8> {
    let mut rng = Rng(13);
    let modes = ["user", "system", "idle", "iowait", "irq"];
    let timeseries = (0..REMOTE_WRITE_SERIES)
        .map(|i| proto::TimeSeries {
            labels: vec![
                label("__name__", "node_cpu_seconds_total".to_owned()),
                label("cpu", (i % 2 * 8 + i / 1000).to_string()),
                label("instance", format!("host_{}:9100", i % 1000 / 5)),
                label("job", "node".to_owned()),
                label("mode", modes[i % 5].to_owned()),
            ],
            samples: (0..REMOTE_WRITE_SAMPLES_PER_SERIES)
                .map(|j| proto::Sample {
                    value: rng.next(1_000_000) as f64 / 100.0,
                    timestamp: TS_S * 1000 + j as i64 * 15_000,
                })
                .collect(),
            histograms: Vec::new(),
            exemplars: Vec::new(),
        })
        .collect();
    let raw = proto::WriteRequest { timeseries }.encode_to_vec();
    snap::raw::Encoder::new().compress_vec(&raw).unwrap()
}

fn otlp_kv(key: &str, value: String) -> otlp_proto::KeyValue {
    otlp_proto::KeyValue {
        key: key.to_owned(),
        value: Some(otlp_proto::AnyValue {
            value: Some(otlp_proto::any_value::Value::StringValue(value)),
        }),
    }
}

/// The same workload as `remote_write_body` as one OTLP protobuf request: one resource per
/// host, one cumulative sum per series with 10 data points (100,000 samples).
pub fn otlp_body() -> Vec<u8> {
    let mut rng = Rng(17);
    let modes = ["user", "system", "idle", "iowait", "irq"];
    let points_per_series = REMOTE_WRITE_SAMPLES_PER_SERIES;
    let series_per_host = 50;
    let resource_metrics = (0..REMOTE_WRITE_SERIES / series_per_host)
        .map(|host| {
            let metrics = (0..series_per_host)
                .map(|i| {
                    let data_points = (0..points_per_series)
                        .map(|j| otlp_proto::NumberDataPoint {
                            attributes: vec![
                                otlp_kv("cpu", (i / 5).to_string()),
                                otlp_kv("mode", modes[i % 5].to_owned()),
                            ],
                            time_unix_nano: (TS_S as u64 * 1000 + j as u64 * 15_000) * 1_000_000,
                            value: Some(otlp_proto::number_data_point::Value::AsDouble(
                                rng.next(1_000_000) as f64 / 100.0,
                            )),
                            ..Default::default()
                        })
                        .collect();
                    otlp_proto::Metric {
                        name: "system.cpu.time".to_owned(),
                        data: Some(otlp_proto::metric::Data::Sum(otlp_proto::Sum {
                            data_points,
                            aggregation_temporality: 2,
                            is_monotonic: true,
                        })),
                        ..Default::default()
                    }
                })
                .collect();
            otlp_proto::ResourceMetrics {
                resource: Some(otlp_proto::Resource {
                    attributes: vec![
                        otlp_kv("host.name", format!("host_{host}")),
                        otlp_kv("service.name", "node".to_owned()),
                    ],
                }),
                scope_metrics: vec![otlp_proto::ScopeMetrics { metrics }],
            }
        })
        .collect();
    otlp_proto::ExportMetricsServiceRequest { resource_metrics }.encode_to_vec()
}

/// The realistic httptrap mix: the 1,000 75-bin histograms (`H[..]=n` strings) and the 20,000
/// numerics of `httptrap_numeric`, as concatenated documents.
pub fn httptrap_mix() -> Vec<u8> {
    let mut body = httptrap_histograms(false);
    body.push(b'\n');
    body.extend(httptrap_numeric());
    body
}

/// The same metrics as an httptrap JSON body, as a flatbuffer metric list (`ingest::flat`).
pub fn flat_of(json: &[u8], form: HistogramForm) -> Vec<u8> {
    let batch = httptrap::parse(json, &options());
    assert_eq!(batch.rejected, [], "the JSON payload must parse cleanly");
    flat::encode_with(&batch.samples, form)
}

/// Pairs of cases holding the same metrics, JSON first, flatbuffers second: `parse_cpu` reports
/// decode time and size ratios for each.
pub const FLAT_VS_JSON: [(&str, &str); 4] = [
    ("httptrap_hist75_text", "flat_hist75_bins"),
    ("httptrap_hist75_base64", "flat_hist75_llhist"),
    ("httptrap_numeric", "flat_numeric"),
    ("httptrap_mix_text", "flat_mix_bins"),
];

/// Reads a flatbuffer metric list in place without building samples — what "decode" means for
/// flatbuffers elsewhere (the verifier, then every field read once): the floor under
/// `flat::parse`, which also allocates names, tags and histograms. The string table is read once
/// per document and indexed by each metric's name; each metric's value is taken from its kind's
/// column in metric order, bounds-checked, as a reader pairing names and values must; the value
/// columns, bins and llhist bytes are read as slices. Returns a checksum.
pub fn flat_read_in_place(body: &[u8]) -> u64 {
    use flat::schema::Kind;
    let list = flat::schema::root_as_metric_list(body).unwrap();
    let mut sum = 0u64;
    for document in list.documents().into_iter().flatten() {
        // The string table read once per document, then indexed (as `flat::parse` reads names
        // and tag sets once per document).
        let strings: Vec<&str> = document.strings().unwrap().iter().collect();
        let length = |at: u16| strings.get(usize::from(at)).map_or(0, |s| s.len() as u64);
        for tag in document.tag_texts().into_iter().flatten() {
            sum = sum.wrapping_add(length(tag));
        }
        for end in document.tag_set_ends().into_iter().flatten() {
            sum = sum.wrapping_add(u64::from(end));
        }
        sum = sum.wrapping_add(document.ts_ms().unwrap_or(0) as u64);
        // The value columns as slices, each with a cursor that is its bounds check.
        let ints = document.ints().map_or(&[][..], |v| v.bytes());
        let doubles = document.doubles().map_or(&[][..], |v| v.bytes());
        let (mut ints, mut doubles) = (ints.chunks_exact(4), doubles.chunks_exact(8));
        for metric in document.metrics().into_iter().flatten() {
            sum = sum.wrapping_add(length(metric.name()));
            let kind = metric.kind();
            let meta = u64::from(metric.tags()) ^ u64::from(metric.flags()) << 16;
            sum = sum.wrapping_add(meta ^ u64::from(kind.0) << 24);
            let value = match kind {
                Kind::Int => ints
                    .next()
                    .map_or(0, |b| i32::from_le_bytes(b.try_into().unwrap()) as u64),
                Kind::Double => doubles
                    .next()
                    .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap())),
                _ => 0,
            };
            sum = sum.wrapping_add(value);
        }
        for ts_ms in document.timestamps_ms().into_iter().flatten() {
            sum = sum.wrapping_add(ts_ms as u64);
        }
        for ends in document.histograms().into_iter().flatten() {
            sum = sum.wrapping_add(u64::from(ends.bins_end() ^ ends.llhist_end()));
        }
        // `Bin { val: i8, exp: i8, count: u16 }`, little-endian, 4 bytes each.
        let bins = document.bins().map_or(&[][..], |v| v.bytes());
        for bin in bins.chunks_exact(4) {
            let key = u64::from(bin[0]) << 8 | u64::from(bin[1]);
            let count = u64::from(u16::from_le_bytes([bin[2], bin[3]]));
            sum = sum.wrapping_add(key ^ count);
        }
        let llhist = document.llhist().map_or(&[][..], |v| v.bytes());
        for &byte in llhist {
            sum = sum.wrapping_add(u64::from(byte));
        }
    }
    sum
}

/// A named payload and the parser that reads it.
pub struct Case {
    pub name: &'static str,
    pub body: Vec<u8>,
    pub parse: fn(&[u8]) -> Batch,
}

fn options() -> Options {
    Options::at(NOW_MS)
}

/// Every benchmarked payload, in report order.
pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "influx_tsbs_cpu",
            body: influx_body(),
            parse: |b| influx::parse(b, &options(), Precision::Nanoseconds),
        },
        Case {
            name: "httptrap_hist75_text",
            body: httptrap_histograms(false),
            parse: |b| httptrap::parse(b, &options()),
        },
        Case {
            name: "httptrap_hist75_text_wide",
            body: httptrap_wide_histograms(),
            parse: |b| httptrap::parse(b, &options()),
        },
        Case {
            name: "httptrap_hist75_base64",
            body: httptrap_histograms(true),
            parse: |b| httptrap::parse(b, &options()),
        },
        Case {
            name: "httptrap_numeric",
            body: httptrap_numeric(),
            parse: |b| httptrap::parse(b, &options()),
        },
        Case {
            name: "flat_hist75_bins",
            body: flat_of(&httptrap_histograms(false), HistogramForm::Bins),
            parse: |b| flat::parse(b, &options()),
        },
        Case {
            name: "flat_hist75_llhist",
            body: flat_of(&httptrap_histograms(false), HistogramForm::Llhist),
            parse: |b| flat::parse(b, &options()),
        },
        Case {
            name: "flat_numeric",
            body: flat_of(&httptrap_numeric(), HistogramForm::Bins),
            parse: |b| flat::parse(b, &options()),
        },
        Case {
            name: "httptrap_mix_text",
            body: httptrap_mix(),
            parse: |b| httptrap::parse(b, &options()),
        },
        Case {
            name: "flat_mix_bins",
            body: flat_of(&httptrap_mix(), HistogramForm::Bins),
            parse: |b| flat::parse(b, &options()),
        },
        Case {
            name: "statsd_mixed",
            body: statsd_body(),
            parse: |b| statsd::parse(b, &options()),
        },
        Case {
            name: "graphite",
            body: graphite_body(),
            parse: |b| graphite::parse(b, &options()),
        },
        Case {
            name: "remote_write_numeric",
            body: remote_write_body(),
            parse: |b| remote_write::parse(b, &options()),
        },
        // The same body through the prost decoder `parse` had before `remote_write::visit`.
        Case {
            name: "remote_write_numeric_prost",
            body: remote_write_body(),
            parse: |b| remote_write::parse_with_prost(b, &options()),
        },
        Case {
            name: "otlp_protobuf_numeric",
            body: otlp_body(),
            parse: |b| otlp::parse_protobuf(b, &options()),
        },
    ]
}
