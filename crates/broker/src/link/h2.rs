//! HTTP/2 on an established (TLS) stream, with PING keepalives, as either role.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{LINK_STREAMS_MAX, PING_INTERVAL_S, PING_TIMEOUT_S};

pub type Body = Full<Bytes>;
pub type Sender = SendRequest<Body>;

/// Becomes the HTTP/2 client on `io`; the connection runs on its own task until it fails
/// (a PING unanswered for `PING_TIMEOUT_S` ends it) or every sender is dropped.
pub async fn client<I>(io: I) -> Result<(Sender, tokio::task::JoinHandle<()>), String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(PING_INTERVAL_S))
        .keep_alive_timeout(Duration::from_secs(PING_TIMEOUT_S))
        .keep_alive_while_idle(true)
        .max_concurrent_reset_streams(LINK_STREAMS_MAX as usize)
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    let task = tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "link connection ended");
        }
    });
    Ok((sender, task))
}

/// Serves HTTP/2 on `io` with `handle` until the connection ends.
pub async fn serve<I, F, Fut>(io: I, handle: F) -> Result<(), String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let handle = handle.clone();
        async move { Ok::<_, Infallible>(handle(req).await) }
    });
    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(PING_INTERVAL_S)))
        .keep_alive_timeout(Duration::from_secs(PING_TIMEOUT_S))
        .max_concurrent_streams(LINK_STREAMS_MAX)
        .serve_connection(TokioIo::new(io), service)
        .await
        .map_err(|e| format!("link: {e}"))
}

/// Reads a body of at most `max` bytes.
pub async fn read_body(body: Incoming, max: usize) -> Result<Bytes, String> {
    Limited::new(body, max)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| format!("reading the body: {e}"))
}

/// A response with a status and a body.
pub fn respond(status: u16, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    r
}

/// A request to send on the link: `path_and_query` on the link's fixed authority.
pub fn request(
    method: hyper::Method,
    path_and_query: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<Request<Body>, String> {
    let mut builder = Request::builder().method(method).uri(format!(
        "https://{}{path_and_query}",
        crate::tls::LINK_SERVER_NAME
    ));
    for (name, value) in headers {
        builder = builder.header(*name, value.as_str());
    }
    builder
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("request: {e}"))
}

/// One request on the link: its status, headers and whole body (at most `max` bytes).
pub async fn call(
    sender: &mut Sender,
    request: Request<Body>,
    max: usize,
) -> Result<(u16, hyper::HeaderMap, Bytes), String> {
    sender
        .ready()
        .await
        .map_err(|e| format!("link closed: {e}"))?;
    let resp = sender
        .send_request(request)
        .await
        .map_err(|e| format!("link request: {e}"))?;
    let (parts, body) = resp.into_parts();
    let bytes = read_body(body, max).await?;
    Ok((parts.status.as_u16(), parts.headers, bytes))
}
