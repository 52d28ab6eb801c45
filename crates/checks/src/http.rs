//! `http` and `https`: one request (following redirects up to a bound) with every phase timed —
//! DNS, connect, TLS handshake, first byte, total — status code, body size and match, and the
//! certificate's days to expiry. Also the fetch that `json` and `prometheus` share.

use std::collections::BTreeMap;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{HeaderName, HeaderValue, HOST, LOCATION, USER_AGENT};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use crate::error::CheckError;
use crate::measure::Out;
use crate::spec::{self, excerpt, CheckSpec};
use crate::{tcp, tls};

/// Most body bytes an `http` check reads; a longer body fails the check.
pub const BODY_BYTES_MAX: usize = 8 << 20;
/// Most redirects followed (`follow_redirects` is 0 ..= this).
pub const REDIRECTS_MAX: u32 = 10;
/// Most request headers a spec sets, and the longest request body.
pub const HEADERS_MAX: usize = 64;
pub const REQUEST_BODY_BYTES_MAX: usize = 1 << 20;

const AGENT: &str = concat!("strata-checks/", env!("CARGO_PKG_VERSION"));

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    method: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    body: Option<String>,
    expected_status: Option<OneOrMany>,
    follow_redirects: Option<u32>,
    body_regex: Option<String>,
    tls_verify: Option<bool>,
    ca_file: Option<std::path::PathBuf>,
    cert_file: Option<std::path::PathBuf>,
    key_file: Option<std::path::PathBuf>,
    server_name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(u16),
    Many(Vec<u16>),
}

pub(crate) struct Config {
    fetch: Fetch,
    expected_status: Option<Vec<u16>>,
    body_regex: Option<regex::bytes::Regex>,
}

/// What to fetch and how: shared with `json` and `prometheus`.
pub(crate) struct Fetch {
    pub method: Method,
    pub uri: Uri,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
    pub redirects_max: u32,
    pub body_max: usize,
    pub tls: tls::Options,
}

pub(crate) fn config(spec: &CheckSpec, https: bool) -> Result<Config, CheckError> {
    let o: Options = spec::options(spec)?;
    let uri = url(&spec.target, Some(https))?;
    let tls = tls::Options {
        tls_verify: o.tls_verify,
        ca_file: o.ca_file,
        cert_file: o.cert_file,
        key_file: o.key_file,
        server_name: o.server_name,
    };
    tls.check()?;
    let expected_status = match o.expected_status {
        None => None,
        Some(OneOrMany::One(code)) => Some(vec![code]),
        Some(OneOrMany::Many(codes)) => Some(codes),
    };
    if let Some(codes) = &expected_status {
        if codes.is_empty() || codes.len() > 64 || codes.iter().any(|c| !(100..=599).contains(c)) {
            return Err(CheckError::field(
                "config.expected_status",
                "a status code (100 to 599) or a list of 1 to 64 of them",
            ));
        }
    }
    let redirects_max = o.follow_redirects.unwrap_or(0);
    if redirects_max > REDIRECTS_MAX {
        return Err(CheckError::field(
            "config.follow_redirects",
            format!("at most {REDIRECTS_MAX}"),
        ));
    }
    let body_regex = match &o.body_regex {
        Some(p) => Some(spec::regex("body_regex", p)?),
        None => None,
    };
    let fetch = Fetch {
        method: method(o.method.as_deref())?,
        uri,
        headers: headers(o.headers.unwrap_or_default())?,
        body: request_body(o.body)?,
        redirects_max,
        body_max: BODY_BYTES_MAX,
        tls,
    };
    Ok(Config {
        fetch,
        expected_status,
        body_regex,
    })
}

/// An absolute http(s) URL; `https` says which scheme the kind requires (`None`: either).
pub(crate) fn url(target: &str, https: Option<bool>) -> Result<Uri, CheckError> {
    let bad = |why: &str| CheckError::field("target", format!("\"{}\": {why}", excerpt(target)));
    let uri: Uri = target.parse().map_err(|_| bad("not a URL"))?;
    let scheme = uri
        .scheme_str()
        .ok_or_else(|| bad("expected an absolute http:// or https:// URL"))?;
    match (scheme, https) {
        ("http", None | Some(false)) | ("https", None | Some(true)) => {}
        (_, Some(true)) => return Err(bad("an https check needs an https:// URL")),
        (_, Some(false)) => return Err(bad("an http check needs an http:// URL")),
        (_, None) => return Err(bad("expected an http:// or https:// URL")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("the URL has no host"));
    }
    Ok(uri)
}

