//! `serve-load`: drives a running (or spawned) `strata serve` with the ingest benchmark workloads
//! and reports samples per **server** CPU-second, measured from `/proc/<pid>/stat`
//! (utime + stime) before and after the send phase, plus the wall-clock rate.
//!
//! Run it on the other core than the server: `taskset -c 1 serve-load --spawn <strata> ...`
//! starts the server under `taskset -c 0` (see README.md). Bodies are generated before the
//! clock starts, so the loader's own work does not delay the server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;

/// TSBS cpu-only field names: one stream per host and field.
const CPU_FIELDS: [&str; 10] = [
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
const REGIONS: [&str; 3] = ["us-east-1", "eu-west-1", "ap-northeast-1"];
const OSES: [&str; 3] = ["Ubuntu16.04LTS", "Ubuntu15.10", "Ubuntu16.10"];
const ARCHES: [&str; 2] = ["x64", "x86"];
const TEAMS: [&str; 4] = ["SF", "NYC", "LON", "CHI"];
const ENVIRONMENTS: [&str; 3] = ["production", "staging", "test"];

/// Upper bounds on what one invocation may ask for, so a typo cannot exhaust memory.
const HOSTS_MAX: usize = 100_000;
const STEPS_MAX: usize = 100_000;
const CONNECTIONS_MAX: usize = 64;
const RUNS_MAX: usize = 20;
/// Response bodies we read (error messages); anything longer is a protocol problem here.
const RESPONSE_BYTES_MAX: usize = 1 << 20;
const HEADER_LINES_MAX: usize = 100;
/// How long the spawned server may take to print its bound addresses.
const STARTUP_TIMEOUT_MS: u64 = 60_000;
/// Socket timeout for one request (a 64 MiB body on a slow server still fits).
const REQUEST_TIMEOUT_MS: u64 = 120_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Workload {
    /// Influx line protocol over HTTP `/api/v2/write`.
    Influx,
    /// Prometheus remote write 1.0 `/api/v1/write`.
    RemoteWrite,
    /// httptrap JSON, histograms as `H[..]=n` strings.
    HttptrapHist,
    /// httptrap JSON, histograms as base64 llhist.
    HttptrapHistB64,
    /// The same histograms as the flatbuffers metric list (`ingest::flat`), same endpoint.
    HttptrapHistFlat,
    /// The same draws as Prometheus native histograms (schema 3, cumulative, as clients send
    /// them) over remote write 1.0: what Prometheus itself can be given.
    RemoteWriteHist,
}

impl Workload {
    fn parse(s: &str) -> Result<Workload, String> {
        match s {
            "influx" => Ok(Workload::Influx),
            "remote-write" => Ok(Workload::RemoteWrite),
            "httptrap-hist" => Ok(Workload::HttptrapHist),
            "httptrap-hist-b64" => Ok(Workload::HttptrapHistB64),
            "httptrap-hist-flat" => Ok(Workload::HttptrapHistFlat),
            "remote-write-hist" => Ok(Workload::RemoteWriteHist),
            _ => Err(format!(
                "--workload: unknown `{s}` (influx, remote-write, httptrap-hist, \
                 httptrap-hist-b64, httptrap-hist-flat, remote-write-hist)"
            )),
        }
    }
}

#[derive(Clone)]
struct Args {
    workload: Workload,
    spawn: Option<PathBuf>,
    url: Option<String>,
    pid: Option<u32>,
    server_cpu: String,
    work_dir: PathBuf,
    hosts: usize,
    interval_s: u64,
    steps: usize,
    hist_metrics: usize,
    hist_steps: usize,
    hist_per_request: usize,
    influx_lines_per_request: usize,
    rw_series_per_request: usize,
    connections: usize,
    runs: usize,
    seed: u64,
    /// Where generated request plans are kept and read back (A/B rounds skip generating).
    plan_cache: Option<PathBuf>,
    hist_shape: HistShape,
    values: ValueShape,
    /// Generate the bodies while sending (numeric workloads): for loads too large to hold.
    stream: bool,
}

/// What the numeric workloads' values look like.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ValueShape {
    /// TSBS-like: an integer random walk in 0..=100, steps −5..=5.
    Walk,
    /// A gauge with noise in its second decimal: a walk in hundredths (steps ≈ N(0, 0.3),
    /// 0.00..=100.00), sent with two decimals (`57.23`).
    Gauge,
}

/// What each histogram of the httptrap workloads holds (both ≈ 75 bins).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum HistShape {
    /// 1,500 draws, σ = 0.35, a median per stream from 2 to 200 ms: counts of one to three
    /// digits.
    Narrow,
    /// The store benchmark's histogram shape (`storebench`): 100 draws from one lognormal with
    /// μ = −3, σ = 1.6, so counts are mostly 1 or 2.
    Store,
}

