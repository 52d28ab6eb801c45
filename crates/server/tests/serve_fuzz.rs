//! Fuzzing of every HTTP endpoint's request handling, not only its parser: requests with
//! arbitrary methods, paths from the route table (their parameters filled with odd segments),
//! query strings, headers and bodies (random bytes and mutated valid bodies of every protocol,
//! some gzipped) sent to the real `strata serve`. Every answer must be no 5xx but a 503 (a
//! budget), every 4xx a JSON body (an OTLP protobuf request's a protobuf `Status`), and the
//! server must stay up.
//!
//! The checked-in corpus (`tests/fuzz_http/corpus.jsonl`, one request a line) is replayed
//! first, then new inputs are generated for `STRATA_FUZZ_HTTP_S` seconds (default 15) from
//! `STRATA_FUZZ_HTTP_SEED` (default: the time). A failing input is printed as a corpus line;
//! `STRATA_FUZZ_HTTP_SAVE=<file>` appends every generated input to a file (to grow the corpus).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::Server;

/// Seconds of generated inputs when `STRATA_FUZZ_HTTP_S` is not set.
const FUZZ_S_DEFAULT: u64 = 15;
/// The longest generated body.
const BODY_BYTES_MAX: usize = 8 << 10;

/// Route templates of the router (`{…}` filled per input).
const ROUTES: [&str; 36] = [
    "/",
    "/index.html",
    "/favicon.ico",
    "/favicon.svg",
    "/assets/{path}",
    "/health",
    "/metrics",
    "/install.sh",
    "/download/strata.sha256",
    "/module/httptrap/{check}/{secret}",
    "/write/{check}",
    "/write",
    "/api/v2/write",
    "/api/v1/write",
    "/v1/metrics",
    "/api/strata/v1/find",
    "/api/strata/v1/fetch",
    "/api/strata/v1/caql",
    "/api/strata/v1/overview",
    "/api/strata/v1/worksheets",
    "/api/strata/v1/worksheets/{id}",
    "/api/strata/v1/dashboards",
    "/api/strata/v1/dashboards/{id}",
    "/api/strata/v1/checks",
    "/api/strata/v1/checks/{id}",
    "/api/strata/v1/alerts",
    "/api/strata/v1/rules",
    "/api/strata/v1/cluster/status",
    "/api/v1/query",
    "/api/v1/query_range",
    "/api/v1/series",
    "/api/v1/labels",
    "/api/v1/label/{name}/values",
    "/api/v1/metadata",
    "/api/v1/rules",
    "/api/v1/alerts",
];

/// Methods, the ones routes take more often than the others.
const METHODS: [&str; 15] = [
    "GET", "POST", "PUT", "GET", "POST", "PUT", "GET", "POST", "DELETE", "PATCH", "HEAD",
    "OPTIONS", "TRACE", "FROB", "DELETE",
];

const PARAMS: [&str; 20] = [
    "query",
    "start",
    "end",
    "step",
    "period",
    "precision",
    "time",
    "match[]",
    "limit",
    "owner",
    "broker",
    "transform",
    "db",
    "org",
    "bucket",
    "order",
    "timeout",
    "name",
    "id",
    "format",
];

/// Values that reach odd corners of the parameter parsers.
const VALUES: [&str; 26] = [
    "",
    "0",
    "-1",
    "1e308",
    "NaN",
    "9223372036854775807",
    "-9223372036854775808",
    "2024-01-01T00:00:00Z",
    "1m",
    "0s",
    "5y",
    "ns",
    "ms",
    "s",
    "and(__name:x)",
    "or(a:b,and(c:d))",
    "histogram_quantile(0.9, rate(x_bucket[5m]))",
    "sum by (a) (rate(x[1m]))",
    "x[100000d:1s]",
    "find(\"x\") | window:mean(1h)",
    "{__name__=~\".+\"}",
    "%00",
    "%ff%fe",
    "..%2f..%2fetc%2fpasswd",
    "recent",
    "\u{10ffff}",
];

const CONTENT_TYPES: [&str; 10] = [
    "application/json",
    "application/x-protobuf",
    "application/x-protobuf;proto=io.prometheus.write.v2.Request",
    "application/x-protobuf;proto=prometheus.WriteRequest",
    "application/x-protobuf;proto=nonsense.v9",
    "application/x-flatbuffers",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/json; charset=latin1",
];

