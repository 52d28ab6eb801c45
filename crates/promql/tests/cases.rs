//! Data-driven query tests: every `tests/cases/*.test` file is loaded into a fresh store (in a
//! temp dir) and its `eval` blocks are checked against the hand-written expectations.
//!
//! Format (line based, `#` comments):
//! ```text
//! base_period 60s                      # optional, before any load; the store's base period
//! load 1m                              # samples at 0, 1m, 2m, … for each series below
//!   metric{a="b"} 0+10x10 _ 5          # a+bxN expands to N+1 values, _ skips a step
//!   lat{svc="x"} h(1.5:3,25:1) _       # one histogram sample: 3 × 1.5 and 1 × 25
//! eval instant at 10m <query>          # expected lines follow, indented:
//!   {a="b"} 1.5                        #   series and value (any order, all must match)
//!   {a="b"} h(1.5:3,25:1)*0.5          #   a histogram, counts scaled by 0.5
//!   scalar 3                           #   a scalar result
//! eval range from 0 to 10m step 1m <query>
//!   metric{a="b"} 0 10 _ 30            #   one value per step, _ for none
//! eval_fail instant at 0 <query>       # must fail; an optional indented line
//!   error <substring>                  #   is a substring of the message
//! eval_warn … / eval_info …            # as eval, and the query must give a warning / info
//! eval_ordered instant at …            # as eval; the series must come in the order listed
//! experimental on                      # the experimental functions from here on (off first)
//! ```
//! In `load`, `stale` is a Prometheus stale marker (the NaN with bits 0x7ff0000000000002).
//! Floats compare with a relative tolerance of 1e-9 (NaN equals NaN).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use hist::Histogram;
use promql::ast::{Expr, MatchOp};
use promql::eval::{self, Labels, Limits, Output, Sample};
use store::key::{StreamKey, Tag};
use store::{Store, StoreOptions, WriteBatch};

#[derive(Debug, Clone)]
enum Expected {
    Float(f64),
    Hist(Histogram, f64),
    Missing,
}

fn parse_duration_ms(text: &str) -> i64 {
    if text == "0" {
        return 0;
    }
    match promql::parse(&format!("x[{text}]")).unwrap() {
        Expr::Range { range_ms, .. } => range_ms,
        e => panic!("not a duration: {text} ({e})"),
    }
}

fn parse_labels(text: &str) -> Labels {
    if text == "{}" {
        return Vec::new();
    }
    let Expr::Selector(sel) = promql::parse(text).unwrap() else {
        panic!("not a series: {text}");
    };
    let mut labels: Labels = sel
        .matchers
        .iter()
        .map(|m| {
            assert_eq!(m.op, MatchOp::Equal, "series labels use =: {text}");
            (m.label.clone(), m.value.clone())
        })
        .collect();
    if let Some(name) = sel.name {
        labels.push(("__name__".into(), name));
    }
    labels.sort();
    labels
}

fn parse_float(text: &str) -> f64 {
    match text {
        "NaN" => f64::NAN,
        "Inf" | "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        _ => text
            .parse()
            .unwrap_or_else(|_| panic!("bad number {text:?}")),
    }
}

fn parse_hist(text: &str) -> (Histogram, f64) {
    let (body, scale) = match text.rsplit_once(")*") {
        Some((b, s)) => (format!("{b})"), parse_float(s)),
        None => (text.to_string(), 1.0),
    };
    let inner = body
        .strip_prefix("h(")
        .and_then(|b| b.strip_suffix(')'))
        .unwrap_or_else(|| panic!("bad histogram {text:?}"));
    let mut h = Histogram::new();
    for part in inner.split(',').filter(|p| !p.is_empty()) {
        let (v, c) = part.split_once(':').unwrap();
        h.insert_n(parse_float(v), c.parse().unwrap());
    }
    (h, scale)
}