const USAGE: &str =
    "usage: serve-load --workload influx|remote-write|httptrap-hist|httptrap-hist-b64|httptrap-hist-flat|remote-write-hist
  (--spawn PATH_TO_STRATA [--server-cpu 0] [--work-dir DIR] | --url http://HOST:PORT --pid PID)
  [--hosts 1000] [--interval-s 10] [--hours 4 | --steps N]
  [--hist-metrics 10] [--hist-steps 6] [--hist-per-request 1000]
  [--influx-lines-per-request 1000] [--rw-series-per-request 2000]
  [--connections 4] [--runs 3] [--seed 1] [--plan-cache DIR] [--hist-shape narrow|store]
  [--values walk|gauge] [--stream 1]";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        workload: Workload::Influx,
        spawn: None,
        url: None,
        pid: None,
        server_cpu: "0".to_owned(),
        work_dir: std::env::temp_dir().join("serve-load"),
        hosts: 1000,
        interval_s: 10,
        steps: 4 * 360,
        hist_metrics: 10,
        hist_steps: 6,
        hist_per_request: 1000,
        influx_lines_per_request: 1000,
        rw_series_per_request: 2000,
        connections: 4,
        runs: 3,
        seed: 1,
        plan_cache: None,
        hist_shape: HistShape::Narrow,
        values: ValueShape::Walk,
        stream: false,
    };
    let mut it = std::env::args().skip(1);
    let mut workload_seen = false;
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.to_owned());
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag}: missing value\n{USAGE}"))?;
        let num = |v: &str| -> Result<usize, String> {
            v.parse::<usize>()
                .map_err(|e| format!("{flag}: `{v}` is not a count: {e}"))
        };
        match flag.as_str() {
            "--workload" => {
                a.workload = Workload::parse(&value)?;
                workload_seen = true;
            }
            "--spawn" => a.spawn = Some(PathBuf::from(value)),
            "--url" => a.url = Some(value.trim_end_matches('/').to_owned()),
            "--pid" => a.pid = Some(num(&value)? as u32),
            "--server-cpu" => a.server_cpu = value,
            "--work-dir" => a.work_dir = PathBuf::from(value),
            "--hosts" => a.hosts = num(&value)?,
            "--interval-s" => a.interval_s = num(&value)? as u64,
            "--hours" => {
                let hours: f64 = value
                    .parse()
                    .map_err(|e| format!("--hours: `{value}`: {e}"))?;
                if !(hours > 0.0 && hours.is_finite()) {
                    return Err("--hours must be positive".to_owned());
                }
                a.steps = ((hours * 3600.0) / a.interval_s.max(1) as f64).round() as usize;
            }
            "--steps" => a.steps = num(&value)?,
            "--hist-metrics" => a.hist_metrics = num(&value)?,
            "--hist-steps" => a.hist_steps = num(&value)?,
            "--hist-per-request" => a.hist_per_request = num(&value)?,
            "--influx-lines-per-request" => a.influx_lines_per_request = num(&value)?,
            "--rw-series-per-request" => a.rw_series_per_request = num(&value)?,
            "--connections" => a.connections = num(&value)?,
            "--runs" => a.runs = num(&value)?,
            "--seed" => a.seed = num(&value)? as u64,
            "--plan-cache" => a.plan_cache = Some(PathBuf::from(value)),
            "--values" => {
                a.values = match value.as_str() {
                    "walk" => ValueShape::Walk,
                    "gauge" => ValueShape::Gauge,
                    other => return Err(format!("--values {other:?}: walk or gauge")),
                }
            }
            "--stream" => a.stream = value == "1",
            "--hist-shape" => {
                a.hist_shape = match value.as_str() {
                    "narrow" => HistShape::Narrow,
                    "store" => HistShape::Store,
                    other => return Err(format!("--hist-shape {other:?}: narrow or store")),
                }
            }
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    if !workload_seen {
        return Err(format!("--workload is required\n{USAGE}"));
    }
    if a.spawn.is_none() && (a.url.is_none() || a.pid.is_none()) {
        return Err(format!("give --spawn, or both --url and --pid\n{USAGE}"));
    }
    let checks: [(&str, usize, usize); 9] = [
        ("--hosts", a.hosts, HOSTS_MAX),
        ("--steps", a.steps, STEPS_MAX),
        ("--hist-metrics", a.hist_metrics, CPU_FIELDS.len() * 100),
        ("--hist-steps", a.hist_steps, STEPS_MAX),
        ("--hist-per-request", a.hist_per_request, 1_000_000),
        (
            "--influx-lines-per-request",
            a.influx_lines_per_request,
            1_000_000,
        ),
        (
            "--rw-series-per-request",
            a.rw_series_per_request,
            1_000_000,
        ),
        ("--connections", a.connections, CONNECTIONS_MAX),
        ("--runs", a.runs, RUNS_MAX),
    ];
    for (name, v, max) in checks {
        if v == 0 || v > max {
            return Err(format!("{name} must be in 1..={max}, got {v}"));
        }
    }
    if a.interval_s == 0 {
        return Err("--interval-s must be positive".to_owned());
    }
    Ok(a)
}

/// splitmix64: a small, seedable generator (the workload must be reproducible, not secure).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let u1 = self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// One host's TSBS-style tag set, in the order TSBS writes them.
fn host_tags(host: usize, rng: &mut Rng) -> Vec<(String, String)> {
    let region = REGIONS[rng.below(REGIONS.len() as u64) as usize];
    vec![
        ("hostname".to_owned(), format!("host_{host}")),
        ("region".to_owned(), region.to_owned()),
        (
            "datacenter".to_owned(),
            format!("{region}{}", ['a', 'b', 'c'][host % 3]),
        ),
        ("rack".to_owned(), rng.below(100).to_string()),
        (
            "os".to_owned(),
            OSES[rng.below(OSES.len() as u64) as usize].to_owned(),
        ),
        (
            "arch".to_owned(),
            ARCHES[rng.below(ARCHES.len() as u64) as usize].to_owned(),
        ),
        (
            "team".to_owned(),
            TEAMS[rng.below(TEAMS.len() as u64) as usize].to_owned(),
        ),
        ("service".to_owned(), rng.below(20).to_string()),
        ("service_version".to_owned(), rng.below(2).to_string()),
        (
            "service_environment".to_owned(),
            ENVIRONMENTS[rng.below(ENVIRONMENTS.len() as u64) as usize].to_owned(),
        ),
    ]
}

/// One request body with its route and how many samples it carries.
struct Body {
    bytes: Vec<u8>,
    samples: u64,
}

struct Plan {
    path: String,
    headers: Vec<(String, String)>,
    bodies: Vec<Body>,
    /// For the report: a description of the shape.
    shape: String,
}

/// One value per host × field, stepped once per interval: an integer random walk in 0..=100
/// (`ValueShape::Walk`), or a walk in hundredths (`ValueShape::Gauge`, `values` in 0..=10,000
/// and sent divided by 100).
struct Walk {
    values: Vec<i64>,
    shape: ValueShape,
}

impl Walk {
    fn new(n: usize, rng: &mut Rng, shape: ValueShape) -> Walk {
        let top = match shape {
            ValueShape::Walk => 101,
            ValueShape::Gauge => 10_001,
        };
        Walk {
            values: (0..n).map(|_| rng.below(top) as i64).collect(),
            shape,
        }
    }
    fn step(&mut self, rng: &mut Rng) {
        for v in &mut self.values {
            *v = match self.shape {
                ValueShape::Walk => (*v + rng.below(11) as i64 - 5).clamp(0, 100),
                ValueShape::Gauge => (*v + (rng.normal() * 30.0).round() as i64).clamp(0, 10_000),
            };
        }
    }
    /// Value `i` as the wire's float.
    fn value(&self, i: usize) -> f64 {
        match self.shape {
            ValueShape::Walk => self.values[i] as f64,
            ValueShape::Gauge => self.values[i] as f64 / 100.0,
        }
    }
    /// Value `i` as Influx line-protocol text (the shortest text that reads back the same).
    fn text(&self, i: usize) -> String {
        match self.shape {
            ValueShape::Walk => self.values[i].to_string(),
            ValueShape::Gauge => self.value(i).to_string(),
        }
    }
}

fn start_ms(steps: usize, interval_s: u64, run: usize) -> Result<i64, String> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| format!("clock before 1970: {e}"))?
        .as_millis() as i64;
    let span_ms = steps as i64 * interval_s as i64 * 1000;
    // Each run writes its own earlier window, so runs against one server never overwrite
    // each other's points (the store would count those as updates, not new samples).
    let end = now_ms - (run as i64) * (span_ms + 3_600_000) - 60_000;
    // Starting half-way through a minute: where a run starts within the store's one-minute
    // periods decides how many periods each series closes, and so whether a histogram run
    // ever chooses its series' windows (a plan made in a minute's first seconds closed four
    // and chose none: 7 % fewer server instructions per histogram than one made later).
    Ok((end - span_ms) / 60_000 * 60_000 + START_IN_MINUTE_MS)
}

/// Where in a minute a run's first timestamp falls (see `start_ms`).
const START_IN_MINUTE_MS: i64 = 30_000;