/// One request: what the corpus holds a line of.
#[derive(Clone, Debug)]
struct Input {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Input {
    fn to_line(&self) -> String {
        json!({
            "method": self.method,
            "target": self.target,
            "headers": self.headers,
            "body": hex(&self.body),
        })
        .to_string()
    }

    fn from_line(line: &str) -> Input {
        let v: Value = serde_json::from_str(line).unwrap();
        Input {
            method: v["method"].as_str().unwrap().to_owned(),
            target: v["target"].as_str().unwrap().to_owned(),
            headers: v["headers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| (h[0].as_str().unwrap().into(), h[1].as_str().unwrap().into()))
                .collect(),
            body: unhex(v["body"].as_str().unwrap()),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// xorshift64*: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// A path segment: ordinary, empty-ish, encoded, long or hostile.
fn segment(rng: &mut Rng) -> String {
    match rng.below(8) {
        0 => "web".into(),
        1 => "secret".into(),
        2 => "%2e%2e".into(),
        3 => "a".repeat(1 + rng.below(3000)),
        4 => "%00%ff".into(),
        5 => format!("{}", rng.next()),
        6 => "x%2Fy".into(),
        _ => "ws-1".into(),
    }
}

fn target(rng: &mut Rng) -> String {
    let template = *rng.pick(&ROUTES);
    let mut path = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        path.push_str(&rest[..open]);
        let close = rest[open..].find('}').unwrap() + open;
        path.push_str(&segment(rng));
        rest = &rest[close + 1..];
    }
    path.push_str(rest);
    if rng.chance(10) {
        path.push_str(&format!("/{}", segment(rng)));
    }
    let params = rng.below(5);
    for i in 0..params {
        path.push(if i == 0 { '?' } else { '&' });
        let name = *rng.pick(&PARAMS);
        let value = *rng.pick(&VALUES);
        path.push_str(&serve_common::urlencode(name));
        path.push('=');
        if value.starts_with('%') {
            path.push_str(value);
        } else {
            path.push_str(&serve_common::urlencode(value));
        }
    }
    path
}

/// A valid body of one of the protocols, to be mutated.
fn seed_body(rng: &mut Rng) -> Vec<u8> {
    let now_s = serve_common::now_s();
    match rng.below(7) {
        0 => format!("cpu,host=a usage=0.5,n=3i,s=\"x\",b=t {now_s}000000000\n").into_bytes(),
        1 => json!({"lat": {"_type": "h", "_value": ["H[1.0e-2]=3", 0.5]}, "n": 3, "s": "x"})
            .to_string()
            .into_bytes(),
        2 => json!({"name": "w", "query": "and(__name:x)", "owner": "fuzz"})
            .to_string()
            .into_bytes(),
        3 => json!({"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "m",
            "gauge": {"dataPoints": [{"asDouble": 1.5, "timeUnixNano": "1"}]}}]}]}]})
        .to_string()
        .into_bytes(),
        4 => snap::raw::Encoder::new()
            .compress_vec(b"\x0a\x10\x0a\x08\x0a\x08__name__\x12\x01x")
            .unwrap(),
        5 => json!({"name": "r", "rules": [{"alert": "A", "expr": "up == 0"}]})
            .to_string()
            .into_bytes(),
        _ => b"x.y.z 1 1700000000\n".to_vec(),
    }
}