/// A series line's label part and the rest: up to the `}` closing its braces (label names and
/// values may be quoted and hold spaces), else up to the first space.
fn split_series(line: &str) -> (&str, &str) {
    let first_space = line.find(char::is_whitespace).unwrap_or(line.len());
    let Some(open) = line.find('{').filter(|&o| o < first_space) else {
        return (&line[..first_space], &line[first_space..]);
    };
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in line[open..].char_indices() {
        match (quote, c) {
            (Some(_), _) if escaped => escaped = false,
            (Some(_), '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'' | '`') => quote = Some(c),
            (None, '}') => return line.split_at(open + i + 1),
            (None, _) => {}
        }
    }
    (line, "")
}

/// Expands one series line's value tokens.
fn parse_values(tokens: &[&str]) -> Vec<Expected> {
    let mut out = Vec::new();
    for &tok in tokens {
        if tok == "_" {
            out.push(Expected::Missing);
        } else if tok == "stale" {
            out.push(Expected::Float(f64::from_bits(
                promql::eval::STALE_NAN_BITS,
            )));
        } else if tok.starts_with("h(") {
            let (h, s) = parse_hist(tok);
            out.push(Expected::Hist(h, s));
        } else if let Some((start, rest)) = split_expansion(tok) {
            let (step, times) = rest;
            for i in 0..=times {
                out.push(Expected::Float(start + step * i as f64));
            }
        } else {
            out.push(Expected::Float(parse_float(tok)));
        }
    }
    out
}

/// `a+bxN` / `a-bxN`.
fn split_expansion(tok: &str) -> Option<(f64, (f64, u64))> {
    let (lhs, n) = tok.split_once('x')?;
    let n: u64 = n.parse().ok()?;
    let sign_at = lhs[1..].find(['+', '-'])? + 1;
    let start = parse_float(&lhs[..sign_at]);
    let step = parse_float(&lhs[sign_at..]);
    Some((start, (step, n)))
}

fn floats_equal(a: f64, b: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a == b {
        return true;
    }
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

fn matches(expected: &Expected, got: Option<&Sample>) -> bool {
    match (expected, got) {
        (Expected::Missing, None) => true,
        (Expected::Float(e), Some(Sample::Float(g))) => floats_equal(*e, *g),
        (Expected::Hist(h, s), Some(Sample::Hist(g))) => *g.hist == *h && floats_equal(*s, g.scale),
        _ => false,
    }
}

struct Runner {
    store: Arc<Store>,
    _dir: tempfile::TempDir,
    failures: Vec<String>,
    evals: usize,
    limits: Limits,
}

impl Runner {
    fn load(&mut self, interval_ms: i64, lines: &[(usize, String)]) {
        let mut batch = WriteBatch::new();
        for (_, line) in lines {
            let (series, rest) = split_series(line);
            let tokens = rest.split_whitespace();
            let labels = parse_labels(series);
            // Each label but the name is a tag of its own text (UTF-8 names included), as
            // remote write stores them.
            let name = labels
                .iter()
                .find(|(k, _)| k == "__name__")
                .unwrap()
                .1
                .clone();
            let tags = labels
                .iter()
                .filter(|(k, v)| k != "__name__" && !v.is_empty())
                .map(|(k, v)| Tag::new(k.as_bytes(), v.as_bytes()).unwrap());
            let key = StreamKey::new(name, tags).unwrap();
            let rest: Vec<&str> = tokens.collect();
            for (i, v) in parse_values(&rest).into_iter().enumerate() {
                let ts = i as i64 * interval_ms;
                match v {
                    Expected::Float(f) => batch.numeric(&key, ts, f).unwrap(),
                    Expected::Hist(h, _) => batch.histogram(&key, ts, &h).unwrap(),
                    Expected::Missing => {}
                }
            }
        }
        self.store.write(&batch).unwrap();
    }

    fn fail(&mut self, at: &str, message: String) {
        self.failures.push(format!("{at}: {message}"));
    }

    fn eval(&mut self, at: &str, header: &str, expect: &[(usize, String)]) {
        self.evals += 1;
        let (must_fail, rest) = match header.strip_prefix("eval_fail ") {
            Some(r) => (true, r),
            None => (false, header.strip_prefix("eval ").unwrap_or(header)),
        };
        let (ordered, rest) = match rest.strip_prefix("eval_ordered ") {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let (note, rest) = match (
            rest.strip_prefix("eval_warn "),
            rest.strip_prefix("eval_info "),
        ) {
            (Some(r), _) => (Some("warning"), r),
            (_, Some(r)) => (Some("info"), r),
            _ => (None, rest),
        };
        let (result, steps) = if let Some(r) = rest.strip_prefix("instant at ") {
            let (t, query) = r.split_once(' ').unwrap();
            let t = parse_duration_ms(t);
            (
                eval::instant_annotated(&self.store, query, t, self.limits),
                vec![t],
            )
        } else if let Some(r) = rest.strip_prefix("range from ") {
            let parts: Vec<&str> = r.splitn(6, ' ').collect();
            assert!(
                parts[1] == "to" && parts[3] == "step",
                "{at}: bad range header"
            );
            let (start, end, step) = (
                parse_duration_ms(parts[0]),
                parse_duration_ms(parts[2]),
                parse_duration_ms(parts[4]),
            );
            let steps = (0..)
                .map(|i| start + i * step)
                .take_while(|&t| t <= end)
                .collect();
            (
                eval::range_annotated(&self.store, parts[5], start, end, step, self.limits),
                steps,
            )
        } else {
            panic!("{at}: bad eval header {header:?}");
        };
        if must_fail {
            match result {
                Ok(out) => self.fail(at, format!("expected an error, got {out:?}")),
                Err(e) => {
                    if let Some((_, line)) = expect.first() {
                        let want = line.strip_prefix("error ").unwrap_or(line);
                        if !e.to_string().contains(want) {
                            self.fail(at, format!("error {e} does not contain {want:?}"));
                        }
                    }
                }
            }
            return;
        }
        let (out, notes) = match result {
            Ok(out) => out,
            Err(e) => return self.fail(at, format!("query failed: {e}")),
        };
        let noted = match note {
            Some("warning") => !notes.warnings.is_empty(),
            Some(_) => !notes.infos.is_empty(),
            None => true,
        };
        if !noted {
            self.fail(at, format!("expected a {note:?} annotation, got {notes:?}"));
        }
        let instant = rest.starts_with("instant");
        if ordered {
            self.check_order(at, &out, expect);
        }
        self.compare(at, out, &steps, instant, expect);
    }

    fn compare(
        &mut self,
        at: &str,
        out: Output,
        steps: &[i64],
        instant: bool,
        expect: &[(usize, String)],
    ) {
        // Every result becomes (labels, per-step samples) over `steps`.
        let mut got: Vec<(Labels, Vec<Option<Sample>>)> = Vec::new();
        match out {
            Output::Scalar { value, .. } => {
                let line = expect.first().map(|(_, l)| l.as_str()).unwrap_or("");
                let ok = line
                    .strip_prefix("scalar ")
                    .is_some_and(|v| floats_equal(parse_float(v), value));
                if !ok || expect.len() != 1 {
                    self.fail(at, format!("got scalar {value}, expected {expect:?}"));
                }
                return;
            }
            Output::String { value, .. } => {
                let want = expect.first().map(|(_, l)| l.clone()).unwrap_or_default();
                if want != format!("string {value}") {
                    self.fail(at, format!("got string {value:?}, expected {want:?}"));
                }
                return;
            }
            Output::Vector { samples, .. } => {
                for (labels, s) in samples {
                    got.push((labels, vec![Some(s)]));
                }
            }
            Output::Matrix(series) if instant => {
                // Raw samples of a range selector: compared as `v@t` tokens.
                for s in series {
                    let mut tokens: Vec<String> =
                        s.floats.iter().map(|(t, v)| format!("{v}@{t}")).collect();
                    tokens.extend(s.hists.iter().map(|(t, _)| format!("hist@{t}")));
                    self.compare_raw(at, &s.labels, &tokens.join(" "), expect);
                }
                return;
            }
            Output::Matrix(series) => {
                for s in series {
                    let mut points = vec![None; steps.len()];
                    for (t, v) in s.floats {
                        match steps.iter().position(|&x| x == t) {
                            Some(i) => points[i] = Some(Sample::Float(v)),
                            None => self.fail(at, format!("sample at {t} off the step grid")),
                        }
                    }
                    for (t, h) in s.hists {
                        match steps.iter().position(|&x| x == t) {
                            Some(i) => points[i] = Some(Sample::Hist(h)),
                            None => self.fail(at, format!("histogram at {t} off the step grid")),
                        }
                    }
                    got.push((s.labels, points));
                }
            }
        }
        let mut unmatched: Vec<bool> = vec![true; got.len()];
        for (line_no, line) in expect {
            let (series, rest) = split_series(line);
            let tokens = rest.split_whitespace();
            let labels = parse_labels(series);
            let rest: Vec<&str> = tokens.collect();
            if rest.iter().any(|t| t.contains('@')) {
                continue; // raw form, checked in compare_raw
            }
            let values = parse_values(&rest);
            let Some(i) = got.iter().position(|(l, _)| *l == labels) else {
                self.fail(
                    at,
                    format!("line {line_no}: no result series {labels:?}; got {got:?}"),
                );
                continue;
            };
            unmatched[i] = false;
            if values.len() != steps.len() {
                self.fail(
                    at,
                    format!(
                        "line {line_no}: {} values for {} steps",
                        values.len(),
                        steps.len()
                    ),
                );
                continue;
            }
            for (step, (e, g)) in values.iter().zip(&got[i].1).enumerate() {
                if !matches(e, g.as_ref()) {
                    self.fail(
                        at,
                        format!(
                            "line {line_no}: step {step} of {labels:?}: expected {e:?}, got {g:?}"
                        ),
                    );
                }
            }
        }
        for (i, left) in unmatched.iter().enumerate() {
            if *left {
                self.fail(at, format!("unexpected result series {:?}", got[i]));
            }
        }
    }

    /// The series of an instant vector in the order of the expected lines.
    fn check_order(&mut self, at: &str, out: &Output, expect: &[(usize, String)]) {
        let Output::Vector { samples, .. } = out else {
            return self.fail(at, "eval_ordered needs an instant vector".into());
        };
        let got: Vec<&Labels> = samples.iter().map(|(l, _)| l).collect();
        let want: Vec<Labels> = expect
            .iter()
            .map(|(_, l)| parse_labels(split_series(l).0))
            .collect();
        if got.len() != want.len() || got.iter().zip(&want).any(|(g, w)| *g != w) {
            self.fail(at, format!("order: expected {want:?}, got {got:?}"));
        }
    }

    fn compare_raw(&mut self, at: &str, labels: &Labels, got: &str, expect: &[(usize, String)]) {
        for (_, line) in expect {
            let (series, rest) = split_series(line);
            let tokens = rest.split_whitespace();
            if parse_labels(series) != *labels {
                continue;
            }
            let want: Vec<String> = tokens
                .map(|t| {
                    let (v, d) = t.split_once('@').unwrap();
                    let v = if v == "hist" {
                        v.to_string()
                    } else {
                        parse_float(v).to_string()
                    };
                    format!("{v}@{}", parse_duration_ms(d))
                })
                .collect();
            if want.join(" ") != got {
                self.fail(
                    at,
                    format!("raw samples of {labels:?}: expected {want:?}, got {got}"),
                );
            }
            return;
        }
        self.fail(at, format!("unexpected raw series {labels:?}: {got}"));
    }
}

fn run_file(path: &Path) -> (usize, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let mut lines: Vec<(usize, String)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split(" #").next().unwrap().trim_end();
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        lines.push((i + 1, line.to_string()));
    }
    let mut base_period_ms = store::BASE_PERIOD_MS_DEFAULT;
    if let Some((_, l)) = lines.first() {
        if let Some(p) = l.strip_prefix("base_period ") {
            base_period_ms = parse_duration_ms(p.trim());
            lines.remove(0);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        StoreOptions {
            base_period_ms,
            wal_segment_size_bytes: 1 << 20,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let mut runner = Runner {
        store: Arc::new(store),
        _dir: dir,
        failures: Vec::new(),
        evals: 0,
        limits: Limits::default(),
    };
    let mut i = 0;
    while i < lines.len() {
        let (line_no, header) = lines[i].clone();
        assert!(
            !header.starts_with(' '),
            "{name}:{line_no}: unexpected indented line"
        );
        let mut j = i + 1;
        while j < lines.len() && lines[j].1.starts_with(' ') {
            j += 1;
        }
        let body: Vec<(usize, String)> = lines[i + 1..j]
            .iter()
            .map(|(n, l)| (*n, l.trim().to_string()))
            .collect();
        let at = format!("{name}:{line_no}");
        if let Some(interval) = header.strip_prefix("load ") {
            runner.load(parse_duration_ms(interval.trim()), &body);
        } else if let Some(flag) = header.strip_prefix("experimental ") {
            runner.limits.experimental_functions = flag.trim() == "on";
        } else if header.starts_with("eval") {
            runner.eval(&at, &header, &body);
        } else {
            panic!("{at}: unknown command {header:?}");
        }
        i = j;
    }
    (runner.evals, runner.failures)
}

#[test]
fn query_cases() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "test"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no test files in {dir:?}");
    let mut all = Vec::new();
    let mut evals = 0;
    for f in &files {
        let (n, failures) = run_file(f);
        evals += n;
        all.extend(failures);
    }
    assert!(evals >= 10, "only {evals} evals ran");
    assert!(
        all.is_empty(),
        "{} failures:\n{}",
        all.len(),
        all.join("\n")
    );
}