fn plan_influx(a: &Args, run: usize) -> Result<Plan, String> {
    let mut rng = Rng(a.seed);
    let tags: Vec<String> = (0..a.hosts)
        .map(|h| {
            host_tags(h, &mut rng)
                .iter()
                .map(|(k, v)| format!(",{k}={v}"))
                .collect::<String>()
        })
        .collect();
    let mut walk = Walk::new(a.hosts * CPU_FIELDS.len(), &mut rng, a.values);
    let t0 = start_ms(a.steps, a.interval_s, run)?;
    let mut bodies = Vec::new();
    let mut cur = Vec::with_capacity(a.influx_lines_per_request * 400);
    let mut cur_lines = 0usize;
    for step in 0..a.steps {
        let ts_ns = (t0 + step as i64 * a.interval_s as i64 * 1000) as i128 * 1_000_000;
        for (h, tag) in tags.iter().enumerate() {
            cur.extend_from_slice(b"cpu");
            cur.extend_from_slice(tag.as_bytes());
            for (f, field) in CPU_FIELDS.iter().enumerate() {
                let sep = if f == 0 { ' ' } else { ',' };
                let v = walk.text(h * CPU_FIELDS.len() + f);
                write!(cur, "{sep}{field}={v}").map_err(|e| e.to_string())?;
            }
            writeln!(cur, " {ts_ns}").map_err(|e| e.to_string())?;
            cur_lines += 1;
            if cur_lines == a.influx_lines_per_request {
                bodies.push(Body {
                    bytes: std::mem::take(&mut cur),
                    samples: (cur_lines * CPU_FIELDS.len()) as u64,
                });
                cur_lines = 0;
            }
        }
        walk.step(&mut rng);
    }
    if cur_lines > 0 {
        bodies.push(Body {
            bytes: cur,
            samples: (cur_lines * CPU_FIELDS.len()) as u64,
        });
    }
    Ok(Plan {
        path: "/api/v2/write?precision=ns".to_owned(),
        headers: vec![(
            "Content-Type".to_owned(),
            "text/plain; charset=utf-8".to_owned(),
        )],
        bodies,
        shape: format!(
            "{} hosts x 10 fields x {} steps, {} lines per request",
            a.hosts, a.steps, a.influx_lines_per_request
        ),
    })
}

/// The remote-write workload, generated a step at a time (all at once for a plan, or while
/// sending with `--stream`).
struct RwGen {
    series_labels: Vec<Vec<ingest::remote_write::proto::Label>>,
    walk: Walk,
    rng: Rng,
    t0: i64,
    step: usize,
    steps: usize,
    interval_ms: i64,
    per_request: usize,
    encoder: snap::raw::Encoder,
}

impl RwGen {
    fn new(a: &Args, run: usize) -> Result<RwGen, String> {
        use ingest::remote_write::proto::Label;
        let mut rng = Rng(a.seed);
        // Labels per stream, sorted by name as Prometheus sends them.
        let mut series_labels: Vec<Vec<Label>> = Vec::with_capacity(a.hosts * CPU_FIELDS.len());
        for h in 0..a.hosts {
            let tags = host_tags(h, &mut rng);
            for field in CPU_FIELDS {
                let mut labels: Vec<(String, String)> = tags.clone();
                labels.push(("__name__".to_owned(), format!("cpu_{field}")));
                labels.sort();
                series_labels.push(
                    labels
                        .into_iter()
                        .map(|(n, v)| Label {
                            name: n.into_bytes(),
                            value: v.into_bytes(),
                        })
                        .collect(),
                );
            }
        }
        let walk = Walk::new(series_labels.len(), &mut rng, a.values);
        Ok(RwGen {
            series_labels,
            walk,
            rng,
            t0: start_ms(a.steps, a.interval_s, run)?,
            step: 0,
            steps: a.steps,
            interval_ms: a.interval_s as i64 * 1000,
            per_request: a.rw_series_per_request,
            encoder: snap::raw::Encoder::new(),
        })
    }

    /// The next step's request bodies, `None` after the last step.
    fn next_step(&mut self) -> Result<Option<Vec<Body>>, String> {
        use ingest::remote_write::proto::{Sample, TimeSeries, WriteRequest};
        if self.step == self.steps {
            return Ok(None);
        }
        let ts = self.t0 + self.step as i64 * self.interval_ms;
        let mut bodies = Vec::new();
        for (c, labels) in self.series_labels.chunks(self.per_request).enumerate() {
            let req = WriteRequest {
                timeseries: labels
                    .iter()
                    .enumerate()
                    .map(|(i, labels)| TimeSeries {
                        labels: labels.clone(),
                        samples: vec![Sample {
                            value: self.walk.value(c * self.per_request + i),
                            timestamp: ts,
                        }],
                        histograms: Vec::new(),
                        exemplars: Vec::new(),
                    })
                    .collect(),
            };
            let samples = req.timeseries.len() as u64;
            let bytes = self
                .encoder
                .compress_vec(&req.encode_to_vec())
                .map_err(|e| format!("snappy: {e}"))?;
            bodies.push(Body { bytes, samples });
        }
        self.walk.step(&mut self.rng);
        self.step += 1;
        Ok(Some(bodies))
    }
}

fn remote_write_headers() -> Vec<(String, String)> {
    vec![
        (
            "Content-Type".to_owned(),
            "application/x-protobuf".to_owned(),
        ),
        ("Content-Encoding".to_owned(), "snappy".to_owned()),
        (
            "X-Prometheus-Remote-Write-Version".to_owned(),
            "0.1.0".to_owned(),
        ),
    ]
}

fn remote_write_shape(a: &Args) -> String {
    format!(
        "{} hosts x 10 metrics x {} steps, {} series (1 sample each) per request, {:?} values",
        a.hosts, a.steps, a.rw_series_per_request, a.values
    )
}

fn plan_remote_write(a: &Args, run: usize) -> Result<Plan, String> {
    let mut gen = RwGen::new(a, run)?;
    let mut bodies = Vec::new();
    while let Some(step) = gen.next_step()? {
        bodies.extend(step);
    }
    Ok(Plan {
        path: "/api/v1/write".to_owned(),
        headers: remote_write_headers(),
        bodies,
        shape: remote_write_shape(a),
    })
}

/// Native histogram schema of `remote-write-hist`: Prometheus's default resolution (bucket
/// bounds 2^(i/8), ≈ 9 % wide).
const NATIVE_SCHEMA: i32 = 3;

/// A series' running totals per native bucket (schema 3) and in all, as a client keeps them.
#[derive(Default)]
struct NativeCounter {
    buckets: std::collections::BTreeMap<i32, u64>,
    count: u64,
    sum: f64,
}

impl NativeCounter {
    fn observe(&mut self, v: f64) {
        let index = (v.log2() * f64::from(1 << NATIVE_SCHEMA)).ceil() as i32;
        *self.buckets.entry(index).or_default() += 1;
        self.count += 1;
        self.sum += v;
    }

