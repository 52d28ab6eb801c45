//! The native read API: `GET /api/strata/v1/find` (series by IRONdb tag query; `order=recent`
//! lists the most recently written first, self-monitoring streams last) and
//! `GET|POST /api/strata/v1/fetch` (per-slice aggregates, merged histograms, text changes).
//!
//! Inputs: times as unix seconds (integer or decimal) or RFC 3339; periods as seconds or with a
//! unit (`500ms`, `30s`, `1m`, `2h`, `1d`). Outputs are in milliseconds, with `_ms` in the
//! name. Errors are 400 JSON naming the parameter.

// A helper's early answer is the whole response; boxing it buys nothing here.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hist::{Histogram, QuantileType};
use serde_json::{json, Value};
use store::key::{write_part, Part, StreamKey};
use store::{Kind, SeriesInfo};
use store::{Slicing, TagQuery, SLICES_MAX, WORK_MAX_DEFAULT};

use super::reply::{error, json_response, Shape};
use super::Shared;

/// Default span of a fetch without `start`.
const FETCH_SPAN_MS_DEFAULT: i64 = 3_600_000;
/// Largest POST body of a fetch (its parameters as JSON).
const FETCH_BODY_BYTES_MAX: usize = 64 << 10;
/// Quantiles or thresholds in one transform.
const TRANSFORM_ARGS_MAX: usize = 64;
/// Most matches looked at to order a `find` by recent activity (`order=recent`).
const ORDER_SCAN_MAX: usize = 100_000;

type Params = HashMap<String, String>;

fn bad(param: &str, message: impl std::fmt::Display) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        format!("parameter `{param}`: {message}"),
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's civil algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn digits(text: &str, range: std::ops::Range<usize>) -> Option<i64> {
    let part = text.get(range)?;
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

/// RFC 3339 `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` → ms since the epoch.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (
        digits(text, 0..4)?,
        digits(text, 5..7)?,
        digits(text, 8..10)?,
    );
    let (hour, minute, second) = (
        digits(text, 11..13)?,
        digits(text, 14..16)?,
        digits(text, 17..19)?,
    );
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut frac_ms = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let len = frac.bytes().take_while(u8::is_ascii_digit).count();
        if len == 0 {
            return None;
        }
        let ms_digits = &frac[..len.min(3)];
        frac_ms = ms_digits.parse::<i64>().ok()? * 10i64.pow(3 - ms_digits.len() as u32);
        rest = &frac[len..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            let (h, m) = (digits(rest, 1..3)?, digits(rest, 4..6)?);
            sign * (h * 3600 + m * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    seconds.checked_mul(1000)?.checked_add(frac_ms)
}

/// Unix seconds (integer or decimal) or RFC 3339 → ms.
pub fn parse_time_ms(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if let Ok(s) = text.parse::<i64>() {
        return s
            .checked_mul(1000)
            .ok_or_else(|| format!("`{text}` seconds is out of range"));
    }
    if let Ok(s) = text.parse::<f64>() {
        let ms = (s * 1000.0).round();
        if ms.is_finite() && ms.abs() < 9.0e15 {
            return Ok(ms as i64);
        }
        return Err(format!("`{text}` is out of range"));
    }
    parse_rfc3339(text).ok_or_else(|| {
        format!("`{text}` is neither unix seconds nor RFC 3339 (2026-11-22T09:00:00Z)")
    })
}

/// Seconds, or a number with `ms s m h d` → ms.
pub fn parse_period_ms(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale_ms = match unit {
        "" | "s" => 1000.0,
        "ms" => 1.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return Err(format!("`{text}`: unit must be one of ms, s, m, h, d")),
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds or like 1m"))?;
    let ms = (n * scale_ms).round();
    if !(1.0..1.0e15).contains(&ms) {
        return Err(format!("`{text}` is not a positive period"));
    }
    Ok(ms as i64)
}

fn key_tags(key: &StreamKey) -> Vec<String> {
    key.tags()
        .iter()
        .map(|t| {
            let mut s = String::new();
            write_part(&mut s, t.category(), Part::Category);
            s.push(':');
            write_part(&mut s, t.value(), Part::Value);
            s
        })
        .collect()
}

/// Self-monitoring streams carry the tag `strata:self`.
pub fn is_self(info: &SeriesInfo) -> bool {
    info.key
        .tags()
        .iter()
        .any(|t| t.category() == b"strata" && t.value() == b"self")
}

/// Orders streams for people: the user's own before self-monitoring, then the most recently
/// written first, then by key.
pub fn order_recent(list: &mut [SeriesInfo]) {
    list.sort_by(|a, b| {
        is_self(a)
            .cmp(&is_self(b))
            .then_with(|| {
                let last = |s: &SeriesInfo| s.activity_ms.map_or(i64::MIN, |(_, l)| l);
                last(b).cmp(&last(a))
            })
            .then_with(|| a.key.canonical().cmp(&b.key.canonical()))
    });
}

pub(super) fn series_json(info: &SeriesInfo) -> Value {
    json!({
        "key": info.key.canonical(),
        "name": info.key.name(),
        "tags": key_tags(&info.key),
        "kind": info.kind.name(),
        "activity_ms": info.activity_ms.map(|(a, b)| [a, b]),
    })
}

fn limit_param(app: &Shared, params: &Params) -> Result<usize, Response> {
    let series_max = app.config.limits.query_series_max;
    match params.get("limit") {
        None => Ok(series_max),
        Some(text) => match text.trim().parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n.min(series_max)),
            _ => Err(bad("limit", format!("`{text}` is not a positive integer"))),
        },
    }
}