fn method(m: Option<&str>) -> Result<Method, CheckError> {
    let m = m.unwrap_or("GET");
    if m.is_empty() || m.len() > 32 || !m.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(CheckError::field(
            "config.method",
            "an HTTP method in capitals (GET, HEAD, POST, …)",
        ));
    }
    Method::from_bytes(m.as_bytes())
        .map_err(|_| CheckError::field("config.method", "not an HTTP method"))
}

pub(crate) fn headers(
    given: BTreeMap<String, String>,
) -> Result<Vec<(HeaderName, HeaderValue)>, CheckError> {
    if given.len() > HEADERS_MAX {
        return Err(CheckError::field(
            "config.headers",
            format!("at most {HEADERS_MAX} headers"),
        ));
    }
    given
        .into_iter()
        .map(|(name, value)| {
            let field = || format!("config.headers.{}", excerpt(&name));
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| CheckError::field(field(), "not a valid header name"))?;
            let v = HeaderValue::from_str(&value)
                .map_err(|_| CheckError::field(field(), "not a valid header value"))?;
            Ok((n, v))
        })
        .collect()
}

fn request_body(body: Option<String>) -> Result<Bytes, CheckError> {
    let body = body.unwrap_or_default();
    if body.len() > REQUEST_BODY_BYTES_MAX {
        return Err(CheckError::field(
            "config.body",
            format!("at most {REQUEST_BODY_BYTES_MAX} bytes"),
        ));
    }
    Ok(Bytes::from(body))
}

pub(crate) async fn run(c: &Config, out: &mut Out) -> Result<(), CheckError> {
    let Some(response) = fetch(&c.fetch, out).await? else {
        return Ok(());
    };
    out.numeric("code", f64::from(response.status));
    out.numeric("bytes", response.body.len() as f64);
    if c.fetch.redirects_max > 0 {
        out.numeric("redirects", f64::from(response.redirects));
    }
    let matched = c.body_regex.as_ref().map(|re| re.is_match(&response.body));
    if let Some(m) = matched {
        out.numeric("body_match", if m { 1.0 } else { 0.0 });
    }
    let code_ok = match &c.expected_status {
        Some(codes) => codes.contains(&response.status),
        None => (200..400).contains(&response.status),
    };
    if !code_ok {
        out.fail(format!("unexpected status {}", response.status));
    } else if matched == Some(false) {
        out.fail("body does not match body_regex");
    } else {
        out.ok();
    }
    Ok(())
}

/// A response read whole.
pub(crate) struct Response {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Vec<u8>,
    pub redirects: u32,
}

/// Fetches `f.uri`, following redirects, recording each hop's phases (`dns_time`,
/// `connect_time`, `tls_time`, `first_byte_time`), `cert_expiry_days` of the last TLS hop and
/// `total_time`. `Ok(None)`: the service failed and the check is marked so.
pub(crate) async fn fetch(f: &Fetch, out: &mut Out) -> Result<Option<Response>, CheckError> {
    let started = Instant::now();
    let mut uri = f.uri.clone();
    let mut method = f.method.clone();
    let mut body = f.body.clone();
    for redirects in 0..=f.redirects_max {
        let (parts, data) = match hop(f, &uri, &method, &body, out).await? {
            Ok(done) => done,
            Err(status) => {
                out.fail(status);
                return Ok(None);
            }
        };
        let code = parts.status.as_u16();
        let next = redirect_target(&uri, &parts);
        match next {
            Some(next) if redirects < f.redirects_max => {
                // 303 always, and 301/302 after a POST, continue as GET without a body (as
                // browsers and curl do); 307 and 308 repeat the request as it was.
                if code == 303 || (matches!(code, 301 | 302) && method == Method::POST) {
                    method = Method::GET;
                    body = Bytes::new();
                }
                uri = next;
            }
            _ => {
                out.seconds("total_time", started.elapsed());
                return Ok(Some(Response {
                    status: code,
                    headers: parts.headers,
                    body: data,
                    redirects,
                }));
            }
        }
    }
    // The loop returns on its last turn; this is for the compiler.
    out.fail("too many redirects");
    Ok(None)
}

/// Where a 3xx response points, resolved against the request's URL.
fn redirect_target(base: &Uri, parts: &hyper::http::response::Parts) -> Option<Uri> {
    if !matches!(parts.status.as_u16(), 301 | 302 | 303 | 307 | 308) {
        return None;
    }
    let location = parts.headers.get(LOCATION)?.to_str().ok()?;
    resolve_location(base, location)
}