    /// The running totals as a remote-write histogram: spans of consecutive buckets, counts as
    /// deltas (the first of each histogram absolute).
    fn to_proto(&self, ts: i64) -> ingest::remote_write::proto::Histogram {
        use ingest::remote_write::proto::{BucketSpan, Count, Histogram, ZeroCount};
        let mut spans: Vec<BucketSpan> = Vec::new();
        let mut deltas = Vec::with_capacity(self.buckets.len());
        let (mut last_index, mut last_count) = (None::<i32>, 0i64);
        for (&index, &count) in &self.buckets {
            match last_index {
                Some(l) if index == l + 1 => {
                    if let Some(s) = spans.last_mut() {
                        s.length += 1;
                    }
                }
                _ => spans.push(BucketSpan {
                    offset: last_index.map_or(index, |l| index - l - 1),
                    length: 1,
                }),
            }
            deltas.push(count as i64 - last_count);
            (last_index, last_count) = (Some(index), count as i64);
        }
        Histogram {
            count: Some(Count::CountInt(self.count)),
            sum: self.sum,
            schema: NATIVE_SCHEMA,
            zero_threshold: 2.938_735_877_055_719e-39,
            zero_count: Some(ZeroCount::ZeroCountInt(0)),
            positive_spans: spans,
            positive_deltas: deltas,
            timestamp: ts,
            ..Histogram::default()
        }
    }
}

/// `remote-write-hist`: the draws of `httptrap-hist` (same seed, same order) added to each
/// series' running native histogram, sent after every step.
fn plan_remote_write_hist(a: &Args, run: usize) -> Result<Plan, String> {
    use ingest::remote_write::proto::{Label, TimeSeries, WriteRequest};
    let mut rng = Rng(a.seed);
    let t0 = start_ms(a.hist_steps, a.interval_s, run)?;
    let mut counters: Vec<NativeCounter> = (0..a.hosts * a.hist_metrics)
        .map(|_| NativeCounter::default())
        .collect();
    let mut encoder = snap::raw::Encoder::new();
    let (mut bodies, mut cur, mut buckets) = (Vec::new(), Vec::new(), 0usize);
    let label = |n: &str, v: String| Label {
        name: n.as_bytes().to_vec(),
        value: v.into_bytes(),
    };
    for step in 0..a.hist_steps {
        let ts = t0 + step as i64 * a.interval_s as i64 * 1000;
        for host in 0..a.hosts {
            for metric in 0..a.hist_metrics {
                let (mu, sigma, draws) = hist_draw_shape(a, host, metric);
                let counter = &mut counters[host * a.hist_metrics + metric];
                for _ in 0..draws {
                    counter.observe((mu + sigma * rng.normal()).exp());
                }
                buckets += counter.buckets.len();
                cur.push(TimeSeries {
                    labels: vec![
                        label("__name__", "latency".to_owned()),
                        label("host", format!("host_{host}")),
                        label("metric", format!("m{metric}")),
                    ],
                    samples: Vec::new(),
                    histograms: vec![counter.to_proto(ts)],
                    exemplars: Vec::new(),
                });
                if cur.len() == a.hist_per_request {
                    let req = WriteRequest {
                        timeseries: std::mem::take(&mut cur),
                    };
                    let bytes = encoder
                        .compress_vec(&req.encode_to_vec())
                        .map_err(|e| format!("snappy: {e}"))?;
                    bodies.push(Body {
                        bytes,
                        samples: req.timeseries.len() as u64,
                    });
                }
            }
        }
    }
    if !cur.is_empty() {
        let req = WriteRequest { timeseries: cur };
        let bytes = encoder
            .compress_vec(&req.encode_to_vec())
            .map_err(|e| format!("snappy: {e}"))?;
        bodies.push(Body {
            bytes,
            samples: req.timeseries.len() as u64,
        });
    }
    let total = (a.hist_steps * a.hosts * a.hist_metrics).max(1);
    Ok(Plan {
        path: "/api/v1/write".to_owned(),
        headers: remote_write_headers(),
        bodies,
        shape: format!(
            "{} hosts x {} metrics x {} steps, {} native histograms (schema {NATIVE_SCHEMA}, \
             cumulative, {:.1} buckets) per request, {:?} draws",
            a.hosts,
            a.hist_metrics,
            a.hist_steps,
            a.hist_per_request,
            buckets as f64 / total as f64,
            a.hist_shape
        ),
    })
}

/// The lognormal a histogram series draws from, and how many draws per step (as
/// `httptrap-hist` makes them).
fn hist_draw_shape(a: &Args, host: usize, metric: usize) -> (f64, f64, usize) {
    match a.hist_shape {
        // Median latency differs per stream (2–200 ms) so streams are not identical.
        HistShape::Narrow => {
            let mu = (0.002f64).ln() + ((host * 7 + metric * 13) % 100) as f64 / 100.0 * 4.6;
            (mu, HIST_SIGMA, HIST_DRAWS)
        }
        HistShape::Store => (STORE_HIST_MU, STORE_HIST_SIGMA, STORE_HIST_DRAWS),
    }
}

/// Samples drawn per histogram: with σ = 0.35 (natural log) this populates ≈ 75 llhist bins.
const HIST_DRAWS: usize = 1500;
const HIST_SIGMA: f64 = 0.35;
/// `--hist-shape store`: `storebench`'s histogram observations (its `HISTOGRAM_*`).
const STORE_HIST_DRAWS: usize = 100;
const STORE_HIST_MU: f64 = -3.0;
const STORE_HIST_SIGMA: f64 = 1.6;

/// How the httptrap histogram workload writes each histogram.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum HistForm {
    /// JSON, `_value` as `H[..]=n` strings.
    Strings,
    /// JSON, `_value` as one base64 llhist.
    Base64,
    /// The flatbuffers metric list (`ingest::flat::encode`).
    Flat,
}

