//! The answer's JSON form (the HTTP endpoint's body, `strata query --json`), a plain table, and
//! the parsing of the request's times and periods.
//!
//! JSON: `{"start","end","period","series":[{"label","tags":{…},"values":[[t_seconds, v],…]}]}`
//! with `v` a number, `null` for missing, or for histograms
//! `{"bins":[[val,exp,count],…],"b64":"…"}`; `start`/`end` are the range actually evaluated
//! (aligned to the period), in seconds.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use crate::ast::Expr;
use crate::eval::{Data, Output};

/// Timestamps accepted, in seconds: ±(2^53 ms) keeps every millisecond exact.
const TIME_S_MAX: f64 = 9.0e12;

fn value_json(data: &Data, i: usize) -> Value {
    match data {
        Data::Num(v) => v[i].map_or(Value::Null, |x| json!(x)),
        Data::Hist(v) => match &v[i] {
            None => Value::Null,
            Some(h) => json!({
                "bins": h.bins().map(|(b, c)| json!([b.val(), b.exp(), c])).collect::<Vec<_>>(),
                "b64": h.to_base64(),
            }),
        },
    }
}

pub fn to_json_value(out: &Output) -> Value {
    let r = out.range;
    let series: Vec<Value> = out
        .streams
        .iter()
        .map(|s| {
            let tags: Map<String, Value> = s
                .tags
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            let values: Vec<Value> = (0..s.data.len())
                .map(|i| {
                    let t = (r.start_ms + i as i64 * r.period_ms) as f64 / 1000.0;
                    json!([t, value_json(&s.data, i)])
                })
                .collect();
            json!({ "label": s.label, "tags": tags, "values": values })
        })
        .collect();
    json!({
        "start": r.start_ms as f64 / 1000.0,
        "end": r.end_ms as f64 / 1000.0,
        "period": r.period_ms as f64 / 1000.0,
        "series": series,
    })
}

pub fn to_json(out: &Output) -> String {
    to_json_value(out).to_string()
}

/// One row per slice (time in RFC 3339), one column per stream; histograms as their sample
/// count and base64.
pub fn to_table(out: &Output) -> String {
    let r = out.range;
    let mut s = String::from("time");
    for st in &out.streams {
        s.push('\t');
        s.push_str(&st.label);
    }
    s.push('\n');
    let n = out.streams.first().map_or(r.slices(), |st| st.data.len());
    for i in 0..n {
        let t_ms = r.start_ms + i as i64 * r.period_ms;
        s.push_str(&rfc3339(t_ms));
        for st in &out.streams {
            s.push('\t');
            match &st.data {
                Data::Num(v) => match v[i] {
                    Some(x) => {
                        let _ = write!(s, "{x}");
                    }
                    None => s.push_str("null"),
                },
                Data::Hist(v) => match &v[i] {
                    Some(h) => {
                        let _ = write!(s, "hist(n={}) {}", h.sample_count(), h.to_base64());
                    }
                    None => s.push_str("null"),
                },
            }
        }
        s.push('\n');
    }
    s
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z` of a millisecond timestamp.
pub fn rfc3339(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = civil_from_days(days);
    let (h, mi, s, frac) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    if frac == 0 {
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    } else {
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{frac:03}Z")
    }
}

fn digits(s: &str, what: &str) -> Result<i64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("expected {what} digits, found {s:?}"));
    }
    s.parse::<i64>().map_err(|e| e.to_string())
}

/// Unix seconds (fractions allowed) or RFC 3339 (`2026-11-22T09:00:00Z`, `…+02:00`, `.123`).
pub fn parse_time_ms(text: &str) -> Result<i64, String> {
    let t = text.trim();
    if let Ok(s) = t.parse::<f64>() {
        if !(s.is_finite() && s.abs() <= TIME_S_MAX) {
            return Err(format!("time {t:?} is out of range"));
        }
        return Ok((s * 1000.0).round() as i64);
    }
    let err = |m: String| format!("time {t:?}: {m} (expected unix seconds or RFC 3339)");
    if t.len() < 20 || !t.is_ascii() {
        return Err(err("too short".into()));
    }
    let b = t.as_bytes();
    if b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(err("bad separators".into()));
    }
    let y = digits(&t[0..4], "year").map_err(err)?;
    let mo = digits(&t[5..7], "month").map_err(err)?;
    let d = digits(&t[8..10], "day").map_err(err)?;
    let h = digits(&t[11..13], "hour").map_err(err)?;
    let mi = digits(&t[14..16], "minute").map_err(err)?;
    let s = digits(&t[17..19], "second").map_err(err)?;
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return Err(err("a field is out of range".into()));
    }
    let mut rest = &t[19..];
    let mut frac_ms = 0i64;
    if let Some(r) = rest.strip_prefix('.') {
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return Err(err("no digits after `.`".into()));
        }
        let f = &r[..n.min(3)];
        frac_ms = digits(f, "fraction").map_err(err)? * 10i64.pow(3 - f.len() as u32);
        rest = &r[n..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && &o[3..4] == ":" => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (digits(&o[1..3], "offset hour").map_err(err)? * 3600
                + digits(&o[4..6], "offset minute").map_err(err)? * 60)
        }
        o => return Err(err(format!("bad zone {o:?}"))),
    };
    let days = days_from_civil(y, mo, d);
    Ok(((days * 86_400 + h * 3600 + mi * 60 + s - offset_s) * 1000) + frac_ms)
}

/// Seconds (`60`, `0.5`) or a duration (`1m`, `1h 30m`), in milliseconds.
pub fn parse_period_ms(text: &str) -> Result<i64, String> {
    let t = text.trim();
    let seconds = match t.parse::<f64>() {
        Ok(s) => s,
        Err(_) => match crate::parse(t).map(|q| q.expr) {
            Ok(Expr::Duration(s)) if t.len() <= 64 => s,
            _ => {
                return Err(format!(
                    "period {t:?}: expected seconds or a duration like 1m"
                ))
            }
        },
    };
    if !(seconds > 0.0 && seconds <= 1e9) {
        return Err(format!("period {t:?} is out of range"));
    }
    Ok((seconds * 1000.0).round().max(1.0) as i64)
}
