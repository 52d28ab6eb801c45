//! Data-driven tests: every `tests/cases/*.caql` file loads data into a real store in a temp dir,
//! runs queries and compares with expectations written by hand from the data.
//!
//! File format (times in seconds; blank lines and lines starting with `;` are ignored):
//! ```text
//! == data
//! num  <stream key>  <t>=<value> …          numeric samples (`stale`: a Prometheus stale marker)
//! hist <stream key>  <t>=<v>x<n>,<v>x<n> …  histogram samples (n samples of value v)
//! == query start=<s> end=<s> period=<s>
//! <query, any number of lines>
//! == expect
//! <label> | <v> <v> …                        one line per stream, in order; v is a number,
//!                                            `null`, or `h<n>` (a histogram of n samples)
//! == error <text the error must contain>     instead of `== expect`
//! ```
//! Numbers compare with a tolerance of 1e-9 relative (absolute below 1; `~` before a number: 1e-3).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::atomic::AtomicBool;

use hist::Histogram;
use query::eval::{Data, Limits};
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

fn load(store: &Store, lines: &[String], file: &str) {
    let mut batch = WriteBatch::new();
    for line in lines {
        let mut parts = line.split_whitespace();
        let kind = parts.next().unwrap();
        let key = StreamKey::parse(parts.next().unwrap()).unwrap();
        for sample in parts {
            let (t, v) = sample
                .split_once('=')
                .unwrap_or_else(|| panic!("{file}: {line}"));
            let ts_ms = (t.parse::<f64>().unwrap() * 1000.0) as i64;
            match kind {
                // `stale`: Prometheus's stale marker, as remote write stores it.
                "num" if v == "stale" => batch
                    .numeric(
                        &key,
                        ts_ms,
                        f64::from_bits(query::eval::stale::STALE_NAN_BITS),
                    )
                    .unwrap(),
                "num" => batch.numeric(&key, ts_ms, v.parse().unwrap()).unwrap(),
                "hist" => {
                    let mut h = Histogram::new();
                    for part in v.split(',') {
                        let (x, n) = part.split_once('x').unwrap_or((part, "1"));
                        h.insert_n(x.parse().unwrap(), n.parse().unwrap());
                    }
                    batch.histogram(&key, ts_ms, &h).unwrap();
                }
                other => panic!("{file}: unknown data kind {other}"),
            }
        }
    }
    store.write(&batch).unwrap();
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    a == b || (a - b).abs() <= tol * a.abs().max(b.abs()).max(1.0)
}

fn check_expect(file: &str, query: &str, out: &query::Output, expect: &[String]) {
    let ctx = format!("{file}: query {query:?}");
    let got: Vec<String> = out.streams.iter().map(|s| s.label.clone()).collect();
    assert_eq!(out.streams.len(), expect.len(), "{ctx}: streams {got:?}");
    for (s, line) in out.streams.iter().zip(expect) {
        let (label, values) = line
            .rsplit_once('|')
            .unwrap_or_else(|| panic!("{ctx}: {line}"));
        assert_eq!(s.label, label.trim(), "{ctx}: labels {got:?}");
        let want: Vec<&str> = values.split_whitespace().collect();
        assert_eq!(s.data.len(), want.len(), "{ctx}: {label}: {:?}", s.data);
        for (i, w) in want.iter().enumerate() {
            match &s.data {
                Data::Num(v) => match (*w, v[i]) {
                    ("null", None) => {}
                    (w, Some(x)) if w != "null" && !w.starts_with('h') => {
                        let (tol, w) = match w.strip_prefix('~') {
                            Some(w) => (1e-3, w),
                            None => (1e-9, w),
                        };
                        let w: f64 = w.parse().unwrap_or_else(|_| panic!("{ctx}: {w}"));
                        assert!(
                            close(x, w, tol),
                            "{ctx}: {label} slice {i}: got {x}, want {w}; all {v:?}"
                        );
                    }
                    (w, x) => panic!("{ctx}: {label} slice {i}: got {x:?}, want {w}; all {v:?}"),
                },
                Data::Hist(v) => match (*w, &v[i]) {
                    ("null", None) => {}
                    (w, Some(h)) if w.starts_with('h') => {
                        assert_eq!(
                            h.sample_count(),
                            w[1..].parse::<u64>().unwrap(),
                            "{ctx}: {label} slice {i}"
                        )
                    }
                    (w, x) => panic!("{ctx}: {label} slice {i}: got {x:?}, want {w}"),
                },
            }
        }
    }
}

fn run_file(path: &Path) -> usize {
    let file = path.file_name().unwrap().to_string_lossy().to_string();
    let text = std::fs::read_to_string(path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let mut section = String::new();
    let mut body: Vec<String> = Vec::new();
    let mut query = String::new();
    let mut params = (0i64, 0i64, 60_000i64);
    let mut checked = 0;
    let mut finish = |section: &str,
                      body: &mut Vec<String>,
                      query: &mut String,
                      params: &mut (i64, i64, i64)| {
        if section == "data" {
            load(&store, body, &file);
        } else if let Some(rest) = section.strip_prefix("query") {
            *query = body.join("\n");
            for kv in rest.split_whitespace() {
                let (k, v) = kv.split_once('=').unwrap();
                let ms = (v.parse::<f64>().unwrap() * 1000.0) as i64;
                match k {
                    "start" => params.0 = ms,
                    "end" => params.1 = ms,
                    "period" => params.2 = ms,
                    _ => panic!("{file}: parameter {k}"),
                }
            }
        } else if section == "expect" || section.starts_with("error") {
            let cancel = AtomicBool::new(false);
            let res = query::run(
                &store,
                query,
                params.0,
                params.1,
                params.2,
                Limits::default(),
                &cancel,
            );
            if let Some(want) = section.strip_prefix("error") {
                let e = res
                    .err()
                    .unwrap_or_else(|| panic!("{file}: {query:?} should fail"));
                let msg = e.to_string();
                assert!(
                    msg.contains(want.trim()),
                    "{file}: {query:?}: error {msg:?} lacks {want:?}"
                );
            } else {
                let out = res.unwrap_or_else(|e| panic!("{file}: {query:?}: {e}"));
                check_expect(&file, query, &out, body);
            }
            checked += 1;
        }
        body.clear();
    };
    for line in text.lines() {
        let t = line.trim();
        if let Some(s) = t.strip_prefix("== ") {
            finish(&section, &mut body, &mut query, &mut params);
            section = s.to_string();
        } else if !t.is_empty() && !t.starts_with(';') {
            body.push(t.to_string());
        }
    }
    finish(&section, &mut body, &mut query, &mut params);
    checked
}

#[test]
fn case_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut total = 0;
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "caql"))
    {
        let n = run_file(f);
        assert!(n > 0, "{f:?} checks nothing");
        total += n;
    }
    assert!(total >= 10, "only {total} checks");
}