fn plan_httptrap_hist(a: &Args, run: usize, form: HistForm) -> Result<Plan, String> {
    let mut rng = Rng(a.seed);
    let t0 = start_ms(a.hist_steps, a.interval_s, run)?;
    let mut bodies = Vec::new();
    let mut cur = Vec::new();
    let mut cur_samples: Vec<ingest::Sample> = Vec::new();
    let mut cur_n = 0usize;
    let mut bins_total = 0u64;
    let mut hist_total = 0u64;
    for step in 0..a.hist_steps {
        let ts = t0 + step as i64 * a.interval_s as i64 * 1000;
        for host in 0..a.hosts {
            for metric in 0..a.hist_metrics {
                let (mu, sigma, draws) = hist_draw_shape(a, host, metric);
                let mut h = hist::Histogram::with_capacity(96);
                for _ in 0..draws {
                    h.insert((mu + sigma * rng.normal()).exp());
                }
                bins_total += h.bin_count() as u64;
                hist_total += 1;
                if form == HistForm::Flat {
                    let tags: ingest::Tags = Arc::from(vec![
                        ("host".to_owned(), format!("host_{host}")),
                        ("metric".to_owned(), format!("m{metric}")),
                    ]);
                    cur_samples.push(ingest::Sample {
                        name: "latency".to_owned(),
                        tags,
                        ts_ms: Some(ts),
                        value: ingest::Value::Histogram(h),
                        mode: ingest::Mode::Set,
                    });
                } else {
                    cur.push(if cur_n == 0 { b'{' } else { b',' });
                    write!(
                        cur,
                        "\"latency|ST[host:host_{host},metric:m{metric}]\":{{\"_type\":\"h\",\"_ts\":{ts},\"_value\":"
                    )
                    .map_err(|e| e.to_string())?;
                    if form == HistForm::Base64 {
                        write!(cur, "\"{}\"}}", h.to_base64()).map_err(|e| e.to_string())?;
                    } else {
                        cur.push(b'[');
                        for (i, entry) in h.to_text().iter().enumerate() {
                            if i > 0 {
                                cur.push(b',');
                            }
                            write!(cur, "\"{entry}\"").map_err(|e| e.to_string())?;
                        }
                        cur.extend_from_slice(b"]}");
                    }
                }
                cur_n += 1;
                if cur_n == a.hist_per_request {
                    bodies.push(finish_hist_body(&mut cur, &mut cur_samples, cur_n, form));
                    cur_n = 0;
                }
            }
        }
    }
    if cur_n > 0 {
        bodies.push(finish_hist_body(&mut cur, &mut cur_samples, cur_n, form));
    }
    let mean_bins = bins_total as f64 / hist_total.max(1) as f64;
    let content_type = match form {
        HistForm::Flat => ingest::flat::CONTENT_TYPE,
        _ => "application/json",
    };
    Ok(Plan {
        path: "/module/httptrap/serve-load/secret".to_owned(),
        headers: vec![("Content-Type".to_owned(), content_type.to_owned())],
        bodies,
        shape: format!(
            "{} hosts x {} metrics x {} steps, {} histograms per request, {:.1} bins each ({}, {:?} shape)",
            a.hosts,
            a.hist_metrics,
            a.hist_steps,
            a.hist_per_request,
            mean_bins,
            match form {
                HistForm::Strings => "JSON, H[..]=n strings",
                HistForm::Base64 => "JSON, base64",
                HistForm::Flat => "flatbuffers",
            },
            a.hist_shape
        ),
    })
}

/// Closes one request body of the histogram workload.
fn finish_hist_body(
    cur: &mut Vec<u8>,
    samples: &mut Vec<ingest::Sample>,
    n: usize,
    form: HistForm,
) -> Body {
    let bytes = if form == HistForm::Flat {
        let bytes = ingest::flat::encode(samples);
        samples.clear();
        bytes
    } else {
        cur.push(b'}');
        std::mem::take(cur)
    };
    Body {
        bytes,
        samples: n as u64,
    }
}

/// A minimal HTTP/1.1 keep-alive client: enough for POSTing bodies and reading short replies.
struct Conn {
    host: String,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn open(host: &str) -> Result<Conn, String> {
        let stream = TcpStream::connect(host).map_err(|e| format!("connect {host}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let timeout = Some(Duration::from_millis(REQUEST_TIMEOUT_MS));
        stream
            .set_read_timeout(timeout)
            .map_err(|e| e.to_string())?;
        stream
            .set_write_timeout(timeout)
            .map_err(|e| e.to_string())?;
        let writer = stream.try_clone().map_err(|e| e.to_string())?;
        Ok(Conn {
            host: host.to_owned(),
            reader: BufReader::new(stream),
            writer,
        })
    }

    fn post(
        &mut self,
        path: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<(u16, Vec<u8>), String> {
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.host,
            body.len()
        );
        for (k, v) in headers {
            head.push_str(k);
            head.push_str(": ");
            head.push_str(v);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        self.writer
            .write_all(head.as_bytes())
            .map_err(|e| format!("send: {e}"))?;
        self.writer
            .write_all(body)
            .map_err(|e| format!("send: {e}"))?;
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .map_err(|e| format!("read status: {e}"))?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad status line `{}`", line.trim_end()))?;
        let mut content_length = 0usize;
        let mut chunked = false;
        for _ in 0..HEADER_LINES_MAX {
            line.clear();
            self.reader
                .read_line(&mut line)
                .map_err(|e| format!("read header: {e}"))?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let v = v.trim();
                if k.eq_ignore_ascii_case("content-length") {
                    content_length = v.parse().map_err(|_| format!("bad content-length `{v}`"))?;
                } else if k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked") {
                    chunked = true;
                }
            }
        }
        let mut out = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.reader
                    .read_line(&mut line)
                    .map_err(|e| format!("read chunk: {e}"))?;
                let size = usize::from_str_radix(line.trim(), 16)
                    .map_err(|_| format!("bad chunk size `{}`", line.trim()))?;
                if out.len() + size > RESPONSE_BYTES_MAX {
                    return Err("response body too large".to_owned());
                }
                let mut chunk = vec![0; size + 2];
                self.reader
                    .read_exact(&mut chunk)
                    .map_err(|e| format!("read chunk: {e}"))?;
                if size == 0 {
                    break;
                }
                out.extend_from_slice(&chunk[..size]);
            }
        } else {
            if content_length > RESPONSE_BYTES_MAX {
                return Err("response body too large".to_owned());
            }
            out.resize(content_length, 0);
            self.reader
                .read_exact(&mut out)
                .map_err(|e| format!("read body: {e}"))?;
        }
        Ok((status, out))
    }
}

/// utime + stime of `pid` in seconds.
fn cpu_seconds(pid: u32, ticks_per_s: f64) -> Result<f64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    // The command name (field 2) may hold spaces and parentheses: fields restart after the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or("bad /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': index 0 = state (field 3), so utime (field 14) = 11, stime (field 15) = 12.
    let get = |i: usize| -> Result<f64, String> {
        fields
            .get(i)
            .and_then(|s| s.parse::<u64>().ok())
            .map(|t| t as f64 / ticks_per_s)
            .ok_or_else(|| format!("/proc/{pid}/stat: field {} missing", i + 3))
    };
    Ok(get(11)? + get(12)?)
}

