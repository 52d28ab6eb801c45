//! "Percentages aren't people", end to end: one day of login latencies at one-minute periods
//! with a bad hour, written through httptrap to a running `strata serve`, then asked through
//! `/api/strata/v1/caql` and `strata query`: the share of logins slower than 1.5 s, times the
//! logins per minute, integrated over the day — against counts made here from the raw samples.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use serde_json::{json, Value};
use serve_common::{client, strata, urlencode, Server};

const MINUTES: usize = 1440;
/// The bad hour: minutes [600, 660) of the day.
const BAD: std::ops::Range<usize> = 600..660;
const THRESHOLD_MS: u32 = 1500;

/// xorshift64*: deterministic samples without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Each minute's latencies in milliseconds: 20–59 logins, mostly 80–1399 ms with a few slow
/// ones; in the bad hour half of them take 1.5–6 s.
fn generate() -> Vec<Vec<u32>> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    (0..MINUTES)
        .map(|m| {
            let n = 20 + rng.below(40);
            (0..n)
                .map(|_| {
                    let slow = if BAD.contains(&m) {
                        rng.below(2) == 0
                    } else {
                        rng.below(50) == 0
                    };
                    if slow {
                        1500 + rng.below(4500) as u32
                    } else {
                        80 + rng.below(1320) as u32
                    }
                })
                .collect()
        })
        .collect()
}

fn caql(server: &Server, query: &str, start_s: i64, end_s: i64) -> Value {
    let url = server.url(&format!(
        "/api/strata/v1/caql?query={}&start={start_s}&end={end_s}&period=1m",
        urlencode(query)
    ));
    let response = client().get(&url).send().unwrap();
    let status = response.status().as_u16();
    let text = response.text().unwrap();
    assert_eq!(status, 200, "{query}: {text}");
    serde_json::from_str(&text).unwrap()
}

fn values(answer: &Value) -> Vec<Option<f64>> {
    let series = answer["series"].as_array().unwrap();
    assert_eq!(series.len(), 1, "{answer}");
    series[0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_f64())
        .collect()
}

fn assert_close(got: f64, want: f64, what: &str) {
    // 1.5 s is a bin edge of llhist ([1.5, 1.6)), so the counts are exact; only float rounding
    // of ratios and sums is allowed.
    assert!(
        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
        "{what}: got {got}, want {want}"
    );
}