/// Resolves a tag query to series (at most `limit`), in id order.
fn find_series(
    app: &Shared,
    params: &Params,
    limit: usize,
) -> Result<(Vec<SeriesInfo>, bool), Response> {
    let Some(text) = params.get("query") else {
        return Err(bad(
            "query",
            "missing (an IRONdb tag query such as and(__name:cpu*,host:a))",
        ));
    };
    let query = TagQuery::parse(text).map_err(|e| bad("query", e))?;
    let ids = app
        .store
        .find(&query, WORK_MAX_DEFAULT)
        .map_err(|e| bad("query", e))?;
    let truncated = ids.len() > limit;
    let recent = match params.get("order").map(String::as_str) {
        None | Some("") | Some("id") => false,
        Some("recent") => true,
        Some(other) => {
            return Err(bad(
                "order",
                format!("`{other}`: expected id (the default) or recent"),
            ))
        }
    };
    let snapshot = app
        .store
        .index()
        .snapshot()
        .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    // Ordered by activity, every match is looked at (up to a bound), then the first `limit`
    // kept; in id order, the first `limit` ids are the answer.
    let take = if recent { ORDER_SCAN_MAX } else { limit };
    let mut out = Vec::with_capacity(ids.len().min(take));
    for id in ids.into_iter().take(take) {
        match snapshot.series(id) {
            Ok(Some(info)) => out.push(info),
            Ok(None) => {}
            Err(e) => return Err(error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
        }
    }
    if recent {
        order_recent(&mut out);
        out.truncate(limit);
    }
    Ok((out, truncated))
}

pub async fn find(State(app): State<Shared>, Query(params): Query<Params>) -> Response {
    let joined = tokio::task::spawn_blocking(move || {
        let limit = match limit_param(&app, &params) {
            Ok(limit) => limit,
            Err(response) => return response,
        };
        match find_series(&app, &params, limit) {
            Ok((series, truncated)) => {
                let list: Vec<Value> = series.iter().map(series_json).collect();
                let mut response = json_response(StatusCode::OK, Value::Array(list));
                if truncated {
                    if let Ok(v) = axum::http::HeaderValue::from_str(&limit.to_string()) {
                        response.headers_mut().insert("x-strata-truncated-at", v);
                    }
                }
                response
            }
            Err(response) => response,
        }
    })
    .await;
    joined.unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

pub async fn fetch_get(State(app): State<Shared>, Query(params): Query<Params>) -> Response {
    fetch(app, params).await
}

/// POST: the parameters as a JSON object (numbers or strings), merged over the query string.
pub async fn fetch_post(
    State(app): State<Shared>,
    Query(mut params): Query<Params>,
    body: Bytes,
) -> Response {
    if body.len() > FETCH_BODY_BYTES_MAX {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("fetch body over {FETCH_BODY_BYTES_MAX} bytes"),
        );
    }
    if !body.iter().all(u8::is_ascii_whitespace) {
        let object: serde_json::Map<String, Value> = match serde_json::from_slice(&body) {
            Ok(o) => o,
            Err(e) => return bad("body", format!("not a JSON object of parameters: {e}")),
        };
        for (name, value) in object {
            let text = match value {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                Value::Array(items) => items
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| v.to_string())
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                other => return bad(&name, format!("`{other}` is not a string or number")),
            };
            params.insert(name, text);
        }
    }
    fetch(app, params).await
}