fn clock_ticks_per_s() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// A server this program started; killed (SIGTERM, then wait) on drop, and its data
/// directory removed: a run's WAL and blocks are hundreds of MB, and runs left behind filled
/// the page cache (and the disk), which made later runs pay the kernel's reclaim.
struct Spawned {
    child: Child,
    host: String,
    data_dir: PathBuf,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut exited = false;
        while !exited && Instant::now() < deadline {
            exited = matches!(self.child.try_wait(), Ok(Some(_)));
            if !exited {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Err(e) = std::fs::remove_dir_all(&self.data_dir) {
            eprintln!("serve-load: {}: {e}", self.data_dir.display());
        }
    }
}

/// Finds the HTTP listener's address in the server's start-up line: the first `IP:PORT`
/// token on a line that mentions `http`.
fn http_addr_in(line: &str) -> Option<String> {
    let lower = line.to_ascii_lowercase();
    let at = lower.find("http")?;
    for token in line[at..].split(|c: char| c.is_whitespace() || c == '"' || c == ',' || c == '=') {
        let t = token.trim_start_matches("http://").trim_end_matches('/');
        if let Some((ip, port)) = t.rsplit_once(':') {
            let ip_ok =
                ip.split('.').count() == 4 && ip.split('.').all(|p| p.parse::<u8>().is_ok());
            if ip_ok && port.parse::<u16>().is_ok_and(|p| p != 0) {
                return Some(t.to_owned());
            }
        }
    }
    None
}

fn spawn_server(a: &Args, bin: &Path, run: usize) -> Result<Spawned, String> {
    let dir = a
        .work_dir
        .join(format!("data-{}-{run}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut child = Command::new("taskset")
        .arg("-c")
        .arg(&a.server_cpu)
        .arg(bin)
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--statsd",
            "off",
            "--graphite",
            "off",
        ])
        .arg("--data-dir")
        .arg(&dir)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn taskset {}: {e}", bin.display()))?;
    let (tx, rx) = mpsc::channel::<String>();
    let out = child.stdout.take().ok_or("no stdout")?;
    let err = child.stderr.take().ok_or("no stderr")?;
    for pipe in [Box::new(out) as Box<dyn Read + Send>, Box::new(err)] {
        let tx = tx.clone();
        // Keeps draining after start-up so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    let deadline = Instant::now() + Duration::from_millis(STARTUP_TIMEOUT_MS);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(host) = http_addr_in(&line) {
                    let data_dir = dir;
                    return Ok(Spawned {
                        child,
                        host,
                        data_dir,
                    });
                }
                if seen.len() < 20 {
                    seen.push(line);
                }
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_dir_all(&dir);
                return Err(format!(
                    "server printed no HTTP address within {STARTUP_TIMEOUT_MS} ms; output:\n{}",
                    seen.join("\n")
                ));
            }
        }
    }
}

struct RunResult {
    samples: u64,
    bytes: u64,
    requests: usize,
    wall_s: f64,
    cpu_s: f64,
}

fn send_all(host: &str, pid: u32, plan: &Plan, connections: usize) -> Result<RunResult, String> {
    let ticks = clock_ticks_per_s();
    // One warm-up connection check so connection errors show before measuring.
    Conn::open(host)?;
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let error: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let cpu0 = cpu_seconds(pid, ticks)?;
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..connections {
            let next = Arc::clone(&next);
            let stop = Arc::clone(&stop);
            let error = Arc::clone(&error);
            s.spawn(move || {
                let fail = |msg: String| {
                    stop.store(true, Ordering::SeqCst);
                    if let Ok(mut e) = error.lock() {
                        e.get_or_insert(msg);
                    }
                };
                let mut conn = match Conn::open(host) {
                    Ok(c) => c,
                    Err(e) => return fail(e),
                };
                while !stop.load(Ordering::SeqCst) {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(body) = plan.bodies.get(i) else {
                        break;
                    };
                    match conn.post(&plan.path, &plan.headers, &body.bytes) {
                        Ok((status, _)) if (200..300).contains(&status) => {}
                        Ok((status, reply)) => {
                            let text = String::from_utf8_lossy(&reply[..reply.len().min(500)])
                                .into_owned();
                            return fail(format!("request {i}: HTTP {status}: {text}"));
                        }
                        Err(e) => return fail(format!("request {i}: {e}")),
                    }
                }
            });
        }
    });
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu1 = cpu_seconds(pid, ticks)?;
    if let Ok(mut e) = error.lock() {
        if let Some(msg) = e.take() {
            return Err(msg);
        }
    }
    Ok(RunResult {
        samples: plan.bodies.iter().map(|b| b.samples).sum(),
        bytes: plan.bodies.iter().map(|b| b.bytes.len() as u64).sum(),
        requests: plan.bodies.len(),
        wall_s,
        cpu_s: cpu1 - cpu0,
    })
}

/// Bodies generated ahead of the senders in `--stream` mode (a few steps' worth of requests).
const STREAM_AHEAD_BODIES: usize = 2048;