#[test]
fn people_with_a_bad_login_over_a_day() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // Yesterday, whole: day-aligned so every minute is a complete period.
    let day_s = now_s - now_s.rem_euclid(86_400) - 86_400;
    let minutes = generate();
    let http = client();
    for (m, lat) in minutes.iter().enumerate() {
        let ts_ms = (day_s + 60 * m as i64 + 30) * 1000;
        let samples: Vec<f64> = lat.iter().map(|&ms| f64::from(ms) / 1000.0).collect();
        let body = json!({"login_latency": {"_type": "h", "_value": samples, "_ts": ts_ms}});
        let response = http
            .post(server.url("/module/httptrap/auth/secret"))
            .body(body.to_string())
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "minute {m}");
    }
    // Independent counts from the raw samples.
    let count: Vec<f64> = minutes.iter().map(|l| l.len() as f64).collect();
    let bad: Vec<f64> = minutes
        .iter()
        .map(|l| l.iter().filter(|&&ms| ms >= THRESHOLD_MS).count() as f64)
        .collect();
    let total_bad: f64 = bad.iter().sum();
    let bad_hour: f64 = bad[BAD].iter().sum();
    assert!(
        bad_hour > 500.0 && total_bad > bad_hour,
        "the generator makes a bad hour"
    );

    let (start, end) = (day_s, day_s + 86_400);
    let share = values(&caql(
        &server,
        r#"find:histogram("login_latency") | histogram:ratio_above(1.5)"#,
        start,
        end,
    ));
    assert_eq!(share.len(), MINUTES);
    for m in 0..MINUTES {
        assert_close(
            share[m].unwrap(),
            bad[m] / count[m],
            &format!("share, minute {m}"),
        );
    }

    let people = values(&caql(
        &server,
        "(find:histogram(\"login_latency\") | histogram:ratio_above(1.5))\n  \
         * (find:histogram(\"login_latency\") | histogram:count)",
        start,
        end,
    ));
    for m in 0..MINUTES {
        assert_close(people[m].unwrap(), bad[m], &format!("people, minute {m}"));
    }

    // Integrated: a per-second rate integrates to a count; the per-minute product needs the
    // division by VIEW_PERIOD first. Both give the running number of people so far.
    let running_rate = values(&caql(
        &server,
        r#"find:histogram("login_latency") | histogram:rate_above(1.5) | integrate"#,
        start,
        end,
    ));
    let running_product = values(&caql(
        &server,
        "((find:histogram(\"login_latency\") | histogram:ratio_above(1.5)) \
         * (find:histogram(\"login_latency\") | histogram:count)) / VIEW_PERIOD | integrate",
        start,
        end,
    ));
    // The same through the inverse quantile: the share at or below 1.5 s, in percent.
    let running_inverse = values(&caql(
        &server,
        "((100 - (find:histogram(\"login_latency\") | histogram:inverse_percentile(1.5))) / 100 \
         * (find:histogram(\"login_latency\") | histogram:count)) / VIEW_PERIOD | integrate",
        start,
        end,
    ));
    let mut so_far = 0.0;
    for m in 0..MINUTES {
        so_far += bad[m];
        assert_close(
            running_rate[m].unwrap(),
            so_far,
            &format!("integral, minute {m}"),
        );
        assert_close(
            running_product[m].unwrap(),
            so_far,
            &format!("product integral, minute {m}"),
        );
        assert_close(
            running_inverse[m].unwrap(),
            so_far,
            &format!("inverse quantile integral, minute {m}"),
        );
    }
    assert_close(
        *running_rate.last().unwrap().as_ref().unwrap(),
        total_bad,
        "the day",
    );

    // The bad hour alone, by a window sum of the per-minute counts.
    let hour = values(&caql(
        &server,
        r#"find:histogram("login_latency") | histogram:count_above(1.5) | window:sum(1h)"#,
        start,
        end,
    ));
    assert_close(hour[BAD.start].unwrap(), bad_hour, "bad hour");

    // The CLI asks the same server.
    let addr = server.http.clone().unwrap();
    let out = strata()
        .args([
            "query",
            r#"find:histogram("login_latency") | histogram:rate_above(1.5) | integrate"#,
            "--start",
            &start.to_string(),
            "--end",
            &end.to_string(),
            "--period",
            "1m",
            "--json",
            "--server",
            &format!("http://{addr}"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_close(
        values(&answer).last().unwrap().unwrap(),
        total_bad,
        "strata query --json",
    );
    let table = strata()
        .args([
            "query",
            r#"find:histogram("login_latency") | histogram:count_above(1.5) | window:sum(1d)"#,
            "--start",
            &start.to_string(),
            "--end",
            &(start + 120).to_string(),
            "--server",
            &format!("http://{addr}"),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(table.stdout).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(rows[0].starts_with("time\t"), "{text}");
    let last: f64 = rows[1].rsplit('\t').next().unwrap().parse().unwrap();
    assert_close(last, total_bad, "strata query table");

    // A bad query: a 400 naming the position; the CLI exits 2.
    let response = client()
        .get(server.url("/api/strata/v1/caql?query=find(%22a%22%20%7C"))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let error: Value = response.json().unwrap();
    assert_eq!(error["position"], 10, "{error}");
    let out = strata()
        .args(["query", "find(", "--server", &format!("http://{addr}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("byte 5"));

    // After the server stops, the CLI reads the store directory itself.
    assert!(server.stop().success());
    let out = strata()
        .args([
            "query",
            r#"find:histogram("login_latency") | histogram:count_above(1.5) | window:sum(1d)"#,
            "--start",
            &start.to_string(),
            "--end",
            &(start + 60).to_string(),
            "--json",
            "--data-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_close(values(&answer)[0].unwrap(), total_bad, "--data-dir");
}