/// One series' slices as read from the store.
enum SeriesData {
    Numeric(Vec<Option<store::NumericAggregate>>),
    Histogram(Vec<Histogram>),
    Text(Vec<(i64, String)>),
}

/// What to compute per histogram slice instead of returning bins.
enum Transform {
    Quantile(Vec<f64>),
    InverseQuantile(Vec<f64>),
    Count,
}

fn parse_transform(text: &str) -> Result<Transform, String> {
    let (name, args) = text.split_once(':').unwrap_or((text, ""));
    let numbers = || -> Result<Vec<f64>, String> {
        let list: Result<Vec<f64>, String> = args
            .split(',')
            .map(|a| {
                a.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| format!("`{a}` is not a number"))
            })
            .collect();
        let list = list?;
        if list.is_empty() || list.len() > TRANSFORM_ARGS_MAX {
            return Err(format!("give 1 to {TRANSFORM_ARGS_MAX} numbers"));
        }
        Ok(list)
    };
    match name {
        "quantile" => {
            let qs = numbers()?;
            if let Some(q) = qs.iter().find(|q| !(0.0..=1.0).contains(*q)) {
                return Err(format!("quantile {q} is outside [0, 1]"));
            }
            Ok(Transform::Quantile(qs))
        }
        "inverse_quantile" => Ok(Transform::InverseQuantile(numbers()?)),
        "count" if args.is_empty() => Ok(Transform::Count),
        _ => Err(format!(
            "`{text}`: expected quantile:<q,…>, inverse_quantile:<v,…> or count"
        )),
    }
}

fn histogram_json(h: &Histogram, transform: Option<&Transform>) -> Value {
    match transform {
        None => {
            if h.sample_count() == 0 {
                return Value::Null;
            }
            let bins: Vec<Value> = h
                .bins()
                .map(|(b, c)| json!([b.val(), b.exp(), c]))
                .collect();
            json!({ "bins": bins, "b64": h.to_base64() })
        }
        Some(Transform::Count) => json!(h.sample_count()),
        Some(_) if h.sample_count() == 0 => Value::Null,
        Some(Transform::Quantile(qs)) => match h.quantiles(qs, QuantileType::Type1) {
            Ok(v) => json!(v),
            Err(_) => Value::Null,
        },
        Some(Transform::InverseQuantile(vs)) => match h.inverse_quantiles(vs) {
            Ok(v) => json!(v),
            Err(_) => Value::Null,
        },
    }
}