/// `send_all` for bodies generated while sending (`--stream`): a generator thread fills a
/// bounded queue that the connections drain. The loader's generating runs on its own core, so
/// the server's CPU is measured the same way.
fn send_stream(
    host: &str,
    pid: u32,
    mut gen: RwGen,
    connections: usize,
) -> Result<RunResult, String> {
    let ticks = clock_ticks_per_s();
    Conn::open(host)?;
    let (tx, rx) = mpsc::sync_channel::<Body>(STREAM_AHEAD_BODIES);
    let rx = Mutex::new(rx);
    let stop = AtomicBool::new(false);
    let error: Mutex<Option<String>> = Mutex::new(None);
    let (samples, bytes, requests) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    let fail = |msg: String| {
        stop.store(true, Ordering::SeqCst);
        if let Ok(mut e) = error.lock() {
            e.get_or_insert(msg);
        }
    };
    let path = "/api/v1/write";
    let headers = remote_write_headers();
    let cpu0 = cpu_seconds(pid, ticks)?;
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let (stop, fail) = (&stop, &fail);
        // The generator owns the sender: its end (or the receiver's, below) ends the queue.
        s.spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match gen.next_step() {
                    Ok(Some(bodies)) => {
                        for b in bodies {
                            if tx.send(b).is_err() {
                                return;
                            }
                        }
                    }
                    Ok(None) => return,
                    Err(e) => return fail(e),
                }
            }
        });
        std::thread::scope(|conns| {
            for _ in 0..connections {
                conns.spawn(|| {
                    let mut conn = match Conn::open(host) {
                        Ok(c) => c,
                        Err(e) => return fail(e),
                    };
                    while !stop.load(Ordering::SeqCst) {
                        let body = match rx.lock().map(|r| r.recv()) {
                            Ok(Ok(b)) => b,
                            _ => return,
                        };
                        match conn.post(path, &headers, &body.bytes) {
                            Ok((status, _)) if (200..300).contains(&status) => {
                                samples.fetch_add(body.samples as usize, Ordering::Relaxed);
                                bytes.fetch_add(body.bytes.len(), Ordering::Relaxed);
                                requests.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok((status, reply)) => {
                                let text = String::from_utf8_lossy(&reply[..reply.len().min(500)])
                                    .into_owned();
                                return fail(format!("HTTP {status}: {text}"));
                            }
                            Err(e) => return fail(e),
                        }
                    }
                });
            }
        });
        // Every connection is done: a generator blocked on a full queue gets an error.
        drop(rx);
    });
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu1 = cpu_seconds(pid, ticks)?;
    if let Ok(mut e) = error.lock() {
        if let Some(msg) = e.take() {
            return Err(msg);
        }
    }
    Ok(RunResult {
        samples: samples.into_inner() as u64,
        bytes: bytes.into_inner() as u64,
        requests: requests.into_inner(),
        wall_s,
        cpu_s: cpu1 - cpu0,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Run `r`'s plan: generated, or read from `--plan-cache` where an earlier run with the same
/// workload arguments left it.
fn cached_plan(a: &Args, r: usize) -> Result<Plan, String> {
    let generate = || match a.workload {
        Workload::Influx => plan_influx(a, r),
        Workload::RemoteWrite => plan_remote_write(a, r),
        Workload::HttptrapHist => plan_httptrap_hist(a, r, HistForm::Strings),
        Workload::HttptrapHistB64 => plan_httptrap_hist(a, r, HistForm::Base64),
        Workload::HttptrapHistFlat => plan_httptrap_hist(a, r, HistForm::Flat),
        Workload::RemoteWriteHist => plan_remote_write_hist(a, r),
    };
    let Some(dir) = &a.plan_cache else {
        return generate();
    };
    // Every argument that shapes the plan names the file, and the hour: timestamps are
    // relative to the time of generating, and a plan stays within an hour of it.
    let hour = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| format!("clock before 1970: {e}"))?
        .as_secs()
        / 3600;
    let name = format!(
        "{:?}-{:?}-{:?}-h{}-i{}-s{}-hm{}-hs{}-hpr{}-ilpr{}-rwspr{}-seed{}-run{r}-hour{hour}-m30.plan",
        a.workload,
        a.hist_shape,
        a.values,
        a.hosts,
        a.interval_s,
        a.steps,
        a.hist_metrics,
        a.hist_steps,
        a.hist_per_request,
        a.influx_lines_per_request,
        a.rw_series_per_request,
        a.seed
    );
    let path = dir.join(name);
    if let Ok(bytes) = std::fs::read(&path) {
        return read_plan(&bytes).ok_or_else(|| format!("{}: not a plan file", path.display()));
    }
    let plan = generate()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::write(&path, write_plan(&plan)).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(plan)
}

/// A plan as bytes: each text and body as a little-endian u64 length then its bytes (bodies
/// with their sample count first); the start time is part of the generated bodies.
fn write_plan(plan: &Plan) -> Vec<u8> {
    let mut out = Vec::new();
    let put = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
    };
    put(&mut out, plan.path.as_bytes());
    put(&mut out, plan.shape.as_bytes());
    out.extend_from_slice(&(plan.headers.len() as u64).to_le_bytes());
    for (name, value) in &plan.headers {
        put(&mut out, name.as_bytes());
        put(&mut out, value.as_bytes());
    }
    out.extend_from_slice(&(plan.bodies.len() as u64).to_le_bytes());
    for body in &plan.bodies {
        out.extend_from_slice(&body.samples.to_le_bytes());
        put(&mut out, &body.bytes);
    }
    out
}

fn read_plan(mut bytes: &[u8]) -> Option<Plan> {
    fn take<'b>(bytes: &mut &'b [u8]) -> Option<&'b [u8]> {
        let (head, rest) = bytes.split_first_chunk::<8>()?;
        let len = usize::try_from(u64::from_le_bytes(*head)).ok()?;
        let taken = rest.get(..len)?;
        *bytes = &rest[len..];
        Some(taken)
    }
    fn count(bytes: &mut &[u8]) -> Option<u64> {
        let (head, rest) = bytes.split_first_chunk::<8>()?;
        *bytes = rest;
        Some(u64::from_le_bytes(*head))
    }
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).ok();
    let path = text(take(&mut bytes)?)?;
    let shape = text(take(&mut bytes)?)?;
    let mut headers = Vec::new();
    for _ in 0..count(&mut bytes)? {
        headers.push((text(take(&mut bytes)?)?, text(take(&mut bytes)?)?));
    }
    let mut bodies = Vec::new();
    for _ in 0..count(&mut bytes)? {
        let samples = count(&mut bytes)?;
        bodies.push(Body {
            bytes: take(&mut bytes)?.to_vec(),
            samples,
        });
    }
    bytes.is_empty().then_some(Plan {
        path,
        headers,
        bodies,
        shape,
    })
}

fn run(a: &Args) -> Result<(), String> {
    let mut per_cpu = Vec::new();
    let mut per_wall = Vec::new();
    for r in 0..a.runs {
        if a.stream {
            let (rate_cpu, rate_wall) = run_streamed(a, r)?;
            per_cpu.push(rate_cpu);
            per_wall.push(rate_wall);
            continue;
        }
        let gen0 = Instant::now();
        let plan = cached_plan(a, r)?;
        let gen_s = gen0.elapsed().as_secs_f64();
        let spawned = match &a.spawn {
            Some(bin) => Some(spawn_server(a, bin, r)?),
            None => None,
        };
        let (host, pid) = match (&spawned, &a.url, a.pid) {
            (Some(s), _, _) => (s.host.clone(), s.child.id()),
            (None, Some(url), Some(pid)) => (url.trim_start_matches("http://").to_owned(), pid),
            _ => return Err("no server".to_owned()),
        };
        let res = send_all(&host, pid, &plan, a.connections)?;
        drop(spawned);
        let rate_cpu = res.samples as f64 / res.cpu_s.max(1e-9);
        let rate_wall = res.samples as f64 / res.wall_s.max(1e-9);
        println!(
            "run {r}: {:?} {}: {} samples in {} requests ({:.1} MB), generated in {gen_s:.1} s; \
             server CPU {:.2} s, wall {:.2} s -> {:.0} samples/server-CPU-s, {:.0} samples/wall-s",
            a.workload,
            plan.shape,
            res.samples,
            res.requests,
            res.bytes as f64 / 1e6,
            res.cpu_s,
            res.wall_s,
            rate_cpu,
            rate_wall
        );
        per_cpu.push(rate_cpu);
        per_wall.push(rate_wall);
    }
    println!(
        "median of {} runs: {:?}: {:.0} samples/server-CPU-s, {:.0} samples/wall-s",
        a.runs,
        a.workload,
        median(per_cpu),
        median(per_wall)
    );
    Ok(())
}

/// One `--stream` run of the remote-write workload: (samples per server CPU-s, per wall-s).
fn run_streamed(a: &Args, r: usize) -> Result<(f64, f64), String> {
    if a.workload != Workload::RemoteWrite {
        return Err("--stream 1 is for --workload remote-write".to_owned());
    }
    let spawned = match &a.spawn {
        Some(bin) => Some(spawn_server(a, bin, r)?),
        None => None,
    };
    let (host, pid) = match (&spawned, &a.url, a.pid) {
        (Some(s), _, _) => (s.host.clone(), s.child.id()),
        (None, Some(url), Some(pid)) => (url.trim_start_matches("http://").to_owned(), pid),
        _ => return Err("no server".to_owned()),
    };
    let res = send_stream(&host, pid, RwGen::new(a, r)?, a.connections)?;
    drop(spawned);
    let (rate_cpu, rate_wall) = (
        res.samples as f64 / res.cpu_s.max(1e-9),
        res.samples as f64 / res.wall_s.max(1e-9),
    );
    println!(
        "run {r}: {:?} {} (streamed): {} samples in {} requests ({:.1} MB); server CPU {:.2} s, \
         wall {:.2} s -> {:.0} samples/server-CPU-s, {:.0} samples/wall-s",
        a.workload,
        remote_write_shape(a),
        res.samples,
        res.requests,
        res.bytes as f64 / 1e6,
        res.cpu_s,
        res.wall_s,
        rate_cpu,
        rate_wall
    );
    Ok((rate_cpu, rate_wall))
}