fn resolve_location(base: &Uri, location: &str) -> Option<Uri> {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.parse().ok();
    }
    let scheme = base.scheme_str()?;
    let authority = base.authority()?.as_str();
    if let Some(rest) = location.strip_prefix("//") {
        return format!("{scheme}://{rest}").parse().ok();
    }
    let path = if location.starts_with('/') {
        location.to_owned()
    } else {
        let dir = base.path().rsplit_once('/').map_or("", |(d, _)| d);
        format!("{dir}/{location}")
    };
    format!("{scheme}://{authority}{path}").parse().ok()
}

type Hop = Result<(hyper::http::response::Parts, Vec<u8>), String>;

/// One request on a new connection. The outer `Err` is a spec that cannot run (TLS files).
async fn hop(
    f: &Fetch,
    uri: &Uri,
    method: &Method,
    body: &Bytes,
    out: &mut Out,
) -> Result<Hop, CheckError> {
    let https = uri.scheme_str() == Some("https");
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let request = match build_request(f, uri, method, body) {
        Ok(r) => r,
        Err(status) => return Ok(Err(status)),
    };
    let connector = match https {
        true => Some((
            tls::connector(&f.tls, &[b"http/1.1"])?,
            f.tls.name_for(host)?,
        )),
        false => None,
    };
    let tcp = match tcp::connect(host, port, out).await {
        Ok(s) => s,
        Err(status) => return Ok(Err(status)),
    };
    let Some((connector, name)) = connector else {
        return Ok(exchange(tcp, request, f.body_max, out).await);
    };
    let session = match tls::handshake(&connector, name, tcp).await {
        Ok(s) => s,
        Err(status) => return Ok(Err(status)),
    };
    out.seconds("tls_time", session.handshake);
    if let Some(days) = tls::expiry_days(&session) {
        out.numeric("cert_expiry_days", days);
    }
    Ok(exchange(session.stream, request, f.body_max, out).await)
}

fn build_request(
    f: &Fetch,
    uri: &Uri,
    method: &Method,
    body: &Bytes,
) -> Result<Request<Full<Bytes>>, String> {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut builder = Request::builder().method(method.clone()).uri(path);
    if let Some(authority) = uri.authority() {
        builder = builder.header(HOST, authority.as_str());
    }
    builder = builder.header(USER_AGENT, AGENT);
    for (name, value) in &f.headers {
        builder = builder.header(name, value);
    }
    builder
        .body(Full::new(body.clone()))
        .map_err(|e| format!("cannot build the request: {e}"))
}

/// Sends the request over HTTP/1.1 and reads the response, timing the first byte.
async fn exchange<S>(
    stream: S,
    request: Request<Full<Bytes>>,
    body_max: usize,
    out: &mut Out,
) -> Hop
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP failed: {e}"))?;
    let started = Instant::now();
    let mut first_byte: Option<Duration> = None;
    let talk = async {
        let response = sender.send_request(request).await?;
        first_byte = Some(started.elapsed());
        let (parts, mut body) = response.into_parts();
        let mut data = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Some(chunk) = frame?.data_ref() {
                if data.len() + chunk.len() > body_max {
                    return Ok(Err(format!("body larger than {body_max} bytes")));
                }
                data.extend_from_slice(chunk);
            }
        }
        Ok::<_, hyper::Error>(Ok((parts, data)))
    };
    let result = drive(conn, talk).await;
    if let Some(t) = first_byte {
        out.seconds("first_byte_time", t);
    }
    match result {
        Ok(hop) => hop,
        Err(e) => Err(hyper_reason(&e)),
    }
}

/// Runs `talk` while the connection task moves its bytes; if the connection ends first, `talk`
/// is still awaited, and fails or finishes with what was already read.
async fn drive<C, T, R>(conn: C, talk: T) -> R
where
    C: std::future::Future,
    T: std::future::Future<Output = R>,
{
    tokio::pin!(talk);
    tokio::select! {
        r = &mut talk => r,
        _ = conn => talk.await,
    }
}

fn hyper_reason(e: &hyper::Error) -> String {
    let mut text = format!("HTTP failed: {e}");
    let mut source = std::error::Error::source(e);
    // The cause chain names the socket error (reset, refused) a person needs.
    for _ in 0..4 {
        let Some(cause) = source else { break };
        text.push_str(": ");
        match cause.downcast_ref::<std::io::Error>() {
            Some(io) => text.push_str(&tls::io_reason(io)),
            None => text.push_str(&cause.to_string()),
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve() {
        let base: Uri = "http://h:1/a/b?q".parse().unwrap();
        let r = |l: &str| resolve_location(&base, l).unwrap().to_string();
        assert_eq!(r("/x"), "http://h:1/x");
        assert_eq!(r("c"), "http://h:1/a/c");
        assert_eq!(r("//o/p"), "http://o/p");
        assert_eq!(r("https://z/"), "https://z/");
    }
}