async fn fetch(app: Shared, params: Params) -> Response {
    let joined = tokio::task::spawn_blocking(move || fetch_blocking(&app, &params)).await;
    joined.unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

fn fetch_blocking(app: &Shared, params: &Params) -> Response {
    let base_ms = i64::from(app.config.store.base_period_s) * 1000;
    let period_ms = match params.get("period") {
        None => base_ms,
        Some(text) => match parse_period_ms(text) {
            Ok(p) if p % base_ms == 0 => p,
            Ok(p) => {
                return bad(
                    "period",
                    format!("{p} ms is not a multiple of the base period ({base_ms} ms)"),
                )
            }
            Err(e) => return bad("period", e),
        },
    };
    let end_ms = match params.get("end") {
        None => super::now_ms(),
        Some(text) => match parse_time_ms(text) {
            Ok(t) => t,
            Err(e) => return bad("end", e),
        },
    };
    let start_ms = match params.get("start") {
        None => end_ms.saturating_sub(FETCH_SPAN_MS_DEFAULT),
        Some(text) => match parse_time_ms(text) {
            Ok(t) => t,
            Err(e) => return bad("start", e),
        },
    };
    if end_ms < start_ms {
        return bad("end", "is before start");
    }
    // Whole slices covering [start, end).
    let start_ms = start_ms - start_ms.rem_euclid(period_ms);
    let end_ms = match end_ms.rem_euclid(period_ms) {
        0 => end_ms,
        r => end_ms.saturating_add(period_ms - r),
    };
    let end_ms = end_ms.max(start_ms + period_ms);
    let slices = (end_ms as i128 - start_ms as i128) / period_ms as i128;
    if slices > SLICES_MAX as i128 {
        return bad(
            "period",
            format!("{slices} slices between start and end; at most {SLICES_MAX}"),
        );
    }
    let kind_filter = match params.get("kind").map(String::as_str) {
        None | Some("auto") | Some("") => None,
        Some("numeric") => Some(Kind::Numeric),
        Some("histogram") => Some(Kind::Histogram),
        Some("text") => Some(Kind::Text),
        Some(other) => {
            return bad(
                "kind",
                format!("`{other}`: expected auto, numeric, histogram or text"),
            )
        }
    };
    let transform = match params.get("transform") {
        None => None,
        Some(text) if text.is_empty() => None,
        Some(text) => match parse_transform(text) {
            Ok(t) => Some(t),
            Err(e) => return bad("transform", e),
        },
    };
    let limit = match limit_param(app, params) {
        Ok(limit) => limit,
        Err(response) => return response,
    };
    let (series, truncated) = match find_series(app, params, limit) {
        Ok(found) => found,
        Err(response) => return response,
    };
    let slicing = Slicing {
        start_ms,
        end_ms,
        period_ms,
    };
    let wanted: Vec<&SeriesInfo> = series
        .iter()
        .filter(|s| kind_filter.is_none_or(|k| k == s.kind))
        .collect();
    // Bounded before anything is read or allocated: the estimate of what this fetch holds
    // (the slices read and the response text) is taken from the query memory budget all
    // queries share, and held until the response is built.
    let slices = slices as u64;
    let estimate_bytes = wanted
        .iter()
        .map(|s| slices.saturating_mul(point_bytes(s.kind)))
        .fold(0u64, u64::saturating_add);
    let what = format!("{} series × {slices} slices", wanted.len());
    let _held = match app.query_budget.take(estimate_bytes, &what) {
        Ok(permit) => permit,
        Err(e) => return e.response(Shape::Json),
    };
    // Read everything under one view (one consistent snapshot), then let writers go on while
    // the response is built.
    let view = match app.store.view() {
        Ok(view) => view,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let mut read = Vec::with_capacity(wanted.len());
    for info in &wanted {
        let data = match info.kind {
            Kind::Numeric => view
                .numeric_aggregates(info.id, slicing)
                .map(SeriesData::Numeric),
            Kind::Histogram => view.histograms(info.id, slicing).map(SeriesData::Histogram),
            Kind::Text => view
                .raw_text(info.id, start_ms, end_ms)
                .map(SeriesData::Text),
        };
        match data {
            Ok(data) => read.push(data),
            Err(e) => return bad("period", e),
        }
    }
    drop(view);
    // The response is written as text slice by slice (a tree of JSON values cost ~0.75 KiB a
    // slice), and each series' slices are dropped once written.
    let head = json!({
        "start_ms": start_ms,
        "end_ms": end_ms,
        "period_ms": period_ms,
        "truncated": truncated,
    });
    let mut out = head.to_string().into_bytes();
    out.pop(); // the closing brace: the series follow
    out.extend_from_slice(b",\"series\":[");
    let slice_ts = move |i: usize| start_ms + i as i64 * period_ms;
    for (n, (info, data)) in wanted.into_iter().zip(read).enumerate() {
        if n > 0 {
            out.push(b',');
        }
        let mut entry = series_json(info).to_string().into_bytes();
        entry.pop();
        out.extend_from_slice(&entry);
        out.extend_from_slice(b",\"data\":[");
        let slice_values: Box<dyn Iterator<Item = Value> + '_> = match data {
            SeriesData::Numeric(aggs) => {
                Box::new(aggs.into_iter().enumerate().map(move |(i, agg)| match agg {
                    None => json!({ "ts_ms": slice_ts(i) }),
                    Some(a) => json!({
                        "ts_ms": slice_ts(i),
                        "count": a.count, "sum": a.sum, "min": a.min, "max": a.max,
                        "mean": a.mean(), "stddev": a.stddev(),
                        "first": a.first, "last": a.last,
                    }),
                }))
            }
            SeriesData::Histogram(hs) => {
                let transform = transform.as_ref();
                Box::new(hs.into_iter().enumerate().map(move |(i, h)| {
                    json!({
                        "ts_ms": slice_ts(i),
                        "value": histogram_json(&h, transform),
                    })
                }))
            }
            SeriesData::Text(changes) => Box::new(
                changes
                    .into_iter()
                    .map(|(ts_ms, text)| json!({ "ts_ms": ts_ms, "value": text })),
            ),
        };
        for (i, value) in slice_values.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            // Writing into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut out, &value);
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"]}");
    (
        StatusCode::OK,
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        out,
    )
        .into_response()
}

/// Bytes a fetch is estimated to hold per slice of a series of this kind: the slice as read
/// (a numeric aggregate is 80 bytes) and its response text (~170 bytes for a full numeric
/// slice); a histogram slice's bins in both, estimated for a few dozen bins; text series are
/// estimated per slice as well, though their changes are not bounded by the slices.
fn point_bytes(kind: Kind) -> u64 {
    match kind {
        Kind::Numeric | Kind::Text => 256,
        Kind::Histogram => 2048,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn rfc3339_and_seconds() {
        // 2023-11-14T22:13:20Z is 1_700_000_000 s (computed independently: date -d @1700000000).
        assert_eq!(parse_time_ms("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(
            parse_time_ms("2023-11-14T23:13:20.5+01:00"),
            Ok(1_700_000_000_500)
        );
        assert_eq!(parse_time_ms("1700000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_time_ms("1700000000.25"), Ok(1_700_000_000_250));
        assert_eq!(parse_time_ms("1970-01-01T00:00:00Z"), Ok(0));
        assert!(parse_time_ms("2023-13-01T00:00:00Z").is_err());
        assert!(parse_time_ms("yesterday").is_err());
    }

    #[test]
    fn periods() {
        assert_eq!(parse_period_ms("60"), Ok(60_000));
        assert_eq!(parse_period_ms("1m"), Ok(60_000));
        assert_eq!(parse_period_ms("500ms"), Ok(500));
        assert_eq!(parse_period_ms("2h"), Ok(7_200_000));
        assert!(parse_period_ms("0").is_err());
        assert!(parse_period_ms("1w").is_err());
    }

    #[test]
    fn transforms() {
        assert!(
            matches!(parse_transform("quantile:0.5,0.99"), Ok(Transform::Quantile(q)) if q == [0.5, 0.99])
        );
        assert!(matches!(parse_transform("count"), Ok(Transform::Count)));
        assert!(parse_transform("quantile:2").is_err());
        assert!(parse_transform("median").is_err());
    }
}