fn main() {
    let code = match parse_args().and_then(|a| run(&a)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("serve-load: {e}");
            2
        }
    };
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn finds_the_http_address_in_a_startup_line() {
        assert_eq!(
            http_addr_in("strata serve: http=127.0.0.1:41234 statsd=off").as_deref(),
            Some("127.0.0.1:41234")
        );
        assert_eq!(
            http_addr_in("listening http://127.0.0.1:8112/ graphite 127.0.0.1:2003").as_deref(),
            Some("127.0.0.1:8112")
        );
        assert_eq!(http_addr_in("statsd 127.0.0.1:8125"), None);
        assert_eq!(http_addr_in("http 127.0.0.1:0"), None);
    }

    #[test]
    fn histogram_workload_has_about_75_bins_and_parses() {
        let mut rng = Rng(1);
        let mut total = 0usize;
        for _ in 0..50 {
            let mut h = hist::Histogram::new();
            for _ in 0..HIST_DRAWS {
                h.insert((0.01f64.ln() + HIST_SIGMA * rng.normal()).exp());
            }
            total += h.bin_count();
        }
        let mean = total as f64 / 50.0;
        assert!((65.0..=85.0).contains(&mean), "mean bins {mean}");
    }

    /// A plan read back from its file is the plan written; a cut or extended file is refused.
    #[test]
    fn plans_round_trip_through_their_file_form() {
        let plan = Plan {
            path: "/write".to_owned(),
            headers: vec![("Content-Type".to_owned(), "text/plain".to_owned())],
            bodies: vec![
                Body {
                    bytes: b"a b".to_vec(),
                    samples: 2,
                },
                Body {
                    bytes: Vec::new(),
                    samples: 0,
                },
            ],
            shape: "two bodies".to_owned(),
        };
        let bytes = write_plan(&plan);
        let read = read_plan(&bytes).unwrap();
        assert_eq!(read.path, plan.path);
        assert_eq!(read.headers, plan.headers);
        assert_eq!(read.shape, plan.shape);
        let bodies = |p: &Plan| -> Vec<(Vec<u8>, u64)> {
            p.bodies
                .iter()
                .map(|b| (b.bytes.clone(), b.samples))
                .collect()
        };
        assert_eq!(bodies(&read), bodies(&plan));
        assert!(read_plan(&bytes[..bytes.len() - 1]).is_none());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(read_plan(&longer).is_none());
    }

    #[test]
    fn influx_and_remote_write_bodies_parse_to_the_planned_sample_counts() {
        let a = Args {
            workload: Workload::Influx,
            spawn: None,
            url: None,
            pid: None,
            server_cpu: "0".into(),
            work_dir: PathBuf::from("/tmp"),
            hosts: 7,
            interval_s: 10,
            steps: 3,
            hist_metrics: 2,
            hist_steps: 2,
            hist_per_request: 5,
            influx_lines_per_request: 4,
            rw_series_per_request: 9,
            connections: 1,
            runs: 1,
            seed: 3,
            plan_cache: None,
            hist_shape: HistShape::Narrow,
            values: ValueShape::Walk,
            stream: false,
        };
        let now = start_ms(1, 10, 0).unwrap() + 3_600_000;
        let opts = ingest::Options::at(now);
        let p = plan_influx(&a, 0).unwrap();
        assert_eq!(p.bodies.iter().map(|b| b.samples).sum::<u64>(), 7 * 10 * 3);
        for b in &p.bodies {
            let batch =
                ingest::influx::parse(&b.bytes, &opts, ingest::influx::Precision::Nanoseconds);
            assert_eq!(batch.rejected_total, 0, "{:?}", batch.rejected);
            assert_eq!(batch.samples.len() as u64, b.samples);
        }
        let p = plan_remote_write(&a, 0).unwrap();
        assert_eq!(p.bodies.iter().map(|b| b.samples).sum::<u64>(), 7 * 10 * 3);
        for b in &p.bodies {
            let batch = ingest::remote_write::parse(&b.bytes, &opts);
            assert_eq!(batch.rejected_total, 0, "{:?}", batch.rejected);
            assert_eq!(batch.samples.len() as u64, b.samples);
        }
        let gauge = Args {
            values: ValueShape::Gauge,
            ..a.clone()
        };
        for p in [
            plan_influx(&gauge, 0).unwrap(),
            plan_remote_write(&gauge, 0).unwrap(),
        ] {
            assert_eq!(p.bodies.iter().map(|b| b.samples).sum::<u64>(), 7 * 10 * 3);
            for b in &p.bodies {
                let batch = if p.path == "/api/v1/write" {
                    ingest::remote_write::parse(&b.bytes, &opts)
                } else {
                    ingest::influx::parse(&b.bytes, &opts, ingest::influx::Precision::Nanoseconds)
                };
                assert_eq!(batch.rejected_total, 0, "{:?}", batch.rejected);
                assert_eq!(batch.samples.len() as u64, b.samples);
            }
        }
        let p = plan_remote_write_hist(&a, 0).unwrap();
        assert_eq!(p.bodies.iter().map(|b| b.samples).sum::<u64>(), 7 * 2 * 2);
        for b in &p.bodies {
            let batch = ingest::remote_write::parse(&b.bytes, &opts);
            assert_eq!(batch.rejected_total, 0, "{:?}", batch.rejected);
            assert_eq!(batch.samples.len() as u64, b.samples);
        }
        let store_shape = Args {
            hist_shape: HistShape::Store,
            ..a.clone()
        };
        for (a, form) in [
            (&a, HistForm::Strings),
            (&a, HistForm::Base64),
            (&a, HistForm::Flat),
            (&store_shape, HistForm::Strings),
        ] {
            let p = plan_httptrap_hist(a, 0, form).unwrap();
            assert_eq!(p.bodies.iter().map(|b| b.samples).sum::<u64>(), 7 * 2 * 2);
            for b in &p.bodies {
                let batch = if form == HistForm::Flat {
                    ingest::flat::parse(&b.bytes, &opts)
                } else {
                    ingest::httptrap::parse(&b.bytes, &opts)
                };
                assert_eq!(batch.rejected_total, 0, "{:?}", batch.rejected);
                assert_eq!(batch.samples.len() as u64, b.samples);
            }
        }
    }
}