fn mutate(rng: &mut Rng, body: &mut Vec<u8>) {
    for _ in 0..rng.below(8) {
        if body.is_empty() {
            body.push(rng.next() as u8);
            continue;
        }
        let at = rng.below(body.len());
        match rng.below(5) {
            0 => body[at] = rng.next() as u8,
            1 => {
                body.remove(at);
            }
            2 => body.insert(at, *rng.pick(b"{}[]\",=: \n\\0123456789.eE-")),
            3 => {
                let copy: Vec<u8> = body[at..].iter().take(64).copied().collect();
                body.splice(at..at, copy);
            }
            _ => body.truncate(at),
        }
    }
    body.truncate(BODY_BYTES_MAX);
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn generate(rng: &mut Rng, host: &str) -> Input {
    let method = (*rng.pick(&METHODS)).to_owned();
    let target = target(rng);
    let mut headers = vec![("host".to_owned(), host.to_owned())];
    let mut body = match rng.below(4) {
        0 => Vec::new(),
        1 => (0..rng.below(BODY_BYTES_MAX))
            .map(|_| rng.next() as u8)
            .collect(),
        _ => seed_body(rng),
    };
    if rng.chance(2) {
        mutate(rng, &mut body);
    }
    if rng.chance(2) {
        headers.push(("content-type".into(), (*rng.pick(&CONTENT_TYPES)).into()));
    }
    match rng.below(8) {
        0 => {
            body = gzip(&body);
            headers.push(("content-encoding".into(), "gzip".into()));
        }
        1 => headers.push(("content-encoding".into(), "gzip".into())),
        2 => headers.push(("content-encoding".into(), "br".into())),
        3 => headers.push(("content-encoding".into(), "snappy".into())),
        _ => {}
    }
    if rng.chance(6) {
        headers.push(("strata-source".into(), segment(rng)));
        headers.push(("strata-epoch".into(), (*rng.pick(&VALUES)).into()));
        headers.push(("strata-sequence".into(), (*rng.pick(&VALUES)).into()));
    }
    if rng.chance(10) {
        headers.push(("origin".into(), format!("http://{host}")));
    }
    if rng.chance(10) {
        headers.push(("access-control-request-method".into(), "POST".into()));
    }
    if rng.chance(10) {
        headers.push(("authorization".into(), "Bearer nope".into()));
    }
    Input {
        method,
        target,
        headers,
        body,
    }
}

/// Sends one input; `Err` says what was wrong with the answer.
fn check(http: &reqwest::blocking::Client, base: &str, input: &Input) -> Result<u16, String> {
    let method = reqwest::Method::from_bytes(input.method.as_bytes()).unwrap();
    let mut request = http.request(method.clone(), format!("{base}{}", input.target));
    for (name, value) in &input.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let response = request
        .body(input.body.clone())
        .send()
        .map_err(|e| format!("no answer: {e}"))?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = response
        .bytes()
        .map_err(|e| format!("reading the answer: {e}"))?;
    if status >= 500 && status != 503 {
        return Err(format!(
            "status {status}: {}",
            String::from_utf8_lossy(&body)
        ));
    }
    if (400..500).contains(&status) && method != reqwest::Method::HEAD {
        if content_type.starts_with("application/x-protobuf") {
            return Ok(status);
        }
        let parsed: Result<Value, _> = serde_json::from_slice(&body);
        if !content_type.starts_with("application/json") || parsed.is_err() {
            return Err(format!(
                "status {status} without a JSON body ({content_type:?}): {:?}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ));
        }
    }
    Ok(status)
}

fn corpus_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_http/corpus.jsonl")
}

#[test]
fn every_endpoint_answers_arbitrary_requests_without_a_5xx() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("data"), &[]);
    let host = server.http.clone().unwrap();
    let base = format!("http://{host}");
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut failures = Vec::new();
    let corpus = std::fs::read_to_string(corpus_path()).unwrap();
    let mut replayed = 0;
    for line in corpus.lines().filter(|l| !l.trim().is_empty()) {
        let mut input = Input::from_line(line);
        // The corpus names the server it was made against; this one has its own port.
        for header in &mut input.headers {
            header.1 = header.1.replace("{host}", &host);
        }
        if let Err(e) = check(&http, &base, &input) {
            failures.push(format!("{e}\n  input: {line}"));
        }
        replayed += 1;
    }
    let seconds = std::env::var("STRATA_FUZZ_HTTP_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(FUZZ_S_DEFAULT);
    let seed = std::env::var("STRATA_FUZZ_HTTP_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    let mut save = std::env::var("STRATA_FUZZ_HTTP_SAVE").ok().map(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .unwrap()
    });
    let mut rng = Rng(seed);
    let started = Instant::now();
    let mut generated = 0u64;
    let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
    while started.elapsed() < Duration::from_secs(seconds) && failures.len() < 10 {
        let input = generate(&mut rng, &host);
        generated += 1;
        let mut line = input.clone();
        for header in &mut line.headers {
            header.1 = header.1.replace(&host, "{host}");
        }
        let line = line.to_line();
        if let Some(file) = save.as_mut() {
            writeln!(file, "{line}").unwrap();
        }
        match check(&http, &base, &input) {
            Ok(status) => *statuses.entry(status).or_default() += 1,
            Err(e) => failures.push(format!("{e}\n  input: {line}")),
        }
    }
    eprintln!(
        "replayed {replayed} corpus inputs; generated {generated} in {:?} from seed {seed}; \
         answers {statuses:?}",
        started.elapsed()
    );
    let child = server.child.as_mut().unwrap();
    assert!(child.try_wait().unwrap().is_none(), "the server exited");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(replayed >= 100, "only {replayed} corpus inputs");
    assert!(server.stop().success());
}
